"""harness/cli.py and the scripts' doors: a mistake in what was typed is one `error:` line and exit
code 2, help is help.
"""

import errno
import os
import subprocess

import pytest
import torch
from conftest import assert_one_line_error

import bench
import break_gpt2
import export_gpt2
import inspect_attention
import sample
import train
from configs import TrainConfig, load_config
from harness.cli import run_command


def one_line(capsys, code: int, *needles: str) -> str:
    out, err = capsys.readouterr()
    return assert_one_line_error(subprocess.CompletedProcess(["script"], code, out, err), *needles)


def exit_code(function, argv: list[str]) -> int:
    try:
        return run_command(function, argv)
    except SystemExit as stop:  # argparse's own exit, as the script's process would end
        return stop.code


@pytest.mark.parametrize(
    ("script", "argv", "needle"),
    [
        (
            inspect_attention.main,
            ["--checkpoint", "x.pt", "--out", "{file}"],
            "--out {file} is a file, not a folder",
        ),
        (
            export_gpt2.main,
            ["--checkpoint", "x.pt", "--out", "{file}"],
            "--out {file} is a file, not a folder",
        ),
        (
            break_gpt2.main,
            ["--pretrained", "gpt2", "--out", "{file}"],
            "--out {file} is a file, not a folder",
        ),
        (
            break_gpt2.main,
            ["--pretrained", "gpt2", "--no-mask"],
            "so model.causal would be ignored",
        ),
        (
            break_gpt2.main,
            ["--pretrained", "gpt2", "--model.n_layer=2"],
            "so model.n_layer would be ignored",
        ),
        (bench.main, ["--config"], "--config needs a value"),
        (
            sample.main,
            ["--seed", "9999999999999999999999"],
            "argument --seed: must be at most 9223372036854775807",
        ),
        (
            train.main,
            ["--train.seed=9999999999999999999999"],
            "train.seed must be between 0 and 9223372036854775807",
        ),
        (
            train.main,
            ["--config", "tiny", "--run-name", "--no-mask"],
            "--run-name needs a value, and got the flag --no-mask",
        ),
        (train.main, ["--train.grad_clip=nan"], "train.grad_clip must be a finite number, got nan"),
        (train.main, ["--train.lr=inf"], "train.lr must be a finite number, got inf"),
        (
            train.main,
            ["--model.qk_init_std=inf"],
            "model.qk_init_std must be a finite number, got inf",
        ),
        (
            train.main,
            ["--run-name", "r" * 300],
            "train.run_name must be at most 200 characters, got 300",
        ),
        (
            train.main,
            ["--runs-dir", ""],
            "train.runs_dir must name a folder (write . for the current one)",
        ),
    ],
    ids=[
        "inspect-out-file",
        "export-out-file",
        "break-out-file",
        "break-no-mask",
        "break-model-key",
        "bench-config-alone",
        "sample-seed",
        "train-seed",
        "run-name-flag",
        "grad-clip-nan",
        "lr-inf",
        "qk-init-std-inf",
        "run-name-300",
        "runs-dir-empty",
    ],
)
def test_bad_input_is_one_line_before_any_work(script, argv, needle, tmp_path, capsys, monkeypatch):
    """Each of these once gave a traceback, or was taken silently; every one fails before a model or
    corpus loads.
    """
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    monkeypatch.setattr(
        "harness.cli.load_model",
        lambda *a: pytest.fail("the model loaded before the bad input was noticed"),
    )
    monkeypatch.setattr(
        "break_gpt2.load_pretrained",
        lambda *a: pytest.fail("the model loaded before the bad input was noticed"),
    )
    code = exit_code(script, [a.format(file=file) for a in argv])
    one_line(capsys, code, needle.format(file=file))


def test_train_help_lists_the_flags(capsys):
    assert exit_code(train.main, ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Train the GPT: python train.py --config base")
    assert (
        "  --no-mask    model.causal=false" in out
        and "  --train.lr=0.001" in out
        and "model.vocab_size" not in out
    )
    for flag, key in (
        ("--kv-heads", "model.kv_heads=VALUE"),
        ("--window", "model.window=VALUE"),
        ("--gate", "model.gate=true"),
        ("--sink", "model.sink=true"),
    ):
        assert f"  {flag:<12} {key}" in out, flag


def test_help_explains_every_key_by_section(capsys):
    """--help prints each key with its default and the first words of its meaning, under its
    section's heading.
    """
    from configs import FROM_TOKENIZER, KEYS, SECTIONS

    assert exit_code(train.main, ["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # wrapped lines joined
    for section in SECTIONS:
        assert f"[{section}] " in out, section
    for dotted, f in KEYS.items():
        if dotted in FROM_TOKENIZER:
            continue
        words = " ".join(f.metadata["meaning"].split()[:4])
        assert len(f.metadata["meaning"].split()) >= 2, (
            f"{dotted}: a meaning of at least a few words"
        )
        assert f"--{dotted}=" in out and words in out, dotted
    assert (
        out.index("[model]")
        < out.index("--model.n_layer=")
        < out.index("[data]")
        < out.index("--data.path=")
        < out.index("[train]")
    )


def test_a_value_that_starts_with_dashes_needs_the_equals_sign():
    assert load_config(["--run-name=--odd"]).run_name == "--odd"
    # a single dash is a value
    assert load_config(["--train.lr", "-1e-3", "--train.lr=2e-3"]).train.lr == 2e-3


def test_an_output_checked_early_is_not_created_by_the_check(tmp_path, capsys):
    """break_gpt2.py checks its default --out before loading: a model that then fails to load leaves
    no empty folder behind.
    """
    code = exit_code(
        break_gpt2.main,
        ["--pretrained", str(tmp_path / "missing"), "--runs-dir", str(tmp_path / "runs")],
    )
    one_line(capsys, code, "no folder")
    assert not (tmp_path / "runs").exists()


def test_running_out_of_memory_is_one_line(capsys):
    """--model.block_size=100000 builds at once now, but its first evaluation holds (T, T) weights
    per head: 40 GB each.
    """

    def evaluate_a_huge_context(argv):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
            "memory: "
            "you tried to allocate 10000000000 bytes. Error code 12 (Cannot allocate memory)"
        )

    assert run_command(evaluate_a_huge_context, []) == 1
    line = capsys.readouterr().err.strip()
    assert (
        line.startswith("error: out of memory (9.3 GiB asked for at once)")
        and "--model.block_size" in line
        and "\n" not in line
    )

    def a_bug(argv):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    # anything else is a bug: its traceback stays
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        run_command(a_bug, [])


@pytest.mark.parametrize(
    "code, advice",
    [(errno.ENOSPC, "free some space or write elsewhere"), (errno.EROFS, "write elsewhere")],
    ids=["full", "read-only"],
)
def test_a_file_that_cannot_be_saved_is_one_line_with_its_path_as_typed(capsys, code, advice):
    """A write that fails on a full or read-only disk, wherever no module says it better. A
    library's error may name its file in bytes (TensorBoard's did: `could not save
    b'runs/tiny/events...'`), and a read-only disk was told to free some space."""

    def write_on_a_disk_that_refuses(argv):
        raise OSError(code, os.strerror(code), b"runs/tiny/events.out.tfevents")

    assert run_command(write_on_a_disk_that_refuses, []) == 1
    line = capsys.readouterr().err.strip()
    assert (
        line
        == f"error: could not save runs/tiny/events.out.tfevents: {os.strerror(code)}; {advice}"
    )


def test_cpp_bad_alloc_is_out_of_memory_too(capsys):
    """torch's own bookkeeping fails with C++'s std::bad_alloc (sample.py --num-samples 100000000
    --max-new-tokens 0 under ulimit -v 8000000, unbinding 10^8 rows): a traceback before, the one
    out-of-memory line now."""

    def unbind_too_many_rows(argv):
        raise RuntimeError("std::bad_alloc")

    assert run_command(unbind_too_many_rows, []) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: out of memory; lower --model.block_size") and "\n" not in line


def test_scripts_that_score_or_sample_give_freed_memory_back(monkeypatch):
    """device_of (score.py, sample.py) skips keep_freed_memory: kept blocks fragment when every
    prefix length allocates its own sizes (an honest score of a no-mask model grew to several GB
    with it); training keeps it."""
    import harness.training.runtime as runtime

    calls = []
    monkeypatch.setattr(runtime, "keep_freed_memory", lambda *a: calls.append(a))
    from harness.cli import device_of

    assert device_of("cpu") == torch.device("cpu") and calls == []
    runtime.setup_runtime(TrainConfig(device="cpu"))
    assert len(calls) == 1
