"""harness/training/runlog.py: what reaches TensorBoard's text tab and custom-scalars layout, and reading metrics.jsonl back."""

import re

import pytest

from harness.training.runlog import INDUCTION, STORY, UNSMOOTHED, RunLogger, parse_step, read_metrics, sample_markdown, story_layout


def test_an_ordinary_sample_is_shown_verbatim():
    text = "ROMEO:\nBut soft, what light"
    assert sample_markdown(text, 22) == "    ROMEO:\n    But soft, what light"  # an indented block: TensorBoard shows it as is


def test_a_sample_of_newlines_says_so_and_shows_them():
    shown = sample_markdown("\n" * 201, 201)
    note, _, body = shown.partition("\n\n")
    assert note.startswith("**201 tokens, all whitespace** (201 newlines, 0 spaces")
    assert body.replace("\n", "").replace(" ", "") == "\u21b5" * 201  # every newline visible, none lost


def test_a_mostly_blank_sample_gives_its_share():
    text = "a" + " " * 7 + "\n" * 2  # 9 of 10 characters are whitespace
    note = sample_markdown(text, 10).split("\n\n")[0]
    assert "90% whitespace" in note and "2 newlines, 7 spaces" in note


def test_the_story_layout_picks_exactly_the_tags_a_run_logs():
    logged = ["loss/val", "loss/train", "loss/train_step", "loss/leak_gap", "attn/entropy", "heads/entropy/L0H0", "probe/val_honest",
              "probe/val_forced", "probe/leak_gap", "probe/order_use", "probe/entropy", "probe/max_weight", "probe/saturated_frac",
              "probe/future_mass", "probe/score_std", "probe/score_max", "probe/score_max/L0", "probe/q_norm", "probe/k_norm",
              "probe/uniform_guess", "induction/max", "loss/repeated"]  # fmt: skip
    charts = story_layout(induction=False)[STORY]
    picked = {title: sorted(t for t in logged if any(re.search(rx, t) for rx in spec[1])) for title, spec in charts.items()}
    assert list(picked.values()) == [
        ["loss/train_step", "probe/uniform_guess"],  # every log_interval steps: the no-mask run's falls towards 0
        ["probe/val_forced", "probe/val_honest"],  # the probe's, every few steps: the evaluation's loss/... are in SCALARS
        ["probe/leak_gap"],
        ["probe/order_use"],  # how much each run reads word order: the no-pos run beside the others
        ["probe/entropy"],
        ["probe/saturated_frac"],
        ["probe/future_mass"],
        ["probe/score_std"],
        ["probe/score_max"],  # not probe/score_max/L0: the patterns are anchored
        ["probe/k_norm", "probe/q_norm"],
    ]


def test_only_a_run_that_measures_induction_heads_lays_out_their_section():
    assert list(story_layout(induction=False)) == [STORY]
    assert list(story_layout(induction=True)) == [STORY, INDUCTION]
    tags = [tag for _, spec in story_layout(induction=True)[INDUCTION].items() for tag in spec[1]]
    assert tags == ["^induction/max$", "^induction/L\\d+H\\d+$", "^loss/repeated$", "^loss/first$", "^icl/score$"]


def test_read_metrics_skips_a_line_torn_by_a_kill(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss/val": 4.2}\n{"step": 5, "loss/tr')
    assert read_metrics(tmp_path) == [{"step": 0, "loss/val": 4.2}]
    assert parse_step('{"step": 5, "loss/tr') is None


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
    (tmp_path / "metrics.jsonl").write_bytes(b'{"step": 0, "loss/val": 4.2}\n' + damaged + b'\n{"step": 5, "loss/val": 3.9}\n')
    assert read_metrics(tmp_path) == [{"step": 0, "loss/val": 4.2}, {"step": 5, "loss/val": 3.9}]
    assert parse_step(damaged) is None


def test_the_induction_heads_tell_how_to_read_few_points_unsmoothed():
    """TensorBoard smooths by 0.6 by default: the induction section (a point per evaluation) says to set it to 0, and gives
    the address that does. The story has a point every few steps (the probe) and reads as TensorBoard opens."""
    import zipfile
    from pathlib import Path

    import tensorboard

    assert "Smoothing to 0" in INDUCTION and UNSMOOTHED in INDUCTION and "Smoothing" not in STORY
    assert all(title.endswith("[read at Smoothing 0]") for title in story_layout(induction=True)[INDUCTION])
    page, _, setting = UNSMOOTHED.partition("&")
    name, _, value = setting.partition("=")
    assert page == "#custom_scalars" and value == "0"
    with zipfile.ZipFile(Path(tensorboard.__file__).parent / "webfiles.zip") as web:  # the name this TensorBoard reads from the address
        assert f'"{name}"' in web.read("index.js").decode("utf-8", "replace")


def test_resuming_a_run_without_its_metrics_starts_a_new_file(tmp_path):
    """A ckpt.pt copied alone into a new folder (a run moved to another machine) resumed with a FileNotFoundError."""
    logger = RunLogger(tmp_path, resume_step=40)
    logger.log(50, **{"loss/train_step": 2.5})
    logger.close()
    assert read_metrics(tmp_path) == [{"step": 50, "loss/train_step": 2.5}]


def test_every_layer_shares_one_heatmap_grid_and_each_picture_is_its_own(tmp_path):
    """One grid is laid out once and repainted per layer: each layer's picture must equal that layer's own grid's."""
    import torch

    from harness.pictures.heatmaps import HeatmapGrid

    labels = ["T", "o", " ", "b", "e"]
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(1, 2, 5, 5, generator=g).softmax(-1) for _ in range(2)]  # two layers, (1, H, T, T) each
    logger = RunLogger(tmp_path)
    pictures = {}
    logger.writer.add_image = lambda tag, picture, step, dataformats: pictures.__setitem__(tag, picture)
    logger.log_heatmaps(300, weights, labels, "causal")
    logger.close()
    for layer, w in enumerate(weights):
        own = HeatmapGrid(2, labels, title=f"layer {layer} at step 1000000 (causal)").pixels(w[0], f"layer {layer} at step 300 (causal)")
        assert (pictures[f"heatmaps/L{layer}"] == own).all(), f"layer {layer}'s picture differs from its own grid's"
    assert len(pictures) == 2 and logger.heatmap_grid is not None
