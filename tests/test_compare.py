"""compare.py and harness/experiments/comparison.py, curves.py, stats.py: run names per seed, the
table with spreads, the difference lines, bad --seeds, and a 2-seed smoke run.
"""

import contextlib
import dataclasses
import itertools
import json
import os
import re
import runpy
import shutil
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
    EndedChild,
    assert_one_line_error,
    error_of,
    tiny_argv,
    train_in_process,
)

import compare
import sweep
import train
from configs import ConfigError, load_config, parse_args
from harness.arguments import variant_names
from harness.experiments import comparison, stats
from harness.experiments.children import Children
from harness.experiments.stats import Difference
from harness.pictures import curves
from harness.training.runlog import evaluations, read_metrics
from model.ablations import ABLATIONS, variants


def summary(**values: float) -> dict:
    """A run summary with every table column at 1.0, except the tags given (with '/' written as
    '__').
    """
    out = {tag: 1.0 for _, tag, _ in stats.COLUMNS}
    out.update({k.replace("__", "/"): v for k, v in values.items()})
    return out


def test_table_shows_mean_and_std_over_seeds_and_na_for_a_missing_tag():
    # written before loss/val_forced existed
    old = [{k: v for k, v in summary().items() if k != "loss/val_forced"}]
    rows = {
        "char": stats.aggregate([summary(loss__val=1.0), summary(loss__val=2.0)]),
        "char-old": stats.aggregate(old),
    }
    lines = stats.format_table(rows).splitlines()
    header = [c.strip() for c in lines[0].split("|")]
    assert header[header.index("val honest") + 1] == "val forced"
    char = [c.strip() for c in lines[2].split("|")]
    assert char[header.index("val")] == "1.500 ± 0.707"
    assert char[header.index("train")] == "1.000 ± 0.000"
    old_row = [c.strip() for c in lines[3].split("|")]
    assert old_row[header.index("val")] == "1.000"  # one seed: plain values
    assert old_row[header.index("val forced")] == "n/a"


def test_difference_lines_with_and_without_intervals():
    by_variant = {
        "char": [summary(loss__val=1.0), summary(loss__val=1.2), summary(loss__val=1.1)],
        "char-no-scale": [summary(loss__val=1.5), summary(loss__val=1.8), summary(loss__val=1.6)],
    }
    diffs = stats.differences(by_variant)
    assert diffs["char-no-scale"]["loss/val"].mean == pytest.approx(0.5333, abs=1e-4)
    line = stats.format_differences(diffs, "char", 3).splitlines()[1]
    # d = 0.5, 0.6, 0.5: sd 0.0577, half width 4.303 * 0.0577 / sqrt(3) = 0.143; 0.533 / 0.1 (sd of
    # 1.0, 1.2, 1.1) = 5.3
    assert "val +0.533 [+0.390, +0.677] 5.3 sd" in line
    assert "entropy +0.000 [+0.000, +0.000] 0.0 sd" in line
    single = stats.format_differences(
        {"char-no-mask": {"loss/val": Difference(-1.8, None, None, 1)}}, "char", 1
    )
    assert single.splitlines() == [
        "difference from char (one seed: intervals need --seeds >= 2)",
        "  char-no-mask: val -1.800",
    ]


def test_a_variant_removing_two_things_is_measured_from_base_and_from_each_variant_removing_one():
    cfg = load_config(["--config", "tiny"])
    plan = comparison.plan_runs(
        cfg, REPO_ROOT / "runs" / "compare-tiny", 3, ["no-mask", "no-mask+no-pos"]
    )
    assert list(plan) == ["tiny", "tiny-no-mask", "tiny-no-mask-no-pos"]
    both = plan["tiny-no-mask-no-pos"][2].model
    assert (both.causal, both.scaled, both.positions) == (False, True, "none")
    assert plan["tiny-no-mask-no-pos"][2].run_name == "tiny-no-mask-no-pos-s1339"
    # tiny-no-pos is not trained here
    assert comparison.measured_from(plan) == {"tiny-no-mask-no-pos": ["tiny-no-mask"]}
    every = comparison.plan_runs(
        cfg, REPO_ROOT / "runs" / "compare-tiny", 1, ["no-mask", "no-pos", "no-mask+no-pos"]
    )
    assert comparison.measured_from(every) == {
        "tiny-no-mask-no-pos": ["tiny-no-mask", "tiny-no-pos"]
    }
    by_variant = {
        "tiny": [summary(loss__val=2.0), summary(loss__val=2.2), summary(loss__val=2.1)],
        "tiny-no-mask": [summary(loss__val=0.1), summary(loss__val=0.2), summary(loss__val=0.1)],
        "tiny-no-mask-no-pos": [
            summary(loss__val=2.4),
            summary(loss__val=2.6),
            summary(loss__val=2.4),
        ],
    }
    diffs = stats.differences(by_variant, {"tiny-no-mask-no-pos": ["tiny-no-mask"]})
    assert list(diffs) == [
        "tiny-no-mask",
        "tiny-no-mask-no-pos",
        "tiny-no-mask-no-pos − tiny-no-mask",
    ]
    # from base: 0.4, 0.4, 0.3
    assert diffs["tiny-no-mask-no-pos"]["loss/val"].mean == pytest.approx(0.3667, abs=1e-4)
    # 2.3, 2.4, 2.3
    assert diffs["tiny-no-mask-no-pos − tiny-no-mask"]["loss/val"].mean == pytest.approx(
        2.3333, abs=1e-4
    )
    lines = stats.format_differences(diffs, "tiny", 3).splitlines()
    assert lines[0].startswith(
        "difference from tiny (or from the run after the −), paired by seed over 3 seeds"
    )
    assert lines[-1].startswith("  tiny-no-mask-no-pos − tiny-no-mask: val +2.333 [")


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("no-pos,no-mask", ["no-mask", "no-pos"]),
        # spelled in table order, pairs last
        ("no-pos+no-mask, no-pos,no-mask", ["no-mask", "no-pos", "no-mask+no-pos"]),
        ("no-mask+no-pos,no-pos+no-mask", ["no-mask+no-pos"]),  # the same variant once
        ("sink,gate,window,kv-heads", ["kv-heads", "window", "gate", "sink"]),
        ("sink+rope+kv-heads+qk-norm", ["qk-norm+rope+kv-heads+sink"]),
    ],
)
def test_variants_are_read_in_table_order(text, names):
    assert variant_names(text) == names


def test_the_picture_draws_every_variant_compare_can_train(tmp_path):
    """Base and every set of ablations (each alone, each pair, all three): a colour each, and the
    file drawn.
    """
    every = [
        "+".join(a.name for a in picked)
        for n in (1, 2, 3)
        for picked in itertools.combinations(ABLATIONS, n)
    ]
    names = ["tiny" + suffix for suffix in variants(load_config(["--config", "tiny"]).model, every)]
    assert len(names) == 2 ** len(ABLATIONS) == len(curves.COLORS)
    row = {
        "loss/val": 1.0,
        "loss/val_honest": 1.1,
        "loss/train_step": 1.0,
        "attn/entropy": 0.5,
        "attn/saturated_frac": 0.0,
    }
    row |= {
        "attn/future_mass": 0.0,
        "grad/qk_norm": 0.1,
        "loss/leak_gap": 0.1,
        "loss/order_use": 0.5,
    }
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, **row}) + "\n" for s in (0, 10))
        )
    curves.plot_runs(
        {name: [tmp_path / name] for name in names}, tmp_path / "compare.png", "every variant"
    )
    assert (tmp_path / "compare.png").stat().st_size > 10_000


def test_mean_band_uses_the_steps_every_run_logged():
    steps, mean, low, high = curves.mean_band(
        [([0, 10, 20], [4.0, 3.0, 2.0]), ([0, 10], [4.2, 2.0])]
    )
    assert steps == [0, 10]
    assert (
        mean.tolist() == pytest.approx([4.1, 2.5])
        and low.tolist() == [4.0, 2.0]
        and high.tolist() == [4.2, 3.0]
    )


def test_seeds_name_the_runs_only_when_there_are_several():
    cfg = load_config(["--config", "tiny"])
    one = comparison.plan_runs(cfg, REPO_ROOT / "runs" / "compare-tiny", 1)
    assert {v: [c.run_name for c in cs] for v, cs in one.items()} == {
        "tiny": ["tiny"],
        "tiny-no-mask": ["tiny-no-mask"],
        "tiny-no-scale": ["tiny-no-scale"],
        "tiny-no-pos": ["tiny-no-pos"],
    }
    picked = comparison.plan_runs(cfg, REPO_ROOT / "runs" / "compare-tiny", 1, ["no-pos"])
    assert (
        list(picked) == ["tiny", "tiny-no-pos"]
        and picked["tiny-no-pos"][0].model.positions == "none"
    )
    two = comparison.plan_runs(cfg, REPO_ROOT / "runs" / "compare-tiny", 2)
    assert [c.run_name for c in two["tiny-no-scale"]] == [
        "tiny-no-scale-s1337",
        "tiny-no-scale-s1338",
    ]
    assert [c.train.seed for c in two["tiny-no-mask"]] == [1337, 1338]
    assert [c.model.causal for c in two["tiny-no-mask"]] == [False, False]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--variants", "no-masks"], "unknown variant 'no-masks'"),
        (["--variants", ","], "takes variant names"),
        (["--variants", "no-mask+no-mask"], "each once"),
        (["--variants", "no-mask+"], "joined by +"),
        (["--variants", "no-mask+no-poss"], "unknown variant 'no-poss'"),
        (["--variants", "rope+no-pos"], "no-pos and rope both set model.positions"),
        (["--no-pos"], "--variants"),
        (["--qk-norm"], "(--qk-norm given); leave those flags out, and pick with --variants"),
        (["--softcap=30"], "(--softcap given)"),
        (["--model.positions=rope"], "(--rope given)"),
        (["--kv-heads=1", "--gate"], "(--kv-heads, --gate given)"),
        (["--model.window=8"], "(--window given)"),
    ],
)
def test_bad_variants_are_a_one_line_error(args, needle, capsys, monkeypatch):
    monkeypatch.setattr(
        "harness.experiments.comparison.run_comparison",
        lambda *a: pytest.fail("the comparison started"),
    )
    monkeypatch.setattr(sys, "argv", ["compare.py", "--config", "tiny", *args])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(REPO_ROOT / "compare.py"), run_name="__main__")
    out, err = capsys.readouterr()
    assert_one_line_error(
        subprocess.CompletedProcess(["compare.py"], stop.value.code, out, err), needle
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--seeds", "0"],
        ["--seeds=-1"],
        ["--seeds", "two"],
        ["--seeds"],
        ["--seeds", "100000000000000000000"],
        ["--seeds=101"],
    ],
)
def test_bad_seed_counts_are_a_one_line_error(args, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["compare.py", "--config", "tiny", *args])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(REPO_ROOT / "compare.py"), run_name="__main__")
    out, err = capsys.readouterr()
    assert_one_line_error(
        subprocess.CompletedProcess(["compare.py"], stop.value.code, out, err), "--seeds"
    )


def test_the_shipped_designs_are_variants_each_named_by_its_value():
    cfg = load_config(["--config", "tiny"])
    plan = comparison.plan_runs(
        cfg, REPO_ROOT / "runs" / "compare-tiny", 1, ["kv-heads", "window", "gate", "sink"]
    )
    assert list(plan) == ["tiny", "tiny-kv-heads1", "tiny-window32", "tiny-gate", "tiny-sink"]
    fields = [
        (c.model.kv_heads, c.model.window, c.model.gate, c.model.sink) for (c,) in plan.values()
    ]
    assert fields == [
        (0, 0, False, False),
        (1, 0, False, False),
        (0, 32, False, False),
        (0, 0, True, False),
        (0, 0, False, True),
    ]


def test_a_variant_the_model_cannot_take_is_one_line_and_leaves_the_earlier_comparison(
    tmp_path, capsys
):
    """--variants window trains a window of 32 positions: in a block of 16 that was a traceback,
    after the earlier comparison had been moved aside."""
    earlier = tmp_path / "runs" / "compare-tiny"
    earlier.mkdir(parents=True)
    argv = [
        "--config",
        "tiny",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--model.block_size=16",
        "--variants",
        "gate,window",
    ]
    line = assert_one_line_error(
        error_of(compare.main, argv, capsys),
        "variant window: model.window must be a number of positions",
    )
    assert "block_size (16)" in line and "got 32" in line
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["compare-tiny"]


def test_seeds_is_compares_own_flag_and_the_rest_goes_to_the_config_loader(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(
        compare,
        "run_comparison",
        lambda cfg, name, overrides, seeds, names: (
            calls.append((cfg, name, overrides, seeds, names)) or 1
        ),
    )
    assert (
        compare.main(
            [
                "--train.seed=7",
                "--seeds",
                "3",
                "--config",
                "tiny",
                "--train.lr=0.01",
                "--variants",
                "no-pos,no-mask",
            ]
        )
        == 1
    )
    cfg, name, overrides, seeds, names = calls[0]
    assert (name, overrides, seeds, names) == (
        "tiny",
        [("train.seed", "7"), ("train.lr", "0.01")],
        3,
        ["no-mask", "no-pos"],
    )
    assert (cfg.name, cfg.train.seed, cfg.train.lr) == ("tiny", 7, 0.01)
    # a flag is never shortened into compare's own: --seed is not --seeds, and the loader names the
    # key meant
    with pytest.raises(
        ConfigError, match=r"unknown argument '--seed' \(did you mean --train\.seed=VALUE\?\)"
    ):
        compare.main(["--config", "tiny", "--seed", "2"])
    assert len(calls) == 1


def test_compare_over_two_seeds(tmp_path, corpus_file, one_cpu_thread, capsys, monkeypatch):
    # each train.py it starts runs torch on one thread too (see conftest's one_cpu_thread)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    argv = tiny_argv(
        tmp_path,
        corpus_file,
        "--seeds",
        "2",
        "--variants=no-mask,no-scale",
        "--train.max_steps=2",
        "--train.warmup_steps=1",
        "--train.eval_interval=2",
    )
    results = compare.main(argv)
    names = [
        "tiny-s1337",
        "tiny-no-mask-s1337",
        "tiny-no-scale-s1337",
        "tiny-s1338",
        "tiny-no-mask-s1338",
        "tiny-no-scale-s1338",
    ]
    assert list(results) == names
    folder = tmp_path / "runs" / "compare-tiny"
    # .lock: held while it runs
    assert {p.name for p in folder.iterdir()} == {*names, "compare.png", "compare.json", ".lock"}
    for name in names:
        assert json.loads((folder / name / "config.json").read_text())["train"]["seed"] == int(
            name[-4:]
        )
    # the seed changed the run
    assert results["tiny-s1337"]["loss/val"] != results["tiny-s1338"]["loss/val"]
    assert (
        results["tiny-s1337"]["attn/future_mass"]
        == 0.0
        < results["tiny-no-mask-s1337"]["attn/future_mass"]
    )
    saved = json.loads((folder / "compare.json").read_text())
    assert saved["seeds"] == [1337, 1338] and list(saved["runs"]) == names
    val = saved["aggregate"]["tiny"]["loss/val"]
    assert val["n"] == 2 and val["mean"] == pytest.approx(
        (results["tiny-s1337"]["loss/val"] + results["tiny-s1338"]["loss/val"]) / 2
    )
    assert saved["differences"]["tiny-no-scale"]["loss/val"]["n"] == 2
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| tiny-no-mask |"))
    assert row.count(" ± ") == len(stats.COLUMNS) - ("loss/val_forced" not in results["tiny-s1337"])
    assert (
        "difference from tiny, paired by seed over 2 seeds" in out
        and "  tiny-no-scale: val " in out
    )


def test_the_picture_draws_the_probes_curves_with_the_final_evaluation_marked(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch
):
    """Evaluated twice, as a char run is, each run still gives the picture's evaluation panels a
    point every step (the probe's, 21 in 20 steps); the final evaluation's value, the table's
    figure, is marked at the last step."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    drawn = []
    monkeypatch.setattr(
        curves,
        "panel_data",
        lambda metrics, real=curves.panel_data: drawn.append(real(metrics)) or drawn[-1],
    )
    results = compare.main(
        tiny_argv(tmp_path, corpus_file, "--variants=no-mask", "--train.max_steps=20")
    )
    # two evaluations
    assert [row["step"] for row in evaluations(tmp_path / "runs" / "compare-tiny" / "tiny")] == [
        0,
        20,
    ]
    (panels,) = drawn
    for (title, tags), by_variant in zip(curves.PANELS, panels.values(), strict=True):
        for name, lines in by_variant.items():
            for (probe_tag, final_tag, _), line in zip(tags, lines, strict=True):
                # no probe of order use without the mask
                if name == "tiny-no-mask" and probe_tag == "Probe_loss/order_use":
                    assert line["tag"] == "loss/order_use" and line["steps"] == [0, 20]
                    continue
                assert line["tag"] == probe_tag, (title, name)
                # an evaluation's quantity: the probe's 21 points, the final evaluation marked
                if final_tag:
                    assert len(line["steps"]) == 21 and line["final"] == (
                        20,
                        pytest.approx(results[name][final_tag]),
                    ), (title, name)


def test_each_run_is_the_users_command_with_its_own_flags_last():
    argv = [
        "--config",
        "tiny",
        "--runs-dir",
        "/r",
        "--train.seed=5",
        "--run-name",
        "mine",
        "--train.lr=1e-3",
    ]
    cfg = load_config(argv)
    no_mask = comparison.plan_runs(cfg, Path("/r/compare-tiny"), 2)["tiny-no-mask"][1]
    assert comparison.train_argv(*parse_args(argv), no_mask) == [
        # the user's own flags, less those compare.py sets per run
        "--config",
        "tiny",
        "--train.lr=1e-3",
        "--model.causal=false",
        "--model.scaled=true",
        "--model.positions=learned",
        "--model.qk_norm=false",
        "--model.softcap=0.0",
        "--model.kv_heads=0",
        "--model.window=0",
        "--model.gate=false",
        "--model.sink=false",
        "--train.seed=6",
        "--train.runs_dir=/r/compare-tiny",
        "--train.run_name=tiny-no-mask-s6",
    ]
    assert (
        load_config(comparison.train_argv(*parse_args(argv), no_mask)).run_dir == no_mask.run_dir
    )  # train.py lands where compare.py reads
    resumed = dataclasses.replace(no_mask, train=dataclasses.replace(no_mask.train, resume=True))
    assert (
        comparison.train_argv(*parse_args([*argv, "--resume", "--no-mask"]), resumed)[-1]
        == "--train.resume=true"
    )


def test_resume_keeps_finished_runs_resumes_the_stopped_one_and_starts_the_rest(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch, capsys
):
    """A stopped comparison used to fail at its first finished run with --resume, and to retrain
    everything without it.
    """
    train_in_process(monkeypatch)
    argv = tiny_argv(
        tmp_path,
        corpus_file,
        "--train.max_steps=4",
        "--train.eval_interval=2",
        "--train.log_interval=1",
    )
    pick = ["--variants=no-mask,no-scale"]  # two of the ablations are enough to show it
    first = compare.main([*argv, *pick])
    folder = tmp_path / "runs" / "compare-tiny"
    base_metrics = (folder / "tiny" / "metrics.jsonl").read_bytes()
    shutil.rmtree(folder / "tiny-no-scale")  # never begun
    shutil.rmtree(folder / "tiny-no-mask")  # stopped at step 2
    stopped = load_config(
        comparison.train_argv(
            *parse_args(argv, "char"),
            comparison.plan_runs(load_config(argv), folder, 1)["tiny-no-mask"][0],
        )
    )
    train.train(dataclasses.replace(stopped, train=dataclasses.replace(stopped.train, max_steps=2)))
    capsys.readouterr()

    second = compare.main([*argv, *pick, "--resume"])
    out = capsys.readouterr().out
    assert "=== run 1 of 3: tiny, seed 1337: tiny finished already ===" in out
    assert f"resuming {folder / 'tiny-no-mask'} from step 2" in out
    assert (folder / "tiny" / "metrics.jsonl").read_bytes() == base_metrics  # untouched
    assert second["tiny"] == first["tiny"]  # wall time included: kept from compare.json
    assert [row["step"] for row in read_metrics(folder / "tiny-no-mask") if "loss/val" in row] == [
        0,
        2,
        4,
    ]
    assert second["tiny-no-scale"]["step"] == 4 and not list(folder.glob("*.old-*"))
    assert list(json.loads((folder / "compare.json").read_text())["runs"]) == [
        "tiny",
        "tiny-no-mask",
        "tiny-no-scale",
    ]

    with pytest.raises(
        ConfigError,
        match=r"compare-tiny/tiny finished with other settings \(train.lr 0.003 vs 0.002\)",
    ):
        compare.main([*argv, *pick, "--train.lr=2e-3", "--resume"])

    # afresh: the earlier comparison moves aside whole
    compare.main([*argv[:-3], *pick, "--train.max_steps=1"])
    (earlier,) = tmp_path.glob("runs/compare-tiny.old-*")
    assert json.loads((earlier / "compare.json").read_text())["runs"]["tiny"]["step"] == 4
    assert {p.name for p in folder.iterdir()} == {
        "tiny",
        "tiny-no-mask",
        "tiny-no-scale",
        "compare.json",
        "compare.png",
        ".lock",
    }


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c", "sigterm"],
)
def test_a_signal_stops_the_comparison_after_the_childs_checkpoint(
    signum, to_group, tmp_path, corpus_file
):
    """Ctrl-C killed train.py 0.25 s after it said it would save; SIGTERM ended compare.py and left
    train.py training alone.
    """
    argv = tiny_argv(
        tmp_path,
        corpus_file,
        "--train.max_steps=100000",
        "--train.log_interval=1",
        "--train.eval_batches=1",
    )
    proc = subprocess.Popen(
        [sys.executable, "compare.py", *argv],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    metrics = tmp_path / "runs" / "compare-tiny" / "tiny" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 240
        # training, past its first evaluation
        while not (metrics.is_file() and "loss/train_step" in metrics.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, (
                "compare.py never got to training"
            )
            time.sleep(0.2)
        if to_group:
            os.killpg(proc.pid, signum)  # a terminal's Ctrl-C reaches the whole group
        else:
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            # whatever is left of the session, an orphaned train.py included
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, err
    assert "comparison stopped; continue it with the same command plus --resume" in err
    checkpoint = torch.load(metrics.parent / "ckpt.pt", weights_only=True)
    # saved where the log stopped
    assert checkpoint["step"] == read_metrics(metrics.parent)[-1]["step"] > 0


def test_a_second_ctrl_c_says_which_finished_runs_are_kept(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch, capsys
):
    """A second Ctrl-C during the second run said "nothing was saved" while the first run's ckpt.pt
    was on disk.
    """
    calls = []

    # the first run trains (in this process), the second gets Ctrl-C twice
    def start(self, command, output=None):
        calls.append(command)
        if len(calls) == 1:
            train.train(load_config(command[2:]))
            self.running.append(EndedChild(0))
            return self.running[-1]
        os.kill(os.getpid(), signal.SIGINT)  # the comparison stops after this run...
        # ...and the second aborts at once, raised by the handler here
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the second Ctrl-C did not abort")

    monkeypatch.setattr(Children, "start", start)
    before = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    }
    try:
        proc = error_of(
            compare.main,
            [*tiny_argv(tmp_path, corpus_file, "--train.max_steps=2"), "--variants=no-mask"],
            capsys,
        )
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    folder = tmp_path / "runs" / "compare-tiny"
    assert (
        proc.returncode == 130
        and torch.load(folder / "tiny" / "ckpt.pt", weights_only=True)["step"] == 2
    )
    assert proc.stderr.strip().splitlines()[-1] == (
        f"SIGINT again: aborted at once; finished and kept in {folder}: tiny; continue with the "
        "same command plus --resume"
    )


def test_ctrl_c_passed_on_while_train_py_starts_waits_for_its_one_line(
    tmp_path, corpus_file, monkeypatch, capfd
):
    """compare.py passed a Ctrl-C on to a train.py whose interpreter was still starting: it stopped
    with "Fatal Python
    error: init_import_site" and a traceback (or a KeyboardInterrupt in its imports). Here the
    Ctrl-C comes the moment the child exists, as it would from a terminal while the process is being
    started."""
    real = subprocess.Popen

    def popen(*args, **kwargs):
        child = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return child

    monkeypatch.setattr(subprocess, "Popen", popen)
    before = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    }
    try:
        with Children() as children:
            code = children.run(
                [sys.executable, str(comparison.TRAIN_PY), *tiny_argv(tmp_path, corpus_file)]
            )
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    err = capfd.readouterr().err
    assert code == 130 and children.signum == signal.SIGINT, err
    assert err.strip().splitlines() == ["interrupted before training started; nothing was saved"]


def test_sighup_is_passed_on_to_the_child_once(tmp_path):
    """SIGHUP (the terminal closed) used to kill compare.py and orphan its train.py: now the child
    gets it, once.
    """
    ready, got = tmp_path / "ready", tmp_path / "got"
    child = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGHUP, lambda s, f: (open({str(got)!r}, 'a').write('HUP '), "
        "sys.exit(129)))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )

    def hang_up_when_ready():
        while not ready.exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGHUP)

    before = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    }
    try:
        with Children() as children:
            threading.Thread(target=hang_up_when_ready, daemon=True).start()
            code = children.run([sys.executable, "-c", child])
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    assert code == 129 and children.signum == signal.SIGHUP
    assert got.read_text() == "HUP "  # passed on once, not also reaching it from the terminal


def test_the_cures_compare_end_to_end_and_an_older_finished_run_is_kept(
    tmp_path, corpus_file, one_cpu_thread, monkeypatch, capsys
):
    """compare.py --variants qk-norm,no-scale+qk-norm: the cure without the scale is measured from
    base and from the cure.
    """
    train_in_process(monkeypatch)
    argv = tiny_argv(
        tmp_path,
        corpus_file,
        "--train.max_steps=2",
        "--train.eval_interval=2",
        "--variants=no-scale+qk-norm,qk-norm",
    )
    results = compare.main(argv)
    assert list(results) == ["tiny", "tiny-qk-norm", "tiny-no-scale-qk-norm"]
    folder = tmp_path / "runs" / "compare-tiny"
    saved = json.loads((folder / "compare.json").read_text())
    assert list(saved["differences"]) == [
        "tiny-qk-norm",
        "tiny-no-scale-qk-norm",
        "tiny-no-scale-qk-norm − tiny-qk-norm",
    ]
    recorded = json.loads((folder / "tiny-no-scale-qk-norm" / "config.json").read_text())["model"]
    assert (recorded["scaled"], recorded["qk_norm"], recorded["positions"]) == (
        False,
        True,
        "learned",
    )
    # the cure changed the run
    assert results["tiny-qk-norm"]["loss/val"] != results["tiny"]["loss/val"]
    # A run recorded before positions had kinds (true) and before the cures existed is still the
    # same run.
    config = json.loads((folder / "tiny" / "config.json").read_text())
    config["model"] = {
        k: v for k, v in config["model"].items() if k not in ("qk_norm", "softcap")
    } | {"positions": True}
    (folder / "tiny" / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    again = compare.main([*argv, "--resume"])
    out = capsys.readouterr().out
    assert all(f"{name} finished already" in out for name in again)
    assert again["tiny"] == results["tiny"]
    # A record whose value has the wrong type is refused as a checkpoint's or a command line's is:
    # "true" is text.
    (folder / "tiny" / "config.json").write_text(
        json.dumps(config | {"model": config["model"] | {"causal": "true"}})
    )
    with pytest.raises(
        ConfigError,
        match=re.escape(f'model.causal = "true" in {folder / "tiny" / "config.json"} is text'),
    ):
        compare.main([*argv, "--resume"])


def test_the_picture_draws_more_variants_than_it_has_colours(tmp_path):
    names = [
        "tiny" + suffix
        for suffix in variants(
            load_config(["--config", "tiny"]).model,
            [
                "no-mask",
                "no-scale",
                "no-pos",
                "qk-norm",
                "softcap",
                "rope",
                "no-scale+qk-norm",
                "rope+qk-norm",
                "no-mask+no-pos",
            ],
        )
    ]
    assert len(names) == 10 > len(curves.COLORS)
    row = {"loss/val": 1.0, "loss/train_step": 1.0}
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, **row}) + "\n" for s in (0, 10))
        )
    curves.plot_runs(
        {name: [tmp_path / name] for name in names},
        tmp_path / "compare.png",
        "every kind of variant",
    )
    assert (tmp_path / "compare.png").stat().st_size > 10_000


@pytest.mark.parametrize("script", ["compare", "sweep"])
def test_a_run_killed_from_outside_is_one_line_naming_it(
    script, tmp_path, corpus_file, monkeypatch, capsys
):
    """kill -9 of one child (as the kernel's out-of-memory killer does) ended compare.py and
    sweep.py with exit code 247
    and not a word: now one line names the run and says that --resume continues it, and the exit
    code is 1."""
    killed = tmp_path / "killed.py"
    killed.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    # each child a real process, ended by SIGKILL as it starts
    monkeypatch.setattr(comparison, "TRAIN_PY", killed)
    main, extra = (
        (compare.main, ["--variants=no-mask"])
        if script == "compare"
        else (sweep.main, ["--lrs", "3e-3", "--seeds", "1"])
    )
    before = {
        sig: signal.getsignal(sig)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)
    }
    try:
        proc = error_of(main, tiny_argv(tmp_path, corpus_file, *extra), capsys)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    run, what = ("tiny", "comparison") if script == "compare" else ("tiny-lr3e-3", "sweep")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: {run} was ended by SIGKILL from outside (as the kernel's out-of-memory killer "
        "does); every checkpoint it saved "
        f"is kept: the same command plus --resume continues the {what}, that run from its last "
        "checkpoint"
    ]
    saved = json.loads((tmp_path / "runs" / f"{script}-tiny" / f"{script}.json").read_text())
    assert saved["runs"] == {run: {"exit_code": -signal.SIGKILL}}  # the run after it never started
