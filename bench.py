"""Benchmark what users run: python bench.py --config char [--gpt2-124m] [--json]
[--section.field=VALUE ...]

For one preset, at random init on random tokens (no corpus needed), it measures
- training, the step train.py runs (its optimizer and runtime): ms per step, split into forward +
  backward and the optimizer's update, tokens/s, model FLOP/s and MFU (model FLOPs only: the
  optimizer's arithmetic is not counted) against the device's peak: a CUDA card's dense bf16 peak
  from its datasheet, else a matmul peak measured on the spot; whether torch.compile and autocast
  ran, and which attention kernel; the peak memory of a step. --gpt2-124m measures GPT-2 124M's
  shape with the preset's batch;
- sampling: tokens/s for 500 new tokens from a 1-token prompt, with and without the KV cache;
- attention: each backend's causal forward time and peak memory at T = 256, 1024 and 4096
  (B = 1, H and D from the preset), where the readable path holds (T, T) weights and tiled does not.

With --data-mb MB it measures the corpus's preparation instead: a generated text of MB megabytes
(200 when no number follows) made into .bin files with data.tokenizer and data.workers: MB/s,
tokens/s, peak memory, and the ratio to tiktoken's own encode_ordinary_batch on the same text, one
thread per core, the two run in turns.


With --variants kv-heads,window,gate,sink it measures instead, for the preset and each variant of
model/ablations.py (names as compare.py takes them), at a context of block_size tokens, batch 1: the
parameters, the KV cache's bytes after block_size tokens and per token, and cached sampling's
tokens/s after a full prompt (harness/experiments/variant_bench.py).

With --whole-run it profiles one whole `python train.py` run of the preset instead (the same flags,
real data, evaluations and all; its output goes to stderr, its run folder to a temporary one unless
--runs-dir says): the wall and CPU seconds of its start-up (interpreter, imports, device, model,
optimizer, TensorBoard's writer), data, steps (forward, backward, the optimizer's update),
evaluations, the probe, logging and checkpoints.

It prints markdown tables; with --json, one JSON object on stdout instead (the tables go to stderr).
The measurements live in harness/experiments/benchmark.py and data_bench.py, the timers and the CPU
memory tracker in harness/experiments/profiling.py, the whole-run profile in
harness/experiments/whole_run.py.
"""

from harness.stopping import exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from harness.arguments import EVERY, positive_float, variant_names
from harness.cli import OneLineParser, run_command
from harness.experiments.bench_cost import bench_cost
from harness.experiments.benchmark import (
    GPT2_124M_FLAG,
    expand_gpt2_124m,
    format_tables,
    measure_all,
)
from harness.experiments.data_bench import MIN_MB, bench_data, format_data_table
from harness.experiments.profiling import load_average, machine_name
from harness.experiments.variant_bench import format_variants, measure_variants
from harness.experiments.whole_run import format_whole_run, profile_whole_run
from harness.training.budget import duration
from harness.training.runlog import evaluations
from harness.training.runtime import setup_runtime


def megabytes(text: str) -> float:
    """--data-mb's size: a text smaller than MIN_MB would be empty once cut to whole bytes, or
    measure only the start-up.
    """
    value = positive_float(text)
    if value < MIN_MB:
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_MB:g} (a kilobyte of text), got {text}"
        )
    return value


def whole_run(argv: list[str], cfg, runs_dir_given: bool) -> dict:
    """One `python train.py argv...` under the phase clock, with the machine and the run's final
    val.
    """
    with tempfile.TemporaryDirectory(prefix="whole-run-") as scratch:
        runs_dir = Path(cfg.train.runs_dir if runs_dir_given else scratch)
        result = profile_whole_run([*argv, "--runs-dir", str(runs_dir)])
        vals = (
            [row["loss/val"] for row in evaluations(runs_dir / cfg.run_name)]
            if result["code"] == 0
            else []
        )
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
    # each measures something else: given both, one would be ignored
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
    instead.add_argument(
        "--variants",
        type=variant_names,
        metavar="NAMES",
        help=f"measure the KV cache and cached sampling of the preset and these variants instead, from {EVERY}",
    )
    parser.add_argument(
        GPT2_124M_FLAG,
        action="store_true",
        help="GPT-2 124M's shape: 12 layers, 12 heads, 768 wide, context 1024, GPT-2 tokens",
    )
    argv = expand_gpt2_124m(argv)
    args, cfg = parser.parse_with_config(argv)
    log = lambda text: print(text, file=sys.stderr)  # noqa: E731
    runtime = setup_runtime(cfg.train)
    if args.data_mb:
        result = bench_data(args.data_mb, cfg.data.tokenizer, cfg.data.workers, log=log)
        tables = format_data_table(result)
    elif args.whole_run:
        train_argv = [a for a in argv if a not in ("--json", "--whole-run")]
        result = whole_run(
            train_argv, cfg, any(key == "train.runs_dir" for key, _ in args.overrides)
        )
        if result["code"] != 0:
            return result["code"]  # train.py said why, on stderr
        result |= {
            "machine": machine_name(runtime.device),
            "device": str(runtime.device),
            "torch_version": torch.__version__,
        }
        # the child's threads too: OMP_NUM_THREADS
        result |= {"load_avg_1min": load_average(), "torch_threads": torch.get_num_threads()}
        tables = format_whole_run(result)
    elif args.variants:
        machine = {
            "machine": machine_name(runtime.device),
            "device": str(runtime.device),
            "torch_version": torch.__version__,
        }
        machine |= {"load_avg_1min": load_average(), "torch_threads": torch.get_num_threads()}
        result = measure_variants(cfg, runtime, args.variants, machine, log=log)
        tables = format_variants(result)
    else:
        log(
            f"benchmarking: about {duration(bench_cost(cfg, runtime))} (estimated), after train.py's checks of the model and its step"
        )
        result = measure_all(cfg, runtime, log=log)
        tables = format_tables(result)
    if args.json:
        print(tables, file=sys.stderr)
        print(json.dumps(result))
    else:
        print(tables)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
