"""docs/figures.json: every measured figure that README.md and docs/ quote, in one file.

Each entry is the result of one command, with that command, the machine it ran on (processor, cores,
torch threads and version, the load average when it was recorded) and the date.
tools/docs_figures.py renders the docs' tables and quoted numbers from it, and
tests/test_docs_figures.py fails when a doc quotes a figure that this file does not hold. The
readers below turn what runs leave behind (a comparison's compare.json and its runs' metrics.jsonl,
inspect_attention.py's ablation.json, score.py --contexts's contexts.json) into entries;
tools/probe_cost.py reads bench.py --whole-run's reports.
"""

import json
import os
import platform
import re
import time
from pathlib import Path

import numpy as np
import torch

from data.files import write_atomically
from harness.experiments.stats import half_width, paired_difference, spread, to_json
from harness.training.runlog import read_metrics
from model.ablations import ABLATIONS, CHANGES, JOIN
from tools.tables import in_table_order, removed

FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures.json"


def machine() -> str:
    """This machine in words: processor, cores, torch threads, torch version, and how busy it is
    now.
    """
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return f"{name}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}{load}"


def read_figures(path: Path = FIGURES) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def record(key: str, command: str, value, path: Path = FIGURES, ran_on: str | None = None) -> Path:
    """Store `value`, the result of `command`, under `key` with the machine it ran on (this one
    unless `ran_on` says) and today's date; returns the file."""
    figures = read_figures(path) if path.is_file() else {}
    figures[key] = {
        "command": command,
        "machine": ran_on or machine(),
        "date": time.strftime("%Y-%m-%d"),
        "value": value,
    }
    write_atomically(path, (json.dumps(figures, indent=1, sort_keys=True) + "\n").encode())
    return path


def record_result(key: str, module: str, argv: list[str], value) -> None:
    """Record what `python -m <module> <argv>` measured under `key` (see record), and say where."""
    print(f"recorded in {record(key, ' '.join(['python -m', module, *argv]), value)}")


def comparison_figures(folder: Path) -> dict:
    """compare.json's means, sds and differences, and from each run's log (read once) its first
    evaluation's spread over seeds and, per variant, the first logged step whose training loss is
    below 0.5 over the seeds: when a cheat takes hold."""
    saved = json.loads((folder / "compare.json").read_text(encoding="utf-8"))
    logs = {name: read_metrics(folder / name) for name in saved["runs"]}
    step0, collapse = {}, {}
    for variant in saved["aggregate"]:
        mine = [
            rows
            for name, rows in logs.items()
            if name == variant or re.fullmatch(rf"{re.escape(variant)}-s\d+", name)
        ]
        first = [next(row for row in rows if "loss/val" in row) for rows in mine]
        step0[variant] = {
            tag: to_json(spread([row[tag] for row in first]))
            for tag in ("attn/entropy", "attn/saturated_frac", "attn/score_std")
        }
        steps = [
            next((row["step"] for row in rows if row.get("loss/train_step", 0.5) < 0.5), None)
            for rows in mine
        ]
        if steps and None not in steps:
            collapse[variant] = {"min": min(steps), "max": max(steps)}
    return {
        "seeds": saved["seeds"],
        "aggregate": saved["aggregate"],
        "differences": saved["differences"],
        "step0": step0,
        "collapse": collapse,
    }


def comparison_key(config: str, value: dict) -> str:
    """Where a comparison is recorded: <config>-<N>seeds, followed by the cures and positions it
    trains beside the ablations ("char-3seeds-rope"), so that recording such a comparison leaves the
    ablations' entry as it is."""
    trained = {name for variant in value["aggregate"] for name in removed(variant, config)}
    others = [c.name for c in CHANGES if c.name in trained and c not in ABLATIONS]
    return f"{config}-{len(value['seeds'])}seeds" + "".join(f"-{name}" for name in others)


def comparison_command(config: str, value: dict) -> str:
    """The compare.py command that trained these variants: --variants only when they are not the
    default, each ablation alone.
    """
    picked = [
        JOIN.join(removed(variant, config))
        for variant in in_table_order(value["aggregate"], config)
    ][1:]
    every = [a.name for a in ABLATIONS]
    return f"python compare.py --config {config} --seeds {len(value['seeds'])}" + (
        f" --variants {','.join(picked)}" if picked != every else ""
    )


def ablation_figures(folder: Path) -> dict | None:
    """What inspect_attention.py --ablate wrote for each run of a comparison (its
    inspect/ablation.json), and over the runs:
    the closed fractions' mean, sd and 95% interval, and the range of each head alone and of each
    layer whole."""
    runs = {}
    for path in sorted(folder.glob("*/inspect/ablation.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        runs[path.parent.parent.name] = {
            key: v for key, v in result.items() if key != "random_draws"
        } | {"draws": len(result["random_draws"])}
    if not runs:
        return None
    summary = {
        name: interval([r[key] for r in runs.values()])
        for name, key in (("closed", "closed_fraction"), ("random", "random_closed_fraction"))
    }
    heads = [f for r in runs.values() for f in r["each_head"].values()]
    summary["each_head"] = {"min": min(heads), "max": max(heads)}
    for layer in next(iter(runs.values()))["each_layer"]:
        closed = [r["each_layer"][layer] for r in runs.values()]
        summary[layer] = {"min": min(closed), "max": max(closed)}
    # every layer after the first
    later = [f for r in runs.values() for layer, f in r["each_layer"].items() if layer != "L0"]
    summary["later_layers"] = {"min": min(later), "max": max(later)} if later else None
    return {"runs": runs, "summary": summary}


def sweep_figures(folder: Path) -> dict:
    """What sweep.py found (its sweep.json), less the runs' own summaries: per variant and rate the
    aggregates, the differences from base, the growth of the largest score, its course at the
    highest rate, and the preset rate's table."""
    saved = json.loads((folder / "sweep.json").read_text(encoding="utf-8"))
    return {key: value for key, value in saved.items() if key != "runs"}


def sweep_command(config: str, value: dict) -> str:
    """The sweep.py command that trained these runs (--jobs aside: it changes no figure)."""
    return (
        f"python sweep.py --config {config} --seeds {len(value['seeds'])} --lrs {','.join(value['lrs'])} "
        f"--variants {','.join(value['variants'].values())}"
    )


def interval(values: list[float]) -> dict:
    """Mean, sd, count and the 95% interval's ends (Student's t; the mean itself with one value)."""
    s = spread(values)
    half = half_width(s) or 0.0
    return {"mean": s.mean, "std": s.std, "n": s.n, "low": s.mean - half, "high": s.mean + half}


CURVE_BIN = 16  # positions per point of the loss-against-position picture


def context_figures(folder: Path, config: str) -> dict | None:
    """What score.py --contexts wrote for the runs of a comparison (each one's contexts.json), per
    variant over its seeds:
    at each context the loss and each position bucket's loss (interval); along its longest context
    the loss in bins of CURVE_BIN positions, mean, min and max over the seeds (the picture's line
    and band); and under "differences", each variant minus each one before it in table order, paired
    by seed, at the contexts both were scored at."""
    found: dict[str, dict[str, dict]] = {}  # variant -> seed -> contexts.json
    for path in sorted(folder.glob("*/contexts.json")):
        variant, seed = re.fullmatch(r"(.+?)(?:-s(\d+))?", path.parent.name).groups()
        found.setdefault(variant, {})[seed] = json.loads(path.read_text(encoding="utf-8"))
    if not found:
        return None
    order = in_table_order(found, config)
    out: dict = {
        "block_size": next(iter(next(iter(found.values())).values()))["block_size"],
        "differences": {},
    }
    for variant in order:
        runs = list(found[variant].values())
        entry = out[variant] = {"positions": runs[0]["positions"], "seeds": len(runs)}
        for label, first in runs[0]["contexts"].items():
            scored = [r["contexts"][label] for r in runs]
            entry[label] = {
                "length": first["length"],
                "loss": interval([c["loss"] for c in scored]),
            }
            entry[label] |= {
                name: interval([c["buckets"][name]["loss"] for c in scored])
                for name in first["buckets"]
            }
        longest = list(runs[0]["contexts"])[-1]
        # (seeds, bins)
        bins = np.array([binned(r["contexts"][longest]["by_position"]) for r in runs])
        entry["curve"] = {
            "context": longest,
            "bin": CURVE_BIN,
            "first": list(range(0, len(bins[0]) * CURVE_BIN, CURVE_BIN)),
            "mean": bins.mean(0).tolist(),
            "min": bins.min(0).tolist(),
            "max": bins.max(0).tolist(),
        }
        for reference in order[: order.index(variant)]:
            seeds = sorted(set(found[variant]) & set(found[reference]))
            shared = (
                [
                    label
                    for label in runs[0]["contexts"]
                    if label in found[reference][seeds[0]]["contexts"]
                ]
                if seeds
                else []
            )
            for label in shared:
                mine, theirs = (
                    [found[v][s]["contexts"][label] for s in seeds] for v in (variant, reference)
                )
                # buckets: those both cut
                cells = {
                    "loss": [(a["loss"], b["loss"]) for a, b in zip(mine, theirs, strict=True)]
                }
                cells |= {
                    name: [
                        (a["buckets"][name]["loss"], b["buckets"][name]["loss"])
                        for a, b in zip(mine, theirs, strict=True)
                    ]
                    for name in mine[0]["buckets"]
                    if name in theirs[0]["buckets"]
                }
                out["differences"].setdefault(variant, {}).setdefault(reference, {})[label] = {
                    name: difference(pairs) for name, pairs in cells.items()
                }
    return out


def binned(losses: list[float]) -> list[float]:
    """The mean loss of each CURVE_BIN positions in turn (the last bin may hold fewer)."""
    return [float(np.mean(losses[i : i + CURVE_BIN])) for i in range(0, len(losses), CURVE_BIN)]


def difference(pairs: list[tuple[float, float]]) -> dict:
    """a - b paired by seed: mean, the 95% interval's ends (the mean itself with one pair) and the
    count.
    """
    d = paired_difference([a for a, _ in pairs], [b for _, b in pairs])
    half = d.half_width or 0.0
    return {"mean": d.mean, "low": d.mean - half, "high": d.mean + half, "n": d.n}


def factors_said(contexts: dict) -> str:
    """The --contexts each variant was scored at, from context_figures' entry: "0.5,1 for char;
    0.5,1,2,4 for char-no-pos, char-rope".
    """
    by_factors: dict[str, list[str]] = {}
    for name, entry in contexts.items():
        if isinstance(entry, dict) and "curve" in entry:
            factors = ",".join(
                f"{c['length'] / contexts['block_size']:g}"
                for c in entry.values()
                if isinstance(c, dict) and "length" in c
            )
            by_factors.setdefault(factors, []).append(name)
    return "; ".join(f"{factors} for {', '.join(names)}" for factors, names in by_factors.items())


def positions_title(config: str, contexts: dict) -> str:
    """The title of the loss-against-position picture."""
    seeds = max(
        entry["seeds"]
        for entry in contexts.values()
        if isinstance(entry, dict) and "curve" in entry
    )
    return (
        f"{config}: the loss at each position of a window, trained at {contexts['block_size']} tokens (score.py --contexts)\n"
        f"mean over {seeds} seeds, band from the lowest to the highest, {CURVE_BIN} positions a point"
    )
