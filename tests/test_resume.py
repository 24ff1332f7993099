"""Tests for "Never lose a run": resume, clean stops on signals, crash-safe checkpoints, best.pt,
failures as one line.

Every run trains the tiny preset on a synthetic corpus in tmp_path, with its cache and run folders
there too. In-process runs are interrupted at a chosen step by wrapping a helper of train.py so that
its k-th call sends
this process a real SIGINT: the signal handler, the stop at the top of the next step and the save
are the real ones.
"""

import errno
import gc
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, assert_close, assert_one_line_error, tiny_argv, write_corpus
from torch.optim.optimizer import register_optimizer_step_pre_hook
from tqdm import tqdm

import data.files
import harness.training.checkpoints
import harness.training.evaluation
import harness.training.step
import sample
import train
from configs import SHORTHANDS, load_config
from data.corpus import load_corpus
from harness.stopping import Aborted
from harness.training.checkpoints import CheckpointError, read_checkpoint, save_checkpoint
from harness.training.optim import lr_at

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

# dropout: RNG matters
RUN = [
    "--train.max_steps=60",
    "--train.eval_interval=20",
    "--train.log_interval=5",
    "--model.dropout=0.1",
]


@pytest.fixture(autouse=True)
def restore_signal_handlers():
    """Tests here stop in-process runs with real signals; whatever handlers a run leaves behind are
    undone after each test.
    """
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.fixture(scope="module", autouse=True)
def small_heatmaps():
    """Evaluations draw 4-token attention heatmaps instead of full-size ones.

    The figures are not under test here, and drawing them is most of what an evaluation of the tiny
    model costs on a CPU (matplotlib's tick labels). Losses, checkpoints and metrics are unaffected.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.training.evaluation, "HEATMAP_MAX_TOKENS", 4)
        yield


# Helpers


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def without_timing(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in lines]


def steps_with(metrics: list[dict], key: str) -> list[int]:
    return [m["step"] for m in metrics if key in m]


def signal_on_call(mp: pytest.MonkeyPatch, k: int, signum: int = signal.SIGINT) -> None:
    """Make the k-th call of train.draw_micro_batches (the batch of step index k - 1) first send
    this process `signum`.

    That is a Ctrl-C (or SIGTERM) arriving while step k - 1 runs: the step finishes, and the loop
    stops at the top of the next one, after k steps.
    """
    real, calls = train.draw_micro_batches, [0]

    def draw(*args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            os.kill(os.getpid(), signum)
        return real(*args, **kwargs)

    mp.setattr(train, "draw_micro_batches", draw)


class Crash(Exception):
    """Stands in for a crash (power cut, OOM kill) in the middle of training."""


def crash_on_call(mp: pytest.MonkeyPatch, k: int) -> list:
    """Make the k-th call of train.draw_micro_batches raise Crash; returns the list of RunLoggers
    main creates.
    """
    real, calls, loggers = train.draw_micro_batches, [0], []

    def draw(*args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            raise Crash(f"crash during step index {k - 1}")
        return real(*args, **kwargs)

    class RecordingLogger(train.RunLogger):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            loggers.append(self)

    mp.setattr(train, "draw_micro_batches", draw)
    mp.setattr(train, "RunLogger", RecordingLogger)
    return loggers


def wait_for_a_new_second(run_dir: Path) -> None:
    """TensorBoard reads the event files of a folder in name order, and the name starts with the
    creation second.

    Real resumes are seconds apart; here they are not, and within one second the names end in a
    per-process counter that sorts 10 before 9. So start the next run in a later second than the
    last file.
    """
    latest = max(int(p.name.split(".")[3]) for p in run_dir.glob("events.out.tfevents.*"))
    while int(time.time()) <= latest:
        time.sleep(0.02)


def tensorboard_scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one scalar tag as TensorBoard shows the folder: every events file, restarts
    purged.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(s.step, s.value) for s in acc.Scalars(tag)]


def load_checkpoint_both_ways(path: Path) -> dict:
    """What a user does with a checkpoint: read it as data, and rebuild the model for sampling."""
    checkpoint = read_checkpoint(path)
    model, tokenizer, _ = harness.training.checkpoints.load_model(path)
    assert model.cfg.vocab_size == tokenizer.vocab_size
    for name, tensor in checkpoint["model"].items():
        assert torch.isfinite(tensor).all(), f"{path}: {name} is not finite"
    return checkpoint


def run_train(argv: list[str], capsys) -> subprocess.CompletedProcess:
    """train.py's command line in process: run(argv) as the script calls it, with its exit code and
    output.
    """
    code = train.main(argv)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["train.py", *argv], code, out, err)


def assert_error_after_progress(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """A failure during training: the progress bar, then exactly one 'error: ...' line last on
    stderr, no traceback.
    """
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert proc.returncode == code, f"exit code {proc.returncode}, stderr:\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(errors) == 1 and lines[-1] == errors[0], (
        f"expected one error line, last on stderr:\n{proc.stderr[-2000:]}"
    )
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


# The uninterrupted run every resume is compared with


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("text"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, corpus, one_cpu_thread, small_heatmaps) -> dict:
    """A 60-step run, never interrupted: evaluations at 0, 20, 40, 60 and a training-loss line every
    5 steps.
    """
    root = tmp_path_factory.mktemp("reference")
    argv = tiny_argv(root, corpus, *RUN)
    summary = train.train(load_config(argv))
    run_dir = root / "runs" / "tiny"
    return {
        "root": root,
        "corpus": corpus,
        "argv": argv,
        "summary": summary,
        "run_dir": run_dir,
        "metrics": read_metrics(run_dir),
    }


def reference_copy(reference: dict, tmp_path: Path) -> tuple[list[str], Path]:
    """A copy of the finished reference run under tmp_path, and the argv that points at it (sharing
    its data cache).
    """
    run_dir = tmp_path / "runs" / "tiny"
    shutil.copytree(reference["run_dir"], run_dir)
    argv = [
        *tiny_argv(tmp_path, reference["corpus"], *RUN),
        "--data.cache_dir",
        str(reference["root"] / "cache"),
    ]
    return argv, run_dir


def test_reference_run_evaluates_and_logs_where_expected(reference):
    metrics = reference["metrics"]
    assert steps_with(metrics, "loss/val") == [0, 20, 40, 60]
    assert steps_with(metrics, "loss/train_step") == list(range(5, 61, 5))
    assert reference["summary"]["stopped_at"] is None and reference["summary"]["signal"] is None
    assert read_checkpoint(reference["run_dir"] / "ckpt.pt")["step"] == 60


# 1. Resume in process: interrupted runs continue to exactly the numbers of the uninterrupted run


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, corpus, reference, one_cpu_thread, small_heatmaps) -> dict:
    """The reference run again, broken four times over:

    1. SIGINT during step index 32: stops after 33 steps, between logs (30, 35) and evaluations (20,
       40).
    2. --resume; SIGINT during step index 39: stops at step 40 without waiting for its evaluation.
    3. --resume; a crash during step index 47, after the loss line of step 45 was logged and the
       TensorBoard events were written to disk: ckpt.pt still holds step 40.
    4. --resume to the end, which must trim metrics.jsonl and TensorBoard back to step 40.
    """
    root = tmp_path_factory.mktemp("resumed")
    argv = tiny_argv(root, corpus, *RUN)
    run_dir = root / "runs" / "tiny"
    out: dict = {"run_dir": run_dir}
    with pytest.MonkeyPatch.context() as mp:
        signal_on_call(mp, 33)
        out["first"] = train.train(load_config(argv))
    out["first_ckpt"] = read_checkpoint(run_dir / "ckpt.pt")
    out["first_metrics"] = read_metrics(run_dir)
    with pytest.MonkeyPatch.context() as mp:
        wait_for_a_new_second(run_dir)
        signal_on_call(mp, 7)
        out["second"] = train.train(load_config([*argv, "--resume"]))
    out["second_ckpt"] = read_checkpoint(run_dir / "ckpt.pt")
    out["second_metrics"] = read_metrics(run_dir)
    with pytest.MonkeyPatch.context() as mp:
        wait_for_a_new_second(run_dir)
        loggers = crash_on_call(mp, 8)
        with pytest.raises(Crash):
            train.train(load_config([*argv, "--resume"]))
        loggers[-1].close()  # what the crashed process had written reaches the disk
    out["crash_metrics"] = read_metrics(run_dir)
    out["crash_train_steps"] = [step for step, _ in tensorboard_scalars(run_dir, "loss/train_step")]
    wait_for_a_new_second(run_dir)
    out["last"] = train.train(load_config([*argv, "--resume"]))
    return out


def test_sigint_stops_after_the_current_step_and_saves(resumed):
    first, ckpt = resumed["first"], resumed["first_ckpt"]
    assert first["stopped_at"] == 33 and first["signal"] == signal.SIGINT
    assert ckpt["step"] == 33 and ckpt["evaluated"] is False
    assert {"model", "optimizer", "train_rng", "torch_rng", "window", "best_val"} <= ckpt.keys()
    assert ckpt["window"][1] == 3  # steps 31, 32 and 33 were taken since the loss line of step 30
    assert max(m["step"] for m in resumed["first_metrics"]) == 30


def test_sigint_at_an_evaluation_step_stops_before_the_evaluation(resumed):
    """A stop does not wait for an evaluation: the checkpoint says step 40 was not evaluated, so
    --resume evaluates it.
    """
    second, ckpt = resumed["second"], resumed["second_ckpt"]
    assert second["stopped_at"] == 40 and second["signal"] == signal.SIGINT
    assert ckpt["step"] == 40 and ckpt["evaluated"] is False
    assert steps_with(resumed["second_metrics"], "loss/val") == [0, 20]
    # the latest
    assert (
        ckpt["val_loss"]
        == [m for m in resumed["second_metrics"] if m["step"] == 20 and "loss/val" in m][0][
            "loss/val"
        ]
    )


def test_crash_leaves_lines_past_the_checkpoint_that_resume_must_drop(resumed):
    # logged after ckpt.pt (step 40) was written
    assert max(m["step"] for m in resumed["crash_metrics"]) == 45
    assert resumed["crash_train_steps"][-1] == 45  # and TensorBoard has them too


def test_resumed_metrics_equal_the_uninterrupted_run_exactly(resumed, reference):
    assert resumed["last"]["stopped_at"] is None
    got, want = (
        without_timing(read_metrics(resumed["run_dir"])),
        without_timing(reference["metrics"]),
    )
    assert [m["step"] for m in got] == [m["step"] for m in want]
    for a, b in zip(got, want, strict=True):
        # ==, not approx: same RNG, same numbers
        assert a == b, f"step {a['step']}: resumed {a} vs uninterrupted {b}"


def test_resumed_checkpoint_equals_the_uninterrupted_one(resumed, reference):
    got = read_checkpoint(resumed["run_dir"] / "ckpt.pt")
    want = read_checkpoint(reference["run_dir"] / "ckpt.pt")
    assert got["step"] == want["step"] == 60
    for name, tensor in want["model"].items():
        assert_close(got["model"][name], tensor, atol=0.0, msg=name)
    for index, state in want["optimizer"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq"):
            assert_close(
                got["optimizer"]["state"][index][key],
                state[key],
                atol=0.0,
                msg=f"optimizer {index} {key}",
            )
    assert torch.equal(got["train_rng"], want["train_rng"])
    got_rng, want_rng = got["torch_rng"], want["torch_rng"]  # one state, or one per rank
    if isinstance(want_rng, torch.Tensor):
        got_rng, want_rng = [got_rng], [want_rng]
    assert len(got_rng) == len(want_rng) and all(
        torch.equal(a, b) for a, b in zip(got_rng, want_rng, strict=True)
    )
    assert got["best_val"] == want["best_val"] and got["window"] == want["window"]


@pytest.mark.parametrize("tag", ["loss/train_step", "loss/val", "loss/train", "lr"])
def test_resumed_tensorboard_shows_each_step_once(resumed, reference, tag):
    # one file per process start
    assert len(list(resumed["run_dir"].glob("events.out.tfevents.*"))) == 4
    got = tensorboard_scalars(resumed["run_dir"], tag)
    want = tensorboard_scalars(reference["run_dir"], tag)
    steps = [step for step, _ in got]
    assert steps == sorted(set(steps)), f"{tag}: duplicated or unordered steps {steps}"
    assert got == want  # the values of the crashed attempt at steps 41-45 are purged


def test_resume_prints_where_it_continues_from(tmp_path, reference, capsys):
    argv, run_dir = reference_copy(reference, tmp_path)
    summary = train.train(load_config([*argv, "--resume", "--train.max_steps=62"]))
    out = capsys.readouterr().out
    assert f"resuming {run_dir} from step 60" in out
    assert summary["stopped_at"] is None and read_checkpoint(run_dir / "ckpt.pt")["step"] == 62
    metrics = read_metrics(run_dir)
    assert steps_with(metrics, "loss/val") == [0, 20, 40, 60, 62]  # no second evaluation at step 60
    assert steps_with(metrics, "loss/train_step") == [*range(5, 61, 5), 62]
    # continued in place, nothing moved aside
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["tiny"]


def test_resume_of_a_checkpoint_with_one_torch_rng_tensor(tmp_path, reference, capsys):
    """Checkpoints written before per-rank RNG states (commit 5086413) hold torch_rng as one tensor;
    they resume the same.
    """
    argv, run_dir = reference_copy(reference, tmp_path / "new")
    old_argv, old_dir = reference_copy(reference, tmp_path / "old")
    checkpoint = torch.load(old_dir / "ckpt.pt", weights_only=True)
    if isinstance(checkpoint["torch_rng"], list):
        (checkpoint["torch_rng"],) = checkpoint["torch_rng"]
    torch.save(checkpoint, old_dir / "ckpt.pt")
    train.train(load_config([*argv, "--resume", "--train.max_steps=64"]))
    capsys.readouterr()
    train.train(load_config([*old_argv, "--resume", "--train.max_steps=64"]))
    out = capsys.readouterr().out
    assert "processes" not in out, out  # no note about a world size the checkpoint never had
    # the dropout stream continued
    assert without_timing(read_metrics(old_dir)) == without_timing(read_metrics(run_dir))


def test_sigint_right_after_resuming_from_an_evaluated_checkpoint(tmp_path, reference, monkeypatch):
    """Ctrl-C before the first resumed step is done: stop at once and keep the checkpoint, as at any
    other step.

    The checkpoint of the finished reference run was saved right after an evaluation
    (evaluated=True), so the resumed loop skips that evaluation; the stop must not need its numbers.
    """
    argv, run_dir = reference_copy(reference, tmp_path)

    class StopAtOnce(train.StopFlag):
        def __enter__(self):
            super().__enter__()
            os.kill(os.getpid(), signal.SIGINT)  # lands before the first check of the flag
            return self

    monkeypatch.setattr(train, "StopFlag", StopAtOnce)
    summary = train.train(load_config([*argv, "--resume", "--train.max_steps=70"]))
    assert summary["stopped_at"] == 60 and summary["signal"] == signal.SIGINT
    assert load_checkpoint_both_ways(run_dir / "ckpt.pt")["step"] == 60


def test_second_ctrl_c_after_the_save_aborts_and_says_what_is_saved(
    tmp_path, corpus, monkeypatch, capsys
):
    """A second Ctrl-C that lands once the checkpoint is on disk must not report that nothing was
    saved.
    """
    signal_on_call(monkeypatch, 3)
    real_close = train.RunLogger.close

    def close(self):
        # the second Ctrl-C: the first one's stop has saved ckpt.pt
        os.kill(os.getpid(), signal.SIGINT)
        real_close(self)

    monkeypatch.setattr(train.RunLogger, "close", close)
    argv = tiny_argv(tmp_path, corpus, *RUN)
    try:
        proc = run_train(argv, capsys)
    except KeyboardInterrupt:
        pytest.fail("run() let a KeyboardInterrupt escape")
    ckpt = tmp_path / "runs" / "tiny" / "ckpt.pt"
    assert proc.returncode == 130, proc
    assert load_checkpoint_both_ways(ckpt)["step"] == 3
    assert "nothing was saved" not in proc.stderr, (
        f"ckpt.pt at step 3 is on disk, but stderr says: {proc.stderr.strip()}"
    )
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"SIGINT again: aborted at once; {ckpt} holds step 3"
    )


def test_resume_survives_a_torn_last_line_in_metrics_jsonl(tmp_path, reference):
    """A power cut or a full disk can leave half a line at the end of metrics.jsonl; resume drops it
    like any later line.
    """
    argv, run_dir = reference_copy(reference, tmp_path)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 61, "loss/train_st')
    summary = train.train(load_config([*argv, "--resume", "--train.max_steps=62"]))
    assert summary["stopped_at"] is None
    metrics = read_metrics(run_dir)  # every line parses again
    assert steps_with(metrics, "loss/val")[-1] == 62


DAMAGED_LINES = (
    b'{"step": 1e999}',  # a step past float's range: int() of it raised OverflowError
    # binary garbage, what a crash can leave at a file's end: read_text raised UnicodeDecodeError
    b"\x00\x00\xff\xfe\x8b\x9f",
    # nested past the recursion limit: json.loads raised RecursionError
    b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
)


def test_resume_skips_any_damaged_line_in_metrics_jsonl_alike(tmp_path, reference):
    """Each of these lines used to crash --resume with a traceback; now each is skipped like a torn
    one, and dropped.
    """
    argv, run_dir = reference_copy(reference, tmp_path)
    with open(run_dir / "metrics.jsonl", "ab") as f:
        f.write(b"\n".join(DAMAGED_LINES) + b"\n")
    summary = train.train(load_config([*argv, "--resume", "--train.max_steps=62"]))
    assert summary["stopped_at"] is None
    lines = (run_dir / "metrics.jsonl").read_bytes().splitlines()
    # the resumed run keeps the intact lines up to its checkpoint, then appends
    assert not set(DAMAGED_LINES) & set(lines)
    appended = [62, 62, 62]  # the loss line, the probe and the evaluation of step 62
    assert [json.loads(line)["step"] for line in lines] == [
        m["step"] for m in reference["metrics"]
    ] + appended


# 1b. Every optimizer a preset uses: AdamW, and Muon with AdamW beside it (the char and base
# presets)

SCHEDULE = [
    "--train.max_steps=30",
    "--train.warmup_steps=8",
    "--train.eval_interval=10",
    "--train.log_interval=1",
    "--model.dropout=0.1",
]
# (k-th batch of the process, step it stops at)
STOPS = {"warmup": (4, 4), "after an evaluation": (6, 10), "mid-decay": (9, 19)}


def record_rates(runs: list) -> object:
    """Hook every torch optimizer's step: appends (optimizer class, each group's lr) as the step
    uses them; returns the handle.
    """

    def hook(optimizer, args, kwargs):
        # a subclass of Muon counts as Muon
        kind = "Muon" if isinstance(optimizer, torch.optim.Muon) else type(optimizer).__name__
        runs.append((kind, tuple(group["lr"] for group in optimizer.param_groups)))

    return register_optimizer_step_pre_hook(hook)


def run_stopped_at(argv: list[str], stops: list[int]) -> tuple[list[dict], list]:
    """train.main on argv, stopped by SIGINT on each k-th batch of `stops` in turn and resumed; (the
    summaries, the rates stepped with).
    """
    rates, summaries = [], []
    handle = record_rates(rates)
    try:
        for i, k in enumerate([*stops, 0]):
            with pytest.MonkeyPatch.context() as mp:
                if k:
                    signal_on_call(mp, k)
                summaries.append(train.train(load_config([*argv, "--resume"] if i else argv)))
    finally:
        handle.remove()
    return summaries, rates


@pytest.fixture(scope="module", params=["adamw", "muon"])
def per_optimizer(request, tmp_path_factory, corpus, one_cpu_thread, small_heatmaps) -> dict:
    """A 30-step run on train.optimizer, uninterrupted, and again stopped by Ctrl-C in warmup (step
    4), right after the step-10 evaluation, and mid-decay (step 19), resumed each time."""
    out = {"optimizer": request.param}
    for name, stops in (("full", []), ("resumed", [k for k, _ in STOPS.values()])):
        root = tmp_path_factory.mktemp(f"{request.param}-{name}")
        argv = tiny_argv(root, corpus, *SCHEDULE, f"--train.optimizer={request.param}")
        summaries, rates = run_stopped_at(argv, stops)
        out[name] = {
            "summaries": summaries,
            "rates": rates,
            "run_dir": root / "runs" / "tiny",
            "argv": argv,
        }
    return out


def test_each_optimizer_stops_where_planned(per_optimizer):
    summaries = per_optimizer["resumed"]["summaries"]
    assert [s["stopped_at"] for s in summaries] == [step for _, step in STOPS.values()] + [None]
    assert all(s["signal"] == signal.SIGINT for s in summaries[:-1])
    metrics = read_metrics(per_optimizer["resumed"]["run_dir"])
    # the step-10 evaluation ran once, before the stop
    assert steps_with(metrics, "loss/val") == [0, 10, 20, 30]


def test_each_optimizer_resumes_to_the_uninterrupted_numbers(per_optimizer):
    got = without_timing(read_metrics(per_optimizer["resumed"]["run_dir"]))
    want = without_timing(read_metrics(per_optimizer["full"]["run_dir"]))
    # every step logs its loss and lr
    assert steps_with(want, "loss/train_step") == list(range(1, 31))
    assert [m["step"] for m in got] == [m["step"] for m in want]
    for a, b in zip(got, want, strict=True):
        # to the last digit
        assert a == b, (
            f"{per_optimizer['optimizer']}, step {a['step']}: resumed {a} vs uninterrupted {b}"
        )
    got_ckpt = read_checkpoint(per_optimizer["resumed"]["run_dir"] / "ckpt.pt")
    want_ckpt = read_checkpoint(per_optimizer["full"]["run_dir"] / "ckpt.pt")
    for name, tensor in want_ckpt["model"].items():
        assert_close(got_ckpt["model"][name], tensor, atol=0.0, msg=name)


def test_each_optimizer_steps_at_the_scheduled_rate_after_a_resume(per_optimizer):
    """The rate every torch optimizer's groups hold when it steps, not only the one logged, matches
    the schedule step for step.
    """
    full, resumed = per_optimizer["full"]["rates"], per_optimizer["resumed"]["rates"]
    kinds = ["AdamW"] if per_optimizer["optimizer"] == "adamw" else ["Muon", "AdamW"]
    assert [kind for kind, _ in full] == kinds * 30
    cfg = load_config(per_optimizer["full"]["argv"]).train
    scheduled = [lr_at(step, cfg) for step in range(30) for _ in kinds]
    assert [set(lrs) for _, lrs in full] == [{lr} for lr in scheduled]
    for i, (got, want) in enumerate(zip(resumed, full, strict=True)):
        assert got == want, (
            f"step {i // len(kinds)}: {got[0]} stepped with lr {got[1]}, the uninterrupted run "
            f"with {want[1]}"
        )
    logged = {
        m["step"]: m["lr"] for m in read_metrics(per_optimizer["resumed"]["run_dir"]) if "lr" in m
    }
    assert logged == {step + 1: lr_at(step, cfg) for step in range(30)}


@pytest.fixture(
    scope="module",
    params=["--qk-norm", "--softcap=1.5", "--rope", "--kv-heads=1 --window=4 --gate --sink"],
)
def per_change(request, tmp_path_factory, corpus, one_cpu_thread, small_heatmaps) -> dict:
    """A cured run (or one with rotary positions, or attention as shipped models have it: the four
    designs in one run, one run's cost) on the char preset's optimizer, Muon, uninterrupted, and
    stopped by Ctrl-C in warmup, after an evaluation and mid-decay, resumed each time (dropout 0.1:
    the random state matters too)."""
    out = {"change": request.param}
    for name, stops in (("full", []), ("resumed", [k for k, _ in STOPS.values()])):
        root = tmp_path_factory.mktemp(f"{request.param.strip('-').split('=')[0]}-{name}")
        argv = tiny_argv(
            root,
            corpus,
            *SCHEDULE,
            "--train.optimizer=muon",
            "--model.qk_init_std=0.3",
            *request.param.split(),
        )
        run_stopped_at(argv, stops)
        out[name] = root / "runs" / load_config(argv).run_name
    return out


def test_each_change_resumes_to_the_uninterrupted_numbers(per_change):
    # the change names the run
    assert per_change["full"].name.startswith("tiny-") and per_change["full"].name != "tiny"
    got, want = (
        without_timing(read_metrics(per_change["resumed"])),
        without_timing(read_metrics(per_change["full"])),
    )
    assert steps_with(want, "loss/val") == [0, 10, 20, 30] and steps_with(got, "loss/val") == [
        0,
        10,
        20,
        30,
    ]
    for a, b in zip(got, want, strict=True):
        # to the last digit
        assert a == b, f"{per_change['change']}, step {a['step']}: resumed {a} vs uninterrupted {b}"
    got_ckpt, want_ckpt = (
        read_checkpoint(run_dir / "ckpt.pt")
        for run_dir in (per_change["resumed"], per_change["full"])
    )
    assert got_ckpt["config"]["model"] == want_ckpt["config"]["model"]
    for name, tensor in want_ckpt["model"].items():
        assert_close(got_ckpt["model"][name], tensor, atol=0.0, msg=name)


def test_resuming_with_another_optimizer_is_refused(per_optimizer, tmp_path, capsys):
    run_dir = per_optimizer["resumed"]["run_dir"]
    other = "adamw" if per_optimizer["optimizer"] == "muon" else "muon"
    argv = [
        *per_optimizer["resumed"]["argv"],
        f"--train.optimizer={other}",
        "--resume",
        "--train.max_steps=40",
    ]
    before = snapshot(run_dir)
    proc = run_train(argv, capsys)
    line = assert_one_line_error(
        proc, f"was trained with train.optimizer={per_optimizer['optimizer']}", "same optimizer"
    )
    assert str(run_dir / "ckpt.pt") in line
    assert snapshot(run_dir) == before  # nothing written


# 2. The script under real signals


SIGNAL_CASES = {
    "sigint": [signal.SIGINT],
    "sigterm": [signal.SIGTERM],
    # the second as soon as the stop line is printed
    "sigint_twice": [signal.SIGINT, "after-save", signal.SIGINT],
}


@pytest.fixture(scope="module")
def signalled(tmp_path_factory, corpus) -> dict:
    """`python train.py` three times at once, each signalled once it has logged a training step.

    The second Ctrl-C of "sigint_twice" comes a few milliseconds after the first, as soon as the
    process
    prints that it stopped: on the tiny model that is how quick a double Ctrl-C by hand is.
    """
    root = tmp_path_factory.mktemp("signals")
    # unbuffered: the stop line is seen at once
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # prepared once here: three processes preparing it at once collide
    load_corpus(load_config(tiny_argv(root, corpus)).data)
    procs = {}
    for name in SIGNAL_CASES:
        argv = tiny_argv(
            root, corpus, "--train.max_steps=100000", "--train.warmup_steps=1", f"--run-name={name}"
        )
        out, err = open(root / f"{name}.out", "w"), open(root / f"{name}.err", "w")
        procs[name] = subprocess.Popen(
            [sys.executable, "train.py", *argv], cwd=REPO_ROOT, stdout=out, stderr=err, env=env
        )
        out.close(), err.close()
    results = {}
    # only against a hang: three starts of torch on a busy 2-core machine can take a minute
    deadline = time.monotonic() + 300
    try:
        for name, actions in SIGNAL_CASES.items():
            proc, metrics = procs[name], root / "runs" / name / "metrics.jsonl"
            # training is under way
            while not (metrics.exists() and "loss/train_step" in metrics.read_text()):
                assert proc.poll() is None and time.monotonic() < deadline, (
                    root / f"{name}.err"
                ).read_text()
                time.sleep(0.02)
            for action in actions:
                if action == "after-save":
                    while (
                        "stopped at step" not in (root / f"{name}.out").read_text()
                        and proc.poll() is None
                    ):
                        time.sleep(0.001)
                else:
                    proc.send_signal(action)
        for name, proc in procs.items():
            proc.wait(timeout=max(1, deadline - time.monotonic()))
            out, err = (root / f"{name}.out").read_text(), (root / f"{name}.err").read_text()
            results[name] = {
                "proc": subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
                "run_dir": root / "runs" / name,
            }
    finally:
        for proc in procs.values():  # never leave a 100000-step run behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def stopped_step(stdout: str) -> int:
    (line,) = [line for line in stdout.splitlines() if line.startswith("stopped at step ")]
    return int(line.split()[3].rstrip(";"))


@pytest.mark.parametrize(
    ("case", "code"), [("sigint", 130), ("sigterm", 143), ("sigint_twice", 130)]
)
def test_signal_stops_cleanly_with_a_loadable_checkpoint(signalled, case, code):
    proc, run_dir = signalled[case]["proc"], signalled[case]["run_dir"]
    ckpt = run_dir / "ckpt.pt"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == code, (
        f"exit code {proc.returncode}; stderr ends:\n{proc.stderr[-1500:]}"
    )
    assert "nothing was saved" not in proc.stderr
    step = stopped_step(proc.stdout)
    assert (
        f"stopped at step {step}; checkpoint saved to {ckpt}. Resume with the same command plus "
        "--resume" in proc.stdout
    )
    name = signal.Signals(SIGNAL_CASES[case][0]).name
    assert f"{name}: stopping after this step and saving a checkpoint" in proc.stdout
    checkpoint = load_checkpoint_both_ways(ckpt)
    assert checkpoint["step"] == step > 0
    assert max(m["step"] for m in read_metrics(run_dir)) <= step
    assert not list(run_dir.glob("*.tmp"))
    # The second Ctrl-C lands in the stop's save (which it lets finish), after it, or after the
    # process ended: at most one line then says what is on disk, and it is what is on disk.
    said = [line.strip() for line in proc.stderr.splitlines() if "again" in line]
    assert said in ([], [f"SIGINT again: aborted at once; {ckpt} holds step {step}"]), said


SECOND_CTRL_C_AT = ["the bar's teardown", "a finalizer", "after run_command"]


def ctrl_c_twice_in_child(where: str, argv: list[str], out: str, err: str) -> None:
    """Target of the forked training processes below: train.py's command line, given a first Ctrl-C
    at its third step and the second where `where` says, by the process itself: a signal raised so
    lands at once, there and nowhere else."""
    for fd, path in ((1, out), (2, err)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT), fd)
    torch.set_num_threads(1)
    # as in a terminal: the forkserver ignores Ctrl-C
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # quicker evaluations: the figures are not under test
    harness.training.evaluation.HEATMAP_MAX_TOKENS = 4
    steps, sent, real_draw, real_del = [], [], train.draw_micro_batches, tqdm.__del__

    class Cycle:
        pass

    def second_ctrl_c() -> None:
        if not sent:
            sent.append(os.write(1, f"second SIGINT sent in {where}\n".encode()))
            signal.raise_signal(signal.SIGINT)

    def draw_micro_batches(*args, **kwargs):
        steps.append(None)
        if len(steps) == 3:
            signal.raise_signal(signal.SIGINT)  # the first: the run stops before step 3 and saves
            # the second in the middle of this step, before the stop's save
            if where == "a finalizer":
                cycle = Cycle()
                cycle.itself = cycle
                weakref.finalize(cycle, second_ctrl_c)
                del cycle
                gc.collect()  # as the garbage collector does now and then, in whatever code runs
        return real_draw(*args, **kwargs)

    # the first bar's teardown after the first Ctrl-C: the training bar's, as train() returns
    def teardown(self):
        if where == "the bar's teardown" and len(steps) >= 3:
            second_ctrl_c()
        real_del(self)

    train.draw_micro_batches, tqdm.__del__ = draw_micro_batches, teardown
    code = train.main(argv)
    # where the interpreter's shutdown runs its atexit hooks and finalizers
    if where == "after run_command":
        second_ctrl_c()
        gc.collect()
    sys.exit(code)


@pytest.mark.parametrize("where", SECOND_CTRL_C_AT)
def test_a_second_ctrl_c_where_no_exception_can_go_on_is_one_line(tmp_path, corpus, where):
    """The second Ctrl-C of a double one landed in tqdm's __del__, and Python printed "Exception
    ignored in: <function tqdm.__del__ ...>" with a traceback of Aborted: an exception raised in a
    __del__, a finalizer or an atexit hook cannot go on, and is printed instead. Here the second
    lands in the bar's teardown after the stop's save, in a finalizer that the garbage collector
    runs in the middle of a step (before the stop's save), and after run_command has returned; each
    time at most one line says what is on disk, and it is."""
    argv = tiny_argv(tmp_path, corpus, "--train.max_steps=100000", "--run-name=x")
    proc = forkserver().Process(
        target=ctrl_c_twice_in_child,
        args=(where, argv, str(tmp_path / "out"), str(tmp_path / "err")),
    )
    proc.start()
    proc.join(240)  # only against a hang
    if proc.is_alive():
        proc.kill()
    out, err, ckpt = (
        (tmp_path / "out").read_text(),
        (tmp_path / "err").read_text(),
        tmp_path / "runs" / "x" / "ckpt.pt",
    )
    assert f"second SIGINT sent in {where}" in out, out + err[-2000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-3000:]
    assert proc.exitcode == 130, f"exit code {proc.exitcode}; stderr ends:\n{err[-1500:]}"
    step = load_checkpoint_both_ways(ckpt)["step"]
    # aborted before the stop's save: step 0's evaluation saved it
    assert step == (0 if where == "a finalizer" else 3)
    said = [line.strip() for line in err.splitlines() if "again" in line]
    assert said == (
        []
        if where == "after run_command"
        else [f"SIGINT again: aborted at once; {ckpt} holds step {step}"]
    )
    stop_line = (
        f"stopped at step {step}; checkpoint saved to {ckpt}. "
        "Resume with the same command plus --resume"
    )
    # stdout's buffer is written out before the abort
    assert (stop_line in out) == (where != "a finalizer"), out
    assert not list(ckpt.parent.glob("*.tmp"))


# 3. SIGKILL at random moments: whatever survives on disk loads


KILLS = 8
# these kills land in a save; the others at random
TARGETED = {1: "mid-write", 3: "before-rename", 5: "mid-write", 7: "before-rename"}
FORKSERVER_PRELOAD = [
    "train",
    "sample",
    "inspect_attention",
    "torch.utils.tensorboard",
    "torch._dynamo",
    "test_resume",
    "test_distributed",
]


def train_in_child(argv: list[str], log: str, pause: str = "") -> None:
    """Target of the forked training processes: train.py's command line, its output going to
    `log`.
    """
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1), os.dup2(fd, 2)
    torch.set_num_threads(1)
    # faster evaluations: more checkpoints per second to be killed in
    harness.training.evaluation.HEATMAP_MAX_TOKENS = 4
    if pause:
        hang_in_second_save(pause)
    sys.exit(train.main(argv))


def hang_in_second_save(where: str) -> None:
    """Make this process's second save of ckpt.pt hang, for the kill to land in: with half the file
    written ("mid-write"), or with all of it written and fsynced, before the rename
    ("before-rename").

    A save takes milliseconds: a kill timed from outside would often miss it on a busy machine, and
    then prove nothing.
    """
    saves, real_save, real_replace = [0], torch.save, os.replace

    def save(obj, f, *args, **kwargs):
        saves[0] += str(getattr(f, "name", "")).endswith("ckpt.pt.tmp")
        if where == "mid-write" and saves[0] == 2:
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            f.write(buffer.getvalue()[: buffer.tell() // 2])
            f.flush()
            time.sleep(600)
        return real_save(obj, f, *args, **kwargs)

    def replace(src, dst):
        if where == "before-rename" and saves[0] == 2 and str(src).endswith("ckpt.pt.tmp"):
            time.sleep(600)
        return real_replace(src, dst)

    torch.save, os.replace = save, replace


def forkserver() -> multiprocessing.context.BaseContext:
    """Processes forked from a server that has imported torch and train.py already: a restart skips
    those imports, the larger part of a fresh `python train.py` start (torch.optim imports
    torch._dynamo on first use).
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return ctx


def wait_until(condition, proc, timeout: float = 120.0, poll: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.is_alive(), f"training process exited early with code {proc.exitcode}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll)


def file_id(path: Path):
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def test_sigkill_at_random_moments_never_leaves_an_unloadable_checkpoint(tmp_path, corpus):
    """kill -9 eight times: four after random delays of 0.3-2 s, four in a save (hanging
    half-written, or before its rename).

    After each kill, ckpt.pt (and best.pt) must load with read_checkpoint and
    harness.training.checkpoints.load_model. Restarts resume, except one that starts afresh (the old
    run is moved aside). Finally the run resumes to its end, and metrics.jsonl then holds each step
    once, whatever the kills left behind.
    """
    ctx, rng = forkserver(), random.Random(1234)
    argv = tiny_argv(
        tmp_path,
        corpus,
        "--train.max_steps=100000",
        "--train.warmup_steps=1",
        "--train.eval_interval=1",
    )
    run_dir = tmp_path / "runs" / "tiny"
    ckpt, tmp = run_dir / "ckpt.pt", run_dir / "ckpt.pt.tmp"
    last_step, mid_save = 0, 0
    for i in range(KILLS):
        resume = i not in (0, 4)
        targeted = i in TARGETED
        if targeted:
            tmp.unlink(missing_ok=True)  # a stale one from an earlier kill would trigger at once
        # a fresh start moves the run aside first: its ckpt.pt is a new file too
        before = file_id(ckpt)
        args = (
            [*argv, "--resume"] if resume else argv,
            str(tmp_path / f"log{i}.txt"),
            TARGETED.get(i, ""),
        )
        proc = ctx.Process(target=train_in_child, args=args)
        proc.start()
        try:
            # this process has saved at least once
            wait_until(lambda before=before: file_id(ckpt) not in (None, before), proc)
            if targeted:
                wait_until(tmp.exists, proc)  # the second save has begun, and hangs
            else:
                time.sleep(rng.uniform(0.3, 2.0))
            assert proc.is_alive(), f"training process {i} exited with code {proc.exitcode}"
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(10)
        assert proc.exitcode == -signal.SIGKILL
        mid_save += targeted and tmp.exists()
        checkpoint = load_checkpoint_both_ways(ckpt)
        if (run_dir / "best.pt").exists():
            load_checkpoint_both_ways(run_dir / "best.pt")
        assert checkpoint["step"] >= (last_step if resume else 0), (
            f"kill {i}: the checkpoint went back in time"
        )
        last_step = checkpoint["step"]
    assert mid_save == len(TARGETED), (
        f"{mid_save} of {len(TARGETED)} targeted kills left ckpt.pt.tmp behind"
    )
    final = train.train(load_config([*argv, "--resume", f"--train.max_steps={last_step + 2}"]))
    assert final["stopped_at"] is None
    metrics = read_metrics(run_dir)
    for key in ("loss/train_step", "loss/val"):
        steps = steps_with(metrics, key)
        assert steps == sorted(set(steps)), f"{key}: repeated steps after the kills: {steps}"
    assert steps_with(metrics, "loss/val")[-1] == last_step + 2
    assert len([p for p in (tmp_path / "runs").iterdir() if p.name.startswith("tiny.old-")]) == 1


# 4. best.pt


def test_best_pt_holds_the_lowest_val_loss_of_the_reference_run(reference):
    metrics = [m for m in reference["metrics"] if "loss/val" in m]
    best_line = min(metrics, key=lambda m: m["loss/val"])
    best = read_checkpoint(reference["run_dir"] / "best.pt")
    assert best["val_loss"] == best_line["loss/val"] and best["step"] == best_line["step"]
    assert "optimizer" not in best  # weights for sampling only


def fake_val_losses(mp: pytest.MonkeyPatch, values: list[float]) -> None:
    """Evaluation i reports loss/val = values[i] (the train loss stays real): a val curve with a
    dip.
    """
    sets, reported = [], []
    real_make, real_estimate = train.make_eval_set, harness.training.evaluation.estimate_loss

    def make_eval_set(*args, **kwargs):
        sets.append(real_make(*args, **kwargs))
        return sets[-1]

    def estimate_loss(model, batches, runtime, between=None):
        loss = real_estimate(model, batches, runtime, between)
        if batches is sets[-1].batches["val"]:
            loss = values[len(reported)]
            reported.append(loss)
        return loss

    mp.setattr(train, "make_eval_set", make_eval_set)
    mp.setattr(harness.training.evaluation, "estimate_loss", estimate_loss)


def test_best_pt_keeps_the_dip_across_a_resume_and_sample_best_uses_it(tmp_path, corpus, capsys):
    argv = tiny_argv(tmp_path, corpus, "--train.max_steps=15", "--train.eval_interval=5")
    run_dir = tmp_path / "runs" / "tiny"
    with pytest.MonkeyPatch.context() as mp:
        fake_val_losses(mp, [4.0, 2.0, 3.0, 2.5])  # steps 0, 5, 10, 15: best at step 5
        train.train(load_config(argv))
    with pytest.MonkeyPatch.context() as mp:
        fake_val_losses(mp, [2.25])  # step 20, after resuming: still worse than step 5
        train.train(load_config([*argv, "--resume", "--train.max_steps=20"]))
    metrics = read_metrics(run_dir)
    assert [(m["step"], m["loss/val"]) for m in metrics if "loss/val" in m] == [
        (0, 4.0),
        (5, 2.0),
        (10, 3.0),
        (15, 2.5),
        (20, 2.25),
    ]
    best, latest = read_checkpoint(run_dir / "best.pt"), read_checkpoint(run_dir / "ckpt.pt")
    assert (best["step"], best["val_loss"]) == (5, 2.0)
    assert (latest["step"], latest["val_loss"], latest["best_val"]) == (20, 2.25, 2.0)
    assert not torch.equal(best["model"]["tok_emb.weight"], latest["model"]["tok_emb.weight"])
    capsys.readouterr()
    samples = sample.main(
        [
            "--run",
            "tiny",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--best",
            "--device",
            "cpu",
            "--max-new-tokens",
            "5",
        ]
    )
    header = capsys.readouterr().out.splitlines()[0]
    assert header == f"# {run_dir / 'best.pt'} (step 5, val loss 2.0000) on cpu"
    model, _, _ = harness.training.checkpoints.load_model(run_dir / "best.pt")
    for name, tensor in best["model"].items():
        assert_close(model.state_dict()[name], tensor, atol=0.0, msg=name)
    assert len(samples) == 1 and len(samples[0]) == 1 + 5


# 5. Non-finite loss or gradient


def nan_on_call(mp: pytest.MonkeyPatch, k: int, what: str, run_dir: Path) -> dict:
    """The k-th step's loss or gradient norm reaches train.py's check_finite as NaN; records the
    model, ckpt.pt and the weights just before that check."""
    real_check, real_make, calls, seen = train.check_finite, train.make_optimizer, [0], {}

    def make_optimizer(model, *args):
        seen["model"] = model
        return real_make(model, *args)

    def check_finite(loss, grad_norm, *args, **kwargs):
        calls[0] += 1
        if calls[0] == k:
            seen.update(ckpt=(run_dir / "ckpt.pt").read_bytes())
            seen["weights"] = {name: t.clone() for name, t in seen["model"].state_dict().items()}
            nan = torch.tensor(float("nan"))
            loss, grad_norm = (nan, grad_norm) if what == "loss" else (loss, nan)
        return real_check(loss, grad_norm, *args, **kwargs)

    mp.setattr(train, "make_optimizer", make_optimizer)
    mp.setattr(train, "check_finite", check_finite)
    return seen


def test_nan_loss_stops_before_the_update_and_keeps_the_checkpoint(tmp_path, corpus, monkeypatch):
    argv = tiny_argv(tmp_path, corpus, "--train.max_steps=20", "--train.eval_interval=5")
    run_dir = tmp_path / "runs" / "tiny"
    seen = nan_on_call(monkeypatch, 8, "loss", run_dir)
    with pytest.raises(harness.training.step.TrainingError) as e:
        train.train(load_config(argv))
    message = str(e.value)
    assert "non-finite loss at step 8" in message and str(run_dir / "ckpt.pt") in message
    assert (run_dir / "ckpt.pt").read_bytes() == seen["ckpt"]  # byte for byte the step-5 checkpoint
    assert load_checkpoint_both_ways(run_dir / "ckpt.pt")["step"] == 5
    # the optimizer never stepped on the bad loss
    for name, tensor in seen["model"].state_dict().items():
        assert_close(tensor, seen["weights"][name], atol=0.0, msg=name)
    assert not list(run_dir.glob("*.tmp"))


def test_nan_gradient_is_exit_code_1_and_one_line(tmp_path, corpus, monkeypatch, capsys):
    argv = tiny_argv(tmp_path, corpus, "--train.max_steps=20", "--train.eval_interval=5")
    run_dir = tmp_path / "runs" / "tiny"
    seen = nan_on_call(monkeypatch, 8, "gradient", run_dir)
    line = assert_error_after_progress(
        run_train(argv, capsys),
        1,
        "error: non-finite gradient at step 8; stopped before the update",
    )
    assert str(run_dir / "ckpt.pt") in line and "--train.lr" in line
    assert (run_dir / "ckpt.pt").read_bytes() == seen["ckpt"]


def good_payload(step: int = 1) -> dict:
    return {
        "model": {"w": torch.full((64, 64), float(step))},
        "config": {},
        "tokenizer": {},
        "step": step,
    }


def test_save_checkpoint_refuses_non_finite_weights_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, good_payload(1))
    before = path.read_bytes()
    for bad in (float("nan"), float("inf")):
        payload = good_payload(2)
        payload["model"]["w"][3, 4] = bad
        with pytest.raises(
            CheckpointError, match=f"refusing to save {path}: weight w is not finite"
        ):
            save_checkpoint(path, payload)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


# 6. Out of disk space


def test_save_checkpoint_out_of_space_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, good_payload(1))
    before = path.read_bytes()

    def full_disk_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 partial")  # some bytes made it before the disk filled
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(harness.training.checkpoints.torch, "save", full_disk_save)
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(path, good_payload(2))
    message = str(e.value)
    assert (
        str(path) in message
        and "No space left on device" in message
        and "previous checkpoint there is intact" in message
    )
    assert path.read_bytes() == before
    # the partial temp file is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


class DiskWithRoom(io.FileIO):
    """A file on a disk with `room` bytes free: the write that goes past it fails with ENOSPC, as
    the OS's would.
    """

    room = 0
    used = 0

    def write(self, data):
        n = len(memoryview(data))
        if DiskWithRoom.used + n > DiskWithRoom.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        DiskWithRoom.used += n
        return super().write(data)


@pytest.mark.parametrize("room", [0, 50_000, 200_000])
def test_disk_filling_up_partway_through_a_save(tmp_path, monkeypatch, room):
    """The disk fills at some byte of the new checkpoint (it is ~300 KB): still one CheckpointError,
    old file intact.
    """
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, good_payload(1))
    before = path.read_bytes()
    monkeypatch.setattr(DiskWithRoom, "room", room)
    monkeypatch.setattr(DiskWithRoom, "used", 0)
    monkeypatch.setattr(
        data.files, "open", lambda p, mode: io.BufferedWriter(DiskWithRoom(p, mode)), raising=False
    )
    payload = {**good_payload(2), "model": {f"w{i}": torch.randn(128, 128) for i in range(5)}}
    try:
        save_checkpoint(path, payload)
    except CheckpointError as e:
        assert "No space left on device" in str(e) and "previous checkpoint there is intact" in str(
            e
        )
    except Exception as e:
        pytest.fail(
            f"disk full after {room} bytes: {type(e).__name__}: {e} (not a CheckpointError; left "
            f"{sorted(os.listdir(tmp_path))})"
        )
    else:
        pytest.fail("the save claimed success on a full disk")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_out_of_space_during_training_is_one_line_exit_2(tmp_path, corpus, monkeypatch, capsys):
    argv = tiny_argv(tmp_path, corpus, "--train.max_steps=20", "--train.eval_interval=5")
    run_dir = tmp_path / "runs" / "tiny"
    real_save, calls = torch.save, [0]

    def save(obj, f, *args, **kwargs):
        calls[0] += 1
        if calls[0] > 2:  # step 0 saved best.pt and ckpt.pt; then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(harness.training.checkpoints.torch, "save", save)
    assert_error_after_progress(
        run_train(argv, capsys),
        2,
        "No space left on device",
        "the previous checkpoint there is intact",
    )
    monkeypatch.setattr(harness.training.checkpoints.torch, "save", real_save)
    assert load_checkpoint_both_ways(run_dir / "ckpt.pt")["step"] == 0
    assert not list(run_dir.glob("*.tmp"))


# 7. Resume errors: one line, exit code 2, nothing in the run folder changed


def accepted_flag(flag: str) -> bool:
    return flag in SHORTHANDS or flag == "--config" or "." in flag


def test_resume_without_a_checkpoint(tmp_path, reference, capsys):
    argv = [*tiny_argv(tmp_path, reference["corpus"], *RUN), "--resume"]
    line = assert_one_line_error(
        run_train(argv, capsys), f"no checkpoint at {tmp_path / 'runs' / 'tiny' / 'ckpt.pt'}"
    )
    suggested = [word.rstrip(",;.)") for word in line.split() if word.startswith("--")]
    wrong = [flag for flag in suggested if not accepted_flag(flag)]
    assert not wrong, f"the message suggests {wrong}, which train.py rejects: {line}"
    assert not (tmp_path / "runs" / "tiny").exists()


def weights_only(path: Path) -> None:
    shutil.copyfile(path.with_name("best.pt"), path)


@pytest.mark.parametrize(
    ("flags", "damage", "needles"),
    [
        (
            ["--model.n_embd=64", "--run-name=tiny"],
            None,
            ["another model config", "n_embd 32 vs 64", "resume with the run's own flags"],
        ),
        ([], None, ["already finished at step 60", "raise --train.max_steps"]),
        (["--train.max_steps=70"], weights_only, ["holds weights only"]),
        (
            ["--train.max_steps=70", "--data-file", "OTHER"],
            None,
            ["trained on another text", "same --data-file"],
        ),
        (
            ["--run-name=tiny", "--qk-norm"],
            None,
            ["trained with another model config", "qk_norm False vs True"],
        ),
        (
            ["--run-name=tiny", "--rope"],
            None,
            ["trained with another model config", "positions 'learned' vs 'rope'"],
        ),
    ],
    ids=[
        "other-model-config",
        "finished",
        "weights-only",
        "other-text",
        "a-cure-added",
        "rope-for-learned",
    ],
)
def test_resume_refuses_what_it_cannot_continue(
    tmp_path, reference, capsys, flags, damage, needles
):
    argv, run_dir = reference_copy(reference, tmp_path)
    if damage:
        damage(run_dir / "ckpt.pt")
    if "OTHER" in flags:
        flags = [
            *flags[:-1],
            str(
                write_corpus(
                    tmp_path / "other",
                    text=reference["corpus"].read_text() + "\nEPILOGUE:\nThe end.\n",
                )
            ),
        ]
    before = snapshot(run_dir)
    line = assert_one_line_error(run_train([*argv, "--resume", *flags], capsys), *needles)
    assert str(run_dir / "ckpt.pt") in line
    assert snapshot(run_dir) == before  # not even config.json was rewritten
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["tiny"]


def test_a_run_from_before_positions_had_kinds_resumes(tmp_path, reference, capsys):
    """Its ckpt.pt and config.json store positions as true and lack qk_norm and softcap: it resumes
    as the learned model it is.
    """
    argv, run_dir = reference_copy(reference, tmp_path)
    checkpoint = read_checkpoint(run_dir / "ckpt.pt")
    model = checkpoint["config"]["model"]
    checkpoint["config"]["model"] = {
        k: v for k, v in model.items() if k not in ("qk_norm", "softcap")
    } | {"positions": True}
    save_checkpoint(run_dir / "ckpt.pt", checkpoint)
    proc = run_train([*argv, "--resume", "--train.max_steps=62"], capsys)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resuming {run_dir} from step 60" in proc.stdout + proc.stderr
    assert read_checkpoint(run_dir / "ckpt.pt")["config"]["model"]["positions"] == "learned"


# 8. The stop flag


def test_stop_flag_records_the_first_signal_and_aborts_on_the_second():
    """Inside the block a first signal only records itself; a second raises Aborted at once, unless
    a checkpoint is being written (then right after it). Without a stop the handlers are restored
    afterwards."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with train.StopFlag():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    with train.StopFlag() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signum == signal.SIGTERM  # no exception, no exit: the loop decides when to stop
        with pytest.raises(train.Stopped):
            stop.poll()
        stop.saved = "ckpt.pt holds step 7"
        with pytest.raises(Aborted, match="SIGINT again: aborted at once; ckpt.pt holds step 7"):
            with stop.writing():
                os.kill(os.getpid(), signal.SIGINT)
                written = True  # the write goes on to its end
        assert written
    with pytest.raises(Aborted, match="nothing was saved"), train.StopFlag() as stop:
        os.kill(os.getpid(), signal.SIGHUP)
        assert stop.signum == signal.SIGHUP
        os.kill(os.getpid(), signal.SIGHUP)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
