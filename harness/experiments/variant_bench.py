"""bench.py --variants: what each change of attention as shipped models have it buys when a model
samples, at random init.

For the preset and each variant (model/ablations.py's table: --kv-heads, --window, --gate, --sink,
...), at the longest context the model sees, block_size tokens, batch 1:
- the KV cache's bytes: what the per-layer caches hold after a block_size-token prompt, and that
  over block_size, the bytes per token. K key/value heads of H keep K/H of the keys and values; a
  window W keeps W - 1 positions in a windowed layer, whatever the context, so its bytes per token
  fall as the context grows;
- sampling's tokens/s with the cache, from that full prompt: generate()'s own context policy (a full
  window keeps its newest half and encodes it afresh), so each new token sees block_size / 2 to
  block_size positions, as sample.py's do once a sample is longer than the context;
- the training step of train.py, in ms, on random tokens (bench.py's own,
harness/experiments/benchmark.py). Bytes and parameters do not depend on the weights; the speed
depends on the shapes, not on training.
"""

import dataclasses
import time
from functools import partial

import torch

from configs import Config, ConfigError
from harness.experiments.benchmark import VOCAB_SIZES, bench_training
from harness.experiments.profiling import machine_line
from harness.training.budget import timed
from harness.training.runtime import Runtime
from model import GPT
from model.ablations import applied, variants

# sampled after the prompt in each timed run: four halvings of the char preset's 128-token window
VARIANT_TOKENS = 256
KiB = 2**10


def cache_bytes(model: GPT, prompt: torch.Tensor) -> int:
    """The bytes every layer's KVCache holds once the model has encoded prompt (B, T): keys and
    values together.
    """
    caches = model.new_caches()
    with torch.no_grad():
        model.hidden(prompt, caches)
    return sum(t.numel() * t.element_size() for cache in caches for t in (cache.k, cache.v))


def bench_variants(
    cfg: Config,
    runtime: Runtime,
    names: list[str],
    new_tokens: int = VARIANT_TOKENS,
    repeats: int = 3,
    train_steps: int = 3,
) -> dict:
    """Per variant (keyed by run name, the preset first): parameters, the KV cache's bytes after
    block_size tokens and per token, cached sampling's tokens/s after a full prompt, and train.py's
    step in ms (bench_training's median of train_steps steps); the best of `repeats` runs of each,
    taken in turns. The figures are at cfg.model.block_size: raise --model.block_size for a longer
    context (rope or learned positions alike)."""
    T = cfg.model.block_size
    rows, runs = {}, {}
    for suffix, model_cfg in variants(
        dataclasses.replace(cfg.model, vocab_size=VOCAB_SIZES[cfg.data.tokenizer]), names
    ).items():
        torch.manual_seed(cfg.train.seed)
        model = GPT(model_cfg).to(runtime.device).eval()
        g = torch.Generator().manual_seed(0)
        # (1, T): a full context
        prompt = torch.randint(0, model_cfg.vocab_size, (1, T), generator=g).to(runtime.device)
        total = cache_bytes(model, prompt)
        model.generate(prompt, 4)  # warm-up
        name = f"{cfg.name}{suffix}"
        rows[name] = {
            "params": model.num_params(),
            "cache_bytes": total,
            "cache_bytes_per_token": total / T,
        }
        runs[name] = (model, prompt, [], dataclasses.replace(cfg, model=model_cfg), [])
    # in turns, so that a burst of other work on the machine slows one run of each, not all of one
    for _ in range(repeats):
        for model, prompt, seconds, variant_cfg, steps_ms in runs.values():
            generator = torch.Generator(device=runtime.device).manual_seed(0)
            seconds.append(
                timed(
                    partial(model.generate, prompt, new_tokens, generator=generator), runtime.device
                )[0]
            )
            steps_ms.append(
                bench_training(variant_cfg, runtime, warmup_steps=1, steps=train_steps)[
                    "ms_per_step"
                ]
            )
    for name, (_, _, seconds, _, steps_ms) in runs.items():
        rows[name] |= {"sample_tokens_per_s": new_tokens / min(seconds), "step_ms": min(steps_ms)}
    preset = next(iter(rows.values()))
    for row in rows.values():
        row["cache_fraction"] = row["cache_bytes"] / preset["cache_bytes"]
        row["sample_speedup"] = row["sample_tokens_per_s"] / preset["sample_tokens_per_s"]
    return {
        "variant_context": T,
        "variant_new_tokens": new_tokens,
        "batch_size": cfg.train.batch_size,
        "variants": rows,
    }


def check_variants(cfg: Config) -> None:
    """Refuse, in one line, a change given on the command line beside --variants: each variant is
    the preset with its own.
    """
    if changed := applied(cfg.model):
        flags = ", ".join(c.flag for c in changed)
        raise ConfigError(
            f"bench.py --variants builds the changed variants itself ({flags} given); leave those flags out"
        )


def measure_variants(
    cfg: Config, runtime: Runtime, names: list[str], machine: dict, log=print
) -> dict:
    """bench.py --variants' whole result: the machine, then bench_variants' figures and how long
    they took.
    """
    check_variants(cfg)
    start = time.perf_counter()
    log(f"variants at a context of {cfg.model.block_size} tokens: {', '.join(names)} ...")
    result = {
        "config": cfg.name,
        **machine,
        "variant_names": names,
        **bench_variants(cfg, runtime, names),
    }
    result["bench_s"] = time.perf_counter() - start
    return result


def format_variants(r: dict) -> str:
    """The variants as one markdown table, the preset first."""
    T, n = r["variant_context"], r["variant_new_tokens"]
    lines = [
        machine_line(r),
        "",
        f"| config {r['config']}, batch 1, context {T} tokens | parameters | KV cache after {T} tokens | bytes per token "
        f"| of the preset's | sampling {n} tokens after a {T}-token prompt, KV cache | of the preset's | training step |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, v in r["variants"].items():
        lines.append(
            f"| {name} | {v['params'] / 1e6:.3f} M | {v['cache_bytes'] / KiB:,.1f} KiB | {v['cache_bytes_per_token']:,.0f} "
            f"| {100 * v['cache_fraction']:.0f} % | {v['sample_tokens_per_s']:,.0f} tokens/s | {v['sample_speedup']:.2f}x | {v['step_ms']:.0f} ms |"
        )
    return "\n".join(lines)
