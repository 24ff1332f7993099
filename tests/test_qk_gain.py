"""tools/qk_gain.py: QK-norm with a learned gain patched in, as the tool trains it, and its
measurement over seeds checked against the runs' own logs by hand."""

import pytest
import torch
from conftest import EndedChild, assert_one_line_error, error_of, tiny_argv, write_corpus

import tools.qk_gain
import train
from harness.experiments.children import Children
from harness.experiments.stats import paired_difference, to_json
from harness.experiments.sweep import interval
from harness.training.checkpoints import read_checkpoint
from harness.training.runlog import evaluations
from model import GPT, ModelConfig

SHORT = [
    "--train.optimizer=muon",
    "--train.max_steps=4",
    "--train.eval_interval=2",
    "--train.warmup_steps=1",
    "--train.probes=2",
]


def test_gain_starts_at_one_changes_nothing_until_it_trains_and_leaves_raw_projections_alone():
    """Inside learned_gain every MultiHead has q_gain and k_gain, and its forward pass uses them;
    outside, none has.
    """
    cfg = ModelConfig(
        n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11, qk_norm=True, dropout=0.0
    )
    torch.manual_seed(0)
    plain = GPT(cfg)
    x = torch.randint(11, (2, 8), generator=torch.Generator().manual_seed(1))
    h = torch.randn(2, 8, 16)
    expected = (
        plain(x)[0],
        plain.blocks[1].attn.split_heads(h),
        plain.blocks[1].attn.split_heads(h, raw=True),
    )
    with tools.qk_gain.learned_gain():
        gained = GPT(cfg)
        missing = gained.load_state_dict(plain.state_dict(), strict=False).missing_keys
        assert sorted(missing) == sorted(
            f"blocks.{i}.attn.{kind}_gain" for i in range(2) for kind in "qk"
        )
        # a gain of ones multiplies by one
        torch.testing.assert_close(gained(x)[0], expected[0], rtol=0, atol=0)
        attn = gained.blocks[1].attn
        # the projections, before norm and gain
        torch.testing.assert_close(attn.split_heads(h, raw=True), expected[2])
        with torch.no_grad():
            attn.q_gain.fill_(2.0)
        q, k, v = attn.split_heads(h)
        torch.testing.assert_close((q, k, v), (2 * expected[1][0], expected[1][1], expected[1][2]))
        assert not torch.equal(gained(x)[0], expected[0])
    assert not hasattr(GPT(cfg).blocks[0].attn, "q_gain"), "the patch ends with the block"


def test_the_gain_is_measured_against_no_gain_paired_by_seed(
    tmp_path, one_cpu_thread, monkeypatch, capsys
):
    """Two seeds at one rate, each run trained in this process as the tool's children are: the plain
    ones as train.py, the others as `python -m tools.qk_gain --train` (train.py with the gain
    patched in)."""

    def start(self, command, output=None):
        program, argv = (
            (command[1:4], command[4:]) if command[1] == "-m" else (command[1:2], command[2:])
        )
        if program == ["-m", "tools.qk_gain", "--train"]:
            with tools.qk_gain.learned_gain():
                code = train.main(argv)
        else:
            code = train.main(argv)
        self.running.append(EndedChild(code))
        return self.running[-1]

    monkeypatch.setattr(Children, "start", start)
    corpus = write_corpus(tmp_path / "text")
    result = tools.qk_gain.main(
        tiny_argv(tmp_path, corpus, "--seeds", "2", "--lrs", "3e-2", *SHORT)
    )
    folder = tmp_path / "runs" / "qk-gain-tiny"
    ends = {
        kind: [evaluations(folder / f"tiny-qk-norm{kind}-lr3e-2-s{s}") for s in (1337, 1338)]
        for kind in ("", "-gain")
    }
    for plain, gained in zip(ends[""], ends["-gain"], strict=True):
        assert plain[0]["loss/val"] == gained[0]["loss/val"], (
            "at step 0 the gain of ones changes nothing"
        )
        assert (
            plain[-1]["step"] == gained[-1]["step"] == 4
            and plain[-1]["loss/val"] != gained[-1]["loss/val"]
        )
    state = read_checkpoint(folder / "tiny-qk-norm-gain-lr3e-2-s1337" / "ckpt.pt")["model"]
    assert state["blocks.0.attn.q_gain"].shape == (16,) and not torch.equal(
        state["blocks.0.attn.q_gain"], torch.ones(16)
    )
    assert (
        "blocks.0.attn.q_gain"
        not in read_checkpoint(folder / "tiny-qk-norm-lr3e-2-s1337" / "ckpt.pt")["model"]
    )
    row = result["3e-2"]
    for tag in tools.qk_gain.TAGS:
        by_hand = paired_difference(
            [runs[-1][tag] for runs in ends["-gain"]], [runs[-1][tag] for runs in ends[""]]
        )
        assert row["gain_minus_none"][tag]["mean"] == pytest.approx(by_hand.mean)
        assert row["none"][tag]["mean"] == pytest.approx(
            sum(runs[-1][tag] for runs in ends[""]) / 2
        )
    assert "lr 3e-2, 2 seeds: mean [95% interval, paired by seed]" in capsys.readouterr().out


def test_seeds_are_bounded_and_one_seed_prints_no_interval(monkeypatch, capsys):
    """--seeds past 100 (each seed two runs per rate) or past the largest seed is one line before
    any run; one seed gives its means and difference without a 95% interval, which one value cannot
    have (not a zero-width one)."""
    for seeds, needle in (("1000000", "1 to 100"), ("0", "1 to 100")):
        assert_one_line_error(
            error_of(tools.qk_gain.main, ["--config", "tiny", "--seeds", seeds], capsys),
            "--seeds: takes",
            needle,
        )
    proc = error_of(
        tools.qk_gain.main,
        ["--config", "tiny", "--seeds", "2", f"--train.seed={2**63 - 1}"],
        capsys,
    )
    assert_one_line_error(proc, "would pass the largest seed")
    ends = {"none": [3.0], "gain": [2.5]}

    def measure(*args):
        tags = {t: interval(ends["none"]) for t in tools.qk_gain.TAGS}
        return {
            "3e-2": {
                "none": tags,
                "gain": {t: interval(ends["gain"]) for t in tools.qk_gain.TAGS},
                "gain_minus_none": {
                    t: to_json(paired_difference(ends["gain"], ends["none"]))
                    for t in tools.qk_gain.TAGS
                },
            }
        }

    monkeypatch.setattr(tools.qk_gain, "measure", measure)
    tools.qk_gain.main(["--config", "tiny", "--seeds", "1", "--lrs", "3e-2"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "lr 3e-2, 1 seed: mean (one seed: no interval)"
    assert printed[
        1
    ] == "  loss/val: none 3.0000, gain 2.5000, gain - none -0.5000" and "[" not in "".join(printed)
