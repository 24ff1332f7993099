"""Attention, the heart of the GPT, written to be read top to bottom.

Shape legend, used in every comment below:
    B  batch size
    T  time: the position of a token in its block (T <= block_size with learned positions)
    C  model width, n_embd
    H  number of heads
    D  head size (C = H * D)
    V  vocabulary size
    S  key length: the positions a query may look at (S = T, or more with a KV cache)

Each token asks a question (its query q), advertises what it holds (its key k) and offers a message
(its value v). A token's output is the average of the values of the tokens it may see, weighted by
how well their keys answer its query. Two cures for a saturated softmax (QK-norm, the softcap) and
rotary positions (RoPE) change q, k or the scores the same way on every path, and so do four designs
of shipped models (docs/variants.md): grouped-query heads, a sliding window, an output gate, a sink.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.config import check_heads, check_length
from model.qk import prepare
from model.sampling import KVCache
from model.tiled import tiled_attention


def attention_scores(
    q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, scale: float, softcap: float = 0.0
) -> torch.Tensor:
    """How well each key answers each query: (..., T, D), (..., S, D) -> (..., T, S).

    Scores are multiplied by D**-0.5 so that their variance stays near 1 when q and k have
    unit-variance components; without it they grow with D and the softmax saturates into near
    one-hot rows (the --no-scale ablation passes scale=1.0). A softcap C then squashes each score
    into (-C, C), small ones nearly unchanged (Gemma 2's cap, after the scale, before the mask).
    Masked positions get -inf *before* the softmax: exactly zero weight, and rows still sum to 1.
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
    sink: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, the whole mechanism: scores, softmax, weighted sum of values.

    Args:
        q: (..., T, D) queries; k, v: (..., S, D) keys and values (S = T without a cache).
        mask: (T, S) boolean, True where a query may look; None lets every token see all.
        scale: D**-0.5, or 1.0 for the unscaled ablation.
        dropout: applied to the weights during training, or None.
        softcap: the cap on the scores (see attention_scores), or 0 for none.
        sink: one learned logit per head, (H,) or a scalar, or None. It joins every row's softmax as
            one more column with no value, then is dropped: a head can put its weight nowhere
            instead of on some token (gpt-oss). A sink fixed at 0 is "softmax off by one": exp(s) /
            (1 + sum exp(s)).
    Returns:
        y: (..., T, D) the mixed values, and weights: (..., T, S), each row summing to 1 (less the
        sink's share).
    """
    scores = attention_scores(q, k, mask, scale, softcap)  # (..., T, S)
    if sink is None:
        weights = scores.softmax(dim=-1)  # (..., T, S): each row sums to 1
    else:
        column = sink.view(-1, 1, 1).expand(*scores.shape[:-1], 1)  # (H,) -> (..., T, 1)
        weights = torch.cat([scores, column], dim=-1).softmax(dim=-1)  # (..., T, S + 1)
        weights = weights[..., :-1]  # (..., T, S): the sink's column dropped
    dropped = dropout(weights) if dropout is not None else weights
    y = dropped @ v  # (..., T, S) @ (..., S, D) -> (..., T, D)
    return y, weights


def in_view(back: torch.Tensor, causal: bool = True, window: int = 0) -> torch.Tensor:
    """Which keys a query may look at, from how far back each lies (query minus key position).

    Causal: the past and itself (back >= 0). A window W (a sliding window, as Mistral's and
    gpt-oss's layers and Gemma 3's local ones have): only keys fewer than W positions back, the
    query itself and the W - 1 before it; without the causal mask, W positions on either side. Every
    path masks with it (torch's kernel draws the plain causal triangle itself).
    """
    if causal:
        seen = back >= 0  # the past and itself
    else:
        seen = torch.ones_like(back, dtype=torch.bool)  # --no-mask: the future too
    return seen & (back.abs() < window) if window else seen


def causal_mask(
    T: int, S: int, device=None, window: int = 0, causal: bool = True
) -> torch.Tensor | None:
    """(T, S) boolean, True where a query may look, for T queries after S - T cached positions.

    With the causal mask alone, row t is True up to column S - T + t (with S = T: lower-triangular).
    None when every key is in view (--no-mask without a window).

    It is built when a path asks for it, not stored: a model with a long block_size then costs
    nothing for masks, and the paths that need one pay T x S booleans beside their T x S scores.
    """
    if not causal and not window:
        return None
    # (T, 1) - (S,) -> (T, S)
    back = torch.arange(S - T, S, device=device)[:, None] - torch.arange(S, device=device)
    return in_view(back, causal, window)


class Head(nn.Module):
    """One head with its own query, key and value projections, as the lessons draw it."""

    def __init__(
        self,
        n_embd: int,
        head_size: int,
        block_size: int | None,
        dropout: float = 0.0,
        causal: bool = True,
        scaled: bool = True,
        qk_norm: bool = False,
        softcap: float = 0.0,
        rope: bool = False,
        window: int = 0,
        gate: bool = False,
        sink: bool = False,
    ):
        super().__init__()
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.block_size, self.dropout_p = block_size, dropout
        self.causal, self.window = causal, window  # causal=False is --no-mask
        self.scale = head_size**-0.5 if scaled else 1.0
        self.qk_norm, self.softcap, self.rope = qk_norm, softcap, rope
        # how much of each output channel gets through
        self.gate = nn.Linear(n_embd, head_size) if gate else None
        # the head's one logit for "nowhere"
        self.sink = nn.Parameter(torch.zeros(())) if sink else None
        self.attn_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        B, T, C = x.shape
        check_length(T, self.block_size)
        q, k, v = self.query(x), self.key(x), self.value(x)  # each (B, T, C) -> (B, T, D)
        q, k = prepare(q, k, self.qk_norm, self.rope)  # (B, T, D) each
        mask = causal_mask(T, T, x.device, self.window, self.causal)  # (T, T), or None
        weights = None
        # torch's fused kernel takes neither a cap nor a sink
        if return_weights or self.softcap or self.sink is not None:
            drop = self.attn_dropout
            y, weights = attention(q, k, v, mask, self.scale, drop, self.softcap, self.sink)
        else:
            p = self.dropout_p if self.training else 0.0
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p, scale=self.scale
            )
        if self.gate is not None:
            y = y * torch.sigmoid(self.gate(x))  # (B, T, D): each channel scaled by 0..1
        return (y, weights) if return_weights else y


class MultiHead(nn.Module):
    """H heads side by side, computed in one batched matmul, then merged and projected.

    This is H `Head`s concatenated (a test copies the weights across and checks it): the fused
    `qkv` layer holds every head's query, key and value projection in one matrix.
    The readable `attention()` runs when the weights are asked for, or when the config picks
    backend "manual"; "sdpa" is torch's fused kernel and "tiled" our online softmax over tiles
    (model/tiled.py): both run the same math without ever storing the (T, S) weights. All obey
    the same flags, so ablations and cures run at full speed too; torch's kernel takes neither a cap
    on the scores nor a sink, so such a model asked for "sdpa" runs the readable core (`core`), the
    faster one on a CPU.

    Attention as shipped models have it: kv_heads K < H shares each key/value head among H / K query
    heads (grouped-query attention, Llama 3's; K = 1 is multi-query), so the cache holds K heads;
    window, gate (a sigmoid per head and channel on the output, Qwen3-Next's) and sink as in Head.
    """

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        block_size: int | None,
        dropout: float = 0.0,
        causal: bool = True,
        scaled: bool = True,
        backend: str = "sdpa",
        qkv_bias: bool = False,
        qk_norm: bool = False,
        softcap: float = 0.0,
        rope: bool = False,
        kv_heads: int = 0,
        window: int = 0,
        gate: bool = False,
        sink: bool = False,
    ):
        super().__init__()
        check_heads(n_embd, n_head, kv_heads)
        self.n_head, self.kv_heads = n_head, kv_heads or n_head
        self.block_size, self.backend = block_size, backend
        self.causal, self.window = causal, window  # causal=False is --no-mask
        self.core = "manual" if backend == "sdpa" and (softcap or sink) else backend
        D = n_embd // n_head
        self.scale = D**-0.5 if scaled else 1.0
        self.qk_norm, self.softcap, self.rope = qk_norm, softcap, rope
        # Every head's q, k and v in one matrix: H query heads, K key and K value heads. The
        # lessons' Head has no bias there; GPT-2 has one, so its weights load with qkv_bias=True.
        self.qkv = nn.Linear(n_embd, n_embd + 2 * self.kv_heads * D, bias=qkv_bias)
        # qkv's rows that make queries and keys: their own init and norm
        self.query_key = slice(0, n_embd + self.kv_heads * D)
        self.proj = nn.Linear(n_embd, n_embd)  # mixes what the heads found
        self.gate = nn.Linear(n_embd, n_embd) if gate else None
        self.sink = nn.Parameter(torch.zeros(n_head)) if sink else None  # one logit a head
        self.dropout_p = dropout
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def split_heads(
        self, x: torch.Tensor, start: int = 0, raw: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, C) at positions start .. start + T - 1 -> queries (B, H, T, D), keys and values
        (B, K, T, D), as every core, the KV cache and GPT.attention_probe take them. raw: before
        QK-norm and RoPE (the norms that grow with the weights, which measurements.qk_norms reads).
        """
        B, T, C = x.shape
        H, K, D = self.n_head, self.kv_heads, C // self.n_head
        # (B, T, C + 2KD) -> (B, T, C), 2 x (B, T, KD)
        q, k, v = self.qkv(x).split([C, K * D, K * D], dim=2)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, T, C) -> (B, H, T, D)
        k = k.view(B, T, K, D).transpose(1, 2)  # (B, T, KD) -> (B, K, T, D)
        v = v.view(B, T, K, D).transpose(1, 2)  # (B, T, KD) -> (B, K, T, D)
        return (q, k, v) if raw else (*prepare(q, k, self.qk_norm, self.rope, start), v)

    def shared(self, kv: torch.Tensor) -> torch.Tensor:
        """Keys or values (B, K, S, D) -> (B, H, S, D): each K head serves H / K query heads."""
        if self.kv_heads == self.n_head:
            return kv
        return kv.repeat_interleave(self.n_head // self.kv_heads, dim=1)

    def mask(self, T: int, S: int | None = None) -> torch.Tensor | None:
        """The (T, S) mask for T queries after S - T cached positions (S = T by default)."""
        S = T if S is None else S
        return causal_mask(T, S, self.qkv.weight.device, self.window, self.causal)

    def forward(self, x: torch.Tensor, return_weights: bool = False, cache: KVCache | None = None):
        """x (B, T, C) -> (B, T, C); with a cache, x holds the T positions after the cached ones."""
        B, T, C = x.shape
        past = len(cache) if cache is not None else 0
        check_length(past + T, self.block_size)
        if cache is not None and not self.causal:
            raise ValueError(
                "a KV cache needs causal attention: without the mask each new token changes "
                "what earlier positions see"
            )
        q, k, v = self.split_heads(x, start=past)  # (B, H, T, D), 2 x (B, K, T, D)
        if cache is not None:
            k, v = cache.append(k, v)  # -> (B, K, S, D): cached keys keep their own positions' turn
        S = k.shape[2]  # the keys in view: these T positions and what the cache kept
        weights = None
        if return_weights or self.core != "sdpa":
            k, v, mask = self.shared(k), self.shared(v), self.mask(T, S)  # (B, H, S, D), (T, S)
            drop, cap, sink = self.attn_dropout, self.softcap, self.sink
            if return_weights or self.core == "manual":
                y, weights = attention(q, k, v, mask, self.scale, drop, cap, sink)  # (B, H, T, S)
            else:
                y = tiled_attention(q, k, v, mask, self.scale, drop, softcap=cap, sink=sink)
        else:
            p = self.dropout_p if self.training else 0.0
            # is_causal draws its triangle from the top-left corner, right only when S == T. After a
            # cached past, one new query may see every key; several get the last rows of the mask.
            mask = self.mask(T, S) if self.window or S > T > 1 else None
            causal = self.causal and S == T and mask is None
            gqa = self.kv_heads != self.n_head
            y = F.scaled_dot_product_attention(
                q, k, v, mask, p, causal, scale=self.scale, enable_gqa=gqa
            )  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, H, T, D) -> (B, T, C): heads side by side
        if self.gate is not None:
            y = y * torch.sigmoid(self.gate(x))  # (B, T, C): each channel scaled by 0..1
        y = self.resid_dropout(self.proj(y))  # (B, T, C)
        return (y, weights) if return_weights else y
