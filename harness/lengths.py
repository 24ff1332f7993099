"""Past the training length: `score.py --contexts 0.5,1,2,4` reads a text in windows of those
multiples of block_size, and tells the losses per bucket of positions cut at the contexts."""

import math
from collections.abc import Callable

import torch

from configs import ConfigError
from data.corpus import DataError
from harness.scoring import progress, token_losses, windows_per_pass
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


def context_lengths(factors: list[float], model_cfg: ModelConfig, n_tokens: int) -> list[int]:
    block_size, rows, lengths = model_cfg.block_size, model_cfg.max_length, []
    for factor in factors:
        length = round(factor * block_size)
        said = f"--contexts {factor:g} is {length} tokens"
        if length < 1:
            raise ConfigError(
                f"{said} of block_size {block_size}; give at least {1 / block_size:.3g}"
            )
        if rows is not None and length > rows:
            raise ConfigError(
                f"{said}, past the learned table's {rows} positions; give contexts up to "
                f"{rows / block_size:g}, or score a run with positions rope or none"
            )
        if length > n_tokens - 1:
            raise DataError(
                f"{said}, and the text has {n_tokens}: no window and its next token; "
                "give shorter contexts or a longer text"
            )
        if length in lengths:
            raise ConfigError(f"{said} again; give each length once")
        lengths.append(length)
    return lengths


def buckets(lengths: list[int]) -> list[tuple[int, int]]:
    """(first, last) position of each bucket: up to the shortest context, then what each adds."""
    edges = [0, *lengths]
    return [(first, end - 1) for first, end in zip(edges, edges[1:], strict=False)]


def pass_memory_bytes(m: ModelConfig, B: int, length: int) -> float:
    """Roughly: weights, a layer's activations, the manual path's (B, H, T, T) scores and weights,
    the logits and cross-entropy's copies."""
    T = float(length)
    attention = (3 if m.softcap else 2) * B * m.n_head * T * T if m.attention == "manual" else 0
    return 4.0 * (weight_count(m) + 8 * B * T * m.n_embd + attention + 3 * B * T * m.vocab_size)


def contexts_cost(model: GPT, lengths: list[int], n_tokens: int) -> PassCost:
    length, speed = max(lengths), measured_speed(model.lm_head.weight.device)
    B = windows_per_pass(model.cfg, length, math.ceil((n_tokens - 1) / length))
    return measured_pass(model, B, length, peak=speed)


def check_contexts(
    model_cfg: ModelConfig, lengths: list[int], n_tokens: int, device: torch.device, cost: PassCost
) -> float:
    """The seconds scoring should take; refuses a pass the device cannot hold or that would outlast
    a stop's patience."""
    seconds = 0.0
    for length in lengths:
        n_windows = math.ceil((n_tokens - 1) / length)
        B = windows_per_pass(model_cfg, length, n_windows)
        what = f"scoring {B} window{'s' * (B > 1)} of {length:,} tokens at once"
        check_memory(
            pass_memory_bytes(model_cfg, B, length), device, what, "give shorter --contexts"
        )
        if model_cfg.causal:  # one forward, or without the mask one per prefix
            one = cost.seconds(forward_flops(model_cfg, B, length))
        else:
            one = cost.seconds(prefix_flops(model_cfg, B, list(range(length))), calls=length)
        if one > STEP_LIMIT_S:
            raise ConfigError(
                f"{what} would take about {duration(one)} on this {device.type}, and a pass "
                "cannot be stopped midway; give shorter --contexts, or use a GPU"
            )
        seconds += math.ceil(n_windows / B) * one
    return seconds


def score_contexts(
    model: GPT, ids: list[int], factors: list[float], poll: Callable[[], None] | None = None
) -> dict:
    lengths = context_lengths(factors, model.cfg, len(ids))
    text = torch.tensor(ids, dtype=torch.long)
    out = {"block_size": model.cfg.block_size, "positions": model.cfg.positions, "contexts": {}}
    honest = not model.cfg.causal
    with progress(len(lengths) * (len(ids) - 1), poll) as between:
        for factor, length in zip(factors, lengths, strict=True):
            losses = token_losses(model, text, length, honest, between, context=length).double()
            # windows in text order put losses[i] at position i % length of its window
            position = torch.arange(len(losses)) % length
            sums = torch.bincount(position, weights=losses, minlength=length)
            counts = torch.bincount(position, minlength=length)
            parts = {}
            for first, last in buckets(lengths):
                if first < length:
                    part = slice(first, last + 1)
                    n = int(counts[part].sum())
                    parts[f"{first}-{last}"] = {"tokens": n, "loss": sums[part].sum().item() / n}
            out["contexts"][f"{factor:g}x"] = {
                "factor": factor,
                "length": length,
                "tokens": len(losses),
                "loss": losses.mean().item(),
                "buckets": parts,
                "by_position": (sums / counts).tolist(),
            }
    return out


def contexts_table(result: dict, lengths: list[int], header: str, model_cfg: ModelConfig) -> str:
    names = [f"{first}-{last}" for first, last in buckets(lengths)]
    lines = [
        f"{header}: separate windows of each context; trained at {model_cfg.block_size} tokens, "
        f"positions {model_cfg.positions}",
        "# loss in nats per token: over all of each context's windows, "
        "then at the positions of a window that each column names",
        f"{'context':>8} {'tokens':>7} {'scored':>9} {'loss':>7} |"
        + "".join(f"{n:>10}" for n in names),
    ]
    for label, c in result["contexts"].items():
        cells = "".join(
            f"{c['buckets'][n]['loss']:10.4f}" if n in c["buckets"] else " " * 10 for n in names
        )
        row = f"{label:>8} {c['length']:>7} {c['tokens']:>9,} {c['loss']:7.4f}"
        lines.append(f"{row} |{cells}".rstrip())
    return "\n".join(lines)
