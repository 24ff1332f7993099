"""Attention statistics on hand-made weights, the honest loss, the leak gap, and the tools that show
them.
"""

import dataclasses
import json
import math
import re

import numpy as np
import pytest
import torch
from conftest import assert_close, assert_one_line_error, error_of, tiny_argv

import harness.pictures.heatmaps
import harness.training.runtime
import inspect_attention
import model.attention as model_attention
import train
from configs import load_config
from data.tokenizer import CharTokenizer
from model import GPT, ModelConfig
from model.gpt import lm_loss
from model.gradients import qk_grad_norm, score_gradients
from model.induction import induction_score, induction_summary, previous_occurrence
from model.measurements import (
    attention_summary,
    bits_per_byte,
    future_mass,
    honest_loss,
    honest_positions,
    leak,
    normalized_entropy,
    order_use,
    prefix_logits,
    qk_norms,
    row_max,
    saturated_fraction,
)
from model.roles import (
    FIRST_TOKEN_THRESHOLD,
    MIN_ROLE_ROWS,
    NEXT_TOKEN_THRESHOLD,
    PREVIOUS_TOKEN_THRESHOLD,
    first_token_weight,
    head_roles,
    next_token_weight,
    previous_token_weight,
    sink_weight,
    uniform_first_token_weight,
)


def uniform_causal(T: int) -> torch.Tensor:
    """Row t spreads its weight evenly over positions 0..t."""
    mask = torch.ones(T, T).tril()
    return mask / mask.sum(-1, keepdim=True)


def test_uniform_rows_have_normalised_entropy_one():
    T = 6
    # row 0 left out
    assert_close(normalized_entropy(uniform_causal(T), causal=True), torch.ones(T - 1), atol=1e-6)
    assert_close(
        normalized_entropy(torch.full((2, T, T), 1 / T), causal=False), torch.ones(2, T), atol=1e-6
    )


def test_one_hot_rows_have_entropy_zero_and_are_saturated():
    T = 5
    one_hot = torch.eye(T)  # each query looks only at itself: a valid causal matrix
    assert_close(normalized_entropy(one_hot, causal=True), torch.zeros(T - 1), atol=1e-6)
    assert saturated_fraction(one_hot, causal=True).item() == 1.0
    assert_close(row_max(one_hot, causal=True), torch.ones(T - 1), atol=0)
    looking_back = torch.zeros(T, T)
    looking_back[:, 0] = 1.0  # every query attends to the first token only
    assert saturated_fraction(looking_back, causal=False).item() == 1.0
    assert saturated_fraction(uniform_causal(T), causal=True).item() == 0.0


def test_entropy_of_a_two_way_split_by_hand():
    weights = torch.tensor([[1.0, 0.0], [0.25, 0.75]])  # causal: only row 1 counts
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) / math.log(2)  # 0.8113
    assert_close(normalized_entropy(weights, causal=True), torch.tensor([expected]), atol=1e-6)


def test_future_mass_is_zero_for_causal_and_measured_without_mask():
    assert future_mass(uniform_causal(7)).item() == 0.0
    T = 4
    uniform = torch.full((T, T), 1 / T)  # row t puts (T - 1 - t) / T on later positions
    expected = sum((T - 1 - t) / T for t in range(T)) / T  # 0.375
    assert future_mass(uniform).item() == pytest.approx(expected, abs=1e-7)


def test_attention_summary_of_a_causal_and_an_unmasked_model():
    torch.manual_seed(0)
    idx = torch.randint(0, 65, (2, 16))
    for causal in (True, False):
        model = GPT(
            ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, causal=causal)
        ).eval()
        stats = attention_summary(model, idx)
        assert (stats["attn/future_mass"] == 0.0) == causal
        assert 0.9 < stats["attn/entropy"] <= 1.0  # small random init: close to uniform
        assert {
            f"heads/entropy/L{layer}H{head}" for layer in range(2) for head in range(2)
        } <= stats.keys()


def test_score_std_grows_by_sqrt_head_size_without_the_scale():
    torch.manual_seed(0)
    idx = torch.randint(0, 65, (4, 32))
    stds = {}
    for scaled in (True, False):
        torch.manual_seed(1)  # identical weights in both models
        cfg = ModelConfig(
            n_layer=1,
            n_head=1,
            n_embd=64,
            block_size=32,
            vocab_size=65,
            scaled=scaled,
            qk_init_std=64**-0.5,
        )
        stds[scaled] = attention_summary(GPT(cfg).eval(), idx)["attn/score_std"]
    assert stds[False] / stds[True] == pytest.approx(math.sqrt(64), rel=1e-4)
    assert 0.5 < stds[True] < 2.0  # unit-variance q and k: scaled scores of about unit std


def test_honest_loss_equals_teacher_forced_for_a_causal_model():
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65)).eval()
    x, y = torch.randint(0, 65, (3, 16)), torch.randint(0, 65, (3, 16))
    positions = honest_positions(16, 8, torch.Generator().manual_seed(0))
    honest, forced = honest_loss(model, x, y, positions)
    # read off the one forced pass: a causal position sees its prefix alone either way
    assert honest == forced
    slow = torch.nn.functional.cross_entropy(
        prefix_logits(model, x, positions).flatten(0, 1), y[:, positions].flatten()
    ).item()
    # a pass per prefix, the way a no-mask model is measured, agrees
    assert honest == pytest.approx(slow, abs=1e-6)
    with torch.no_grad():  # the teacher-forced loss at those positions, computed the plain way
        logits, _ = model(x)
        direct = torch.nn.functional.cross_entropy(
            logits[:, positions].flatten(0, 1), y[:, positions].flatten()
        ).item()
    assert forced == pytest.approx(direct, abs=1e-5)


def test_leak_is_the_mean_honest_and_forced_loss_and_their_gap():
    """leak averages honest_loss's pairs over the batches; the gap is about 0 with the mask and not
    without it.
    """
    gen = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randint(0, 65, (2, 16), generator=gen),
            torch.randint(0, 65, (2, 16), generator=gen),
            [3, 9, 15],
        )
        for _ in range(2)
    ]
    for causal in (True, False):
        torch.manual_seed(0)
        model = GPT(
            ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, causal=causal)
        ).eval()
        pairs = [honest_loss(model, x, y, positions) for x, y, positions in batches]
        measured = leak(model, batches)
        assert measured["loss/val_honest"] == pytest.approx(
            (pairs[0][0] + pairs[1][0]) / 2, abs=1e-12
        )
        assert measured["loss/val_forced"] == pytest.approx(
            (pairs[0][1] + pairs[1][1]) / 2, abs=1e-12
        )
        assert (
            measured["loss/leak_gap"] == measured["loss/val_honest"] - measured["loss/val_forced"]
        )
        assert (abs(measured["loss/leak_gap"]) < 1e-4) == causal, measured


def test_honest_positions_cover_the_block_in_equal_strata():
    positions = honest_positions(128, 8, torch.Generator().manual_seed(3))
    assert len(positions) == 8
    assert [p // 16 for p in positions] == list(range(8))  # one position in each sixteenth
    assert honest_positions(4, 8, torch.Generator().manual_seed(0)) == [0, 1, 2, 3]


def test_bits_per_byte():
    assert bits_per_byte(math.log(2), n_tokens=10, n_bytes=10) == pytest.approx(1.0)
    # 4 bytes a token
    assert bits_per_byte(math.log(2), n_tokens=10, n_bytes=40) == pytest.approx(0.25)


def test_qk_grad_norm_reads_only_query_and_key_rows():
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=8, block_size=4, vocab_size=11))
    assert qk_grad_norm(model) == 0.0  # no backward yet
    for block in model.blocks:
        grad = torch.zeros_like(block.attn.qkv.weight)
        grad[:16] = 1.0  # query and key rows: 16 x 8 ones
        grad[16:] = 100.0  # value rows must not count
        block.attn.qkv.weight.grad = grad
    assert qk_grad_norm(model) == pytest.approx(math.sqrt(2 * 16 * 8))


def test_a_no_mask_model_learns_to_cheat(tmp_path, corpus_file, one_cpu_thread):
    """After a short training on a tiny corpus, the unmasked model's honest loss is far above its
    teacher-forced one.
    """
    # 1/sqrt(32)
    flags = [
        "--train.max_steps=300",
        "--train.eval_interval=300",
        "--train.lr=1e-2",
        "--model.qk_init_std=0.18",
    ]
    argv = tiny_argv(tmp_path, corpus_file, *flags)
    causal = train.train(load_config(argv))
    cheat = train.train(load_config([*argv, "--no-mask"]))
    assert abs(causal["loss/leak_gap"]) < 1e-4
    assert cheat["loss/leak_gap"] > 0.5, cheat
    assert cheat["attn/future_mass"] > 0.1
    # the leaked loss looks better than the honest model's
    assert cheat["loss/val"] < causal["loss/val"]


def test_training_logs_every_issue_tag(tmp_path, corpus_file, one_cpu_thread):
    argv = tiny_argv(
        tmp_path,
        corpus_file,
        "--train.max_steps=10",
        "--train.eval_interval=5",
        "--train.log_interval=5",
    )
    train.train(load_config(argv))
    rows = [
        json.loads(line)
        for line in (tmp_path / "runs" / "tiny" / "metrics.jsonl").read_text().splitlines()
    ]
    tags = set().union(*rows)
    wanted = {
        "loss/train",
        "loss/val",
        "loss/val_honest",
        "loss/leak_gap",
        "loss/order_use",
        "loss/val_bpc",
        "attn/entropy",
        "attn/max_weight",
        "attn/saturated_frac",
        "attn/future_mass",
        "attn/score_std",
        "grad/qk_norm",
        "perf/tokens_per_s",
        "lr",
        "heads/entropy/L0H0",
    }
    assert wanted <= tags, wanted - tags
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(
        str(tmp_path / "runs" / "tiny"), size_guidance={"images": 0, "tensors": 0}
    ).Reload()
    # one a head
    assert {"heatmaps/L0H0", "heatmaps/L0H1", "heatmaps/L1H0", "heatmaps/L1H1"} == set(
        events.Tags()["images"]
    )
    assert "samples/text_summary" in events.Tags()["tensors"]


def test_heatmap_grid_redraws_with_the_latest_weights_and_title():
    from torch.utils.tensorboard._utils import figure_to_image

    labels = ["a", "b", "c", "d"]
    grid = harness.pictures.heatmaps.HeatmapGrid(n_heads=2, labels=labels)
    first = torch.stack([uniform_causal(4), torch.eye(4)])  # (H, T, T)
    second = first.flip(0)  # the two heads swapped
    picture = figure_to_image(grid.draw(first, "step 0"), close=False)
    fig = grid.draw(second, "step 5")
    for image, weights in zip(grid.images, second, strict=True):
        assert_close(torch.from_numpy(image.get_array().data), weights, atol=0)
    assert fig._suptitle.get_text() == "step 5"
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == labels
    redrawn = figure_to_image(fig, close=False)
    assert redrawn.shape == picture.shape and (redrawn != picture).any()
    assert (figure_to_image(grid.draw(first, "step 0"), close=False) == picture).all(), (
        "the same input draws the same picture"
    )


def test_heatmap_grid_pixels_equal_a_full_draw_at_every_call():
    """pixels() draws the labels once and then only the heatmaps and title: the picture must not
    show it.
    """
    from torch.utils.tensorboard._utils import figure_to_image

    labels = ["T", "o", " ", "b", "e", ",", " ", "o", "r"]
    T = len(labels)
    # 3 heads: one empty panel in the grid
    grid = harness.pictures.heatmaps.HeatmapGrid(n_heads=3, labels=labels)
    g = torch.Generator().manual_seed(0)
    for step in range(3):
        weights = torch.randn(3, T, T, generator=g).softmax(-1)  # (H, T, T), new weights each time
        title = f"layer 0 at step {step * 100} ({'x' * step})"
        picture = grid.pixels(weights, title)  # (height, width, 3)
        fresh = harness.pictures.heatmaps.HeatmapGrid(n_heads=3, labels=labels)
        # (3, height, width): a whole draw
        full = figure_to_image(fresh.draw(weights, title), close=False)
        assert picture.dtype == np.uint8 and picture.shape == (full.shape[1], full.shape[2], 3)
        assert (picture == full.transpose(1, 2, 0)).all(), (
            f"call {step}: the blitted picture differs from a full draw"
        )


def figure_texts(fig) -> list:
    """Every piece of text a heatmap figure draws: tick labels, axis names, panel titles and the
    figure's title.
    """
    texts = [fig._suptitle]
    for ax in fig.axes:
        texts += [
            *ax.get_xticklabels(),
            *ax.get_yticklabels(),
            ax.xaxis.label,
            ax.yaxis.label,
            ax.title,
        ]
    return [t for t in texts if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("n_heads", [1, 4, 6])
def test_heatmap_labels_and_axis_names_show_in_full(n_heads):
    """Every token label, axis name and title lies inside the picture, and outside every heatmap."""
    labels = [
        "ROM",
        "EO",
        ":",
        "\\n",
        "But",
        "\u2423soft",
        ",",
        "\u2423through",
        "\u2423yonder",
        "\u2423window",
        "abcdefg\u2026",
        "?",
    ]
    T = len(labels)
    weights = torch.full((n_heads, T, T), 1 / T)
    names = ["L0H3"] if n_heads == 1 else None
    for fig in (
        harness.pictures.heatmaps.heatmap_figure(
            weights, labels, "base-no-mask-with-a-long-name: layer 0, head 3", names
        ),
        harness.pictures.heatmaps.HeatmapGrid(
            n_heads, labels, title="layer 0 at step 3000 (NO MASK, scaled)"
        ).draw(weights, "layer 0 at step 300"),
    ):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        picture = fig.bbox
        # the heatmaps; the colour bar's axes hold none
        panels = [ax for ax in fig.axes if ax.images]
        assert len(panels) == n_heads and len(fig.axes) == n_heads + 1
        squares = [ax.get_window_extent(renderer) for ax in fig.axes]
        texts = figure_texts(fig)  # the colour bar's ticks and label too
        assert sum(t in fig.axes[0].get_yticklabels() for t in texts) == T
        for text in texts:
            box = text.get_window_extent(renderer)
            inside = (
                picture.x0 <= box.x0
                and box.x1 <= picture.x1
                and picture.y0 <= box.y0
                and box.y1 <= picture.y1
            )
            assert inside, (
                f"{text.get_text()!r} at {box.bounds} is cut by the picture {picture.bounds}"
            )
            assert not any(box.overlaps(square) for square in squares), (
                f"{text.get_text()!r} covers a heatmap"
            )
        first, last = panels[0], panels[-1]
        assert [t.get_text() for t in first.get_yticklabels()] == labels
        assert (
            first.get_ylabel() == "queries (rows)"
            and last.get_xlabel() == "keys (columns): attended to"
        )
        # the lowest of each column
        assert {ax.get_xlabel() for ax in panels[-min(n_heads, 4) :]} == {
            "keys (columns): attended to"
        }


@pytest.mark.parametrize(
    "causal,cells,label",
    [
        (True, [(t, t) for t in range(5)], "t, the diagonal"),
        (False, [(t, t + 1) for t in range(4)], "t+1, the answer"),
    ],
)
def test_heatmaps_outline_the_diagonal_or_the_answer_and_carry_a_colour_bar(causal, cells, label):
    """Under the mask each panel outlines the diagonal; without it the cells (t, t+1), where a
    copying head looks.
    """
    weights = torch.full((2, 5, 5), 0.2)
    fig = harness.pictures.heatmaps.heatmap_figure(
        weights, list("abcde"), "outlines", causal=causal
    )
    panels = [ax for ax in fig.axes if ax.images]
    for ax in panels:
        # (row: query, column: key)
        outlined = sorted((round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in ax.patches)
        assert outlined == cells
    (colorbar,) = [ax for ax in fig.axes if not ax.images]
    assert colorbar.get_ylabel() == f"weight; red: {label}" and colorbar.get_ylim() == (0.0, 1.0)


@pytest.mark.parametrize("causal", [True, False])
def test_the_attention_page_marks_in_red_the_diagonal_or_the_answer(tmp_path, causal):
    """circuitsvis colours a cell by its value alone (blue above 0, red below): the page hands it
    negated the cells the PNG heatmaps outline, t+1 without the mask (a head that reads the answer
    shows a red line, not a blue one that looks like the diagonal) and t under it (a previous-token
    head's blue line runs beside the red diagonal)."""
    T = 6
    # 2 layers of (H, T, T)
    scores = torch.randn(2, 2, T, T, generator=torch.Generator().manual_seed(0))
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    weights = scores.softmax(dim=-1)
    page = harness.pictures.heatmaps.attention_page(
        list(weights), list("abcdef"), "page", causal, tmp_path / "attention.html"
    ).read_text()
    props = json.loads(re.search(r"CircuitsVis\.AttentionHeads,\s*(\{.*\})\s*\)", page).group(1))
    shown = torch.tensor(props["attention"])  # (n_layer * H, T, T)
    # (t, t) or (t, t+1)
    marked = (
        torch.eye(T, dtype=torch.bool)
        if causal
        else torch.eye(T, dtype=torch.bool).roll(1, dims=1).triu()
    )
    assert (
        props["negativeColor"],
        props["positiveColor"],
        props["minValue"],
        props["maxValue"],
    ) == ("red", "blue", -1.0, 1.0)
    assert props["maskUpperTri"] is causal and props["attentionHeadNames"] == [
        "L0H0",
        "L0H1",
        "L1H0",
        "L1H1",
    ]
    expected = weights.reshape(4, T, T)
    assert_close(shown, torch.where(marked, -expected, expected), atol=1e-6)
    assert (
        int(marked.sum()) == (T if causal else T - 1)
        and ("the diagonal" if causal else "the weight on t+1") in page
    )
    assert (shown[:, marked] < 0).all() and (shown[:, ~marked] >= 0).all()


def test_inspect_attention_writes_heatmaps_and_a_table(
    tmp_path, corpus_file, one_cpu_thread, capsys
):
    argv = tiny_argv(
        tmp_path, corpus_file, "--train.max_steps=5", "--train.eval_interval=5", "--no-mask"
    )
    train.train(load_config(argv))
    capsys.readouterr()
    out = inspect_attention.main(
        ["--run", "tiny-no-mask", "--runs-dir", str(tmp_path / "runs"), "--text", "the king"]
    )
    printed = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            "attention.html",
            "attn_L0.png",
            "attn_L1.png",
            "attn_L0_H0.png",
            "attn_L0_H1.png",
            "attn_L1_H0.png",
            "attn_L1_H1.png",
        ]
    )
    table = [line for line in printed.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(table) == 4  # 2 layers x 2 heads
    assert all(float(line.split("|")[6]) > 0 for line in table)  # future mass of an unmasked model
    repeated = inspect_attention.main(
        [
            "--run",
            "tiny-no-mask",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--repeated",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    printed = capsys.readouterr().out
    # random tokens, as many as the context
    assert f", {load_config(argv).model.block_size} tokens; heatmaps in {repeated}/" in printed
    assert (
        "induction heads (mean weight above 0.3 on the " in printed
        and (repeated / "attention.html").is_file()
    )


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: checks bf16 autocast and torch.compile"
)
def test_cuda_run_uses_bf16_autocast_and_compile(tmp_path, corpus_file):
    runtime = harness.training.runtime.setup_runtime(
        load_config(["--config", "tiny", "--device", "cuda"]).train
    )
    assert runtime.autocast_dtype == torch.bfloat16 and runtime.use_compile
    summary = train.train(
        load_config(tiny_argv(tmp_path, corpus_file, "--device", "cuda", "--train.max_steps=10"))
    )
    assert math.isfinite(summary["loss/val"])


# Head roles: previous-token heads and first-token sinks, on hand-made weights


def previous_token_pattern(T: int) -> torch.Tensor:
    """Row t puts all its weight on t-1 (row 0, with nothing before it, on itself)."""
    w = torch.zeros(T, T)
    w[0, 0] = 1.0
    w[torch.arange(1, T), torch.arange(T - 1)] = 1.0
    return w


def test_previous_token_and_first_token_weights_by_hand():
    T = 5
    shifted = previous_token_pattern(T)[None]  # (B=1, T, T)
    assert previous_token_weight(shifted) == pytest.approx(1.0)
    # only row 1's previous token is position 0
    assert first_token_weight(shifted) == pytest.approx(1 / (T - 1))
    sink = torch.zeros(1, T, T)
    sink[..., 0] = 1.0
    assert first_token_weight(sink) == pytest.approx(1.0)
    assert previous_token_weight(sink) == pytest.approx(1 / (T - 1))
    uniform = uniform_causal(T)[None]  # row t gives 1/(t+1) to each of 0..t, t-1 and 0 included
    expected = sum(1 / (t + 1) for t in range(1, T)) / (T - 1)
    assert previous_token_weight(uniform) == pytest.approx(expected)
    assert first_token_weight(uniform) == pytest.approx(expected)


def test_the_uniform_first_token_share_and_the_sink_s_weight_by_hand():
    """Equal scores (q = 0) give uniform weights over each row's view: their first-token weight is
    the uniform share, under the causal mask (1/2, 1/3, 1/4, 1/5 on rows 1-4) and in a window of 3
    (rows 3 and 4 no longer see position 0). A sink logit of 0 on equal scores is one more equal
    entry: row t gives it 1/(t+2), and the tokens the rest."""
    T, v = 5, torch.randn(1, 5, 4)
    q = torch.zeros(1, T, 4)
    assert uniform_first_token_weight(T) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4)
    assert uniform_first_token_weight(T, window=3) == pytest.approx((1 / 2 + 1 / 3) / 4)
    for window in (0, 3):
        _, w = model_attention.attention(
            q, q, v, model_attention.causal_mask(T, T, window=window), 1.0
        )
        assert first_token_weight(w) == pytest.approx(uniform_first_token_weight(T, window))
        assert sink_weight(w) == pytest.approx(0.0, abs=1e-6)
    _, w = model_attention.attention(
        q[None], q[None], v[None], model_attention.causal_mask(T, T), 1.0, sink=torch.zeros(1)
    )
    assert sink_weight(w[0]) == pytest.approx(sum(1 / (t + 2) for t in range(T)) / T)


def test_head_roles_names_the_heads_and_ranks_by_entropy():
    T = MIN_ROLE_ROWS + 1  # rows 1..T-1 show t-1 and position 0: just enough
    sink = torch.zeros(T, T)
    sink[:, 0] = 1.0
    # (B=1, H=3, T, T)
    layer = torch.stack([uniform_causal(T), previous_token_pattern(T), sink])[None]
    rows = head_roles([layer], causal=True)
    assert [row["head"] for row in rows][-1] == 0, (
        "the uniform head has the highest entropy, so it ranks last"
    )
    roles = {row["head"]: row["roles"] for row in rows}
    assert roles == {0: [], 1: ["previous-token"], 2: ["first-token sink"]}
    rows_above = [
        (row["rows"]["previous"], row["above"]["previous"])
        for row in sorted(rows, key=lambda row: row["head"])
    ]
    # uniform: row 1's 0.5 is not above 0.5; the sink: row 1's t-1 is position 0
    assert rows_above == [(8, 0), (8, 8), (8, 1)]
    # one row fewer than MIN_ROLE_ROWS: no role, however clear
    short = head_roles([layer[..., : T - 1, : T - 1]], causal=True)
    assert all(row["roles"] == [] and row["rows"]["previous"] == MIN_ROLE_ROWS - 1 for row in short)
    assert PREVIOUS_TOKEN_THRESHOLD == FIRST_TOKEN_THRESHOLD == NEXT_TOKEN_THRESHOLD == 0.5


def next_token_pattern(T: int) -> torch.Tensor:
    """Row t puts all its weight on t+1 (the last row, with nothing after it, on itself): the
    --no-mask cheat.
    """
    w = torch.zeros(T, T)
    w[torch.arange(T - 1), torch.arange(1, T)] = 1.0
    w[T - 1, T - 1] = 1.0
    return w


def test_next_token_weight_by_hand_and_the_cheating_head_is_named():
    T = MIN_ROLE_ROWS + 1
    assert next_token_weight(next_token_pattern(T)[None]) == pytest.approx(1.0)
    assert next_token_weight(uniform_causal(T)[None]) == 0.0  # the mask leaves nothing on t+1
    # uniform without the mask
    assert next_token_weight(torch.full((1, T, T), 1 / T)) == pytest.approx(1 / T)
    # each row t <= T-2 gives half its weight to t+1
    half = 0.5 * next_token_pattern(T) + 0.5 * previous_token_pattern(T)
    assert next_token_weight(half[None]) == pytest.approx(0.5)
    # (1, 3, T, T)
    layer = torch.stack(
        [torch.full((T, T), 1 / T), next_token_pattern(T), previous_token_pattern(T)]
    )[None]
    roles = {row["head"]: (row["roles"], row["next"]) for row in head_roles([layer], causal=False)}
    assert roles[1] == (["next-token"], pytest.approx(1.0))
    assert roles[0] == ([], pytest.approx(1 / T)) and roles[2] == (["previous-token"], 0.0)


def next_token_model(text: str) -> tuple[GPT, CharTokenizer]:
    """A 2-layer GPT without the mask whose layer-0 head attends from each position to the next one.

    Token embeddings are zero, so the stream holds only the position: a one-hot e_t, centred by
    LayerNorm. The keys copy it and the queries shift it to e_{t+1} (cyclically), so query t
    matches key t+1 best. Layer 1 keeps its random initialisation: nearly uniform, no role.
    """
    tokenizer = CharTokenizer.from_text(text)
    T = len(text)
    model = GPT(
        ModelConfig(
            n_layer=2,
            n_head=1,
            n_embd=T,
            block_size=T,
            vocab_size=tokenizer.vocab_size,
            causal=False,
        )
    )
    attn = model.blocks[0].attn
    with torch.no_grad():
        model.tok_emb.weight.zero_()
        model.pos_emb.weight.copy_(torch.eye(T))
        shift = torch.eye(T).roll(1, dims=0)  # shift @ e_t = e_{t+1}
        attn.qkv.weight[:T] = 20.0 * shift  # queries
        attn.qkv.weight[T : 2 * T] = torch.eye(T)  # keys
    return model.eval(), tokenizer


def test_inspect_attention_names_the_next_token_head_of_a_constructed_model(tmp_path, capsys):
    text = "the king!"
    model, tokenizer = next_token_model(text)
    weights = model.attention_weights(torch.tensor([tokenizer.encode(text)]))
    expected = next_token_weight(weights[0][:, 0])
    assert expected > 0.95, f"the constructed head puts only {expected:.3f} on t+1"
    checkpoint = {
        "model": model.state_dict(),
        "config": {"model": dataclasses.asdict(model.cfg)},
        "tokenizer": tokenizer.state(),
        "step": 0,
    }
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    inspect_attention.main(
        ["--checkpoint", str(tmp_path / "ckpt.pt"), "--text", text, "--out", str(tmp_path / "out")]
    )
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("| layer"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in printed.splitlines()
        if line.startswith("| ") and line[2].isdigit()
    ]
    by_head = {(row[0], row[1]): dict(zip(columns, row, strict=True)) for row in rows}
    assert float(by_head["0", "0"]["t+1"]) == pytest.approx(expected, abs=5e-4)
    assert by_head["0", "0"]["role"] == "next-token"
    # the random layer: near 1/T everywhere
    assert float(by_head["1", "0"]["t+1"]) < 0.2 and by_head["1", "0"]["role"] == ""
    assert (
        "next-token heads (mean weight above 0.5 on the 8 rows that can show it): L0H0 (8 of 8 "
        "rows above 0.5)" in printed
    )


def test_order_use_is_zero_for_a_bag_and_the_shuffled_loss_rise_otherwise():
    """Without mask and positions the last position of a prefix sees a bag: shuffling it changes
    nothing. With positions, order_use is the honest loss of the prefix whose k tokens before t are
    shuffled (the same draws), minus the honest loss."""
    gen = torch.Generator().manual_seed(2)
    x, y = (
        torch.randint(0, 65, (3, 16), generator=gen),
        torch.randint(0, 65, (3, 16), generator=gen),
    )
    tiny = {
        "n_layer": 2,
        "n_head": 2,
        "n_embd": 32,
        "block_size": 16,
        "vocab_size": 65,
        "causal": False,
    }
    torch.manual_seed(0)
    bag = GPT(ModelConfig(**tiny, positions=False)).eval()
    assert order_use(bag, [(x, y, [5, 15])], k=4)["loss/order_use"] == pytest.approx(0.0, abs=1e-5)
    torch.manual_seed(0)
    placed = GPT(ModelConfig(**tiny)).eval()
    # the draws order_use makes
    order = 11 + torch.rand(3, 4, generator=torch.Generator().manual_seed(0)).argsort(dim=-1)
    # (3, 16): tokens 11..14 shuffled per row
    shuffled = torch.cat([x[:, :11], x.gather(1, order), x[:, 15:16]], dim=1)
    honest_shuffled, _ = honest_loss(placed, shuffled, y, [15])
    honest, _ = honest_loss(placed, x, y, [15])
    measured = order_use(placed, [(x, y, [15])], k=4)["loss/order_use"]
    assert measured == pytest.approx(honest_shuffled - honest, abs=1e-6) and abs(measured) > 1e-4
    # given the honest loss that leak's passes computed (as evaluation does), the same figure, bit
    # for bit
    assert order_use(placed, [(x, y, [15])], k=4, unshuffled=[honest])["loss/order_use"] == measured


# Induction heads, on "a b c d e f a b c d g": the second a b c d repeats the first, 6 positions
# later.
REPEATED = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 6]])  # (B=1, T=11)


def induction_pattern(idx: torch.Tensor) -> torch.Tensor:
    """Each row whose token occurred before puts all its weight on the position after that
    occurrence; the rest on themselves.
    """
    T = idx.shape[-1]
    w = torch.eye(T)
    for t, p in enumerate(previous_occurrence(idx)[0].tolist()):
        if p >= 0:
            w[t] = 0.0
            w[t, p + 1] = 1.0
    return w


def test_previous_occurrence_by_hand():
    assert previous_occurrence(REPEATED)[0].tolist() == [-1, -1, -1, -1, -1, -1, 0, 1, 2, 3, -1]
    # the latest earlier one
    assert previous_occurrence(torch.tensor([[7, 7, 7]]))[0].tolist() == [-1, 0, 1]


def test_induction_score_is_one_on_the_induction_pattern_and_zero_on_a_previous_token_pattern():
    T = REPEATED.shape[1]
    assert induction_score(induction_pattern(REPEATED)[None], REPEATED) == 1.0
    assert induction_score(previous_token_pattern(T)[None], REPEATED) == 0.0
    # rows 6..9 spread evenly over t + 1 positions, the target among them
    uniform = uniform_causal(T)[None]
    assert induction_score(uniform, REPEATED) == pytest.approx(
        sum(1 / (t + 1) for t in range(6, 10)) / 4
    )
    half = 0.5 * induction_pattern(REPEATED) + 0.5 * previous_token_pattern(T)
    assert induction_score(half[None], REPEATED) == pytest.approx(0.5)
    # no token repeats: nothing to score
    assert induction_score(uniform, torch.arange(T)[None]) == 0.0


def test_head_roles_names_the_induction_head_only_on_enough_repeated_rows():
    """One repeated token (a 7-token text and its first token again) is one row that can show
    induction: not enough, however perfect the head there. Ten tokens seen twice are ten rows: the
    same pattern is named."""
    for idx, rows, named in (
        (torch.tensor([[0, 1, 2, 3, 4, 5, 6, 0]]), 1, False),
        (torch.arange(10).repeat(2)[None], 10, True),
    ):
        T = idx.shape[1]
        # (B=1, H=2, T, T)
        layer = torch.stack([previous_token_pattern(T), induction_pattern(idx)])[None]
        heads = {head["head"]: head for head in head_roles([layer], causal=True, idx=idx)}
        assert (
            heads[1]["induction"] == 1.0
            and heads[1]["rows"]["induction"] == heads[1]["above"]["induction"] == rows
        )
        assert heads[1]["roles"] == (["induction"] if named else []), (rows, heads[1]["roles"])
        # 7 rows show t-1 there: too few
        assert heads[0]["induction"] == 0.0 and heads[0]["roles"] == (
            ["previous-token"] if named else []
        )
    assert all(
        head["induction"] == 0.0 and head["rows"]["induction"] == 0
        for head in head_roles([layer], causal=True)
    ), "no tokens given"


def test_induction_summary_scores_every_head_and_splits_the_loss_by_what_the_context_gives_away():
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=11, vocab_size=8, mlp=False)
    ).eval()
    x, y = REPEATED[:, :-1], REPEATED[:, 1:]  # (1, 10): targets 1 2 3 4 5 0 1 2 3 6
    summary = induction_summary(model, x, y)
    weights = model.attention_weights(x)
    for layer in range(2):
        for head in range(2):
            assert summary[f"induction/L{layer}H{head}"] == induction_score(
                weights[layer][:, head], x
            )
    assert summary["induction/max"] == max(
        summary[f"induction/L{i // 2}H{i % 2}"] for i in range(4)
    )
    losses = lm_loss(model(x)[0], y, reduction="none")[0]  # (10,)
    # a b c repeated, their next tokens b c d copyable
    assert summary["loss/repeated"] == pytest.approx(losses[6:9].mean().item())
    # the first a..f (d at 9 repeats, but g follows it)
    assert summary["loss/first"] == pytest.approx(losses[:6].mean().item())
    assert summary["icl/score"] == pytest.approx(summary["loss/repeated"] - summary["loss/first"])


@pytest.mark.parametrize("causal,scaled", [(True, True), (False, True), (True, False)])
def test_score_gradients_equal_autograd_at_the_softmax_input(causal, scaled, monkeypatch):
    """score_grad is the norm of dL/d(scores after the scale) that autograd itself gives, when the
    scores are kept.
    """
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            n_layer=2,
            n_head=2,
            n_embd=16,
            block_size=8,
            vocab_size=11,
            causal=causal,
            scaled=scaled,
            qk_init_std=0.5,
        )
    )
    x, y = torch.randint(0, 11, (3, 8)), torch.randint(0, 11, (3, 8))
    got = score_gradients(model, x, y)

    kept = []  # the scores of each layer, as attention() hands them to the softmax

    def keeping(q, k, mask, scale, softcap):
        scores = real(q, k, mask, scale, softcap)
        scores.retain_grad()
        kept.append(scores)
        return scores

    real = model_attention.attention_scores
    monkeypatch.setattr(model_attention, "attention_scores", keeping)
    model.zero_grad()
    h = model.embed(x)
    for block in model.blocks:
        h, _ = block(h, return_weights=True)
    lm_loss(model.lm_head(model.ln_f(h)), y).backward()
    rows = torch.cat(
        [
            s.grad.pow(2).sum(-1)[..., 1:].flatten() if causal else s.grad.pow(2).sum(-1).flatten()
            for s in kept
        ]
    )
    assert got["score_grad"] == pytest.approx(rows.sum().sqrt().item(), rel=1e-5)
    # the same pass's gradient on the weights
    assert got["qk_grad"] == pytest.approx(qk_grad_norm(model), rel=1e-6)
    assert got["loss"] == pytest.approx(lm_loss(model(x)[0], y).item(), rel=1e-6)


def test_a_saturated_row_passes_back_almost_nothing():
    """Unscaled scores with large queries and keys saturate rows; those rows' score gradient is far
    below the others'.
    """
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            n_layer=1,
            n_head=1,
            n_embd=32,
            block_size=16,
            vocab_size=11,
            scaled=False,
            qk_init_std=0.6,
        )
    )
    x, y = torch.randint(0, 11, (4, 16)), torch.randint(0, 11, (4, 16))
    got = score_gradients(model, x, y)
    assert got["saturated_row_grad"] < 0.1 * got["other_row_grad"], got


def test_the_query_and_key_norms_are_read_before_qk_norm_rescales_them():
    """attn/q_norm and attn/k_norm measure the projections as the weights make them: under QK-norm
    they grow with the weights as they do without it (one layer: the same weights give the same
    projections), while the scores stay bounded."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, qk_init_std=0.5)
    plain = GPT(cfg).eval()
    cured = GPT(dataclasses.replace(cfg, qk_norm=True)).eval()
    cured.load_state_dict(plain.state_dict())
    idx = torch.randint(0, 11, (3, 8))
    with torch.no_grad():
        # each (B, T, C)
        q, k, _ = plain.blocks[0].attn.qkv(plain.blocks[0].ln1(plain.embed(idx))).split(16, dim=-1)
    by_hand = {
        "attn/q_norm": q.view(3, 8, 2, 8).norm(dim=-1).mean().item(),
        "attn/k_norm": k.view(3, 8, 2, 8).norm(dim=-1).mean().item(),
    }
    for model in (plain, cured):
        norms = qk_norms(model, idx)
        for tag, value in by_hand.items():
            assert abs(norms[tag] - value) < 1e-5, (tag, norms[tag], value)
    # far from the unit RMS (norm sqrt(D)) that QK-norm hands the scores
    assert by_hand["attn/q_norm"] > 2 * 8**0.5
    # |score| <= D * D**-0.5 with unit-RMS q and k
    assert attention_summary(cured, idx)["attn/score_max"] <= 8**0.5 + 1e-4


def test_inspect_attention_refuses_weights_that_are_not_finite(tmp_path, capsys):
    """A checkpoint with NaN weights drew pictures of nothing with exit code 0, where sample.py and
    score.py refuse it.
    """
    text = "the king!"
    model, tokenizer = next_token_model(text)
    state = model.state_dict()
    # every attention weight of layer 0 is NaN then
    state["blocks.0.attn.qkv.weight"][0, 0] = float("nan")
    assert model.attention_weights(torch.tensor([tokenizer.encode(text)]))[0].isnan().all()
    checkpoint = {
        "model": state,
        "config": {"model": dataclasses.asdict(model.cfg)},
        "tokenizer": tokenizer.state(),
        "step": 0,
    }
    torch.save(checkpoint, tmp_path / "ckpt.pt")
    proc = error_of(
        inspect_attention.main,
        ["--checkpoint", str(tmp_path / "ckpt.pt"), "--text", text, "--out", str(tmp_path / "out")],
        capsys,
    )
    assert_one_line_error(
        proc,
        "the model's logits are not finite (NaN or inf), so its weights are broken",
        "(--best)",
    )
    assert proc.stdout == "" and not (tmp_path / "out").exists()
