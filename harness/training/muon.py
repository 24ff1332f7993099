"""torch.optim.Muon with a choice of dtype for Newton-Schulz: CPUs without bfloat16 units and MPS
emulate the library's bfloat16, several times slower than float32. In bfloat16, the library's bits.
"""

import math

import torch

MUON_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def newton_schulz_dtype(choice: str, device: torch.device) -> torch.dtype:
    """ "auto": bfloat16 on CUDA and on CPUs with bfloat16 units."""
    if choice != "auto":
        return MUON_DTYPES[choice]
    if device.type == "cuda" or (device.type == "cpu" and has_bf16_units()):
        return torch.bfloat16
    return torch.float32


def has_bf16_units() -> bool:
    """By torch's private probes; False if a release breaks them (float32 is only slower)."""
    names = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    probes = [getattr(torch.cpu, name, None) for name in names]
    try:
        return any(probe() for probe in probes if callable(probe))
    except Exception:
        return False


def adjusted_lr(lr: float, rule: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's `adjust_lr_fn` rules, written out: a release may move its helper."""
    rows, cols = shape[:2]
    if rule in (None, "original"):
        ratio = math.sqrt(max(1, rows / cols))
    elif rule == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, cols))
    else:
        ratio = 1.0
    return lr * ratio  # the ratio first: the library's rounding


def zeropower_via_newtonschulz(
    grad: torch.Tensor,
    ns_coefficients: tuple[float, float, float],
    ns_steps: int,
    eps: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """torch.optim.Muon's Newton-Schulz in `dtype`, of a matrix or a stack: the iteration pushes
    every singular value towards 1, so each direction moves by a similar amount."""
    a, b, c = ns_coefficients
    x = grad.to(dtype).reshape(-1, *grad.shape[-2:])  # (N, rows, cols)
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    # Frobenius norm 1 bounds the spectral norm by 1; out of place: x may be the caller's tensor
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.mT  # (N, rows, rows)
        gram_update = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b X X^T + c (X X^T)^2
        x = torch.baddbmm(x, gram_update, x, beta=a)  # a X + (b X X^T + c (X X^T)^2) X
    return (x.mT if tall else x).reshape(grad.shape)


class Muon(torch.optim.Muon):
    def __init__(self, params, *args, ns_dtype: torch.dtype = torch.bfloat16, **kwargs) -> None:
        super().__init__(params, *args, **kwargs)
        if ns_dtype not in MUON_DTYPES.values():
            choices = ", ".join(map(str, MUON_DTYPES.values()))
            raise ValueError(f"ns_dtype must be one of {choices}, got {ns_dtype}")
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            by_shape = {}  # shape -> [(param, its update)]
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(grad)
                buf = state["momentum_buffer"]
                buf.lerp_(grad, 1 - momentum)
                by_shape.setdefault(param.shape, []).append(
                    (param, grad.lerp(buf, momentum) if group["nesterov"] else buf)
                )
            # the library orthogonalises one matrix at a time; the same bits, stacked
            for shape, pairs in by_shape.items():
                stack = torch.stack([update for _, update in pairs])
                orthogonal = zeropower_via_newtonschulz(
                    stack, group["ns_coefficients"], group["ns_steps"], group["eps"], self.ns_dtype
                )
                step_size = adjusted_lr(lr, group["adjust_lr_fn"], shape)
                for (param, _), update in zip(pairs, orthogonal, strict=True):
                    param.mul_(1 - lr * group["weight_decay"])
                    param.add_(update, alpha=-step_size)
