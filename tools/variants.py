"""Attention as shipped models have it, side by side: python -m tools.variants [--config char]
[--runs-dir runs] [--bench REPORT...]

Reads the runs of `python compare.py --config char --seeds 3 --variants kv-heads,window,gate,sink`
(<runs-dir>/compare-<config>/) and measures each run's last checkpoint on VAL_WINDOWS fixed windows
of val, block_size tokens each: per head, the mean weight on position 0 over rows t >= 1
(model/roles.py's first_token_weight), over the share uniform attention over what each row sees
would give it (uniform_first_token_weight: a window hides position 0 from rows t >= W), and for
--sink the weight the sink takes (1 - each row's sum); from each run's metrics.jsonl, its median
training step in ms. --bench takes the `bench.py --config <config> --variants ... --json` reports
(the KV cache's bytes per token, cached sampling's tokens/s). Each is stored in docs/figures.json
(<config>-variants-weights, <config>-variants-bench, or -bench-<context> past block_size), and
docs/variants-<config>.png is drawn from it: val against the cache's bytes per token.
docs/variants.md's table is rendered from those entries and the comparison's by
tools/docs_figures.py.
"""

import json
import os
import re
import statistics
import sys
from pathlib import Path

import torch

from configs import DataConfig, load_config
from data.batches import get_batch
from data.corpus import load_corpus
from harness.cli import OneLineParser, run_command
from harness.experiments.stats import Spread, half_width
from harness.pictures.curves import plot_tradeoff
from harness.training.checkpoints import load_model
from harness.training.runlog import evaluations, read_metrics
from model.ablations import CHANGES, SHIPPED
from model.roles import first_token_weight, sink_weight, uniform_first_token_weight
from tools.figures import FIGURES, interval, read_figures, record
from tools.tables import in_table_order

VAL_WINDOWS = 8  # val windows a checkpoint is measured on: 8 x 127 rows per head
VAL_SEED = 0  # the windows' offsets: the same for every run


def checkpoint_weights(run: Path, val_ids) -> dict:
    """One run's ckpt.pt on VAL_WINDOWS val windows: the first-token weight (mean and largest over
    heads), the uniform share, their ratio (mean and largest over heads), and the sink's weight
    (mean over heads)."""
    model, _, _ = load_model(run / "ckpt.pt")
    T = model.cfg.block_size
    x, _ = get_batch(val_ids, VAL_WINDOWS, T, torch.Generator().manual_seed(VAL_SEED))  # (B, T)
    first, ratio, sink = [], [], []
    # (B, H, T, T) per layer
    for block, weights in zip(model.blocks, model.attention_weights(x), strict=True):
        uniform = uniform_first_token_weight(T, block.attn.window)
        for h in range(weights.shape[1]):
            first.append(first_token_weight(weights[:, h]))
            ratio.append(first[-1] / uniform)
            # without a sink, 1 - the row's sum is float rounding: +-1e-8
            sink.append(max(0.0, sink_weight(weights[:, h])))
    return {
        "first": statistics.mean(first),
        "first_max": max(first),
        "uniform": uniform_first_token_weight(T, model.cfg.window),
        "ratio": statistics.mean(ratio),
        "ratio_max": max(ratio),
        "sink": statistics.mean(sink),
    }


def step_ms(run: Path) -> float:
    """The run's median training step in ms, from the tokens/s it logged and the tokens of a step
    (its config.json).
    """
    cfg = json.loads((run / "config.json").read_text(encoding="utf-8"))
    tokens = (
        cfg["train"]["batch_size"] * cfg["train"]["grad_accum_steps"] * cfg["model"]["block_size"]
    )
    rates = [row["perf/tokens_per_s"] for row in read_metrics(run) if "perf/tokens_per_s" in row]
    return 1e3 * tokens / statistics.median(rates)


def finished(run: Path) -> bool:
    """Whether the run evaluated at its last step (a run still training, or stopped, has a
    checkpoint too).
    """
    rows, cfg = evaluations(run), json.loads((run / "config.json").read_text(encoding="utf-8"))
    return bool(rows) and rows[-1]["step"] == cfg["train"]["max_steps"]


def measure_runs(folder: Path) -> dict:
    """Per variant (run name less its seed), over its finished runs: each measure's mean, sd and 95%
    interval, and the runs'.
    """
    corpora: dict[str, object] = {}  # the val ids of each text the runs trained on, read once
    found: dict[str, dict[str, dict]] = {}
    for run in sorted(p for p in folder.iterdir() if (p / "ckpt.pt").is_file() and finished(p)):
        variant, seed = re.fullmatch(r"(.+?)(?:-s(\d+))?", run.name).groups()
        data = DataConfig(**json.loads((run / "config.json").read_text(encoding="utf-8"))["data"])
        if repr(data) not in corpora:
            corpora[repr(data)] = load_corpus(data).val
        val_ids = corpora[repr(data)]
        found.setdefault(variant, {})[seed or ""] = checkpoint_weights(run, val_ids) | {
            "step_ms": step_ms(run)
        }
        print(f"{run.name}: {found[variant][seed or '']}", flush=True)
    return {
        variant: {
            key: interval([r[key] for r in runs.values()]) for key in next(iter(runs.values()))
        }
        | {"runs": runs}
        for variant, runs in found.items()
    }


def bench_key(config: str, report: dict) -> str:
    """Where a bench.py --variants report goes: <config>-variants-bench, with -<context> when not
    the preset's block_size.
    """
    block = load_config(["--config", config]).model.block_size
    return f"{config}-variants-bench" + (
        "" if report["variant_context"] == block else f"-{report['variant_context']}"
    )


def plot_variants(figures: dict, config: str) -> Path:
    """docs/variants-<config>.png: each variant's val (mean, 95% interval over the seeds) against
    its KV cache's bytes per token.
    """
    compared = figures[
        f"{config}-3seeds" + "".join(f"-{c.name}" for c in CHANGES if c.kind == SHIPPED)
    ]["value"]
    bench = figures[f"{config}-variants-bench"]["value"]
    points = [
        (
            name,
            bench["variants"][name]["cache_bytes_per_token"],
            s["loss/val"]["mean"],
            half_width(Spread(**s["loss/val"])) or 0.0,
        )
        for name, s in (
            (n, compared["aggregate"][n]) for n in in_table_order(compared["aggregate"], config)
        )
    ]
    path = FIGURES.parent / f"variants-{config}.png"
    plot_tradeoff(
        points,
        path,
        f"KV cache, bytes per token after {bench['variant_context']} tokens (float32; bench.py --variants)",
        "val loss at the end of training",
        f"{config}: what each variant costs in loss against what it saves in cache\n"
        f"mean over {len(compared['seeds'])} seeds, bars: 95% interval of each mean (paired differences: docs/variants.md)",
    )
    return path


def main(argv: list[str]) -> int:
    parser = OneLineParser(__doc__)
    parser.add_argument(
        "--config", default="char", help="the preset the comparison trained (default char)"
    )
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs"),
        help="where compare-<config>/ is (default: runs)",
    )
    parser.add_argument(
        "--bench",
        nargs="+",
        type=Path,
        default=[],
        metavar="REPORT",
        help="bench.py --variants --json reports",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    folder = args.runs_dir / f"compare-{args.config}"
    if not folder.is_dir():
        parser.error(
            f"no comparison at {folder}; run python compare.py --config {args.config} --seeds 3 --variants ... first"
        )
    reports = []
    # each read first: a report missing or cut short is refused before anything is measured
    for path in args.bench:
        try:
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as e:
            parser.error(
                f"--bench {path}: not a bench.py --variants --json report ({type(e).__name__}); make it with that command"
            )
        if "variants" not in reports[-1]:
            parser.error(
                f"--bench {path}: not a bench.py --variants --json report; make it with that command"
            )
    command = f"python -m tools.variants --config {args.config} --runs-dir {args.runs_dir} (the runs of compare.py in {folder})"
    record(f"{args.config}-variants-weights", command, measure_runs(folder), path=FIGURES)
    preset = load_config(["--config", args.config])
    for report in reports:
        context = (
            ""
            if report["variant_context"] == preset.model.block_size
            else f" --model.block_size={report['variant_context']}"
        )
        context += (
            ""
            if report.get("batch_size", preset.train.batch_size) == preset.train.batch_size
            else f" --train.batch_size={report['batch_size']}"
        )
        command = f"OMP_NUM_THREADS=1 python bench.py --config {args.config} --variants {','.join(report['variant_names'])}{context} --json"
        ran_on = f"{report['machine']}, {os.cpu_count()} cores, {report['torch_threads']} torch threads, torch {report['torch_version']}"
        record(
            bench_key(args.config, report),
            command,
            report,
            path=FIGURES,
            ran_on=f"{ran_on}, load average {report['load_avg_1min']:.1f}",
        )
    try:
        print(f"recorded in {FIGURES}; drew {plot_variants(read_figures(FIGURES), args.config)}")
    except KeyError as e:
        print(
            f"recorded in {FIGURES}; no picture yet: docs/figures.json holds no {e}; python -m tools.docs_figures --record stores the comparison"
        )
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
