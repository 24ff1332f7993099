"""The GPT-2 commands: sample.py and inspect_attention.py --pretrained, train.py --init-from,
export_gpt2.py, break_gpt2.py.

Every GPT-2 here is a small random one that transformers saves into tmp_path, or a tiny run of ours
on the gpt2 tokenizer, exported; no test reaches the hub. Errors are checked in-process through
run_command, which is what each script's __main__ calls.
"""

import dataclasses
import json
import os
import shutil
import signal

import pytest
import torch
from conftest import (
    assert_close,
    assert_one_line_error,
    error_of,
    gpt2_encoding_or_skip,
    import_or_skip,
    save_random_gpt2,
    tiny_argv,
    write_corpus,
)

transformers = import_or_skip(
    "transformers", "transformers is a test dependency: pip install -r requirements-dev.txt"
)
import huggingface_hub  # noqa: E402  (installed with transformers)

import break_gpt2  # noqa: E402
import export_gpt2  # noqa: E402
import inspect_attention  # noqa: E402
import sample  # noqa: E402
import train  # noqa: E402
from configs import load_config  # noqa: E402
from data.corpus import load_corpus  # noqa: E402
from harness.gpt2 import GPT2_VOCAB_SIZE, build, load_pretrained  # noqa: E402
from harness.training.checkpoints import load_model, read_checkpoint  # noqa: E402
from harness.training.evaluation import estimate_loss, make_eval_set  # noqa: E402
from harness.training.runtime import setup_runtime  # noqa: E402
from harness.training.starting_weights import initial_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_cpu_thread", "offline")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A random GPT-2 with 2 layers of 2 heads, 32 wide, 64 positions, saved by transformers."""
    gpt2_encoding_or_skip()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=GPT2_VOCAB_SIZE
    )
    folder = tmp_path_factory.mktemp("gpt2")
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("text"))


def gpt2_run(root, corpus, *extra: str) -> list[str]:
    """train.py's argv for a tiny run on the gpt2 tokenizer (2 steps)."""
    return tiny_argv(
        root,
        corpus,
        "--data.tokenizer=gpt2",
        "--train.max_steps=2",
        "--train.eval_interval=2",
        *extra,
    )


def test_sample_continues_a_prompt_with_gpt2(gpt2_folder, capsys):
    samples = sample.main(
        [
            "--pretrained",
            str(gpt2_folder),
            "--prompt",
            "Hello there",
            "--max-new-tokens",
            "5",
            "--num-samples",
            "2",
        ]
    )
    assert len(samples) == 2 and all(
        s.startswith("Hello there") and len(s) > len("Hello there") for s in samples
    )
    assert "pretrained GPT-2" in capsys.readouterr().out


def test_greedy_sampling_is_transformers_greedy_search_token_for_token(tmp_path, capsys):
    """sample.py --temperature 0 on a GPT-2 folder gives the tokens of transformers'
    generate(do_sample=False).
    """
    encoding = gpt2_encoding_or_skip()
    # weights at std 0.2: greedy search wanders instead of repeating one token
    folder = save_random_gpt2(tmp_path / "gpt2")
    prompt = encoding.encode_ordinary("ROMEO: But soft, what light")
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    theirs = hf.generate(
        torch.tensor([prompt]),
        max_new_tokens=30,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )[0, len(prompt) :]
    model, _, _ = load_pretrained(folder)
    ours = model.generate(torch.tensor([prompt]), 30, temperature=0)[0, len(prompt) :]
    assert ours.tolist() == theirs.tolist()
    assert len(set(theirs.tolist())) > 10, "greedy search should wander, or the test shows little"
    args = [
        "--pretrained",
        str(folder),
        "--prompt",
        "ROMEO: But soft, what light",
        "--temperature",
        "0",
        "--max-new-tokens",
        "30",
    ]
    # transformers' tokens came from the CPU; a card's TF32 matmuls round otherwise, and greedy
    # search follows
    args += ["--device", "cpu"]
    assert (
        sample.main([*args, "--seed", "1"])
        == [encoding.decode(prompt + theirs.tolist())]
        == sample.main([*args, "--seed", "2"])
    )
    capsys.readouterr()


def test_pretrained_errors_are_one_line(gpt2_folder, tmp_path, capsys):
    assert_one_line_error(
        error_of(sample.main, ["--pretrained", "gpt2"], capsys), "gpt2", "hf download"
    )
    assert_one_line_error(
        error_of(sample.main, ["--pretrained", str(gpt2_folder), "--run", "mine"], capsys),
        "not allowed with",
    )
    assert_one_line_error(
        error_of(inspect_attention.main, ["--pretrained", str(tmp_path)], capsys), "config.json"
    )


def test_inspect_gpt2_writes_grids_a_self_contained_page_and_names_heads(
    gpt2_folder, tmp_path, monkeypatch, capsys
):
    # 4 heads: too many for one picture each
    monkeypatch.setattr(inspect_attention, "PER_HEAD_PICTURES_UP_TO", 2)
    out = inspect_attention.main(
        [
            "--pretrained",
            str(gpt2_folder),
            "--out",
            str(tmp_path / "out"),
            "--text",
            "To be, or not",
        ]
    )
    assert sorted(p.name for p in out.iterdir()) == ["attention.html", "attn_L0.png", "attn_L1.png"]
    page = (out / "attention.html").read_text()
    assert " src=" not in page, "the page must carry its JavaScript, not fetch it"
    assert "CircuitsVis.render" in page and all(
        f"L{layer}H{head}" in page for layer in (0, 1) for head in (0, 1)
    )
    printed = capsys.readouterr().out
    table = [line for line in printed.splitlines() if line.startswith("| ") and line[2].isdigit()]
    entropies = [float(line.split("|")[3]) for line in table]
    assert len(table) == 4 and entropies == sorted(entropies), (
        "one row per head, the most focused first"
    )
    # 5 tokens
    assert (
        "previous-token heads: not enough evidence, 4 rows of this text can show it (at least 8); "
        "none named" in printed
    )


def test_init_from_starts_from_gpt2_cropped_to_the_preset_context(gpt2_folder, corpus, tmp_path):
    cfg = load_config(
        gpt2_run(tmp_path, corpus, "--init-from", str(gpt2_folder), "--model.dropout=0.1")
    )
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=GPT2_VOCAB_SIZE))
    cfg, model = initial_model(cfg, setup_runtime(cfg.train))
    pretrained, _, _ = load_pretrained(gpt2_folder)
    assert (
        cfg.model.n_embd,
        cfg.model.block_size,
        cfg.model.qkv_bias,
        cfg.model.gelu,
        cfg.model.dropout,
    ) == (32, 32, True, "tanh", 0.1)
    assert model.pos_emb.weight.shape == (32, 32) and model.lm_head.weight is model.tok_emb.weight
    idx = torch.randint(0, GPT2_VOCAB_SIZE, (2, 32), generator=torch.Generator().manual_seed(0))
    assert_close(
        model.eval()(idx)[0],
        pretrained(idx)[0],
        atol=1e-5,
        msg="cropped model vs GPT-2 on the first 32 positions",
    )


def test_init_from_run_trains_resumes_samples_and_inspects(gpt2_folder, corpus, tmp_path, capsys):
    argv = gpt2_run(tmp_path, corpus, "--init-from", str(gpt2_folder), "--run-name", "ft")
    first = train.train(load_config(argv))
    saved = json.loads((tmp_path / "runs" / "ft" / "config.json").read_text())
    assert (
        saved["model"]["qkv_bias"]
        and saved["model"]["gelu"] == "tanh"
        and saved["train"]["init_from"] == str(gpt2_folder)
    )
    resumed = train.train(load_config([*argv, "--train.max_steps=4", "--resume"]))
    assert resumed["stopped_at"] is None and resumed["loss/val"] != first["loss/val"]
    model, _, checkpoint = load_model(tmp_path / "runs" / "ft" / "ckpt.pt")
    assert checkpoint["step"] == 4 and model.cfg.qkv_bias
    assert sample.main(
        [
            "--run",
            "ft",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--max-new-tokens",
            "3",
            "--prompt",
            "KING",
        ]
    )[0].startswith("KING")
    assert (
        inspect_attention.main(["--run", "ft", "--runs-dir", str(tmp_path / "runs")])
        / "attention.html"
    ).is_file()


@pytest.fixture(scope="module")
def unscaled_folder(tmp_path_factory):
    """A random GPT-2 like gpt2_folder, whose attention scores are not divided by sqrt(head_size),
    as export_gpt2.py writes a --no-scale run.

    Its weights are 10 times larger than GPT-2's initial ones, so that attention is far from uniform
    and the scale changes the loss.
    """
    gpt2_encoding_or_skip()
    torch.manual_seed(1)
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_head=2,
        n_embd=32,
        n_positions=64,
        vocab_size=GPT2_VOCAB_SIZE,
        scale_attn_weights=False,
        initializer_range=0.2,
    )
    folder = tmp_path_factory.mktemp("unscaled")
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("which", "flags", "causal", "scaled"),
    [
        ("unscaled", [], True, False),
        ("unscaled", ["--no-mask"], False, False),
        ("scaled", [], True, True),
        ("scaled", ["--no-scale"], True, False),
    ],
)
def test_init_from_keeps_the_weights_switches_unless_an_ablation_is_asked(
    gpt2_folder, unscaled_folder, corpus, tmp_path, which, flags, causal, scaled
):
    folder = unscaled_folder if which == "unscaled" else gpt2_folder
    cfg = load_config(gpt2_run(tmp_path, corpus, "--init-from", str(folder), *flags))
    run_dir = cfg.run_dir
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=GPT2_VOCAB_SIZE))
    cfg, model = initial_model(cfg, setup_runtime(cfg.train))
    assert (cfg.model.causal, cfg.model.scaled) == (causal, scaled)
    head_size = cfg.model.n_embd // cfg.model.n_head
    assert all(
        (block.attn.causal, block.attn.scale) == (causal, head_size**-0.5 if scaled else 1.0)
        for block in model.blocks
    )
    assert cfg.run_dir == run_dir  # named from the flags given, so that --resume finds it


def test_unscaled_gpt2_fine_tunes_unscaled_from_its_own_val_loss(unscaled_folder, corpus, tmp_path):
    """Step 0 evaluates the weights as they were exported: the same val loss as the pretrained model
    on the same batches.
    """
    argv = gpt2_run(tmp_path, corpus, "--init-from", str(unscaled_folder), "--run-name", "ft")
    train.train(load_config(argv))
    saved = json.loads((tmp_path / "runs" / "ft" / "config.json").read_text())
    assert saved["model"]["scaled"] is False and saved["model"]["causal"] is True
    cfg = load_config(argv)
    corpus_data = load_corpus(cfg.data)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=GPT2_VOCAB_SIZE))
    runtime = setup_runtime(cfg.train)
    pretrained, _, _ = load_pretrained(unscaled_folder)
    want = estimate_loss(
        pretrained, make_eval_set(corpus_data, corpus_data.tokenizer, cfg).batches["val"], runtime
    )
    step0 = next(
        m for m in read_run_metrics(tmp_path / "runs" / "ft") if m["step"] == 0 and "loss/val" in m
    )
    assert step0["loss/val"] == pytest.approx(want, abs=1e-6)
    # what the run would have started from had it switched scaling on
    scaled = dataclasses.replace(pretrained.cfg, scaled=True)
    other = estimate_loss(
        build(scaled, pretrained.state_dict(), "test"),
        make_eval_set(corpus_data, corpus_data.tokenizer, cfg).batches["val"],
        runtime,
    )
    # 100 times the tolerance above: the switch matters on these weights, so that check can tell
    assert abs(other - want) > 1e-4


def test_init_from_run_resumes_without_its_folder(unscaled_folder, corpus, tmp_path, monkeypatch):
    """Stopped at step 2 and resumed after the folder it started from is gone: the numbers of a run
    never stopped.
    """
    folder = tmp_path / "export"
    shutil.copytree(unscaled_folder, folder)
    args = [
        "--init-from",
        str(folder),
        "--run-name",
        "ft",
        "--train.max_steps=4",
        "--model.dropout=0.1",
    ]
    train.train(load_config(gpt2_run(tmp_path / "full", corpus, *args)))
    argv = gpt2_run(tmp_path / "resumed", corpus, *args)
    real, calls = train.draw_micro_batches, [0]

    def draw(*a, **kw):  # Ctrl-C during the second step
        calls[0] += 1
        if calls[0] == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(train, "draw_micro_batches", draw)
        assert train.train(load_config(argv))["stopped_at"] == 2
    shutil.rmtree(folder)
    real_load, ckpt_reads = torch.load, []

    def load(path, *a, **kw):  # every read of the run's ckpt.pt during the resume
        if str(path).endswith("ckpt.pt"):
            ckpt_reads.append(path)
        return real_load(path, *a, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(torch, "load", load)
        assert train.train(load_config([*argv, "--resume"]))["stopped_at"] is None
    assert len(ckpt_reads) == 1, f"ckpt.pt read {len(ckpt_reads)} times on resume; once is enough"
    got, want = (read_run_metrics(tmp_path / root / "runs" / "ft") for root in ("resumed", "full"))
    assert [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in got] == [
        {k: v for k, v in m.items() if not k.startswith("perf/")} for m in want
    ]
    assert (
        read_checkpoint(tmp_path / "resumed" / "runs" / "ft" / "ckpt.pt")["config"]["model"][
            "scaled"
        ]
        is False
    )


def read_run_metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_init_from_refuses_other_tokenizers_and_longer_contexts(
    gpt2_folder, corpus, tmp_path, capsys
):
    char = tiny_argv(tmp_path, corpus, "--init-from", str(gpt2_folder))
    assert_one_line_error(error_of(train.main, char, capsys), "data.tokenizer = gpt2")
    longer = gpt2_run(tmp_path, corpus, "--init-from", str(gpt2_folder), "--model.block_size=128")
    assert_one_line_error(error_of(train.main, longer, capsys), "block_size 128", "64")


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--qk-norm"], "--qk-norm"),
        (["--softcap=50"], "--softcap"),
        (["--rope"], "--rope"),
        (["--rope", "--qk-norm"], "--qk-norm and --rope"),
        (["--kv-heads=1"], "--kv-heads"),
        (["--window=16"], "--window"),
        (["--gate"], "--gate"),
        (["--sink"], "--sink"),
        (
            ["--sink", "--gate", "--window=8", "--kv-heads=1"],
            "--kv-heads and --window and --gate and --sink",
        ),
    ],
)
def test_init_from_refuses_what_gpt2_was_trained_without(
    gpt2_folder, corpus, tmp_path, capsys, flags, named
):
    """QK-norm, a cap, RoPE, grouped heads, a window, a gate or a sink on GPT-2's weights would
    compute something else than GPT-2 (grouped heads would not even fit its key and value matrices):
    one line, exit 2, nothing written."""
    argv = gpt2_run(tmp_path, corpus, "--init-from", str(gpt2_folder), *flags)
    assert_one_line_error(
        error_of(train.main, argv, capsys), f"was trained without {named}", "train from scratch"
    )
    assert not (tmp_path / "runs").exists()


def test_export_round_trip_and_break_at_inference(corpus, tmp_path, capsys):
    gpt2_encoding_or_skip()
    train.train(load_config(gpt2_run(tmp_path, corpus)))
    runs = str(tmp_path / "runs")
    folder = export_gpt2.main(
        ["--run", "tiny", "--runs-dir", runs, "--out", str(tmp_path / "export")]
    )
    ours, _, _ = load_model(tmp_path / "runs" / "tiny" / "ckpt.pt")
    exported, _, _ = load_pretrained(folder)
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    idx = torch.randint(0, GPT2_VOCAB_SIZE, (2, 32), generator=torch.Generator().manual_seed(1))
    assert_close(exported(idx)[0], ours(idx)[0], atol=1e-5, msg="our loader on the exported run")
    assert_close(hf(idx).logits, ours(idx)[0], atol=1e-5, msg="transformers on the exported run")

    data = [
        "--data-file",
        str(corpus),
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--train.eval_batches=2",
        "--device",
        "cpu",
    ]
    results = break_gpt2.main(
        ["--pretrained", str(folder), "--out", str(tmp_path / "break"), *data]
    )
    assert list(results) == ["export", "export-no-mask", "export-no-scale", "export-no-pos"]
    as_is, no_mask, no_scale, no_pos = results.values()
    assert as_is["loss/leak_gap"] == pytest.approx(0, abs=1e-4) and as_is["attn/future_mass"] == 0
    assert no_pos["loss/val"] != as_is["loss/val"] and no_pos["loss/leak_gap"] == pytest.approx(
        0, abs=1e-4
    )  # positions zeroed, still causal
    assert no_mask["attn/future_mass"] > 0.1, (
        "without the mask every row spreads weight over later tokens"
    )
    assert no_scale["attn/score_std"] > 2 * as_is["attn/score_std"], (
        "without 1/sqrt(D) the scores spread sqrt(D) = 4x wider"
    )
    assert sorted(p.name for p in (tmp_path / "break" / "export-no-mask").iterdir()) == [
        "attn_L0.png",
        "attn_L1.png",
    ]
    assert "| export-no-mask |" in capsys.readouterr().out

    train.train(load_config(gpt2_run(tmp_path, corpus, "--no-mask")))
    capsys.readouterr()
    refused = error_of(
        export_gpt2.main,
        ["--run", "tiny-no-mask", "--runs-dir", runs, "--out", str(tmp_path / "x")],
        capsys,
    )
    assert_one_line_error(refused, "cannot export a model with --no-mask")
    assert not (tmp_path / "x").exists()
    train.train(load_config(gpt2_run(tmp_path, corpus, "--qk-norm", "--rope")))
    capsys.readouterr()
    refused = error_of(
        export_gpt2.main,
        ["--run", "tiny-qk-norm-rope", "--runs-dir", runs, "--out", str(tmp_path / "x")],
        capsys,
    )
    assert_one_line_error(
        refused,
        "cannot export a model with --qk-norm and --rope: GPT-2's format has no way to say it",
    )
    assert not (tmp_path / "x").exists()
