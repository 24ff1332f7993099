"""ModelConfig: every size and switch that decides the shape and behaviour of the GPT."""

import math
from dataclasses import dataclass, field

ATTENTION_BACKENDS = ("sdpa", "manual", "tiled")
GELU_VARIANTS = ("exact", "tanh")
POSITION_KINDS = ("learned", "rope", "none")
# the caps C of C * tanh(score / C) float32 scores can take (__post_init__'s errors say why): over
# 2**102, a score big enough to move a softmax weight (2**-24) is no longer a normal float32
SOFTCAP_LEAST = 2.0**-126
SOFTCAP_MOST = 2.0**102


def setting(default, meaning: str):
    """A config field and what it means, written once: --help and docs/command-line.md print it."""
    return field(default=default, metadata={"meaning": meaning})


def check_choice(dotted: str, value, choices, also: str = "") -> None:
    if value not in choices:
        raise ValueError(
            f"{dotted} must be one of {', '.join(map(str, choices))}{also}, got {value!r}"
        )


def check_positive(cfg, section: str, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(cfg, name) < 1:
            raise ValueError(
                f"{section}.{name} must be a positive integer, got {getattr(cfg, name)}"
            )


def check_finite(cfg, section: str, names: tuple[str, ...]) -> None:
    """nan slips past every later comparison, inf past most."""
    for name in names:
        if not math.isfinite(getattr(cfg, name)):
            raise ValueError(f"{section}.{name} must be a finite number, got {getattr(cfg, name)}")


@dataclass(frozen=True)
class ModelConfig:
    n_layer: int = setting(4, "transformer blocks")
    n_head: int = setting(4, "attention heads per block")
    n_embd: int = setting(128, "model width C; head_size = n_embd // n_head")
    block_size: int = setting(64, "longest context, in tokens")
    vocab_size: int = setting(50257, "filled in from the tokenizer by train.py")
    dropout: float = setting(0.0, "on attention weights, residual outputs and embeddings")
    causal: bool = setting(
        True,
        "the causal mask: each token sees only the past; false is the --no-mask ablation, every "
        "token sees the future",
    )
    scaled: bool = setting(
        True,
        "scores divided by sqrt(head_size); false is the --no-scale ablation, the softmax "
        "saturates",
    )
    positions: str = setting(
        "learned",
        '"learned": a position embedding added to the tokens (GPT-2\'s), no row past block_size; '
        '"rope": queries and keys '
        'rotated by position (Llama\'s), any length; "none": the --no-pos ablation, only the mask '
        "tells tokens apart by place",
    )
    attention: str = setting(
        "sdpa",
        '"sdpa": torch\'s fused kernel; "manual": the readable path; "tiled": online softmax, no '
        "(T, T) weights",
    )
    qk_init_std: float = setting(0.02, "std of the query/key weights at init (0.02 is GPT-2's)")
    qkv_bias: bool = setting(
        False,
        "a bias on the fused query/key/value projection: GPT-2 has one, the lessons' Head has none",
    )
    gelu: str = setting(
        "exact", '"exact" (erf) GELU, or "tanh", the approximation GPT-2 was trained with'
    )
    mlp: bool = setting(
        True,
        "False leaves the MLP out of every block: an attention-only model, as the induction-head "
        "papers study",
    )
    qk_norm: bool = setting(
        False,
        "each head's queries and keys RMS-normalised before the scores (OLMo 2, Qwen 3): the "
        "logits cannot grow with their norms",
    )
    softcap: float = setting(
        0.0,
        "scores capped to (-C, C) by C * tanh(score / C) before the mask (Gemma 2 used C = 50); 0 "
        "is off, else C is from 2**-126 "
        "to 2**102, the caps float32 scores can take",
    )
    kv_heads: int = setting(
        0,
        "key/value heads K, each shared by n_head / K query heads (grouped-query attention, Llama "
        "3's); 1 is multi-query; 0: n_head",
    )
    window: int = setting(
        0,
        "a sliding window W: each query sees itself and the W - 1 positions before it (Mistral, "
        "gpt-oss); 0 is off",
    )
    window_layers: str = setting(
        "L",
        'which layers the window applies to, repeated over the blocks: L local, G global; "LG" '
        "alternates (gpt-oss), "
        '"LLLLLG" is five local to one global (Gemma 3)',
    )
    gate: bool = setting(
        False,
        "a sigmoid gate per head and channel on the attention output, read from the block's input "
        "(Qwen3-Next)",
    )
    sink: bool = setting(
        False,
        "one learned logit per head that joins every row's softmax and takes weight from the "
        "tokens (gpt-oss)",
    )

    def __post_init__(self) -> None:
        # configs stored before positions had kinds: true (learned) or false (none)
        if isinstance(self.positions, bool):
            object.__setattr__(self, "positions", "learned" if self.positions else "none")
        check_positive(self, "model", ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"))
        check_heads(self.n_embd, self.n_head, self.kv_heads, prefix="model.")
        check_finite(self, "model", ("dropout", "qk_init_std", "softcap"))
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"model.dropout must be in [0, 1), got {self.dropout}")
        check_choice("model.attention", self.attention, ATTENTION_BACKENDS)
        if self.qk_init_std <= 0:
            raise ValueError(f"model.qk_init_std must be positive, got {self.qk_init_std}")
        check_choice("model.gelu", self.gelu, GELU_VARIANTS)
        check_choice("model.positions", self.positions, POSITION_KINDS)
        if self.positions == "rope" and self.head_size % 2:
            raise ValueError(
                "model.positions = rope turns pairs of components, so head_size must be even, "
                f"got {self.head_size}"
            )
        if not 0 <= self.window <= self.block_size:
            raise ValueError(
                "model.window must be a number of positions from 1 to block_size "
                f"({self.block_size}), or 0 for none, got {self.window}"
            )
        if (
            not self.window_layers
            or set(self.window_layers) - {"L", "G"}
            or (self.window and "L" not in self.window_layers)
        ):
            raise ValueError(
                "model.window_layers is a pattern of L (local) and G (global) layers with an L, "
                f'such as "LG", got {self.window_layers!r}'
            )
        if self.softcap < 0:
            raise ValueError(
                f"model.softcap must be a positive cap (or 0, off), got {self.softcap}"
            )
        if 0 < self.softcap < SOFTCAP_LEAST:
            raise ValueError(
                f"model.softcap = {self.softcap:g} is below 2**-126 ({SOFTCAP_LEAST:.3g}), "
                "float32's smallest normal number, and the scores are float32: the cap reads as 0 "
                "there, and C * tanh(score / C) divides by it; give 0 for no cap, or a cap of at "
                f"least {SOFTCAP_LEAST:.3g} (Gemma 2 used 50)"
            )
        if self.softcap > SOFTCAP_MOST:
            raise ValueError(
                f"model.softcap = {self.softcap:g} is above 2**102 ({SOFTCAP_MOST:.3g}), the "
                "largest cap float32 scores can take: ordinary scores divided by it fall below "
                "float32's smallest normal number and read as 0 (past 3.4e38 the cap is inf, and "
                "every score NaN), so it would train another model than no cap; give 0 for no "
                f"cap, or a cap up to {SOFTCAP_MOST:.3g} (Gemma 2 used 50)"
            )

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head

    def local(self, layer: int) -> bool:
        """Whether block `layer` (from 0) has the sliding window: its letter in window_layers,
        repeated over the blocks."""
        return bool(self.window) and self.window_layers[layer % len(self.window_layers)] == "L"

    @property
    def max_length(self) -> int | None:
        """The longest input: block_size for a learned position table (no row past it), else None:
        rope and none compute a position's treatment from the position itself."""
        return self.block_size if self.positions == "learned" else None


def check_heads(n_embd: int, n_head: int, kv_heads: int = 0, prefix: str = "") -> None:
    """The heads split the width evenly, C = H * D, and the key/value heads the query heads."""
    if n_embd % n_head != 0:
        fits = [h for h in range(1, 17) if n_embd % h == 0]
        raise ValueError(
            f"{prefix}n_embd ({n_embd}) must be divisible by {prefix}n_head ({n_head}); "
            f"try n_head in {fits}"
        )
    if kv_heads < 0 or (kv_heads and n_head % kv_heads):
        fits = [k for k in range(1, n_head + 1) if n_head % k == 0]
        raise ValueError(
            f"{prefix}kv_heads ({kv_heads}) must divide {prefix}n_head ({n_head}): "
            f"try one of {fits}, or 0 for n_head"
        )


def check_length(T: int, max_length: int | None) -> None:
    if max_length is not None and T > max_length:
        raise ValueError(
            f"sequence length {T} exceeds block_size {max_length}, and a learned position table "
            f"has no row past it; crop the input to the last {max_length} tokens (a model with "
            "positions rope or none takes any length)"
        )
