"""harness/training/probe.py: the story's signals every few steps, read back as TensorBoard reads
them; training's numbers the same with the probe and without it; a text run's layout and tags
without the induction heads; train.probes checked."""

import contextlib
import io
import json
import math
import re

import pytest
import torch
from conftest import assert_one_line_error, custom_scalars_layout, error_of, tiny_argv, write_corpus

import harness.training.evaluation
import train
from configs import load_config, presets
from harness.training.probe import PROBE_ROWS, probe
from harness.training.runlog import STORY
from harness.training.runtime import setup_runtime
from model import GPT, ModelConfig
from model.measurements import attention_summary, honest_loss

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

INDUCTION_TAGS = re.compile(r"^(induction/|loss/repeated$|loss/first$|icl/score$)")
# The char preset's optimizer (Muon) and tokenizer, at a small size and a higher rate: without the
# mask the model learns to read the next character within these 40 steps, so its leak gap opens
# across the probes. 40 steps // 20 probes:
# a probe every 2 steps, 21 in all; a training loss logged every 2 steps, 20 in all.
SMALL = [
    "--model.n_layer=1",
    "--model.n_head=2",
    "--model.n_embd=64",
    "--model.qk_init_std=0.125",
    "--model.block_size=32",
    "--train.batch_size=8",
    "--train.max_steps=40",
    "--train.warmup_steps=4",
    "--train.lr=5e-2",
    "--train.eval_interval=20",
    "--train.eval_batches=2",
    "--train.honest_batches=1",
    "--train.log_interval=2",
    "--train.optimizer=muon",
]


VARIANTS = {
    "char": [],
    "char-no-mask": ["--no-mask"],
    "char-no-probe": ["--train.probes=0", "--run-name=char-no-probe"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_cpu_thread) -> dict:
    """A comparison in small, as compare.py trains it: the preset as it is and without the mask,
    then as it is with no probe.
    """
    root, said = tmp_path_factory.mktemp("story"), io.StringIO()
    argv = [*tiny_argv(root, write_corpus(root / "text")), "--config", "char", *SMALL]
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(said):
        # the pictures are not under test
        mp.setattr(harness.training.evaluation, "HEATMAP_MAX_TOKENS", 4)
        folders = {}
        for name, extra in VARIANTS.items():
            cfg = load_config([*argv, *extra])
            train.train(cfg)
            # the preset's name and the sizes this test changes (Config.shape)
            folders[name] = cfg.run_dir
    return {**folders, "said": said.getvalue()}


def events(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return EventAccumulator(str(run_dir), size_guidance={"scalars": 0}).Reload()


def rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_every_lesson_preset_probes_at_least_20_times():
    points = {
        name: sum(
            map(
                load_config(["--config", name]).train.probes_at,
                range(load_config(["--config", name]).train.max_steps + 1),
            )
        )
        for name in presets()
    }
    # sized for time to quality (its config says so): the story at its evaluations only
    quick = points.pop("char-modern")
    assert quick == 0, (
        "char-modern probes only when it evaluates: a probe between would cost it nanoGPT's quarter"
    )
    assert all(n >= 20 for n in points.values()), points
    # every 20 steps and at 410; every 15 to 300
    assert points["char"] == 22 and points["base"] == 21


def test_every_chart_of_the_story_has_20_points_a_run(runs):
    for name in ("char", "char-no-mask"):
        charts, scalars = custom_scalars_layout(runs[name]), events(runs[name])
        assert list(charts) == [STORY]
        for patterns in charts[STORY]:
            for pattern in patterns:
                tags = [tag for tag in scalars.Tags()["scalars"] if re.search(pattern, tag)]
                assert tags or (name, pattern) == ("char-no-mask", "^Probe_loss/order_use$"), (
                    f"{name}: nothing logged for {pattern}"
                )
                assert all(len(scalars.Scalars(tag)) >= 20 for tag in tags), (
                    f"{name}: {pattern} has under 20 points"
                )


def test_the_two_sections_tensorboard_opens_first_are_the_probes_dense_curves(runs):
    """TIME SERIES and SCALARS sort their sections by name, uppercase first (as Python's sort does),
    and open the first two:
    those hold the probe's curves, whose points are many enough for the default smoothing, not the
    evaluations' few."""
    for name in ("char", "char-no-mask"):
        scalars = events(runs[name])
        tags = scalars.Tags()["scalars"] + scalars.Tags()["images"]
        first = sorted({tag.split("/")[0] for tag in tags})[:2]
        assert first == ["Probe_attn", "Probe_loss"], first
        opened = [tag for tag in tags if tag.split("/")[0] in first]
        assert all(len(scalars.Scalars(tag)) >= 20 for tag in opened), name
        # the evaluations' (every 20 steps of 40), in sections that come later, closed
        assert len(scalars.Scalars("loss/val")) == 3


def test_without_the_mask_the_leak_gap_opens_across_the_probes(runs):
    gap = {
        name: events(runs[name]).Scalars("Probe_loss/leak_gap") for name in ("char", "char-no-mask")
    }
    # every 2 steps, the last included
    assert [e.step for e in gap["char-no-mask"]] == list(range(0, 41, 2))
    # a causal model's honest loss is its forced one, exactly
    assert all(e.value == 0.0 for e in gap["char"])
    cheat = [e.value for e in gap["char-no-mask"]]
    assert abs(cheat[0]) < 0.05 and cheat[-1] > 2, cheat  # closed at the start, open at the end
    assert sum(cheat[-5:]) / 5 > sum(cheat[5:10]) / 5 + 2, cheat  # opening as training goes on


def test_a_text_run_logs_and_lays_out_no_induction_heads(runs):
    for name in ("char", "char-no-mask"):
        assert not [
            tag for tag in events(runs[name]).Tags()["scalars"] if INDUCTION_TAGS.search(tag)
        ]
        assert not [key for row in rows(runs[name]) for key in row if INDUCTION_TAGS.search(key)]
        assert list(custom_scalars_layout(runs[name])) == [STORY]  # no induction section
    # nor a line on their phase change at the end
    assert "induction heads" not in runs["said"] and "done in" in runs["said"]


def test_the_probe_leaves_every_loss_and_evaluation_as_it_was(runs):
    """The same run without the probe logs the same numbers, to the last digit: no random stream
    moved.
    """
    probed = [row for row in rows(runs["char"]) if not any(key.startswith("Probe_") for key in row)]
    assert len(probed) < len(rows(runs["char"])) and not [
        row for row in rows(runs["char-no-probe"]) if "Probe_attn/entropy" in row
    ]

    def drop_perf(row: dict) -> dict:  # timings differ
        return {key: value for key, value in row.items() if not key.startswith("perf/")}

    assert [drop_perf(row) for row in probed] == [
        drop_perf(row) for row in rows(runs["char-no-probe"])
    ]


def test_the_probe_is_the_evaluations_measurements_on_its_slice_and_draws_nothing_at_random():
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            n_layer=2, n_head=2, n_embd=16, block_size=12, vocab_size=11, causal=False, dropout=0.1
        )
    ).train()
    x, y, positions = (
        torch.randint(0, 11, (PROBE_ROWS, 12)),
        torch.randint(0, 11, (PROBE_ROWS, 12)),
        [3, 7, 11],
    )
    state = torch.get_rng_state()
    got = probe(
        model,
        x,
        y,
        positions,
        setup_runtime(load_config(["--config", "tiny", "--device=cpu"]).train),
    )
    # torch's global generator untouched, dropout back on
    assert torch.equal(torch.get_rng_state(), state) and model.training
    model.eval()
    honest, forced = honest_loss(model, x, y, positions)  # without the mask: a pass per prefix
    assert (
        got["Probe_loss/val_honest"],
        got["Probe_loss/val_forced"],
        got["Probe_loss/leak_gap"],
    ) == (honest, forced, honest - forced)
    summary = attention_summary(model, x)
    for tag in (
        "entropy",
        "saturated_frac",
        "future_mass",
        "score_std",
        "score_max",
        "score_max/L1",
        "q_norm",
        "k_norm",
    ):
        assert got[f"Probe_attn/{tag}"] == summary[f"attn/{tag}"], tag
    # without the mask it costs a pass per position again: the evaluations measure it
    assert "Probe_loss/order_use" not in got
    assert got["Probe_loss/uniform_guess"] == math.log(11)  # the loss charts' reference line
    assert not [tag for tag in got if "heads/" in tag or tag.startswith(("loss/", "attn/"))]


def test_a_bad_probe_count_is_refused_in_one_line(tmp_path, corpus_file, capsys):
    proc = error_of(train.main, tiny_argv(tmp_path, corpus_file, "--train.probes=-1"), capsys)
    assert_one_line_error(proc, "train.probes must be >= 0, got -1")
    assert_one_line_error(
        error_of(train.main, tiny_argv(tmp_path, corpus_file, "--train.probes=few"), capsys),
        "train.probes",
    )
    assert not (tmp_path / "runs").exists()
