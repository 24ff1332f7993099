"""What bench.py will cost, said first: the refusals, then the seconds, from timed passes (a small
model is bound by each call's fixed time, which counting operations misses)."""

from configs import Config
from harness.experiments.benchmark import (
    ATTENTION_LENGTHS,
    SAMPLE_TOKENS,
    bench_attention,
    build_model,
    sized,
)
from harness.experiments.profiling import PEAK_SECONDS
from harness.training.budget import (
    check_affordable,
    check_memory,
    check_sampling,
    forward_flops,
    measured_pass,
    step_flops,
)
from harness.training.runtime import Runtime

# bench_training's: the first (it compiles), one more warm-up, 8 timed, 1 tracked
TRAINING_STEPS = 11
# bench_sampling's tokens in each mode, cached and not: a warm-up of 4, then the better of 2 runs
SAMPLED = 4 + 2 * SAMPLE_TOKENS
# bench_attention's of each core at each length: a warm-up, 3 timed, 1 tracked
CORE_CALLS = 1 + 3 + 1


def bench_cost(cfg: Config, runtime: Runtime) -> float:
    """Refuse what bench.py could not measure here, before building a model; else its seconds."""
    cfg, device = sized(cfg), runtime.device
    m = cfg.model
    speed = check_affordable(cfg, device)
    check_sampling(m, 1, 1, SAMPLE_TOKENS, device)
    # the readable core holds (1, H, T, T) scores and weights, and the (T, T) mask
    T = max(ATTENTION_LENGTHS)
    check_memory(
        8.0 * m.n_head * T * T + T * T,
        device,
        f"the readable attention core at T = {T} with {m.n_head} heads",
        "lower --model.n_head",
    )
    model = build_model(cfg, runtime).eval()
    cost = measured_pass(model, cfg.train.batch_size, m.block_size, speed)
    del model  # bench_training builds its own, from the seed
    calls = 3 * cfg.train.grad_accum_steps + 1  # forward, backward, update
    steps = TRAINING_STEPS * cost.seconds(step_flops(cfg), calls=calls)
    # one token a pass, the rest read from the cache
    cached = SAMPLED * cost.seconds(forward_flops(m, 1, 1))
    uncached = 2 * sum(
        cost.seconds(forward_flops(m, 1, min(t, m.block_size))) for t in range(1, SAMPLE_TOKENS + 1)
    )
    # each core timed there once, and its time grown with the square of the length
    shortest = min(ATTENTION_LENGTHS)
    timings = bench_attention(m.n_head, m.head_size, device, (shortest,), repeats=1)
    cores_s = sum(ms for key, ms in timings.items() if "_ms_" in key) / 1e3
    attention = CORE_CALLS * cores_s * sum((T / shortest) ** 2 for T in ATTENTION_LENGTHS)
    return PEAK_SECONDS + steps + cached + uncached + attention
