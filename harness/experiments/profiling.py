"""Measuring tools for the benchmark: timers that wait for the device, peak memory (CUDA's allocator, or a
tracker of tensor storage on the CPU, where torch keeps no allocator statistics), the machine, and a matmul peak."""

import os
import platform
import time
import weakref
from functools import partial

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.training.budget import sync, timed


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


def machine_line(r: dict) -> str:
    """The line above a table of timings: the machine, the device, torch's threads and version, and the load on the machine."""
    load = r.get("load_avg_1min")
    return f"**{r['machine']}** ({r['device']}), {r['torch_threads']} torch threads, torch {r['torch_version']}" + (
        f", load average {load:.1f} on {os.cpu_count()} cores" if load is not None else ""
    )


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
