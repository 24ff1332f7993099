"""QK-norm with and without OLMo 2's and Qwen 3's learned gain per head dimension (ours has none):
both at each rate and seed, into <runs-dir>/qk-gain-<config>/, compared paired by seed."""

import contextlib
import runpy
import sys
from pathlib import Path

import torch
import torch.nn as nn

from harness.arguments import learning_rates, rate_name
from harness.cli import run_command
from harness.experiments.children import Children
from harness.experiments.comparison import TRAIN_PY
from harness.experiments.stats import paired_difference, to_json
from harness.experiments.sweep import interval
from harness.training.runlog import evaluations
from model.ablations import CURES
from model.attention import MultiHead
from tools.figures import record_result
from tools.score_gradient import parse_seeded

TAGS = ("loss/val", "attn/score_std", "attn/score_max")
QK_NORM = next(c for c in CURES if c.field == "qk_norm")


@contextlib.contextmanager
def learned_gain():
    """Every MultiHead built inside multiplies its normalised q and k by q_gain and k_gain."""
    build, split = MultiHead.__init__, MultiHead.split_heads

    def __init__(self, n_embd, n_head, *args, **kwargs):
        build(self, n_embd, n_head, *args, **kwargs)
        self.q_gain = nn.Parameter(torch.ones(n_embd // n_head))
        self.k_gain = nn.Parameter(torch.ones(n_embd // n_head))

    def split_heads(self, x, start=0, raw=False):
        q, k, v = split(self, x, start, raw)  # (B, H, T, D) each, normalised unless raw
        if raw:
            return q, k, v
        return q * self.q_gain, k * self.k_gain, v  # (B, H, T, D) * (D,)

    MultiHead.__init__, MultiHead.split_heads = __init__, split_heads
    try:
        yield
    finally:
        MultiHead.__init__, MultiHead.split_heads = build, split


def measure(cfg, config_name: str, overrides: list, n_seeds: int, lrs: list[float]) -> dict | int:
    """{rate: {"none": ..., "gain": ..., "gain_minus_none": ...}}, or a failed run's exit code."""
    folder = Path(cfg.train.runs_dir) / f"qk-gain-{cfg.name}"
    programs = {"none": [str(TRAIN_PY)], "gain": ["-m", "tools.qk_gain", "--train"]}
    given = ["--config", config_name, *(f"--{k}={v}" for k, v in overrides), QK_NORM.flag]
    out = {}
    with Children() as children:
        for lr in lrs:
            ends = {kind: {tag: [] for tag in TAGS} for kind in programs}
            for seed in range(cfg.train.seed, cfg.train.seed + n_seeds):
                for kind, program in programs.items():
                    gain = "-gain" if kind == "gain" else ""
                    name = f"{cfg.name}-{QK_NORM.name}{gain}-lr{rate_name(lr)}-s{seed}"
                    argv = [*given, f"--train.lr={lr}", f"--train.seed={seed}"]
                    argv += [f"--train.runs_dir={folder}", f"--train.run_name={name}"]
                    print(f"$ python {' '.join([*program, *argv])}", flush=True)
                    code = children.run([sys.executable, *program, *argv])
                    if code != 0:
                        return code  # the run has said why
                    last = evaluations(folder / name)[-1]
                    for tag in TAGS:
                        ends[kind][tag].append(last[tag])
            row = {kind: {t: interval(v) for t, v in tags.items()} for kind, tags in ends.items()}
            row["gain_minus_none"] = {
                t: to_json(paired_difference(ends["gain"][t], ends["none"][t])) for t in TAGS
            }
            out[rate_name(lr)] = row
    return out


def main(argv: list[str]) -> dict | int:
    args, cfg = parse_seeded(
        __doc__, argv, "--lrs", type=learning_rates, help="default: train.lr and ten times it"
    )
    lrs = args.lrs or [cfg.train.lr, float(rate_name(cfg.train.lr * 10))]
    result = measure(cfg, args.config_name, args.overrides, args.seeds, lrs)
    if isinstance(result, int):
        return result
    shown = "[95% interval, paired by seed]" if args.seeds > 1 else "(one seed: no interval)"
    for lr, rows in result.items():
        print(f"lr {lr}, {args.seeds} seed{'s' * (args.seeds > 1)}: mean {shown}")
        for tag in TAGS:
            d = rows["gain_minus_none"][tag]
            ends = ""
            if (half := d["half_width"]) is not None:
                ends = f" [{d['mean'] - half:+.4f}, {d['mean'] + half:+.4f}]"
            none, gain = rows["none"][tag]["mean"], rows["gain"][tag]["mean"]
            print(f"  {tag}: none {none:.4f}, gain {gain:.4f}, gain - none {d['mean']:+.4f}{ends}")
    if args.record:
        record_result(f"qk-norm-gain-{cfg.name}", "tools.qk_gain", argv, result)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--train"]:  # measure() starts each run with the gain so
        sys.argv = [str(TRAIN_PY), *sys.argv[2:]]
        with learned_gain():  # train.py ends the process with its exit code
            runpy.run_path(str(TRAIN_PY), run_name="__main__")
    sys.exit(run_command(main, sys.argv[1:]))
