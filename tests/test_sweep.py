"""sweep.py and harness/experiments/sweep.py: rates spelled and refused, a tiny Muon sweep end to
end (its summary checked against the runs' own logs by hand), resume after a stop, runs two at a
time, the picture, and its record for the docs."""

import contextlib
import dataclasses
import io
import json
import math
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    REPO_ROOT,
    assert_one_line_error,
    error_of,
    tiny_argv,
    train_in_process,
    write_corpus,
)

import sweep
import train
from configs import ConfigError, load_config, parse_args, validate_config
from harness.arguments import learning_rates, rate_name
from harness.experiments.children import Children
from harness.experiments.comparison import train_argv
from harness.experiments.outcomes import (
    check_settings,
    diverged_run,
    killed_from_outside,
    recorded_settings,
)
from harness.experiments.stats import t_975
from harness.experiments.sweep import COLUMNS, format_sweep, plan_sweep
from harness.training.runlog import evaluations, read_metrics
from tools.figures import sweep_command, sweep_figures

SHORT = [
    "--train.optimizer=muon",
    "--train.max_steps=4",
    "--train.eval_interval=4",
    "--train.warmup_steps=1",
    "--train.probes=4",
]


@pytest.mark.parametrize(
    ("lr", "spelled"),
    [
        (0.12, "1.2e-1"),
        (0.004, "4e-3"),
        (0.036000000000000004, "3.6e-2"),
        (1.0, "1e0"),
        (3e-4, "3e-4"),
    ],
)
def test_a_rate_is_spelled_as_a_short_power_of_ten(lr, spelled):
    assert rate_name(lr) == spelled


def test_rates_are_read_smallest_first_and_default_to_the_presets_around_its_own(monkeypatch):
    assert learning_rates("1.2e-1, 4e-3,1.2e-2") == [0.004, 0.012, 0.12]
    calls = []
    monkeypatch.setattr(
        sweep,
        "run_sweep",
        lambda cfg, name, overrides, seeds, lrs, names, jobs: (
            calls.append((lrs, names, seeds, jobs)) or 1
        ),
    )
    assert sweep.main(["--config", "char"]) == 1
    # char's lr 1.2e-2 / 3, x 1, x 3, x 10
    assert calls[-1] == ([0.004, 0.012, 0.036, 0.12], ["qk-norm"], 3, 1)
    sweep.main(
        [
            "--config",
            "tiny",
            "--lrs=1e-2,3e-3",
            "--variants",
            "softcap,no-scale+qk-norm,no-scale",
            "--seeds=2",
            "--jobs=2",
        ]
    )
    assert calls[-1] == ([0.003, 0.01], ["no-scale", "softcap", "no-scale+qk-norm"], 2, 2)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--lrs", "0"], "argument --lrs: takes learning rates above 0"),
        (["--lrs=-1e-3"], "above 0"),
        (["--lrs", "1e-2,,3e-2"], "got '' in '1e-2,,3e-2'"),
        (["--lrs", "fast"], "comma-separated (4e-3,1.2e-2); got 'fast'"),
        (["--lrs", "inf"], "above 0"),
        (["--lrs", "nan"], "above 0"),
        (["--lrs", "1e-2,0.01"], "each once; got 1e-2 twice"),
        (
            ["--lrs", "1e-5,1e-2"],
            "--lrs 1e-5: train.min_lr must be between 0 and train.lr (1e-05), got 0.0003; lower "
            "train.min_lr",
        ),
        (["--train.lr=1e-2"], "sweep.py sets train.lr itself, from --lrs; leave --train.lr out"),
        (["--qk-norm"], "sweep.py trains the changed variants itself (--qk-norm given)"),
        (["--variants", "qk-norms"], "unknown variant 'qk-norms'"),
        (["--seeds", "0"], "--seeds"),
        (["--jobs", "0"], "argument --jobs: must be at least 1"),
        (["--jobs", "100000"], "--jobs 100000 is more than this machine's"),
    ],
)
def test_bad_sweep_arguments_are_a_one_line_error(
    args, needle, tmp_path, corpus_file, capsys, monkeypatch
):
    monkeypatch.setattr(sys, "argv", ["sweep.py", *tiny_argv(tmp_path, corpus_file, *args)])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(REPO_ROOT / "sweep.py"), run_name="__main__")
    out, err = capsys.readouterr()
    assert_one_line_error(
        subprocess.CompletedProcess(["sweep.py"], stop.value.code, out, err), needle
    )
    assert not (tmp_path / "runs").exists()  # refused before anything was written


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory, one_cpu_thread):
    """2 rates x (base, qk-norm) x 2 seeds of the tiny preset with Muon, each run 4 steps, trained
    in this process.
    """
    root = tmp_path_factory.mktemp("sweep")
    corpus = write_corpus(root / "text")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        train_in_process(monkeypatch)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            result = sweep.main(
                tiny_argv(
                    root,
                    corpus,
                    "--lrs",
                    "3e-3,3e-2",
                    "--variants",
                    "qk-norm",
                    "--seeds",
                    "2",
                    *SHORT,
                )
            )
    return root / "runs" / "sweep-tiny", result, out.getvalue()


def test_a_tiny_sweep_end_to_end(tiny_sweep):
    folder, result, out = tiny_sweep
    names = [
        f"tiny{v}-lr{lr}-s{s}"
        for s in (1337, 1338)
        for lr in ("3e-3", "3e-2")
        for v in ("", "-qk-norm")
    ]
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == sorted(names)
    assert (
        json.loads((folder / "tiny-qk-norm-lr3e-2-s1338" / "config.json").read_text())["train"][
            "lr"
        ]
        == 0.03
    )
    assert (
        json.loads((folder / "tiny-qk-norm-lr3e-2-s1338" / "config.json").read_text())["model"][
            "qk_norm"
        ]
        is True
    )
    saved = json.loads((folder / "sweep.json").read_text())
    assert (
        list(saved["runs"]) == names
        and saved["lrs"] == ["3e-3", "3e-2"]
        and saved["variants"] == {"tiny-qk-norm": "qk-norm"}
    )
    ends = {name: evaluations(folder / name)[-1] for name in names}
    starts = {name: evaluations(folder / name)[0] for name in names}
    # the mean and 95% interval of two seeds, by hand: half width t_{0.975,1} * sd / sqrt(2) =
    # 12.706 * |a - b| / 2
    a, b = (
        ends["tiny-qk-norm-lr3e-2-s1337"]["loss/val"],
        ends["tiny-qk-norm-lr3e-2-s1338"]["loss/val"],
    )
    cell = saved["aggregate"]["tiny-qk-norm"]["3e-2"]["loss/val"]
    assert cell["mean"] == pytest.approx((a + b) / 2) and cell["half_width"] == pytest.approx(
        12.706 * abs(a - b) / 2
    )
    assert t_975(1) == 12.706
    # qk-norm minus base at the same rate, paired by seed
    d = [
        ends[f"tiny-qk-norm-lr3e-2-s{s}"]["attn/entropy"]
        - ends[f"tiny-lr3e-2-s{s}"]["attn/entropy"]
        for s in (1337, 1338)
    ]
    assert saved["differences"]["tiny-qk-norm"]["3e-2"]["attn/entropy"]["mean"] == pytest.approx(
        sum(d) / 2
    )
    assert saved["differences"]["tiny-qk-norm"]["3e-2"]["attn/entropy"][
        "half_width"
    ] == pytest.approx(12.706 * abs(d[0] - d[1]) / 2)
    # how many times the largest score grew: from step 0, and from the preset's rate (tiny's 3e-3)
    grew = [
        ends[f"tiny-lr3e-2-s{s}"]["attn/score_max"] / starts[f"tiny-lr3e-2-s{s}"]["attn/score_max"]
        for s in (1337, 1338)
    ]
    assert saved["growth"]["tiny"]["3e-2"]["from_start"]["mean"] == pytest.approx(sum(grew) / 2)
    over = [
        ends[f"tiny-lr3e-2-s{s}"]["attn/score_max"] / ends[f"tiny-lr3e-3-s{s}"]["attn/score_max"]
        for s in (1337, 1338)
    ]
    assert saved["growth"]["tiny"]["3e-2"]["from_preset_lr"]["mean"] == pytest.approx(sum(over) / 2)
    assert saved["growth"]["tiny"]["3e-3"]["from_preset_lr"]["mean"] == 1.0
    # under QK-norm each query and key has length sqrt(head_size) = sqrt(32 / 2) = 4, so a scaled
    # score is below 4 / 4 * 4 = 4
    assert all(
        ends[f"tiny-qk-norm-lr{lr}-s{s}"]["attn/score_max"] < 4.0
        for lr in ("3e-3", "3e-2")
        for s in (1337, 1338)
    )
    # the probe's largest score over training at the highest rate, mean and range over the seeds
    line = saved["over_time"]["tiny-qk-norm"]
    per_seed = [
        [
            row["Probe_attn/score_max"]
            for row in read_metrics(folder / f"tiny-qk-norm-lr3e-2-s{s}")
            if "Probe_attn/score_max" in row
        ]
        for s in (1337, 1338)
    ]
    assert line["lr"] == "3e-2" and line["steps"] == [0, 1, 2, 3, 4]
    assert line["mean"] == pytest.approx([(x + y) / 2 for x, y in zip(*per_seed, strict=True)])
    assert line["high"] == [max(x, y) for x, y in zip(*per_seed, strict=True)]
    # at the preset's rate, the table compare.py --variants qk-norm would print of these runs
    assert saved["preset"]["aggregate"]["tiny"]["loss/val"]["mean"] == pytest.approx(
        (ends["tiny-lr3e-3-s1337"]["loss/val"] + ends["tiny-lr3e-3-s1338"]["loss/val"]) / 2
    )
    assert list(saved["preset"]["differences"]) == ["tiny-qk-norm"]
    assert (folder / "sweep.png").stat().st_size > 20_000
    assert result["folder"] == folder and result["aggregate"] == saved["aggregate"]
    assert "| 3e-2 | tiny-qk-norm | " in out and f"picture: {folder / 'sweep.png'}" in out


def test_the_sweep_is_recorded_for_the_docs_with_its_command(tiny_sweep):
    folder, _, _ = tiny_sweep
    value = sweep_figures(folder)
    assert (
        "runs" not in value
        and value["aggregate"] == json.loads((folder / "sweep.json").read_text())["aggregate"]
    )
    assert (
        sweep_command("tiny", value)
        == "python sweep.py --config tiny --seeds 2 --lrs 3e-3,3e-2 --variants qk-norm"
    )


def test_the_picture_draws_a_summary_without_the_probe_and_a_single_seed(tmp_path):
    from harness.pictures.curves import plot_sweep

    cell = {"mean": 2.0, "std": None, "n": 1, "half_width": None}
    summary = {
        "lrs": ["1e-2", "1e-1"],
        "over_time": {},
        "aggregate": {"char": {"1e-2": {"loss/val": cell}, "1e-1": {"loss/val": cell}}},
    }
    plot_sweep(summary, tmp_path / "sweep.png", "older runs: no largest score logged")
    assert (tmp_path / "sweep.png").stat().st_size > 10_000


def test_resume_keeps_finished_runs_resumes_the_stopped_one_and_ends_where_an_unbroken_sweep_does(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch, capsys
):
    train_in_process(monkeypatch)
    preset = tiny_argv(tmp_path, corpus_file, *SHORT, "--train.eval_interval=2")
    argv = [*preset, "--lrs", "3e-3,3e-2", "--variants", "softcap", "--seeds", "1"]
    first = sweep.main(argv)
    folder = tmp_path / "runs" / "sweep-tiny"
    kept = (folder / "tiny-lr3e-3" / "metrics.jsonl").read_bytes()
    shutil.rmtree(folder / "tiny-softcap50-lr3e-2")  # never begun
    shutil.rmtree(folder / "tiny-lr3e-2")  # stopped at step 2, with its checkpoint
    planned = plan_sweep(load_config(preset), folder, 1, [3e-3, 3e-2], ["softcap"])["tiny"]["3e-2"][
        0
    ]
    # what train.py builds of the sweep's command
    stopped = load_config(train_argv(*parse_args(preset), planned, ("train.lr",)))
    train.train(dataclasses.replace(stopped, train=dataclasses.replace(stopped.train, max_steps=2)))
    capsys.readouterr()
    second = sweep.main([*argv, "--resume"])
    out = capsys.readouterr().out
    assert "=== run 1 of 4: tiny, lr 3e-3, seed 1337: tiny-lr3e-3 finished already ===" in out
    assert f"resuming {folder / 'tiny-lr3e-2'} from step 2" in out
    assert (folder / "tiny-lr3e-3" / "metrics.jsonl").read_bytes() == kept
    assert [row["step"] for row in evaluations(folder / "tiny-lr3e-2")] == [0, 2, 4]
    # the stopped run, resumed, ends where the unbroken one did
    assert second["aggregate"] == first["aggregate"]


def test_two_runs_at_a_time_each_get_the_ctrl_c_once(tmp_path):
    """--jobs 2: both children run at once, and a Ctrl-C reaches each of them once, through this
    process.
    """
    ready = [tmp_path / f"ready{i}" for i in range(2)]
    child = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda s, f: (open(sys.argv[2], 'a').write('INT '), "
        "sys.exit(130)))\n"
        # started with it blocked, as train.py unblocks it
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
        "pathlib.Path(sys.argv[1]).touch()\n"
        "time.sleep(60)\n"
    )
    before = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    }
    try:
        with Children() as children:
            started = [
                children.start(
                    [sys.executable, "-c", child, str(ready[i]), str(tmp_path / f"got{i}")]
                )
                for i in range(2)
            ]
            deadline = time.monotonic() + 60
            while not all(path.exists() for path in ready):
                assert time.monotonic() < deadline, "the children never started"
                time.sleep(0.01)
            assert [c.poll() for c in started] == [None, None]  # both at once
            os.kill(os.getpid(), signal.SIGINT)
            ended = dict([children.wait(), children.wait()])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert (
        ended == {started[0]: 130, started[1]: 130}
        and children.signum == signal.SIGINT
        and not children.running
    )
    assert [(tmp_path / f"got{i}").read_text() for i in range(2)] == ["INT ", "INT "]


def test_a_sweep_two_runs_at_a_time_as_a_user_runs_it(tmp_path, corpus_file):
    """python sweep.py --jobs 2: two train.py processes, each writing its output to <run>.log."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = tiny_argv(
        tmp_path,
        corpus_file,
        "--lrs",
        "3e-3",
        "--variants",
        "qk-norm",
        "--seeds",
        "1",
        "--jobs",
        "2",
        *SHORT,
    )
    proc = subprocess.run(
        [sys.executable, "sweep.py", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "runs" / "sweep-tiny"
    for name in ("tiny-lr3e-3", "tiny-qk-norm-lr3e-3"):
        assert f"{name} ended (exit code 0); its output is in {folder / name}.log" in proc.stdout
        assert "val" in (folder / f"{name}.log").read_text()
        assert evaluations(folder / name)[-1]["step"] == 4
    assert math.isfinite(
        json.loads((folder / "sweep.json").read_text())["aggregate"]["tiny-qk-norm"]["3e-3"][
            "loss/val"
        ]["mean"]
    )


@pytest.fixture(scope="module")
def diverged_sweep(tmp_path_factory, one_cpu_thread):
    """tiny at 3e-3 and at 1e3 (with Muon, tiny's non-finite check stops it at step 3), beside
    qk-norm (which trains on at 1e3), one seed each, trained in this process: (the sweep's folder,
    its argv, what sweep.main returned, its output)."""
    root = tmp_path_factory.mktemp("diverged")
    argv = tiny_argv(
        root,
        write_corpus(root / "text"),
        *SHORT,
        "--lrs",
        "3e-3,1e3",
        "--variants",
        "qk-norm",
        "--seeds",
        "1",
    )
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        train_in_process(monkeypatch)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            result = sweep.main(argv)
    return root / "runs" / "sweep-tiny", argv, result, out.getvalue()


def test_a_diverged_rate_is_recorded_shown_beside_the_others_and_not_retried(
    diverged_sweep, monkeypatch, capsys
):
    """A rate that hit the non-finite check ended the sweep with exit 1, no table and no picture,
    and --resume retried it forever; now the run is recorded as diverged, with its step and last
    training loss, and the sweep finishes."""
    folder, argv, result, out = diverged_sweep
    assert isinstance(result, dict), f"the sweep ended with exit code {result}"
    # logged at step 0 only
    gone = {
        "step": 3,
        "last_loss": evaluations(folder / "tiny-lr1e3")[0]["loss/train"],
        "last_loss_step": 0,
    }
    assert json.loads((folder / "tiny-lr1e3" / "diverged.json").read_text()) == {
        "step": 3,
        "non_finite": "gradient",
    }
    saved = json.loads((folder / "sweep.json").read_text())
    assert saved["runs"]["tiny-lr1e3"] == {"exit_code": 1, "diverged": gone}
    assert (
        saved["diverged"] == {"tiny": {"1e3": [{**gone, "seed": 1337}]}}
        and saved["aggregate"]["tiny"]["1e3"] == {}
    )
    # the variant that trained on at that rate is there
    assert saved["aggregate"]["tiny-qk-norm"]["1e3"]["loss/val"]["n"] == 1
    assert saved["differences"]["tiny-qk-norm"]["1e3"] == {}  # nothing to pair with
    assert "tiny-lr1e3 diverged at step 3; the sweep goes on" in out
    # one seed
    assert (
        "\nat the end of training, one seed: no interval:\n" in out
        and "1 seeds" not in out
        and " ± " not in out
    )
    rows = {
        tuple(cell.strip() for cell in line.strip("|").split("|")[:2]): line
        for line in out.splitlines()
        if line.startswith("| ")
    }
    assert rows["lr", "run"].endswith("| entropy | diverged |")
    assert (
        rows["1e3", "tiny"]
        == f"| 1e3 | tiny | n/a | n/a | n/a | at step 3 (last loss {gone['last_loss']:.3f}, logged "
        "at step 0) |"
    )
    assert rows["1e3", "tiny-qk-norm"].endswith(" |  |") and rows["3e-3", "tiny"].endswith(" |  |")
    assert (folder / "sweep.png").stat().st_size > 20_000
    from harness.pictures.curves import sweep_figure

    figure = sweep_figure(saved, "a diverged rate")
    try:
        marks = [
            [line.get_xdata()[0] for line in ax.lines if line.get_marker() == "x"]
            for ax in figure.axes[:3]
        ]
        notes = [[text.get_text() for text in ax.texts] for ax in figure.axes[:3]]
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)
    # an x at 1e3 on each panel
    assert [len(m) for m in marks] == [1, 1, 1] and all(950 < m[0] < 1050 for m in marks)
    assert notes == [["diverged at step 3"]] * 3
    train_in_process(monkeypatch)
    monkeypatch.setattr(
        train, "main", lambda argv: pytest.fail(f"--resume trained a run again: {argv}")
    )
    again = sweep.main([*argv, "--resume"])
    out = capsys.readouterr().out
    assert (
        "=== run 3 of 4: tiny, lr 1e3, seed 1337: tiny-lr1e3 diverged at step 3 already ===" in out
    )
    assert again["diverged"] == saved["diverged"] and again["aggregate"] == saved["aggregate"]


def test_format_sweep_says_how_many_seeds_diverged_and_where():
    cell = {"mean": 2.0, "std": 0.1, "n": 2, "half_width": 0.9}
    summary = {
        "lrs": ["1e-1"],
        "seeds": [1, 2, 3],
        "aggregate": {"char": {"1e-1": {"loss/val": cell}}},
        "diverged": {
            "char": {"1e-1": [{"step": 40, "last_loss": 2.5, "last_loss_step": 30, "seed": 3}]}
        },
    }
    assert (
        format_sweep(summary, COLUMNS[:1]).splitlines()[2]
        == "| 1e-1 | char | 2.000 ± 0.900 | 1 of 3 seeds: s3 at step 40 (last loss 2.500, logged "
        "at step 30) |"
    )
    assert (
        format_sweep({**summary, "diverged": {}}, COLUMNS[:1]).splitlines()[2]
        == "| 1e-1 | char | 2.000 ± 0.900 |"
    )


def test_ctrl_c_while_the_sweep_is_drawn_says_every_run_is_saved_and_leaves_the_picture_whole(
    diverged_sweep, monkeypatch, capsys
):
    """Ctrl-C while the sweep summarised or drew said "interrupted; nothing was saved", and could
    leave sweep.png empty.
    """
    import matplotlib.figure

    folder, argv, _, _ = diverged_sweep
    picture = (folder / "sweep.png").read_bytes()
    real = matplotlib.figure.Figure.savefig

    # the Ctrl-C comes while the file is written: after it was opened
    def savefig(self, fname, *args, **kwargs):
        with (
            open(fname, "wb")
            if isinstance(fname, str | os.PathLike)
            else contextlib.nullcontext(fname) as f
        ):
            real(self, io.BytesIO(), *args, **kwargs)
            f.write(b"\x89PNG half a picture")
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        raise AssertionError("the Ctrl-C never came")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    train_in_process(monkeypatch)
    before = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    }
    try:
        # as a process starts (an earlier command's end ignores it)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        proc = error_of(sweep.main, [*argv, "--resume"], capsys)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert proc.returncode == 130
    assert proc.stderr.strip().splitlines() == [
        f"interrupted while summarising the sweep; every run is saved in {folder}, and the same "
        "command plus --resume summarises it"
    ]
    assert (folder / "sweep.png").read_bytes() == picture  # the earlier picture, whole
    assert not list(folder.glob("sweep.png.tmp*"))


def test_a_moved_copied_or_relatively_named_sweep_resumes_and_a_finished_run_without_log_is_kept(
    diverged_sweep, tmp_path, monkeypatch, capsys
):
    """A finished sweep copied or renamed, or named by a relative path from elsewhere, was refused
    ("finished with other settings (train.runs_dir ...)"); and a finished run whose metrics.jsonl
    was deleted was trained again, which train.py refused, ending the sweep."""
    folder, argv, result, _ = diverged_sweep
    shutil.copytree(folder.parent, tmp_path / "copy")
    shutil.move(tmp_path / "copy", tmp_path / "moved")
    (tmp_path / "moved" / "sweep-tiny" / "tiny-qk-norm-lr3e-3" / "metrics.jsonl").unlink()
    monkeypatch.chdir(tmp_path)  # and both folders named from here, relatively
    where = {
        "--runs-dir": "moved",
        "--data-file": os.path.relpath(argv[argv.index("--data-file") + 1]),
    }
    moved = [where.get(argv[i - 1], arg) if i else arg for i, arg in enumerate(argv)]
    train_in_process(monkeypatch)
    monkeypatch.setattr(
        train, "main", lambda argv: pytest.fail(f"--resume trained a run again: {argv}")
    )
    again = sweep.main([*moved, "--resume"])
    out = capsys.readouterr().out
    assert (
        out.count(" finished already ===") == 3
        and out.count(" diverged at step 3 already ===") == 1
    )
    assert again["aggregate"] == result["aggregate"] and again["folder"] == Path("moved/sweep-tiny")
    # nor its numbers in sweep.json: its checkpoint says what it can
    (tmp_path / "moved" / "sweep-tiny" / "sweep.json").unlink()
    again = sweep.main([*moved, "--resume"])
    kept = torch.load(folder / "tiny-qk-norm-lr3e-3" / "ckpt.pt", weights_only=True)
    saved = json.loads((tmp_path / "moved" / "sweep-tiny" / "sweep.json").read_text())
    assert saved["runs"]["tiny-qk-norm-lr3e-3"] == {
        "step": 4,
        "loss/val": kept["val_loss"],
        "exit_code": 0,
    }
    assert again["aggregate"]["tiny-qk-norm"]["3e-3"] == {
        "loss/val": {"mean": kept["val_loss"], "std": None, "n": 1, "half_width": None}
    }
    assert (
        "| 3e-3 | tiny-qk-norm | " + f"{kept['val_loss']:.3f} | n/a | n/a |  |"
        in capsys.readouterr().out
    )


def test_what_a_run_came_to_is_read_from_what_its_folder_still_holds(diverged_sweep, tmp_path):
    """A diverged record older than the checkpoint (the run resumed by hand past its failure) is not
    a divergence; a finished run whose config.json is gone is checked against its checkpoint's
    settings; a crash is not called a kill."""
    folder = tmp_path / "sweep-tiny"
    shutil.copytree(diverged_sweep[0], folder)
    diverged, finished = folder / "tiny-lr1e3", folder / "tiny-qk-norm-lr3e-3"
    # its checkpoint, from step 0's evaluation, is older than the record
    assert diverged_run(diverged)["diverged"]["step"] == 3
    (diverged / "diverged.json").write_text(json.dumps({"step": -1, "non_finite": "loss"}))
    assert diverged_run(diverged) is None
    (finished / "config.json").unlink()
    recorded, where = recorded_settings(finished)
    assert (recorded, where) == (
        torch.load(finished / "ckpt.pt", weights_only=True)["config"],
        finished / "ckpt.pt",
    )
    same = validate_config(recorded, where, recorded=True)
    check_settings(same, recorded, where)  # the same settings: kept
    with pytest.raises(
        ConfigError, match=r"finished with other settings \(train.max_steps 4 vs 99\)"
    ):
        check_settings(
            dataclasses.replace(same, train=dataclasses.replace(same.train, max_steps=99)),
            recorded,
            where,
        )
    assert "out-of-memory killer" in killed_from_outside(-signal.SIGKILL, "tiny", "sweep")
    assert "(the process crashed)" in killed_from_outside(-signal.SIGSEGV, "tiny", "sweep")
    assert killed_from_outside(1, "tiny", "sweep") is None
