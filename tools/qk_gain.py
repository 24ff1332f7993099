"""QK-norm with and without a learned gain, over seeds:
python -m tools.qk_gain [--config char] [--seeds 3] [--lrs 1.2e-2,1.2e-1] [--runs-dir runs]
[--record]

The QK-norm of model/attention.py has no learned gain. OLMo 2 and Qwen 3 multiply their normalised
queries and keys by one, a weight per head dimension that starts at 1; this measures what such a
gain changes here. At each rate (by default the preset's train.lr and ten times it) and seed it runs
`python train.py --qk-norm ...`, and the same
command with the gain: train.py run by `python -m tools.qk_gain --train ...` with each MultiHead
given q_gain and k_gain, (D,) each, ones, multiplying its normalised queries and keys (they train
with the AdamW of the parameters that are not matrices, without weight decay). Its runs go to
<runs-dir>/qk-gain-<config>/. The pair shares its initialisation (ones draw nothing from the
generator) and its batches. Per rate it prints the final val loss, score spread and largest score of
each, and the gain's difference, paired by seed, mean with its 95% interval. --record writes the
result into docs/figures.json (qk-norm-gain-<config>), with the machine and the date, for the docs
to quote.
"""

import contextlib
import runpy
import sys
from pathlib import Path

import torch
import torch.nn as nn

from harness.arguments import learning_rates, rate_name, seed_count
from harness.cli import OneLineParser, run_command
from harness.experiments.children import Children
from harness.experiments.comparison import TRAIN_PY, check_seed_range
from harness.experiments.stats import paired_difference, to_json
from harness.experiments.sweep import interval
from harness.training.runlog import evaluations
from model.ablations import CURES
from model.attention import MultiHead
from tools.figures import record_result

TAGS = ("loss/val", "attn/score_std", "attn/score_max")
QK_NORM = next(c for c in CURES if c.field == "qk_norm")


@contextlib.contextmanager
def learned_gain():
    """Every MultiHead built inside the block gets q_gain and k_gain (D,), ones, multiplying its
    prepared queries and keys.
    """
    build, split = MultiHead.__init__, MultiHead.split_heads

    def __init__(self, n_embd, n_head, *args, **kwargs):
        build(self, n_embd, n_head, *args, **kwargs)
        self.q_gain, self.k_gain = (
            nn.Parameter(torch.ones(n_embd // n_head)),
            nn.Parameter(torch.ones(n_embd // n_head)),
        )

    def split_heads(self, x, start=0, raw=False):
        q, k, v = split(self, x, start, raw)  # (B, H, T, D) each, normalised unless raw
        return (q, k, v) if raw else (q * self.q_gain, k * self.k_gain, v)  # (B, H, T, D) * (D,)

    MultiHead.__init__, MultiHead.split_heads = __init__, split_heads
    try:
        yield
    finally:
        MultiHead.__init__, MultiHead.split_heads = build, split


def measure(
    cfg, config_name: str, overrides: list[tuple[str, str]], n_seeds: int, lrs: list[float]
) -> dict | int:
    """{rate: {"none": tag intervals, "gain": tag intervals, "gain_minus_none": tag differences}}
    over the seeds; or the exit code of a run that failed or was stopped."""
    folder = Path(cfg.train.runs_dir) / f"qk-gain-{cfg.name}"
    out = {}
    with Children() as children:
        for lr in lrs:
            ends = {"none": [], "gain": []}
            for seed in range(cfg.train.seed, cfg.train.seed + n_seeds):
                for kind, program in (
                    ("none", [str(TRAIN_PY)]),
                    ("gain", ["-m", "tools.qk_gain", "--train"]),
                ):
                    name = f"{cfg.name}-{QK_NORM.name}{'-gain' if kind == 'gain' else ''}-lr{rate_name(lr)}-s{seed}"
                    argv = [
                        "--config",
                        config_name,
                        *(f"--{key}={value}" for key, value in overrides),
                        QK_NORM.flag,
                        f"--train.lr={lr}",
                        f"--train.seed={seed}",
                        f"--train.runs_dir={folder}",
                        f"--train.run_name={name}",
                    ]
                    print(f"$ python {' '.join([*program, *argv])}", flush=True)
                    code = children.run([sys.executable, *program, *argv])
                    if code != 0:
                        return code  # the run has said why
                    ends[kind].append(evaluations(folder / name)[-1])
            out[rate_name(lr)] = {
                kind: {t: interval([e[t] for e in runs]) for t in TAGS}
                for kind, runs in ends.items()
            }
            out[rate_name(lr)]["gain_minus_none"] = {
                t: to_json(
                    paired_difference([e[t] for e in ends["gain"]], [e[t] for e in ends["none"]])
                )
                for t in TAGS
            }
    return out


def train_with_gain(train_args: list[str]) -> None:
    """`python train.py <train_args>` with the learned gain patched into MultiHead: the script
    itself, run as __main__.
    """
    sys.argv = [str(TRAIN_PY), *train_args]
    with learned_gain():
        # ends the process with train.py's exit code
        runpy.run_path(str(TRAIN_PY), run_name="__main__")


def main(argv: list[str]) -> dict | int:
    parser = OneLineParser(__doc__, config="char")
    parser.add_argument(
        "--seeds",
        type=seed_count,
        default=3,
        help="seeds train.seed + 0..N-1 (default 3; an interval needs 2)",
    )
    parser.add_argument(
        "--lrs",
        type=learning_rates,
        help="the learning rates (default: the preset's train.lr and ten times it)",
    )
    parser.add_argument(
        "--record", action="store_true", help="write the result into docs/figures.json"
    )
    args, cfg = parser.parse_with_config(argv)
    check_seed_range(cfg, args.seeds)
    result = measure(
        cfg,
        args.config_name,
        args.overrides,
        args.seeds,
        args.lrs or [cfg.train.lr, float(rate_name(cfg.train.lr * 10))],
    )
    if isinstance(result, int):
        return result
    for lr, rows in result.items():
        shown = (
            "[95% interval of the gain's difference, paired by seed]"
            if args.seeds > 1
            else "(one seed: no interval)"
        )
        print(f"lr {lr}, {args.seeds} seed{'s' * (args.seeds > 1)}: mean {shown}")
        for tag in TAGS:
            d, half = rows["gain_minus_none"][tag], rows["gain_minus_none"][tag]["half_width"]
            ends = "" if half is None else f" [{d['mean'] - half:+.4f}, {d['mean'] + half:+.4f}]"
            print(
                f"  {tag}: none {rows['none'][tag]['mean']:.4f}, gain {rows['gain'][tag]['mean']:.4f}, gain - none {d['mean']:+.4f}{ends}"
            )
    if args.record:
        record_result(f"qk-norm-gain-{cfg.name}", "tools.qk_gain", argv, result)
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--train"]:  # one run with the gain, started by measure()
        train_with_gain(sys.argv[2:])
    sys.exit(run_command(main, sys.argv[1:]))
