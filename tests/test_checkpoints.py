"""harness/training/checkpoints.py: whatever file is named, the reader answers with one CheckpointError, and a crafted size costs nothing."""

import pytest
import torch

from configs import load_config
from data.tokenizer import TokenizerError
from harness.training.checkpoints import CheckpointError, load_model, read_checkpoint, read_resumable
from model import GPT, ModelConfig

CFG = ModelConfig(n_layer=1, n_head=2, n_embd=8, block_size=16, vocab_size=5)


def checkpoint_of(model_cfg: ModelConfig, state: dict) -> dict:
    return {"model": state, "config": {"model": vars(model_cfg).copy()}, "tokenizer": {"name": "char", "chars": list("abcde")}, "step": 3}


@pytest.mark.parametrize("first", list("Rtabseu"))
def test_a_text_file_is_not_a_checkpoint(tmp_path, first):
    """A text starting with these letters sent torch's weights-only unpickler into an IndexError (requirements.txt, say)."""
    path = tmp_path / "requirements.txt"
    path.write_text(f"{first}orch>=2.4\nnumpy\n")
    with pytest.raises(CheckpointError, match=rf"cannot read {path}: the file is truncated, corrupt or not a checkpoint"):
        read_checkpoint(path)


def test_a_crafted_block_size_is_refused_before_any_memory_is_taken(tmp_path):
    """block_size 2**40 in a checkpoint's config would ask for a position table of 2**40 rows; its weights say 16."""
    state = GPT(CFG).state_dict()
    crafted = vars(CFG) | {"block_size": 2**40}
    path = tmp_path / "crafted.pt"
    torch.save({**checkpoint_of(CFG, state), "config": {"model": crafted}}, path)
    with pytest.raises(
        CheckpointError, match=r"weights do not fit its model config \(pos_emb.weight is \(16, 8\), the config says \(1099511627776, 8\)\)"
    ):
        load_model(path)


def test_a_checkpoint_that_fits_loads_its_weights(tmp_path):
    torch.manual_seed(0)
    model = GPT(CFG)
    path = tmp_path / "ckpt.pt"
    torch.save(checkpoint_of(CFG, model.state_dict()), path)
    loaded, tokenizer, checkpoint = load_model(path)
    assert tokenizer.chars == list("abcde") and checkpoint["step"] == 3
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values(), strict=True))


def test_missing_tokenizer_files_are_not_blamed_on_the_checkpoint(tmp_path, monkeypatch):
    """Without tiktoken's BPE files the checkpoint is fine: the message must say so, not 'invalid config or tokenizer'."""
    path = tmp_path / "ckpt.pt"
    torch.save(checkpoint_of(CFG, GPT(CFG).state_dict()), path)

    def offline(state):
        raise TokenizerError("cannot load tiktoken's gpt2 encoding (ConnectionError)")

    monkeypatch.setattr("harness.training.checkpoints.tokenizer_from_state", offline)
    with pytest.raises(TokenizerError, match="cannot load tiktoken's gpt2 encoding"):
        load_model(path)


def test_nothing_to_resume_points_at_the_run_moved_aside(tmp_path):
    """Ctrl-C right after a fresh start leaves the earlier run moved aside and no checkpoint: --resume says where it went."""
    cfg = load_config(["--config", "tiny", "--runs-dir", str(tmp_path), "--run-name", "exp", "--resume"])
    (tmp_path / "exp").mkdir()
    moved = tmp_path / "exp.old-20250101-120000"
    moved.mkdir()
    (moved / "ckpt.pt").write_bytes(b"")
    with pytest.raises(
        CheckpointError, match=rf"no checkpoint at {tmp_path}/exp/ckpt.pt, but the run there before was moved aside to {moved}"
    ):
        read_resumable(cfg, "sha")


@pytest.mark.parametrize(("stored", "kind"), [(True, "learned"), (False, "none")])
def test_a_checkpoint_from_before_positions_had_kinds_loads_as_learned_or_none(tmp_path, stored, kind):
    """Older checkpoints store model.positions as a boolean and lack the fields added since (qk_norm, softcap)."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(**{**vars(CFG), "positions": kind}))
    old = {name: value for name, value in vars(model.cfg).items() if name not in ("qk_norm", "softcap")} | {"positions": stored}
    path = tmp_path / "ckpt.pt"
    torch.save({**checkpoint_of(CFG, model.state_dict()), "config": {"model": old}}, path)
    loaded, _, _ = load_model(path)
    assert (loaded.cfg.positions, loaded.cfg.qk_norm, loaded.cfg.softcap) == (kind, False, 0.0)
    idx = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(loaded(idx)[0], model.eval()(idx)[0])
