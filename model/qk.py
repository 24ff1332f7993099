"""What happens to queries and keys before the scores: QK-norm (a cure for a saturated softmax) and
RoPE (rotary positions). Shape legend as in attention.py; D/2 pairs of components of a query or key,
each turned by RoPE through its own angle.
"""

import torch

# RoPE's frequencies: pair i of D/2 turns by ROPE_BASE ** (-2i / D) radians per position
ROPE_BASE = 10000.0
QK_NORM_EPS = 1e-5  # keeps an all-zero query or key finite under QK-norm


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    """QK-norm: x (..., D) divided by its root mean square over D: each query and key at unit RMS.

    A score is then at most D times the scale however large the query and key weights grow, so a
    learning rate that inflates them cannot push the softmax into one-hot rows. There is no learned
    gain: measured on the char preset over three seeds (python -m tools.qk_gain), a per-dimension
    gain (as OLMo 2 and Qwen 3 have) ended at a higher val loss at the preset's learning rate and no
    lower at ten times it, and let the largest scores grow again (docs/experiment.md).
    """
    x32 = x.float()  # float32 under a bfloat16 autocast too; the result goes back to x's dtype
    inverse_rms = torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + QK_NORM_EPS)  # (..., 1)
    return (x32 * inverse_rms).to(x.dtype)  # (..., D) * (..., 1)


def rotate(x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """RoPE: turn pair (x[..., 2i], x[..., 2i + 1]) at position p by p * ROPE_BASE ** (-2i / D).

    x (..., T, D) holds positions start .. start + T - 1. A query at t and a key at s then meet in
    the score at the angle (t - s) * ROPE_BASE ** (-2i / D) per pair: the score depends on their
    distance, not on where they are, and any position can be turned (no table ends at block_size).
    Read as complex numbers, each pair is multiplied by e^(i * p * theta_i). The angles are computed
    for the positions asked, never stored.
    """
    T, D = x.shape[-2:]
    p = torch.arange(start, start + T, device=x.device, dtype=torch.float32)  # (T,) positions
    pairs = torch.arange(0, D, 2, device=x.device, dtype=torch.float32)  # (D/2,): 2i
    theta = ROPE_BASE ** (-pairs / D)  # (D/2,): the first pair turns fastest
    angle = p[:, None] * theta[None, :]  # (T, 1) * (1, D/2) -> (T, D/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]  # (..., T, D) -> 2 x (..., T, D/2)
    turned = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, D/2, 2)
    return turned.flatten(-2).to(x.dtype)  # (..., T, D/2, 2) -> (..., T, D)


def prepare(
    q: torch.Tensor, k: torch.Tensor, qk_norm: bool, rope: bool, start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys (..., T, D) as the scores take them: normalised, then turned (OLMo 2's
    and Qwen 3's order)."""
    if qk_norm:
        q, k = rms_norm(q), rms_norm(k)
    if rope:
        q, k = rotate(q, start), rotate(k, start)
    return q, k
