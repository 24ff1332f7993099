"""bench.py's measurements of one preset at random init on random tokens."""

import dataclasses
import statistics
import sys
import time
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from configs import Config
from data.tokenizer import GPT2_VOCAB_SIZE
from harness.experiments.profiling import (
    attention_kernel,
    machine_facts,
    machine_line,
    peak_flops,
    peak_memory_bytes,
    training_step,
)
from harness.experiments.stats import markdown_table
from harness.training.budget import flops_per_token, sync, timed
from harness.training.optim import describe, make_optimizer
from harness.training.runtime import Runtime, wrap_for_training
from harness.training.step import draw_micro_batches, tokens_per_step
from model import GPT
from model.attention import attention
from model.tiled import tiled_attention

# the tokenizers' vocabularies, so no corpus is needed
VOCAB_SIZES = {"char": 65, "gpt2": GPT2_VOCAB_SIZE}
ATTENTION_LENGTHS = (256, 1024, 4096)
SAMPLE_TOKENS = 500  # sampled in each run, from a 1-token prompt
MiB = 2**20
# GPT-2 small's shape with its qkv bias: that of published MFU figures (nanoGPT's)
GPT2_124M_FLAG = "--gpt2-124m"
GPT2_124M = (
    "--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.block_size=1024 "
    "--model.qkv_bias=true --data.tokenizer=gpt2"
).split()


def expand_gpt2_124m(argv: list[str]) -> list[str]:
    """--gpt2-124m replaced by its overrides where it stands: later flags still win."""
    return [arg for given in argv for arg in (GPT2_124M if given == GPT2_124M_FLAG else [given])]


def sized(cfg: Config) -> Config:
    model = dataclasses.replace(cfg.model, vocab_size=VOCAB_SIZES[cfg.data.tokenizer])
    return dataclasses.replace(cfg, model=model)


def build_model(cfg: Config, runtime: Runtime) -> GPT:
    torch.manual_seed(cfg.train.seed)
    return GPT(sized(cfg).model).to(runtime.device)


def bench_training(cfg: Config, runtime: Runtime, warmup_steps: int = 2, steps: int = 8) -> dict:
    """Times are medians: a burst of other work slows a step or two, not the median."""
    model = build_model(cfg, runtime).train()
    optimizer = make_optimizer(model, cfg.train, runtime.device)
    T, V = cfg.model.block_size, model.cfg.vocab_size
    ids = np.random.default_rng(0).integers(0, V, size=max(100_000, 2 * T + 2))  # a random "corpus"
    g = torch.Generator().manual_seed(cfg.train.seed)
    step_model = wrap_for_training(model, runtime)

    def step(batches: list | None = None) -> tuple[float, float]:
        # the seconds of forward + backward (and clip), of the update
        batches = batches or draw_micro_batches(ids, cfg, runtime, g)
        start = time.perf_counter()
        _, middle = training_step(step_model, optimizer, batches, runtime, cfg.train.grad_clip)
        sync(runtime.device)
        return middle - start, time.perf_counter() - middle

    compile_start = time.perf_counter()
    step()  # with torch.compile, the first step compiles, or fails and runs eagerly
    compiled = runtime.use_compile and not step_model.fell_back
    compile_s = time.perf_counter() - compile_start if compiled else 0.0
    for _ in range(warmup_steps - 1):
        step()
    # each (total, (forward-backward, update))
    runs = [timed(step, runtime.device) for _ in range(steps)]
    seconds = statistics.median(total for total, _ in runs)
    fb = statistics.median(fb for _, (fb, _) in runs)
    update = statistics.median(update for _, (_, update) in runs)
    # not counted: parameters, optimizer state and the batch; gradients dropped count in full
    optimizer.zero_grad(set_to_none=True)
    peak = peak_memory_bytes(
        partial(step, draw_micro_batches(ids, cfg, runtime, g)), runtime.device
    )
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    tokens = tokens_per_step(cfg, runtime)
    tokens_per_s = tokens / seconds
    dtype = runtime.autocast_dtype or torch.float32
    return dict(
        params=model.num_params(),
        tokens_per_step=tokens,
        batch_size=cfg.train.batch_size,
        block_size=T,
        vocab_size=V,
        compiled=compiled,
        compile_failed=runtime.use_compile and not compiled,
        compile_s=compile_s,
        autocast=str(dtype).removeprefix("torch.") if runtime.autocast_dtype else None,
        attention_kernel=attention_kernel(model.cfg, cfg.train.batch_size, runtime.device, dtype),
        ms_per_step=seconds * 1e3,
        forward_backward_ms=fb * 1e3,
        optimizer_ms=update * 1e3,
        optimizer=describe(optimizer),
        tokens_per_s=tokens_per_s,
        flops_per_token=flops_per_token(model.cfg),
        model_flops_per_s=flops_per_token(model.cfg) * tokens_per_s,
        train_peak_mem=peak,
        train_state_mem=sum(t.numel() * t.element_size() for t in [*model.parameters(), *state]),
    )


def timed_sample(model: GPT, prompt: torch.Tensor, new_tokens: int, use_cache: bool = True):
    generator = torch.Generator(device=prompt.device).manual_seed(0)
    run = partial(model.generate, prompt, new_tokens, generator=generator, use_cache=use_cache)
    return timed(run, prompt.device)


def bench_sampling(cfg: Config, runtime: Runtime, new_tokens: int = SAMPLE_TOKENS) -> dict:
    model = build_model(cfg, runtime).eval()
    prompt = torch.zeros((1, 1), dtype=torch.long, device=runtime.device)
    result, outputs = {"sample_new_tokens": new_tokens}, {}
    for name, use_cache in (("cached", True), ("uncached", False)):
        model.generate(prompt, 4, use_cache=use_cache)  # warm-up
        runs = [timed_sample(model, prompt, new_tokens, use_cache) for _ in range(2)]
        seconds, outputs[name] = min(runs, key=lambda run: run[0])
        result[f"sample_tokens_per_s_{name}"] = new_tokens / seconds
    result["sample_cache_speedup"] = (
        result["sample_tokens_per_s_cached"] / result["sample_tokens_per_s_uncached"]
    )
    result["sample_tokens_match"] = bool(torch.equal(outputs["cached"], outputs["uncached"]))
    return result


def bench_attention(
    n_head: int, head_size: int, device: torch.device, lengths=ATTENTION_LENGTHS, repeats: int = 3
) -> dict:
    """Causal forward ms and peak memory of each core on (1, H, T, D) inputs; q, k, v and the
    (T, T) mask are the baseline, not counted."""
    result, scale = {}, head_size**-0.5
    for T in lengths:
        q, k, v = (torch.randn(1, n_head, T, head_size, device=device) for _ in range(3))
        mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        cores = {
            "readable": partial(attention, q, k, v, mask, scale),
            "sdpa": partial(F.scaled_dot_product_attention, q, k, v, is_causal=True, scale=scale),
            "tiled": partial(tiled_attention, q, k, v, mask, scale),
        }
        with torch.no_grad():
            for name, core in cores.items():
                core()  # warm-up
                result[f"{name}_ms_{T}"] = min(timed(core, device)[0] for _ in range(repeats)) * 1e3
                result[f"{name}_peak_mem_{T}"] = peak_memory_bytes(core, device)
    T = max(lengths)
    result[f"tiled_readable_mem_ratio_{T}"] = (
        result[f"tiled_peak_mem_{T}"] / result[f"readable_peak_mem_{T}"]
    )
    return result


def mfu(r: dict) -> float:
    """Model FLOPs utilisation: model FLOP/s over the device's peak."""
    return r["flops_per_token"] * r["tokens_per_s"] / r["peak_flops"]


def measure_all(cfg: Config, runtime: Runtime) -> dict:
    start = time.perf_counter()
    say = partial(print, file=sys.stderr)
    dtype = runtime.autocast_dtype or torch.float32
    result = {"config": cfg.name, **machine_facts(runtime.device)}
    result |= {
        name: getattr(cfg.model, name) for name in ("n_layer", "n_head", "n_embd", "attention")
    }
    say("the peak to divide by ...")
    result["peak_flops"], result["peak_flops_source"] = peak_flops(runtime.device, dtype)
    result["peak_flops_dtype"] = str(dtype).removeprefix("torch.")
    say("training ...")
    result.update(bench_training(cfg, runtime))
    result["mfu"] = mfu(result)
    say("sampling ...")
    result.update(bench_sampling(cfg, runtime))
    say("attention backends ...")
    result.update(bench_attention(cfg.model.n_head, cfg.model.head_size, runtime.device))
    result["bench_s"] = time.perf_counter() - start
    return result


def rate(flops_per_s: float) -> str:
    if flops_per_s >= 1e12:
        return f"{flops_per_s / 1e12:,.1f} TFLOP/s"
    return f"{flops_per_s / 1e9:.1f} GFLOP/s"


def format_tables(r: dict) -> str:
    shape = f"{r['n_layer']} layers, {r['n_head']} heads, {r['n_embd']} wide"
    batch = f"{r['tokens_per_step']:,} tokens: batch {r['batch_size']} x {r['block_size']}"
    n = r["sample_new_tokens"]
    state = f"above params + optimizer state, {r['train_state_mem'] / MiB:.1f} MiB"
    compiled = "failed: ran eagerly" if r["compile_failed"] else "off"
    if r["compiled"]:
        compiled = f"on: {r['compile_s']:.0f} s to compile, once"
    rows = {
        f"config {r['config']}: {shape}, attention {r['attention']}": "value",
        "parameters": f"{r['params'] / 1e6:.2f} M",
        f"training step ({batch})": f"{r['ms_per_step']:.1f} ms",
        "of which forward + backward (and clip)": f"{r['forward_backward_ms']:.1f} ms",
        f"of which the optimizer step: {r['optimizer']}": f"{r['optimizer_ms']:.1f} ms",
        "torch.compile": compiled,
        "autocast": r["autocast"] or "off: float32",
        "attention kernel (torch's pick)": r["attention_kernel"],
        "training throughput": f"{r['tokens_per_s']:,.0f} tokens/s",
        "model FLOPs per token (6N + 12LTC)": f"{r['flops_per_token'] / 1e6:.2f} M",
        "model FLOP/s": rate(r["model_flops_per_s"]),
        f"{r['peak_flops_dtype']} peak: {r['peak_flops_source']}": rate(r["peak_flops"]),
        "MFU (the optimizer's FLOPs not counted)": f"{100 * r['mfu']:.1f} %",
        f"peak memory of a training step ({state})": f"{r['train_peak_mem'] / MiB:.1f} MiB",
        f"sampling {n} tokens, KV cache": f"{r['sample_tokens_per_s_cached']:,.0f} tokens/s",
        f"sampling {n} tokens, no cache": f"{r['sample_tokens_per_s_uncached']:,.0f} tokens/s",
        f"cache speedup (same tokens: {'yes' if r['sample_tokens_match'] else 'NO'})": (
            f"{r['sample_cache_speedup']:.1f}x"
        ),
    }
    lengths = sorted({int(key.rsplit("_", 1)[1]) for key in r if key.startswith("readable_ms_")})
    cores = [["causal attention forward, B=1: ms / peak memory", *(f"T={T}" for T in lengths)]]
    for name in ("readable", "sdpa", "tiled"):
        cells = (
            f"{r[f'{name}_ms_{T}']:.2f} ms / {r[f'{name}_peak_mem_{T}'] / MiB:.2f} MiB"
            for T in lengths
        )
        cores.append([name, *cells])
    T = lengths[-1]
    ratio = r[f"tiled_readable_mem_ratio_{T}"]
    verdict = "within" if ratio <= 1 / 8 else "OVER"
    tables = f"{markdown_table(list(rows.items()))}\n\n{markdown_table(cores)}"
    budget = f"tiled / readable peak memory at T={T}: {ratio:.4f} (1/{1 / ratio:.0f}), {verdict}"
    return f"{machine_line(r)}\n\n{tables}\n\n{budget} the 1/8 budget"
