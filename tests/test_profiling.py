"""harness/experiments/profiling.py: the CPU memory tracker on known allocations."""

import torch

from harness.experiments.profiling import PeakMemory

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
    assert 256 * 1024 <= tracker.peak <= 2 * 256 * 1024, f"peak {tracker.peak} bytes, expected one or two live results"


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
    assert tracker.peak >= 2 * MiB, f"peak {tracker.peak / MiB:.2f} MiB: w @ w and w.grad are 1 MiB each"
