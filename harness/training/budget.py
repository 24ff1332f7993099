"""What a run costs, said before it starts: the compute of a training step and of an evaluation, the memory of a
step, and this device's speed. A run whose step could not be stopped in reasonable time, or would not fit
in memory, is refused in one line; a first evaluation minutes away gets a warning naming the flag that shortens it.

Costs are counted in floating-point operations (a multiply-add is two), from the model's sizes: a
forward pass over B x T tokens costs 2 x B x T x (12 L C^2 + V C) for the matrices and 4 L B T^2 C
for attention (scores, then the weighted sum of values; half that under the causal mask, whose masked half the fused
kernels skip); a training step, forward and backward, about
three forward passes. Seconds are these counts over the speed of a square matrix product timed here,
so they are estimates, good to a small factor. docs/experiment.md has the figures they were checked against.
"""

import dataclasses
import os
import time

import torch

from configs import Config, ConfigError
from model import ModelConfig

HONEST_BUDGET_STEPS = 8  # a no-mask model's honest loss (a pass per prefix) costs at most this many training steps of compute
STEP_LIMIT_S = 120  # a stop waits for the step under way: a run whose step would take longer is refused
EVAL_WARNING_S = 60  # a first evaluation estimated longer than this is announced before training, with the flag that shortens it


def forward_flops(cfg: ModelConfig, B: int, T: int) -> float:
    """Operations of one forward pass over (B, T) tokens: the blocks' matrices, the output layer, attention."""
    C, L = cfg.n_embd, cfg.n_layer
    attention = (2.0 if cfg.causal else 4.0) * L * B * T * T * C  # fused kernels skip the masked half
    matrices = (4 + 8 * cfg.mlp) * L * C * C  # query, key, value and output: 4 C^2; the MLP's two: 8 C^2
    return 2.0 * B * T * (matrices + cfg.vocab_size * C) + attention


def flops_per_token(cfg: ModelConfig) -> float:
    """Model FLOPs of training on one token, forward and backward, as MFU counts them: 6N + 12 L T C.

    N is the weights that multiply (the blocks' matrices, 12 L C^2, 4 L C^2 without the MLP, and the output layer, V C: the embedding lookups,
    biases and LayerNorms multiply no matrix), each costing 2 operations a token forward and 4 backward. 12 L T C is
    attention's scores and weighted sum over the whole (T, T) square, as PaLM (its appendix B) and nanoGPT count it, so
    that an MFU here compares with theirs; forward_flops, for the time estimates, leaves out the masked half the kernels skip.
    """
    return 3 * forward_flops(dataclasses.replace(cfg, causal=False), 1, cfg.block_size) / cfg.block_size


def step_flops(cfg: Config) -> float:
    """Operations of one training step of one process: forward and backward over its micro-batches."""
    return 3 * forward_flops(cfg.model, cfg.train.batch_size * cfg.train.grad_accum_steps, cfg.model.block_size)


def prefix_flops(cfg: ModelConfig, B: int, positions: list[int]) -> float:
    """Operations of the honest loss's passes over the prefixes x[:, :t+1] for t in positions."""
    return sum(forward_flops(cfg, B, t + 1) for t in positions)


def honest_flops(cfg: Config, positions: list[list[int]]) -> float:
    """Operations of one pass over each scored position's prefix, batch by batch: the honest loss's without the mask,
    the order use's shuffled ones in every run."""
    return sum(prefix_flops(cfg.model, cfg.train.batch_size, p) for p in positions)


def cap_prefix_work(positions: list[list[int]], cfg: Config) -> list[list[int]]:
    """The honest positions per batch, cut until their prefix passes cost at most HONEST_BUDGET_STEPS training steps.

    Fewer batches first, then the positions of the one left drawn closer to the start (shorter prefixes).
    The presets stay well inside the budget: at most about six steps' worth, with every position at a stratum's end.
    """
    budget = HONEST_BUDGET_STEPS * step_flops(cfg)
    while len(positions) > 1 and honest_flops(cfg, positions) > budget:
        positions = positions[:-1]
    span = cfg.model.block_size
    while positions and span > 1 and honest_flops(cfg, positions) > budget:
        span //= 2
        positions = [sorted({t * span // cfg.model.block_size for t in p}) for p in positions]
    return positions


def step_memory_bytes(cfg: Config) -> float:
    """Memory one training step holds at its peak, roughly: weights with their gradients and optimizer moments,
    the activations kept for the backward pass (about 20 numbers per token, layer and channel) and the logits
    with their gradient; the (B, H, T, T) attention weights too on the readable path, which keeps them."""
    m, B, T = cfg.model, cfg.train.batch_size, cfg.model.block_size
    params = 12 * m.n_layer * m.n_embd**2 + m.vocab_size * m.n_embd + T * m.n_embd
    activations = B * T * (20 * m.n_layer * m.n_embd + 3 * m.vocab_size)
    weights = 3 * m.n_layer * B * m.n_head * T * T if m.attention == "manual" else 0
    return 4.0 * (4 * params + activations + weights)  # float32: 4 bytes a number


def device_memory_bytes(device: torch.device) -> float | None:
    """The memory the device has: the GPU's own, or the machine's RAM for a CPU (None where it cannot be read)."""
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[1])
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows), or the names are unknown
        return None


def sync(device: torch.device) -> None:
    """Wait until the device has run what was queued on it (a CPU runs it at once)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed(fn, device: torch.device) -> tuple[float, object]:
    """Run fn() once; return (seconds, its result), waiting for the device at both ends."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def measured_speed(device: torch.device, n: int = 512, repeats: int = 4) -> float:
    """Operations per second of an (n, n) @ (n, n) float32 product on the device, timed after one warm-up."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    seconds, _ = timed(lambda: [a @ b for _ in range(repeats)], device)
    return repeats * 2.0 * n**3 / max(seconds, 1e-9)


def duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} minutes" if seconds < 7200 else f"{seconds / 3600:.1f} hours"


def check_affordable(cfg: Config, device: torch.device) -> float:
    """Refuse in one line a run this device cannot hold in memory, or whose every step would outlast a stop's patience;
    return the device's measured speed (operations per second), for the estimates said before training."""
    speed = measured_speed(device)
    need, have = step_memory_bytes(cfg), device_memory_bytes(device)
    if have is not None and need > have:
        raise ConfigError(
            f"a training step at block_size {cfg.model.block_size} and batch_size {cfg.train.batch_size} needs about "
            f"{need / 2**30:.0f} GiB, and this {device.type} has {have / 2**30:.0f} GiB; lower --model.block_size or --train.batch_size"
        )
    seconds = step_flops(cfg) / speed
    if seconds > STEP_LIMIT_S:
        raise ConfigError(
            f"one training step at block_size {cfg.model.block_size} would take about {duration(seconds)} on this {device.type} "
            f"({step_flops(cfg) / 1e12:.1f} TFLOP at a measured {speed / 1e9:.0f} GFLOP/s; attention grows with the square of the "
            f"context), and a step cannot be stopped midway; lower --model.block_size or --train.batch_size, or use a GPU"
        )
    return speed
