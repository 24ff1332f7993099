"""Tests for score.py and harness/scoring.py: windows that score every token once, a hand
calculation, transformers' own sliding-window computation, the honest path of a no-mask model, and
one-line errors."""

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys

import huggingface_hub
import pytest
import torch
import torch.nn.functional as F
from conftest import (
    REPO_ROOT,
    assert_close,
    assert_one_line_error,
    error_of,
    gpt2_encoding_or_skip,
    import_or_skip,
    make_corpus_text,
    run_script,
    save_random_gpt2,
    tiny_argv,
    write_corpus,
)

import score
import train
from configs import load_config
from data.corpus import DataError, load_corpus
from data.prepare import TRAIN_FRACTION
from data.tokenizer import CharTokenizer, GPT2Tokenizer
from harness.scoring import Window, score_ids, surprises, text_ids, token_losses, windows
from harness.training.checkpoints import load_model
from model import GPT, ModelConfig

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_cpu_thread):
    """A 2-step tiny run (context 32 characters): scoring needs a checkpoint and its corpus, not a
    good model.
    """
    root = tmp_path_factory.mktemp("score")
    corpus = write_corpus(root / "text")
    train.train(
        load_config(tiny_argv(root, corpus, "--train.max_steps=2", "--train.eval_interval=2"))
    )
    return {
        "root": root,
        "ckpt": root / "runs" / "tiny" / "ckpt.pt",
        "text": corpus.read_text("utf-8"),
    }


def score_json(argv: list[str], capsys) -> dict:
    result = score.main([*argv, "--json"])
    out = capsys.readouterr().out
    assert json.loads(out) == result, (
        "--json prints the result as one object on stdout, and nothing else"
    )
    return result


# 1. Windows: every token after the first scored once, with the context its window gives


def test_windows_by_hand():
    # 10 tokens, context 4, stride 2: inputs 0-3 score tokens 1-4; inputs 2-5 add 5 and 6 (their
    # targets 2 and 3); inputs 4-7 add 7 and 8; inputs 6-8 add 9.
    assert windows(10, 4, 2) == [
        Window(0, 5, 0),
        Window(2, 7, 2),
        Window(4, 9, 2),
        Window(6, 10, 2),
    ]
    # separate blocks, as training's val loss
    assert windows(10, 4, 4) == [Window(0, 5, 0), Window(4, 9, 0), Window(8, 10, 0)]
    # stride 1: each new token with a full context
    assert windows(10, 4, 1)[1:3] == [Window(1, 6, 3), Window(2, 7, 3)]
    assert windows(3, 4, 2) == [Window(0, 3, 0)]  # shorter than the context: one window


@pytest.mark.parametrize(
    ("n", "block_size", "stride"),
    [(2, 4, 1), (37, 8, 1), (37, 8, 3), (37, 8, 8), (64, 8, 5), (17, 16, 16), (200, 7, 4)],
)
def test_every_token_after_the_first_is_scored_once(n, block_size, stride):
    scored = []
    for i, w in enumerate(windows(n, block_size, stride)):
        assert w.begin == i * stride and 2 <= w.end - w.begin <= block_size + 1
        # the tokens this window scores, each from ids[w.begin:p]
        for p in range(w.begin + 1 + w.first, w.end):
            assert p - w.begin >= (p if i == 0 else block_size - stride + 1), (
                f"token {p} scored with too little context"
            )
            scored.append(p)
    assert scored == list(range(1, n)), f"scored {scored}"


# 2. A hand calculation on a tiny model


TINY = ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=4, vocab_size=7)
IDS = [3, 1, 4, 1, 5, 2, 6, 5, 3, 5]
# With context 4 and stride 2, each target and the tokens its window shows the model, written out:
# tokens 1-4 from the start of the text, 5 and 6 from token 2 on, 7 and 8 from token 4 on, 9 from
# token 6 on. (first token of the context, target)
HAND = [(0, 1), (0, 2), (0, 3), (0, 4), (2, 5), (2, 6), (4, 7), (4, 8), (6, 9)]


def tiny_gpt(causal: bool = True) -> GPT:
    torch.manual_seed(0)
    model = GPT(TINY).eval()
    with torch.no_grad():  # weights larger than at init, so that attention moves the predictions
        for name, p in model.named_parameters():
            if not name.startswith(("blocks.0.ln", "blocks.1.ln", "ln_f")):
                p.normal_(0, 0.3)
    if causal:
        return model
    no_mask = GPT(dataclasses.replace(TINY, causal=False)).eval()
    no_mask.load_state_dict(model.state_dict())
    return no_mask


def by_hand(model: GPT) -> torch.Tensor:
    """Each target's loss from one pass over its context alone: -log softmax(logits at the context's
    last position)[target].
    """
    with torch.no_grad():
        return torch.stack(
            [
                -model(torch.tensor([IDS[start:p]]))[0][0, -1].log_softmax(-1)[IDS[p]]
                for start, p in HAND
            ]
        )


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "no-mask"])
def test_token_losses_equal_a_hand_calculation(causal):
    model = tiny_gpt(causal)
    expected = by_hand(model)
    assert expected.std() > 0.1, "the losses should differ, or the test shows little"
    assert_close(token_losses(model, torch.tensor(IDS), 2, honest=not causal), expected, atol=1e-5)


def test_a_causal_model_scores_the_same_either_way_and_a_no_mask_model_does_not():
    causal, no_mask = tiny_gpt(True), tiny_gpt(False)
    ids = torch.tensor(IDS)
    assert_close(
        token_losses(causal, ids, 2, honest=True),
        token_losses(causal, ids, 2, honest=False),
        atol=1e-5,
    )
    # Read whole, a no-mask model sees the targets: the honest path gives other numbers, those of
    # the hand calculation.
    assert (token_losses(no_mask, ids, 2, honest=False) - by_hand(no_mask)).abs().max() > 0.1
    honest = score_ids(no_mask, CharTokenizer(list("abcdefg")), IDS, 2)
    assert honest.loss == pytest.approx(by_hand(no_mask).double().mean().item(), rel=1e-6)


# Scores 400 windows of a model with GPT-2's vocabulary (13 MB of logits each) in a fresh
# interpreter and prints how far the peak resident memory rose. Each window's few losses used to be
# kept as a tensor of their own; with glibc's default malloc such a survivor pins the heap above the
# freed logits, and the heap grew by the logits with every window (the val split of the base
# preset's run peaked at 3.7 GB, an 11 MB text passed 23 GB).
SCORING_MEMORY_SCRIPT = """
import resource, sys, torch
sys.path.insert(0, ".")
from harness.scoring import token_losses
from model import GPT, ModelConfig
torch.manual_seed(0)
model = GPT(ModelConfig(n_layer=1, n_head=1, n_embd=8, block_size=64, vocab_size=50257)).eval()
ids = torch.randint(0, 50257, (400 * 32 + 33,))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
losses = token_losses(model, ids, stride=32, honest=False)
print(len(losses), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_scoring_memory_stays_flat_over_many_windows():
    proc = subprocess.run(
        [sys.executable, "-c", SCORING_MEMORY_SCRIPT],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    scored, risen_mib = map(int, proc.stdout.split())
    assert scored == 400 * 32 + 32 and risen_mib < 500, (
        f"peak memory rose {risen_mib} MiB over 400 windows"
    )


def test_score_ids_mean_perplexity_and_bits_per_byte():
    # id 2 is e acute, two bytes in UTF-8
    tokenizer = CharTokenizer(["a", "b", "\u00e9", "d", "\n", "e", "f"])
    model = tiny_gpt()
    result = score_ids(model, tokenizer, IDS, 2)
    mean = by_hand(model).double().mean().item()
    assert (result.tokens, len(result.losses)) == (9, 9)
    assert result.loss == pytest.approx(mean, rel=1e-6)
    assert result.perplexity == pytest.approx(math.exp(mean), rel=1e-6)
    # 9 tokens scored, one of them 2 bytes
    assert result.bits_per_byte == pytest.approx(mean * 9 / (10 * math.log(2)), rel=1e-6)


# 3. score.py on a run


def test_val_split_by_default_and_the_same_text_from_a_file(run, tmp_path, capsys):
    text = run["text"]
    val = text[int(len(text) * TRAIN_FRACTION) :]  # the val split: the last 10% of the text
    file = tmp_path / "val.txt"
    file.write_text(val, encoding="utf-8")
    by_default = score_json(["--checkpoint", str(run["ckpt"]), "--device", "cpu"], capsys)
    assert by_default == score_json(
        ["--checkpoint", str(run["ckpt"]), "--device", "cpu", "--file", str(file)], capsys
    )
    assert set(by_default) == {"tokens", "loss", "perplexity", "bits_per_byte"}
    # one token per character, every one after the first
    assert by_default["tokens"] == len(val) - 1
    assert by_default["perplexity"] == pytest.approx(math.exp(by_default["loss"]), rel=1e-12)
    # ASCII: bytes = tokens
    assert by_default["bits_per_byte"] == pytest.approx(by_default["loss"] / math.log(2), rel=1e-12)
    model, tokenizer, _ = load_model(run["ckpt"])
    # the default stride: half of 32
    losses = token_losses(model, torch.tensor(tokenizer.encode(val)), 16, honest=False)
    assert by_default["loss"] == pytest.approx(losses.double().mean().item(), rel=1e-9)


def test_printed_result_and_the_most_surprising_tokens(run, tmp_path, capsys):
    text = run["text"][:400]
    file = tmp_path / "some.txt"
    file.write_text(text, encoding="utf-8")
    result = score.main(
        [
            "--checkpoint",
            str(run["ckpt"]),
            "--device",
            "cpu",
            "--file",
            str(file),
            "--stride",
            "8",
            "--top",
            "3",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"# {file}: windows of 32 tokens, stride 8"
    assert out[2:6] == [
        f"tokens scored   {len(text) - 1}",
        f"loss            {result['loss']:.4f} nats per token",
        f"perplexity      {result['perplexity']:.3f}",
        f"bits per byte   {result['bits_per_byte']:.4f}",
    ]
    model, tokenizer, _ = load_model(run["ckpt"])
    losses = token_losses(model, torch.tensor(tokenizer.encode(text)), 8, honest=False)
    worst = losses.argsort(descending=True)[:3].tolist()
    assert [row["loss"] for row in result["top"]] == pytest.approx(losses[worst].tolist(), abs=1e-6)
    for row, i in zip(result["top"], worst, strict=True):
        p = i + 1  # losses[i] is the loss of character p
        assert (row["token"], row["context"], row["line"]) == (
            text[p],
            text[:p][-40:],
            text[:p].count("\n") + 1,
        )
        assert f"line {row['line']:<6} {row['context']!r} -> {row['token']!r}" in "\n".join(out[7:])


class CountingTokenizer:
    """A tokenizer that counts the tokens it decodes: what --top costs, whatever the machine's
    speed.
    """

    def __init__(self, tokenizer):
        self.tokenizer, self.decoded = tokenizer, 0

    def decode(self, ids: list[int]) -> str:
        self.decoded += len(ids)
        return self.tokenizer.decode(ids)


@pytest.mark.parametrize("tokenizer", ["char", "gpt2"])
def test_every_surprise_costs_the_same_whatever_the_length_of_the_text(tokenizer):
    """--top N used to decode the whole text before each of its N rows (N x N / 2 tokens: --top
    100000000 on a 200K-token file ran for hours); now the rows decode a bounded window each, and
    every row matches what the whole prefix gives, across lines and characters of several UTF-8
    bytes (split across gpt2 tokens: é, 漢, 🙂)."""
    text = "".join(
        f"line {i}: caf\u00e9 \u6f22\u5b57 \U0001f642 {'ab' * (i % 7)}\n" for i in range(100)
    )
    if tokenizer == "gpt2":
        gpt2_encoding_or_skip()
        tok = GPT2Tokenizer()
    else:
        tok = CharTokenizer(sorted(set(text)))
    ids = tok.encode(text)
    losses = torch.rand(len(ids) - 1, generator=torch.Generator().manual_seed(0))
    counting = CountingTokenizer(tok)
    rows = surprises(counting, ids, losses, 10**8)  # every token, as --top 100000000 asks
    assert len(rows) == len(ids) - 1
    assert counting.decoded < 200 * len(ids), (
        f"{counting.decoded:,} tokens decoded for a text of {len(ids):,}"
    )
    order = losses.argsort(descending=True).tolist()
    for row, i in zip(rows, order, strict=True):
        # the whole text before the token, as the rows used to be made
        before = tok.decode(ids[: i + 1])
        assert (row["line"], row["context"], row["token"]) == (
            before.count("\n") + 1,
            before[-40:],
            tok.decode([ids[i + 1]]),
        )


def test_no_mask_checkpoint_is_scored_from_prefixes_and_says_why(run, tmp_path, capsys):
    checkpoint = torch.load(run["ckpt"], weights_only=True)
    checkpoint["config"]["model"]["causal"] = False  # the same weights, read without the mask
    path = tmp_path / "no-mask.pt"
    torch.save(checkpoint, path)
    file = tmp_path / "short.txt"
    file.write_text(run["text"][:90], encoding="utf-8")
    result = score.main(
        ["--checkpoint", str(path), "--device", "cpu", "--file", str(file), "--json"]
    )
    err = capsys.readouterr().err
    assert (
        "trained without the causal mask" in err and "scored from the tokens before it alone" in err
    )
    model, tokenizer, _ = load_model(path)
    ids = torch.tensor(tokenizer.encode(run["text"][:90]))
    assert result["loss"] == pytest.approx(
        token_losses(model, ids, 16, honest=True).double().mean().item(), rel=1e-9
    )
    # after 2 steps attention moves little, but it does
    forced = token_losses(model, ids, 16, honest=False).double().mean().item()
    assert result["loss"] != pytest.approx(forced, rel=1e-6)


# 4. Against transformers


@pytest.mark.parametrize("stride", [16, 64, 5])
def test_equal_to_transformers_sliding_window_perplexity(stride, tmp_path, capsys, monkeypatch):
    """The method of Hugging Face's "Perplexity of fixed-length models", with transformers' own
    model and loss.

    Two changes to the page's loop, both to score every token after the first once: a window holds
    n_positions inputs and the token after the last (the labels are passed shifted already, as
    shift_labels), and the count is exact (the page subtracts one label per window for the shift,
    right only for the first window).
    """
    transformers = import_or_skip(
        "transformers", "transformers is a test dependency: pip install -r requirements-dev.txt"
    )
    encoding = gpt2_encoding_or_skip()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    folder = save_random_gpt2(tmp_path / "gpt2")
    file = write_corpus(tmp_path / "text", text=make_corpus_text(1500, seed=3)[:1500])
    ours = score.main(
        [
            "--pretrained",
            str(folder),
            "--file",
            str(file),
            "--stride",
            str(stride),
            "--device",
            "cpu",
            "--json",
        ]
    )
    capsys.readouterr()

    model = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    encodings = torch.tensor([encoding.encode_ordinary(file.read_text(encoding="utf-8"))])
    max_length, seq_len = model.config.n_positions, encodings.size(1)
    nll_sum, n_tokens, prev_end_loc = 0.0, 0, 1  # token 0 is never a target
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length + 1, seq_len)
        trg_len = end_loc - prev_end_loc  # the tokens no earlier window scored
        input_ids, target_ids = (
            encodings[:, begin_loc : end_loc - 1],
            encodings[:, begin_loc + 1 : end_loc].clone(),
        )
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            neg_log_likelihood = model(input_ids, labels=target_ids, shift_labels=target_ids).loss
        num_loss_tokens = (target_ids != -100).sum().item()  # exact
        nll_sum += neg_log_likelihood.item() * num_loss_tokens
        n_tokens += num_loss_tokens
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    assert n_tokens == seq_len - 1 == ours["tokens"] and seq_len > 4 * max_length
    assert ours["loss"] == pytest.approx(nll_sum / n_tokens, rel=1e-4)
    assert ours["perplexity"] == pytest.approx(math.exp(nll_sum / n_tokens), rel=1e-4)
    # token losses spread widely, so a target off by one would move the mean far more than 1e-4
    with torch.no_grad():
        first = F.cross_entropy(
            model(encodings[:, :max_length]).logits[0, :-1],
            encodings[0, 1:max_length],
            reduction="none",
        )
    assert first.std() > 0.5, f"token losses {first.tolist()}"


# 5. Bad input: one line and exit code 2


def test_bad_input_is_one_line(run, tmp_path, capsys):
    ckpt = ["--checkpoint", str(run["ckpt"]), "--device", "cpu"]
    missing, empty, binary, zeros, unseen, one = (
        tmp_path / name for name in ("missing", "empty", "binary", "zeros", "unseen", "one")
    )
    empty.write_text(" \n", encoding="utf-8")
    binary.write_bytes(bytes(range(256)) * 4)  # not UTF-8
    zeros.write_bytes(b"KING:\x00\x00\x00\x00")  # UTF-8, but NUL bytes: no text holds them
    # neither the euro sign nor # is in the corpus
    unseen.write_text("KING:\nThe king speaks\nof the \u20ac and the #", encoding="utf-8")
    one.write_text("K", encoding="utf-8")
    checkpoint = torch.load(run["ckpt"], weights_only=True)
    checkpoint["model"]["ln_f.weight"][3] = float("nan")  # a diverged run's weights
    nan = tmp_path / "nan.pt"
    torch.save(checkpoint, nan)
    cases = [
        ([*ckpt, "--file", str(missing)], [f"--file {missing} does not exist"]),
        ([*ckpt, "--file", str(tmp_path)], [f"--file {tmp_path} is not a regular file"]),
        ([*ckpt, "--file", str(empty)], [f"--file {empty} is empty"]),
        (
            [*ckpt, "--file", str(binary)],
            [f"--file {binary} is not UTF-8 text (bad byte at offset 128)"],
        ),
        ([*ckpt, "--file", str(zeros)], [f"--file {zeros} is binary (it holds NUL bytes)"]),
        (
            [*ckpt, "--file", str(unseen)],
            [f"{unseen}, line 3: 2 character(s) not in the training vocabulary: '#\u20ac'"],
        ),
        ([*ckpt, "--file", str(one)], ["the text is 1 token long; scoring needs at least 2"]),
        (
            [*ckpt, "--stride", "33"],
            ["--stride 33 is longer than the model's context; give 1 to 32 tokens"],
        ),
        ([*ckpt, "--stride", "0"], ["argument --stride: must be at least 1, got 0"]),
        ([*ckpt, "--stride", "-4"], ["argument --stride: must be at least 1, got -4"]),
        ([*ckpt, "--top", "0"], ["argument --top: must be at least 1, got 0"]),
        (["--checkpoint", str(tmp_path / "none.pt")], ["no checkpoint at"]),
        (
            ["--checkpoint", str(nan), "--device", "cpu"],
            ["the model's logits are not finite (NaN or inf)"],
        ),
    ]
    for argv, needles in cases:
        proc = error_of(score.main, argv, capsys)
        assert_one_line_error(proc, *needles)
        assert proc.stdout == ""


def test_script_is_one_line_on_a_user_error(run, tmp_path):
    proc = run_script(
        "score.py",
        "--checkpoint",
        str(run["ckpt"]),
        "--device",
        "cpu",
        "--file",
        str(tmp_path / "nope.txt"),
    )
    assert_one_line_error(proc, f"--file {tmp_path / 'nope.txt'} does not exist")


@pytest.mark.skipif(
    not os.path.exists("/dev/full"),
    reason="needs /dev/full, a device every write to fails with ENOSPC",
)
def test_a_result_that_cannot_be_written_is_exit_code_141(run):
    """`python score.py --json > /dev/full` exited 0 with its result silently dropped: the check of
    the stream took the failing write for a descriptor the user closed. A full disk behind stdout is
    lost output: exit code 141, as from | head."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [
                sys.executable,
                "score.py",
                "--checkpoint",
                str(run["ckpt"]),
                "--device",
                "cpu",
                "--json",
            ],
            cwd=REPO_ROOT,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 141 and proc.stderr == "", (
        f"exit code {proc.returncode}, stderr:\n{proc.stderr}"
    )


def test_ctrl_c_stops_honest_scoring_with_exit_code_130(run, tmp_path):
    """A model without the mask is scored a pass per token (minutes on a long text): Ctrl-C ends it
    at the next pass.
    """
    checkpoint = torch.load(run["ckpt"], weights_only=True)
    checkpoint["config"]["model"]["causal"] = False  # the same weights, read without the mask
    torch.save(checkpoint, tmp_path / "no-mask.pt")
    (tmp_path / "long.txt").write_text(run["text"] * 20, encoding="utf-8")
    command = [
        sys.executable,
        "score.py",
        "--checkpoint",
        str(tmp_path / "no-mask.pt"),
        "--file",
        str(tmp_path / "long.txt"),
    ]
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr.readline().startswith(
            "note: this model was trained without the causal mask"
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip().splitlines()[-1] == "interrupted", (
        f"exit code {proc.returncode}, stderr:\n{err}"
    )
    # no score printed as if the text had been read whole
    assert "Traceback" not in err and out == ""


def test_a_run_trained_on_a_folder_is_scored_on_its_val_split(tmp_path):
    """text_ids took a folder for a corpus that "no longer exists" (it asked is_file()): every
    folder run was refused. It scores the run's val split, and refuses once the folder's text has
    changed."""
    folder = tmp_path / "f"
    for i in range(3):
        write_corpus(folder, f"part{i}.txt", make_corpus_text(3000, seed=i))
    train.train(
        load_config(tiny_argv(tmp_path, folder, "--train.max_steps=2", "--train.eval_interval=2"))
    )
    _, tokenizer, checkpoint = load_model(tmp_path / "runs" / "tiny" / "ckpt.pt")
    corpus = load_corpus(load_config(tiny_argv(tmp_path, folder)).data)
    ids, described = text_ids(tokenizer, None, checkpoint)
    # the last document
    assert ids == corpus.val.tolist() == tokenizer.encode("\n\n" + make_corpus_text(3000, seed=2))
    assert described == f"the val split of {folder}"
    (folder / "part0.txt").write_text("other text, in the letters of the same vocabulary")
    with pytest.raises(
        DataError,
        match=f"{folder} has changed since the run trained on it, .*score a text with --file PATH",
    ):
        text_ids(tokenizer, None, checkpoint)


def test_a_run_resumed_from_another_folder_with_a_relative_data_file_is_scored_from_anywhere(
    tmp_path, monkeypatch, capsys
):
    """The run's config stored --data-file as typed: trained in one folder and resumed from another,
    each with a relative path, then scored from a third, score.py said the corpus no longer existed.
    The path is kept resolved."""
    corpus = write_corpus(tmp_path / "text")
    short = [
        "--config",
        "tiny",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--device",
        "cpu",
    ]
    monkeypatch.chdir(tmp_path / "text")
    train.train(
        load_config(
            [*short, "--data-file", "corpus.txt", "--train.max_steps=2", "--train.eval_interval=2"]
        )
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    resumed = [
        "--data-file",
        "../text/corpus.txt",
        "--train.max_steps=4",
        "--train.eval_interval=2",
        "--resume",
    ]
    train.train(load_config([*short, *resumed]))
    run = tmp_path / "runs" / "tiny"
    assert json.loads((run / "config.json").read_text())["data"]["path"] == str(corpus)
    monkeypatch.chdir(REPO_ROOT)
    capsys.readouterr()
    result = score_json(
        ["--runs-dir", str(tmp_path / "runs"), "--run", "tiny", "--device", "cpu"], capsys
    )
    assert (
        result["tokens"]
        == len(load_corpus(load_config([*short, "--data-file", str(corpus)]).data).val) - 1
    )
