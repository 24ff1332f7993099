"""Run the whole experiment in one command: python compare.py [--config char] [--seeds N]
[--section.field=VALUE ...]

Trains the preset as it is and with each ablation (--no-mask, --no-scale, --no-pos) into
runs/compare-<config>/, so that `tensorboard --logdir runs/compare-<config>` overlays them, then
prints a table and the differences from base and draws the runs' curves into compare.png.
--variants no-mask,no-pos trains only those beside the preset; the cures (qk-norm, softcap), rope,
and kv-heads, window, gate and sink are variants too. Joined by +, a variant changes several
things: no-mask+no-pos is also measured from no-mask and from no-pos when they are trained.

--seeds N (default 1) trains every variant at train.seed + 0..N-1 (the evaluation batches stay the
same); use 3 or more before trusting a difference: only then does the table show mean ± sd and
each difference a 95% interval. With N > 1 run folders carry the seed (char-s1337, ...).

Ctrl-C (or SIGTERM) stops the run in progress after its step, with a checkpoint; the same command
plus --resume continues: finished runs are kept, the stopped one resumes. Without --resume an
earlier comparison in the folder is moved aside whole (to compare-<config>.old-<time>).
"""

from harness.stopping import exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import sys

from harness.cli import OneLineParser, run_command
from harness.experiments.comparison import (
    add_seeds,
    add_variants,
    check_experiment,
    run_comparison,
    summing_up,
)
from harness.experiments.stats import format_differences, format_table
from model.ablations import ABLATIONS

ALL = ",".join(a.name for a in ABLATIONS)


def main(argv: list[str]) -> dict[str, dict] | int:
    """Train every variant at every seed, then print and save the comparison; returns each run's
    summary by run name."""
    parser = OneLineParser(__doc__, config="char", usage=argparse.SUPPRESS)
    add_seeds(parser, 1, "variant")
    add_variants(parser, f"the variants to train (default: {ALL}, each alone)")
    args, cfg = parser.parse_with_config(argv)
    check_experiment(cfg, args.seeds, "compare.py")
    comparison = run_comparison(cfg, args.config_name, args.overrides, args.seeds, args.variants)
    if isinstance(comparison, int):
        return comparison  # a run failed or was stopped, and has said so
    base, folder = next(iter(comparison["aggregate"])), comparison["folder"]
    with summing_up(folder, "comparison"):  # every run is saved: a Ctrl-C now says so
        print(f"\n{format_table(comparison['aggregate'])}\n")
        print(format_differences(comparison["differences"], base, args.seeds))
        print(f"\ncurves: {folder / 'compare.png'}; TensorBoard: tensorboard --logdir {folder}")
    return comparison["runs"]


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
