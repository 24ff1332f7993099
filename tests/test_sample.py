"""Tests for sample.py: rebuilding a model from a checkpoint, sampling, and refusing bad checkpoints."""

import random
import subprocess

import pytest
import torch
from conftest import assert_close, assert_one_line_error, run_script, tiny_argv, write_corpus

import engine.evaluation
import engine.runtime
import sample
import train
from configs import ConfigError, load_config
from data.corpus import load_corpus
from data.tokenizer import TokenizerError
from engine.checkpoints import CheckpointError, load_model
from model import ModelConfig

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # see conftest: tiny models run faster on one thread


class Payload:
    """Unpickling this calls print('pwned'): what a malicious checkpoint could do with os.system instead."""

    def __reduce__(self):
        return (print, ("pwned",))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_cpu_thread):
    """A 10-step tiny run, trained once for the whole module."""
    root = tmp_path_factory.mktemp("sample")
    corpus = write_corpus(root / "text")
    argv = tiny_argv(root, corpus, "--train.max_steps=10")
    cfg = load_config(argv)
    train.main(cfg)
    return {"root": root, "corpus": corpus, "cfg": cfg, "ckpt": root / "runs" / "tiny" / "ckpt.pt", "text": corpus.read_text("utf-8")}


def sample_args(trained, *extra: str) -> list[str]:
    return ["--checkpoint", str(trained["ckpt"]), "--device", "cpu", *extra]


# 1. Rebuilding the model


def test_load_model_rebuilds_the_trained_model(trained):
    model, tokenizer, checkpoint = load_model(trained["ckpt"], "cpu")
    assert not model.training
    assert checkpoint["step"] == 10
    assert model.cfg == ModelConfig(**checkpoint["config"]["model"])
    assert (model.cfg.n_layer, model.cfg.n_embd, model.cfg.vocab_size) == (2, 32, len(set(trained["text"])))
    assert tokenizer.chars == sorted(set(trained["text"]))
    state = model.state_dict()
    assert state.keys() == checkpoint["model"].keys()
    for name, tensor in checkpoint["model"].items():
        assert_close(state[name], tensor, atol=0.0, msg=name)


def test_loaded_model_reproduces_the_logged_val_loss(trained):
    model, tokenizer, checkpoint = load_model(trained["ckpt"], "cpu")
    corpus = load_corpus(trained["cfg"].data)
    ev = engine.evaluation.make_eval_set(corpus, tokenizer, trained["cfg"])  # the fixed eval batches the run scored
    runtime = engine.runtime.setup_runtime(trained["cfg"].train)
    assert engine.evaluation.estimate_loss(model, ev.batches["val"], runtime) == pytest.approx(checkpoint["val_loss"], abs=1e-6)


# 2. Sampling


def test_main_returns_samples_that_continue_the_prompt(trained, capsys):
    samples = sample.main(sample_args(trained, "--prompt", "The king", "--num-samples", "3", "--max-new-tokens", "12", "--seed", "7"))
    out = capsys.readouterr().out
    assert len(samples) == 3
    for text in samples:
        assert text.startswith("The king")
        assert len(text) == len("The king") + 12  # one character per token
        assert set(text) <= set(trained["text"])
        assert text in out
    assert out.startswith(f"# {trained['ckpt']} (step 10, val loss ")


def test_same_seed_same_text_different_seed_different_text(trained, capsys):
    args = sample_args(trained, "--prompt", "KING:", "--num-samples", "2", "--max-new-tokens", "20")
    first = sample.main([*args, "--seed", "1"])
    second = sample.main([*args, "--seed", "1"])
    other = sample.main([*args, "--seed", "2"])
    capsys.readouterr()
    assert first == second
    assert other != first
    assert first[0] != first[1]  # the rows of one call are independent samples


def test_run_name_finds_the_checkpoint(trained, capsys):
    by_path = sample.main(sample_args(trained, "--max-new-tokens", "10"))
    by_run = sample.main(["--run", "tiny", "--runs-dir", str(trained["root"] / "runs"), "--device", "cpu", "--max-new-tokens", "10"])
    capsys.readouterr()
    assert by_run == by_path
    assert by_path[0].startswith("\n") and len(by_path[0]) == 11  # the default prompt is a newline


def test_zero_new_tokens_returns_the_prompt(trained, capsys):
    assert sample.main(sample_args(trained, "--prompt", "Thy brother", "--max-new-tokens", "0")) == ["Thy brother"]
    capsys.readouterr()


def test_empty_prompt_is_refused(trained):
    with pytest.raises(TokenizerError, match="the prompt is empty; give at least one character with --prompt"):
        sample.main(sample_args(trained, "--prompt", ""))


def test_unknown_device_names_the_flag_of_sample_py(trained):
    with pytest.raises(ConfigError, match="^--device must be one of auto, cpu, cuda, mps"):
        sample.main(["--checkpoint", str(trained["ckpt"]), "--device", "tpu"])


# 3. Bad checkpoints, in process


def test_config_that_does_not_match_the_weights(trained, tmp_path):
    checkpoint = torch.load(trained["ckpt"], weights_only=True)
    checkpoint["config"]["model"]["n_embd"] = 64  # the weights are 32 wide
    path = tmp_path / "mismatch.pt"
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="weights do not fit its model config") as e:
        load_model(path)
    assert str(path) in str(e.value)


def test_tokenizer_that_does_not_match_the_model(trained, tmp_path):
    checkpoint = torch.load(trained["ckpt"], weights_only=True)
    checkpoint["tokenizer"]["chars"] = checkpoint["tokenizer"]["chars"][:-1]
    path = tmp_path / "vocab.pt"
    torch.save(checkpoint, path)
    n = len(set(trained["text"]))
    with pytest.raises(CheckpointError, match=f"tokenizer has {n - 1} tokens, model {n}"):
        load_model(path)


def test_file_that_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "tensor.pt"
    torch.save({"weights": torch.ones(2)}, path)
    with pytest.raises(CheckpointError, match="not a checkpoint of this project"):
        load_model(path)


def test_truncated_checkpoint(trained, tmp_path):
    path = tmp_path / "truncated.pt"
    path.write_bytes(trained["ckpt"].read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated, corrupt or not a checkpoint") as e:
        load_model(path)
    assert str(path) in str(e.value)


def test_random_bytes(tmp_path):
    path = tmp_path / "noise.pt"
    path.write_bytes(random.Random(0).randbytes(4096))
    with pytest.raises(CheckpointError, match="truncated, corrupt or not a checkpoint") as e:
        load_model(path)
    assert str(path) in str(e.value)


def test_malicious_pickle_is_refused_and_never_runs(trained, tmp_path, capfd):
    good = torch.load(trained["ckpt"], weights_only=True)
    path = tmp_path / "evil.pt"
    torch.save({"model": Payload(), "config": good["config"], "tokenizer": good["tokenizer"]}, path)
    with pytest.raises(CheckpointError, match="refused to load") as e:
        load_model(path)
    assert str(path) in str(e.value)
    assert "pwned" not in capfd.readouterr().out  # the callable never ran
    torch.load(path, weights_only=False)  # proof that the payload is live: an unsafe load runs it
    assert "pwned" in capfd.readouterr().out


# 4. The script: user errors are one line on stderr and exit code 2


def test_script_missing_checkpoint(tmp_path):
    missing = tmp_path / "runs" / "nope" / "ckpt.pt"
    proc = run_script("sample.py", "--checkpoint", str(missing), "--device", "cpu")
    assert_one_line_error(proc, f"no checkpoint at {missing}")


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--num-samples", "0", "must be at least 1, got 0"),
        ("--max-new-tokens", "-1", "must be 0 or more, got -1"),
        ("--max-new-tokens", "2.5", "must be a whole number, got '2.5'"),
        ("--temperature", "0", "must be a positive number, got 0"),
        ("--temperature", "-1", "must be a positive number, got -1"),
        ("--temperature", "nan", "must be a positive number, got nan"),
        ("--temperature", "abc", "must be a number, got 'abc'"),
        ("--top-k", "0", "must be at least 1, got 0"),
    ],
)
def test_parse_args_rejects_bad_values(capsys, flag, value, message):
    with pytest.raises(SystemExit) as stop:
        sample.parse_args([flag, value])
    out, err = capsys.readouterr()
    assert_one_line_error(subprocess.CompletedProcess(["sample.py"], stop.value.code, out, err), f"argument {flag}: {message}")


def test_parse_args_accepts_the_edges():
    args = sample.parse_args(["--num-samples", "1", "--max-new-tokens", "0", "--temperature", "1e-3", "--top-k", "1"])
    assert (args.num_samples, args.max_new_tokens, args.temperature, args.top_k) == (1, 0, 1e-3, 1)


def test_script_bad_argument_is_one_line():
    proc = run_script("sample.py", "--temperature", "0")
    assert_one_line_error(proc, "argument --temperature: must be a positive number, got 0")
