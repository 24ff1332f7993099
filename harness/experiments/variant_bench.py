"""bench.py --variants: each change of attention's KV cache, sampling speed and training step, at
random init."""

import dataclasses
import sys
import time

import torch

from configs import Config, ConfigError
from harness.experiments.benchmark import bench_training, build_model, timed_sample
from harness.experiments.profiling import machine_facts, machine_line
from harness.experiments.stats import markdown_table
from harness.training.runtime import Runtime
from model.ablations import applied, variants

# sampled after the prompt: four halvings of the char preset's 128-token window
VARIANT_TOKENS = 256
KiB = 2**10


def bench_variants(
    cfg: Config,
    runtime: Runtime,
    names: list[str],
    new_tokens: int = VARIANT_TOKENS,
    repeats: int = 3,
    train_steps: int = 3,
) -> dict:
    """Each variant's row, the preset's first; times the best of runs taken in turns."""
    if changed := applied(cfg.model):
        flags = ", ".join(c.flag for c in changed)
        raise ConfigError(f"--variants sets {flags} itself: leave those flags out")
    start, T = time.perf_counter(), cfg.model.block_size
    print(f"variants at a context of {T} tokens: {', '.join(names)} ...", file=sys.stderr)
    result = {"config": cfg.name, **machine_facts(runtime.device), "variant_names": names}
    rows, runs = {}, []
    for suffix, model_cfg in variants(cfg.model, names).items():
        variant_cfg = dataclasses.replace(cfg, model=model_cfg)
        model = build_model(variant_cfg, runtime).eval()
        g = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, model.cfg.vocab_size, (1, T), generator=g).to(runtime.device)
        caches = model.new_caches()
        with torch.no_grad():
            model.hidden(prompt, caches)
        total = sum(t.numel() * t.element_size() for cache in caches for t in (cache.k, cache.v))
        model.generate(prompt, 4)  # warm-up
        rows[f"{cfg.name}{suffix}"] = dict(
            params=model.num_params(), cache_bytes=total, cache_bytes_per_token=total / T
        )
        runs.append((model, prompt, variant_cfg, [], []))
    # in turns: a burst of other work slows one run of each, not all of one
    for _ in range(repeats):
        for model, prompt, variant_cfg, seconds, steps_ms in runs:
            seconds.append(timed_sample(model, prompt, new_tokens)[0])
            step = bench_training(variant_cfg, runtime, warmup_steps=1, steps=train_steps)
            steps_ms.append(step["ms_per_step"])
    preset = rows[cfg.name]  # the first filled
    for (*_, seconds, steps_ms), row in zip(runs, rows.values(), strict=True):
        row |= {"sample_tokens_per_s": new_tokens / min(seconds), "step_ms": min(steps_ms)}
        row["cache_fraction"] = row["cache_bytes"] / preset["cache_bytes"]
        row["sample_speedup"] = row["sample_tokens_per_s"] / preset["sample_tokens_per_s"]
    return result | dict(
        variant_context=T,
        variant_new_tokens=new_tokens,
        batch_size=cfg.train.batch_size,
        variants=rows,
        bench_s=time.perf_counter() - start,
    )


def format_variants(r: dict) -> str:
    T, n = r["variant_context"], r["variant_new_tokens"]
    rows = [
        [f"config {r['config']}, batch 1, context {T} tokens", "parameters"]
        + [f"KV cache after {T} tokens", "bytes per token", "of the preset's"]
        + [f"sampling {n} tokens after a {T}-token prompt, KV cache", "of the preset's"]
        + ["training step"]
    ]
    rows += [
        [name, f"{v['params'] / 1e6:.3f} M", f"{v['cache_bytes'] / KiB:,.1f} KiB"]
        + [f"{v['cache_bytes_per_token']:,.0f}", f"{100 * v['cache_fraction']:.0f} %"]
        + [f"{v['sample_tokens_per_s']:,.0f} tokens/s", f"{v['sample_speedup']:.2f}x"]
        + [f"{v['step_ms']:.0f} ms"]
        for name, v in r["variants"].items()
    ]
    return f"{machine_line(r)}\n\n{markdown_table(rows)}"
