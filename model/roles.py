"""Which heads do what: previous-token, next-token (the --no-mask cheat), first-token sink,
induction; named only on evidence.

Each role can be shown only by some rows (`role_rows`): every row but the first for t-1 and
position 0, every row but the last for t+1, and for induction only the rows whose token occurred
before. A head gets a role when its mean weight there passes the role's threshold over at least
MIN_ROLE_ROWS such rows: a single row is an anecdote, and an early causal row passes by chance (row
1 sees two positions, so a uniform head puts 0.5 on t-1 and on position 0 there).
"""

import torch

from model.heads import head_name
from model.induction import INDUCTION_THRESHOLD, previous_occurrence, target_rows
from model.measurements import head_statistics

# the mean weight on t-1, on position 0 and on t+1 (the answer) above which a head has the role
PREVIOUS_TOKEN_THRESHOLD = 0.5
FIRST_TOKEN_THRESHOLD = 0.5
NEXT_TOKEN_THRESHOLD = 0.5
MIN_ROLE_ROWS = 8


def role_rows(weights: torch.Tensor, idx: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """From one head's weights (B, T, T) on the tokens idx (B, T), the weight each row that can show
    a role puts where the role looks, flattened. previous: w[t, t-1], t >= 1; next: w[t, t+1],
    t <= T-2; first: w[t, 0], t >= 1 (row 0 sees only it); induction: w[t, p+1] where p < t is the
    latest earlier occurrence of token t (none without idx)."""
    w = weights.float()
    # (B, T)
    target = (
        previous_occurrence(idx) + 1
        if idx is not None
        else torch.zeros(w.shape[:-1], dtype=torch.long, device=w.device)
    )
    return {
        "previous": w.diagonal(offset=-1, dim1=-2, dim2=-1).flatten(),  # (B, T-1) -> (B·(T-1),)
        "next": w.diagonal(offset=1, dim1=-2, dim2=-1).flatten(),
        "first": w[..., 1:, 0].flatten(),
        "induction": target_rows(w, target),  # first occurrences have no target
    }


def previous_token_weight(weights: torch.Tensor) -> float:
    """Mean weight on t-1, from one head's weights (B, T, T). A head that copies its left neighbour
    (half an induction circuit) scores near 1; a uniform causal one the mean of 1/(t+1)."""
    return role_rows(weights)["previous"].mean().item()


def next_token_weight(weights: torch.Tensor) -> float:
    """Mean weight on t+1, exactly 0 under the causal mask. Without the mask the token at t+1 is the
    target of position t, so a head that looks there copies the answer: the --no-mask cheat."""
    return role_rows(weights)["next"].mean().item()


def first_token_weight(weights: torch.Tensor) -> float:
    """Mean weight on position 0. Trained GPTs park the attention that has nowhere useful to go on
    the first token (an "attention sink"): softmax must put it somewhere."""
    return role_rows(weights)["first"].mean().item()


ROLES = (  # role, the head_roles key it reads, the weight above which a head has it
    ("previous-token", "previous", PREVIOUS_TOKEN_THRESHOLD),
    ("next-token", "next", NEXT_TOKEN_THRESHOLD),
    ("first-token sink", "first", FIRST_TOKEN_THRESHOLD),
    ("induction", "induction", INDUCTION_THRESHOLD),
)


def head_roles(
    weights_per_layer: list[torch.Tensor],
    causal: bool,
    idx: torch.Tensor | None = None,
    windows: list[int] | None = None,
) -> list[dict]:
    """head_statistics plus, per head, each role's mean weight (induction given the tokens idx, 0
    where no row can show it); "rows": how many rows can show each role, "above": how many pass its
    threshold; "roles": those whose mean passes over at least MIN_ROLE_ROWS rows. The most focused
    head first."""
    heads = head_statistics(weights_per_layer, causal, windows)
    for head in heads:
        rows = role_rows(weights_per_layer[head["layer"]][:, head["head"]], idx)  # of (B, T, T)
        head.update(
            {key: rows[key].mean().item() if len(rows[key]) else 0.0 for _, key, _ in ROLES}
        )
        head["rows"] = {key: len(rows[key]) for _, key, _ in ROLES}
        head["above"] = {key: int((rows[key] > threshold).sum()) for _, key, threshold in ROLES}
        head["roles"] = [
            role
            for role, key, threshold in ROLES
            if head[key] > threshold and head["rows"][key] >= MIN_ROLE_ROWS
        ]
    return sorted(heads, key=lambda head: head["entropy"])


def role_line(rows: list[dict], role: str, key: str, threshold: float) -> str:
    """One line on a role: the heads named for it, or why none is named."""
    n = rows[0]["rows"][key]  # the same for every head: they depend on the text alone
    if n < MIN_ROLE_ROWS:
        return (
            f"{role} heads: not enough evidence, {n} row{'s' * (n != 1)} of this text can show it "
            f"(at least {MIN_ROLE_ROWS}); none named"
        )
    found = [
        f"{head_name(row['layer'], row['head'])} ({row['above'][key]} of {n} rows above "
        f"{threshold})"
        for row in rows
        if role in row["roles"]
    ]
    shown = ", ".join(found) or "none"
    return f"{role} heads (mean weight above {threshold} on the {n} rows that can show it): {shown}"


def uniform_first_token_weight(T: int, window: int = 0) -> float:
    """first_token_weight of uniform attention on T positions, what a head's is measured against:
    row t puts 1/(t+1) on position 0, and in a sliding window of W nothing once t >= W."""
    rows = [1 / (t + 1) if not window or t < window else 0.0 for t in range(1, T)]
    return sum(rows) / len(rows)


def sink_weight(weights: torch.Tensor) -> float:
    """The mean weight a learned sink takes from each row of one head's weights: 1 - the row's sum,
    since the sink's logit joins the softmax and is then dropped."""
    return (1 - weights.float().sum(-1)).mean().item()
