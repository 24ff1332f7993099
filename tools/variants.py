"""Shipped attention variants side by side, into docs/figures.json and docs/variants-<config>.png,
from compare.py's finished runs and bench.py --variants reports."""

import json
import statistics
import sys
from pathlib import Path

import torch

from configs import DataConfig, load_config
from data.batches import get_batch
from data.corpus import load_corpus
from harness.cli import OneLineParser, run_command
from harness.experiments.stats import Spread, half_width
from harness.folders import read_json
from harness.pictures.curves import plot_tradeoff
from harness.training.checkpoints import load_model
from harness.training.runlog import evaluations, read_metrics
from model.roles import first_token_weight, sink_weight, uniform_first_token_weight
from tools.figures import FIGURES, interval, machine, read_figures, record, run_and_seed
from tools.tables import in_table_order, shipped_key

VAL_WINDOWS = 8  # the same for every run


def checkpoint_weights(run: Path, val_ids) -> dict:
    model = load_model(run / "ckpt.pt")[0]
    T = model.cfg.block_size
    x, _ = get_batch(val_ids, VAL_WINDOWS, T, torch.Generator().manual_seed(0))  # (B, T)
    first, ratio, sink = [], [], []
    for block, weights in zip(model.blocks, model.attention_weights(x), strict=True):  # (B,H,T,T)
        uniform = uniform_first_token_weight(T, block.attn.window)
        for head in weights.unbind(1):
            first.append(first_token_weight(head))
            ratio.append(first[-1] / uniform)
            # without a sink, 1 - the row's sum is float rounding: +-1e-8
            sink.append(max(0.0, sink_weight(head)))
    return dict(
        first=statistics.mean(first),
        first_max=max(first),
        uniform=uniform_first_token_weight(T, model.cfg.window),
        ratio=statistics.mean(ratio),
        ratio_max=max(ratio),
        sink=statistics.mean(sink),
    )


def measure_runs(folder: Path) -> dict:
    corpora, found = {}, {}  # val ids by data config; variant -> seed -> measures
    for run in sorted(p for p in folder.iterdir() if (p / "ckpt.pt").is_file()):
        cfg = json.loads((run / "config.json").read_text(encoding="utf-8"))
        rows = evaluations(run)
        # a run still training, or stopped, has a checkpoint too
        if not rows or rows[-1]["step"] != cfg["train"]["max_steps"]:
            continue
        variant, seed = run_and_seed(run.name)
        data = DataConfig(**cfg["data"])
        if repr(data) not in corpora:
            corpora[repr(data)] = load_corpus(data).val
        train = cfg["train"]
        tokens = train["batch_size"] * train["grad_accum_steps"] * cfg["model"]["block_size"]
        rates = [r["perf/tokens_per_s"] for r in read_metrics(run) if "perf/tokens_per_s" in r]
        measured = checkpoint_weights(run, corpora[repr(data)])
        measured["step_ms"] = 1e3 * tokens / statistics.median(rates)
        found.setdefault(variant, {})[seed or ""] = measured
        print(f"{run.name}: {measured}", flush=True)
    out = {}
    for variant, runs in found.items():
        each = list(runs.values())
        out[variant] = {key: interval([r[key] for r in each]) for key in each[0]} | {"runs": runs}
    return out


def plot_variants(figures: dict, config: str) -> Path:
    compared = figures[shipped_key(config)]["value"]
    bench = figures[f"{config}-variants-bench"]["value"]
    points = []
    for name in in_table_order(compared["aggregate"], config):
        bytes_per_token = bench["variants"][name]["cache_bytes_per_token"]
        val = compared["aggregate"][name]["loss/val"]
        points.append((name, bytes_per_token, val["mean"], half_width(Spread(**val)) or 0.0))
    path = FIGURES.parent / f"variants-{config}.png"
    plot_tradeoff(
        points,
        path,
        f"KV cache, bytes per token after {bench['variant_context']} tokens "
        "(float32; bench.py --variants)",
        "val loss at the end of training",
        f"{config}: what each variant costs in loss against what it saves in cache\n"
        f"mean over {len(compared['seeds'])} seeds, bars: 95% interval of each mean "
        "(paired differences: docs/variants.md)",
    )
    return path


def main(argv: list[str]) -> int:
    parser = OneLineParser(__doc__)
    add = parser.add_argument
    add("--config", default="char", help="the preset the comparison trained (default char)")
    add("--runs-dir", type=Path, default="runs", help="holds compare-<config>/ (default runs)")
    add("--bench", nargs="+", default=[], metavar="REPORT", help="bench.py --variants --json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    folder = args.runs_dir / f"compare-{args.config}"
    if not folder.is_dir():
        parser.error(
            f"no {folder}; run python compare.py --config {args.config} --seeds 3 --variants ..."
        )
    reports = [read_json(path) for path in args.bench]  # None: missing, or not JSON
    for path, report in zip(args.bench, reports, strict=True):
        if not isinstance(report, dict) or "variants" not in report:
            parser.error(f"--bench {path} is no bench.py --variants --json report")
    command = (
        f"python -m tools.variants --config {args.config} --runs-dir {args.runs_dir} "
        f"(the runs of compare.py in {folder})"
    )
    record(f"{args.config}-variants-weights", command, measure_runs(folder), path=FIGURES)
    preset = load_config(["--config", args.config])
    for report in reports:
        key, context = f"{args.config}-variants-bench", ""
        if report["variant_context"] != preset.model.block_size:
            key += f"-{report['variant_context']}"
            context += f" --model.block_size={report['variant_context']}"
        if report.get("batch_size", preset.train.batch_size) != preset.train.batch_size:
            context += f" --train.batch_size={report['batch_size']}"
        variants = ",".join(report["variant_names"])
        command = f"OMP_NUM_THREADS=1 python bench.py --config {args.config} --variants {variants}"
        record(key, f"{command}{context} --json", report, path=FIGURES, ran_on=machine(report))
    try:
        print(f"recorded in {FIGURES}; drew {plot_variants(read_figures(FIGURES), args.config)}")
    except KeyError as e:
        print(f"recorded in {FIGURES}; no picture: no {e} (python -m tools.docs_figures --record)")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
