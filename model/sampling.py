"""What generation needs beside the model: the KV cache, so that a new token costs one position,
and the draw of the next token from the logits: greedy, or with a temperature, top-k and top-p.
Shape legend as in attention.py; K is key/value heads in the cache, candidates kept in the draw.
"""

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    """One layer's keys and values so far, each (B, K, S, D). Only a causal model can cache: there a
    position never sees later ones, so earlier keys and values stay the same when a token is
    appended. A layer with a window W keeps only the W - 1 newest positions its next query sees.
    """

    window: int = 0  # the layer's sliding window, or 0: every position is kept
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    seen: int = 0  # positions appended so far; a windowed cache holds fewer

    def __len__(self) -> int:
        return self.seen

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add k, v (B, K, T, D); return every position the new queries may see, (B, K, S, D)."""
        self.seen += k.shape[2]
        if self.k is not None:
            k = torch.cat([self.k, k], dim=2)  # (B, K, S - T, D) + (B, K, T, D) -> (B, K, S, D)
            v = torch.cat([self.v, v], dim=2)  # (B, K, S - T, D) + (B, K, T, D) -> (B, K, S, D)
        S = k.shape[2]
        # a window drops what no later query sees, and a copy frees it
        dropped = S - min(S, self.window - 1) if self.window else 0
        self.k, self.v = (
            (k[:, :, dropped:].clone(), v[:, :, dropped:].clone()) if dropped else (k, v)
        )
        return k, v


class SamplingError(ValueError):
    """Logits or probabilities that are not finite: no token can honestly be drawn from them."""


def check_finite_logits(logits: torch.Tensor) -> None:
    """Refuse NaN or infinite logits: a NaN distribution samples one fixed token forever."""
    if not torch.isfinite(logits).all():
        raise SamplingError(
            "the model's logits are not finite (NaN or inf), so its weights are broken (a "
            "diverged or damaged checkpoint); use another checkpoint, such as the run's best.pt "
            "(--best)"
        )


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw one token id per row from logits (B, V), returning (B, 1).

    temperature 0 is greedy (ties go to the lowest id, as in transformers). Otherwise the logits
    are divided by the temperature, then filtered in transformers' order: top_k keeps the k
    likeliest tokens, then top_p the smallest set of the likeliest whose probability reaches p.
    Inverse-CDF sampling: a uniform u in [0, kept mass) picks the first candidate whose cumulative
    probability exceeds u.
    """
    logits = logits.float()
    scaled = logits if temperature == 0 else logits / temperature
    # one check per token; then say which of the two causes it is
    if not torch.isfinite(scaled).all():
        check_finite_logits(logits)  # the model's own logits: broken weights
        # finite logits, so a tiny temperature: 1e-50 is 0 in float32, and 2 / 1e-40 overflows
        raise SamplingError(
            f"temperature {temperature:g} is too small: the logits divided by it overflow; use 0 "
            "for greedy decoding"
        )
    if temperature == 0:
        return scaled.argmax(dim=-1, keepdim=True)  # (B, V) -> (B, 1)
    logits = scaled
    ids = None
    if top_k is not None or top_p is not None:
        k = min(top_k or logits.size(-1), logits.size(-1))
        # (B, V) -> (B, K) values, likeliest first, and their token ids
        logits, ids = torch.topk(logits, k)
    probs = logits.softmax(dim=-1)  # (B, K)
    if top_p is not None and top_p < 1:
        before = probs.cumsum(dim=-1) - probs  # (B, K): the mass of the likelier candidates
        keep = before < top_p  # (B, K)
        # the likeliest candidate always stays, so the nucleus is never empty (top_p=1e-300 is 0)
        keep[:, 0] = True
        probs = probs * keep
    cdf = probs.cumsum(dim=-1)  # (B, K): non-decreasing, last entry the kept mass
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=cdf.device) * cdf[:, -1:]  # (B, 1)
    # u can round up to the total: clamp to the last candidate with any probability (sorted
    # candidates keep those first)
    last = (
        (probs > 0).sum(dim=-1, keepdim=True) - 1
        if ids is not None
        else torch.full_like(u, cdf.shape[-1] - 1, dtype=torch.long)
    )
    # (B, 1) index into candidates
    choice = torch.minimum(torch.searchsorted(cdf, u, right=True), last)
    return choice if ids is None else ids.gather(-1, choice)  # (B, 1) token ids
