"""Our GPT opened in TransformerLens: a HookedTransformer with the same logits, built from a run's own config and weights.

TransformerLens, the library of the ARENA exercises, reads a model through hooks: run_with_cache keeps every
activation (cache["pattern", layer] holds a layer's attention weights), run_with_hooks changes any of them, and
transformer_lens.head_detector scores heads against a pattern. HookedTransformerConfig has a switch for each of
ours, so a model trained without its mask, scale or positions opens there computing exactly what it computes here.
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
    # Without positions, the learned table stays and holds zeros (lens_weights): hook_pos_embed then shows them adding nothing.
    "positions": one_of({True: {"positional_embedding_type": "standard"}, False: {"positional_embedding_type": "standard"}}),
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


def lens_config(model: GPT):
    """The HookedTransformerConfig of our model: every ModelConfig field mapped through FIELDS, or a LensError naming it."""
    cfg = model.cfg
    norms = {m.eps for m in model.modules() if isinstance(m, nn.LayerNorm)}
    if len(norms) != 1:
        raise LensError(f"the model's LayerNorms use eps {sorted(norms)}, and TransformerLens takes one eps for all of them")
    mapped = {"d_head": cfg.head_size, "d_mlp": 4 * cfg.n_embd, "normalization_type": "LN", "eps": norms.pop()}
    for field in fields(cfg):
        value = getattr(cfg, field.name)
        if field.name not in FIELDS:
            raise LensError(f"model.{field.name} has no TransformerLens counterpart in harness/lens.py yet, so this run cannot open there")
        lens = FIELDS[field.name](value)
        if lens is None:
            raise LensError(f"model.{field.name} = {value!r} has no TransformerLens counterpart in harness/lens.py yet")
        mapped |= lens
    parameter = next(model.parameters())
    return import_lens().HookedTransformerConfig(
        **mapped, default_prepend_bos=False, init_weights=False, device=str(parameter.device), dtype=parameter.dtype
    )


def lens_weights(model: GPT) -> dict[str, torch.Tensor]:
    """Our tensors under HookedTransformer's names and shapes, or a LensError naming a tensor that has no place there.

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
    out["pos_embed.W_pos"] = take("pos_emb.weight") if cfg.positions else model.tok_emb.weight.new_zeros(cfg.block_size, C)
    for block in (f"blocks.{i}." for i in range(cfg.n_layer)):  # each block's prefix, the same on both sides
        out[block + "ln1.w"], out[block + "ln1.b"] = take(block + "ln1.weight"), take(block + "ln1.bias")
        qkv = take(block + "attn.qkv.weight")  # (3C, C)
        qkv_bias = take(block + "attn.qkv.bias") if cfg.qkv_bias else zeros(qkv[:, 0])  # (3C,)
        for kind, weight, bias in zip("QKV", qkv.split(C), qkv_bias.split(C), strict=True):
            out[f"{block}attn.W_{kind}"] = weight.view(H, D, C).transpose(1, 2)  # (C, C) -> (H, D, C) -> (H, C, D)
            out[f"{block}attn.b_{kind}"] = bias.view(H, D)  # (C,) -> (H, D)
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


def to_hooked(model: GPT, tokenizer: Tokenizer | None = None):
    """Our model as a transformer_lens.HookedTransformer that computes the same logits, in eval mode on model's device.

    Given the model's tokenizer, the HookedTransformer reads strings too (to_tokens, to_str_tokens, the head detector),
    with the same ids; without it, it reads token ids only.
    """
    with warnings.catch_warnings():  # 3.x's notice that 4.0 removes HookedTransformer: LENS_VERSIONS stays below 4
        warnings.filterwarnings("ignore", "HookedTransformer is deprecated", DeprecationWarning)
        lens = import_lens().HookedTransformer(lens_config(model))
    lens.load_state_dict(lens.state_dict() | lens_weights(model))  # its buffers (the IGNORE value, mask caches) stay its own
    if not model.cfg.positions:
        lens.pos_embed.W_pos.requires_grad_(False)  # no positions: training it there keeps the table at zero
    if tokenizer is not None:
        lens.set_tokenizer(hf_tokenizer(tokenizer))
    return lens.eval()


def load_hooked(path: str | Path, device: str | torch.device = "cpu"):
    """A run's checkpoint (runs/<run>/ckpt.pt) as a HookedTransformer that reads strings with the run's own tokenizer."""
    model, tokenizer, _ = load_model(Path(path), device)
    return to_hooked(model, tokenizer)


def hf_tokenizer(tokenizer: Tokenizer):
    """Our tokenizer as a Hugging Face PreTrainedTokenizerFast with the same ids, built offline.

    char: the run's own characters, one token each. gpt2: GPT-2's byte-level BPE from the two files that tiktoken
    reads for it (encoder.json holds the ids, vocab.bpe the merges), from tiktoken's cache. Both pad with
    <|endoftext|>; char runs have no such token, so it gets the id after the vocabulary, which no embedding has:
    a padded batch fails there instead of reading a real character.
    """
    from tokenizers import Regex, decoders, pre_tokenizers
    from tokenizers import Tokenizer as Fast
    from tokenizers.models import BPE, WordLevel
    from transformers import PreTrainedTokenizerFast

    if isinstance(tokenizer, CharTokenizer):
        fast = Fast(WordLevel({c: i for i, c in enumerate(tokenizer.chars)} | {END_OF_TEXT: tokenizer.vocab_size}, unk_token=None))
        fast.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character on its own
        fast.decoder = decoders.Fuse()  # joined back without spaces
    elif isinstance(tokenizer, GPT2Tokenizer):
        from tiktoken.load import read_file_cached

        ids = json.loads(read_file_cached(GPT2_FILES + "encoder.json"))
        merges = [tuple(line.split(" ")) for line in read_file_cached(GPT2_FILES + "vocab.bpe").decode().splitlines()[1:] if line]
        fast = Fast(BPE(ids, merges))
        fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2's split into words, then bytes
        fast.decoder = decoders.ByteLevel()
    else:
        raise LensError(f"no Hugging Face counterpart of the {tokenizer.name} tokenizer here; pass tokenizer=None and give token ids")
    return PreTrainedTokenizerFast(tokenizer_object=fast, eos_token=END_OF_TEXT, pad_token=END_OF_TEXT)
