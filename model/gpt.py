"""A small GPT-2-style transformer built from the MultiHead attention of attention.py."""

import math
from collections.abc import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.attention import KVCache, MultiHead, attention_scores
from model.config import ModelConfig, check_length
from model.sampling import sample_next


class MLP(nn.Module):
    """Per-token feed-forward network: widen 4x, GELU, project back.

    GPT-2 was trained with the tanh approximation of GELU; its weights give GPT-2's logits only
    with that variant (cfg.gelu = "tanh"). Our own models use the exact one.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.dropout = nn.Dropout(cfg.dropout)
        self.approximate = "tanh" if cfg.gelu == "tanh" else "none"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc(x), approximate=self.approximate)  # (B, T, C) -> (B, T, 4C)
        return self.dropout(self.proj(x))  # (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: tokens talk (attention), then each thinks alone (MLP).

    With cfg.mlp False the block is attention alone (no ln2, no MLP): the attention-only models in
    which induction heads were first found, where every computation is a path through heads.
    """

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = MultiHead(
            cfg.n_embd,
            cfg.n_head,
            cfg.max_length,
            cfg.dropout,
            cfg.causal,
            cfg.scaled,
            cfg.attention,
            cfg.qkv_bias,
            qk_norm=cfg.qk_norm,
            softcap=cfg.softcap,
            rope=cfg.positions == "rope",
            kv_heads=cfg.kv_heads,
            window=cfg.window if cfg.local(layer) else 0,
            gate=cfg.gate,
            sink=cfg.sink,
        )
        self.ln2 = nn.LayerNorm(cfg.n_embd) if cfg.mlp else None
        self.mlp = MLP(cfg) if cfg.mlp else None

    def think(self, x: torch.Tensor) -> torch.Tensor:
        """The residual stream after the MLP: x itself in an attention-only block."""
        if self.mlp is None:
            return x
        return x + self.mlp(self.ln2(x))  # residual connection around the MLP

    def forward(self, x: torch.Tensor, return_weights: bool = False, cache: KVCache | None = None):
        if return_weights:
            a, weights = self.attn(self.ln1(x), return_weights=True, cache=cache)
            return self.think(x + a), weights
        x = x + self.attn(self.ln1(x), cache=cache)  # residual connection around attention
        return self.think(x)


class GPT(nn.Module):
    """Token and position embeddings, n_layer blocks, a final LayerNorm and the output head.

    The output head shares its weight matrix with the token embedding: that saves V*C
    parameters, and reading and writing tokens then use the same vector space.

    Positions come in three kinds (cfg.positions). "learned": a table of block_size vectors added to
    the tokens, GPT-2's, with no row for a longer input. "rope": no table; every attention layer
    turns its queries and keys by their positions (model/qk.py's rotate), at any length. "none"
    (--no-pos): nothing at all, so every block treats its input as a set and only the causal mask
    can tell a token where it stands.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = None
        if cfg.positions == "learned":
            self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied
        self.apply(self._init_weights)
        for block in self.blocks:
            # GPT-2: each residual branch adds to the stream, so shrink its last layer by
            # 1/sqrt(2 * n_layer) to keep the stream's variance flat with depth.
            for proj in (block.attn.proj, *([block.mlp.proj] if block.mlp is not None else [])):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
            # Query and key rows get their own std (see docs/experiment.md: why the presets draw
            # them at 1/sqrt(n_embd)).
            nn.init.normal_(block.attn.qkv.weight[block.attn.query_key], std=cfg.qk_init_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # the tied matrix is counted once

    @property
    def can_cache(self) -> bool:
        """Whether generate() can keep keys and values: only under the causal mask (see KVCache)."""
        return self.cfg.causal

    def new_caches(self) -> list[KVCache]:
        """One empty KVCache per layer, keeping what its layer's window lets later queries see."""
        return [KVCache(block.attn.window) for block in self.blocks]

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token plus position embeddings: idx (B, T) at positions start.. -> x (B, T, C)."""
        B, T = idx.shape
        # a learned table has block_size rows; rope and none take any length
        check_length(start + T, self.cfg.max_length)
        x = self.tok_emb(idx)  # (B, T) -> (B, T, C)
        if self.pos_emb is not None:
            pos = torch.arange(start, start + T, device=idx.device)  # (T,)
            x = x + self.pos_emb(pos)  # (B, T, C) + (T, C) -> (B, T, C)
        return self.drop(x)

    def hidden(self, idx: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """Final hidden states (B, T, C), after the last LayerNorm.

        With caches (one KVCache per layer), idx holds only the positions after the cached ones;
        their keys and values are appended to the caches.
        """
        caches = caches if caches is not None else [None] * len(self.blocks)
        x = self.embed(idx, start=len(caches[0]) if caches[0] is not None else 0)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, cache=cache)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx (B, T) -> logits (B, T, V), and the mean loss when targets (B, T) are given."""
        logits = self.lm_head(self.hidden(idx))  # (B, T, C) -> (B, T, V)
        return logits, None if targets is None else lm_loss(logits, targets)

    @torch.no_grad()
    def attention_probe(self, idx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the scores before the softmax (scaled, capped) and the weights, (B, H, T, T)
        each, from the readable path."""
        T = idx.shape[1]
        x = self.embed(idx)
        maps = []
        for block in self.blocks:
            attn = block.attn
            q, k, _ = attn.split_heads(block.ln1(x))  # normalised and turned as forward does
            k, mask = attn.shared(k), attn.mask(T)
            scores = attention_scores(q, k, mask, attn.scale, attn.softcap)  # (B, H, T, T)
            x, weights = block(x, return_weights=True)
            maps.append((scores, weights))
        return maps

    def attention_weights(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """The attention weights of every layer, n_layer tensors of shape (B, H, T, T)."""
        return [weights for _, weights in self.attention_probe(idx)]

    def generate(self, idx: torch.Tensor, max_new_tokens: int, **sampling) -> torch.Tensor:
        """idx (B, T0) -> (B, T0 + max_new_tokens), the new tokens drawn by `stream`."""
        return torch.cat([idx, *self.stream(idx, max_new_tokens, **sampling)], dim=1)

    @torch.no_grad()
    def stream(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Iterator[torch.Tensor]:
        """Yield max_new_tokens new tokens after idx (B, T0), each (B, 1) as soon as it is drawn.

        sample_next draws each one (temperature 0 is greedy; top_k and top_p filter the candidates).

        The context policy is the same with and without the cache, so both give the same tokens:
        the model sees at most the last block_size tokens, and when that window is full it keeps
        only its most recent block_size // 2 tokens and continues from there. Why not slide it by
        one token? Every later position attended to the token that would drop out, and positions are
        counted from the window's start, so sliding makes every cached key and value stale. Halving
        re-encodes the window once (a fresh prefill) per block_size // 2 new tokens; the other steps
        cost one position. Without the cache, each step runs the model on the whole current window.

        A model with causal=False cannot cache (every new token changes what earlier positions
        see), so there use_cache is ignored and each step recomputes; see `can_cache`.
        """
        block_size, keep = self.cfg.block_size, max(1, self.cfg.block_size // 2)
        use_cache = use_cache and self.can_cache
        window = idx[:, -block_size:]  # (B, T): what the model sees
        caches = None  # per layer, the keys and values of window[:, :-1]
        for _ in range(max_new_tokens):
            if not use_cache:
                x = self.hidden(window)  # the whole window, every step
            elif caches is None:
                caches = self.new_caches()
                x = self.hidden(window, caches)  # prefill: encode the whole window once
            else:
                x = self.hidden(window[:, -1:], caches)  # only the newest position: (B, 1, C)
            logits = self.lm_head(x[:, -1])  # (B, C) -> (B, V)
            idx_next = sample_next(logits, temperature, top_k, top_p, generator)  # (B, 1)
            yield idx_next
            window = torch.cat([window, idx_next], dim=1)  # (B, T) -> (B, T + 1)
            if window.shape[1] > block_size:  # full: keep the most recent half, encode it afresh
                window, caches = window[:, -keep:], None


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy in nats of logits (..., V) against targets (...): the one loss that
    training, evaluation, the honest loss and scoring compute. reduction "none" keeps one loss per
    target, shaped like targets."""
    losses = F.cross_entropy(logits.flatten(0, -2).float(), targets.flatten(), reduction=reduction)
    return losses.view(targets.shape) if reduction == "none" else losses
