"""torch.optim.Muon with a choice of dtype for its Newton-Schulz iterations.

The library casts every update to bfloat16 before orthogonalising it. That is the fast choice on a
GPU and on a CPU with bfloat16 arithmetic (AVX512-BF16 or AMX), but a CPU without it emulates
bfloat16 matmuls several times slower than it runs float32 ones, and Apple's MPS has the same
problem. `Muon` below is the library's optimizer with one change: the dtype of Newton-Schulz
(`ns_dtype`). With bfloat16 it computes exactly what torch.optim.Muon computes, bit for bit
(tests/test_muon.py checks it, so a torch upgrade that changes the algorithm fails there).

Everything else is the library's: constructor, validation, parameter groups, the state
(`momentum_buffer`, so a torch.optim.Muon state_dict loads here and back), the learning-rate
adjustment. The dtype is an attribute of the optimizer, not of its groups: it belongs to the
machine, not to the checkpoint.
"""

import torch
from torch.optim._muon import _adjust_lr
from torch.optim.optimizer import _to_scalar

MUON_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}  # train.muon_dtype's values besides "auto"


def newton_schulz_dtype(choice: str, device: torch.device) -> torch.dtype:
    """train.muon_dtype -> the dtype Newton-Schulz runs in on `device`.

    "auto": bfloat16 on CUDA and on CPUs that do bfloat16 arithmetic in hardware (AVX512-BF16 or AMX,
    as torch reports them), float32 everywhere else (CPUs without those units, Apple MPS), where
    bfloat16 matmuls are emulated. It depends only on the machine, so identical seeds still give
    identical losses there.
    """
    if choice != "auto":
        return MUON_DTYPES[choice]
    if device.type == "cuda":
        return torch.bfloat16
    if device.type == "cpu" and (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()):
        return torch.bfloat16
    return torch.float32


def zeropower_via_newtonschulz(
    grad: torch.Tensor, ns_coefficients: tuple[float, float, float], ns_steps: int, eps: float, dtype: torch.dtype
) -> torch.Tensor:
    """torch.optim._muon._zeropower_via_newtonschulz, in `dtype` instead of bfloat16 always.

    The quintic iteration pushes every singular value of the (normalised) update towards 1, so the
    step moves each direction of the matrix by a similar amount. It works on the wide orientation
    (rows <= columns), where the Gram matrix X X^T is the smaller one.

    The cast may return the caller's own tensor (`grad.to(dtype)` does when grad is already in
    dtype: the momentum buffer itself when nesterov is off), so the normalisation divides out of
    place; the library's in-place `div_` gives the same bits on its own copy.
    """
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if grad.dim() != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    a, b, c = ns_coefficients
    tall = grad.size(0) > grad.size(1)
    x = grad.to(dtype)
    if tall:
        x = x.T  # (rows, cols) -> (cols, rows): the wide orientation
    x = x / x.norm().clamp(min=eps)  # Frobenius norm 1 bounds the spectral norm by 1
    for _ in range(ns_steps):
        gram = x @ x.T
        gram_update = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b X X^T + c (X X^T)^2
        x = torch.addmm(x, gram_update, x, beta=a)  # a X + (b X X^T + c (X X^T)^2) X
    return x.T if tall else x


class Muon(torch.optim.Muon):
    """torch.optim.Muon whose Newton-Schulz runs in `ns_dtype` (default bfloat16, the library's own).

    Takes every argument torch.optim.Muon takes, plus `ns_dtype`. Only `step` is overridden: the
    library's step calls its Newton-Schulz with the bfloat16 cast inside, and offers no way in.
    """

    def __init__(self, params, *args, ns_dtype: torch.dtype = torch.bfloat16, **kwargs) -> None:
        super().__init__(params, *args, **kwargs)
        if ns_dtype not in MUON_DTYPES.values():
            raise ValueError(f"ns_dtype must be one of {', '.join(map(str, MUON_DTYPES.values()))}, got {ns_dtype}")
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure=None):
        """One optimization step, as torch.optim.Muon's (its `_single_tensor_muon`), with Newton-Schulz in ns_dtype."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params, grads, bufs = [], [], []
            self._init_group(group, params, grads, bufs)
            lr, momentum = _to_scalar(group["lr"]), group["momentum"]
            for param, grad, buf in zip(params, grads, bufs, strict=True):
                if grad.dim() != 2:
                    raise ValueError("Param gradient must be a 2D matrix")
                buf.lerp_(grad, 1 - momentum)
                update = grad.lerp(buf, momentum) if group["nesterov"] else buf
                update = zeropower_via_newtonschulz(update, group["ns_coefficients"], group["ns_steps"], group["eps"], self.ns_dtype)
                param.mul_(1 - lr * group["weight_decay"])  # decoupled weight decay
                param.add_(update, alpha=-_adjust_lr(lr, group["adjust_lr_fn"], param.shape))
        return loss
