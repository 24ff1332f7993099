"""harness/experiments/profiling.py: the CPU memory tracker on known allocations, and the CUDA
allocator's figures read where they exist (faked here: this code runs on a GPU only there)."""

from pathlib import Path

import torch

from harness.experiments.profiling import PeakMemory, peak_memory_bytes
from harness.training.budget import device_memory_bytes

MiB = 2**20


# 1. PeakMemory counts what is allocated inside it, once, until it is freed


def test_tracker_sees_a_known_allocation():
    with PeakMemory() as tracker:
        x = torch.empty(MiB, dtype=torch.uint8)
        assert tracker.live == MiB
        y = x.view(1024, 1024)[:10]  # a view shares the storage: not a second MiB
        x.add_(1)  # in place: nothing new
        assert tracker.live == MiB
        del x, y
        assert tracker.live == 0, "freeing the storage should subtract it"
    assert tracker.peak == MiB


def test_tracker_peak_of_temporaries():
    a = torch.randn(256, 256)  # 256 KiB, allocated before entering: baseline, not counted
    with PeakMemory() as tracker:
        for _ in range(10):
            b = a * 2  # each 256 KiB result replaces the previous one
        del b
        view = a.view(-1)[:5]  # a view of a baseline tensor is not an allocation
    assert view.numel() == 5
    assert 256 * 1024 <= tracker.peak <= 2 * 256 * 1024, (
        f"peak {tracker.peak} bytes, expected one or two live results"
    )


def test_tracker_tiny_computation_is_small():
    a = torch.randn(10)
    with PeakMemory() as tracker:
        b = (a * 2 + 1).sum()
    assert b.numel() == 1
    assert 0 < tracker.peak <= 200, f"peak {tracker.peak} bytes for a few 10-element tensors"


def test_tracker_counts_backward():
    w = torch.randn(512, 512, requires_grad=True)  # 1 MiB
    with PeakMemory() as tracker:
        (w @ w).sum().backward()
    assert tracker.peak >= 2 * MiB, (
        f"peak {tracker.peak / MiB:.2f} MiB: w @ w and w.grad are 1 MiB each"
    )


# 2. On CUDA the allocator counts; elsewhere the tracker does, and the machine's RAM is the device's
# memory


def test_on_cuda_the_peak_is_the_allocator_s_above_what_was_allocated_before(monkeypatch):
    """The CUDA branch's arithmetic, its calls faked: peak = max_memory_allocated after fn -
    memory_allocated before, with the device synchronised first and the peak counter reset, so that
    earlier steps' peaks do not count."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("sync"))
    monkeypatch.setattr(
        torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset")
    )
    # weights and optimizer state
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 300 * MiB)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 1324 * MiB)
    assert peak_memory_bytes(lambda: calls.append("step"), torch.device("cuda")) == 1024 * MiB
    assert calls == ["sync", "reset", "step", "sync"]


def test_the_device_s_memory_is_the_card_s_on_cuda_and_the_ram_elsewhere(monkeypatch):
    # (free, total)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * 2**30, 80 * 2**30))
    # the card's total: what a step may use
    assert device_memory_bytes(torch.device("cuda")) == 80 * 2**30
    ram = device_memory_bytes(torch.device("cpu"))
    meminfo = Path("/proc/meminfo")  # Linux's own count, in kB
    if meminfo.is_file():
        total_kb = int(
            next(
                line for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:")
            ).split()[1]
        )
        # sysconf's pages against the kernel's count
        assert ram is not None and abs(ram - total_kb * 1024) < 0.05 * ram
    # elsewhere: a machine's RAM, or None where the OS does not say
    assert ram is None or ram > 2**28


def test_on_a_cpu_the_tracker_counts_without_cuda_s_allocator(monkeypatch):
    # never asked on a CPU
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 1 / 0)
    assert (
        peak_memory_bytes(lambda: torch.empty(MiB, dtype=torch.uint8), torch.device("cpu")) == MiB
    )
