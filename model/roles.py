"""Which heads do what: previous-token, next-token (the --no-mask cheat), first-token sink,
induction; named only on evidence.

A role is a place a head attends to from each row: t-1, t+1, position 0, or the token after the
previous occurrence of the current one. Each role can be shown only by some rows (`role_rows`):
every row but the first for t-1 and position 0, every row but the last for t+1, and for induction
only the rows whose token occurred before (on a 7-token text, one or two). A head gets a role when
its mean weight there passes the role's threshold over at least MIN_ROLE_ROWS such rows. A single
row is an anecdote, and an early causal row passes by chance: row 1 sees two positions, so a uniform
head puts 0.5 on t-1 and on position 0 there. `head_roles` (what inspect_attention.py prints) says
how many rows each role had.
"""

import torch

from model.heads import head_name
from model.induction import INDUCTION_THRESHOLD, previous_occurrence, target_rows
from model.measurements import head_statistics

# a previous-token head puts more than half of each row's weight on position t-1
PREVIOUS_TOKEN_THRESHOLD = 0.5
# a first-token sink puts more than half of each row's weight on position 0
FIRST_TOKEN_THRESHOLD = 0.5
# a next-token head puts more than half of each row's weight on position t+1: the answer
NEXT_TOKEN_THRESHOLD = 0.5
MIN_ROLE_ROWS = 8  # rows that can show a role, at the least, before a head is named for it


def role_rows(weights: torch.Tensor, idx: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """From one head's weights (B, T, T) on the tokens idx (B, T), each role's rows: the weight each
    row that can show the role puts where the role looks, flattened. previous: w[t, t-1], t >= 1;
    next: w[t, t+1], t <= T-2 (0 under the mask);
    first: w[t, 0], t >= 1 (row 0 sees only it); induction: w[t, p+1] where p < t is the latest
    earlier occurrence of token t (none without idx)."""
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
    """Mean weight on the position just before the query, t-1, over rows t >= 1, from weights (B, T,
    T) of one head. A head that copies its left neighbour (half an induction circuit) scores near 1;
    a uniform causal one the mean of 1/(t+1)."""
    return role_rows(weights)["previous"].mean().item()


def next_token_weight(weights: torch.Tensor) -> float:
    """Mean weight on the position just after the query, t+1, over rows t <= T-2, from weights (B,
    T, T) of one head.

    Under the causal mask it is exactly 0. Without the mask the token at t+1 is the target of
    position t, so a head that looks there copies the answer: the --no-mask cheat."""
    return role_rows(weights)["next"].mean().item()


def first_token_weight(weights: torch.Tensor) -> float:
    """Mean weight on position 0 over rows t >= 1 (row 0 sees only it), from weights (B, T, T) of
    one head. Trained GPTs park the attention that has nowhere useful to go on the first token (an
    "attention sink"): softmax must put it somewhere."""
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
    """head_statistics plus, per head, the mean weight on t-1, on t+1, on position 0 and (given the
    tokens idx (B, T) the weights were computed on) the induction score (0 where no row can show
    it); "rows": how many rows can show each role, "above": how many of them pass its threshold;
    "roles": those whose mean passes over at least MIN_ROLE_ROWS rows. The most focused head
    first."""
    # windows: each layer's, as head_statistics takes them
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
    """One line on a role: the heads named for it, each with its rows above the threshold, or why
    none is named.
    """
    # every head has the same rows that can show a role: they depend on the text alone
    n = rows[0]["rows"][key]
    if n < MIN_ROLE_ROWS:
        return f"{role} heads: not enough evidence, {n} row{'s' * (n != 1)} of this text can show it (at least {MIN_ROLE_ROWS}); none named"
    found = [
        f"{head_name(row['layer'], row['head'])} ({row['above'][key]} of {n} rows above {threshold})"
        for row in rows
        if role in row["roles"]
    ]
    return f"{role} heads (mean weight above {threshold} on the {n} rows that can show it): {', '.join(found) or 'none'}"


def uniform_first_token_weight(T: int, window: int = 0) -> float:
    """first_token_weight of uniform attention over what each row may see, on T positions: row t
    puts 1/(t+1) on position 0, and in a sliding window of W nothing once t >= W (position 0 is out
    of its view). What a head's weight there is measured
    against: above it, the head favours the first token; a sink puts many times it there."""
    rows = [1 / (t + 1) if not window or t < window else 0.0 for t in range(1, T)]
    return sum(rows) / len(rows)


def sink_weight(weights: torch.Tensor) -> float:
    """The mean weight a learned sink (model.sink) takes from each row of weights (B, T, T) of one
    head: 1 - the row's sum, since the sink's logit joins the softmax and is then dropped. 0 without
    a sink, up to float rounding."""
    return (1 - weights.float().sum(-1)).mean().item()
