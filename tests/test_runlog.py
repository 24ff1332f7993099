"""harness/training/runlog.py: what reaches TensorBoard's text tab and custom-scalars layout, and
reading metrics.jsonl back.
"""

import builtins
import errno
import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, tiny_argv, write_corpus

import train
from harness.training.runlog import (
    INDUCTION,
    STORY,
    UNSMOOTHED,
    RunLogger,
    parse_row,
    read_metrics,
    sample_markdown,
    story_layout,
)


def test_an_ordinary_sample_is_shown_verbatim():
    text = "ROMEO:\nBut soft, what light"
    # an indented block: TensorBoard shows it as is
    assert sample_markdown(text, 22) == "    ROMEO:\n    But soft, what light"


def test_a_sample_of_newlines_says_so_and_shows_them():
    shown = sample_markdown("\n" * 201, 201)
    note, _, body = shown.partition("\n\n")
    assert note.startswith("**201 tokens, all whitespace** (201 newlines, 0 spaces")
    # every newline visible, none lost
    assert body.replace("\n", "").replace(" ", "") == "\u21b5" * 201


def test_a_mostly_blank_sample_gives_its_share():
    text = "a" + " " * 7 + "\n" * 2  # 9 of 10 characters are whitespace
    note = sample_markdown(text, 10).split("\n\n")[0]
    assert "90% whitespace" in note and "2 newlines, 7 spaces" in note


def test_the_story_layout_picks_exactly_the_tags_a_run_logs():
    logged = [
        "loss/val",
        "loss/train",
        "loss/train_step",
        "loss/leak_gap",
        "attn/entropy",
        "heads/entropy/L0H0",
        "Probe_loss/val_honest",
        "Probe_loss/val_forced",
        "Probe_loss/leak_gap",
        "Probe_loss/order_use",
        "Probe_attn/entropy",
        "Probe_attn/max_weight",
        "Probe_attn/saturated_frac",
        "Probe_attn/future_mass",
        "Probe_attn/score_std",
        "Probe_attn/score_max",
        "Probe_attn/score_max/L0",
        "Probe_attn/q_norm",
        "Probe_attn/k_norm",
        "Probe_loss/uniform_guess",
        "induction/max",
        "loss/repeated",
    ]
    charts = story_layout(induction=False)[STORY]
    picked = {
        title: sorted(t for t in logged if any(re.search(rx, t) for rx in spec[1]))
        for title, spec in charts.items()
    }
    assert list(picked.values()) == [
        # every log_interval steps: the no-mask run's falls towards 0
        ["Probe_loss/uniform_guess", "loss/train_step"],
        # the probe's, every few steps: the evaluation's loss/... are in SCALARS
        ["Probe_loss/val_forced", "Probe_loss/val_honest"],
        ["Probe_loss/leak_gap"],
        # how much each run reads word order: the no-pos run beside the others
        ["Probe_loss/order_use"],
        ["Probe_attn/entropy"],
        ["Probe_attn/saturated_frac"],
        ["Probe_attn/future_mass"],
        ["Probe_attn/score_std"],
        ["Probe_attn/score_max"],  # not Probe_attn/score_max/L0: the patterns are anchored
        ["Probe_attn/k_norm", "Probe_attn/q_norm"],
    ]


def test_only_a_run_that_measures_induction_heads_lays_out_their_section():
    assert list(story_layout(induction=False)) == [STORY]
    assert list(story_layout(induction=True)) == [STORY, INDUCTION]
    tags = [tag for _, spec in story_layout(induction=True)[INDUCTION].items() for tag in spec[1]]
    assert tags == [
        "^induction/max$",
        "^induction/L\\d+H\\d+$",
        "^loss/repeated$",
        "^loss/first$",
        "^icl/score$",
    ]


def test_read_metrics_skips_a_line_torn_by_a_kill(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss/val": 4.2}\n{"step": 5, "loss/tr')
    assert read_metrics(tmp_path) == [{"step": 0, "loss/val": 4.2}]
    assert parse_row('{"step": 5, "loss/tr') is None


@pytest.mark.parametrize(
    "damaged",
    [
        b'{"step": 1e999}',  # OverflowError from int(inf)
        b'{"step": "x"}',
        b"[1, 2]",
        b"\xff\xfe\x00garbage",  # not UTF-8: UnicodeDecodeError from read_text
        b'{"step": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # RecursionError from json.loads
    ],
    ids=["step 1e999", "step x", "a list", "not UTF-8", "nested 100,000 deep"],
)
def test_any_damaged_line_is_skipped_alike(tmp_path, damaged):
    (tmp_path / "metrics.jsonl").write_bytes(
        b'{"step": 0, "loss/val": 4.2}\n' + damaged + b'\n{"step": 5, "loss/val": 3.9}\n'
    )
    assert read_metrics(tmp_path) == [{"step": 0, "loss/val": 4.2}, {"step": 5, "loss/val": 3.9}]
    assert parse_row(damaged) is None


def test_the_induction_heads_tell_how_to_read_few_points_unsmoothed():
    """TensorBoard smooths by 0.6 by default: the induction section (a point per evaluation) says to
    set it to 0, and gives the address that does. The story has a point every few steps (the probe)
    and reads as TensorBoard opens."""
    import zipfile

    import tensorboard

    assert "Smoothing to 0" in INDUCTION and UNSMOOTHED in INDUCTION and "Smoothing" not in STORY
    assert all(
        title.endswith("[read at Smoothing 0]") for title in story_layout(induction=True)[INDUCTION]
    )
    page, _, setting = UNSMOOTHED.partition("&")
    name, _, value = setting.partition("=")
    assert page == "#custom_scalars" and value == "0"
    # the name this TensorBoard reads from the address
    with zipfile.ZipFile(Path(tensorboard.__file__).parent / "webfiles.zip") as web:
        assert f'"{name}"' in web.read("index.js").decode("utf-8", "replace")


def test_resuming_a_run_without_its_metrics_starts_a_new_file(tmp_path):
    """A ckpt.pt copied alone into a new folder (a run moved to another machine) resumed with a
    FileNotFoundError.
    """
    logger = RunLogger(tmp_path, resume_step=40)
    logger.log(50, **{"loss/train_step": 2.5})
    logger.close()
    assert read_metrics(tmp_path) == [{"step": 50, "loss/train_step": 2.5}]


def test_the_step_line_gives_every_figure_four_decimals(tmp_path, capsys):
    logger = RunLogger(tmp_path)
    logger.log(
        500,
        console=True,
        **{"loss/train": 5.0, "loss/val": 1.67123, "attn/saturated_frac": 0.0, "lr": 9.6e-4},
    )
    logger.close()
    # not "val 5", "saturated_frac 0"
    assert (
        capsys.readouterr().out
        == "step   500 | train 5.0000 | val 1.6712 | saturated_frac 0.0000\n"
    )


def test_every_head_shares_one_heatmap_grid_and_each_picture_is_its_own(tmp_path):
    """One grid of one panel is laid out once and repainted per head: each head's picture must equal
    its own grid's.
    """
    import torch

    from harness.pictures.heatmaps import HeatmapGrid

    labels = ["T", "o", " ", "b", "e"]
    g = torch.Generator().manual_seed(0)
    # two layers, (1, H, T, T) each
    weights = [torch.randn(1, 2, 5, 5, generator=g).softmax(-1) for _ in range(2)]
    logger = RunLogger(tmp_path)
    pictures = {}
    logger.writer.add_image = lambda tag, picture, step, dataformats: pictures.__setitem__(
        tag, picture
    )
    logger.log_heatmaps(300, weights, labels, "causal")
    logger.close()
    for layer, head in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        own = HeatmapGrid(1, labels, ["attention weights"], title="L1H1 at step 1000000 (causal)")
        own = own.pixels(
            weights[layer][0, head : head + 1], f"L{layer}H{head} at step 300 (causal)"
        )
        assert (pictures[f"heatmaps/L{layer}H{head}"] == own).all(), (
            f"L{layer}H{head}'s picture differs from its own grid's"
        )
    assert len(pictures) == 4 and logger.heatmap_grid is not None


def test_a_heads_picture_keeps_its_token_labels_readable_at_tensorboards_card_width():
    """TensorBoard's IMAGES tab shows a picture 350 pixels wide: at the presets' 32 tokens a label
    stays 8 pixels tall there (a layer's grid of 4 heads, 1825 pixels wide with 6-point labels,
    showed them 1.6 pixels tall)."""
    import torch

    from harness.pictures.heatmaps import HeatmapGrid

    grid = HeatmapGrid(
        1,
        [chr(65 + t % 26) for t in range(32)],
        ["attention weights"],
        title="L2H3 at step 1000000 (causal, scaled)",
    )
    picture = grid.pixels(torch.full((1, 32, 32), 1 / 32), "L0H0 at step 410 (causal, scaled)")
    label_px = grid.fig.axes[0].get_xticklabels()[0].get_fontsize() * grid.fig.dpi / 72
    assert (
        8 <= label_px * 350 / picture.shape[1] and picture.shape[0] * picture.shape[1] < 600 * 600
    ), picture.shape


# A run folder that is lost mid-run: removed or moved away, made read-only. Each run saves at step 0
# or 20, then logs
# every step: TensorBoard's writer thread is the first to write into the folder again.
EVERY_STEP = ("--train.log_interval=1", "--train.eval_batches=1")


def test_a_run_folder_moved_away_mid_run_is_one_line_and_its_checkpoint_goes_with_it(tmp_path):
    """`mv runs/tiny elsewhere` while train.py ran: a traceback from TensorBoard's writer thread,
    then train.py's own.
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    steps = ("--train.max_steps=100000", "--train.eval_interval=100000", *EVERY_STEP)
    argv = [
        sys.executable,
        "train.py",
        *tiny_argv(tmp_path, write_corpus(tmp_path / "text"), *steps),
    ]
    run_dir, moved = tmp_path / "runs" / "tiny", tmp_path / "runs" / "moved"
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=err, env=env)
    try:
        # only against a hang; the cue is a training step logged after the first save
        deadline = time.monotonic() + 240
        while not (
            (run_dir / "ckpt.pt").is_file()
            and any("loss/train_step" in row for row in read_metrics(run_dir))
        ):
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "err"
            ).read_text()[-2000:]
            time.sleep(0.01)
        run_dir.rename(moved)
        proc.wait(timeout=120)
    finally:
        proc.kill()
    err = (tmp_path / "err").read_text()
    # the bar's lines aside
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("tiny:")]
    assert proc.returncode == 2 and "Traceback" not in err and "Exception in thread" not in err, (
        err[-3000:]
    )
    assert lines == [
        f"error: could not write into the run folder {run_dir}: No such file or directory; the "
        "folder is gone "
        "(removed or moved away), with what it held"
    ]
    assert not run_dir.exists()  # nothing made again in its place
    # the checkpoint went with the folder, whole
    assert torch.load(moved / "ckpt.pt", weights_only=True)["step"] == 0


def test_a_run_folder_turned_read_only_mid_run_is_one_line_naming_its_checkpoint(
    tmp_path, monkeypatch, capsys
):
    """A read-only folder: TensorBoard's writer thread's traceback, then `could not save
    b'.../events.out.tfevents...':
    Read-only file system; free some space`, a bytes repr and a full disk's advice. From step 25 on,
    every file opened for writing in the folder fails as on a file system remounted read-only;
    metrics.jsonl, open already, still takes lines."""
    run_dir, real_open, real_draw, calls = (
        tmp_path / "runs" / "tiny",
        builtins.open,
        train.draw_micro_batches,
        [0],
    )

    def read_only_open(file, mode="r", *args, **kwargs):
        if (
            calls[0] > 25
            and not isinstance(file, int)
            and set(mode) & set("wax+")
            and run_dir in Path(os.fsdecode(file)).parents
        ):
            # TensorBoard names its file in bytes
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), file)
        return real_open(file, mode, *args, **kwargs)

    def draw(*args, **kwargs):
        calls[0] += 1
        return real_draw(*args, **kwargs)

    failed_threads = []
    # what reaches it would be printed as a traceback
    monkeypatch.setattr(threading, "excepthook", failed_threads.append)
    monkeypatch.setattr(builtins, "open", read_only_open)
    monkeypatch.setattr(io, "open", read_only_open)
    monkeypatch.setattr(train, "draw_micro_batches", draw)
    code = train.main(
        tiny_argv(
            tmp_path,
            write_corpus(tmp_path / "text"),
            "--train.max_steps=60",
            "--train.eval_interval=20",
            *EVERY_STEP,
        )
    )
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("tiny:")]
    assert code == 2 and "Traceback" not in err and failed_threads == [], err[-3000:]
    assert lines == [
        f"error: could not write into the run folder {run_dir}: Read-only file system; "
        f"{run_dir / 'ckpt.pt'} holds step 20, "
        "the last one saved"
    ]
    assert torch.load(run_dir / "ckpt.pt", weights_only=True)["step"] == 20
    # every step logged before the folder turned read-only
    assert max(row["step"] for row in read_metrics(run_dir)) >= 25
