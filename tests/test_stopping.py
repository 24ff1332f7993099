"""harness/stopping.py and what it stops: train.py under signals and lost output, the budget of an
evaluation, and the one-line answers to bad input around them.

A subprocess waits for a line, never for a time: a busy machine only makes it slower.
"""

import ast
import dataclasses
import errno
import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    REPO_ROOT,
    assert_one_line_error,
    error_of,
    make_corpus_text,
    tiny_argv,
    write_corpus,
)

import harness.training.budget
import harness.training.starting_weights
import train
from configs import ConfigError, load_config
from data.corpus import DataError, load_corpus
from data.tokenizer import CharTokenizer, TokenizerError
from harness.arguments import positive_int, typed_text
from harness.experiments.children import Children
from harness.output import GuardedStream
from harness.scoring import text_ids
from harness.stopping import Aborted, StopFlag
from harness.training.budget import check_affordable, forward_flops, prefix_flops, step_flops
from harness.training.checkpoints import CheckpointError, save_checkpoint
from harness.training.evaluation import cap_prefix_work, evaluation_flops, make_eval_set
from harness.training.runlog import read_metrics
from model import GPT
from model.measurements import honest_positions

# an evaluation of a minute or so; named tiny still (the changed context would name it
# tiny-block_size1024)
LONG_EVAL = (
    "--model.block_size=1024",
    "--train.eval_batches=100",
    "--train.max_steps=5",
    "--run-name=tiny",
)
QUICK = (
    "--train.max_steps=100000",
    "--train.eval_interval=10",
    "--train.eval_batches=1",
    "--train.honest_batches=1",
)


def test_sigterm_inside_an_evaluation_stops_within_seconds_and_saves(tmp_path):
    """`python train.py`, sent SIGTERM inside its first evaluation, which would take a minute or
    more here.

    The training bar appears once the stop flag is in place, right before the first evaluation: that
    is the cue. (A second Ctrl-C is tests/test_resume.py's `signalled`.)"""
    # a val split longer than the context
    corpus = write_corpus(tmp_path / "text", text=make_corpus_text(min_chars=20_000))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "train.py", *tiny_argv(tmp_path, corpus, *LONG_EVAL)]
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=err, env=env)
    try:
        deadline = time.monotonic() + 240  # only against a hang
        while "tiny:   0%" not in (tmp_path / "err").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "err"
            ).read_text()[-2000:]
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        proc.wait(timeout=120)
        seconds = time.monotonic() - signalled
    finally:
        proc.kill()
    err, out, run_dir = (
        (tmp_path / "err").read_text(),
        (tmp_path / "out").read_text(),
        tmp_path / "runs" / "tiny",
    )
    assert proc.returncode == 143 and "Traceback" not in err, err[-2000:]
    assert seconds < 30  # a pass of the evaluation takes a fraction of a second
    checkpoint = torch.load(run_dir / "ckpt.pt", weights_only=True)
    # --resume evaluates step 0 again
    assert checkpoint["step"] == 0 and checkpoint["evaluated"] is False
    # the evaluation cut short is not logged
    assert not [m for m in read_metrics(run_dir) if "loss/val" in m]
    assert f"stopped at step 0; checkpoint saved to {run_dir / 'ckpt.pt'}" in out


@pytest.fixture
def own_signals():
    """The stop signals' handlers and sys.unraisablehook put back after the test, whatever it set or
    a stop flag left behind.
    """
    before = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    }
    hook = sys.unraisablehook
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)
    sys.unraisablehook = hook


def signals_as_a_terminal_gives_them() -> None:
    """In the child, before it runs Python: the stop signals at their defaults, whatever this suite
    was started with (an ignored signal stays ignored across exec, as nohup relies on)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def as_nohup_starts_it() -> None:
    """In the child, before it runs Python: the terminal's signals, with SIGHUP ignored, as `nohup`
    leaves it.
    """
    signals_as_a_terminal_gives_them()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def wait_until(ready, proc: subprocess.Popen, log: Path) -> None:
    """Wait until ready() holds while proc runs: a subprocess waits for what it writes, never for a
    time.
    """
    deadline = time.monotonic() + 240  # only against a hang
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, (
            f"exit code {proc.poll()}:\n{log.read_text()[-2000:]}"
        )
        time.sleep(0.01)


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl-c", "sigterm", "sighup"]
)
def test_a_signal_during_the_imports_is_one_line(tmp_path, signum):
    """A Ctrl-C while `import torch` ran (the first second or so, before run_command) printed a
    KeyboardInterrupt traceback, and SIGTERM or SIGHUP ended the process without a word. Python's
    own import log (-X importtime) says when torch's
    import is under way: its first submodule done, the module itself not yet."""
    corpus = write_corpus(tmp_path / "text")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-X", "importtime", "train.py", *tiny_argv(tmp_path, corpus)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=signals_as_a_terminal_gives_them,
    )
    try:
        for line in proc.stderr:  # a line per module imported, as each import ends
            if re.search(r"\| +torch\.", line):
                proc.send_signal(signum)
                break
        err, out = proc.stderr.read(), proc.stdout.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    said = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 128 + signum, err[-2000:]
    assert said == ["interrupted before training started; nothing was saved"]
    assert out == "" and not (tmp_path / "runs").exists()


def test_every_script_answers_a_signal_during_its_imports():
    """Each script's first act, before any import that takes time, is exit_on_signal: read from its
    source, never imported.
    """
    for path in sorted(REPO_ROOT.glob("*.py")):
        body = ast.parse(path.read_text(encoding="utf-8")).body[1:]  # after the docstring
        first, guard = body[0], body[1]
        assert isinstance(first, ast.ImportFrom) and first.module == "harness.stopping", (
            f"{path.name}: {ast.unparse(first)}"
        )
        assert ast.unparse(guard.test) == "__name__ == '__main__'", (
            f"{path.name}: {ast.unparse(guard)}"
        )
        assert ast.unparse(guard.body[0]).startswith("exit_on_signal("), (
            f"{path.name}: {ast.unparse(guard)}"
        )


def test_sighup_stops_like_sigterm_with_a_checkpoint(tmp_path, monkeypatch, capsys, own_signals):
    """The terminal or the ssh session closed (SIGHUP, here during step 13): the run used to die
    with nothing saved.
    """
    real, calls = train.draw_micro_batches, [0]

    def draw(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 13:
            os.kill(os.getpid(), signal.SIGHUP)
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "draw_micro_batches", draw)
    # as a terminal gives it, even to a suite run under nohup
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    code = train.main(tiny_argv(tmp_path, write_corpus(tmp_path / "t"), *QUICK))
    ckpt = tmp_path / "runs" / "tiny" / "ckpt.pt"
    assert code == 129 and torch.load(ckpt, weights_only=True)["step"] == 13
    assert f"stopped at step 13; checkpoint saved to {ckpt}" in capsys.readouterr().out


def test_a_run_started_under_nohup_trains_on_after_the_terminal_closes(tmp_path):
    """`nohup python train.py &`: the closed terminal's SIGHUP stopped the run with exit 129, the
    stop flag's handler replacing the ignore that nohup had set. Now the run trains on through it,
    and SIGTERM still stops it with a checkpoint."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    argv = [
        sys.executable,
        "train.py",
        *tiny_argv(tmp_path, write_corpus(tmp_path / "text"), *QUICK),
    ]
    run_dir, out_path, err_path = tmp_path / "runs" / "tiny", tmp_path / "out", tmp_path / "err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO_ROOT, stdout=out, stderr=err, env=env, preexec_fn=as_nohup_starts_it
        )
    try:
        # the bar: the stop flag is in place
        wait_until(lambda: "tiny:   0%" in err_path.read_text(), proc, err_path)
        proc.send_signal(signal.SIGHUP)
        # two evaluations later
        wait_until(lambda: any(row["step"] >= 20 for row in read_metrics(run_dir)), proc, err_path)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        proc.kill()
    said = out_path.read_text() + err_path.read_text()
    assert proc.returncode == 143 and "Traceback" not in said, said[-2000:]
    assert "SIGTERM: stopping after this step" in said and "SIGHUP" not in said
    assert torch.load(run_dir / "ckpt.pt", weights_only=True)["step"] >= 20


def test_an_experiment_started_under_nohup_starts_its_runs_ignoring_sighup(tmp_path, own_signals):
    """`nohup python sweep.py ...` (or compare.py): the experiment's stop flag took SIGHUP over from
    nohup, passed the terminal's on to its train.py, and started that with SIGHUP at its default.
    Now neither answers it: the child starts ignoring it, and a later SIGTERM still reaches the
    child through the experiment."""
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = (
        "import pathlib, signal, sys, time\n"
        "hup = 'ignored' if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else 'answered'\n"
        f"signal.signal(signal.SIGTERM, lambda s, f: (open({str(got)!r}, 'a').write(hup + ' "
        "TERM'), sys.exit(143)))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )

    def hang_up_then_terminate():
        while not ready.exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGHUP)  # the terminal closes
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts the experiment
    with Children() as children:
        threading.Thread(target=hang_up_then_terminate, daemon=True).start()
        code = children.run([sys.executable, "-c", child])
    assert code == 143 and children.signum == signal.SIGTERM
    assert got.read_text() == "ignored TERM"


class Pipe(io.StringIO):
    """stdout as `| head -4` leaves it: four lines pass, then the reader is gone."""

    def write(self, text: str) -> int:
        if self.getvalue().count("\n") >= 4:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_lost_stdout_stops_quietly_and_saves(tmp_path, monkeypatch, capsys):
    """`train.py | head -4`: a later line cannot be written; the run stops as under SIGTERM, with no
    traceback.
    """
    pipe = Pipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    code = train.main(
        tiny_argv(tmp_path, write_corpus(tmp_path / "t"), *QUICK, "--train.max_steps=30")
    )
    assert pipe.getvalue().splitlines()[-1].startswith("step     0 |")
    assert code == 141 and capsys.readouterr().err.count("Error") == 0
    checkpoint = torch.load(tmp_path / "runs" / "tiny" / "ckpt.pt", weights_only=True)
    # stopped at the step after the lost line, with a checkpoint
    assert 10 <= checkpoint["step"] < 30


class Teardown:
    """An object whose __del__ (as tqdm's bar has one) gets a Ctrl-C: raised there, an exception
    cannot go on.
    """

    def __del__(self):
        signal.raise_signal(signal.SIGINT)


def test_a_second_signal_in_a_del_ends_the_process_in_one_line(tmp_path):
    """In a forked child: a stop flag, a first Ctrl-C, then the second inside a __del__, where
    Python would print "Exception ignored in ..." with a traceback and carry on. The flag's
    sys.unraisablehook ends the process instead."""
    err = tmp_path / "err"
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT), 2)
            # as in a terminal, whatever the suite was started with
            signal.signal(signal.SIGINT, signal.default_int_handler)
            with StopFlag() as stop:
                stop.saved = "ckpt.pt holds step 7"
                signal.raise_signal(signal.SIGINT)
                Teardown()
        finally:
            os._exit(99)  # the hook did not end it: never go on running the suite in a copy of it
    _, status = os.waitpid(pid, 0)
    assert (os.waitstatus_to_exitcode(status), err.read_text()) == (
        130,
        "SIGINT again: aborted at once; ckpt.pt holds step 7\n",
    )


def test_after_the_abort_a_later_signal_is_ignored(own_signals):
    """A third Ctrl-C while the abort cleans up (compare.py waits for its runs, run_command shuts
    down) raises nothing.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pytest.raises(Aborted), StopFlag() as stop:
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGINT)
    # still the flag's: the process is ending
    assert stop.aborting and signal.getsignal(signal.SIGINT) == stop.handle


# The budget


def config(*argv: str, vocab: int = 65):
    """A preset's Config with its vocabulary size filled in, as the tokenizer fills it in a run."""
    cfg = load_config(list(argv))
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=vocab))


def test_a_huge_context_is_refused_in_one_line_with_its_cost(monkeypatch, tmp_path):
    # this 2-core CPU's order of magnitude
    monkeypatch.setattr(harness.training.budget, "measured_speed", lambda device: 20e9)
    cfg = config("--config", "tiny", "--model.block_size=100000")
    with pytest.raises(
        ConfigError,
        match=r"one training step at block_size 100000 would take about \d+ minutes on this cpu",
    ):
        check_affordable(cfg, torch.device("cpu"))
    monkeypatch.setattr(harness.training.budget, "device_memory_bytes", lambda device: 2.0**30)
    with pytest.raises(ConfigError, match=r"needs about \d+ GiB, and this cpu has 1 GiB"):
        check_affordable(cfg, torch.device("cpu"))
    assert check_affordable(config("--config", "tiny"), torch.device("cpu")) == 20e9


def test_measuring_the_speed_leaves_the_weights_to_the_seed(tmp_path, monkeypatch):
    """train.py measures the device's speed after seeding and before building the model: the
    measurement draws from its own generator, so the initial weights stay those of
    torch.manual_seed(seed), then GPT (as before it measured)."""
    made = {}

    def recording(model_cfg):
        model = GPT(model_cfg)
        made.update(cfg=model_cfg, state={k: v.clone() for k, v in model.state_dict().items()})
        return model

    monkeypatch.setattr(harness.training.starting_weights, "GPT", recording)
    train.main(
        tiny_argv(tmp_path, write_corpus(tmp_path / "t"), "--train.max_steps=1", "--train.seed=7")
    )
    torch.manual_seed(7)
    seeded = GPT(made["cfg"]).state_dict()
    assert made["state"].keys() == seeded.keys()
    assert all(torch.equal(made["state"][k], seeded[k]) for k in seeded), (
        "the speed measurement moved the seeded weights"
    )


@pytest.mark.parametrize(
    ("sizes", "memory", "message"),
    [
        (
            ["--model.n_layer=1" + "0" * 30],
            None,
            r"training a model of about 1\.2e\+34 parameters needs about 1\.8e\+26 GiB",
        ),
        (
            ["--model.n_layer=48", "--model.n_embd=1024"],
            2.0**32,
            "training a model of about 604M parameters needs about 9 GiB",
        ),
    ],
    # 12 L C^2 = 12 x 48 x 1024^2 = 604.0M (the embeddings add 0.1M); 16 bytes each (weights,
    # gradients, two moments) = 9.0 GiB
)
def test_a_model_too_big_is_refused_before_any_weight_is_made(
    tmp_path, monkeypatch, capsys, sizes, memory, message
):
    """--model.n_layer=10**30 used to build layer after layer for ever (the check came after the
    model was built); now the estimate from the config alone refuses it in one line, and no GPT is
    ever constructed."""

    def built(model_cfg):
        raise AssertionError(
            f"a GPT with {model_cfg.n_layer} layers was built before the budget check"
        )

    monkeypatch.setattr(harness.training.starting_weights, "GPT", built)
    if memory is not None:
        monkeypatch.setattr(harness.training.budget, "device_memory_bytes", lambda device: memory)
    proc = error_of(train.main, tiny_argv(tmp_path, write_corpus(tmp_path / "t"), *sizes), capsys)
    line = assert_one_line_error(proc, "lower --model.n_layer or --model.n_embd")
    assert re.search(message, line), line
    assert not (tmp_path / "runs" / "tiny").exists()  # refused before the run folder is claimed


# weights of inf; finite weights whose attention scores overflow
@pytest.mark.parametrize("std", ["1e308", "1e19"])
def test_an_init_that_overflows_is_blamed_on_the_setting_not_on_a_checkpoint(tmp_path, capsys, std):
    """A fresh run at --model.qk_init_std=1e308 failed at its first evaluation with "a diverged or
    damaged checkpoint; use another checkpoint, such as the run's best.pt": there is no checkpoint,
    only a setting that overflows float32."""
    proc = error_of(
        train.main,
        tiny_argv(tmp_path, write_corpus(tmp_path / "t"), f"--model.qk_init_std={std}"),
        capsys,
    )
    line = assert_one_line_error(
        proc,
        "fresh weights give logits that are not finite",
        "lower model.qk_init_std",
    )
    assert "checkpoint" not in line and f"({float(std):g} here, GPT-2's is 0.02)" in line


@pytest.mark.parametrize("preset", ["tiny", "char", "base", "gpt2-finetune"])
def test_the_presets_honest_loss_is_never_capped(preset):
    """Even with every position at its stratum's end, a no-mask preset's prefix passes stay within
    the budget.
    """
    cfg = config("--config", preset, "--no-mask", vocab=65 if preset in ("tiny", "char") else 50257)
    # GPT-2's sizes come with its weights (flags for them are refused)
    if preset == "gpt2-finetune":
        cfg = dataclasses.replace(
            cfg, model=dataclasses.replace(cfg.model, n_layer=12, n_head=12, n_embd=768)
        )
    T = cfg.model.block_size
    worst = [
        [round((i + 1) * T / 8) - 1 for i in range(8)] for _ in range(cfg.train.honest_batches)
    ]
    assert cap_prefix_work(worst, cfg) == worst


def test_the_prefix_work_is_capped_for_many_honest_batches(tmp_path):
    cfg = config(
        "--config", "tiny", "--no-mask", "--train.eval_batches=40", "--train.honest_batches=40"
    )
    gen = torch.Generator().manual_seed(0)
    plan = cap_prefix_work([honest_positions(32, 8, gen) for _ in range(40)], cfg)
    assert 1 <= len(plan) < 40
    assert sum(prefix_flops(cfg.model, 8, p) for p in plan) <= 8 * step_flops(cfg)


def test_a_causal_model_runs_no_prefix_passes(tmp_path):
    """The honest loss of a causal model is read off the forced pass; without the mask, 8 passes per
    honest batch. The order use passes over the same prefixes, shuffled, in both, and the cost
    estimate counts those passes too."""
    corpus = load_corpus(load_config(tiny_argv(tmp_path, write_corpus(tmp_path / "t"))).data)
    # tiny: 2 eval batches, so 2 honest batches of 8 positions
    for flags, passes in (([], 0), (["--no-mask"], 2 * 8)):
        cfg = config(
            *tiny_argv(tmp_path, tmp_path / "t" / "corpus.txt"),
            *flags,
            vocab=corpus.tokenizer.vocab_size,
        )
        eval_set = make_eval_set(corpus, corpus.tokenizer, cfg)
        assert eval_set.prefix_passes(cfg.model.causal) == passes
        # a pass per scored position
        one_set = sum(prefix_flops(cfg.model, 8, p) for _, _, p in eval_set.honest)
        assert evaluation_flops(cfg, eval_set) == pytest.approx(
            4 * forward_flops(cfg.model, 8, 32)
            + (2 if passes else 1) * one_set
            + forward_flops(cfg.model, 8, 32)
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
    assert (
        train.main(tiny_argv(tmp_path, corpus, "--train.max_steps=2", "--train.eval_interval=2"))
        == 0
    )
    metrics = tmp_path / "runs" / "tiny" / "metrics.jsonl"
    metrics.unlink()
    metrics.mkdir()
    capsys.readouterr()
    code = train.main(tiny_argv(tmp_path, corpus, "--train.max_steps=3", "--resume"))
    assert_one_line_error(
        subprocess.CompletedProcess([], code, *capsys.readouterr()), f"cannot append to {metrics}"
    )


def test_d7_a_first_checkpoint_that_cannot_be_written_says_none_was_saved(tmp_path, monkeypatch):
    def full(obj, f):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match="No space left on device; no checkpoint was saved"):
        save_checkpoint(tmp_path / "ckpt.pt", {"model": {}})
    (tmp_path / "ckpt.pt").write_bytes(b"earlier")
    with pytest.raises(CheckpointError, match="the previous checkpoint there is intact"):
        save_checkpoint(tmp_path / "ckpt.pt", {"model": {}})


def test_a_save_into_a_run_folder_that_is_gone_says_so(tmp_path):
    """The run folder removed or moved away mid-run: the save said "no checkpoint was saved", though
    one may have been.
    """
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(tmp_path / "gone" / "ckpt.pt", {"model": {}})
    assert str(e.value) == (
        f"could not save {tmp_path / 'gone' / 'ckpt.pt'}: No such file or directory; its folder "
        f"{tmp_path / 'gone'} is gone "
        "(removed or moved away), with what it held"
    )
    assert not (tmp_path / "gone").exists()


def test_d8_a_run_whose_corpus_moved_names_score_pys_flag(tmp_path):
    checkpoint = {
        "config": {"data": {"path": str(tmp_path / "gone.txt"), "tokenizer": "char"}},
        "source_sha256": "0",
    }
    with pytest.raises(
        DataError,
        match=r"the run's corpus .*gone.txt no longer exists; score its text with --file PATH",
    ):
        text_ids(CharTokenizer(list("ab")), None, checkpoint)


def test_d9_unknown_characters_are_all_counted_and_c_locale_arguments_read_as_utf8():
    with pytest.raises(
        TokenizerError,
        match=r"11 character\(s\) not in the training vocabulary: 'бвгдежзийк' and 1 more",
    ):
        CharTokenizer(list("ab")).encode("бвгдежзийкл")
    # how Python hands over `café` under a non-coerced C locale
    assert typed_text("caf\udcc3\udca9") == "café"
    assert typed_text("ロミオ") == "ロミオ"


@pytest.mark.parametrize("text", ["-3", "0"])
def test_d10_one_range_message_for_every_number_out_of_range(text):
    with pytest.raises(Exception, match=f"must be at least 1, got {text}"):
        positive_int(text)
