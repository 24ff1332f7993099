"""Attention, the heart of the GPT, written to be read top to bottom.

Shape legend, used in every comment below:
    B  batch size
    T  time: the position of a token in its block (T <= block_size with learned positions)
    C  model width, n_embd
    H  number of heads
    D  head size (C = H * D)
    V  vocabulary size
    S  key length: the positions a query may look at (S = T, or more with a KV cache)
    D/2  pairs of components of a query or key, each turned by RoPE through its own angle

Each token asks a question (its query q), advertises what it holds (its key k) and offers
a message (its value v). A token's output is the average of the values of the tokens it may
see, weighted by how well their keys answer its query. Two cures for a saturated softmax (QK-norm,
the softcap) and rotary positions (RoPE) change q, k or the scores the same way on every path.
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import check_heads, check_length
from model.tiled import tiled_attention


def attention_scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, scale: float, softcap: float = 0.0) -> torch.Tensor:
    """How well each key answers each query: (..., T, D), (..., S, D) -> (..., T, S), masked with -inf.

    Scores are multiplied by D**-0.5 so that their variance stays near 1 when q and k have
    unit-variance components; without it they grow with D and the softmax saturates into
    near one-hot rows (the --no-scale ablation passes scale=1.0). A softcap C then squashes each score
    into (-C, C), small ones nearly unchanged (Gemma 2's cap, after the scale, before the mask).
    Masked positions get -inf *before* the softmax: exactly zero weight, and every row still sums to 1.
    """
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T, D) @ (..., D, S) -> (..., T, S)
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)  # (..., T, S), each in (-softcap, softcap)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # the future is -inf before softmax
    return scores


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    dropout: nn.Module | None = None,
    softcap: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, the whole mechanism: scores, softmax, weighted sum of values.

    Args:
        q: (..., T, D) queries; k, v: (..., S, D) keys and values (S = T without a cache).
        mask: (T, S) boolean, True where a query may look; None lets every token see all.
        scale: D**-0.5, or 1.0 for the unscaled ablation.
        dropout: applied to the weights during training, or None.
        softcap: the cap on the scores (see attention_scores), or 0 for none.
    Returns:
        y: (..., T, D) the mixed values, and weights: (..., T, S), each row summing to 1.
    """
    scores = attention_scores(q, k, mask, scale, softcap)  # (..., T, S)
    weights = scores.softmax(dim=-1)  # (..., T, S): each row sums to 1
    dropped = dropout(weights) if dropout is not None else weights
    y = dropped @ v  # (..., T, S) @ (..., S, D) -> (..., T, D)
    return y, weights


def causal_mask(T: int, S: int, device=None) -> torch.Tensor:
    """(T, S) boolean, True where a query may look: T queries that come after S - T cached positions see
    every key up to their own position. Row t is True up to column S - T + t (with S = T: lower-triangular).

    It is built when a path asks for it, not stored: a model with a long block_size then costs
    nothing for masks, and the paths that need one pay T x S booleans beside their T x S scores.
    """
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


ROPE_BASE = 10000.0  # RoPE's frequencies: pair i of D/2 turns by ROPE_BASE ** (-2i / D) radians per position
QK_NORM_EPS = 1e-5  # keeps an all-zero query or key finite under QK-norm


def rms_norm(x: torch.Tensor) -> torch.Tensor:
    """QK-norm: x (..., D) divided by its root mean square over D, so each query and key comes out at unit RMS.

    A score is then at most D times the scale however large the query and key weights grow, so a learning rate that
    inflates them cannot push the softmax into one-hot rows. There is no learned gain: measured on the char preset over
    three seeds (python -m tools.qk_gain), a per-dimension gain (as OLMo 2 and Qwen 3 have) ended at a higher val loss at
    the preset's learning rate and no lower at ten times it, and let the largest scores grow again (docs/experiment.md).
    """
    x32 = x.float()  # float32 under a bfloat16 autocast too; the result goes back to x's dtype
    return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + QK_NORM_EPS)).to(x.dtype)  # (..., D) * (..., 1)


def rotate(x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """RoPE: turn each adjacent pair (x[..., 2i], x[..., 2i + 1]) of the vector at position p by the angle p * ROPE_BASE ** (-2i / D).

    x (..., T, D) holds positions start .. start + T - 1. A query at t and a key at s then meet in the score at
    the angle (t - s) * ROPE_BASE ** (-2i / D) per pair: the score depends on their distance, not on where they
    are, and any position can be turned (no table ends at block_size). Read as complex numbers, each pair is
    multiplied by e^(i * p * theta_i). The angles are computed for the positions asked, never stored.
    """
    T, D = x.shape[-2:]
    p = torch.arange(start, start + T, device=x.device, dtype=torch.float32)  # (T,) positions
    theta = ROPE_BASE ** (-torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D)  # (D/2,): the first pair turns fastest
    angle = p[:, None] * theta[None, :]  # (T, 1) * (1, D/2) -> (T, D/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]  # (..., T, D) -> 2 x (..., T, D/2): each pair's two components
    turned = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, D/2, 2): each pair turned
    return turned.flatten(-2).to(x.dtype)  # (..., T, D/2, 2) -> (..., T, D): the pairs side by side again


def prepare(q: torch.Tensor, k: torch.Tensor, qk_norm: bool, rope: bool, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys (..., T, D) as the scores take them: normalised (QK-norm), then, as in OLMo 2 and Qwen 3, turned (RoPE)."""
    if qk_norm:
        q, k = rms_norm(q), rms_norm(k)
    if rope:
        q, k = rotate(q, start), rotate(k, start)
    return q, k


class Head(nn.Module):
    """One head of attention with its own query, key and value projections, as the lessons draw it."""

    def __init__(self, n_embd: int, head_size: int, block_size: int | None, dropout: float = 0.0, causal: bool = True,
                 scaled: bool = True, qk_norm: bool = False, softcap: float = 0.0, rope: bool = False):  # fmt: skip
        super().__init__()
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.block_size, self.causal, self.dropout_p = block_size, causal, dropout
        self.scale = head_size**-0.5 if scaled else 1.0
        self.qk_norm, self.softcap, self.rope = qk_norm, softcap, rope
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        B, T, C = x.shape
        check_length(T, self.block_size)
        q, k, v = self.query(x), self.key(x), self.value(x)  # each (B, T, C) -> (B, T, D)
        q, k = prepare(q, k, self.qk_norm, self.rope)  # (B, T, D) each
        if return_weights or self.softcap:  # torch's fused kernel cannot cap scores
            mask = causal_mask(T, T, x.device) if self.causal else None
            y, weights = attention(q, k, v, mask, self.scale, self.attn_dropout, self.softcap)  # (B, T, D), (B, T, T)
            return (y, weights) if return_weights else y
        p = self.dropout_p if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal, scale=self.scale)


@dataclass
class KVCache:
    """One layer's keys and values so far, each (B, H, S, D), so a new token costs one position.

    Only a causal model can cache: there a position never sees later ones, so the keys and values of
    earlier positions (RoPE's keys turned to their own positions) stay the same when a token is appended.
    """

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new positions k, v (B, H, T, D); return every position so far, each (B, H, S, D)."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=2)  # (B, H, S - T, D) + (B, H, T, D) -> (B, H, S, D)
            self.v = torch.cat([self.v, v], dim=2)  # (B, H, S - T, D) + (B, H, T, D) -> (B, H, S, D)
        return self.k, self.v


class MultiHead(nn.Module):
    """H heads side by side, computed in one batched matmul, then merged and projected.

    This is H `Head`s concatenated (a test copies the weights across and checks it): the fused
    `qkv` layer holds every head's query, key and value projection in one matrix.
    The readable `attention()` runs when the weights are asked for, or when the config picks
    backend "manual"; "sdpa" is torch's fused kernel and "tiled" our online softmax over tiles
    (model/tiled.py): both run the same math without ever storing the (T, S) weights. All obey
    the same flags, so ablations and cures run at full speed too; torch's kernel cannot cap scores,
    so a capped model asked for "sdpa" runs the readable core (`core`), the faster one on a CPU.
    """

    def __init__(self, n_embd: int, n_head: int, block_size: int | None, dropout: float = 0.0, causal: bool = True,
                 scaled: bool = True, backend: str = "sdpa", qkv_bias: bool = False, qk_norm: bool = False,
                 softcap: float = 0.0, rope: bool = False):  # fmt: skip
        super().__init__()
        check_heads(n_embd, n_head)
        self.n_head, self.block_size, self.causal, self.backend = n_head, block_size, causal, backend
        self.core = "manual" if backend == "sdpa" and softcap else backend  # the core that runs
        self.scale = (n_embd // n_head) ** -0.5 if scaled else 1.0
        self.qk_norm, self.softcap, self.rope = qk_norm, softcap, rope
        # Every head's q, k and v in one matrix. The lessons' Head has no bias there; GPT-2 has
        # one, so its weights load with qkv_bias=True.
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=qkv_bias)
        self.query_key = slice(0, 2 * n_embd)  # qkv's rows that make queries and keys: their own init, their own gradient norm
        self.proj = nn.Linear(n_embd, n_embd)  # mixes what the heads found
        self.dropout_p = dropout
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def split_heads(self, x: torch.Tensor, start: int = 0, raw: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project x (B, T, C), at positions start .. start + T - 1, to queries, keys and values, each (B, H, T, D), ready for the
        core: every backend, the weights path, the KV cache and GPT.attention_probe take them from here. raw: as projected,
        before QK-norm and RoPE (the norms that grow with the weights, which measurements.qk_norms reads)."""
        B, T, C = x.shape
        H, D = self.n_head, C // self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, 3C) -> 3 x (B, T, C)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, T, C) -> (B, H, T, D)
        k = k.view(B, T, H, D).transpose(1, 2)  # (B, T, C) -> (B, H, T, D)
        v = v.view(B, T, H, D).transpose(1, 2)  # (B, T, C) -> (B, H, T, D)
        return (q, k, v) if raw else (*prepare(q, k, self.qk_norm, self.rope, start), v)  # (B, H, T, D) each

    def mask(self, T: int, S: int | None = None) -> torch.Tensor | None:
        """The (T, S) causal mask for T queries after S - T cached positions (S defaults to T), or None for --no-mask."""
        S = T if S is None else S
        return causal_mask(T, S, self.qkv.weight.device) if self.causal else None

    def forward(self, x: torch.Tensor, return_weights: bool = False, cache: KVCache | None = None):
        """x (B, T, C) -> (B, T, C); with a cache, x holds the T positions after the cached ones."""
        B, T, C = x.shape
        past = len(cache) if cache is not None else 0
        S = past + T  # keys: the cached past, then these T positions
        check_length(S, self.block_size)
        if cache is not None and not self.causal:
            raise ValueError("a KV cache needs causal attention: without the mask each new token changes what earlier positions see")
        q, k, v = self.split_heads(x, start=past)  # each (B, H, T, D); RoPE turns them to positions past .. S - 1
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H, T, D) -> (B, H, S, D): cached keys keep their own positions' turn
        weights = None
        if return_weights or self.core == "manual":
            y, weights = attention(q, k, v, self.mask(T, S), self.scale, self.attn_dropout, self.softcap)  # (B, H, T, D), (B, H, T, S)
        elif self.core == "tiled":
            y = tiled_attention(q, k, v, self.causal, self.scale, self.attn_dropout, softcap=self.softcap)  # (B, H, T, D)
        else:
            p = self.dropout_p if self.training else 0.0
            # is_causal draws its triangle from the top-left corner, right only when S == T. After a
            # cached past, one new query may see every key; several get the last rows of the mask.
            mask = self.mask(T, S) if S > T > 1 else None
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=self.causal and S == T, scale=self.scale)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, C): heads side by side
        y = self.resid_dropout(self.proj(y))  # (B, T, C)
        return (y, weights) if return_weights else y
