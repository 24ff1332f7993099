"""Benchmark what users run: python bench.py --config char [--json] [--section.field=VALUE ...]

For one preset, at random init on random tokens (no corpus needed), it measures
- training, the step train.py runs (its optimizer and runtime): ms per step, split into forward +
  backward and the optimizer's update, tokens/s, model FLOP/s and MFU against a matmul peak
  measured on the spot (model FLOPs only: the optimizer's arithmetic is not counted), and the
  peak memory of a step;
- sampling: tokens/s for 500 new tokens from a 1-token prompt, with and without the KV cache;
- attention: each backend's causal forward time and peak memory at T = 256, 1024 and 4096
  (B = 1, H and D from the preset), where the readable path holds (T, T) weights and tiled does not.

It prints markdown tables; with --json, one JSON object on stdout instead (the tables go to stderr).
The measurements live in harness/experiments/benchmark.py, the timers and the CPU memory tracker in harness/experiments/profiling.py.
"""

import json
import sys

from harness.cli import OneLineParser, run_command
from harness.experiments.benchmark import format_tables, measure_all
from harness.training.runtime import setup_runtime


def main(argv: list[str]) -> dict:
    parser = OneLineParser("Benchmark training, sampling and attention for a preset.", config="base")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (tables go to stderr)")
    args, cfg = parser.parse_with_config(argv)
    runtime = setup_runtime(cfg.train)
    result = measure_all(cfg, runtime, log=lambda text: print(text, file=sys.stderr))
    tables = format_tables(result)
    if args.json:
        print(tables, file=sys.stderr)
        print(json.dumps(result))
    else:
        print(tables)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
