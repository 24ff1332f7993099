"""Tests for harness/lengths.py and score.py --contexts: a run scored at contexts shorter and longer
than its block_size, end to end on tiny rope and none runs; at 1x the ordinary score, buckets that
add up, positions past the training length equal to one pass of the model, a learned table refused
past its rows, bad values and absurd sizes refused in one line."""

import dataclasses
import errno
import json
import time

import pytest
import torch
import torch.nn.functional as F
from conftest import (
    assert_close,
    assert_one_line_error,
    error_of,
    make_corpus_text,
    run_script,
    tiny_argv,
    write_corpus,
)

import score
import train
from configs import ConfigError, load_config
from harness.lengths import buckets, check_contexts, context_lengths, contexts_cost, score_contexts
from harness.scoring import text_ids
from harness.training import budget
from harness.training.budget import PassCost
from harness.training.checkpoints import load_model
from model import GPT, ModelConfig

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

BLOCK = 32  # the tiny preset's block_size


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_cpu_thread):
    """Tiny runs of each kind of positions (20 steps, Muon as the char preset trains): their
    checkpoints.
    """
    root = tmp_path_factory.mktemp("lengths")
    corpus = write_corpus(root / "text")
    out = {}
    for positions in ("rope", "none", "learned"):
        argv = tiny_argv(
            root,
            corpus,
            "--train.max_steps=20",
            "--train.eval_interval=20",
            "--train.optimizer=muon",
        )
        cfg = load_config(
            [*argv, f"--model.positions={positions}", f"--train.run_name={positions}"]
        )
        train.train(cfg)
        out[positions] = root / "runs" / positions / "ckpt.pt"
    return out


def contexts_json(ckpt, factors: str, capsys) -> dict:
    result = score.main(
        ["--checkpoint", str(ckpt), "--device", "cpu", "--contexts", factors, "--json"]
    )
    assert json.loads(capsys.readouterr().out) == result, (
        "--json prints the result as one object on stdout, and nothing else"
    )
    assert json.loads((ckpt.parent / "contexts.json").read_text(encoding="utf-8")) == result, (
        "contexts.json holds the same"
    )
    return result


def test_buckets_are_cut_at_the_contexts():
    assert buckets([64, 128, 256, 512]) == [(0, 63), (64, 127), (128, 255), (256, 511)]
    assert buckets([16, 32]) == [(0, 15), (16, 31)]


@pytest.mark.parametrize("positions", ["rope", "none"])
def test_contexts_end_to_end(runs, positions, capsys):
    result = contexts_json(runs[positions], "0.5,1,2,4", capsys)
    assert (result["block_size"], result["positions"]) == (BLOCK, positions)
    assert [(label, c["length"]) for label, c in result["contexts"].items()] == [
        ("0.5x", 16),
        ("1x", 32),
        ("2x", 64),
        ("4x", 128),
    ]
    # At 1x: score.py's ordinary loss on the same windows (stride = block_size, as training's val
    # loss reads the text).
    plain = score.main(
        ["--checkpoint", str(runs[positions]), "--device", "cpu", "--stride", str(BLOCK), "--json"]
    )
    capsys.readouterr()
    assert (
        result["contexts"]["1x"]["loss"] == plain["loss"]
        and result["contexts"]["1x"]["tokens"] == plain["tokens"]
    )
    # Every context scores every token after the first once, and its buckets average back to its
    # loss.
    for label, c in result["contexts"].items():
        assert c["tokens"] == plain["tokens"] == sum(b["tokens"] for b in c["buckets"].values()), (
            label
        )
        whole = sum(b["tokens"] * b["loss"] for b in c["buckets"].values()) / c["tokens"]
        assert whole == pytest.approx(c["loss"], rel=1e-9), label
        assert len(c["by_position"]) == c["length"]
    assert list(result["contexts"]["4x"]["buckets"]) == ["0-15", "16-31", "32-63", "64-127"]
    # Under the causal mask a position's loss depends only on what comes before it in its window: by
    # hand, from one pass over the first window at 4x (128 positions, 96 past the training length),
    # then from its first 32 tokens alone.
    model, tokenizer, checkpoint = load_model(runs[positions], torch.device("cpu"))
    ids, _ = text_ids(tokenizer, None, checkpoint)
    window = torch.tensor([ids[: 4 * BLOCK + 1]])  # (1, 129)
    with torch.no_grad():
        logits = model.lm_head(model.hidden(window[:, :-1]))[0]  # (128, V)
        short = model.lm_head(model.hidden(window[:, :BLOCK]))[0]  # (32, V)
    by_hand = F.cross_entropy(logits, window[0, 1:], reduction="none")
    assert_close(
        score_contexts(model, ids[: 4 * BLOCK + 1], [4.0])["contexts"]["4x"]["by_position"],
        by_hand,
        atol=1e-5,
    )
    assert_close(
        by_hand[:BLOCK],
        F.cross_entropy(short, window[0, 1 : BLOCK + 1], reduction="none"),
        atol=1e-5,
    )
    out = score.main(["--checkpoint", str(runs[positions]), "--device", "cpu", "--contexts", "1,4"])
    printed = capsys.readouterr().out
    assert (
        f"{out['contexts']['4x']['loss']:7.4f}" in printed
        and f"{out['contexts']['4x']['buckets']['32-127']['loss']:.4f}" in printed
    )


def test_a_learned_table_is_refused_past_its_rows_in_one_line(runs, capsys):
    result = contexts_json(runs["learned"], "0.5,1", capsys)
    assert list(result["contexts"]) == ["0.5x", "1x"]
    proc = error_of(
        score.main,
        ["--checkpoint", str(runs["learned"]), "--device", "cpu", "--contexts", "1,2"],
        capsys,
    )
    assert_one_line_error(
        proc,
        "--contexts 2 is 64 tokens, past the learned table's 32 positions",
        "give contexts up to 1, or score a run with positions rope or none",
    )
    assert proc.stdout == ""
    proc = run_script(
        "score.py", "--checkpoint", str(runs["learned"]), "--device", "cpu", "--contexts", "2"
    )
    assert_one_line_error(proc, "past the learned table's 32 positions")


def test_bad_contexts_are_one_line(runs, tmp_path, capsys):
    ckpt = ["--checkpoint", str(runs["rope"]), "--device", "cpu"]
    short = tmp_path / "short.txt"
    # 64 characters
    short.write_text(("KING:\nThe king speaks of the crown.\n" * 2)[:64], encoding="utf-8")
    usage = (
        "argument --contexts: takes multiples of the model's block_size above 0, "
        "comma-separated (0.5,1,2,4)"
    )
    cases = [
        (["--contexts", "x"], [usage, "got 'x'"]),
        (["--contexts", ""], [usage]),
        (["--contexts", "1,,2"], [usage]),
        (["--contexts", "0,1"], [usage, "got '0' in '0,1'"]),
        (["--contexts", "-2"], [usage, "got '-2'"]),
        (["--contexts", "inf"], [usage, "got 'inf'"]),
        (["--contexts", "nan"], [usage, "got 'nan'"]),
        (
            ["--contexts", "1,1.0"],
            [f"{usage}, each once; got 1.0 twice in '1,1.0'"],
        ),
        (
            ["--contexts", "0.01"],
            ["--contexts 0.01 is 0 tokens of block_size 32; give at least 0.0312"],
        ),
        (
            ["--contexts", "1,1.01"],
            ["--contexts 1.01 is 32 tokens again; give each length once"],
        ),
        (
            ["--contexts", "1", "--stride", "8"],
            ["--contexts reads each context in separate windows of its own length"],
        ),
        (["--contexts", "1", "--top", "3"], ["leave out --stride and --top"]),
        (
            ["--contexts", "2", "--file", str(short)],
            ["--contexts 2 is 64 tokens, and the text has 64: no window and its next token"],
        ),
    ]
    for argv, needles in cases:
        proc = error_of(score.main, [*ckpt, *argv], capsys)
        assert_one_line_error(proc, *needles)
        assert proc.stdout == ""


def test_the_estimate_times_the_model_s_own_passes(monkeypatch):
    """A small no-mask model scored prefix by prefix: its estimate said 9 s where it took 159 s,
    counting operations at a square product's speed. Timed on a pass of the model itself, the
    estimate lies within a factor 5 of the time taken (a shared machine's noise; it was 7 to 17
    times short)."""
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            n_layer=2,
            n_head=2,
            n_embd=32,
            block_size=BLOCK,
            vocab_size=65,
            positions="rope",
            causal=False,
        )
    ).eval()
    ids = torch.randint(0, 65, (3000,), generator=torch.Generator().manual_seed(0)).tolist()
    factors = [1.0, 4.0]
    lengths = context_lengths(factors, model.cfg, len(ids))
    cost = contexts_cost(model, lengths, len(ids))
    assert cost.call_s > 0 and cost.speed > 0
    estimate = check_contexts(model.cfg, lengths, len(ids), torch.device("cpu"), cost)
    start = time.perf_counter()
    score_contexts(model, ids, factors)
    taken = time.perf_counter() - start
    assert taken / 5 < estimate < taken * 5, f"estimated {estimate:.2f} s, took {taken:.2f} s"


def test_absurd_contexts_are_refused_before_any_pass(monkeypatch):
    rope = ModelConfig(
        n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=65, positions="rope"
    )
    cpu = torch.device("cpu")
    assert context_lengths([1000.0], rope, 10**6) == [32_000]
    # Two windows a pass (LOGITS_PER_BATCH), 2 layers, scores and weighted sum: 2 x 2 x 2 x 32,000^2
    # x 32 = 262 GFLOP, about 4 minutes at 1 GFLOP/s in one pass that cannot be stopped.
    with pytest.raises(
        ConfigError,
        match=r"scoring 2 windows of 32,000 tokens at once would take about 4 minutes on this cpu",
    ):
        check_contexts(rope, [32_000], 10**6, cpu, PassCost(0.0, 1e9))
    monkeypatch.setattr(budget, "device_memory_bytes", lambda device: 2.0**30)
    # the readable path holds (B, H, T, T) scores and weights: 2 x 15 GiB
    manual = dataclasses.replace(rope, attention="manual")
    with pytest.raises(
        ConfigError,
        match=r"scoring 2 windows of 32,000 tokens at once needs about 31 GiB, "
        r"and this cpu has 1 GiB",
    ):
        check_contexts(manual, [32_000], 10**6, cpu, PassCost(0.0, 1e15))
    # The char preset's four contexts on Tiny Shakespeare's val split: seconds, on a CPU that does
    # 20 GFLOP/s.
    char = ModelConfig(
        n_layer=3, n_head=4, n_embd=128, block_size=128, vocab_size=65, positions="rope"
    )
    assert 1 < check_contexts(char, [64, 128, 256, 512], 111_540, cpu, PassCost(0.0, 20e9)) < 60


@pytest.mark.parametrize("causal, softcap", [(True, 0.0), (False, 0.0), (True, 30.0)])
def test_the_memory_check_counts_what_a_readable_pass_holds(causal, softcap):
    """The readable path holds a pass's (B, H, T, T) scores and weights together while the softmax
    runs (and the softcap's tanh a third): counted once, the check allowed a pass that asked for
    twice as much. Measured by tracking every tensor a pass allocates, the peak stays under the
    estimate, and not far under it."""
    from harness.experiments.profiling import PeakMemory
    from harness.lengths import pass_memory_bytes, windows_per_pass
    from harness.scoring import token_losses

    m = ModelConfig(
        n_layer=2,
        n_head=2,
        n_embd=32,
        block_size=BLOCK,
        vocab_size=65,
        positions="rope",
        attention="manual",
        causal=causal,
        softcap=softcap,
    )
    torch.manual_seed(0)
    model, length, n_windows = GPT(m).eval(), 256, 20 if causal else 2
    ids = torch.randint(
        0, 65, (n_windows * length + 1,), generator=torch.Generator().manual_seed(0)
    )
    with PeakMemory() as tracker:
        token_losses(model, ids, length, not causal, context=length)
    estimate = pass_memory_bytes(m, windows_per_pass(m, length, n_windows), length)
    assert estimate / 2 < tracker.peak <= estimate, (
        f"peak {tracker.peak / 2**20:.1f} MiB, estimated {estimate / 2**20:.1f} MiB"
    )


def test_a_file_keeps_the_val_split_s_record_and_each_names_its_text(runs, tmp_path, capsys):
    """contexts.json is what tools.docs_figures reads: scoring a --file wrote over it, and nothing
    said which text it held.
    """
    val = contexts_json(runs["rope"], "1", capsys)
    assert val["text"].startswith("the val split of ")
    other = write_corpus(tmp_path, "other.txt", text=make_corpus_text(4000, seed=7))
    result = score.main(
        [
            "--checkpoint",
            str(runs["rope"]),
            "--device",
            "cpu",
            "--contexts",
            "1",
            "--file",
            str(other),
        ]
    )
    assert (
        f"contexts-other.json: {runs['rope'].parent / 'contexts-other.json'}"
        in capsys.readouterr().out
    )
    assert (
        json.loads((runs["rope"].parent / "contexts-other.json").read_text(encoding="utf-8"))
        == result
    )
    assert (
        result["text"] == str(other)
        and result["contexts"]["1x"]["loss"] != val["contexts"]["1x"]["loss"]
    )
    assert json.loads((runs["rope"].parent / "contexts.json").read_text(encoding="utf-8")) == val


def test_a_full_disk_keeps_the_table_and_running_out_of_memory_names_contexts(
    runs, capsys, monkeypatch
):
    """The table is printed before contexts.json is written, so a full disk loses only the file; and
    a pass that runs out of memory all the same is told to give shorter --contexts, not training's
    flags."""
    argv = ["--checkpoint", str(runs["rope"]), "--device", "cpu", "--contexts", "1,2"]

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(score, "write_atomically", full)
    proc = error_of(score.main, argv, capsys)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith(
        "error: could not save "
    ), proc.stderr
    assert (
        "No space left on device" in proc.stderr
        and " context  tokens    scored    loss |" in proc.stdout
        and "     2x " in proc.stdout
    )

    def out_of_memory(*args):
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 16434428000 bytes. "
            "Error code 12"
        )

    monkeypatch.setattr(score, "score_contexts", out_of_memory)
    proc = error_of(score.main, argv, capsys)
    lines = proc.stderr.strip().splitlines()
    assert (
        proc.returncode == 1
        and "Traceback" not in proc.stderr
        and lines[-1].startswith("error: out of memory (15.3 GiB asked")
    ), lines
    assert "give shorter --contexts" in lines[-1] and "--train.batch_size" not in lines[-1]
