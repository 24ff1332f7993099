"""What a saturated softmax lets through: the gradients at the attention scores and at the query and
key weights, the --no-scale ablation's other side. A softmax row passes its gradient g back as
w * (g - sum(w * g)), which vanishes as the row w approaches one-hot.
"""

import math

import torch

from model.gpt import GPT, lm_loss
from model.measurements import SATURATED, row_max, visible_counts


def qk_grad_norm(model: GPT) -> float:
    """Norm of the gradients on every layer's query and key projections, after a backward pass: what
    the softmax lets through to the scores, times the scale (D**-0.5, or 1 without it)."""
    squares = 0.0
    for block in model.blocks:
        grad = block.attn.qkv.weight.grad
        if grad is not None:
            squares += grad[block.attn.query_key].float().pow(2).sum().item()
    return math.sqrt(squares)


def score_gradients(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """One forward and backward pass on x, y (B, T) through the readable path. score_grad: the norm
    of the gradient at the scores over every layer, head and row; saturated_row_grad and
    other_row_grad: its root-mean-square per row over the saturated rows (NaN if none) and over the
    rest; qk_grad: qk_grad_norm after the same pass."""
    model.zero_grad(set_to_none=True)
    h, weights = model.embed(x), []
    for block in model.blocks:
        h, w = block(h, return_weights=True)  # (B, T, C), (B, H, T, T)
        weights.append(w)
    loss = lm_loss(model.lm_head(model.ln_f(h)), y)
    grads = torch.autograd.grad(loss, weights, retain_graph=True)  # dL/dw per layer, (B, H, T, T)
    loss.backward()
    keep = visible_counts(x.shape[1], x.shape[1], model.cfg.causal) > 1
    rows = torch.cat(
        [
            (w * (g - (w * g).sum(-1, keepdim=True))).pow(2).sum(-1)[..., keep].flatten()
            for w, g in zip(weights, grads, strict=True)
        ]
    )
    saturated = torch.cat([(row_max(w, model.cfg.causal) > SATURATED).flatten() for w in weights])
    rms = {
        name: rows[chosen].mean().sqrt().item()
        for name, chosen in (("saturated_row_grad", saturated), ("other_row_grad", ~saturated))
    }
    return {
        "score_grad": rows.sum().sqrt().item(),
        **rms,
        "qk_grad": qk_grad_norm(model),
        "loss": loss.item(),
    }
