"""The lesson's measurements: what shows a GPT break, computed from the model alone.

The loss. Teacher-forced loss scores every position of a block in one pass. A causal model cannot
tell the difference, but a model trained without the mask reads the answer from the next position
and looks brilliant. `honest_loss` gives the model only the tokens before each target, as generation
does, so the cheating shows as a gap between the two: `leak`. `order_use` asks how much the model
reads
word order: the rise of that honest loss when the last few tokens before a target are shuffled.

The attention. Pure functions of attention weights (..., T, S): row entropy, row maximum,
saturation, mass on the future; then, per head, `head_statistics` (model/roles.py names heads' roles
from them), and `attention_summary` (with `qk_norms`, the query and key norms that bound the
scores), the numbers TensorBoard plots. What a saturated softmax lets through to the scores and the
query/key weights is model/gradients.py's; the induction heads are model/induction.py's.

Every function here takes the model or its outputs and returns numbers: training, evaluation, the
scripts and the notebook all call these, and none of them recomputes one."""

import math
from collections.abc import Callable

import torch

from model.attention import causal_mask
from model.gpt import GPT, lm_loss
from model.heads import head_name

Batches = list[tuple[torch.Tensor, torch.Tensor, list[int]]]  # (x, y, positions scored) per batch
# called before each prefix pass: the caller's progress, and its chance to stop
Between = Callable[[], None] | None

# Statistics of attention weights (..., T, S), as pure functions. Rows whose query may see only
# one position (the first row of a causal matrix) carry no information and are left out.


def visible_counts(T: int, S: int, causal: bool, device=None, window: int = 0) -> torch.Tensor:
    """(T,) how many positions each query may attend to: t + 1 + (S - T) when causal, else S; a
    window caps it.
    """
    mask = causal_mask(T, S, device, window, causal)  # (T, S), or None: every key in view
    return torch.full((T,), S, device=device) if mask is None else mask.sum(-1)


def normalized_entropy(weights: torch.Tensor, causal: bool, window: int = 0) -> torch.Tensor:
    """Entropy of each row divided by the log of its visible count: 1 is uniform, 0 is one-hot.
    (With a sink, over the weights on tokens as they are: what the sink takes is missing from the
    sum.) Returns (..., T'), where T' counts the rows that may see at least two positions."""
    T, S = weights.shape[-2:]
    visible = visible_counts(T, S, causal, weights.device, window)
    keep = visible > 1
    entropy = -(weights * weights.clamp_min(1e-30).log()).sum(-1)  # (..., T); 0 * log 0 counts as 0
    return entropy[..., keep] / visible[keep].log()


def row_max(weights: torch.Tensor, causal: bool, window: int = 0) -> torch.Tensor:
    """The largest weight in each row with at least two visible positions: (..., T')."""
    T, S = weights.shape[-2:]
    keep = visible_counts(T, S, causal, weights.device, window) > 1
    return weights.amax(-1)[..., keep]


SATURATED = 0.99  # a row whose largest weight exceeds this is saturated


def saturated_fraction(
    weights: torch.Tensor, causal: bool, threshold: float = SATURATED, window: int = 0
) -> torch.Tensor:
    """Share of rows (with at least two visible positions) whose largest weight exceeds `threshold`."""
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
    """The logits (B, P, V) at each of `positions` t of x (B, T), from a pass over the prefix x[:,
    :t+1] alone: what the model predicts there while it cannot see what follows, as in generation.
    One pass per position, `between` before each."""
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
    """Mean loss at `positions`, (honest, teacher-forced), on inputs x and targets y (B, T).

    honest: for each position t, the model runs on the prefix x[:, :t+1] alone and its last
    logits are scored against y[:, t]. teacher-forced: one pass over the whole of x, scored at
    the same positions. Their gap measures future leakage.

    A causal model's position t sees x[:, :t+1] and nothing else in either pass, so its honest loss
    is its teacher-forced one by construction: it is taken from the one pass, not from a pass per
    prefix, which would cost a block's worth of passes for the same number (tests prove the two
    agree).
    """
    # logits (B, P, V)
    forced = lm_loss(model.lm_head(model.hidden(x)[:, positions]), y[:, positions]).item()
    if model.cfg.causal:
        return forced, forced
    return lm_loss(prefix_logits(model, x, positions, between), y[:, positions]).item(), forced


@torch.no_grad()
def leak(model: GPT, batches: Batches, between: Between = None) -> dict[str, float]:
    """The honest and the teacher-forced loss over (x, y, positions) batches, and their gap: what
    the model reads from the future.

    loss/val_honest and loss/val_forced are means over the batches of honest_loss's pair;
    loss/leak_gap is honest minus forced, exactly 0 for a causal model.
    """
    return leak_of([honest_loss(model, x, y, positions, between) for x, y, positions in batches])


def leak_of(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """leak's figures from honest_loss's (honest, teacher-forced) pair of each batch."""
    honest = sum(h for h, _ in pairs) / len(pairs)
    forced = sum(f for _, f in pairs) / len(pairs)  # the same positions, seeing the whole block
    return {"loss/val_honest": honest, "loss/val_forced": forced, "loss/leak_gap": honest - forced}


SHUFFLED_TOKENS = 8  # order use: how many tokens before each scored position are shuffled


@torch.no_grad()
def order_use(
    model: GPT,
    batches: Batches,
    k: int = SHUFFLED_TOKENS,
    seed: int = 0,
    between: Between = None,
    unshuffled: list[float] | None = None,
) -> dict[str, float]:
    """How much the model reads word order: the rise of the honest loss when the k tokens just
    before each scored position t are shuffled (x[:, t-k:t], each row its own order; the token at t
    and the ones further back stay).

    Scored like honest_loss, each position on its prefix alone, so a model without the mask cannot
    cheat here. A model without positions and without the mask sees a bag of tokens and scores 0
    (nats per token). `between` is called before each shuffled pass. `unshuffled` is each batch's
    honest loss if the caller has it already (from leak's passes), which spares a model without the
    mask its prefix passes a second time.
    """
    gen = torch.Generator().manual_seed(seed)
    rises = []
    for i, (x, y, positions) in enumerate(batches):
        logits = []
        for t in positions:
            if between:
                between()  # a stop asked for ends the measurement here
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
    maximum, share of saturated rows (maximum above 0.99) and mean attention mass on the future.
    windows: each layer's sliding window (0: none), which sets how many positions a row may see."""
    rows = []
    for layer, weights in enumerate(weights_per_layer):
        window = windows[layer] if windows else 0
        for head in range(weights.shape[1]):
            w = weights[:, head].float()  # (B, T, T)
            entropy, maximum = (
                normalized_entropy(w, causal, window).mean().item(),
                row_max(w, causal, window).mean().item(),
            )
            stats = {
                "entropy": entropy,
                "max_weight": maximum,
                "saturated": saturated_fraction(w, causal, window=window).item(),
            }
            rows.append(
                {"layer": layer, "head": head, **stats, "future_mass": future_mass(w).item()}
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
    """Statistics of the readable path's attention on idx (B, T), as TensorBoard tags. attn/entropy:
    mean normalised row entropy (1 = uniform over what a query may see, 0 = one-hot);
    attn/max_weight: mean row maximum; attn/saturated_frac:
    share of rows whose maximum exceeds 0.99; attn/future_mass: mean weight on later positions (0
    under the causal mask); attn/score_std: std of the pre-softmax scores at visible positions,
    averaged over layers; attn/score_max/L{layer}: the largest of them in each layer, attn/score_max
    in any; qk_norms; heads/entropy/L{layer}H{head}: each head's entropy, in a TensorBoard section
    of its own. Every head has as many rows, so means over heads are means over all rows. `probe`:
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
    score_max["attn/score_max"] = max(score_max.values())  # the largest in any layer
    # a section of their own
    per_head = {
        f"heads/entropy/{head_name(row['layer'], row['head'])}": row["entropy"] for row in heads
    }
    return {**means, "attn/score_std": score_std, **score_max, **qk_norms(model, idx), **per_head}


@torch.no_grad()
def qk_norms(model: GPT, idx: torch.Tensor) -> dict[str, float]:
    """attn/q_norm, attn/k_norm: the mean L2 norm of a head's query and key vectors on idx (B, T),
    over layers, heads and positions, as projected, before QK-norm rescales them. Without QK-norm a
    score is at most |q| |k| x scale: it grows with their product."""
    x, norms = model.embed(idx), []
    for block in model.blocks:
        q, k, _ = block.attn.split_heads(block.ln1(x), raw=True)  # each (B, H, T, D)
        # over B, H and T
        norms.append((q.float().norm(dim=-1).mean().item(), k.float().norm(dim=-1).mean().item()))
        x = block(x)
    return {
        "attn/q_norm": sum(q for q, _ in norms) / len(norms),
        "attn/k_norm": sum(k for _, k in norms) / len(norms),
    }


def bits_per_byte(loss: float, n_tokens: int, n_bytes: int) -> float:
    """Convert a mean loss in nats per token to bits per byte of decoded text (bits per character
    for ASCII).
    """
    return loss * n_tokens / (n_bytes * math.log(2))
