"""What a run costs, said before it starts: the compute of a training step and of an evaluation, the
memory of a step, and this device's speed. A run whose step could not be stopped in reasonable time,
or would not fit in memory, is refused in one line; a first evaluation minutes away gets a warning
naming the flag that shortens it.

Costs are counted in floating-point operations (a multiply-add is two), from the model's sizes: a
forward pass over B x T tokens costs 2 x B x T x (12 L C^2 + V C) for the matrices and 4 L B T^2 C
for attention (scores, then the weighted sum of values; half that under the causal mask, whose
masked half the fused kernels skip); a training step, forward and backward, about three forward
passes. Seconds are these counts over the speed of a square matrix product timed here, so they are
estimates, good to a small factor. docs/experiment.md has the figures they were checked against. A
small model is slower than that speed says, bound by the fixed time of each call and by its narrow
widths: where the model exists already (score.py --contexts, bench.py), its own passes are timed
instead (measured_pass).

Memory is estimated from the config alone too, and checked before anything is allocated: a training
step (check_affordable, before the model is built) and a batch of samples (check_sampling, before
the first token) both go through check_memory, the one refusal line "needs about N GiB, and this cpu
has M GiB".
"""

import dataclasses
import math
import os
import time

import torch

from configs import Config, ConfigError
from model import GPT, ModelConfig

# a no-mask model's honest loss (a pass per prefix) costs at most this many training steps of
# compute
HONEST_BUDGET_STEPS = 8
# a stop waits for the step under way: a run whose step would take longer is refused
STEP_LIMIT_S = 120
# a first evaluation estimated longer than this is announced before training, with the flag that
# shortens it
EVAL_WARNING_S = 60


def size(n: int) -> float:
    """A count from a config as a float, for the estimates; one past float's range (10**400 layers)
    is infinite: too big anywhere.
    """
    return float(n) if n < 2**1000 else math.inf


def forward_flops(cfg: ModelConfig, B: int, T: int) -> float:
    """Operations of one forward pass over (B, T) tokens: the blocks' matrices, the output layer,
    attention.
    """
    C, L, B, T = size(cfg.n_embd), size(cfg.n_layer), size(B), size(T)
    # fused kernels skip the masked half
    attention = (2.0 if cfg.causal else 4.0) * L * B * T * T * C
    # query, key, value and output: 4 C^2; the MLP's two: 8 C^2
    matrices = (4 + 8 * cfg.mlp) * L * C * C
    return 2.0 * B * T * (matrices + size(cfg.vocab_size) * C) + attention


def flops_per_token(cfg: ModelConfig) -> float:
    """Model FLOPs of training on one token, forward and backward, as MFU counts them: 6N + 12 L T
    C.

    N is the weights that multiply (the blocks' matrices, 12 L C^2, 4 L C^2 without the MLP, and the
    output layer, V C: the embedding lookups, biases and LayerNorms multiply no matrix), each
    costing 2 operations a token forward and 4 backward. 12 L T C is attention's scores and weighted
    sum over the whole (T, T) square, as PaLM (its appendix B) and nanoGPT count it, so that an MFU
    here compares with theirs; forward_flops, for the time estimates, leaves out the masked half the
    kernels skip.
    """
    return (
        3
        * forward_flops(dataclasses.replace(cfg, causal=False), 1, cfg.block_size)
        / cfg.block_size
    )


def step_flops(cfg: Config) -> float:
    """Operations of one training step of one process: forward and backward over its micro-batches."""
    return 3 * forward_flops(
        cfg.model, cfg.train.batch_size * cfg.train.grad_accum_steps, cfg.model.block_size
    )


def prefix_flops(cfg: ModelConfig, B: int, positions: list[int]) -> float:
    """Operations of the honest loss's passes over the prefixes x[:, :t+1] for t in positions."""
    return sum(forward_flops(cfg, B, t + 1) for t in positions)


def honest_flops(cfg: Config, positions: list[list[int]]) -> float:
    """Operations of one pass over each scored position's prefix, batch by batch: the honest loss's
    without the mask, the order use's shuffled ones in every run."""
    return sum(prefix_flops(cfg.model, cfg.train.batch_size, p) for p in positions)


def cap_prefix_work(positions: list[list[int]], cfg: Config) -> list[list[int]]:
    """The honest positions per batch, cut until their prefix passes cost at most
    HONEST_BUDGET_STEPS training steps.

    Fewer batches first, then the positions of the one left drawn closer to the start (shorter
    prefixes). The presets stay well inside the budget: at most about six steps' worth, with every
    position at a stratum's end.
    """
    budget = HONEST_BUDGET_STEPS * step_flops(cfg)
    while len(positions) > 1 and honest_flops(cfg, positions) > budget:
        positions = positions[:-1]
    span = cfg.model.block_size
    while positions and span > 1 and honest_flops(cfg, positions) > budget:
        span //= 2
        positions = [sorted({t * span // cfg.model.block_size for t in p}) for p in positions]
    return positions


def weight_count(m: ModelConfig) -> float:
    """About how many parameters GPT(m) has, from its sizes alone: 12 L C^2 in the blocks, V C and T
    C in the embeddings.
    """
    C = size(m.n_embd)
    return 12 * size(m.n_layer) * C * C + (size(m.vocab_size) + size(m.block_size)) * C


def step_memory_bytes(cfg: Config) -> float:
    """Memory one training step holds at its peak, roughly: weights with their gradients and
    optimizer moments, the activations kept for the backward pass (about 20 numbers per token, layer
    and channel) and the logits with their gradient; the (B, H, T, T) attention weights too on the
    readable path, which keeps them."""
    m, B, T = cfg.model, size(cfg.train.batch_size), size(cfg.model.block_size)
    L, C, V, H = size(m.n_layer), size(m.n_embd), size(m.vocab_size), size(m.n_head)
    activations = B * T * (20 * L * C + 3 * V)
    weights = 3 * L * B * H * T * T if m.attention == "manual" else 0
    return 4.0 * (4 * weight_count(m) + activations + weights)  # float32: 4 bytes a number


# Python's share of each sampled step: a (B, 1) tensor, or a decoded piece, kept until the end
TOKEN_BOOKKEEPING_BYTES = 512
# Python's share of each sample printed: a tensor view of its row, its decoded text's header
SAMPLE_BOOKKEEPING_BYTES = 768


def sampling_memory_bytes(m: ModelConfig, n_samples: int, n_prompt: int, n_new: int) -> float:
    """Memory that sampling n_samples rows holds at its peak, roughly, each row n_prompt tokens
    followed by n_new drawn ones:
    the weights; the tokens (int64, as drawn and joined), with Python's bookkeeping per step and per
    sample, and the decoded texts (up to 4 bytes a token); and while tokens are drawn, over the
    window the model sees (at most block_size), the keys and values cached per layer (twice while a
    step appends to them), one layer's activations (about 8 numbers per token and channel), the
    readable path's (B, H, T, T) attention weights, and the logits with the sampler's copies of
    them."""
    B, N = size(n_samples), size(n_prompt) + size(n_new)
    L, C, V, H, T = (
        size(m.n_layer),
        size(m.n_embd),
        size(m.vocab_size),
        size(m.n_head),
        min(N, size(m.block_size)),
    )
    attention = B * H * T * T if m.attention == "manual" else 0
    # no token drawn, no pass
    window = (4 * L * B * T * C + 8 * B * T * C + attention + 4 * B * V) if n_new else 0
    texts = B * (SAMPLE_BOOKKEEPING_BYTES + 4 * N)
    return (
        4.0 * (weight_count(m) + window)
        + 16 * B * N
        + TOKEN_BOOKKEEPING_BYTES * size(n_new)
        + texts
    )


def device_memory_bytes(device: torch.device) -> float | None:
    """The memory the device has: the GPU's own, or the machine's RAM for a CPU (None where it
    cannot be read).
    """
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
    """Operations per second of an (n, n) @ (n, n) float32 product on the device, timed after one
    warm-up.

    Its numbers come from a generator of its own: train.py measures after seeding, and a draw from
    the global generator here would change the initial weights that the seed gives
    (torch.manual_seed(seed), then GPT)."""
    gen = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, generator=gen) for _ in range(2))
    a @ b
    seconds, _ = timed(lambda: [a @ b for _ in range(repeats)], device)
    return repeats * 2.0 * n**3 / max(seconds, 1e-9)


@dataclasses.dataclass(frozen=True)
class PassCost:
    """What one model's forward passes cost here, timed on the model itself (measured_pass):
    counting operations at a square product's speed misses the fixed time of each call, and widths
    too narrow for the matrix units."""

    # seconds a pass costs whatever its size: Python, and the launch of every kernel of every layer
    call_s: float
    speed: float  # operations per second beyond that, at the model's own widths

    def seconds(self, flops: float, calls: float = 1) -> float:
        return calls * self.call_s + flops / self.speed


# measured_pass's larger pass, in seconds at a square product's speed (a small model takes a few
# times that)
TIMED_PASS_S = 0.1
TIMED_PASS_NUMBERS = 2**26  # and the most numbers it may hold beyond the weights


def measured_pass(model: GPT, B: int, T: int, peak: float) -> PassCost:
    """The PassCost of model's passes, from two timed after a warm-up (the faster of two each): one
    over a single token, all of it the call's fixed time, and one over (B, T) tokens cut (T halved,
    then fewer rows) to about TIMED_PASS_S at `peak` (the square product's speed, never passed) and
    TIMED_PASS_NUMBERS held: the rest. Each reads its last position's logits."""
    m, device = model.cfg, model.lm_head.weight.device
    held = lambda B, T: (
        B
        * (
            8 * T * m.n_embd
            + m.vocab_size
            + (2 * m.n_head * T * T if m.attention == "manual" else 0)
        )
    )  # noqa: E731
    while T > 1 and (
        forward_flops(m, 1, T) / peak > TIMED_PASS_S or held(1, T) > TIMED_PASS_NUMBERS
    ):
        T //= 2
    B = max(
        1,
        min(
            B,
            int(TIMED_PASS_S * peak / forward_flops(m, 1, T)),
            int(TIMED_PASS_NUMBERS / held(1, T)),
        ),
    )

    def best(B: int, T: int) -> float:
        x = torch.zeros((B, T), dtype=torch.long, device=device)
        model.lm_head(model.hidden(x)[:, -1])
        return min(
            timed(lambda: model.lm_head(model.hidden(x)[:, -1]), device)[0] for _ in range(2)
        )

    with torch.no_grad():
        call_s, whole_s = best(1, 1), best(B, T)
    # the output layer at the last position only
    flops = forward_flops(m, B, T) - 2.0 * B * (T - 1) * m.vocab_size * m.n_embd
    return PassCost(call_s, min(peak, flops / max(whole_s - call_s, 1e-9)))


def duration(seconds: float) -> str:
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} minutes"
        if seconds < 7200
        else f"{seconds / 3600:.1f} hours"
    )


def gib(n_bytes: float) -> str:
    """A memory size to read at a glance: MiB below a GiB, whole GiB above, powers of ten past a
    million million GiB.
    """
    return (
        f"{n_bytes / 2**20:.0f} MiB"
        if n_bytes < 2**30
        else f"{n_bytes / 2**30:.0f} GiB"
        if n_bytes < 2**80
        else f"{n_bytes / 2**30:.1e} GiB"
    )


def check_memory(need: float, device: torch.device, what: str, advice: str) -> None:
    """Refuse in one line work whose memory, estimated from the config alone, is more than the
    device has: called before any of it is allocated, so the refusal comes at once instead of after
    minutes of swapping or an OOM kill."""
    have = device_memory_bytes(device)
    if have is not None and need > have:
        raise ConfigError(
            f"{what} needs about {gib(need)}, and this {device.type} has {gib(have)}; {advice}"
        )


def check_sampling(
    m: ModelConfig, n_samples: int, n_prompt: int, n_new: int, device: torch.device
) -> None:
    """Refuse in one line samples that this device cannot hold: n_samples rows of n_prompt tokens
    and n_new drawn ones.
    """
    what = f"sampling {n_samples:,} sample{'s' * (n_samples > 1)} of {n_prompt + n_new:,} token{'s' * (n_prompt + n_new > 1)}"
    check_memory(
        sampling_memory_bytes(m, n_samples, n_prompt, n_new),
        device,
        what,
        "lower --num-samples or --max-new-tokens",
    )


def check_affordable(cfg: Config, device: torch.device, speed: float | None = None) -> float:
    """Refuse in one line a run this device cannot hold in memory, or whose every step would outlast
    a stop's patience; return the device's speed (operations per second, measured here unless
    given), for the estimates said before training.
    It needs the config alone: called before the model is built, a model too big is refused before
    its weights exist."""
    speed = speed or measured_speed(device)
    params = weight_count(cfg.model)
    millions = f"{params / 1e6:,.0f}M" if params < 1e18 else f"{params:.1e}"
    # First the model alone (float32 weights, gradients and AdamW's two moments), whatever the
    # context and batch, then the step.
    check_memory(
        16.0 * params,
        device,
        f"training a model of about {millions} parameters",
        "lower --model.n_layer or --model.n_embd",
    )
    check_memory(
        step_memory_bytes(cfg),
        device,
        f"a training step at block_size {cfg.model.block_size} and batch_size {cfg.train.batch_size}",
        "lower --model.block_size or --train.batch_size",
    )
    seconds = step_flops(cfg) / speed
    if seconds > STEP_LIMIT_S:
        raise ConfigError(
            f"one training step at block_size {cfg.model.block_size} would take about {duration(seconds)} on this {device.type} "
            f"({step_flops(cfg) / 1e12:.1f} TFLOP at a measured {speed / 1e9:.0f} GFLOP/s; attention grows with the square of the "
            f"context), and a step cannot be stopped midway; lower --model.block_size or --train.batch_size, or use a GPU"
        )
    return speed
