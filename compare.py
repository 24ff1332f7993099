"""Run the whole experiment in one command: python compare.py [--config char] [--seeds N]
[--section.field=VALUE ...]

Trains the preset as it is and with each ablation (--no-mask, --no-scale, --no-pos) into
runs/compare-<config>/ (for `tensorboard --logdir runs/compare-<config>`), prints a table and the
differences from base, and draws the runs' curves into compare.png. --variants no-mask,no-pos
trains only those; the cures (qk-norm, softcap), rope, kv-heads, window, gate and sink are variants
too. no-mask+no-pos changes both, and is also measured from no-mask and no-pos when trained.

--seeds N (default 1) trains every variant at train.seed + 0..N-1 (char-s1337, ...); use 3 or more
before trusting a difference: only then does the table show mean ± sd and a 95% interval.

Ctrl-C (or SIGTERM) stops the run in progress with a checkpoint; the same command plus --resume
continues. Without --resume an earlier comparison is moved aside (to compare-<config>.old-<time>).
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
