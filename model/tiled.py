"""Tiled attention: attention()'s math in attention.py, without ever holding the (T, S) weights.

Shape legend as in attention.py (B, T, C, H, D, V, S), plus two tile sizes:
    Tq  queries in one tile (at most `tile`)
    Sk  keys in one tile (at most `tile`)

This is the idea behind FlashAttention, in plain PyTorch: readable and light on memory, but
slower than torch's fused kernel (sdpa), since every tile is a few small ops launched from Python.
"""

import torch
import torch.nn as nn


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    dropout: nn.Module | None = None,
    tile: int = 256,
    softcap: float = 0.0,
    sink: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale, masked) @ v, computed one (Tq, Sk) tile of scores at a time.

    The online softmax: for one query row, walk over the key tiles keeping three running values,
    the largest score m seen so far, the sum denom of exp(score - m), and the sum acc of
    exp(score - m) * value. When a tile raises the maximum from m to m_new, everything summed so
    far was measured against the old m, so denom and acc are multiplied by exp(m - m_new) before
    the tile's own terms are added. After the last tile, acc / denom is softmax(scores) @ v;
    subtracting the maximum only keeps exp() from overflowing. Memory beyond q, k, v and the
    output is a few (..., Tq, Sk) tiles instead of the (..., T, S) scores and weights.

    The mask is attention()'s, read one tile at a time: a key tile hidden from every query of a
    query tile (the future under the causal mask, the past behind a window) is skipped, and a
    tile every query sees needs no mask. Dropout, when given, drops the unnormalised tile
    weights, while denom sums them undropped: the same as dropping the normalised weights.

    Args:
        q: (..., T, D) queries; k, v: (..., S, D) keys and values.
        mask: (T, S) boolean, True where a query may look (attention.causal_mask), or None.
        scale: D**-0.5, or 1.0 for --no-scale.
        tile: queries and keys per tile.
        softcap: each tile's scores squashed into (-softcap, softcap); 0 for none.
        sink: one logit per head (H,) that joins each row's softmax (as in attention()): the running
            max starts at it and the denominator at its exp, with nothing added to acc.
    Returns:
        y: (..., T, D), equal to attention()'s y up to float rounding.
    """
    T, S = q.shape[-2], k.shape[-2]
    outputs = []
    for q0 in range(0, T, tile):
        qt = q[..., q0 : q0 + tile, :]  # (..., T, D) -> (..., Tq, D)
        m = torch.full_like(qt[..., :1], float("-inf"))  # (..., Tq, 1): running max of each row
        denom = torch.zeros_like(m)  # (..., Tq, 1): running sum of exp(score - m)
        acc = torch.zeros_like(qt)  # (..., Tq, D): running sum of exp(score - m) * value
        if sink is not None:
            logit = sink.view(-1, 1, 1).to(m.dtype).expand_as(m)  # (H,) -> (..., Tq, 1)
            m = logit.detach()  # the sink's is the first score seen; m only steadies exp()
            denom = (logit - m).exp()  # exp(sink - m) = 1, through which the sink learns
        for k0 in range(0, S, tile):
            seen = None if mask is None else mask[q0 : q0 + tile, k0 : k0 + tile]  # (Tq, Sk)
            if seen is not None and not seen.any():
                continue  # every key here is hidden from every query: skip the tile
            kt, vt = k[..., k0 : k0 + tile, :], v[..., k0 : k0 + tile, :]  # (..., Sk, D) each
            scores = (qt @ kt.transpose(-2, -1)) * scale  # (..., Tq, D) @ (..., D, Sk)
            if softcap:
                scores = softcap * torch.tanh(scores / softcap)  # (..., Tq, Sk)
            if seen is not None and not seen.all():  # some key here is hidden from some query
                scores = scores.masked_fill(~seen, float("-inf"))  # (..., Tq, Sk)
            # A row whose every key so far was hidden (behind a window) keeps m = -inf: exp() is
            # then taken from the lowest float.
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (..., Tq, 1)
            m_new = m_new.clamp(min=torch.finfo(scores.dtype).min)
            p = (scores - m_new).exp()  # (..., Tq, Sk): this tile's weights, not yet normalised
            rescale = (m - m_new).exp()  # (..., Tq, 1): moves earlier sums onto the new maximum
            denom = denom * rescale + p.sum(dim=-1, keepdim=True)
            dropped = dropout(p) if dropout is not None else p
            acc = acc * rescale + dropped @ vt  # (..., Tq, Sk) @ (..., Sk, D) -> (..., Tq, D)
            m = m_new
        outputs.append(acc / denom)  # (..., Tq, D): every row normalised once, at the end
    return torch.cat(outputs, dim=-2)  # n_tiles x (..., Tq, D) -> (..., T, D)
