"""Benchmark what users run: python bench.py --config char [--json] [--section.field=VALUE ...]

For one preset, at random init on random tokens (no corpus needed), it measures
- training, the step train.py runs (its optimizer and runtime): ms per step, split into forward +
  backward and the optimizer's update, tokens/s, model FLOP/s and MFU against a matmul peak
  measured on the spot (model FLOPs only: the optimizer's arithmetic is not counted), and the
  peak memory of a step;
- sampling: tokens/s for 500 new tokens from a 1-token prompt, with and without the KV cache;
- attention: each backend's causal forward time and peak memory at T = 256, 1024 and 4096
  (B = 1, H and D from the preset), where the readable path holds (T, T) weights and tiled does not.

With --data-mb MB it measures the corpus's preparation instead: a generated text of MB megabytes (200 when
no number follows) made into .bin files with data.tokenizer and data.workers: MB/s, tokens/s, peak memory, and
the ratio to tiktoken's own encode_ordinary_batch on the same text, one thread per core, the two run in turns.

It prints markdown tables; with --json, one JSON object on stdout instead (the tables go to stderr).
The measurements live in harness/experiments/benchmark.py and data_bench.py, the timers and the CPU memory tracker
in harness/experiments/profiling.py.
"""

import json
import sys

from harness.arguments import positive_float
from harness.cli import OneLineParser, run_command
from harness.experiments.benchmark import format_tables, measure_all
from harness.experiments.data_bench import bench_data, format_data_table
from harness.training.runtime import setup_runtime


def main(argv: list[str]) -> dict:
    parser = OneLineParser("Benchmark training, sampling and attention for a preset.", config="base")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (tables go to stderr)")
    parser.add_argument(
        "--data-mb",
        type=positive_float,
        nargs="?",
        const=200.0,
        metavar="MB",
        help="measure preparing a generated MB-megabyte text instead",
    )
    args, cfg = parser.parse_with_config(argv)
    log = lambda text: print(text, file=sys.stderr)  # noqa: E731
    if args.data_mb:
        result = bench_data(args.data_mb, cfg.data.tokenizer, cfg.data.workers, log=log)
        tables = format_data_table(result)
    else:
        result = measure_all(cfg, setup_runtime(cfg.train), log=log)
        tables = format_tables(result)
    if args.json:
        print(tables, file=sys.stderr)
        print(json.dumps(result))
    else:
        print(tables)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
