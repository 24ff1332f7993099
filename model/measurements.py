"""The lesson's measurements: what shows a GPT break, computed from the model alone.

Teacher-forced loss scores every position of a block in one pass, and a model trained without the
mask reads the answer from the next position and looks brilliant. `honest_loss` gives the model only
the tokens before each target, as generation does, so the cheating shows as a gap: `leak`.
`order_use` is how much the model reads word order. The rest are pure functions of attention
weights (..., T, S) and their summary per head and per model, the numbers TensorBoard plots.
"""

import math
from collections.abc import Callable

import torch

from model.attention import causal_mask
from model.gpt import GPT, lm_loss
from model.heads import head_name

Batches = list[tuple[torch.Tensor, torch.Tensor, list[int]]]  # (x, y, positions scored) per batch
# called before each prefix pass: the caller's progress, and its chance to stop
Between = Callable[[], None] | None

# The statistics leave out rows whose query sees one position (a causal matrix's first row).


def visible_counts(T: int, S: int, causal: bool, device=None, window: int = 0) -> torch.Tensor:
    """(T,) how many positions each query may attend to: t + 1 + (S - T) when causal, else S."""
    mask = causal_mask(T, S, device, window, causal)  # (T, S), or None: every key in view
    return torch.full((T,), S, device=device) if mask is None else mask.sum(-1)


def normalized_entropy(weights: torch.Tensor, causal: bool, window: int = 0) -> torch.Tensor:
    """Entropy of each row over the log of its visible count, (..., T'): 1 is uniform, 0 one-hot.
    (With a sink, what the sink takes is missing from the sum.)"""
    T, S = weights.shape[-2:]
    visible = visible_counts(T, S, causal, weights.device, window)
    keep = visible > 1
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1)  # (..., T); 0 * log 0 counts as 0
    return entropy[..., keep] / visible[keep].log()


def row_max(weights: torch.Tensor, causal: bool, window: int = 0) -> torch.Tensor:
    """The largest weight in each row, (..., T')."""
    T, S = weights.shape[-2:]
    keep = visible_counts(T, S, causal, weights.device, window) > 1
    return weights.amax(-1)[..., keep]


SATURATED = 0.99  # a row whose largest weight exceeds this is saturated


def saturated_fraction(
    weights: torch.Tensor, causal: bool, threshold: float = SATURATED, window: int = 0
) -> torch.Tensor:
    """Share of rows whose largest weight exceeds `threshold`."""
    return (row_max(weights, causal, window) > threshold).float().mean()


def future_mass(weights: torch.Tensor) -> torch.Tensor:
    """Mean attention mass that a query puts on later positions: exactly 0 under the causal mask."""
    T, S = weights.shape[-2:]
    return weights.triu(diagonal=S - T + 1).sum(-1).mean()


def honest_positions(T: int, n: int, generator: torch.Generator) -> list[int]:
    """n positions spread over 0..T-1: one drawn at random from each of n equal strata."""
    n = min(n, T)
    edges = [round(i * T / n) for i in range(n + 1)]
    return [
        lo + int(torch.randint(hi - lo, (1,), generator=generator))
        for lo, hi in zip(edges[:-1], edges[1:], strict=True)
    ]


@torch.no_grad()
def prefix_logits(
    model: GPT, x: torch.Tensor, positions: list[int], between: Between = None
) -> torch.Tensor:
    """The logits (B, P, V) at each of `positions` t of x (B, T), from a pass over the prefix
    x[:, :t+1] alone, as in generation; `between` is called before each pass."""
    out = []
    for t in positions:
        if between is not None:
            between()
        out.append(model.lm_head(model.hidden(x[:, : t + 1])[:, -1]))  # (B, V)
    return torch.stack(out, dim=1)  # P x (B, V) -> (B, P, V)


@torch.no_grad()
def honest_loss(
    model: GPT, x: torch.Tensor, y: torch.Tensor, positions: list[int], between: Between = None
) -> tuple[float, float]:
    """Mean loss at `positions` of x, y (B, T): (honest, each position scored from a pass over its
    prefix alone; teacher-forced, from one pass). A causal model's two are equal by construction, so
    its honest loss is taken from the one pass."""
    # logits (B, P, V)
    forced = lm_loss(model.lm_head(model.hidden(x)[:, positions]), y[:, positions]).item()
    if model.cfg.causal:
        return forced, forced
    return lm_loss(prefix_logits(model, x, positions, between), y[:, positions]).item(), forced


@torch.no_grad()
def leak(model: GPT, batches: Batches, between: Between = None) -> dict[str, float]:
    """loss/val_honest, loss/val_forced and loss/leak_gap, their difference: what the model reads
    from the future, exactly 0 for a causal model."""
    return leak_of([honest_loss(model, x, y, positions, between) for x, y, positions in batches])


def leak_of(pairs: list[tuple[float, float]]) -> dict[str, float]:
    honest = sum(h for h, _ in pairs) / len(pairs)
    forced = sum(f for _, f in pairs) / len(pairs)
    return {"loss/val_honest": honest, "loss/val_forced": forced, "loss/leak_gap": honest - forced}


SHUFFLED_TOKENS = 8  # order_use's k


@torch.no_grad()
def order_use(
    model: GPT,
    batches: Batches,
    k: int = SHUFFLED_TOKENS,
    seed: int = 0,
    between: Between = None,
    unshuffled: list[float] | None = None,
) -> dict[str, float]:
    """The rise of the honest loss (nats per token) when the k tokens just before each scored
    position t are shuffled, each row in its own order. Scored on prefixes like honest_loss, so a
    model without the mask cannot cheat here; a bag of tokens (no mask, no positions) scores 0.
    `unshuffled`: each batch's honest loss, if the caller has it already.
    """
    gen = torch.Generator().manual_seed(seed)
    rises = []
    for i, (x, y, positions) in enumerate(batches):
        logits = []
        for t in positions:
            if between:
                between()
            lo = max(0, t - k)
            # (B, t - lo): a shuffle per row
            order = lo + torch.rand(x.shape[0], t - lo, generator=gen).argsort(dim=-1).to(x.device)
            # (B, t + 1)
            prefix = torch.cat([x[:, :lo], x.gather(1, order), x[:, t : t + 1]], dim=1)
            logits.append(model.lm_head(model.hidden(prefix)[:, -1]))  # (B, V)
        shuffled = lm_loss(torch.stack(logits, dim=1), y[:, positions])  # (B, P, V)
        honest = (
            unshuffled[i]
            if unshuffled is not None
            else honest_loss(model, x, y, positions, between)[0]
        )
        rises.append(shuffled.item() - honest)
    return {"loss/order_use": sum(rises) / len(rises)}


def head_statistics(
    weights_per_layer: list[torch.Tensor], causal: bool, windows: list[int] | None = None
) -> list[dict]:
    """Per layer and head, from weights (B, H, T, T) per layer: mean normalised entropy, mean row
    maximum, share of saturated rows and mean mass on the future; windows: each layer's, or 0."""
    rows = []
    for layer, weights in enumerate(weights_per_layer):
        window = windows[layer] if windows else 0
        for head in range(weights.shape[1]):
            w = weights[:, head].float()  # (B, T, T)
            rows.append(
                {
                    "layer": layer,
                    "head": head,
                    "entropy": normalized_entropy(w, causal, window).mean().item(),
                    "max_weight": row_max(w, causal, window).mean().item(),
                    "saturated": saturated_fraction(w, causal, window=window).item(),
                    "future_mass": future_mass(w).item(),
                }
            )
    return rows


SUMMARY_TAGS = (
    ("entropy", "entropy"),
    ("max_weight", "max_weight"),
    ("saturated_frac", "saturated"),
    ("future_mass", "future_mass"),
)


@torch.no_grad()
def attention_summary(model: GPT, idx: torch.Tensor, probe: list | None = None) -> dict[str, float]:
    """The readable path's attention on idx (B, T), as TensorBoard tags: head_statistics' means,
    the std and largest of the scores a query sees, qk_norms, and each head's entropy. `probe`:
    model.attention_probe(idx), if the caller has it already."""
    probe = model.attention_probe(idx) if probe is None else probe
    windows = [block.attn.window for block in model.blocks]
    heads = head_statistics([weights for _, weights in probe], model.cfg.causal, windows)
    means = {
        f"attn/{tag}": sum(row[key] for row in heads) / len(heads) for tag, key in SUMMARY_TAGS
    }
    # per layer, the scores of the positions a query sees
    visible = [scores[scores.isfinite()].float() for scores, _ in probe]
    score_std = sum(scores.std().item() for scores in visible) / len(visible)
    score_max = {
        f"attn/score_max/L{layer}": scores.max().item() for layer, scores in enumerate(visible)
    }
    score_max["attn/score_max"] = max(score_max.values())
    per_head = {
        f"heads/entropy/{head_name(row['layer'], row['head'])}": row["entropy"] for row in heads
    }
    return {**means, "attn/score_std": score_std, **score_max, **qk_norms(model, idx), **per_head}


@torch.no_grad()
def qk_norms(model: GPT, idx: torch.Tensor) -> dict[str, float]:
    """attn/q_norm, attn/k_norm: the mean norm of a head's query and key vectors on idx (B, T), as
    projected, before QK-norm rescales them. A score is at most |q| |k| x scale."""
    x, norms = model.embed(idx), []
    for block in model.blocks:
        q, k, _ = block.attn.split_heads(block.ln1(x), raw=True)  # each (B, H, T, D)
        norms.append((q.float().norm(dim=-1).mean().item(), k.float().norm(dim=-1).mean().item()))
        x = block(x)
    return {
        "attn/q_norm": sum(q for q, _ in norms) / len(norms),
        "attn/k_norm": sum(k for _, k in norms) / len(norms),
    }


def bits_per_byte(loss: float, n_tokens: int, n_bytes: int) -> float:
    """A mean loss in nats per token as bits per byte of decoded text."""
    return loss * n_tokens / (n_bytes * math.log(2))
