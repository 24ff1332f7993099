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


With --whole-run it profiles one whole `python train.py` run of the preset instead (the same flags, real
data, evaluations and all; its output goes to stderr, its run folder to a temporary one unless --runs-dir
says): the wall and CPU seconds of its start-up (interpreter, imports, device, model, optimizer, TensorBoard's
writer), data, steps (forward, backward, the optimizer's update), evaluations, the probe, logging and checkpoints.

It prints markdown tables; with --json, one JSON object on stdout instead (the tables go to stderr).
The measurements live in harness/experiments/benchmark.py and data_bench.py, the timers and the CPU memory tracker in
harness/experiments/profiling.py, the whole-run profile in harness/experiments/whole_run.py.
"""

import json
import sys
import tempfile
from pathlib import Path

import torch

from harness.arguments import positive_float
from harness.cli import OneLineParser, run_command
from harness.experiments.benchmark import format_tables, measure_all
from harness.experiments.data_bench import bench_data, format_data_table
from harness.experiments.profiling import load_average, machine_name
from harness.experiments.whole_run import format_whole_run, profile_whole_run
from harness.training.runlog import evaluations
from harness.training.runtime import setup_runtime


def whole_run(argv: list[str], cfg, runs_dir_given: bool) -> dict:
    """One `python train.py argv...` under the phase clock, with the machine and the run's final val."""
    with tempfile.TemporaryDirectory(prefix="whole-run-") as scratch:
        runs_dir = Path(cfg.train.runs_dir if runs_dir_given else scratch)
        result = profile_whole_run([*argv, "--runs-dir", str(runs_dir)])
        vals = [row["loss/val"] for row in evaluations(runs_dir / cfg.run_name)] if result["code"] == 0 else []
    return {"val": round(vals[-1], 4) if vals else None, "command": " ".join(["python train.py", *argv]), **result}


def main(argv: list[str]) -> dict | int:
    parser = OneLineParser("Benchmark training, sampling and attention for a preset, or profile one whole run.", config="base")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (tables go to stderr)")
    parser.add_argument(
        "--data-mb",
        type=positive_float,
        nargs="?",
        const=200.0,
        metavar="MB",
        help="measure preparing a generated MB-megabyte text instead",
    )
    parser.add_argument("--whole-run", action="store_true", help="profile one whole train.py run of the preset, phase by phase")
    args, cfg = parser.parse_with_config(argv)
    log = lambda text: print(text, file=sys.stderr)  # noqa: E731
    runtime = setup_runtime(cfg.train)
    if args.data_mb:
        result = bench_data(args.data_mb, cfg.data.tokenizer, cfg.data.workers, log=log)
        tables = format_data_table(result)
    elif args.whole_run:
        train_argv = [a for a in argv if a not in ("--json", "--whole-run")]
        result = whole_run(train_argv, cfg, any(key == "train.runs_dir" for key, _ in args.overrides))
        if result["code"] != 0:
            return result["code"]  # train.py said why, on stderr
        result |= {"machine": machine_name(runtime.device), "device": str(runtime.device), "torch_version": torch.__version__}
        result |= {"load_avg_1min": load_average(), "torch_threads": torch.get_num_threads()}  # the child's threads too: OMP_NUM_THREADS
        tables = format_whole_run(result)
    else:
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
