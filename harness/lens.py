"""Our GPT opened in TransformerLens with the same logits, built from a run's own config and
weights: a HookedTransformer under TransformerLens 3.x, a TransformerBridge under 4.x.

TransformerLens, the library of the ARENA exercises, reads a model through hooks: run_with_cache
keeps every activation (cache["pattern", layer] holds a layer's attention weights), run_with_hooks
changes any of them, and transformer_lens.head_detector scores heads against a pattern. Its config
has a switch for most of ours, so a model trained without its mask, scale or positions, with QK-norm
or a softcap, with rotary positions, grouped-query heads or a sliding window (its local layers, in
our pattern), opens there computing exactly what it computes here; with a sink, under 3.x from 3.7
(4.x's native model has none). Neither has a gate on the attention output, so a run with one is
refused, as is a window without the causal mask (its local attention looks back only).
Nothing is downloaded: the config and weights are the run's, and the tokenizer is ours, rebuilt as
the Hugging Face tokenizer with the same ids that TransformerLens reads strings with.

Two tables hold the whole correspondence, and each is the one place a new variant is added: FIELDS
(each field of our ModelConfig -> the config's fields) and the weights (harness/lens_weights.py:
each of our tensors -> its tensor). Each refuses in one line what it cannot express: a config field
or value it has no entry for, a tensor left over. A new variant is refused until it is mapped here,
never opened computing something else.

Both majors open a run. TransformerLens 3.x builds a HookedTransformer from a
HookedTransformerConfig; 4.0 removed both, and 4.x opens it as a TransformerBridge around the
library's own native model (NativeModel, built from a TransformerBridgeConfig that takes the same
fields). Three of ours the native model lacks, and harness/lens_weights.py's add_ours gives them to
its attention modules: an unscaled score (its scale is set to 1), QK-norm (its query and key
projections divide each head by its RMS, ours) and the window (its config takes window_size and
attn_types, and its mask is made ours in each local layer). The tensors go to each model under its
own names: lens_weights (3.x), native_weights (4.x).
"""

import warnings
from collections.abc import Callable, Hashable
from dataclasses import fields, is_dataclass
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

# 3.0 has every config field used here but a sink's (3.7: an older 3.x refuses a sink run in one
# line);
LENS_VERSIONS = ">=3.0"
# 3.x and 4.x are both opened (tests/test_lens.py runs under each)
INSTALL = "pip install -r requirements-dev.txt (or pip install transformer-lens)"


def one_of(table: dict) -> Callable:
    """A field that takes a few values: each value's config fields, None (refused) for any other."""
    return lambda value: table.get(value) if isinstance(value, Hashable) else None


def anything(value) -> dict:
    """A field that changes nothing TransformerLens computes."""
    return {}


def lacking(field: str, what: str) -> Callable:
    """A switch that neither TransformerLens config has a field for: off changes nothing, on is
    refused naming what is missing.
    """

    def mapped(value) -> dict:
        if value:
            raise LensError(
                f"model.{field} = {value!r}: TransformerLens has no {what} (no field of 3.x's HookedTransformerConfig "
                "or 4.x's TransformerBridgeConfig), so this run cannot open there; a run trained without it can"
            )
        return {}

    return mapped


POSITIONS = {  # each kind of our positions -> the config's fields
    "learned": {"positional_embedding_type": "standard"},
    # a table holding zeros (lens_weights): hook_pos_embed shows it adds nothing
    "none": {"positional_embedding_type": "standard"},
    # Adjacent pairs turned as ours turns them, over the whole head (lens_config sets rotary_dim to
    # d_head), after the QK-norm.
    "rope": {
        "positional_embedding_type": "rotary",
        "rotary_adjacent_pairs": True,
        "rotary_base": ROPE_BASE,
    },
}

# Each field of our ModelConfig -> the config fields it sets, named alike in 3.x's
# HookedTransformerConfig and 4.x's TransformerBridgeConfig (d_head, d_mlp and the LayerNorms are
# set by lens_config). A field missing here, or a value its table lacks, is refused: map it here,
# and its tensors in harness/lens_weights.py, to open such runs.
FIELDS: dict[str, Callable] = {
    "n_layer": lambda n: {"n_layers": n},
    "n_head": lambda n: {"n_heads": n},
    "n_embd": lambda n: {"d_model": n},
    "block_size": lambda n: {"n_ctx": n},
    "vocab_size": lambda n: {"d_vocab": n, "d_vocab_out": n},
    "causal": one_of(
        {True: {"attention_dir": "causal"}, False: {"attention_dir": "bidirectional"}}
    ),
    # its scale: sqrt(d_head)
    "scaled": one_of({True: {"use_attn_scale": True}, False: {"use_attn_scale": False}}),
    "positions": one_of(POSITIONS),
    # its RMSNorm's gains are ones (lens_weights), its eps the model's
    "qk_norm": one_of({True: {"use_qk_norm": True}, False: {}}),
    # cap * tanh(score / cap), after the scale, before the mask
    "softcap": lambda cap: {"attn_scores_soft_cap": cap} if cap else {},
    "qkv_bias": one_of({True: {}, False: {}}),  # without one, b_Q, b_K and b_V are zeros
    # F.gelu, as ours call it
    "gelu": one_of({"exact": {"act_fn": "gelu"}, "tanh": {"act_fn": "gelu_pytorch_tanh"}}),
    "mlp": one_of({True: {"attn_only": False}, False: {"attn_only": True}}),
    # K key/value heads, each shared by n_heads / K query heads in order (repeat_interleave on both
    # sides); 0 is n_head.
    "kv_heads": lambda k: {"n_key_value_heads": k} if k else {},
    # The query and the W - 1 positions before it, as its "local" layers see; lens_config gives each
    # layer its attn_type.
    "window": lambda w: {"use_local_attn": True, "window_size": w} if w else {},
    "window_layers": anything,  # read with window, by lens_config
    "gate": lacking("gate", "sigmoid gate on the attention output"),
    # 3.x's (from 3.7), after the cap and mask, as ours
    "sink": one_of({True: {"use_attention_sinks": True}, False: {}}),
    # every backend computes the same attention (tests/test_attention.py holds them equal)
    "attention": anything,
    # how the weights were drawn at the start; the weights themselves come from the run
    "qk_init_std": anything,
    # acts only in training; TransformerLens has none, and both models run in eval mode
    "dropout": anything,
}


def import_lens():
    """The transformer_lens module, or a LensError saying how to install it."""
    try:
        import transformer_lens
    except ImportError:
        raise LensError(f"TransformerLens is not installed: {INSTALL}") from None
    return transformer_lens


def has_bridge(lens) -> bool:
    """Whether this TransformerLens opens models as a TransformerBridge (4.x) rather than a
    HookedTransformer (3.x): 4.0 removed HookedTransformer (asking 4.x for it raises an ImportError
    that names its replacement)."""
    return int(version("transformer-lens").split(".")[0]) >= 4


def lens_config(model: GPT, context: int | None = None) -> dict:
    """The config fields of our model, as both TransformerLens configs name them: every ModelConfig
    field mapped through FIELDS, or a LensError naming it.

    context: the longest input it takes (its n_ctx), block_size unless given; a rope or none run,
    which has no table that ends at block_size, takes a longer one, as ours does.
    """
    cfg = model.cfg
    limit = cfg.max_length  # block_size for a learned table, None for rope and none
    if context is not None and not 1 <= context <= (limit or context):
        rows = f" to {limit}, the rows of the run's learned position table" if limit else " or more"
        raise LensError(f"context = {context}: give 1{rows}")
    norms = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)} | (
        {QK_NORM_EPS} if cfg.qk_norm else set()
    )
    if len(norms) != 1:
        raise LensError(
            f"the model's LayerNorms and QK-norm use eps {sorted(norms)}, and TransformerLens takes one eps for all of them"
        )
    mapped = {
        "d_head": cfg.head_size,
        "d_mlp": 4 * cfg.n_embd,
        "normalization_type": "LN",
        "eps": norms.pop(),
    }
    for field in fields(cfg):
        value = getattr(cfg, field.name)
        if field.name not in FIELDS:
            raise LensError(
                f"model.{field.name} has no TransformerLens counterpart in harness/lens.py yet, so this run cannot open there"
            )
        lens = FIELDS[field.name](value)
        if lens is None:
            raise LensError(
                f"model.{field.name} = {value!r} has no TransformerLens counterpart in harness/lens.py yet"
            )
        mapped |= lens
    mapped["n_ctx"] = context or cfg.block_size
    if cfg.window and not cfg.causal:
        raise LensError(
            "model.window without the causal mask sees W positions on either side, and TransformerLens's local "
            "attention only the W - 1 before; a window opens there with the causal mask on"
        )
    if cfg.window:
        mapped["attn_types"] = [
            "local" if cfg.local(layer) else "global" for layer in range(cfg.n_layer)
        ]
    if cfg.positions == "rope":
        mapped["rotary_dim"] = cfg.head_size
    parameter = next(model.parameters())
    return mapped | {
        "default_prepend_bos": False,
        "init_weights": False,
        "device": str(parameter.device),
        "dtype": parameter.dtype,
    }


def transformer_bridge(lens, model: GPT, config: dict, context: int | None, tokenizer=None):
    """TransformerLens 4.x: our model as a TransformerBridge around the library's NativeModel, with
    our weights, our unscaled scores and our QK-norm where the run has them."""
    from transformer_lens.model_bridge.sources import build_bridge_from_module
    from transformer_lens.model_bridge.sources.native import NativeModel

    if config.pop("use_attention_sinks", False):
        raise LensError(
            "model.sink = True: TransformerLens 4.x's native model has no sink logit, and 3.x's HookedTransformer has "
            "one (use_attention_sinks, from 3.7): open this run under pip install 'transformer-lens>=3.7,<4'"
        )
    config = config | {
        "act_fn": NATIVE_ACTIVATIONS[config["act_fn"]],
        "tokenizer_prepends_bos": False,
    }
    bridge_config = lens.TransformerBridgeConfig(
        **{k: v for k, v in config.items() if k != "device"}
    )
    native = NativeModel(bridge_config).to(device=config["device"], dtype=config["dtype"])
    # strict: each of its tensors gets one of ours
    native.load_state_dict(native_weights(model, context))
    add_ours(native, model.cfg)  # what its attention lacks: the unscaled score, QK-norm, the window
    if model.cfg.positions == "none":
        # no positions: the table stays at zero when the model is trained there
        native.pos.weight.requires_grad_(False)
    return build_bridge_from_module(
        native,
        "TransformerLensNative",
        tl_config=bridge_config,
        tokenizer=tokenizer,
        device=config["device"],
    )


# 3.x's act_fn names -> 4.x's native ones, the same functions
NATIVE_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_new"}


def hooked_transformer(lens, model: GPT, config: dict, context: int | None, tokenizer=None):
    """TransformerLens 3.x: our model as a HookedTransformer with our weights, or a LensError naming
    the fields this 3.x lacks.
    """
    known = (
        {f.name for f in fields(lens.HookedTransformerConfig)}
        if is_dataclass(lens.HookedTransformerConfig)
        else set(config)
    )
    if set(config) - known:
        raise LensError(
            f"TransformerLens {version('transformer-lens')} has no {', '.join(sorted(set(config) - known))}, which "
            "this run needs: pip install 'transformer-lens>=3.7,<4' (or 4.x)"
        )
    # 3.x's notice that 4.0 removes HookedTransformer: 4.x opens runs as a TransformerBridge
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)
        hooked = lens.HookedTransformer(lens.HookedTransformerConfig(**config))
    # its buffers (the IGNORE value, mask caches) stay its own
    hooked.load_state_dict(hooked.state_dict() | lens_weights(model, context))
    # no positions: the table stays at zero
    frozen = [hooked.pos_embed.W_pos] if model.cfg.positions == "none" else []
    frozen += (
        [norm.w for block in hooked.blocks for norm in (block.attn.q_norm, block.attn.k_norm)]
        if model.cfg.qk_norm
        else []
    )
    for tensor in frozen:  # what ours does not learn stays as it is when the model is trained there
        tensor.requires_grad_(False)
    if tokenizer is not None:
        hooked.set_tokenizer(tokenizer)
    return hooked


def to_hooked(model: GPT, tokenizer: Tokenizer | None = None, context: int | None = None):
    """Our model in TransformerLens, computing the same logits, in eval mode on model's device: a
    HookedTransformer under 3.x, a TransformerBridge under 4.x (each has run_with_cache,
    run_with_hooks, to_tokens and the cfg its version documents).

    Given the model's tokenizer, it reads strings too (to_tokens, to_str_tokens, the head detector),
    with the same ids; without it, it reads token ids only. context: the longest input, block_size
    unless given (a longer one for rope and none runs only): TransformerLens cuts a longer string to
    it, and fails on longer token ids.
    """
    lens = import_lens()
    build = transformer_bridge if has_bridge(lens) else hooked_transformer
    return build(
        lens,
        model,
        lens_config(model, context),
        context,
        hf_tokenizer(tokenizer) if tokenizer is not None else None,
    ).eval()


def load_hooked(path: str | Path, device: str | torch.device = "cpu", context: int | None = None):
    """A run's checkpoint (runs/<run>/ckpt.pt) in TransformerLens (as to_hooked: a HookedTransformer
    under 3.x, a TransformerBridge under 4.x), reading strings with the run's own tokenizer
    (context: the longest input, as to_hooked's)."""
    model, tokenizer, _ = load_model(Path(path), device)
    return to_hooked(model, tokenizer, context)
