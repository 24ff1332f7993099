"""Tests for sample.py: rebuilding a model from a checkpoint, sampling, and refusing bad
checkpoints.
"""

import random
import signal
import subprocess
import sys

import pytest
import torch
from conftest import (
    REPO_ROOT,
    assert_close,
    assert_one_line_error,
    error_of,
    run_script,
    tiny_argv,
    write_corpus,
)

import harness.training.budget
import harness.training.evaluation
import harness.training.runtime
import sample
import train
from configs import ConfigError, load_config
from data.corpus import load_corpus
from data.tokenizer import CharTokenizer, TokenizerError
from harness.training.checkpoints import CheckpointError, load_model
from model import GPT, ModelConfig
from model.sampling import SamplingError

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")


class Payload:
    """Unpickling this calls print('pwned'): what a malicious checkpoint could do with os.system
    instead.
    """

    def __reduce__(self):
        return (print, ("pwned",))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_cpu_thread):
    """A 10-step tiny run, trained once for the whole module."""
    root = tmp_path_factory.mktemp("sample")
    corpus = write_corpus(root / "text")
    argv = tiny_argv(root, corpus, "--train.max_steps=10")
    cfg = load_config(argv)
    train.train(cfg)
    return {
        "root": root,
        "corpus": corpus,
        "cfg": cfg,
        "ckpt": root / "runs" / "tiny" / "ckpt.pt",
        "text": corpus.read_text("utf-8"),
    }


def sample_args(trained, *extra: str) -> list[str]:
    return ["--checkpoint", str(trained["ckpt"]), "--device", "cpu", *extra]


# 1. Rebuilding the model


def test_load_model_rebuilds_the_trained_model(trained):
    model, tokenizer, checkpoint = load_model(trained["ckpt"], "cpu")
    assert not model.training
    assert checkpoint["step"] == 10
    assert model.cfg == ModelConfig(**checkpoint["config"]["model"])
    assert (model.cfg.n_layer, model.cfg.n_embd, model.cfg.vocab_size) == (
        2,
        32,
        len(set(trained["text"])),
    )
    assert tokenizer.chars == sorted(set(trained["text"]))
    state = model.state_dict()
    assert state.keys() == checkpoint["model"].keys()
    for name, tensor in checkpoint["model"].items():
        assert_close(state[name], tensor, atol=0.0, msg=name)


def test_loaded_model_reproduces_the_logged_val_loss(trained):
    model, tokenizer, checkpoint = load_model(trained["ckpt"], "cpu")
    corpus = load_corpus(trained["cfg"].data)
    # the fixed eval batches the run scored
    eval_set = harness.training.evaluation.make_eval_set(corpus, tokenizer, trained["cfg"])
    runtime = harness.training.runtime.setup_runtime(trained["cfg"].train)
    assert harness.training.evaluation.estimate_loss(
        model, eval_set.batches["val"], runtime
    ) == pytest.approx(checkpoint["val_loss"], abs=1e-6)


# 2. Sampling


def test_main_returns_samples_that_continue_the_prompt(trained, capsys):
    samples = sample.main(
        sample_args(
            trained,
            "--prompt",
            "The king",
            "--num-samples",
            "3",
            "--max-new-tokens",
            "12",
            "--seed",
            "7",
        )
    )
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
    by_run = sample.main(
        [
            "--run",
            "tiny",
            "--runs-dir",
            str(trained["root"] / "runs"),
            "--device",
            "cpu",
            "--max-new-tokens",
            "10",
        ]
    )
    capsys.readouterr()
    assert by_run == by_path
    assert by_path[0].startswith("\n") and len(by_path[0]) == 11  # the default prompt is a newline


def test_zero_new_tokens_returns_the_prompt(trained, capsys):
    assert sample.main(
        sample_args(trained, "--prompt", "Thy brother", "--max-new-tokens", "0")
    ) == ["Thy brother"]
    capsys.readouterr()


def test_temperature_zero_is_greedy_whatever_the_seed(trained, capsys):
    args = sample_args(
        trained,
        "--prompt",
        "The king",
        "--temperature",
        "0",
        "--max-new-tokens",
        "30",
        "--num-samples",
        "2",
    )
    first, second = sample.main([*args, "--seed", "1"]), sample.main([*args, "--seed", "2"])
    capsys.readouterr()
    assert first == second and first[0] == first[1], "greedy decoding must not depend on the seed"
    model, tokenizer, _ = load_model(trained["ckpt"])
    prompt = torch.tensor([tokenizer.encode("The king")])
    # the argmax at every step
    assert first[0] == tokenizer.decode(model.generate(prompt, 30, top_k=1)[0].tolist())


def test_top_p_and_prompt_file(trained, tmp_path, capsys):
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text("KING:\nThe king", encoding="utf-8")
    args = sample_args(
        trained, "--max-new-tokens", "25", "--top-p", "0.9", "--top-k", "20", "--seed", "3"
    )
    from_file = sample.main([*args, "--prompt-file", str(prompt_file)])
    assert from_file == sample.main([*args, "--prompt", "KING:\nThe king"]), (
        "--prompt-file continues the file's text exactly"
    )
    assert (
        from_file[0].startswith("KING:\nThe king")
        and len(from_file[0]) == len("KING:\nThe king") + 25
    )
    assert from_file != sample.main(
        sample_args(
            trained,
            "--max-new-tokens",
            "25",
            "--top-k",
            "20",
            "--seed",
            "3",
            "--prompt-file",
            str(prompt_file),
        )
    )
    capsys.readouterr()


def test_one_sample_streams_the_same_text_as_it_returns(trained, capsys):
    samples = sample.main(
        sample_args(trained, "--prompt", "KING:", "--max-new-tokens", "40", "--seed", "5")
    )
    out = capsys.readouterr().out
    assert (
        out == f"# {trained['ckpt']} (step 10, val loss "
        f"{load_model(trained['ckpt'])[2]['val_loss']:.4f}) on cpu\n{samples[0]}\n"
    )
    assert samples == sample.main(
        sample_args(
            trained,
            "--prompt",
            "KING:",
            "--max-new-tokens",
            "40",
            "--seed",
            "5",
            "--num-samples",
            "1",
        )
    )
    capsys.readouterr()


def test_a_degenerate_sample_gets_one_line_on_stderr_and_stdout_keeps_the_text(
    trained, monkeypatch, capsys
):
    newline = CharTokenizer(sorted(set(trained["text"]))).encode("\n")[0]

    # what the no-mask run writes: newlines only
    def newlines(self, idx, max_new_tokens, **sampling):
        yield from (torch.full((len(idx), 1), newline) for _ in range(max_new_tokens))

    monkeypatch.setattr(GPT, "stream", newlines)
    samples = sample.main(sample_args(trained, "--prompt", "KING:", "--max-new-tokens", "40"))
    out, err = capsys.readouterr()
    assert samples == ["KING:" + "\n" * 40]
    assert (
        out == f"# {trained['ckpt']} (step 10, val loss "
        f"{load_model(trained['ckpt'])[2]['val_loss']:.4f}) on cpu\n{samples[0]}\n"
    )
    assert err == (  # a causal model's degenerate sample: not the no-mask model's cheat
        "note: the sample is all whitespace (40 newlines, 0 spaces): from a model with the causal "
        "mask, a sign that it has "
        "learned little yet (its val loss says how much)\n"
    )
    sample.main(
        sample_args(trained, "--prompt", "KING:", "--max-new-tokens", "40", "--num-samples", "3")
    )
    assert capsys.readouterr().err.startswith(
        "note: 3 of 3 samples are degenerate (1: all whitespace, 40 newlines, 0 spaces; 2: "
    )


def test_the_degenerate_note_says_why_for_a_no_mask_model():
    note = sample.degenerate_note(["\n" * 200], causal=False)
    assert note.startswith(
        "note: the sample is all whitespace (200 newlines, 0 spaces): expected of a model trained "
        "without the causal mask"
    )
    assert "loss/val_honest" in note and "\n" not in note
    # ordinary text, and no text at all
    assert sample.degenerate_note(["ROMEO:\nBut soft, what light", ""], causal=False) is None
    repeated = sample.degenerate_note(["ROMEO", "eeeeeeeeee"], causal=True)
    assert repeated.startswith(
        "note: 1 of 2 samples are degenerate (2: one character repeated, 'e' 10 times): "
    )


def test_ctrl_c_stops_a_streaming_sample_and_keeps_the_text(trained):
    """SIGINT while tokens stream: exit code 130, the text printed so far intact, one line on
    stderr, no traceback.
    """
    command = [
        sys.executable,
        "-u",
        "sample.py",
        *sample_args(trained, "--prompt", "KING:", "--max-new-tokens", "1000000"),
    ]
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        header = proc.stdout.readline()
        seen = proc.stdout.read(len("KING:") + 20)  # the prompt and 20 streamed tokens (characters)
        assert proc.poll() is None, (
            "a million tokens cannot be done yet: the text came while it ran"
        )
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, f"exit code {proc.returncode}, stderr:\n{err}"
    assert header.startswith(f"# {trained['ckpt']}") and seen.startswith("KING:")
    assert err == "interrupted\n", err
    # what came after, ended by a newline
    assert rest.endswith("\n") and set(seen + rest) <= set(trained["text"])


def test_a_closed_pipe_ends_sampling_quietly(trained):
    """`sample.py | head -1`: once stdout is closed the sampling stops, with exit code 141 and
    nothing on stderr.
    """
    command = [
        sys.executable,
        "-u",
        "sample.py",
        *sample_args(trained, "--prompt", "KING:", "--max-new-tokens", "1000000"),
    ]
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # what `head -1` reads, before it closes the pipe
        assert proc.stdout.readline().startswith("# ")
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 141 and err == "", f"exit code {proc.returncode}, stderr:\n{err}"


def test_nan_weights_and_a_temperature_too_small_are_one_line_errors(trained, tmp_path, capsys):
    checkpoint = torch.load(trained["ckpt"], weights_only=True)
    checkpoint["model"]["blocks.0.mlp.fc.weight"][0, 0] = float("nan")
    broken = tmp_path / "nan.pt"
    torch.save(checkpoint, broken)
    with pytest.raises(SamplingError, match="logits are not finite"):
        sample.main(["--checkpoint", str(broken), "--device", "cpu"])
    proc = error_of(sample.main, ["--checkpoint", str(broken), "--device", "cpu"], capsys)
    assert_one_line_error(proc, "the model's logits are not finite (NaN or inf)")
    assert proc.stdout == "", "nothing is printed before the first token is drawn"
    proc = error_of(sample.main, sample_args(trained, "--temperature", "1e-50"), capsys)
    assert_one_line_error(proc, "temperature 1e-50 is too small", "use 0 for greedy decoding")
    assert proc.stdout == ""


def test_more_samples_than_memory_holds_are_refused_before_the_first_token(
    trained, monkeypatch, capsys
):
    """--num-samples 100000000 used to allocate until the kernel killed the process; now the
    estimate from the model's config refuses it in one line. Here the machine is made small (256
    MiB) so that a modest count shows it: 30,000 rows of 21 tokens, 32 wide, 2 layers, in float32:
    cached keys and values 4 x 2 x 30,000 x 21 x 32 x 4 bytes (twice while a step appends) = 645 MB,
    one layer's activations 8 x 30,000 x 21 x 32 x 4 = 645 MB, the tokens and logits 16 MB: 1.2
    GiB."""
    monkeypatch.setattr(harness.training.budget, "device_memory_bytes", lambda device: 2.0**28)
    drawn = []
    # sampling would start here
    monkeypatch.setattr(sample, "print_samples", lambda *args: drawn.append(args) or [])
    proc = error_of(
        sample.main,
        sample_args(trained, "--num-samples", "30000", "--max-new-tokens", "20"),
        capsys,
    )
    assert_one_line_error(
        proc,
        "sampling 30,000 samples of 21 tokens needs about 1 GiB, and this cpu has 256 MiB; lower "
        "--num-samples or --max-new-tokens",
    )
    assert drawn == [] and proc.stdout == ""
    # a few fit
    assert (
        sample.main(sample_args(trained, "--num-samples", "3", "--max-new-tokens", "5")) == []
        and len(drawn) == 1
    )


def test_prompt_file_errors_are_one_line(trained, tmp_path, capsys):
    missing, empty = tmp_path / "missing.txt", tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    assert_one_line_error(
        error_of(sample.main, sample_args(trained, "--prompt-file", str(missing)), capsys),
        f"--prompt-file {missing} does not exist",
    )
    assert_one_line_error(
        error_of(sample.main, sample_args(trained, "--prompt-file", str(empty)), capsys),
        f"--prompt-file {empty} is empty",
    )
    both = sample_args(trained, "--prompt", "a", "--prompt-file", str(empty))
    assert_one_line_error(
        error_of(sample.main, both, capsys),
        "argument --prompt-file: not allowed with argument --prompt",
    )


def test_empty_prompt_is_refused(trained):
    with pytest.raises(
        TokenizerError, match="the prompt is empty; give at least one character with --prompt"
    ):
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
    with pytest.raises(CheckpointError, match=f"the tokenizer has {n - 1} tokens, the model {n}"):
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
        ("--temperature", "-1", "must be 0 or a positive number, got -1"),
        ("--temperature", "nan", "must be 0 or a positive number, got nan"),
        ("--temperature", "inf", "must be 0 or a positive number, got inf"),
        ("--temperature", "abc", "must be a number, got 'abc'"),
        ("--top-k", "0", "must be at least 1, got 0"),
        ("--top-p", "0", "must be above 0 and at most 1, got 0"),
        ("--top-p", "1.5", "must be above 0 and at most 1, got 1.5"),
        ("--top-p", "nan", "must be above 0 and at most 1, got nan"),
    ],
)
def test_parse_args_rejects_bad_values(capsys, flag, value, message):
    with pytest.raises(SystemExit) as stop:
        sample.parse_args([flag, value])
    out, err = capsys.readouterr()
    assert_one_line_error(
        subprocess.CompletedProcess(["sample.py"], stop.value.code, out, err),
        f"argument {flag}: {message}",
    )


def test_parse_args_accepts_the_edges():
    args = sample.parse_args(
        [
            "--num-samples",
            "1",
            "--max-new-tokens",
            "0",
            "--temperature",
            "0",
            "--top-k",
            "1",
            "--top-p",
            "1",
        ]
    )
    assert (args.num_samples, args.max_new_tokens, args.temperature, args.top_k, args.top_p) == (
        1,
        0,
        0.0,
        1,
        1.0,
    )


def test_script_bad_argument_is_one_line():
    proc = run_script("sample.py", "--temperature", "-0.5")
    assert_one_line_error(proc, "argument --temperature: must be 0 or a positive number, got -0.5")
