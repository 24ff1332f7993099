"""Benchmark what users run: python bench.py --config char [--json] [--section.field=VALUE ...]

For one preset, at random init on random tokens (no corpus needed), it measures
- training, the step train.py runs (its optimizer and runtime): ms per step, split into forward +
  backward and the optimizer's update, tokens/s, model FLOP/s and MFU against a matmul peak
  measured on the spot (model FLOPs only: the optimizer's arithmetic is not counted), and the
  peak memory of a step;
- sampling: tokens/s for 500 new tokens from a 1-token prompt, with and without the KV cache;
- attention: each backend's causal forward time and peak memory at T = 256, 1024 and 4096
  (B = 1, H and D from the preset), where the readable path holds (T, T) weights and tiled does not.

It prints markdown tables; with --json, one JSON object on stdout instead (the tables go to stderr).
Torch keeps no allocator statistics on CPU, so there peak memory comes from PeakMemory below.
"""

import dataclasses
import json
import os
import platform
import statistics
import sys
import time
import weakref
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from configs import Config, load_config
from engine.cli import OneLineParser, run_command
from engine.optim import describe, make_optimizer
from engine.runtime import Runtime, setup_runtime
from engine.step import draw_micro_batches, train_step
from model import GPT
from model.attention import attention
from model.tiled import tiled_attention

VOCAB_SIZES = {"char": 65, "gpt2": 50257}  # the tokenizers' vocabularies, so no corpus is needed
ATTENTION_LENGTHS = (256, 1024, 4096)
MiB = 2**20


class PeakMemory(TorchDispatchMode):
    """Peak bytes of tensor storage allocated while the mode is active, on top of what already existed.

    Every op's output whose storage is new (not the storage of one of the op's inputs, as with
    views and in-place ops, and not counted already) adds the storage's nbytes to a live count,
    and a weakref.finalize on that storage subtracts them when torch frees it. Tensors that
    existed before entering (parameters, optimizer state, the batch) are the baseline and are
    not counted: `peak` is what the code inside added on top of them. Scratch space that a kernel
    allocates and frees inside one op is not an output and stays invisible.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live, self.peak = 0, 0
        self.counted: set[int] = set()  # storages counted and not yet freed

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata not in inputs:
                self.track(t.untyped_storage())
        return out

    def track(self, storage: torch.UntypedStorage) -> None:
        key, nbytes = storage._cdata, storage.nbytes()
        if key in self.counted:
            return
        self.counted.add(key)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self.release, key, nbytes)  # storage objects live as long as the memory

    def release(self, key: int, nbytes: int) -> None:
        self.counted.discard(key)
        self.live -= nbytes


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def peak_memory_bytes(fn, device: torch.device) -> int:
    """Peak bytes that fn() allocates above what was live before it ran (CUDA: the allocator's own count)."""
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
        fn()
        sync(device)
        return torch.cuda.max_memory_allocated(device) - baseline
    with PeakMemory() as tracker:
        fn()
    return tracker.peak


def timed(fn, device: torch.device) -> tuple[float, object]:
    """Run fn() once; return (seconds, its result), waiting for the device at both ends."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def best_ms(fn, device: torch.device, repeats: int) -> float:
    """The fastest of `repeats` timed runs of fn(), in milliseconds, after one warm-up run."""
    fn()
    return min(timed(fn, device)[0] for _ in range(repeats)) * 1e3


def machine_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if names:
            return names[0]
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> float | None:
    """The 1-minute load average where the OS reports one: compare it with the number of cores."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def matmul_peak_flops(device: torch.device, dtype: torch.dtype, sizes=(512, 1024, 2048), seconds: float = 3.0) -> float:
    """The best FLOP/s of square matmuls (2 n^3 FLOPs each) over a few seconds: the MFU denominator."""
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        a @ b  # warm-up
        deadline = time.perf_counter() + seconds / len(sizes)
        while time.perf_counter() < deadline:
            best = max(best, 2 * n**3 / timed(partial(torch.matmul, a, b), device)[0])
    return best


def build_model(cfg: Config, runtime: Runtime) -> GPT:
    torch.manual_seed(cfg.train.seed)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=VOCAB_SIZES[cfg.data.tokenizer])
    return GPT(model_cfg).to(runtime.device)


def optimizer_step(
    model: GPT, optimizer: torch.optim.Optimizer, micro_batches: list, runtime: Runtime, grad_clip: float
) -> tuple[float, float]:
    """One step as train.py's loop runs it: zero the gradients, train_step (forward, backward, clip), check, update.

    Returns the seconds of its two parts: forward + backward (with the clip and the finiteness
    check, which waits for the device), and the optimizer's update.
    """
    optimizer.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss, grad_norm = train_step(model, micro_batches, runtime, grad_clip)
    if not torch.isfinite(loss + grad_norm):  # the loop's one sync per step
        raise RuntimeError("non-finite loss or gradient in the benchmark's training step")
    middle = time.perf_counter()
    optimizer.step()
    sync(runtime.device)
    return middle - start, time.perf_counter() - middle


def bench_training(cfg: Config, runtime: Runtime, warmup_steps: int = 2, steps: int = 8) -> dict:
    """ms/step, tokens/s, model FLOP/s and the peak memory of one training step, on random tokens.

    The step time is the median of `steps` timed steps: a burst of other work on the machine
    slows a step or two, not the median. Its two parts, forward + backward and the optimizer's
    update, are medians of their own over the same steps.
    """
    model = build_model(cfg, runtime).train()
    optimizer = make_optimizer(model, cfg.train, runtime.device)
    T, V = cfg.model.block_size, model.cfg.vocab_size
    ids = np.random.default_rng(0).integers(0, V, size=max(100_000, 2 * T + 2))  # a random "corpus"
    g = torch.Generator().manual_seed(cfg.train.seed)

    step_model = torch.compile(model) if runtime.use_compile else model  # as train.py trains it

    def step() -> tuple[float, float]:  # the batch is drawn inside the timed step, as in train.py's loop
        return optimizer_step(step_model, optimizer, draw_micro_batches(ids, cfg, runtime, g), runtime, cfg.train.grad_clip)

    compile_start = time.perf_counter()
    step()  # with torch.compile, the first step compiles
    compile_s = time.perf_counter() - compile_start if runtime.use_compile else 0.0
    for _ in range(warmup_steps - 1):
        step()
    runs = [timed(step, runtime.device) for _ in range(steps)]  # (seconds, (forward + backward, update))
    seconds = statistics.median(total for total, _ in runs)
    forward_backward_s = statistics.median(forward_backward for _, (forward_backward, _) in runs)
    update_s = statistics.median(update for _, (_, update) in runs)
    # Baseline, not counted: parameters, optimizer state and the batch. Last step's gradients
    # are dropped first, so the step's new gradients count in full.
    optimizer.zero_grad(set_to_none=True)
    micro_batches = draw_micro_batches(ids, cfg, runtime, g)
    peak = peak_memory_bytes(lambda: optimizer_step(step_model, optimizer, micro_batches, runtime, cfg.train.grad_clip), runtime.device)
    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    baseline = sum(t.numel() * t.element_size() for t in [*model.parameters(), *state])
    params = model.num_params()
    flops_per_token = 6 * params + 12 * cfg.model.n_layer * cfg.model.n_embd * T  # weights, then attention's scores and mix
    tokens_per_step = cfg.train.batch_size * cfg.train.grad_accum_steps * runtime.world_size * T
    tokens_per_s = tokens_per_step / seconds
    return {
        "params": params,
        "tokens_per_step": tokens_per_step,
        "batch_size": cfg.train.batch_size,
        "block_size": T,
        "vocab_size": V,
        "compiled": runtime.use_compile,
        "compile_s": compile_s,
        "ms_per_step": seconds * 1e3,
        "forward_backward_ms": forward_backward_s * 1e3,
        "optimizer_ms": update_s * 1e3,
        "optimizer": describe(optimizer),
        "tokens_per_s": tokens_per_s,
        "flops_per_token": flops_per_token,
        "model_flops_per_s": flops_per_token * tokens_per_s,
        "train_peak_mem": peak,
        "train_state_mem": baseline,
    }


def bench_sampling(cfg: Config, runtime: Runtime, new_tokens: int = 500) -> dict:
    """Tokens/s of generate() with and without the KV cache, the better of two runs: batch 1, from a 1-token prompt."""
    model = build_model(cfg, runtime).eval()
    prompt = torch.zeros((1, 1), dtype=torch.long, device=runtime.device)
    result, outputs = {"sample_new_tokens": new_tokens}, {}
    for name, use_cache in (("cached", True), ("uncached", False)):
        model.generate(prompt, 4, use_cache=use_cache)  # warm-up
        runs = []
        for _ in range(2):
            generator = torch.Generator(device=runtime.device).manual_seed(0)
            runs.append(timed(partial(model.generate, prompt, new_tokens, generator=generator, use_cache=use_cache), runtime.device))
        seconds, outputs[name] = min(runs, key=lambda run: run[0])
        result[f"sample_tokens_per_s_{name}"] = new_tokens / seconds
    result["sample_cache_speedup"] = result["sample_tokens_per_s_cached"] / result["sample_tokens_per_s_uncached"]
    result["sample_tokens_match"] = bool(torch.equal(outputs["cached"], outputs["uncached"]))
    return result


def bench_attention(n_head: int, head_size: int, device: torch.device, lengths=ATTENTION_LENGTHS, repeats: int = 3) -> dict:
    """Causal forward ms and peak memory of each attention core on (1, H, T, D) inputs.

    Baseline, not counted: q, k, v and the (T, T) boolean mask (the modules keep it as a buffer).
    """
    result, scale = {}, head_size**-0.5
    for T in lengths:
        q, k, v = (torch.randn(1, n_head, T, head_size, device=device) for _ in range(3))  # (B, H, T, D)
        mask = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        cores = {  # each returns y (1, H, T, D); the readable one also its (1, H, T, T) weights
            "readable": partial(attention, q, k, v, mask, scale),
            "sdpa": partial(F.scaled_dot_product_attention, q, k, v, is_causal=True, scale=scale),
            "tiled": partial(tiled_attention, q, k, v, True, scale),
        }
        with torch.no_grad():
            for name, core in cores.items():
                result[f"{name}_ms_{T}"] = best_ms(core, device, repeats)
                result[f"{name}_peak_mem_{T}"] = peak_memory_bytes(core, device)
    T = max(lengths)
    result[f"tiled_readable_mem_ratio_{T}"] = result[f"tiled_peak_mem_{T}"] / result[f"readable_peak_mem_{T}"]
    return result


def run(cfg: Config, runtime: Runtime, log=print) -> dict:
    """Every measurement, as one flat dict."""
    start = time.perf_counter()
    dtype = runtime.autocast_dtype or torch.float32
    result = {
        "config": cfg.name,
        "machine": machine_name(runtime.device),
        "device": str(runtime.device),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "load_avg_1min": load_average(),  # other work on the machine skews every timing below
        **{name: getattr(cfg.model, name) for name in ("n_layer", "n_head", "n_embd", "attention")},
    }
    log("measuring the matmul peak ...")
    result["peak_flops"], result["peak_flops_dtype"] = matmul_peak_flops(runtime.device, dtype), str(dtype).removeprefix("torch.")
    log("training ...")
    result.update(bench_training(cfg, runtime))
    result["mfu"] = result["model_flops_per_s"] / result["peak_flops"]
    log("sampling ...")
    result.update(bench_sampling(cfg, runtime))
    log("attention backends ...")
    result.update(bench_attention(cfg.model.n_head, cfg.model.head_size, runtime.device))
    result["bench_s"] = time.perf_counter() - start
    return result


def format_tables(r: dict) -> str:
    """The results as a machine line and two markdown tables."""
    lines = [
        f"**{r['machine']}** ({r['device']}), {r['torch_threads']} torch threads, torch {r['torch_version']}"
        + (f", load average {r['load_avg_1min']:.1f} on {os.cpu_count()} cores" if r.get("load_avg_1min") is not None else ""),
        "",
        f"| config {r['config']}: {r['n_layer']} layers, {r['n_head']} heads, {r['n_embd']} wide, attention {r['attention']} | value |",
        "|---|---:|",
        f"| parameters | {r['params'] / 1e6:.2f} M |",
        f"| training step ({r['tokens_per_step']:,} tokens: batch {r['batch_size']} x {r['block_size']}"
        + (f", torch.compile: {r['compile_s']:.0f} s once" if r["compiled"] else "")
        + f") | {r['ms_per_step']:.1f} ms |",
        f"| of which forward + backward (and clip) | {r['forward_backward_ms']:.1f} ms |",
        f"| of which the optimizer step: {r['optimizer']} | {r['optimizer_ms']:.1f} ms |",
        f"| training throughput | {r['tokens_per_s']:,.0f} tokens/s |",
        f"| model FLOPs per token (6N + 12LCT) | {r['flops_per_token'] / 1e6:.2f} M |",
        f"| model FLOP/s | {r['model_flops_per_s'] / 1e9:.1f} G |",
        f"| {r['peak_flops_dtype']} matmul peak, measured | {r['peak_flops'] / 1e9:.1f} GFLOP/s |",
        f"| MFU (model FLOPs only: the optimizer's work, such as Muon's Newton-Schulz, is not counted) | {100 * r['mfu']:.1f} % |",
        f"| peak memory of a training step (above params + optimizer state, {r['train_state_mem'] / MiB:.1f} MiB) | "
        f"{r['train_peak_mem'] / MiB:.1f} MiB |",
        f"| sampling {r['sample_new_tokens']} tokens, KV cache | {r['sample_tokens_per_s_cached']:,.0f} tokens/s |",
        f"| sampling {r['sample_new_tokens']} tokens, no cache | {r['sample_tokens_per_s_uncached']:,.0f} tokens/s |",
        f"| cache speedup (same tokens: {'yes' if r['sample_tokens_match'] else 'NO'}) | {r['sample_cache_speedup']:.1f}x |",
        "",
    ]
    lengths = sorted({int(key.rsplit("_", 1)[1]) for key in r if key.startswith("readable_ms_")})
    lines += [
        "| causal attention forward, B=1: ms / peak memory | " + " | ".join(f"T={T}" for T in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
    ]
    for name in ("readable", "sdpa", "tiled"):
        cells = [f"{r[f'{name}_ms_{T}']:.2f} ms / {r[f'{name}_peak_mem_{T}'] / MiB:.2f} MiB" for T in lengths]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    T = lengths[-1]
    ratio = r[f"tiled_readable_mem_ratio_{T}"]
    verdict = "within" if ratio <= 1 / 8 else "OVER"
    lines += ["", f"tiled / readable peak memory at T={T}: {ratio:.4f} (1/{1 / ratio:.0f}), {verdict} the 1/8 budget"]
    return "\n".join(lines)


def main(argv: list[str]) -> dict:
    parser = OneLineParser(description="Benchmark training, sampling and attention for a preset.")
    parser.add_argument("--config", default="base", help="preset name or path to a .toml file")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (tables go to stderr)")
    args, overrides = parser.parse_known_args(argv)
    cfg = load_config(["--config", args.config, *overrides])
    runtime = setup_runtime(cfg.train)
    result = run(cfg, runtime, log=lambda text: print(text, file=sys.stderr))
    tables = format_tables(result)
    if args.json:
        print(tables, file=sys.stderr)
        print(json.dumps(result))
    else:
        print(tables)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
