"""Shared test helpers. Import them with `from conftest import assert_close` (pytest puts tests/ on sys.path)."""

import torch


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float, msg: str = "") -> None:
    """Assert same shape and max |a - b| <= atol; on failure report the max and mean absolute difference."""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert a.shape == b.shape, f"{msg} shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}"
    diff = (a.detach().double() - b.detach().double()).abs()
    max_diff, mean_diff = diff.max().item(), diff.mean().item()
    assert max_diff <= atol, f"{msg} max abs diff {max_diff:.3e} > atol {atol:.1e} (mean abs diff {mean_diff:.3e})"
