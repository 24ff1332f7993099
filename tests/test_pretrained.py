"""Tests for harness/gpt2.py: GPT-2's weights give transformers' logits in our GPT, and back.

The GPT-2s here are small random ones that transformers builds and saves into tmp_path; no test
reaches the hub (offline mode, and huggingface_hub's cache is an empty folder in tmp_path).
transformers is a test-only dependency, installed by .ci/run.
"""

import dataclasses
import json
import shutil

import pytest
import torch
from conftest import assert_close, gpt2_encoding_or_skip, import_or_skip

transformers = import_or_skip(
    "transformers", "transformers is a test dependency: pip install -r requirements-dev.txt"
)
import huggingface_hub  # noqa: E402  (installed with transformers)
from safetensors.torch import save_file  # noqa: E402

from configs import ConfigError  # noqa: E402
from harness.folders import OutputError, export_folder  # noqa: E402
from harness.gpt2 import (  # noqa: E402
    GPT2_VOCAB_SIZE,
    build,
    export_hf,
    hf_to_ours,
    load_pretrained,
    ours_to_hf,
)
from harness.training.checkpoints import CheckpointError  # noqa: E402
from harness.training.starting_weights import starting_config  # noqa: E402
from model import GPT, ModelConfig  # noqa: E402

# microsecond-sized ops: a second thread only waits for a core
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

SMALL = {"n_layer": 2, "n_head": 2, "n_embd": 32}
T = 64  # block size of every model here


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """huggingface_hub reads its settings once, at import: patch the module's values, not only the
    environment.
    """
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture(scope="module")
def gpt2_tokenizer_files():
    """load_pretrained hands back tiktoken's gpt2 tokenizer, which needs its BPE files."""
    gpt2_encoding_or_skip()


def random_gpt2(seed: int = 0, **config) -> "transformers.GPT2LMHeadModel":
    """A small GPT-2 with every parameter random, biases and LayerNorm gains included (they start at
    0 and 1).
    """
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(**SMALL, n_positions=T, vocab_size=GPT2_VOCAB_SIZE, **config)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "ln_" in name and name.endswith("weight") else 0.0, 0.2)
    return model


def random_ours(seed: int = 0, **config) -> GPT:
    """Our GPT on the gpt2 vocabulary, with random biases and LayerNorm parameters as well."""
    torch.manual_seed(seed)
    model = GPT(ModelConfig(**SMALL, block_size=T, vocab_size=GPT2_VOCAB_SIZE, **config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.normal_(1.0 if "ln" in name and name.endswith("weight") else 0.0, 0.2)
    return model


def tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, GPT2_VOCAB_SIZE, (2, T), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits_of(model, idx: torch.Tensor) -> torch.Tensor:
    out = model(idx)
    return out.logits if hasattr(out, "logits") else out[0]


@pytest.fixture(scope="module")
def saved_gpt2(tmp_path_factory):
    """A random GPT-2 written by save_pretrained (names with the `transformer.` prefix)."""
    folder = tmp_path_factory.mktemp("gpt2")
    model = random_gpt2()
    model.save_pretrained(folder)
    return model, folder


def edited_copy(folder, tmp_path, **config):
    """A copy of a saved model folder, with config.json's keys changed."""
    copy = shutil.copytree(folder, tmp_path / "edited")
    path = copy / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return copy


# 1. Loading: the same logits as transformers


@pytest.mark.parametrize("scaled", [True, False], ids=["scaled", "unscaled"])
def test_loaded_gpt2_gives_transformers_logits(scaled, tmp_path, gpt2_tokenizer_files):
    hf = random_gpt2(scale_attn_weights=scaled)
    hf.save_pretrained(tmp_path / "gpt2")
    model, tokenizer, info = load_pretrained(str(tmp_path / "gpt2"))
    assert (model.cfg.qkv_bias, model.cfg.gelu, model.cfg.scaled, model.cfg.block_size) == (
        True,
        "tanh",
        scaled,
        T,
    )
    assert tokenizer.name == "gpt2" and info["source"] == str(tmp_path / "gpt2")
    assert not model.training
    idx = tokens()
    assert_close(
        logits_of(model, idx),
        logits_of(hf, idx),
        atol=1e-5,
        msg=f"ours vs transformers ({'scaled' if scaled else 'unscaled'})",
    )


def test_loaded_model_is_whole(saved_gpt2, gpt2_tokenizer_files):
    """Built on the meta device: the head must be tied again, and nothing left on the meta
    device.
    """
    _, folder = saved_gpt2
    model, _, _ = load_pretrained(folder)
    assert model.lm_head.weight is model.tok_emb.weight
    assert model.num_params() == sum(p.numel() for p in saved_gpt2[0].parameters())
    assert {t.device.type for t in model.state_dict().values()} == {"cpu"}
    assert all(p.requires_grad for p in model.parameters()), (
        "a loaded model must stay trainable (fine-tuning)"
    )


def test_every_attention_backend_and_the_cache_agree(saved_gpt2, gpt2_tokenizer_files):
    hf, folder = saved_gpt2
    model, _, _ = load_pretrained(folder)
    idx = tokens(1)
    expected = logits_of(hf, idx)
    for backend in ("manual", "tiled"):
        other = GPT(dataclasses.replace(model.cfg, attention=backend)).eval()
        other.load_state_dict(model.state_dict())
        assert_close(
            logits_of(other, idx), expected, atol=1e-5, msg=f"{backend} backend vs transformers"
        )
    cached = model.generate(idx[:1, :8], 20, top_k=1, use_cache=True)
    assert torch.equal(cached, model.generate(idx[:1, :8], 20, top_k=1, use_cache=False)), (
        "KV cache changed greedy tokens"
    )


def test_hub_original_naming_without_prefix_and_with_mask_buffers(
    saved_gpt2, tmp_path, gpt2_tokenizer_files
):
    """The hub's own gpt2 file: no `transformer.` prefix, and the old causal-mask buffers in every
    layer.
    """
    hf, folder = saved_gpt2
    state = {
        name.removeprefix("transformer."): t.clone()
        for name, t in hf.state_dict().items()
        if name != "lm_head.weight"
    }
    for n in range(SMALL["n_layer"]):
        state[f"h.{n}.attn.bias"] = torch.ones(T, T).tril().view(1, 1, T, T)
        state[f"h.{n}.attn.masked_bias"] = torch.tensor(-1e4)
    (tmp_path / "hub").mkdir()
    save_file(state, tmp_path / "hub" / "model.safetensors")
    shutil.copy(folder / "config.json", tmp_path / "hub" / "config.json")
    model, _, _ = load_pretrained(tmp_path / "hub")
    idx = tokens(2)
    assert_close(
        logits_of(model, idx), logits_of(hf, idx), atol=1e-5, msg="prefix-less file vs transformers"
    )


def test_hf_to_ours_and_back_is_the_identity(saved_gpt2):
    hf_state = {
        name: t for name, t in saved_gpt2[0].state_dict().items() if name != "lm_head.weight"
    }
    ours = hf_to_ours(hf_state)
    assert ours["blocks.0.attn.qkv.weight"].shape == (3 * 32, 32), (
        "Conv1D weights must be transposed to (out, in)"
    )
    back = ours_to_hf(ours)
    assert back.keys() == hf_state.keys()
    for name, tensor in hf_state.items():
        assert torch.equal(back[name], tensor), name


# 2. Export: transformers reads our models, and so does our loader


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"scaled": False},
        {"qkv_bias": True, "gelu": "tanh"},
        {"qkv_bias": True, "scaled": False},
    ],
    ids=["ours", "unscaled", "gpt2-like", "bias-unscaled"],
)
def test_export_round_trip(config, tmp_path, gpt2_tokenizer_files):
    ours = random_ours(**config)
    folder = export_hf(ours, "gpt2", tmp_path / "export")
    idx = tokens(3)
    expected = logits_of(ours, idx)
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    assert_close(
        logits_of(hf, idx), expected, atol=1e-5, msg=f"transformers on our export {config}"
    )
    loaded, _, _ = load_pretrained(folder)
    assert_close(
        logits_of(loaded, idx), expected, atol=1e-5, msg=f"our loader on our export {config}"
    )


def test_export_never_overwrites_unasked_and_never_a_run(tmp_path):
    """--out into a folder used to replace its config.json: a run's record of how it was trained, in
    --out runs/NAME.
    """
    folder = export_hf(random_ours(), "gpt2", tmp_path / "export")
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"], (
        f"both files are written alike: {modes}"
    )
    with pytest.raises(
        OutputError,
        match=rf"{folder} is not empty \(config.json, model.safetensors\); pass --overwrite",
    ):
        export_folder(folder, overwrite=False)
    # an earlier export may be replaced when asked
    assert export_folder(folder, overwrite=True) == folder
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("x")
    with pytest.raises(
        OutputError, match=rf"{other} is not empty \(todo.txt\); export to a new or empty folder"
    ):
        export_folder(other, overwrite=True)
    run = tmp_path / "runs" / "g2"
    run.mkdir(parents=True)
    (run / "config.json").write_text('{"model": {}, "data": {}, "train": {}}')
    (run / "ckpt.pt").write_bytes(b"")
    with pytest.raises(OutputError, match=rf"{run} holds a training run; export to another folder"):
        export_folder(run, overwrite=True)


def test_hub_model_comes_from_the_cache_first_and_offline_fails_at_once(monkeypatch):
    """Offline, huggingface_hub retried for about 25 s before the one-line error; a name that does
    not resolve means offline.
    """
    calls = []

    def download(repo_id, filename, local_files_only=False):
        calls.append((filename, local_files_only))
        if not local_files_only:
            pytest.fail("went to the network although the hub's name does not resolve")
        raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")

    monkeypatch.setattr("harness.gpt2.hf_hub_download", download)
    monkeypatch.setattr(
        "socket.getaddrinfo", lambda *a: (_ for _ in ()).throw(OSError("Name or service not known"))
    )
    with pytest.raises(
        CheckpointError,
        match="gpt2 is not in the Hugging Face cache .* and the hub cannot be reached",
    ):
        load_pretrained("gpt2")
    assert calls == [("config.json", True)]


@pytest.mark.parametrize(
    ("changes", "flags"),
    [
        ({"causal": False}, "--no-mask"),
        ({"positions": "none"}, "--no-pos"),
        ({"qk_norm": True}, "--qk-norm"),
        ({"softcap": 50.0}, "--softcap"),
        ({"positions": "rope"}, "--rope"),
        ({"qk_norm": True, "positions": "rope"}, "--qk-norm and --rope"),
        ({"kv_heads": 1}, "--kv-heads"),
        ({"window": 16}, "--window"),
        ({"gate": True}, "--gate"),
        ({"sink": True}, "--sink"),
        (
            {"kv_heads": 1, "window": 8, "window_layers": "LG", "gate": True, "sink": True},
            "--kv-heads and --window and --gate and --sink",
        ),
    ],
)
def test_export_refuses_what_gpt2_cannot_be(tmp_path, changes, flags):
    with pytest.raises(
        CheckpointError,
        match=f"cannot export a model with {flags}: GPT-2's format has no way to say it",
    ) as refused:
        export_hf(random_ours(**changes), "gpt2", tmp_path / "out")
    with pytest.raises(CheckpointError, match="char tokenizer") as char:
        export_hf(GPT(ModelConfig(**SMALL, block_size=T, vocab_size=65)), "char", tmp_path / "char")
    assert "\n" not in str(refused.value) + str(char.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "char").exists()


def test_export_refuses_an_attention_only_model(tmp_path):
    with pytest.raises(CheckpointError, match="attention-only.*an MLP in every block") as refused:
        export_hf(random_ours(mlp=False), "gpt2", tmp_path / "out")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_gpt2_weights_lose_their_positions_only_on_purpose(saved_gpt2, gpt2_tokenizer_files):
    """Refused with one line (fine-tuning, loading); break_gpt2.py drops them on purpose: GPT-2 with
    its positions zeroed.
    """
    model, _, _ = load_pretrained(saved_gpt2[1])
    no_pos = dataclasses.replace(model.cfg, positions=False)
    with pytest.raises(CheckpointError, match="trained with learned positions") as refused:
        build(no_pos, model.state_dict(), "gpt2")
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="cannot start from them"):
        starting_config(dataclasses.replace(no_pos, block_size=16), model.cfg, "gpt2")
    dropped = build(
        no_pos,
        {name: t for name, t in model.state_dict().items() if name != "pos_emb.weight"},
        "gpt2",
    )
    with torch.no_grad():
        model.pos_emb.weight.zero_()
    assert_close(
        logits_of(dropped, tokens()),
        logits_of(model, tokens()),
        atol=1e-5,
        msg="no positions vs zeroed positions",
    )


# 3. Refusals: one line that says what is wrong


def test_offline_with_nothing_cached_names_model_cache_and_command(offline):
    with pytest.raises(CheckpointError) as e:
        load_pretrained("gpt2")
    message = str(e.value)
    assert "\n" not in message
    assert str(offline) in message and "hf download gpt2 config.json model.safetensors" in message


@pytest.mark.parametrize("name", ["no/such/folder/here", "not a model", "./missing-folder/x/y"])
def test_neither_folder_nor_hub_name(name):
    with pytest.raises(CheckpointError, match="no folder"):
        load_pretrained(name)


def test_folder_without_safetensors_is_refused(tmp_path):
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "config.json").write_text("{}")
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(CheckpointError, match="lacks model.safetensors"):
        load_pretrained(tmp_path / "pickled")


@pytest.mark.parametrize(
    "config,needle",
    [
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
        ({"n_inner": 64}, "n_inner"),
        ({"activation_function": "relu"}, "activation_function"),
        ({"model_type": "gpt_neo"}, "model_type"),
        ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon"),
        ({"vocab_size": 100}, "100 tokens"),
    ],
)
def test_configs_we_cannot_run_exactly_are_refused(config, needle, saved_gpt2, tmp_path):
    with pytest.raises(CheckpointError, match=needle) as e:
        load_pretrained(edited_copy(saved_gpt2[1], tmp_path, **config))
    assert "\n" not in str(e.value)


def test_weights_that_do_not_fit_the_config(saved_gpt2, tmp_path, gpt2_tokenizer_files):
    with pytest.raises(CheckpointError, match="do not fit config.json"):
        load_pretrained(edited_copy(saved_gpt2[1], tmp_path, n_embd=64, n_head=2))
    with pytest.raises(CheckpointError, match="3 layers"):
        load_pretrained(edited_copy(saved_gpt2[1], tmp_path / "deeper", n_layer=3))


def test_missing_extra_and_untied_tensors_are_named(saved_gpt2):
    state = dict(saved_gpt2[0].state_dict())
    with pytest.raises(CheckpointError, match=r"lack transformer\.h\.1\.mlp\.c_fc\.bias"):
        hf_to_ours(
            {name: t for name, t in state.items() if name != "transformer.h.1.mlp.c_fc.bias"}
        )
    with pytest.raises(
        CheckpointError, match=r"unexpected tensor transformer\.h\.0\.attn\.rotary\.weight"
    ):
        hf_to_ours({**state, "transformer.h.0.attn.rotary.weight": torch.zeros(2)})
    with pytest.raises(CheckpointError, match="untied"):
        hf_to_ours({**state, "lm_head.weight": state["lm_head.weight"] + 1})


# 4. The two ModelConfig switches


def test_new_config_fields_default_to_the_old_model():
    cfg = ModelConfig(**SMALL, block_size=16, vocab_size=65)
    L, C, V = 2, 32, 65
    default, with_bias = GPT(cfg), GPT(dataclasses.replace(cfg, qkv_bias=True))
    # tests/test_gpt.py's formula
    assert default.num_params() == 12 * L * C**2 + 10 * L * C + V * C + 16 * C + 2 * C
    assert not any(name.endswith("qkv.bias") for name in default.state_dict())
    extra = with_bias.state_dict().keys() - default.state_dict().keys()
    assert extra == {f"blocks.{n}.attn.qkv.bias" for n in range(L)}
    assert with_bias.num_params() == default.num_params() + L * 3 * C
    assert all(not with_bias.blocks[n].attn.qkv.bias.any() for n in range(L)), (
        "biases start at zero"
    )


def test_gelu_switch():
    with pytest.raises(ValueError, match="model.gelu must be one of exact, tanh"):
        ModelConfig(gelu="relu")
    exact = GPT(ModelConfig(**SMALL, block_size=16, vocab_size=65)).eval()
    tanh = GPT(dataclasses.replace(exact.cfg, gelu="tanh")).eval()
    tanh.load_state_dict(exact.state_dict())
    fc, proj = exact.blocks[0].mlp.fc, exact.blocks[0].mlp.proj
    x = torch.randn(2, 8, 32) * 10  # large enough that the two GELUs differ visibly
    with torch.no_grad():
        for gelu, model in (("none", exact), ("tanh", tanh)):
            expected = proj(torch.nn.functional.gelu(fc(x), approximate=gelu))
            assert_close(
                model.blocks[0].mlp(x), expected, atol=1e-6, msg=f"MLP with approximate={gelu}"
            )
        assert (exact.blocks[0].mlp(x) - tanh.blocks[0].mlp(x)).abs().max() > 1e-5, (
            "the switch changes nothing"
        )
