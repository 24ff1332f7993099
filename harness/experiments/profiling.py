"""bench.py's measuring tools: train.py's step, peak memory, the machine, MFU's peak."""

import contextlib
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
from torch.utils._pytree import tree_leaves

from harness.training.budget import sync, timed
from harness.training.runtime import Runtime
from harness.training.step import check_finite, micro_steps
from model import ModelConfig

# (pattern, dense bf16 TFLOP/s, with sparsity, source): the first pattern found in the device's name
# wins, so specific names first.
BF16_PEAKS = [
    (r"H200 NVL", 835, "1,671", "H200 NVL datasheet"),
    (r"H200", 989, "1,979", "H200 datasheet (SXM)"),
    (r"H100 NVL", 835, "1,671", "H100 NVL datasheet"),
    (r"H100 PCIe", 756, "1,513", "H100 datasheet (PCIe)"),
    (r"H100", 989, "1,979", "H100 datasheet (SXM)"),
    (r"A100", 312, "624", "A100 datasheet"),
    (r"L40S", 362, "733", "L40S datasheet"),
    (r"L40\b", 181, "362", "L40 datasheet"),
    (r"\bL4\b", 121, "242", "L4 datasheet"),
    (r"\bA10\b", 125, "250", "A10 datasheet"),
    (r"RTX 4090$", 165, "330", "Ada architecture whitepaper, FP32 accumulate"),
    (r"RTX 3090$", 71, "142", "GA102 (Ampere) whitepaper, FP32 accumulate"),
]
KERNELS = {
    SDPBackend.FLASH_ATTENTION: "flash",
    SDPBackend.EFFICIENT_ATTENTION: "memory-efficient",
    SDPBackend.CUDNN_ATTENTION: "cuDNN",
    SDPBackend.MATH: "math (the (T, T) weights held in memory)",
}
PEAK_SECONDS = 3.0  # of square matmuls timed for MFU's denominator, where no datasheet gives it


class PeakMemory(TorchDispatchMode):
    """Peak bytes of tensor storage allocated while active, where torch keeps no statistics (the
    CPU). A kernel's scratch space inside one op stays invisible."""

    def __init__(self) -> None:
        super().__init__()
        self.live, self.peak, self.counted = 0, 0, set()  # storages not yet freed

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if torch.is_tensor(t)
        }
        for storage in (t.untyped_storage() for t in tree_leaves(out) if torch.is_tensor(t)):
            key, nbytes = storage._cdata, storage.nbytes()
            if key not in inputs and key not in self.counted:
                self.counted.add(key)
                self.live += nbytes
                self.peak = max(self.peak, self.live)
                # storage objects live as long as the memory
                weakref.finalize(storage, self.release, key, nbytes)
        return out

    def release(self, key: int, nbytes: int) -> None:
        self.counted.discard(key)
        self.live -= nbytes


def training_step(
    step_model, optimizer, micro_batches: list, runtime: Runtime, grad_clip: float
) -> tuple[torch.Tensor, float]:
    """train.py's step, line for line (tests hold the two equal); returns the mean loss and the
    clock as the update starts."""
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


def machine_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load_average() -> float | None:
    with contextlib.suppress(OSError):
        return os.getloadavg()[0]
    return None


def machine_facts(device: torch.device) -> dict:
    return {
        "machine": machine_name(device),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "load_avg_1min": load_average(),
    }


def machine_line(r: dict) -> str:
    line = f"**{r['machine']}** ({r['device']}), {r['torch_threads']} torch threads, torch "
    line += r["torch_version"]
    if r.get("load_avg_1min") is not None:
        line += f", load average {r['load_avg_1min']:.1f} on {os.cpu_count()} cores"
    return line


def matmul_peak_flops(
    device: torch.device, dtype: torch.dtype, sizes=(512, 1024, 2048), seconds: float = PEAK_SECONDS
) -> float:
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        a @ b  # warm-up
        deadline = time.perf_counter() + seconds / len(sizes)
        while time.perf_counter() < deadline:
            best = max(best, 2 * n**3 / timed(partial(torch.matmul, a, b), device)[0])
    return best


def card_peak(name: str) -> tuple[float, str] | None:
    for pattern, tflops, sparse, source in BF16_PEAKS:
        if re.search(pattern, name):
            return tflops * 1e12, f"NVIDIA {source}, {sparse} with sparsity"
    return None


def peak_flops(device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """MFU's denominator and its source: a CUDA card's datasheet under bf16, else measured."""
    source = "measured here"
    if device.type == "cuda" and dtype == torch.bfloat16:
        name = machine_name(device)
        if found := card_peak(name):
            return found
        source += f": {name} is not in the table of cards' peaks"
    return matmul_peak_flops(device, dtype), source


def attention_kernel(
    cfg: ModelConfig, batch_size: int, device: torch.device, dtype: torch.dtype
) -> str:
    """With "sdpa", torch's pick for the step's inputs (the private torch._fused_sdp_choice)."""
    if cfg.attention != "sdpa":
        return f"none: model.attention = {cfg.attention}"
    shape = (batch_size, cfg.n_head, cfg.block_size, cfg.head_size)
    q = torch.empty(*shape, device=device, dtype=dtype)
    scale = cfg.head_size**-0.5 if cfg.scaled else 1.0
    try:
        picked = torch._fused_sdp_choice(q, q, q, None, cfg.dropout, cfg.causal, scale=scale)
        picked = SDPBackend(picked)
    except Exception:  # no such function, or one that takes other arguments
        return "unknown: this torch does not say"
    return KERNELS.get(picked, picked.name.lower())
