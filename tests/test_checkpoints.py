"""harness/training/checkpoints.py: whatever file is named, the reader answers with one
CheckpointError, and a crafted size costs nothing; on a GPU the device's random state is kept for
--resume."""

import json
import math

import pytest
import torch
from conftest import assert_one_line_error, error_of

import sample
from configs import load_config
from data.tokenizer import CharTokenizer, TokenizerError
from harness.training.checkpoints import (
    Checkpointer,
    CheckpointError,
    Progress,
    load_model,
    read_checkpoint,
    read_resumable,
    restore,
)
from harness.training.runtime import Runtime
from model import GPT, ModelConfig

CFG = ModelConfig(n_layer=1, n_head=2, n_embd=8, block_size=16, vocab_size=5)


def checkpoint_of(model_cfg: ModelConfig, state: dict) -> dict:
    return {
        "model": state,
        "config": {"model": vars(model_cfg).copy()},
        "tokenizer": {"name": "char", "chars": list("abcde")},
        "step": 3,
    }


@pytest.mark.parametrize("first", list("Rtabseu"))
def test_a_text_file_is_not_a_checkpoint(tmp_path, first):
    """A text starting with these letters sent torch's weights-only unpickler into an IndexError
    (requirements.txt, say).
    """
    path = tmp_path / "requirements.txt"
    path.write_text(f"{first}orch>=2.4\nnumpy\n")
    with pytest.raises(
        CheckpointError,
        match=rf"cannot read {path}: the file is truncated, corrupt or not a checkpoint",
    ):
        read_checkpoint(path)


def test_a_crafted_block_size_is_refused_before_any_memory_is_taken(tmp_path):
    """block_size 2**40 in a checkpoint's config would ask for a position table of 2**40 rows; its
    weights say 16.
    """
    state = GPT(CFG).state_dict()
    crafted = vars(CFG) | {"block_size": 2**40}
    path = tmp_path / "crafted.pt"
    torch.save({**checkpoint_of(CFG, state), "config": {"model": crafted}}, path)
    with pytest.raises(
        CheckpointError,
        match=r"weights do not fit its model config \(pos_emb.weight is \(16, 8\), "
        r"the config says \(1099511627776, 8\)\)",
    ):
        load_model(path)


def test_a_checkpoint_that_fits_loads_its_weights(tmp_path):
    torch.manual_seed(0)
    model = GPT(CFG)
    path = tmp_path / "ckpt.pt"
    torch.save(checkpoint_of(CFG, model.state_dict()), path)
    loaded, tokenizer, checkpoint = load_model(path)
    assert tokenizer.chars == list("abcde") and checkpoint["step"] == 3
    assert all(
        torch.equal(a, b)
        for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True)
    )


def test_missing_tokenizer_files_are_not_blamed_on_the_checkpoint(tmp_path, monkeypatch):
    """Without tiktoken's BPE files the checkpoint is fine: the message must say so, not 'invalid
    config or tokenizer'.
    """
    path = tmp_path / "ckpt.pt"
    torch.save(checkpoint_of(CFG, GPT(CFG).state_dict()), path)

    def offline(state):
        raise TokenizerError("cannot load tiktoken's gpt2 encoding (ConnectionError)")

    monkeypatch.setattr("harness.training.checkpoints.tokenizer_from_state", offline)
    with pytest.raises(TokenizerError, match="cannot load tiktoken's gpt2 encoding"):
        load_model(path)


def test_nothing_to_resume_points_at_the_run_moved_aside(tmp_path):
    """Ctrl-C right after a fresh start leaves the earlier run moved aside and no checkpoint:
    --resume says where it went.
    """
    cfg = load_config(
        ["--config", "tiny", "--runs-dir", str(tmp_path), "--run-name", "exp", "--resume"]
    )
    (tmp_path / "exp").mkdir()
    moved = tmp_path / "exp.old-20250101-120000"
    moved.mkdir()
    (moved / "ckpt.pt").write_bytes(b"")
    with pytest.raises(
        CheckpointError,
        match=rf"no checkpoint at {tmp_path}/exp/ckpt.pt, "
        rf"but the run there before was moved aside to {moved}",
    ):
        read_resumable(cfg, "sha")


@pytest.mark.parametrize(("stored", "kind"), [(True, "learned"), (False, "none")])
def test_a_checkpoint_from_before_positions_had_kinds_loads_as_learned_or_none(
    tmp_path, stored, kind
):
    """Older checkpoints store model.positions as a boolean and lack the fields added since
    (qk_norm, softcap).
    """
    torch.manual_seed(0)
    model = GPT(ModelConfig(**{**vars(CFG), "positions": kind}))
    old = {
        name: value for name, value in vars(model.cfg).items() if name not in ("qk_norm", "softcap")
    } | {"positions": stored}
    path = tmp_path / "ckpt.pt"
    torch.save({**checkpoint_of(CFG, model.state_dict()), "config": {"model": old}}, path)
    loaded, _, _ = load_model(path)
    assert (loaded.cfg.positions, loaded.cfg.qk_norm, loaded.cfg.softcap) == (kind, False, 0.0)
    idx = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(loaded(idx)[0], model.eval()(idx)[0])


@pytest.mark.parametrize(
    ("key", "value", "found"),
    [
        ("causal", "false", "is text"),
        ("qk_norm", "yes", "is text"),
        ("scaled", 0, "is a whole number"),
        ("softcap", True, "is a boolean"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_one_line_before_any_model(
    tmp_path, capsys, key, value, found
):
    """A --no-mask run whose checkpoint said causal = "false" was scored and sampled as causal, with
    the KV cache: every reader of a checkpoint (sample.py, score.py, inspect_attention.py, --resume)
    checks its config as a command line's is."""
    path = tmp_path / "ckpt.pt"
    torch.save(
        {
            **checkpoint_of(CFG, GPT(CFG).state_dict()),
            "config": {"model": vars(CFG) | {key: value}},
        },
        path,
    )
    named = f"model.{key} = {json.dumps(value)} in {path} {found}"
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(path)
    assert str(e.value).startswith(named) and str(e.value).endswith(
        "correct it, or train the run again"
    )
    assert_one_line_error(
        error_of(sample.main, ["--checkpoint", str(path), "--max-new-tokens", "2"], capsys), named
    )
    assert capsys.readouterr().out == ""


def test_on_cuda_the_device_s_dropout_state_is_saved_and_restored(tmp_path, monkeypatch):
    """On a GPU dropout draws from the device's generator, not the CPU's: ckpt.pt keeps each
    process's (as "cuda_rng") and --resume puts it back, so a resumed run with dropout draws the
    masks the uninterrupted one draws. The CUDA calls are faked (no GPU here); the CPU state goes
    through as before, and a checkpoint from a CPU run restores only that."""
    # what torch.cuda.get_rng_state returns: a ByteTensor
    device_state = torch.arange(16, dtype=torch.uint8)
    put_back = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": device_state.clone())
    monkeypatch.setattr(
        torch.cuda,
        "set_rng_state",
        lambda state, device="cuda": put_back.append((state.clone(), device)),
    )
    cfg = load_config(["--config", "tiny", "--runs-dir", str(tmp_path)])
    cuda = Runtime(device=torch.device("cuda"), autocast_dtype=torch.bfloat16, why="faked")
    model = GPT(CFG)
    optimizer = torch.optim.AdamW(model.parameters())
    cfg.run_dir.mkdir(parents=True)
    torch.manual_seed(5)
    cpu_state = torch.get_rng_state()
    Checkpointer(cfg, CharTokenizer.from_text("abcde"), "sha", cuda, math.inf).save(
        model, optimizer, torch.Generator(), Progress(step=2)
    )
    saved = read_checkpoint(cfg.run_dir / "ckpt.pt")
    assert torch.equal(saved["cuda_rng"][0], device_state) and torch.equal(
        saved["torch_rng"][0], cpu_state
    )

    torch.manual_seed(6)  # the resumed process starts elsewhere
    restore(saved, model, optimizer, torch.Generator(), cuda)
    assert torch.equal(torch.get_rng_state(), cpu_state)
    assert (
        len(put_back) == 1
        and torch.equal(put_back[0][0], device_state)
        and put_back[0][1] == torch.device("cuda")
    )

    cpu = Runtime(device=torch.device("cpu"), autocast_dtype=None, why="")
    # resumed on a CPU: the device's state has nowhere to go
    restore(saved, model, optimizer, torch.Generator(), cpu)
    del saved["cuda_rng"]
    # a checkpoint written on a CPU, resumed on a GPU
    restore(saved, model, optimizer, torch.Generator(), cuda)
    assert len(put_back) == 1
