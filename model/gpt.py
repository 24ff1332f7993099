"""A small GPT-2-style transformer built from the MultiHead attention of attention.py."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from model.attention import MultiHead, attention_scores
from model.config import ModelConfig


class MLP(nn.Module):
    """Per-token feed-forward network: widen 4x, GELU, project back."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))  # (B, T, C) -> (B, T, 4C) -> (B, T, C)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: tokens talk (attention), then each thinks alone (MLP)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = MultiHead(cfg.n_embd, cfg.n_head, cfg.block_size, cfg.dropout, cfg.causal, cfg.scaled, cfg.attention)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, return_weights: bool = False):
        if return_weights:
            a, weights = self.attn(self.ln1(x), return_weights=True)
            x = x + a
            return x + self.mlp(self.ln2(x)), weights
        x = x + self.attn(self.ln1(x))  # residual connection around attention
        return x + self.mlp(self.ln2(x))  # and around the MLP


class GPT(nn.Module):
    """Token and position embeddings, n_layer blocks, a final LayerNorm and the output head.

    The output head shares its weight matrix with the token embedding: that saves V*C
    parameters, and reading and writing tokens then use the same vector space.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied
        self.apply(self._init_weights)
        for block in self.blocks:
            # GPT-2: each residual branch adds to the stream, so shrink its last layer by
            # 1/sqrt(2 * n_layer) to keep the stream's variance flat with depth.
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * cfg.n_layer))
            # Query and key rows get their own std (see README: the no-scale demo).
            nn.init.normal_(block.attn.qkv.weight[: 2 * cfg.n_embd], std=cfg.qk_init_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # the tied matrix is counted once

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """Token plus position embeddings: idx (B, T) -> x (B, T, C)."""
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}; crop the input")
        pos = torch.arange(T, device=idx.device)
        return self.drop(self.tok_emb(idx) + self.pos_emb(pos))  # (B, T, C) + (T, C) -> (B, T, C)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """Final hidden states (B, T, C), after the last LayerNorm."""
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """idx (B, T) -> logits (B, T, V), and the mean next-token cross-entropy when targets (B, T) are given."""
        logits = self.lm_head(self.hidden(idx))  # (B, T, C) -> (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())  # over B*T predictions
        return logits, loss

    @torch.no_grad()
    def attention_probe(self, idx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer, the pre-softmax scores and the weights (B, H, T, T) of the readable path."""
        T = idx.shape[1]
        x = self.embed(idx)
        maps = []
        for block in self.blocks:
            q, k, _ = block.attn.split_heads(block.ln1(x))
            scores = attention_scores(q, k, block.attn.mask(T), block.attn.scale)  # (B, H, T, T)
            x, weights = block(x, return_weights=True)
            maps.append((scores, weights))
        return maps

    def attention_weights(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """The attention weights of every layer, n_layer tensors of shape (B, H, T, T)."""
        return [weights for _, weights in self.attention_probe(idx)]

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append max_new_tokens sampled tokens to idx (B, T0); the context is cropped to block_size."""
        for _ in range(max_new_tokens):
            context = idx[:, -self.cfg.block_size :]
            logits = self.lm_head(self.hidden(context)[:, -1, :])  # only the last position: (B, V)
            idx_next = sample_next(logits, temperature, top_k, generator)
            idx = torch.cat([idx, idx_next], dim=1)  # (B, T) -> (B, T + 1)
        return idx


def sample_next(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None) -> torch.Tensor:
    """Draw one token id per row from logits (B, V), returning (B, 1)."""
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)
