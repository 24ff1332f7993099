"""Our GPT in TransformerLens with the same logits: a HookedTransformer (3.x) or a TransformerBridge
around its NativeModel (4.x). What cannot be mapped exactly is refused in one line."""

import warnings
from collections.abc import Callable
from dataclasses import fields
from importlib.metadata import version
from pathlib import Path

import torch
import torch.nn as nn

from data.tokenizer import Tokenizer
from harness.lens_tokenizer import hf_tokenizer
from harness.lens_weights import LensError, add_ours, lens_weights, native_weights
from harness.training.checkpoints import load_model
from model import GPT
from model.qk import QK_NORM_EPS, ROPE_BASE

INSTALL = "pip install -r requirements-dev.txt (or pip install transformer-lens)"


def anything(value) -> dict:  # a field that changes nothing TransformerLens computes
    return {}


def no_gate(value) -> dict:
    if value:
        raise LensError(
            f"model.gate = {value!r}: TransformerLens has no attention-output gate; "
            "open a run trained without it"
        )
    return {}


POSITIONS = {
    "learned": {"positional_embedding_type": "standard"},
    "none": {"positional_embedding_type": "standard"},  # a table of zeros
    # adjacent pairs turned as ours, over the whole head (rotary_dim = d_head), after the QK-norm
    "rope": {
        "positional_embedding_type": "rotary",
        "rotary_adjacent_pairs": True,
        "rotary_base": ROPE_BASE,
    },
}

# Our ModelConfig's fields -> the fields of both versions' configs; a field missing here, or a value
# giving None, is refused
FIELDS: dict[str, Callable] = {
    "n_layer": lambda n: {"n_layers": n},
    "n_head": lambda n: {"n_heads": n},
    "n_embd": lambda n: {"d_model": n},
    "block_size": anything,  # n_ctx is the context, set by lens_config
    "vocab_size": lambda n: {"d_vocab": n, "d_vocab_out": n},
    "causal": lambda causal: {"attention_dir": "causal" if causal else "bidirectional"},
    "scaled": lambda scaled: {"use_attn_scale": scaled},
    "positions": POSITIONS.get,
    "qk_norm": lambda on: {"use_qk_norm": True} if on else {},
    # cap * tanh(score / cap), after the scale, before the mask
    "softcap": lambda cap: {"attn_scores_soft_cap": cap} if cap else {},
    "qkv_bias": anything,  # without one, b_Q, b_K and b_V are zeros
    "gelu": {"exact": {"act_fn": "gelu"}, "tanh": {"act_fn": "gelu_pytorch_tanh"}}.get,
    "mlp": lambda mlp: {"attn_only": not mlp},
    # each key/value head shared by n_heads / K query heads in order; 0 is n_head
    "kv_heads": lambda k: {"n_key_value_heads": k} if k else {},
    # the query and the W - 1 positions before it, as its "local" layers see
    "window": lambda w: {"use_local_attn": True, "window_size": w} if w else {},
    "window_layers": anything,  # read with window, by lens_config
    "gate": no_gate,
    "sink": lambda on: {"use_attention_sinks": True} if on else {},  # 3.x's, from 3.7
    "attention": anything,  # every backend computes the same attention
    "qk_init_std": anything,  # the weights come from the run
    "dropout": anything,  # both models run in eval mode
}


def import_lens():
    try:
        import transformer_lens
    except ImportError:
        raise LensError(f"TransformerLens is not installed: {INSTALL}") from None
    return transformer_lens


def has_bridge(lens) -> bool:  # 4.0 removed HookedTransformer
    return int(version("transformer-lens").split(".")[0]) >= 4


def lens_config(model: GPT, context: int | None = None) -> dict:
    """context: the longest input (n_ctx), block_size unless given; only rope and none go longer."""
    cfg = model.cfg
    limit = cfg.max_length
    if context is not None and not 1 <= context <= (limit or context):
        rows = f" to {limit}, the rows of its learned position table" if limit else " or more"
        raise LensError(f"context = {context}: give 1{rows}")
    norms = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    if cfg.qk_norm:
        norms.add(QK_NORM_EPS)
    if len(norms) != 1:
        raise LensError(
            f"the model's LayerNorms and QK-norm use eps {sorted(norms)}, "
            "and TransformerLens takes one for all"
        )
    mapped = {"d_head": cfg.head_size, "d_mlp": 4 * cfg.n_embd, "normalization_type": "LN"}
    mapped |= {"eps": norms.pop(), "n_ctx": context or cfg.block_size}
    for name, value in vars(cfg).items():
        lens = FIELDS[name](value) if name in FIELDS else None
        if lens is None:
            named = f"model.{name} = {value!r}" if name in FIELDS else f"model.{name}"
            raise LensError(f"{named} has no TransformerLens counterpart in harness/lens.py yet")
        mapped |= lens
    if cfg.window:
        if not cfg.causal:
            raise LensError(
                "model.window without the causal mask sees both sides, TransformerLens's only "
                "the W - 1 before; keep the mask on"
            )
        mapped["attn_types"] = ["local" if cfg.local(i) else "global" for i in range(cfg.n_layer)]
    if cfg.positions == "rope":
        mapped["rotary_dim"] = cfg.head_size
    parameter = next(model.parameters())
    return mapped | {
        "default_prepend_bos": False,
        "init_weights": False,
        "device": str(parameter.device),
        "dtype": parameter.dtype,
    }


NATIVE_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_new"}


def transformer_bridge(lens, model: GPT, config: dict, context: int | None, tokenizer):
    from transformer_lens.model_bridge.sources import build_bridge_from_module
    from transformer_lens.model_bridge.sources.native import NativeModel

    if config.pop("use_attention_sinks", False):
        raise LensError(
            "model.sink = True: TransformerLens 4.x has no sink logit (3.x has one from 3.7): "
            "pip install 'transformer-lens>=3.7,<4'"
        )
    config |= {"act_fn": NATIVE_ACTIVATIONS[config["act_fn"]], "tokenizer_prepends_bos": False}
    device = config.pop("device")
    bridge_config = lens.TransformerBridgeConfig(**config)
    native = NativeModel(bridge_config).to(device=device, dtype=config["dtype"])
    native.load_state_dict(native_weights(model, context))
    add_ours(native, model.cfg)
    if model.cfg.positions == "none":
        native.pos.weight.requires_grad_(False)  # the table stays at zero when trained there
    return build_bridge_from_module(
        native, "TransformerLensNative", tl_config=bridge_config, tokenizer=tokenizer, device=device
    )


def hooked_transformer(lens, model: GPT, config: dict, context: int | None, tokenizer):
    unknown = set(config) - {f.name for f in fields(lens.HookedTransformerConfig)}
    if unknown:
        raise LensError(
            f"TransformerLens {version('transformer-lens')} has no "
            f"{', '.join(sorted(unknown))}, which this run needs: "
            "pip install 'transformer-lens>=3.7,<4' (or 4.x)"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)
        hooked = lens.HookedTransformer(lens.HookedTransformerConfig(**config))
    # its buffers (the mask caches) stay its own
    hooked.load_state_dict(hooked.state_dict() | lens_weights(model, context))
    # frozen where ours has no parameter, for training there
    for name, parameter in hooked.named_parameters():
        zeros = name == "pos_embed.W_pos" and model.cfg.positions == "none"
        if zeros or name.endswith("_norm.w"):
            parameter.requires_grad_(False)
    if tokenizer is not None:
        hooked.set_tokenizer(tokenizer)
    return hooked


def to_hooked(model: GPT, tokenizer: Tokenizer | None = None, context: int | None = None):
    """In eval mode on the model's device; context as lens_config's."""
    lens = import_lens()
    build = transformer_bridge if has_bridge(lens) else hooked_transformer
    hf = hf_tokenizer(tokenizer) if tokenizer is not None else None
    return build(lens, model, lens_config(model, context), context, hf).eval()


def load_hooked(path: str | Path, device: str | torch.device = "cpu", context: int | None = None):
    model, tokenizer, _ = load_model(Path(path), device)
    return to_hooked(model, tokenizer, context)
