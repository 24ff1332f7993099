"""Induction heads (Olsson et al. 2022), measured from the model alone: what attention learns beyond
the breaks.

Where a token appeared before, an induction head attends to the position just after that earlier
occurrence and copies what came there: "A B ... A" -> "B". It takes two layers: a previous-token
head writes into each position which token preceded it, and the induction head's query finds
"preceded by me". `induction_summary` scores every head, and how much the loss drops where the
context gives the next token away (the in-context learning score).
"""

import math

import torch

from model.gpt import GPT, lm_loss
from model.heads import head_name

# an induction head puts more than 0.3 of each repeated row's weight on its target
INDUCTION_THRESHOLD = 0.3
# The shortest context in which the score tells a head from chance: attention spread evenly over T
# positions puts 1/T on any target, so only where 1/T is at most half the threshold is crossing it a
# finding (a block of 2 scored 0.5 at initialisation: a "phase change" at step 0).
SHORTEST_CONTEXT = math.ceil(2 / INDUCTION_THRESHOLD)


def previous_occurrence(idx: torch.Tensor) -> torch.Tensor:
    """(B, T) the latest position p < t where idx[b, p] == idx[b, t], or -1 where there is none."""
    positions = torch.arange(idx.shape[-1], device=idx.device)
    # (B, T, T): earlier, same token
    same = (idx[..., :, None] == idx[..., None, :]) & (positions[None, :] < positions[:, None])
    return torch.where(same, positions, -1).amax(-1)  # (B, T, T) -> (B, T)


def induction_score(weights: torch.Tensor, idx: torch.Tensor) -> float:
    """Mean weight from each repeated position t to the position just after the previous
    occurrence of token t, from one head's weights (B, T, T) on idx (B, T): 1 for a head that
    attends only there, about 0 for a previous-token head, 0 when no token repeats."""
    return score_at(weights, previous_occurrence(idx) + 1)


def score_at(weights: torch.Tensor, target: torch.Tensor) -> float:
    """induction_score given the targets (B, T), computed once for all heads."""
    rows = target_rows(weights, target)
    return rows.mean().item() if len(rows) else 0.0


def target_rows(weights: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(rows,) the weight each repeated row puts on its target (B, T); target 0 marks no target."""
    # (B, T): w[b, t, target[b, t]]
    on_target = weights.float().gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return on_target[target > 0]


@torch.no_grad()
def induction_summary(
    model: GPT, x: torch.Tensor, y: torch.Tensor, layers: list[torch.Tensor] | None = None
) -> dict[str, float]:
    """On x, y (B, T): every head's induction score and induction/max; loss/repeated where copying
    is right (the token occurred before and its target followed it there), loss/first at first
    occurrences (nan if none), and icl/score, repeated minus first: below 0 once the model reads
    its context. `layers`: the attention weights on x, if the caller has them already."""
    layers = model.attention_weights(x) if layers is None else layers
    previous = previous_occurrence(x)  # (B, T)
    scores = {
        f"induction/{head_name(layer, head)}": score_at(w[:, head], previous + 1)
        for layer, w in enumerate(layers)
        for head in range(w.shape[1])
    }
    # (B, T): the token after the earlier occurrence (x[:, 0] where there is none)
    after = x.gather(-1, previous + 1)
    losses = lm_loss(model(x)[0], y, reduction="none")  # (B, T)
    repeated, first = (
        losses[(previous >= 0) & (after == y)].mean().item(),
        losses[previous < 0].mean().item(),
    )
    return {
        **scores,
        "induction/max": max(scores.values()),
        "loss/repeated": repeated,
        "loss/first": first,
        "icl/score": repeated - first,
    }
