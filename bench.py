"""Benchmark what users run: python bench.py --config char [--gpt2-124m] [--json]
[--section.field=VALUE ...]

For one preset, at random init on random tokens, it measures train.py's step (ms, tokens/s, MFU,
peak memory), sampling with and without the KV cache, and each attention backend. Instead,
--data-mb MB measures preparing a text against tiktoken, --variants each variant's KV cache and
sampling, --whole-run one whole `python train.py` run phase by phase (its run folder a temporary
one unless --runs-dir says). With --json, one JSON object on stdout (the tables go to stderr).
"""

from harness.stopping import exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import json
import sys
import tempfile
from functools import partial
from pathlib import Path

from harness.arguments import positive_float
from harness.cli import OneLineParser, run_command
from harness.experiments.bench_cost import bench_cost
from harness.experiments.benchmark import (
    GPT2_124M_FLAG,
    expand_gpt2_124m,
    format_tables,
    measure_all,
)
from harness.experiments.comparison import add_variants
from harness.experiments.data_bench import MIN_MB, bench_data, format_data_table
from harness.experiments.profiling import machine_facts
from harness.experiments.variant_bench import bench_variants, format_variants
from harness.experiments.whole_run import format_whole_run, profile_whole_run
from harness.training.budget import duration
from harness.training.runlog import evaluations
from harness.training.runtime import setup_runtime


def megabytes(text: str) -> float:
    value = positive_float(text)
    if value < MIN_MB:
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_MB:g} (a kilobyte of text), got {text}"
        )
    return value


def whole_run(argv: list[str], cfg, runs_dir_given: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="whole-run-") as scratch:
        runs_dir = Path(cfg.train.runs_dir if runs_dir_given else scratch)
        result = profile_whole_run([*argv, "--runs-dir", str(runs_dir)])
        vals = []
        if result["code"] == 0:
            vals = [row["loss/val"] for row in evaluations(runs_dir / cfg.run_name)]
    return {
        "val": round(vals[-1], 4) if vals else None,
        "command": " ".join(["python train.py", *argv]),
        **result,
    }


def main(argv: list[str]) -> dict | int:
    parser = OneLineParser(
        "Benchmark training, sampling and attention for a preset, or profile one whole run.",
        config="base",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout (tables go to stderr)"
    )
    instead = parser.add_mutually_exclusive_group()
    instead.add_argument(
        "--data-mb",
        type=megabytes,
        nargs="?",
        const=200.0,
        metavar="MB",
        help=f"measure preparing a generated MB-megabyte text instead (at least {MIN_MB:g})",
    )
    instead.add_argument(
        "--whole-run",
        action="store_true",
        help="profile one whole train.py run of the preset, phase by phase",
    )
    add_variants(
        instead, "measure the KV cache and cached sampling of the preset and these variants instead"
    )
    parser.add_argument(
        GPT2_124M_FLAG,
        action="store_true",
        help="GPT-2 124M's shape: 12 layers, 12 heads, 768 wide, context 1024, GPT-2 tokens",
    )
    argv = expand_gpt2_124m(argv)
    args, cfg = parser.parse_with_config(argv)
    runtime = setup_runtime(cfg.train)
    if args.data_mb:
        log = partial(print, file=sys.stderr)
        result = bench_data(args.data_mb, cfg.data.tokenizer, cfg.data.workers, log=log)
        tables = format_data_table(result)
    elif args.whole_run:
        train_argv = [a for a in argv if a not in ("--json", "--whole-run")]
        runs_dir_given = any(key == "train.runs_dir" for key, _ in args.overrides)
        result = whole_run(train_argv, cfg, runs_dir_given)
        if result["code"] != 0:
            return result["code"]  # train.py said why, on stderr
        # the child's threads too: OMP_NUM_THREADS
        result |= machine_facts(runtime.device)
        tables = format_whole_run(result)
    elif args.variants:
        result = bench_variants(cfg, runtime, args.variants)
        tables = format_variants(result)
    else:
        print(
            f"benchmarking: about {duration(bench_cost(cfg, runtime))} (estimated), "
            "after train.py's checks of the model and its step",
            file=sys.stderr,
        )
        result = measure_all(cfg, runtime)
        tables = format_tables(result)
    if args.json:
        print(tables, file=sys.stderr)
        print(json.dumps(result))
    else:
        print(tables)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
