"""The repeated-random source (data/synthetic.py): deterministic for a seed, an exact repeat at a
varying distance, and the induction preset trained on it: its tags logged, and a resume that
continues the stream to the same numbers."""

import contextlib
import io
import json

import pytest
import torch
from conftest import (
    assert_close,
    assert_one_line_error,
    custom_scalars_layout,
    error_of,
    tiny_argv,
    write_corpus,
)

import harness.training.evaluation
import train
from configs import ConfigError, load_config
from data.batches import draw_batch
from data.synthetic import SYMBOLS, RepeatedRandom, load_synthetic
from harness.training.checkpoints import read_checkpoint
from harness.training.runlog import INDUCTION, STORY
from model.induction import previous_occurrence

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def repeated_segment(row: torch.Tensor) -> tuple[int, int, int]:
    """(start, start of the copy, length) of the longest run of positions whose token repeats an
    earlier one at one fixed distance.
    """
    best = (0, 0, 0)
    for distance in range(1, len(row)):
        same = (row[distance:] == row[:-distance]).tolist()
        run = 0
        for i, hit in enumerate(same):
            run = run + 1 if hit else 0
            if run > best[2]:
                best = (i - run + 1, i - run + 1 + distance, run)
    return best


def test_the_source_is_deterministic_for_a_seed_and_fresh_every_draw():
    source = RepeatedRandom(vocab_size=256, min_segment=6, max_segment=16)
    a = source.draw(4, 32, torch.Generator().manual_seed(7))
    b = source.draw(4, 32, torch.Generator().manual_seed(7))
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    gen = torch.Generator().manual_seed(7)
    first, second = source.draw(4, 32, gen)[0], source.draw(4, 32, gen)[0]
    assert not torch.equal(first, second), "each draw is a fresh batch"
    # the training loop's door gives the same batch
    x, y = draw_batch(source, 4, 32, torch.Generator().manual_seed(7))
    assert torch.equal(x, a[0]) and torch.equal(y, a[1])
    assert torch.equal(x[:, 1:], y[:, :-1]) and x.dtype == torch.int64 and x.shape == (4, 32)


def test_each_sequence_holds_a_segment_repeated_exactly_at_a_varying_distance():
    # two copies of 16 fit in 33 tokens
    source = RepeatedRandom(vocab_size=256, min_segment=6, max_segment=16)
    # (40, 33)
    rows = torch.stack(
        [source.sequence(33, torch.Generator().manual_seed(seed)) for seed in range(40)]
    )
    found = [repeated_segment(row) for row in rows]
    for row, (start, copy, length) in zip(rows, found, strict=True):
        assert length >= 6 and torch.equal(row[copy : copy + length], row[start : start + length])
        assert int(row.max()) < 256 and int(row.min()) >= 0
    distances = {copy - start for start, copy, _ in found}
    assert len(distances) > 10, f"the distance to the repeat must vary, got {sorted(distances)}"
    # what the induction score reads: every copied token has an earlier occurrence
    repeated = previous_occurrence(rows) >= 0
    assert all(repeated[i, copy : copy + length].all() for i, (_, copy, length) in enumerate(found))


def test_the_synthetic_corpus_tokens_are_characters_and_its_settings_its_identity():
    cfg = load_config(["--config", "induction"])
    corpus = load_synthetic(cfg.data)
    assert corpus.tokenizer.vocab_size == 256 and corpus.tokenizer.decode(
        list(range(3))
    ) == "".join(SYMBOLS[:3])
    assert corpus.probe_ids(32) == load_synthetic(cfg.data).probe_ids(32), (
        "heatmaps show the same sequence in every run"
    )
    other = load_synthetic(load_config(["--config", "induction", "--data.max_segment=12"]).data)
    assert other.source_sha256 != corpus.source_sha256, (
        "a resume checks the source's settings as it checks a text's hash"
    )


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--data.source=repeated"], "data.source must be one of text, repeated-random"),
        (["--data.min_segment=20"], "data.min_segment must be between 1 and data.max_segment (10)"),
        (["--data.symbols=1"], "data.symbols must be between 2"),
        (
            ["--model.block_size=16"],
            "data.max_segment (10) must be at most (model.block_size + 1) // 2 (8)",
        ),
    ],
)
def test_bad_settings_are_refused_at_load_time(flags, needle):
    with pytest.raises(ConfigError) as e:
        load_config(["--config", "induction", *flags])
    assert needle in str(e.value)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (
            ["--model.block_size=2", "--data.min_segment=1", "--data.max_segment=1"],
            "model.block_size must be at least 7 to measure induction heads, got 2: even attention "
            "puts 0.50",
        ),
        (
            ["--model.block_size=1", "--data.min_segment=1", "--data.max_segment=1"],
            "got 1: even attention puts 1.00 on every target",
        ),
        (
            ["--model.block_size=6", "--data.min_segment=2", "--data.max_segment=3"],
            "got 6: even attention puts 0.17",
        ),
        (
            ["--data.min_segment=1", "--data.max_segment=1"],
            "data.min_segment must be at least 2 for the induction measurements, got 1",
        ),
        (["--data.min_segment=1"], "data.min_segment must be at least 2"),
    ],
)
def test_settings_too_degenerate_to_measure_induction_are_refused(flags, needle):
    """A block of 2 reported a phase change at step 0 (even attention scores 0.5 there) and a loss
    on repeated positions of nan; one-token segments (min = max = 1) never give a next token away,
    and wrote a bare NaN into metrics.jsonl."""
    with pytest.raises(ConfigError) as e:
        load_config(["--config", "induction", *flags])
    assert needle in str(e.value)
    assert load_config(
        [
            "--config",
            "induction",
            "--model.block_size=7",
            "--data.min_segment=2",
            "--data.max_segment=4",
        ]
    )


SMALL = [
    "--model.n_embd=16",
    "--model.n_head=2",
    "--model.block_size=16",
    "--data.max_segment=8",
    "--data.min_segment=3",
    "--train.batch_size=4",
    "--train.max_steps=8",
    "--train.eval_interval=4",
    "--train.eval_batches=1",
    "--train.honest_batches=1",
    "--train.log_interval=1",
    "--device=cpu",
    "--run-name=induction",
]


@pytest.fixture(scope="module")
def preset_runs(tmp_path_factory, one_cpu_thread) -> dict:
    """The induction preset, small: 8 steps uninterrupted, and again stopped by a crash after 5
    steps and resumed.
    """
    with pytest.MonkeyPatch.context() as mp:
        # the pictures are not under test
        mp.setattr(harness.training.evaluation, "HEATMAP_MAX_TOKENS", 4)
        full, said = tmp_path_factory.mktemp("full"), io.StringIO()
        with contextlib.redirect_stdout(said):
            train.train(load_config(["--config", "induction", *SMALL, "--runs-dir", str(full)]))
        resumed = tmp_path_factory.mktemp("resumed")
        argv = ["--config", "induction", *SMALL, "--runs-dir", str(resumed)]
        real, calls = train.draw_micro_batches, [0]

        def draw(*args, **kwargs):
            calls[0] += 1
            if calls[0] == 6:
                # a crash in the 6th step: ckpt.pt holds step 4, the last evaluation
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        mp.setattr(train, "draw_micro_batches", draw)
        with pytest.raises(KeyboardInterrupt):
            train.train(load_config(argv))
        mp.setattr(train, "draw_micro_batches", real)
        assert read_checkpoint(resumed / "induction" / "ckpt.pt")["step"] == 4
        train.train(load_config([*argv, "--resume"]))
    return {"full": full / "induction", "resumed": resumed / "induction", "said": said.getvalue()}


def metrics(run_dir) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in rows]


def test_a_run_of_the_preset_logs_the_induction_tags(preset_runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    evaluations = [row for row in metrics(preset_runs["full"]) if "loss/val" in row]
    assert [row["step"] for row in evaluations] == [0, 4, 8]
    heads = {f"induction/L{layer}H{head}" for layer in range(2) for head in range(2)}
    for row in evaluations:
        assert heads | {"induction/max", "loss/repeated", "loss/first", "icl/score"} <= row.keys()
        assert row["induction/max"] == max(row[tag] for tag in heads)
        assert row["icl/score"] == pytest.approx(row["loss/repeated"] - row["loss/first"])
    scalars = (
        EventAccumulator(str(preset_runs["full"]), size_guidance={"scalars": 0})
        .Reload()
        .Tags()["scalars"]
    )
    assert heads | {"induction/max", "icl/score"} <= set(scalars)
    # the story, and the induction heads' own section
    assert list(custom_scalars_layout(preset_runs["full"])) == [STORY, INDUCTION]
    # the phase change, said at the end (a text run says nothing)
    assert "induction heads: largest score" in preset_runs["said"]


def test_a_resumed_run_of_the_preset_draws_the_same_batches_to_the_same_numbers(preset_runs):
    got, want = metrics(preset_runs["resumed"]), metrics(preset_runs["full"])
    assert [row["step"] for row in got] == [row["step"] for row in want]
    for a, b in zip(got, want, strict=True):
        assert a == b, f"step {a['step']}: resumed {a} vs uninterrupted {b}"
    got_ckpt, want_ckpt = (
        read_checkpoint(preset_runs["resumed"] / "ckpt.pt"),
        read_checkpoint(preset_runs["full"] / "ckpt.pt"),
    )
    for name, tensor in want_ckpt["model"].items():
        assert_close(got_ckpt["model"][name], tensor, atol=0.0, msg=name)


def test_inspect_attention_looks_at_a_repeated_sequence_when_vocabulary_cannot_spell_the_probe_text(
    preset_runs, tmp_path, capsys
):
    import inspect_attention

    inspect_attention.main(
        ["--checkpoint", str(preset_runs["full"] / "ckpt.pt"), "--out", str(tmp_path)]
    )
    printed = capsys.readouterr().out
    # the block, and the induction column
    assert "16 tokens" in printed and "| induction | role |" in printed
    # a block of 16
    assert (
        "induction heads: not enough evidence, 5 rows of this text can show it (at least 8); none "
        "named" in printed
    )
    assert (tmp_path / "attn_L1.png").is_file()


def test_inspect_attention_refuses_a_repeated_sequence_too_short_to_tell_roles_from_chance(
    tmp_path, capsys
):
    """On a 2-token --repeated sequence every head was named induction, previous-token and
    first-token sink at once.
    """
    import inspect_attention

    root = tmp_path / "two"
    cfg = load_config(
        tiny_argv(root, write_corpus(root / "text"), "--model.block_size=2", "--train.max_steps=1")
    )
    train.train(cfg)
    capsys.readouterr()  # the run's own lines
    argv = [
        "--checkpoint",
        str(cfg.run_dir / "ckpt.pt"),
        "--repeated",
        "--out",
        str(tmp_path / "out"),
    ]
    assert_one_line_error(
        error_of(inspect_attention.main, argv, capsys),
        "a context of 2 tokens is too short to tell heads' roles from chance (it takes 7)",
    )
