"""Our GPT opened in TransformerLens: a HookedTransformer with the same logits, built from a run's own config and weights.

TransformerLens, the library of the ARENA exercises, reads a model through hooks: run_with_cache keeps every
activation (cache["pattern", layer] holds a layer's attention weights), run_with_hooks changes any of them, and
transformer_lens.head_detector scores heads against a pattern. HookedTransformerConfig has a switch for each of
ours, so a model trained without its mask, scale or positions, with QK-norm or a softcap, or with rotary positions,
opens there computing exactly what it computes here.
Nothing is downloaded: the config and weights are the run's, and the tokenizer is ours, rebuilt as the Hugging
Face tokenizer with the same ids that TransformerLens reads strings with.

Two tables hold the whole correspondence, and each is the one place a new variant is added: FIELDS (each field of
our ModelConfig -> HookedTransformerConfig's fields) and `lens_weights` (each of our tensors -> its tensor). Each
refuses in one line what it cannot express: a config field or value it has no entry for, a tensor left over. A
new variant is refused until it is mapped here, never opened computing something else.

TransformerLens 3.x: 4.0 removed HookedTransformer (its TransformerBridge wraps Hugging Face models instead).
"""

import json
import warnings
from collections.abc import Callable, Hashable
from dataclasses import fields
from pathlib import Path

import torch
import torch.nn as nn

from data.tokenizer import CharTokenizer, GPT2Tokenizer, Tokenizer
from harness.training.checkpoints import load_model
from model import GPT
from model.attention import QK_NORM_EPS, ROPE_BASE

LENS_VERSIONS = ">=3.0,<4"  # 3.0 has every HookedTransformerConfig field used here; 4.0 removed HookedTransformer
INSTALL = f'pip install -r requirements-dev.txt (or pip install "transformer-lens{LENS_VERSIONS}")'
END_OF_TEXT = "<|endoftext|>"  # GPT-2's one special token, which TransformerLens pads with
GPT2_FILES = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"  # tiktoken's gpt2 files, kept in its cache


class LensError(ValueError):
    """A model that TransformerLens cannot take as it is, or TransformerLens missing: the message says what to do."""


def one_of(table: dict) -> Callable:
    """A field that takes a few values: each value's HookedTransformerConfig fields, None (refused) for any other."""
    return lambda value: table.get(value) if isinstance(value, Hashable) else None


def anything(value) -> dict:
    """A field that changes nothing TransformerLens computes."""
    return {}


POSITIONS = {  # each kind of our positions -> HookedTransformerConfig's fields
    "learned": {"positional_embedding_type": "standard"},
    "none": {"positional_embedding_type": "standard"},  # a table holding zeros (lens_weights): hook_pos_embed shows it adds nothing
    # Adjacent pairs turned as ours turns them, over the whole head (rotary_dim defaults to d_head), after the QK-norm.
    "rope": {"positional_embedding_type": "rotary", "rotary_adjacent_pairs": True, "rotary_base": ROPE_BASE},
}

# Each field of our ModelConfig -> the HookedTransformerConfig fields it sets (d_head, d_mlp and the LayerNorms are
# set by lens_config). A field missing here, or a value its table lacks, is refused: map it here, and its tensors in
# lens_weights, to open such runs.
FIELDS: dict[str, Callable] = {
    "n_layer": lambda n: {"n_layers": n},
    "n_head": lambda n: {"n_heads": n},
    "n_embd": lambda n: {"d_model": n},
    "block_size": lambda n: {"n_ctx": n},
    "vocab_size": lambda n: {"d_vocab": n, "d_vocab_out": n},
    "causal": one_of({True: {"attention_dir": "causal"}, False: {"attention_dir": "bidirectional"}}),
    "scaled": one_of({True: {"use_attn_scale": True}, False: {"use_attn_scale": False}}),  # its scale: sqrt(d_head)
    "positions": one_of(POSITIONS),
    "qk_norm": one_of({True: {"use_qk_norm": True}, False: {}}),  # its RMSNorm's gains are ones (lens_weights), its eps the model's
    "softcap": lambda cap: {"attn_scores_soft_cap": cap} if cap else {},  # cap * tanh(score / cap), after the scale, before the mask
    "qkv_bias": one_of({True: {}, False: {}}),  # without one, b_Q, b_K and b_V are zeros
    "gelu": one_of({"exact": {"act_fn": "gelu"}, "tanh": {"act_fn": "gelu_pytorch_tanh"}}),  # F.gelu, as ours call it
    "mlp": one_of({True: {"attn_only": False}, False: {"attn_only": True}}),
    "attention": anything,  # every backend computes the same attention (tests/test_attention.py holds them equal)
    "qk_init_std": anything,  # how the weights were drawn at the start; the weights themselves come from the run
    "dropout": anything,  # acts only in training; TransformerLens has none, and both models run in eval mode
}


def import_lens():
    """The transformer_lens module, or a LensError saying how to install a version that has HookedTransformer."""
    try:
        import transformer_lens
        from transformer_lens import HookedTransformer  # noqa: F401  (4.0 removed it)
    except ImportError:
        raise LensError(f"TransformerLens 3.x is not installed: {INSTALL}") from None
    return transformer_lens


def lens_config(model: GPT, context: int | None = None):
    """The HookedTransformerConfig of our model: every ModelConfig field mapped through FIELDS, or a LensError naming it.

    context: the longest input it takes (its n_ctx), block_size unless given; a rope or none run, which has no table
    that ends at block_size, takes a longer one, as ours does.
    """
    cfg = model.cfg
    limit = cfg.max_length  # block_size for a learned table, None for rope and none
    if context is not None and not 1 <= context <= (limit or context):
        rows = f" to {limit}, the rows of the run's learned position table" if limit else " or more"
        raise LensError(f"context = {context}: give 1{rows}")
    norms = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)} | ({QK_NORM_EPS} if cfg.qk_norm else set())
    if len(norms) != 1:
        raise LensError(f"the model's LayerNorms and QK-norm use eps {sorted(norms)}, and TransformerLens takes one eps for all of them")
    mapped = {"d_head": cfg.head_size, "d_mlp": 4 * cfg.n_embd, "normalization_type": "LN", "eps": norms.pop()}
    for field in fields(cfg):
        value = getattr(cfg, field.name)
        if field.name not in FIELDS:
            raise LensError(f"model.{field.name} has no TransformerLens counterpart in harness/lens.py yet, so this run cannot open there")
        lens = FIELDS[field.name](value)
        if lens is None:
            raise LensError(f"model.{field.name} = {value!r} has no TransformerLens counterpart in harness/lens.py yet")
        mapped |= lens
    mapped["n_ctx"] = context or cfg.block_size
    parameter = next(model.parameters())
    return import_lens().HookedTransformerConfig(
        **mapped, default_prepend_bos=False, init_weights=False, device=str(parameter.device), dtype=parameter.dtype
    )


def lens_weights(model: GPT, context: int | None = None) -> dict[str, torch.Tensor]:
    """Our tensors under HookedTransformer's names and shapes, or a LensError naming a tensor that has no place there.
    (context: as lens_config's, the rows of the position table.)

    Ours keep every head's query, key and value in one (3C, C) matrix, rows h*D .. h*D + D - 1 for head h;
    TransformerLens keeps W_Q, W_K, W_V as (H, C, D) and W_O as (H, D, C), multiplying from the right.
    """
    cfg, C, H, D = model.cfg, model.cfg.n_embd, model.cfg.n_head, model.cfg.head_size
    if model.lm_head.weight is not model.tok_emb.weight:
        raise LensError("the output head is not tied to the token embedding, and lens_weights maps only a tied one")
    ours = {name: p.detach() for name, p in model.named_parameters()}  # the tied head is listed once, as tok_emb.weight

    def take(name: str) -> torch.Tensor:
        if name not in ours:
            raise LensError(f"our model has no tensor {name}, which harness/lens.py maps: map the model as it is now")
        return ours.pop(name)

    zeros = torch.zeros_like
    out = {"embed.W_E": take("tok_emb.weight")}  # (V, C)
    out |= {"unembed.W_U": out["embed.W_E"].T, "unembed.b_U": zeros(out["embed.W_E"][:, 0])}  # (C, V), (V,): tied, no bias
    n_ctx = context or cfg.block_size
    if cfg.positions == "learned":
        out["pos_embed.W_pos"] = take("pos_emb.weight")[:n_ctx]  # (n_ctx, C)
    elif cfg.positions == "none":
        out["pos_embed.W_pos"] = out["embed.W_E"].new_zeros(n_ctx, C)  # (n_ctx, C): a table that adds nothing
    # rope: queries and keys turned by their positions, and no table on either side
    for block in (f"blocks.{i}." for i in range(cfg.n_layer)):  # each block's prefix, the same on both sides
        out[block + "ln1.w"], out[block + "ln1.b"] = take(block + "ln1.weight"), take(block + "ln1.bias")
        qkv = take(block + "attn.qkv.weight")  # (3C, C)
        qkv_bias = take(block + "attn.qkv.bias") if cfg.qkv_bias else zeros(qkv[:, 0])  # (3C,)
        for kind, weight, bias in zip("QKV", qkv.split(C), qkv_bias.split(C), strict=True):
            out[f"{block}attn.W_{kind}"] = weight.view(H, D, C).transpose(1, 2)  # (C, C) -> (H, D, C) -> (H, C, D)
            out[f"{block}attn.b_{kind}"] = bias.view(H, D)  # (C,) -> (H, D)
        if cfg.qk_norm:  # ours divides by the RMS alone; TransformerLens's RMSNorm then multiplies by its gains, ones here
            out[block + "attn.q_norm.w"], out[block + "attn.k_norm.w"] = qkv.new_ones(D), qkv.new_ones(D)
        out[block + "attn.W_O"] = take(block + "attn.proj.weight").view(C, H, D).permute(1, 2, 0)  # (C, H*D) -> (H, D, C)
        out[block + "attn.b_O"] = take(block + "attn.proj.bias")
        if cfg.mlp:
            out[block + "ln2.w"], out[block + "ln2.b"] = take(block + "ln2.weight"), take(block + "ln2.bias")
            out[block + "mlp.W_in"], out[block + "mlp.b_in"] = take(block + "mlp.fc.weight").T, take(block + "mlp.fc.bias")  # (C, 4C)
            out[block + "mlp.W_out"], out[block + "mlp.b_out"] = take(block + "mlp.proj.weight").T, take(block + "mlp.proj.bias")  # (4C, C)
    out["ln_final.w"], out["ln_final.b"] = take("ln_f.weight"), take("ln_f.bias")
    if ours:
        raise LensError(f"our tensor {next(iter(ours))} has no place in TransformerLens's model in harness/lens.py yet")
    return out


def to_hooked(model: GPT, tokenizer: Tokenizer | None = None, context: int | None = None):
    """Our model as a transformer_lens.HookedTransformer that computes the same logits, in eval mode on model's device.

    Given the model's tokenizer, the HookedTransformer reads strings too (to_tokens, to_str_tokens, the head detector),
    with the same ids; without it, it reads token ids only. context: the longest input, block_size unless given (a
    longer one for rope and none runs only): TransformerLens cuts a longer string to it, and fails on longer token ids.
    """
    with warnings.catch_warnings():  # 3.x's notice that 4.0 removes HookedTransformer: LENS_VERSIONS stays below 4
        warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)
        lens = import_lens().HookedTransformer(lens_config(model, context))
    lens.load_state_dict(lens.state_dict() | lens_weights(model, context))  # its buffers (the IGNORE value, mask caches) stay its own
    frozen = [lens.pos_embed.W_pos] if model.cfg.positions == "none" else []  # no positions: the table stays at zero
    frozen += [norm.w for block in lens.blocks for norm in (block.attn.q_norm, block.attn.k_norm)] if model.cfg.qk_norm else []
    for tensor in frozen:  # what ours does not learn stays as it is when the model is trained there
        tensor.requires_grad_(False)
    if tokenizer is not None:
        lens.set_tokenizer(hf_tokenizer(tokenizer))
    return lens.eval()


def load_hooked(path: str | Path, device: str | torch.device = "cpu", context: int | None = None):
    """A run's checkpoint (runs/<run>/ckpt.pt) as a HookedTransformer that reads strings with the run's own tokenizer
    (context: the longest input, as to_hooked's)."""
    model, tokenizer, _ = load_model(Path(path), device)
    return to_hooked(model, tokenizer, context)


def hf_tokenizer(tokenizer: Tokenizer):
    """Our tokenizer as a Hugging Face PreTrainedTokenizerFast with the same ids, built offline.

    char: the run's own characters, one token each. gpt2: GPT-2's byte-level BPE from the two files that tiktoken
    reads for it (encoder.json holds the ids, vocab.bpe the merges), from tiktoken's cache. Both pad with
    <|endoftext|>; char runs have no such token, so it gets the id after the vocabulary, which no embedding has:
    a padded batch fails there instead of reading a real character. The text "<|endoftext|>" itself reads as
    ours reads it, as ordinary text (split_special_tokens), never as that id.
    """
    from tokenizers import Regex, decoders, pre_tokenizers
    from tokenizers import Tokenizer as Fast
    from tokenizers.models import BPE, WordLevel
    from transformers import PreTrainedTokenizerFast

    if isinstance(tokenizer, CharTokenizer):
        fast = Fast(WordLevel({c: i for i, c in enumerate(tokenizer.chars)} | {END_OF_TEXT: tokenizer.vocab_size}, unk_token=None))
        fast.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character on its own
        fast.decoder = decoders.Fuse()  # joined back without spaces
        kind = reading_first(PreTrainedTokenizerFast, tokenizer.encode)  # a character outside the vocabulary, named
    elif isinstance(tokenizer, GPT2Tokenizer):
        from tiktoken.load import read_file_cached

        ids = json.loads(read_file_cached(GPT2_FILES + "encoder.json"))
        merges = [tuple(line.split(" ")) for line in read_file_cached(GPT2_FILES + "vocab.bpe").decode().splitlines()[1:] if line]
        fast = Fast(BPE(ids, merges))
        fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's split into words, then bytes
        fast.decoder = decoders.ByteLevel()
        kind = PreTrainedTokenizerFast  # bytes: every text reads
    else:
        raise LensError(f"no Hugging Face counterpart of the {tokenizer.name} tokenizer here; pass tokenizer=None and give token ids")
    return kind(tokenizer_object=fast, eos_token=END_OF_TEXT, pad_token=END_OF_TEXT, split_special_tokens=True)


def reading_first(base: type, read: Callable[[str], object]) -> type:
    """base, a Hugging Face tokenizer class, with its entry points (__call__, encode, tokenize) reading each text with
    `read` first: our CharTokenizer.encode, whose one-line error names the characters outside a char run's vocabulary,
    where the Hugging Face tokenizer says only "Missing [UNK] token" (its vocabulary has no token for the unknown)."""

    def first(method: Callable) -> Callable:
        def entry(self, text=None, *args, **kwargs):
            for one in [text] if isinstance(text, str) else text if isinstance(text, list | tuple) else []:  # a text or a batch
                if isinstance(one, str):
                    read(one)
            return method(self, text, *args, **kwargs)

        return entry

    return type(base.__name__, (base,), {name: first(getattr(base, name)) for name in ("__call__", "encode", "tokenize")})
