"""What a run costs before it starts: a step too slow to stop or too big to hold is refused. A
forward pass over B x T tokens costs 2 B T (12 L C^2 + V C) for the matrices and 4 L B T^2 C for
attention (half under the mask); a training step about three passes."""

import dataclasses
import math
import os
import time

import torch

from configs import Config, ConfigError
from model import GPT, ModelConfig

HONEST_BUDGET_STEPS = 8  # training steps of compute a no-mask model's honest loss may cost
STEP_LIMIT_S = 120  # a stop waits for the step under way
EVAL_WARNING_S = 60


def size(n: int) -> float:
    """A count as a float; past float's range, infinite (too big anywhere)."""
    return float(n) if n < 2**1000 else math.inf


def forward_flops(cfg: ModelConfig, B: int, T: int) -> float:
    C, L, B, T = size(cfg.n_embd), size(cfg.n_layer), size(B), size(T)
    attention = (2.0 if cfg.causal else 4.0) * L * B * T * T * C
    # query, key, value and output: 4 C^2; the MLP's two: 8 C^2
    matrices = (4 + 8 * cfg.mlp) * L * C * C
    return 2.0 * B * T * (matrices + size(cfg.vocab_size) * C) + attention


def flops_per_token(cfg: ModelConfig) -> float:
    """Training FLOPs per token as MFU counts them (PaLM, nanoGPT): 6N + 12 L T C, unmasked."""
    full = forward_flops(dataclasses.replace(cfg, causal=False), 1, cfg.block_size)
    return 3 * full / cfg.block_size


def step_flops(cfg: Config) -> float:
    B = cfg.train.batch_size * cfg.train.grad_accum_steps
    return 3 * forward_flops(cfg.model, B, cfg.model.block_size)


def prefix_flops(cfg: ModelConfig, B: int, positions: list[int]) -> float:
    return sum(forward_flops(cfg, B, t + 1) for t in positions)


def honest_flops(cfg: Config, positions: list[list[int]]) -> float:
    return sum(prefix_flops(cfg.model, cfg.train.batch_size, p) for p in positions)


def cap_prefix_work(positions: list[list[int]], cfg: Config) -> list[list[int]]:
    """Positions cut to HONEST_BUDGET_STEPS steps of prefix passes: fewer batches first, then
    positions closer to the start."""
    budget = HONEST_BUDGET_STEPS * step_flops(cfg)
    while len(positions) > 1 and honest_flops(cfg, positions) > budget:
        positions = positions[:-1]
    span = cfg.model.block_size
    while positions and span > 1 and honest_flops(cfg, positions) > budget:
        span //= 2
        positions = [sorted({t * span // cfg.model.block_size for t in p}) for p in positions]
    return positions


def weight_count(m: ModelConfig) -> float:
    C = size(m.n_embd)
    return 12 * size(m.n_layer) * C * C + (size(m.vocab_size) + size(m.block_size)) * C


def device_memory_bytes(device: torch.device) -> float | None:
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[1])
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows)
        return None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed(fn, device: torch.device) -> tuple[float, object]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def measured_speed(device: torch.device) -> float:
    """FLOP/s of a float32 matrix product. Its own generator: a global draw would change the
    seeded initial weights."""
    n, repeats = 512, 4
    gen = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, generator=gen) for _ in range(2))
    a @ b
    seconds, _ = timed(lambda: [a @ b for _ in range(repeats)], device)
    return repeats * 2.0 * n**3 / max(seconds, 1e-9)


@dataclasses.dataclass(frozen=True)
class PassCost:
    """A small pass is slower than `measured_speed`: each call has a fixed time."""

    call_s: float
    speed: float  # FLOP/s beyond that, at the model's widths

    def seconds(self, flops: float, calls: float = 1) -> float:
        return calls * self.call_s + flops / self.speed


TIMED_PASS_S = 0.1  # measured_pass's larger pass at `peak`
TIMED_PASS_NUMBERS = 2**26  # and the numbers it holds beyond the weights


def measured_pass(model: GPT, B: int, T: int, peak: float) -> PassCost:
    """From a pass over one token (all fixed time) and one over (B, T) cut to the limits above."""
    m, device = model.cfg, model.lm_head.weight.device

    def held(T: int) -> int:
        weights = 2 * m.n_head * T * T if m.attention == "manual" else 0
        return 8 * T * m.n_embd + m.vocab_size + weights

    while T > 1 and (forward_flops(m, 1, T) / peak > TIMED_PASS_S or held(T) > TIMED_PASS_NUMBERS):
        T //= 2
    by_time = int(TIMED_PASS_S * peak / forward_flops(m, 1, T))
    B = max(1, min(B, by_time, int(TIMED_PASS_NUMBERS / held(T))))

    def best(B: int, T: int) -> float:
        x = torch.zeros((B, T), dtype=torch.long, device=device)
        model.lm_head(model.hidden(x)[:, -1])  # the output layer at the last position only
        return min(
            timed(lambda: model.lm_head(model.hidden(x)[:, -1]), device)[0] for _ in range(2)
        )

    with torch.no_grad():
        call_s, whole_s = best(1, 1), best(B, T)
    flops = forward_flops(m, B, T) - 2.0 * B * (T - 1) * m.vocab_size * m.n_embd
    return PassCost(call_s, min(peak, flops / max(whole_s - call_s, 1e-9)))


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds / 3600:.1f} hours"


def gib(n_bytes: float) -> str:
    if n_bytes < 2**30:
        return f"{n_bytes / 2**20:.0f} MiB"
    if n_bytes < 2**80:
        return f"{n_bytes / 2**30:.0f} GiB"
    return f"{n_bytes / 2**30:.1e} GiB"


def check_memory(need: float, device: torch.device, what: str, advice: str) -> None:
    have = device_memory_bytes(device)
    if have is not None and need > have:
        raise ConfigError(
            f"{what} needs about {gib(need)}, and this {device.type} has {gib(have)}; {advice}"
        )


def check_sampling(
    m: ModelConfig, n_samples: int, n_prompt: int, n_new: int, device: torch.device
) -> None:
    B, N = size(n_samples), size(n_prompt) + size(n_new)
    L, C, V, H = size(m.n_layer), size(m.n_embd), size(m.vocab_size), size(m.n_head)
    T = min(N, size(m.block_size))
    window = 0
    if n_new:
        attention = B * H * T * T if m.attention == "manual" else 0
        window = 4 * L * B * T * C + 8 * B * T * C + attention + 4 * B * V
    # the weights, the pass, the tokens, then Python's share of each step and of each sample
    need = 4.0 * (weight_count(m) + window) + 16 * B * N + 512 * size(n_new) + B * (768 + 4 * N)
    n = n_prompt + n_new
    what = f"sampling {n_samples:,} sample{'s' * (n_samples > 1)} of {n:,} token{'s' * (n > 1)}"
    check_memory(need, device, what, "lower --num-samples or --max-new-tokens")


def check_affordable(cfg: Config, device: torch.device, speed: float | None = None) -> float:
    """Refuse a run too big to hold or whose step outlasts a stop; return the device's speed."""
    speed = speed or measured_speed(device)
    m, params = cfg.model, weight_count(cfg.model)
    millions = f"{params / 1e6:,.0f}M" if params < 1e18 else f"{params:.1e}"
    # the model alone (float32 weights, gradients and AdamW's two moments), then the step
    check_memory(
        16.0 * params,
        device,
        f"training a model of about {millions} parameters",
        "lower --model.n_layer or --model.n_embd",
    )
    # 20 float32 numbers per token, layer and channel, the logits, the readable path's weights
    B, T, L, C = size(cfg.train.batch_size), size(m.block_size), size(m.n_layer), size(m.n_embd)
    weights = 3 * L * B * size(m.n_head) * T * T if m.attention == "manual" else 0
    check_memory(
        4.0 * (4 * params + B * T * (20 * L * C + 3 * size(m.vocab_size)) + weights),
        device,
        f"a training step at block_size {m.block_size} and batch_size {cfg.train.batch_size}",
        "lower --model.block_size or --train.batch_size",
    )
    flops = step_flops(cfg)
    if flops / speed > STEP_LIMIT_S:
        raise ConfigError(
            f"one training step at block_size {m.block_size} would take about "
            f"{duration(flops / speed)} on this {device.type} ({flops / 1e12:.1f} TFLOP at a "
            f"measured {speed / 1e9:.0f} GFLOP/s), too long to stop midway; lower "
            "--model.block_size or --train.batch_size, or use a GPU"
        )
    return speed
