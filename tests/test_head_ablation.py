"""harness/experiments/head_ablation.py and inspect_attention.py --ablate: the leak gap before and
after switching heads off.
"""

import dataclasses
import json
import re
import time

import pytest
import torch
from conftest import assert_one_line_error, error_of, tiny_argv

import inspect_attention
import train
from configs import load_config
from data.tokenizer import CharTokenizer
from harness.cli import run_command
from harness.experiments.head_ablation import measure
from harness.training.runlog import read_metrics
from model import GPT, ModelConfig
from model.measurements import leak

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def test_every_head_off_closes_the_whole_gap_and_the_draws_are_other_heads():
    """With no head left, each position sees only itself: honest and teacher-forced agree, the gap
    closes entirely.
    """
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, causal=False)
    ).eval()
    gen = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randint(0, 65, (2, 16), generator=gen),
            torch.randint(0, 65, (2, 16), generator=gen),
            [3, 9, 15],
        )
    ]
    everything = measure(model, batches, [(0, 0), (0, 1), (1, 0), (1, 1)], draws=0, seed=0)
    assert everything["leak_gap_before"] == leak(model, batches)["loss/leak_gap"] != 0
    assert (
        everything["closed_fraction"] == pytest.approx(1.0, abs=1e-4)
        and everything["random_draws"] == []
    )
    one = measure(model, batches, [(0, 1)], draws=3, seed=0)
    assert [len(d["heads"]) for d in one["random_draws"]] == [1, 1, 1] and all(
        d["heads"] != ["L0H1"] for d in one["random_draws"]
    )
    assert one["random_closed_fraction"] == pytest.approx(
        sum(d["closed_fraction"] for d in one["random_draws"]) / 3
    )
    assert (
        one["each_head"]["L0H1"]
        == one["closed_fraction"]
        == 1 - one["leak_gap_after"] / one["leak_gap_before"]
    )
    with pytest.raises(ValueError, match="only 0 others left"):
        measure(model, batches, [(0, 0), (0, 1), (1, 0), (1, 1)], draws=1, seed=0)


def test_inspect_attention_ablates_heads_of_a_run_and_refuses_bad_heads(
    tmp_path, corpus_file, capsys
):
    argv = tiny_argv(
        tmp_path, corpus_file, "--train.max_steps=5", "--train.eval_interval=5", "--no-mask"
    )
    train.train(load_config(argv))
    source = ["--run", "tiny-no-mask", "--runs-dir", str(tmp_path / "runs"), "--text", "the king"]
    capsys.readouterr()
    out = inspect_attention.main([*source, "--ablate", "L0H1", "--draws", "2"])
    printed = capsys.readouterr().out
    result = json.loads((out / "ablation.json").read_text())
    assert {
        "heads",
        "leak_gap_before",
        "leak_gap_after",
        "closed_fraction",
        "random_closed_fraction",
        "random_draws",
    } <= result.keys()
    logged = [
        row for row in read_metrics(tmp_path / "runs" / "tiny-no-mask") if "loss/leak_gap" in row
    ][-1]["loss/leak_gap"]
    # the run's own val batches, as its evaluation scored them
    assert result["leak_gap_before"] == pytest.approx(logged, abs=1e-6)
    assert result["heads"] == ["L0H1"] and len(result["random_draws"]) == 2
    # the role table's t+1 column, per head
    assert list(result["next_token_weight"]) == ["L0H0", "L0H1", "L1H0", "L1H1"]
    assert all(0 <= w <= 1 for w in result["next_token_weight"].values())
    assert (
        f"{result['closed_fraction']:.1%} of it closed" in printed
        and "as many random other heads, 2 draws" in printed
    )

    chars = CharTokenizer.from_text("the king")
    causal = GPT(
        ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=chars.vocab_size)
    )
    saved = {
        "model": causal.state_dict(),
        "config": {"model": dataclasses.asdict(causal.cfg)},
        "tokenizer": chars.state(),
        "step": 0,
    }
    torch.save(saved, tmp_path / "causal.pt")
    for args, needle in (
        ([*source, "--ablate", "L2H0"], "layer 2 is out of range, the model has layers 0 to 1"),
        ([*source, "--ablate", "L0H7"], "head 7 is out of range"),
        ([*source, "--ablate", "heads"], "'heads' names no head"),
        (
            [
                "--checkpoint",
                str(tmp_path / "causal.pt"),
                "--text",
                "the king",
                "--ablate",
                "next-token",
            ],
            "this one is causal",
        ),
    ):
        assert run_command(inspect_attention.main, args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --ablate") and needle in err[0], err


def test_draws_are_bounded_and_the_leak_gaps_are_estimated_from_the_first(capsys):
    """--draws 100000 ran for days with no bound, estimate or progress line: it takes 0 to 1000, and
    the measurement says how many leak gaps are left and how long they should take, from the first,
    within a factor 5 of the time they take."""
    assert_one_line_error(
        error_of(inspect_attention.main, ["--ablate", "L0H0", "--draws", "100000"], capsys),
        "0 to 1000",
        "100000",
    )
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=65, causal=False)
    ).eval()
    gen = torch.Generator().manual_seed(1)
    batches = [
        (
            torch.randint(0, 65, (8, 64), generator=gen),
            torch.randint(0, 65, (8, 64), generator=gen),
            list(range(0, 64, 4)),
        )
    ]
    leak(model, batches)  # a first pass, so that the timed one is like the others
    said = []
    start = time.perf_counter()
    measure(model, batches, [(0, 1)], draws=6, seed=0, say=said.append)
    taken = time.perf_counter() - start
    found = re.fullmatch(
        r"--ablate: (\d+) more leak gaps to measure, about \d+ s "
        r"\(estimated: the first took ([\d.e+-]+) s\)",
        said[0],
    )
    # the named heads, the draws, each head, each layer
    assert found and int(found[1]) == 1 + 6 + 4 + 2, said
    estimate = (int(found[1]) + 1) * float(found[2])
    assert taken / 5 < estimate < taken * 5, f"estimated {estimate:.2f} s, took {taken:.2f} s"
