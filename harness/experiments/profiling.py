"""Measuring tools for the benchmark: train.py's step as bench.py times it, timers that wait for
the device, peak memory (CUDA's allocator, or a tracker of tensor storage on the CPU, where torch
keeps no statistics), the machine, the peak that MFU divides by, and the attention kernel."""

import math
import os
import platform
import re
import time
import weakref
from functools import partial

import torch
from torch.nn.attention import SDPBackend
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.training.budget import sync, timed
from harness.training.runtime import Runtime
from harness.training.step import check_finite, micro_steps
from model import ModelConfig

# Dense bfloat16 tensor-core peaks in TFLOP/s, MFU's denominator under bf16 autocast (datasheets
# print twice these "with sparsity", which training does not use). The first pattern found in
# torch.cuda.get_device_name wins, so specific names come first.
BF16_PEAKS = [  # (pattern, dense bf16 TFLOP/s, source)
    (r"H200 NVL", 835, "NVIDIA H200 NVL datasheet, 1,671 with sparsity"),
    (r"H200", 989, "NVIDIA H200 datasheet (SXM), 1,979 with sparsity"),
    (r"H100 NVL", 835, "NVIDIA H100 NVL datasheet, 1,671 with sparsity"),
    (r"H100 PCIe", 756, "NVIDIA H100 datasheet (PCIe), 1,513 with sparsity"),
    (r"H100", 989, "NVIDIA H100 datasheet (SXM), 1,979 with sparsity"),
    (r"A100", 312, "NVIDIA A100 datasheet, 624 with sparsity"),
    (r"L40S", 362, "NVIDIA L40S datasheet, 733 with sparsity"),
    (r"L40\b", 181, "NVIDIA L40 datasheet, 362 with sparsity"),
    (r"\bL4\b", 121, "NVIDIA L4 datasheet, 242 with sparsity"),
    (r"\bA10\b", 125, "NVIDIA A10 datasheet, 250 with sparsity"),
    (r"RTX 4090$", 165, "NVIDIA Ada architecture whitepaper, FP32 accumulate, 330 with sparsity"),
    (r"RTX 3090$", 71, "NVIDIA GA102 (Ampere) whitepaper, FP32 accumulate, 142 with sparsity"),
]
KERNELS = {
    SDPBackend.FLASH_ATTENTION: "flash",
    SDPBackend.EFFICIENT_ATTENTION: "memory-efficient",
    SDPBackend.CUDNN_ATTENTION: "cuDNN",
    SDPBackend.MATH: "math (the (T, T) weights held in memory)",
}
# how long the square matmuls are timed for MFU's denominator, where no datasheet gives it
PEAK_SECONDS = 3.0


class PeakMemory(TorchDispatchMode):
    """Peak bytes of tensor storage allocated while the mode is active, above what existed before.

    Each op output with a new storage (not an input's, as views and in-place ops have) adds its
    bytes to a live count, and a weakref.finalize takes them off when torch frees it. A kernel's
    scratch space, allocated and freed inside one op, stays invisible.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live, self.peak = 0, 0
        self.counted: set[int] = set()  # storages counted and not yet freed

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        inputs = {t.untyped_storage()._cdata for t in tensors}
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
        # storage objects live as long as the memory
        weakref.finalize(storage, self.release, key, nbytes)

    def release(self, key: int, nbytes: int) -> None:
        self.counted.discard(key)
        self.live -= nbytes


def training_step(
    step_model, optimizer, micro_batches: list, runtime: Runtime, grad_clip: float
) -> tuple[torch.Tensor, float]:
    """train.py's step, line for line (a script imports no other; tests/test_benchmark.py holds
    the two equal). Returns the mean loss and the clock as the update starts."""
    optimizer.zero_grad(set_to_none=True)
    loss = torch.zeros((), device=runtime.device)
    for x, y, ddp_sync in micro_steps(step_model, micro_batches, runtime):
        with ddp_sync:
            with runtime.autocast():
                _, micro_loss = step_model(x, y)
            (micro_loss / len(micro_batches)).backward()
        loss += micro_loss.detach() / len(micro_batches)
    grad_norm = torch.nn.utils.clip_grad_norm_(step_model.parameters(), grad_clip or math.inf)
    check_finite(loss, grad_norm, 0, None)
    update_starts = time.perf_counter()
    optimizer.step()
    return loss, update_starts


def peak_memory_bytes(fn, device: torch.device) -> int:
    """Peak bytes that fn() allocates above what was live before it ran."""
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


def machine_facts(device: torch.device) -> dict:
    """What a table of timings says of the machine: other work on it skews every timing."""
    return {
        "machine": machine_name(device),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "load_avg_1min": load_average(),
    }


def machine_line(r: dict) -> str:
    """The line above a table of timings: the machine, torch's threads and version, the load."""
    line = f"**{r['machine']}** ({r['device']}), {r['torch_threads']} torch threads, "
    line += f"torch {r['torch_version']}"
    if r.get("load_avg_1min") is not None:
        line += f", load average {r['load_avg_1min']:.1f} on {os.cpu_count()} cores"
    return line


def matmul_peak_flops(
    device: torch.device, dtype: torch.dtype, sizes=(512, 1024, 2048), seconds: float = PEAK_SECONDS
) -> float:
    """The best FLOP/s of square matmuls (2 n^3 FLOPs each) over a few seconds."""
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        a @ b  # warm-up
        deadline = time.perf_counter() + seconds / len(sizes)
        while time.perf_counter() < deadline:
            best = max(best, 2 * n**3 / timed(partial(torch.matmul, a, b), device)[0])
    return best


def card_peak(name: str) -> tuple[float, str] | None:
    """A CUDA card's dense bf16 peak (FLOP/s) and its source; None for a card not in BF16_PEAKS."""
    for pattern, tflops, source in BF16_PEAKS:
        if re.search(pattern, name):
            return tflops * 1e12, source
    return None


def peak_flops(device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """What MFU divides by, and its source: under bf16 on CUDA the card's datasheet peak, elsewhere
    the best matmul measured here (below what a datasheet would say)."""
    if device.type == "cuda" and dtype == torch.bfloat16:
        name = machine_name(device)
        if found := card_peak(name):
            return found
        source = f"measured here: {name} is not in the table of cards' peaks"
        return matmul_peak_flops(device, dtype), source
    return matmul_peak_flops(device, dtype), "measured here"


def attention_kernel(
    cfg: ModelConfig, batch_size: int, device: torch.device, dtype: torch.dtype
) -> str:
    """The attention kernel a training step runs: with "sdpa", the one torch's dispatcher picks for
    the step's (B, H, T, D) inputs in `dtype`, asked of torch._fused_sdp_choice (private: a release
    without it gets "unknown"). Under torch.compile the graph keeps the kernel chosen at tracing.
    """
    if cfg.attention != "sdpa":
        return f"none: model.attention = {cfg.attention}"
    choose = getattr(torch, "_fused_sdp_choice", None)
    shape = (batch_size, cfg.n_head, cfg.block_size, cfg.head_size)
    q = torch.empty(*shape, device=device, dtype=dtype)
    scale = cfg.head_size**-0.5 if cfg.scaled else 1.0
    try:
        picked = SDPBackend(choose(q, q, q, None, cfg.dropout, cfg.causal, scale=scale))
    except Exception:  # no such function, or one that takes other arguments
        return "unknown: this torch does not say"
    return KERNELS.get(picked, picked.name.lower())
