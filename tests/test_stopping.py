"""harness/stopping.py and what it stops: train.py under signals and lost output, the budget of an evaluation,
and the one-line answers to bad input around them.

The subprocesses start together and wait for a line or a file, never for a time: a busy machine only makes them slower.
"""

import dataclasses
import errno
import io
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from conftest import REPO_ROOT, assert_one_line_error, make_corpus_text, tiny_argv, write_corpus

import harness.training.budget
import train
from configs import ConfigError, load_config
from data.corpus import DataError, load_corpus
from data.tokenizer import CharTokenizer, TokenizerError
from harness.cli import positive_int, typed_text
from harness.scoring import text_ids
from harness.stopping import GuardedStream
from harness.training.budget import check_affordable, forward_flops, prefix_flops, step_flops
from harness.training.checkpoints import CheckpointError, save_checkpoint
from harness.training.evaluation import cap_prefix_work, evaluation_flops, make_eval_set
from harness.training.runlog import read_metrics
from model.measurements import honest_positions

LONG_EVAL = ("--model.block_size=1024", "--train.eval_batches=100", "--train.max_steps=5")  # an evaluation of a minute or so
QUICK = ("--train.max_steps=100000", "--train.eval_interval=10", "--train.eval_batches=1", "--train.honest_batches=1")


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> dict:
    """train.py three times at once: SIGTERM inside the first evaluation; Ctrl-C twice, the second as soon as the first
    is acknowledged; SIGHUP while training.

    The training bar appears once the stop flag is in place, right before the first evaluation: that is the cue."""
    root = tmp_path_factory.mktemp("stopping")
    corpus = write_corpus(root / "text", text=make_corpus_text(min_chars=20_000))  # a val split longer than the 1024-token context
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cases = {"term_in_eval": LONG_EVAL, "int_twice": QUICK, "hup": QUICK}
    procs = {}
    for name, extra in cases.items():
        argv = [sys.executable, "train.py", *tiny_argv(root, corpus, *extra, f"--run-name={name}")]
        err = open(root / f"{name}.err", "w")
        out = open(root / f"{name}.out", "w")
        procs[name] = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=err, env=env, text=True)
    deadline, results = time.monotonic() + 240, {name: {"run_dir": root / "runs" / name} for name in cases}

    def wait_for(name: str, ready) -> None:
        while not ready():
            assert procs[name].poll() is None and time.monotonic() < deadline, (root / f"{name}.err").read_text()[-2000:]
            time.sleep(0.01)

    try:
        wait_for("term_in_eval", lambda: "term_in_eval:   0%" in (root / "term_in_eval.err").read_text())
        procs["term_in_eval"].send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        procs["term_in_eval"].wait(timeout=max(1, deadline - signalled))
        results["term_in_eval"]["seconds"] = time.monotonic() - signalled
        wait_for("int_twice", lambda: "int_twice:   0%" in (root / "int_twice.err").read_text())
        procs["int_twice"].send_signal(signal.SIGINT)
        while "SIGINT: stopping" not in (root / "int_twice.out").read_text() and procs["int_twice"].poll() is None:
            time.sleep(0.001)
        if procs["int_twice"].poll() is None:
            procs["int_twice"].send_signal(signal.SIGINT)
        wait_for("hup", lambda: "loss/train_step" in read_file(root / "runs" / "hup" / "metrics.jsonl"))
        procs["hup"].send_signal(signal.SIGHUP)
        for name, proc in procs.items():
            proc.wait(timeout=max(1, deadline - time.monotonic()))
            results[name] |= {"code": proc.returncode, "err": (root / f"{name}.err").read_text()}
            results[name]["out"] = (root / f"{name}.out").read_text()
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def read_file(path) -> str:
    return path.read_text() if path.is_file() else ""


def test_sigterm_inside_an_evaluation_stops_within_seconds_and_saves(stopped):
    case = stopped["term_in_eval"]
    assert case["code"] == 143 and "Traceback" not in case["err"], case["err"][-2000:]
    assert case["seconds"] < 30  # the evaluation takes a minute or more here; a pass of it a fraction of a second
    checkpoint = torch.load(case["run_dir"] / "ckpt.pt", weights_only=True)
    assert checkpoint["step"] == 0 and checkpoint["evaluated"] is False  # --resume evaluates step 0 again
    assert not [m for m in read_metrics(case["run_dir"]) if "loss/val" in m]  # the evaluation cut short is not logged
    assert f"stopped at step 0; checkpoint saved to {case['run_dir'] / 'ckpt.pt'}" in case["out"]


def test_a_second_ctrl_c_never_leaves_a_traceback_or_half_a_file(stopped):
    """Where the second Ctrl-C lands depends on the machine's speed: in the stop's save (which it lets finish), after
    it, or after the process ended. Whichever, one line says what is on disk, and that is what is on disk."""
    case = stopped["int_twice"]
    assert case["code"] == 130 and "Traceback" not in case["err"], case["err"][-2000:]
    ckpt = case["run_dir"] / "ckpt.pt"
    said = [line.strip() for line in case["err"].splitlines() if "again" in line]
    assert len(said) <= 1, said
    if said and said[0] != "SIGINT again: aborted at once; nothing was saved":
        step = int(said[0].rsplit(" ", 1)[1])
        assert said[0] == f"SIGINT again: aborted at once; {ckpt} holds step {step}"
        assert torch.load(ckpt, weights_only=True)["step"] == step
    assert not list(case["run_dir"].glob("*.tmp*"))  # no half-written file


def test_sighup_stops_like_sigterm_with_a_checkpoint(stopped):
    case = stopped["hup"]
    assert case["code"] == 129 and "Traceback" not in case["err"], case["err"][-2000:]
    step = torch.load(case["run_dir"] / "ckpt.pt", weights_only=True)["step"]
    assert step > 0 and f"stopped at step {step}; checkpoint saved" in case["out"]


class Pipe(io.StringIO):
    """stdout as `| head -4` leaves it: four lines pass, then the reader is gone."""

    def write(self, text: str) -> int:
        if self.getvalue().count("\n") >= 4:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_lost_stdout_stops_quietly_and_saves(tmp_path, monkeypatch, capsys):
    """`train.py | head -4`: a later line cannot be written; the run stops as under SIGTERM, with no traceback."""
    pipe = Pipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    code = train.main(tiny_argv(tmp_path, write_corpus(tmp_path / "t"), *QUICK, "--train.max_steps=30"))
    assert pipe.getvalue().splitlines()[-1].startswith("step     0 |")
    assert code == 141 and capsys.readouterr().err.count("Error") == 0
    checkpoint = torch.load(tmp_path / "runs" / "tiny" / "ckpt.pt", weights_only=True)
    assert 10 <= checkpoint["step"] < 30  # stopped at the step after the lost line, with a checkpoint


# The budget


def config(*argv: str, vocab: int = 65):
    """A preset's Config with its vocabulary size filled in, as the tokenizer fills it in a run."""
    cfg = load_config(list(argv))
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab))


def test_a_huge_context_is_refused_in_one_line_with_its_cost(monkeypatch, tmp_path):
    monkeypatch.setattr(harness.training.budget, "measured_speed", lambda device: 20e9)  # this 2-core CPU's order of magnitude
    cfg = config("--config", "tiny", "--model.block_size=100000")
    with pytest.raises(ConfigError, match=r"one training step at block_size 100000 would take about \d+ minutes on this cpu"):
        check_affordable(cfg, torch.device("cpu"))
    monkeypatch.setattr(harness.training.budget, "device_memory_bytes", lambda device: 2.0**30)
    with pytest.raises(ConfigError, match=r"needs about \d+ GiB, and this cpu has 1 GiB"):
        check_affordable(cfg, torch.device("cpu"))
    assert check_affordable(config("--config", "tiny"), torch.device("cpu")) == 20e9


@pytest.mark.parametrize("preset", ["tiny", "char", "base", "gpt2-finetune"])
def test_the_presets_honest_loss_is_never_capped(preset):
    """Even with every position at its stratum's end, a no-mask preset's prefix passes stay within the budget."""
    gpt2 = ["--model.n_layer=12", "--model.n_head=12", "--model.n_embd=768"] if preset == "gpt2-finetune" else []
    cfg = config("--config", preset, "--no-mask", *gpt2, vocab=65 if preset in ("tiny", "char") else 50257)
    T = cfg.model.block_size
    worst = [[round((i + 1) * T / 8) - 1 for i in range(8)] for _ in range(cfg.train.honest_batches)]
    assert cap_prefix_work(worst, cfg) == worst


def test_the_prefix_work_is_capped_for_many_honest_batches(tmp_path):
    cfg = config("--config", "tiny", "--no-mask", "--train.eval_batches=40", "--train.honest_batches=40")
    gen = torch.Generator().manual_seed(0)
    plan = cap_prefix_work([honest_positions(32, 8, gen) for _ in range(40)], cfg)
    assert 1 <= len(plan) < 40
    assert sum(prefix_flops(cfg.model, 8, p) for p in plan) <= 8 * step_flops(cfg)


def test_a_causal_model_runs_no_prefix_passes(tmp_path):
    """The honest loss of a causal model is read off the forced pass; without the mask, 8 passes per honest batch."""
    corpus = load_corpus(load_config(tiny_argv(tmp_path, write_corpus(tmp_path / "t"))).data)
    for flags, passes in (([], 0), (["--no-mask"], 2 * 8)):  # tiny: 2 eval batches, so 2 honest batches of 8 positions
        cfg = config(*tiny_argv(tmp_path, tmp_path / "t" / "corpus.txt"), *flags, vocab=corpus.tokenizer.vocab_size)
        eval_set = make_eval_set(corpus, corpus.tokenizer, cfg)
        assert eval_set.prefix_passes(cfg.model.causal) == passes
        extra = sum(prefix_flops(cfg.model, 8, p) for _, _, p in eval_set.honest) if passes else 0.0
        assert evaluation_flops(cfg, eval_set) == pytest.approx(
            4 * forward_flops(cfg.model, 8, 32) + extra + forward_flops(cfg.model, 8, 32)
        )


# The bad-input sweep, each where it arises


def test_d4_a_full_disk_at_start_up_is_one_line(tmp_path, monkeypatch, capsys):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("harness.training.runlog.write_atomically", full)
    code = train.main(tiny_argv(tmp_path, write_corpus(tmp_path / "t"), "--train.max_steps=1"))
    proc = subprocess.CompletedProcess([], code, *capsys.readouterr())
    assert_one_line_error(proc, "could not save", "config.json: No space left on device")


def test_d5_text_the_terminal_cannot_encode_is_replaced():
    raw = io.BytesIO()
    stream = GuardedStream(io.TextIOWrapper(raw, encoding="latin-1"))
    stream.write("ロミオ café\n")
    stream.flush()
    assert raw.getvalue() == "??? café\n".encode("latin-1")


def test_d6_a_folder_where_metrics_jsonl_goes_is_one_line(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "t")
    assert train.main(tiny_argv(tmp_path, corpus, "--train.max_steps=2", "--train.eval_interval=2")) == 0
    metrics = tmp_path / "runs" / "tiny" / "metrics.jsonl"
    metrics.unlink()
    metrics.mkdir()
    capsys.readouterr()
    code = train.main(tiny_argv(tmp_path, corpus, "--train.max_steps=3", "--resume"))
    assert_one_line_error(subprocess.CompletedProcess([], code, *capsys.readouterr()), f"cannot append to {metrics}")


def test_d7_a_first_checkpoint_that_cannot_be_written_says_none_was_saved(tmp_path, monkeypatch):
    def full(obj, f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match="No space left on device; no checkpoint was saved"):
        save_checkpoint(tmp_path / "ckpt.pt", {"model": {}})
    (tmp_path / "ckpt.pt").write_bytes(b"earlier")
    with pytest.raises(CheckpointError, match="the previous checkpoint there is intact"):
        save_checkpoint(tmp_path / "ckpt.pt", {"model": {}})


def test_d8_a_run_whose_corpus_moved_names_score_pys_flag(tmp_path):
    checkpoint = {"config": {"data": {"path": str(tmp_path / "gone.txt"), "tokenizer": "char"}}, "source_sha256": "0"}
    with pytest.raises(DataError, match=r"the run's corpus .*gone.txt no longer exists; score its text with --file PATH"):
        text_ids(CharTokenizer(list("ab")), None, checkpoint)


def test_d9_unknown_characters_are_all_counted_and_c_locale_arguments_read_as_utf8():
    with pytest.raises(TokenizerError, match=r"11 character\(s\) not in the training vocabulary: 'бвгдежзийк' and 1 more"):
        CharTokenizer(list("ab")).encode("бвгдежзийкл")
    assert typed_text("caf\udcc3\udca9") == "café"  # how Python hands over `café` under a non-coerced C locale
    assert typed_text("ロミオ") == "ロミオ"


@pytest.mark.parametrize("text", ["-3", "0"])
def test_d10_one_range_message_for_every_number_out_of_range(text):
    with pytest.raises(Exception, match=f"must be at least 1, got {text}"):
        positive_int(text)
