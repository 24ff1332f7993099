"""What a saturated softmax lets through: the gradients at the attention scores and at the query and
key weights.

The --no-scale ablation's other side. A softmax row passes its gradient back as w * (g - sum(w *
g)), which vanishes as the row w approaches one-hot: `score_gradients` measures it at the scores,
per saturated row and per other row, and `qk_grad_norm` what reaches the weights that make the
scores (logged as grad/qk_norm).
"""

import math

import torch

from model.gpt import GPT, lm_loss
from model.measurements import SATURATED, row_max, visible_counts


def qk_grad_norm(model: GPT) -> float:
    """Norm of the gradients that reach the query and key projections of every layer (after a
    backward pass).

    Two factors meet here: what the softmax lets through to the scores (score_gradients), and the
    scale, which multiplies every score's sensitivity to q and k by D**-0.5 (1 without it).
    """
    squares = 0.0
    for block in model.blocks:
        grad = block.attn.qkv.weight.grad
        if grad is not None:
            squares += grad[block.attn.query_key].float().pow(2).sum().item()
    return math.sqrt(squares)


def score_gradients(model: GPT, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """One forward and backward pass on inputs x and targets y (B, T) through the readable path;
    what reaches the scores.

    A row's softmax turns the gradient g on its weights w into w * (g - sum(w * g)) at its input
    (the scores after the scale), which vanishes as w approaches one-hot, whatever g is. score_grad:
    the norm of that gradient over every layer, head and row (rows that see one position left out);
    saturated_row_grad and
    other_row_grad: its root-mean-square per row over the saturated rows (largest weight above 0.99,
    NaN if none) and over the rest; qk_grad: qk_grad_norm after the same pass, on the query and key
    weights.
    """
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
    # as saturated_fraction counts them
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
