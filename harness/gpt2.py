"""GPT-2's weights in our GPT, and ours out in the hub's layout (config.json, model.safetensors).
GPT-2 is our GPT with a qkv bias and the tanh GELU, so loading is a renaming."""

import json
import re
import socket
from pathlib import Path
from urllib.parse import urlparse

import torch
from huggingface_hub import constants, errors, hf_hub_download
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

# The hub's names -> ours, outside the blocks and in block N (the hub's h.N)
TOP_NAMES = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight"}
BLOCK_LAYERS = {
    "ln_1": "ln1",
    "attn.c_attn": "attn.qkv",
    "attn.c_proj": "attn.proj",
    "ln_2": "ln2",
    "mlp.c_fc": "mlp.fc",
    "mlp.c_proj": "mlp.proj",
}
# GPT-2's Conv1D layers store a weight as (in, out), nn.Linear as (out, in)
CONV1D_WEIGHT = re.compile(r"h\.\d+\.\w+\.c_\w+\.weight")
# older files carry each layer's causal mask as buffers; ours is never loaded
MASK_BUFFER = re.compile(r"h\.\d+\.attn\.(masked_)?bias")
UNKNOWN_SWITCHES = (
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "add_cross_attention",
)
SIZES = {"n_layer": "n_layer", "n_head": "n_head", "n_embd": "n_embd", "block_size": "n_positions"}
# the activation_function values whose GELU we have; transformers' "gelu" is the exact erf GELU
GELU_NAMES = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "exact"}


def gpt2_names(n_layer: int) -> dict[str, str]:
    names = TOP_NAMES | {f"ln_f.{kind}": f"ln_f.{kind}" for kind in ("weight", "bias")}
    for n in range(n_layer):
        for hub, ours in BLOCK_LAYERS.items():
            for kind in ("weight", "bias"):
                names[f"h.{n}.{hub}.{kind}"] = f"blocks.{n}.{ours}.{kind}"
    return names


def count_layers(names, pattern: str) -> int:
    numbers = [int(match[1]) for name in names if (match := re.match(pattern, name))]
    return 1 + max(numbers, default=-1)


def conv1d(hub: str, tensor: torch.Tensor) -> torch.Tensor:
    return tensor.t() if CONV1D_WEIGHT.fullmatch(hub) else tensor


def hf_to_ours(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    prefix = "transformer." if any(name.startswith("transformer.") for name in state) else ""
    state = {name.removeprefix("transformer."): tensor for name, tensor in state.items()}
    lm_head = state.pop("lm_head.weight", None)
    names = gpt2_names(count_layers(state, r"h\.(\d+)\."))
    unexpected = [name for name in state if name not in names and not MASK_BUFFER.fullmatch(name)]
    if unexpected:
        raise CheckpointError(
            f"unexpected tensor {prefix}{unexpected[0]}: our GPT has no such layer"
        )
    missing = [name for name in names if name not in state]
    if missing:
        raise CheckpointError(
            f"the weights lack {prefix}{missing[0]} ({len(missing)} tensors missing)"
        )
    if lm_head is not None and not torch.equal(lm_head, state["wte.weight"]):
        raise CheckpointError("lm_head.weight differs from wte.weight: untied, ours is tied")
    return {ours: conv1d(hub, state[hub]).float().contiguous() for hub, ours in names.items()}


def ours_to_hf(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = {name: tensor.detach().to("cpu", torch.float32) for name, tensor in state.items()}
    state.pop("lm_head.weight", None)
    n_layer = count_layers(state, r"blocks\.(\d+)\.")
    for n in range(n_layer):
        qkv = f"blocks.{n}.attn.qkv."
        state.setdefault(qkv + "bias", torch.zeros(len(state[qkv + "weight"])))
    hub_names = {ours: hub for hub, ours in gpt2_names(n_layer).items()}
    unknown = [name for name in state if name not in hub_names]
    if unknown:
        raise CheckpointError(f"our tensor {unknown[0]} has no GPT-2 counterpart; it cannot export")
    # fresh copies: safetensors refuses tensors that share storage, as the tied embedding and head
    hf = {hub_names[name]: tensor for name, tensor in state.items()}
    return {"transformer." + hub: conv1d(hub, t).contiguous().clone() for hub, t in hf.items()}


def config_from_hf(hf: dict, source: str) -> ModelConfig:
    """A missing key takes GPT2Config's default."""

    def refuse(why: str):
        raise CheckpointError(f"{source}: {why}; only plain GPT-2 configs load here")

    if hf.get("model_type") != "gpt2":
        refuse(f"model_type is {hf.get('model_type')!r}, not 'gpt2'")
    for switch in UNKNOWN_SWITCHES:
        if hf.get(switch):
            refuse(f"{switch} is set; ours has no such switch")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in GELU_NAMES:
        refuse(f"activation_function {activation!r} is none of {', '.join(GELU_NAMES)}")
    if hf.get("layer_norm_epsilon", 1e-5) != 1e-5:
        refuse(f"layer_norm_epsilon is {hf['layer_norm_epsilon']}, ours is LayerNorm's 1e-5")
    try:
        width = 4 * hf["n_embd"]
        if hf.get("n_inner") not in (None, width):
            refuse(f"n_inner is {hf['n_inner']}, our MLP 4 x n_embd = {width}")
        return ModelConfig(
            **{ours: hf[key] for ours, key in SIZES.items()},
            vocab_size=hf["vocab_size"],
            qkv_bias=True,
            gelu=GELU_NAMES[activation],
            scaled=hf.get("scale_attn_weights", True),
            attention="sdpa",
        )
    except KeyError as e:
        refuse(f"config.json lacks {e.args[0]}")
    except (TypeError, ValueError) as e:
        refuse(f"config.json does not fit our model ({e})")


def find_files(name_or_folder: str | Path) -> tuple[Path, Path, dict]:
    folder = Path(name_or_folder).expanduser()
    if folder.is_dir():
        missing = " and ".join(name for name in HUB_FILES if not (folder / name).is_file())
        if missing:
            raise CheckpointError(f"{folder} lacks {missing}; give a folder with both")
        info = {"name": str(name_or_folder), "source": str(folder)}
        return folder / "config.json", folder / "model.safetensors", info
    name, sizes = str(name_or_folder), ", ".join(GPT2_SIZES)
    if name not in GPT2_SIZES and not HUB_ID.fullmatch(name):
        raise CheckpointError(
            f"no folder {name}, nor a hub id; give a folder with {' and '.join(HUB_FILES)}, "
            f"or {sizes}"
        )

    def download(**options) -> list[Path]:
        return [Path(hf_hub_download(repo_id=name, filename=f, **options)) for f in HUB_FILES]

    try:
        try:
            config_path, weights_path = download(local_files_only=True)
        except errors.LocalEntryNotFoundError:  # one name lookup: offline, the hub retries long
            socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
            config_path, weights_path = download()
    except (errors.RepositoryNotFoundError, errors.HFValidationError):
        raise CheckpointError(
            f"no model {name} on the hub (or it is private); try {sizes}"
        ) from None
    except (errors.EntryNotFoundError, OSError) as e:  # OSError: a network error
        local = isinstance(e, errors.LocalEntryNotFoundError)
        if isinstance(e, errors.EntryNotFoundError) and not local:
            raise CheckpointError(
                f"{name} on the hub lacks config.json or model.safetensors (.bin is never read)"
            ) from None
        raise CheckpointError(
            f"{name} is not in the Hugging Face cache {constants.HF_HUB_CACHE} and the hub cannot "
            f"be reached: run `hf download {name} {' '.join(HUB_FILES)}` online, or pass a folder"
        ) from None
    return config_path, weights_path, {"name": name, "source": str(weights_path.parent)}


def build(cfg: ModelConfig, state: dict[str, torch.Tensor], source: str) -> GPT:
    with torch.device("meta"):
        model = GPT(cfg)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as e:
        raise CheckpointError(
            f"{source}: the weights do not fit config.json "
            f"({str(e).strip().splitlines()[-1].strip()[:200]})"
        ) from None
    missing = [name for name in missing if name != "lm_head.weight"]
    # break_gpt2.py leaves them out on purpose, to show GPT-2 with its positions zeroed
    if "pos_emb.weight" in unexpected:
        raise CheckpointError(
            f"{source}: these weights were trained with learned positions, "
            f"and model.positions is {cfg.positions}"
        )
    if missing or unexpected:
        detail = f"lack {missing[0]}" if missing else f"also hold {unexpected[0]}"
        raise CheckpointError(
            f"{source}: config.json says {cfg.n_layer} layers, "
            f"and the weights {detail} (in our names)"
        )
    model.lm_head.weight = model.tok_emb.weight  # tied again: assign gave each its own Parameter
    return model


def load_pretrained(
    name_or_folder: str | Path, device: str | torch.device = "cpu"
) -> tuple[GPT, Tokenizer, dict]:
    """From the hub (gpt2, gpt2-medium, ...) or a folder: (model in eval mode, tokenizer, info)."""
    config_path, weights_path, info = find_files(name_or_folder)
    try:
        hf_config = json.loads(config_path.read_text(encoding="utf-8"))
        state = load_file(weights_path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SafetensorError) as e:
        raise CheckpointError(
            f"cannot read {info['source']}: a damaged config.json or model.safetensors "
            f"({type(e).__name__})"
        ) from None
    cfg = config_from_hf(hf_config if isinstance(hf_config, dict) else {}, info["source"])
    if cfg.vocab_size != GPT2_VOCAB_SIZE:
        raise CheckpointError(
            f"{info['source']}: {cfg.vocab_size} tokens; only GPT-2's {GPT2_VOCAB_SIZE} have a "
            "tokenizer here"
        )
    model = build(cfg, hf_to_ours(state), info["source"])
    return model.to(device).eval(), GPT2Tokenizer(), info


def export_hf(model: GPT, tokenizer_name: str, folder: Path) -> Path:
    cfg, changed = model.cfg, [c.flag for c in applied(model.cfg) if c.field != "scaled"]
    if changed:
        raise CheckpointError(
            f"cannot export a model with {' and '.join(changed)}: "
            "GPT-2's format has no way to say it"
        )
    if not cfg.mlp:
        raise CheckpointError(
            "cannot export an attention-only model: GPT-2 has an MLP in every block"
        )
    if tokenizer_name != "gpt2" or cfg.vocab_size != GPT2_VOCAB_SIZE:
        raise CheckpointError(
            f"cannot export a model on the {tokenizer_name} tokenizer: GPT-2 reads gpt2's ids"
        )
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        **{key: getattr(cfg, ours) for ours, key in SIZES.items()},
        "n_ctx": cfg.block_size,
        "vocab_size": cfg.vocab_size,
        "activation_function": "gelu_new" if cfg.gelu == "tanh" else "gelu",
        "scale_attn_weights": cfg.scaled,
        "layer_norm_epsilon": 1e-5,  # nn.LayerNorm's default, which ours use
        **dict.fromkeys(("resid_pdrop", "embd_pdrop", "attn_pdrop"), cfg.dropout),
        "tie_word_embeddings": True,
    }
    folder = writable_folder(folder, "--out")
    weights = save(ours_to_hf(model.state_dict()), metadata={"format": "pt"})
    write_atomically(folder / "model.safetensors", weights)  # not save_file, which writes 0600
    write_atomically(folder / "config.json", (json.dumps(config, indent=2) + "\n").encode())
    return folder
