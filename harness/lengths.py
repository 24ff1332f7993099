"""Past the training length: a model's loss at contexts shorter and longer than its block_size,
position by position.

A model trains on windows of block_size tokens, so it has met positions 0 to block_size - 1 only.
`score.py --contexts 0.5,1,2,4` reads a text in windows of 0.5, 1, 2 and 4 times block_size tokens,
each context in separate windows (stride = context, harness/scoring.py's `windows`): every token
after the first is scored once, at the position it holds in its window. At 1x this is `score.py
--stride <block_size>`, the way training's val loss reads the text.

Under the causal mask a position's loss depends only on its window's tokens up to it, so a longer
context changes nothing at the positions a shorter one has: it adds positions. The losses are
therefore also told per position bucket, whose edges are the contexts (0-63, 64-127, 128-255 and
256-511 at block_size 128):
each bucket holds the positions one context adds to the one before, and every position past 1x is
one the model never trained at.

A learned position table has no row past block_size: such a model is refused any longer context
(ModelConfig.max_length); rotary positions (rope) and none take any length. Before anything is
scored, the memory of a pass is estimated from the sizes, and the time of the whole from a pass of
the model itself, timed (harness/training/budget.py: a small model scored prefix by prefix is bound
by the fixed time of each call, which counting operations misses): a pass too big for the device, or
too long to stop (a pass cannot be stopped midway), is refused in one line.
"""

import math
from collections.abc import Callable

import torch
from tqdm import tqdm

from configs import ConfigError
from data.corpus import DataError
from harness.scoring import LOGITS_PER_BATCH, token_losses
from harness.training.budget import (
    STEP_LIMIT_S,
    PassCost,
    check_memory,
    duration,
    forward_flops,
    measured_pass,
    measured_speed,
    prefix_flops,
    weight_count,
)
from model import GPT, ModelConfig


def factor_label(factor: float) -> str:
    """How a context is named, in multiples of block_size: 0.5x, 1x, 4x."""
    return f"{factor:g}x"


def context_lengths(factors: list[float], model_cfg: ModelConfig, n_tokens: int) -> list[int]:
    """The tokens per window of each factor x block_size (rounded to a whole token), or a one-line
    refusal: less than a token, past a learned table's last row, two factors on the same length, or
    a text without one whole window."""
    block_size, lengths = model_cfg.block_size, []
    for factor in factors:
        length = round(factor * block_size)
        if length < 1:
            raise ConfigError(
                f"--contexts {factor:g} x block_size {block_size} is less than one token; give at least {1 / block_size:.3g}"
            )
        if model_cfg.max_length is not None and length > model_cfg.max_length:
            raise ConfigError(
                f"--contexts {factor:g} is {length} tokens, past this model's block_size {block_size}: its positions are a "
                f"learned table, which has no row past block_size (model.positions = learned); give contexts up to "
                f"{model_cfg.max_length / block_size:g}, or score a run trained with positions rope or none"
            )
        if length > n_tokens - 1:
            raise DataError(
                f"--contexts {factor:g} is {length} tokens, and the text has {n_tokens}: not one whole window of {length} inputs "
                f"and the token after them; give shorter contexts or a longer text"
            )
        if length in lengths:
            raise ConfigError(
                f"--contexts {factor:g} is {length} tokens again, as an earlier factor is; give each length once"
            )
        lengths.append(length)
    return lengths


def buckets(lengths: list[int]) -> list[tuple[int, int]]:
    """(first, last) position of each bucket: up to the shortest context, then the positions each
    longer one adds.
    """
    edges = [0, *lengths]
    return [(first, end - 1) for first, end in zip(edges, edges[1:], strict=False)]


def windows_per_pass(model_cfg: ModelConfig, length: int, n_windows: int) -> int:
    """How many windows of `length` inputs token_losses runs through the model together (its
    LOGITS_PER_BATCH rule).
    """
    return min(n_windows, max(1, LOGITS_PER_BATCH // ((length + 1) * model_cfg.vocab_size)))


def pass_flops(model_cfg: ModelConfig, B: int, length: int) -> float:
    """Operations of one pass over B windows: one forward, or without the causal mask one per prefix
    (the honest loss).
    """
    return (
        forward_flops(model_cfg, B, length)
        if model_cfg.causal
        else prefix_flops(model_cfg, B, list(range(length)))
    )


def pass_memory_bytes(m: ModelConfig, B: int, length: int) -> float:
    """Memory one pass holds at its peak, roughly: the weights, a layer's activations (about 8
    numbers per token and channel), the readable path's (B, H, T, T) scores and weights, which live
    together while the softmax runs (with a softcap, its tanh's copy too), and the logits with
    cross-entropy's copies of them."""
    T = float(length)
    attention = (3 if m.softcap else 2) * B * m.n_head * T * T if m.attention == "manual" else 0
    return 4.0 * (weight_count(m) + 8 * B * T * m.n_embd + attention + 3 * B * T * m.vocab_size)


def contexts_cost(model: GPT, lengths: list[int], n_tokens: int) -> PassCost:
    """What the model's passes cost here, timed on a pass like the longest context's
    (budget.measured_pass).
    """
    length, speed = max(lengths), measured_speed(model.lm_head.weight.device)
    B = windows_per_pass(model.cfg, length, math.ceil((n_tokens - 1) / length))
    return measured_pass(model, B, length, peak=speed)


def check_contexts(
    model_cfg: ModelConfig, lengths: list[int], n_tokens: int, device: torch.device, cost: PassCost
) -> float:
    """Refuse in one line a context whose pass the device cannot hold, or whose pass would outlast a
    stop's patience; return the seconds the whole scoring should take at `cost` (contexts_cost):
    every call, and every operation."""
    seconds = 0.0
    for length in lengths:
        n_windows = math.ceil((n_tokens - 1) / length)
        B = windows_per_pass(model_cfg, length, n_windows)
        what = f"scoring {B} window{'s' * (B > 1)} of {length:,} tokens at once"
        check_memory(
            pass_memory_bytes(model_cfg, B, length), device, what, "give shorter --contexts"
        )
        # honest: a pass per prefix
        one = cost.seconds(
            pass_flops(model_cfg, B, length), calls=1 if model_cfg.causal else length
        )
        if one > STEP_LIMIT_S:
            raise ConfigError(
                f"{what} would take about {duration(one)} on this {device.type}, and a pass cannot be stopped midway "
                f"(attention grows with the square of the context); give shorter --contexts, or use a GPU"
            )
        seconds += math.ceil(n_windows / B) * one
    return seconds


def by_position(losses: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum, count) of the losses at each position of a window, (length,) each: token_losses returns
    the windows' targets in text order, so the loss at index i sits at position i % length of its
    window."""
    position = torch.arange(len(losses)) % length
    return torch.bincount(position, weights=losses.double(), minlength=length), torch.bincount(
        position, minlength=length
    )


def score_contexts(
    model: GPT, ids: list[int], factors: list[float], poll: Callable[[], None] | None = None
) -> dict:
    """The loss over the text at each context (factors x block_size), overall, per position bucket
    and per position.

    Returns {"block_size", "positions", "contexts": {"0.5x": {"factor", "length", "tokens", "loss",
    "buckets":
    {"0-63": {"tokens", "loss"}, ...}, "by_position": [loss at position 0, 1, ...]}, ...}}, buckets
    as `buckets` cuts them.
    """
    lengths = context_lengths(factors, model.cfg, len(ids))
    text = torch.tensor(ids, dtype=torch.long)
    out = {"block_size": model.cfg.block_size, "positions": model.cfg.positions, "contexts": {}}
    with tqdm(
        total=len(lengths) * (len(ids) - 1),
        desc="scoring",
        unit="tok",
        unit_scale=True,
        leave=False,
        disable=None,
    ) as bar:

        def between(n: int) -> None:
            if poll is not None:
                poll()
            bar.update(n)

        for factor, length in zip(factors, lengths, strict=True):
            # (N - 1,)
            losses = token_losses(
                model, text, length, not model.cfg.causal, between, context=length
            )
            sums, counts = by_position(losses, length)
            parts = {}
            for first, last in buckets(lengths):
                if first < length:
                    n = int(counts[first : last + 1].sum())
                    parts[f"{first}-{last}"] = {
                        "tokens": n,
                        "loss": sums[first : last + 1].sum().item() / n,
                    }
            out["contexts"][factor_label(factor)] = {
                "factor": factor,
                "length": length,
                "tokens": len(losses),
                "loss": losses.double().mean().item(),
                "buckets": parts,
                "by_position": (sums / counts).tolist(),
            }
    return out
