"""A learning-rate sweep in one command: python sweep.py [--config char] [--lrs 4e-3,1.2e-2,...]
[--variants qk-norm,...] [--seeds 3] [--jobs N] [--section.field=VALUE ...]

Trains the preset as it is and with each variant at each rate and seed into runs/sweep-<config>/
(char-qk-norm-lr1.2e-1-s1337, ...), prints per rate and variant the val loss, the largest attention
score and the entropy at the end (mean over seeds, 95% interval), and draws them against the rate
into sweep.png, beside the largest score during training at the highest rate. A run whose loss or
gradient stops being finite is recorded as diverged, and the sweep goes on.

The default rates are the preset's train.lr / 3, x 1, x 3 and x 10, each with its schedule. --jobs
N trains N runs at a time, each writing to <run name>.log: give each its share of the cores
(OMP_NUM_THREADS=1 with --jobs 2 on 2 cores). Ctrl-C (or SIGTERM) stops the runs with a
checkpoint; the same command plus --resume continues the sweep.
"""

from harness.stopping import exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import os
import sys

from configs import ConfigError
from harness.arguments import learning_rates, positive_int, rate_name
from harness.cli import OneLineParser, run_command
from harness.experiments.comparison import add_seeds, add_variants, check_experiment, summing_up
from harness.experiments.stats import what_figures_are
from harness.experiments.sweep import format_sweep, run_sweep
from model.ablations import CURES

DEFAULT_FACTORS = (1 / 3, 1, 3, 10)  # the default rates, as multiples of the preset's train.lr
DEFAULT_VARIANTS = next(c.name for c in CURES if c.field == "qk_norm")


def main(argv: list[str]) -> dict | int:
    parser = OneLineParser(__doc__, config="char", usage=argparse.SUPPRESS)
    parser.add_argument(
        "--lrs",
        type=learning_rates,
        metavar="RATES",
        help="the learning rates, comma-separated (4e-3,1.2e-2,3.6e-2,1.2e-1); "
        "default: the preset's train.lr / 3, x 1, x 3 and x 10",
    )
    add_variants(
        parser,
        f"the variants beside the preset as it is (default: {DEFAULT_VARIANTS})",
        DEFAULT_VARIANTS,
    )
    add_seeds(parser, 3, "variant and rate")
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="runs trained at a time, each in its own process (default 1)",
    )
    args, cfg = parser.parse_with_config(argv)
    check_experiment(cfg, args.seeds, "sweep.py")
    if any(key == "train.lr" for key, _ in args.overrides):
        raise ConfigError("sweep.py sets train.lr itself, from --lrs; leave --train.lr out")
    if args.jobs > (os.cpu_count() or 1):
        raise ConfigError(
            f"--jobs {args.jobs} is more than this machine's {os.cpu_count()} cores; "
            "give at most one run per core"
        )
    lrs = args.lrs or [float(rate_name(cfg.train.lr * factor)) for factor in DEFAULT_FACTORS]
    sweep = run_sweep(
        cfg, args.config_name, args.overrides, args.seeds, lrs, args.variants, args.jobs
    )
    if isinstance(sweep, int):
        return sweep  # a run failed or was stopped, and has said so
    with summing_up(sweep["folder"], "sweep"):  # every run is saved: a Ctrl-C now says so
        print(f"\nat the end of training, {what_figures_are(args.seeds)}:\n{format_sweep(sweep)}")
        folder = sweep["folder"]
        print(f"\npicture: {folder / 'sweep.png'}; TensorBoard: tensorboard --logdir {folder}")
    return sweep


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
