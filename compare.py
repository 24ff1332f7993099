"""Run the whole experiment in one command: python compare.py [--config char] [--seeds N]
[--section.field=VALUE ...]

Trains the preset as it is and with each ablation of model/ablations.py (--no-mask, --no-scale,
--no-pos) into one folder, runs/compare-<config>/, so that `tensorboard --logdir
runs/compare-<config>` overlays them. Then prints a comparison table and the differences from base,
and draws the runs' own logged curves into compare.png. --variants no-mask,no-pos trains only those
ablations (and the preset as it is, which every difference is measured from); the cures (qk-norm,
softcap), rotary positions (rope) and attention as shipped models have it (kv-heads: one key/value
head, window: a sliding window of 32, gate, sink) are variants too. A variant may change several
things at once, joined by +: --variants no-mask,no-mask+no-pos also trains char-no-mask-no-pos, and
measures it from char-no-mask too (what the positions add to a model that sees the future);
qk-norm,no-scale+qk-norm measures the cure without the scale from the cure alone.

--seeds N (default 1) trains every variant N times, with train.seed = the preset's seed + 0..N-1:
each seed changes the initialisation and the batch order, while the evaluation batches stay the
same. One seed is the default because it keeps the demo at four runs (docs/experiment.md says how
long they take); use --seeds 3 or more before trusting a difference, since only then can the
table show the seed-to-seed spread (mean ± standard deviation) and each difference from base a
95% interval. With N > 1 the run folders carry the seed (char-s1337, char-no-mask-s1338, ...).

Ctrl-C (or SIGTERM) stops the run in progress after its step, with a checkpoint, and ends the
comparison; the same command plus --resume continues it: finished runs are kept, the stopped one
resumes, the rest start. Without --resume an earlier comparison in the folder is moved aside whole
(to compare-<config>.old-<time>), so `tensorboard --logdir runs/compare-<config>` never overlays two
comparisons (`--logdir runs` reads the moved ones too: docs/tensorboard.md).

The experiment itself lives in harness/experiments/comparison.py, its picture in
harness/pictures/curves.py and its statistics in harness/experiments/stats.py.
"""

from harness.stopping import exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import sys

from harness.arguments import EVERY, seed_count, variant_names
from harness.cli import OneLineParser, run_command
from harness.experiments.comparison import check_experiment, run_comparison, summing_up
from harness.experiments.stats import format_differences, format_table
from model.ablations import ABLATIONS

ALL = ",".join(a.name for a in ABLATIONS)


def main(argv: list[str]) -> dict[str, dict] | int:
    """Train every variant at every seed, then print and save the comparison; returns each run's
    summary by run name.
    """
    parser = OneLineParser(__doc__, config="char", usage=argparse.SUPPRESS)
    parser.add_argument(
        "--seeds",
        type=seed_count,
        default=1,
        help="runs per variant, at seeds train.seed + 0..N-1 (default 1)",
    )
    parser.add_argument(
        "--variants",
        type=variant_names,
        metavar="NAMES",
        help=f"the variants to train, comma-separated, from {EVERY}; several at once joined by + (default: {ALL}, each alone)",
    )
    args, cfg = parser.parse_with_config(argv)
    check_experiment(cfg, args.seeds, "compare.py")
    comparison = run_comparison(cfg, args.config_name, args.overrides, args.seeds, args.variants)
    if isinstance(comparison, int):
        return comparison  # a run failed or was stopped, and has said so
    base, folder = next(iter(comparison["aggregate"])), comparison["folder"]
    with summing_up(folder, "comparison"):  # every run is saved: a Ctrl-C now says so
        print(
            f"\n{format_table(comparison['aggregate'])}\n\n{format_differences(comparison['differences'], base, args.seeds)}"
        )
        print(f"\ncurves: {folder / 'compare.png'}; TensorBoard: tensorboard --logdir {folder}")
    return comparison["runs"]


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
