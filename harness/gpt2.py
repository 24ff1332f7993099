"""OpenAI's GPT-2 weights in our GPT, and our GPT out in GPT-2's file layout.

The hub's layout is a folder with config.json and model.safetensors (tensors only: reading it never
runs code, unlike a pickled .bin file). GPT-2 is our GPT with two ModelConfig switches set, a bias
on the query/key/value projection and the tanh GELU, so loading is a renaming: `hf_to_ours` maps the
hub's tensor names onto ours, `ours_to_hf` maps them back. GPT-2's names stay in this module.
"""

import json
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch
from huggingface_hub import constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
)
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from data.files import write_atomically
from data.tokenizer import GPT2_VOCAB_SIZE, GPT2Tokenizer, Tokenizer
from harness.folders import writable_folder
from harness.training.checkpoints import CheckpointError
from model import GPT, ModelConfig
from model.ablations import applied

GPT2_SIZES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")
HUB_FILES = ("config.json", "model.safetensors")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as in openai-community/gpt2

# The hub's names -> ours: outside the blocks, and the layers inside block N (the hub's h.N).
TOP_NAMES = {
    "wte.weight": "tok_emb.weight",
    "wpe.weight": "pos_emb.weight",
    "ln_f.weight": "ln_f.weight",
    "ln_f.bias": "ln_f.bias",
}
BLOCK_LAYERS = {
    "ln_1": "ln1",
    "attn.c_attn": "attn.qkv",
    "attn.c_proj": "attn.proj",
    "ln_2": "ln2",
    "mlp.c_fc": "mlp.fc",
    "mlp.c_proj": "mlp.proj",
}
# GPT-2 was written with Conv1D layers (c_attn, c_proj, c_fc): they store a weight as (in, out),
# nn.Linear as (out, in).
CONV1D_WEIGHT = re.compile(r"h\.\d+\.\w+\.c_\w+\.weight")
# Older files carry each layer's causal mask as buffers. Ours is built when attention asks for it,
# never loaded.
MASK_BUFFER = re.compile(r"h\.\d+\.attn\.(masked_)?bias")
# The activation_function values whose GELU we have. transformers' "gelu" is the exact erf GELU.
GELU_NAMES = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "exact"}


def gpt2_names(n_layer: int) -> dict[str, str]:
    """Every tensor of a GPT-2 with n_layer blocks: the hub's name (without `transformer.`) -> ours."""
    names = dict(TOP_NAMES)
    for n in range(n_layer):
        for hub, ours in BLOCK_LAYERS.items():
            names |= {
                f"h.{n}.{hub}.{kind}": f"blocks.{n}.{ours}.{kind}" for kind in ("weight", "bias")
            }
    return names


def count_layers(names, pattern: str) -> int:
    # pattern's group 1: a block number
    return 1 + max(
        (int(match[1]) for name in names if (match := re.match(pattern, name))), default=-1
    )


def hf_to_ours(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a GPT-2 state dict from the hub's names to our GPT's, transposing the Conv1D weights.

    Names may carry the `transformer.` prefix (files written by save_pretrained) or not (the hub's
    original gpt2 file). Mask buffers are dropped; so is lm_head.weight, after checking that it
    equals the token embedding, because our output head is always tied to it.
    """
    # errors name tensors as the file does
    prefix = "transformer." if any(name.startswith("transformer.") for name in state) else ""
    state = {name.removeprefix("transformer."): tensor for name, tensor in state.items()}
    lm_head = state.pop("lm_head.weight", None)
    names = gpt2_names(count_layers(state, r"h\.(\d+)\."))
    unexpected = [name for name in state if name not in names and not MASK_BUFFER.fullmatch(name)]
    if unexpected:
        raise CheckpointError(
            f"unexpected tensor {prefix}{unexpected[0]} in the GPT-2 weights: it has no place in our GPT"
        )
    missing = [name for name in names if name not in state]
    if missing:
        raise CheckpointError(
            f"the GPT-2 weights lack {prefix}{missing[0]} ({len(missing)} tensors missing in all)"
        )
    if lm_head is not None and not torch.equal(lm_head, state["wte.weight"]):
        raise CheckpointError(
            "lm_head.weight differs from wte.weight: that output head is untied, and ours is always tied"
        )
    transposed = {
        hub: state[hub].t() if CONV1D_WEIGHT.fullmatch(hub) else state[hub] for hub in names
    }
    # float32, our model's dtype
    return {ours: transposed[hub].float().contiguous() for hub, ours in names.items()}


def ours_to_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of hf_to_ours: our state dict under the hub's names, as save_pretrained writes
    them.

    The tied lm_head.weight is left out (GPT-2 ties it too). A model without qkv_bias gets a zero
    c_attn.bias, because GPT-2 always has one. Every tensor is a fresh CPU copy: safetensors
    refuses tensors that share storage, as the tied embedding and head do.
    """
    state = {
        name: tensor.detach().to("cpu", torch.float32)
        for name, tensor in state.items()
        if name != "lm_head.weight"
    }
    n_layer = count_layers(state, r"blocks\.(\d+)\.")
    for n in range(n_layer):
        # (3C,)
        state.setdefault(
            f"blocks.{n}.attn.qkv.bias", torch.zeros(state[f"blocks.{n}.attn.qkv.weight"].shape[0])
        )
    hub_names = {ours: hub for hub, ours in gpt2_names(n_layer).items()}
    unknown = [name for name in state if name not in hub_names]
    if unknown:
        raise CheckpointError(
            f"our tensor {unknown[0]} has no GPT-2 counterpart; only plain GPT models export"
        )
    hf = {hub_names[name]: tensor for name, tensor in state.items()}
    hf = {hub: tensor.t() if CONV1D_WEIGHT.fullmatch(hub) else tensor for hub, tensor in hf.items()}
    return {
        "transformer." + hub: tensor.clone(memory_format=torch.contiguous_format)
        for hub, tensor in hf.items()
    }


def config_from_hf(hf: dict, source: str) -> ModelConfig:
    """Our ModelConfig for a GPT-2 config.json, refusing the variants our GPT cannot run exactly.

    Missing keys take GPT2Config's defaults (the hub's gpt2 file leaves out scale_attn_weights).
    Dropout is 0: the weights are for inference, and a fine-tuning run sets its own.
    """

    def refuse(why: str):
        raise CheckpointError(f"{source}: {why}; only plain GPT-2 configs load here")

    if hf.get("model_type") != "gpt2":
        refuse(f"model_type is {hf.get('model_type')!r}, not 'gpt2'")
    for switch in (
        "scale_attn_by_inverse_layer_idx",
        "reorder_and_upcast_attn",
        "add_cross_attention",
    ):
        if hf.get(switch):
            refuse(f"{switch} is set, and our attention has no such switch")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in GELU_NAMES:
        refuse(f"activation_function {activation!r} is none of {', '.join(GELU_NAMES)}")
    if hf.get("layer_norm_epsilon", 1e-5) != 1e-5:
        refuse(f"layer_norm_epsilon is {hf['layer_norm_epsilon']}, ours is LayerNorm's 1e-5")
    try:
        if hf.get("n_inner") not in (None, 4 * hf["n_embd"]):
            refuse(
                f"n_inner is {hf['n_inner']}, and our MLP is 4 x n_embd = {4 * hf['n_embd']} wide"
            )
        sizes = {
            "n_layer": hf["n_layer"],
            "n_head": hf["n_head"],
            "n_embd": hf["n_embd"],
            "block_size": hf["n_positions"],
        }
        gpt2 = {
            "qkv_bias": True,
            "gelu": GELU_NAMES[activation],
            "scaled": hf.get("scale_attn_weights", True),
        }
        return ModelConfig(**sizes, vocab_size=hf["vocab_size"], **gpt2, attention="sdpa")
    except KeyError as e:
        refuse(f"config.json lacks {e.args[0]}")
    except (TypeError, ValueError) as e:
        refuse(f"config.json does not fit our model ({e})")


def find_files(name_or_folder: str | Path) -> tuple[Path, Path, dict]:
    """(config.json, model.safetensors, info) of a local folder in the hub's layout, or of a hub
    model: cached, else downloaded.
    """
    folder = Path(name_or_folder).expanduser()
    if folder.is_dir():
        missing = " and ".join(
            filename
            for filename in ("config.json", "model.safetensors")
            if not (folder / filename).is_file()
        )
        if missing:
            raise CheckpointError(
                f"{folder} lacks {missing}; pretrained weights load from config.json and model.safetensors only"
            )
        return (
            folder / "config.json",
            folder / "model.safetensors",
            {"name": str(name_or_folder), "source": str(folder)},
        )
    name, sizes = str(name_or_folder), ", ".join(GPT2_SIZES)
    if name not in GPT2_SIZES and not HUB_ID.fullmatch(name):
        raise CheckpointError(
            f"no folder {name}, nor a hub model id; give a folder with config.json and model.safetensors, or {sizes}"
        )
    try:
        try:  # the cache first: a model once downloaded loads without the network
            config_path, weights_path = (
                Path(hf_hub_download(repo_id=name, filename=f, local_files_only=True))
                for f in HUB_FILES
            )
        # not cached: offline, huggingface_hub would retry for half a minute before saying so
        except LocalEntryNotFoundError:
            # so ask the name service once (offline: OSError, below)
            socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
            config_path, weights_path = (
                Path(hf_hub_download(repo_id=name, filename=f)) for f in HUB_FILES
            )
    except RepositoryNotFoundError:
        raise CheckpointError(
            f"no model {name} on the Hugging Face hub (or it is private); try one of {sizes}"
        ) from None
    except EntryNotFoundError as e:
        # the hub has the model, but not in safetensors
        if not isinstance(e, LocalEntryNotFoundError):
            raise CheckpointError(
                f"{name} on the hub lacks config.json or model.safetensors (.bin pickles are never read)"
            ) from None
        raise not_reachable(name) from None  # offline, or the hub unreachable, and not in the cache
    except HFValidationError:
        raise CheckpointError(f"{name} is not a valid hub model id; try one of {sizes}") from None
    except OSError:  # a network error that huggingface_hub passed on as it was
        raise not_reachable(name) from None
    return config_path, weights_path, {"name": name, "source": str(weights_path.parent)}


def not_reachable(name: str) -> CheckpointError:
    return CheckpointError(
        f"{name} is not in the Hugging Face cache {constants.HF_HUB_CACHE} and the hub cannot be reached: "
        f"on a connected machine run `hf download {name} config.json model.safetensors` into that cache, "
        "or pass a local folder holding config.json and model.safetensors"
    )


def build(cfg: ModelConfig, state: dict[str, torch.Tensor], source: str) -> GPT:
    """Our GPT holding `state`, without the seconds that a random init (overwritten at once) would
    cost.

    The GPT is built on the meta device (shapes only, no memory), and load_state_dict(assign=True)
    puts the loaded tensors in place; the output head's tie to the token embedding is restored by
    hand.
    """
    with torch.device("meta"):
        model = GPT(cfg)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as e:  # a tensor whose shape does not fit config.json
        raise CheckpointError(
            f"{source}: the weights do not fit config.json ({str(e).strip().splitlines()[-1].strip()[:200]})"
        ) from None
    missing = [name for name in missing if name != "lm_head.weight"]
    # only on purpose: break_gpt2.py takes them out, to show GPT-2 with its positions zeroed
    if "pos_emb.weight" in unexpected:
        raise CheckpointError(
            f"{source}: these weights were trained with learned positions, and model.positions is {cfg.positions}"
        )
    if missing or unexpected:
        detail = f"lack {missing[0]}" if missing else f"also hold {unexpected[0]}"
        raise CheckpointError(
            f"{source}: config.json says {cfg.n_layer} layers, and the weights {detail} (in our names)"
        )
    model.lm_head.weight = model.tok_emb.weight  # tied again: assign gave each its own Parameter
    return model


def load_pretrained(
    name_or_folder: str | Path, device: str | torch.device = "cpu"
) -> tuple[GPT, Tokenizer, dict]:
    """A GPT-2 from the hub (gpt2, gpt2-medium, ...) or a local folder: (model in eval mode,
    tokenizer, info).

    info holds "name" and "source" (the folder of the files), for the scripts to print. The
    tokenizer is tiktoken's gpt2, so only its 50257-token vocabulary loads: a model without a
    tokenizer could not read a prompt.
    """
    config_path, weights_path, info = find_files(name_or_folder)
    try:
        hf_config = json.loads(config_path.read_text(encoding="utf-8"))
        state = load_file(weights_path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SafetensorError) as e:
        raise CheckpointError(
            f"cannot read {info['source']}: config.json or model.safetensors is damaged ({type(e).__name__})"
        ) from None
    cfg = config_from_hf(hf_config if isinstance(hf_config, dict) else {}, info["source"])
    if cfg.vocab_size != GPT2_VOCAB_SIZE:
        raise CheckpointError(
            f"{info['source']}: {cfg.vocab_size} tokens, and only GPT-2's {GPT2_VOCAB_SIZE} have a tokenizer here"
        )
    model = build(cfg, hf_to_ours(state), info["source"])
    return model.to(device).eval(), GPT2Tokenizer(), info


def export_hf(model: GPT, tokenizer_name: str, folder: Path) -> Path:
    """Write model as a GPT-2 in the hub's layout (config.json, model.safetensors); returns the
    folder.

    transformers' GPT2LMHeadModel.from_pretrained(folder) then gives our logits, and so does
    load_pretrained(folder). GPT-2 always masks, adds learned positions, has no QK-norm, cap or
    RoPE, and reads the gpt2 tokenizer's ids: any other model (--no-scale aside: GPT-2's config can
    say that) cannot be written as one.
    """
    cfg, changed = model.cfg, [c.flag for c in applied(model.cfg) if c.field != "scaled"]
    if changed:
        raise CheckpointError(
            f"cannot export a model with {' and '.join(changed)}: GPT-2's format has no way to say it"
        )
    if tokenizer_name != "gpt2" or cfg.vocab_size != GPT2_VOCAB_SIZE:
        raise CheckpointError(
            f"cannot export a model on the {tokenizer_name} tokenizer: GPT-2 reads the gpt2 tokenizer's ids"
        )
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_embd": cfg.n_embd,
        "n_positions": cfg.block_size,
        "n_ctx": cfg.block_size,
        "vocab_size": cfg.vocab_size,
        # transformers' "gelu" is the exact erf GELU
        "activation_function": "gelu_new" if cfg.gelu == "tanh" else "gelu",
        "scale_attn_weights": cfg.scaled,
        "layer_norm_epsilon": 1e-5,  # nn.LayerNorm's default, which ours use
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "tie_word_embeddings": True,
    }
    folder = writable_folder(folder, "--out")
    # not save_file: 0600
    write_atomically(
        folder / "model.safetensors",
        save(ours_to_hf(model.state_dict()), metadata={"format": "pt"}),
    )
    write_atomically(folder / "config.json", (json.dumps(config, indent=2) + "\n").encode())
    return folder
