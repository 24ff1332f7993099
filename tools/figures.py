"""docs/figures.json (each entry a command's result, command, machine and date), and the readers
that turn what runs leave into entries."""

import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from data.files import write_atomically
from harness.experiments.profiling import machine_facts
from harness.experiments.stats import half_width, spread, to_json
from harness.folders import OutputError, read_json
from harness.pictures.curves import plot_positions
from harness.training.runlog import evaluations, read_metrics
from model.ablations import ABLATIONS, CHANGES, JOIN
from tools.outputs import runs_folder
from tools.tables import curves, in_table_order, lengths_of, removed

FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures.json"
CURVE_BIN = 16  # positions a point of the loss-by-position picture


def machine(facts: dict | None = None) -> str:
    facts = facts or machine_facts(torch.device("cpu"))
    said = f"{facts['machine']}, {os.cpu_count()} cores, {facts['torch_threads']} torch threads"
    said += f", torch {facts['torch_version']}"
    if facts.get("load_avg_1min") is not None:
        said += f", load average {facts['load_avg_1min']:.1f}"
    return said


def run_and_seed(name: str) -> tuple[str, str | None]:
    """A run's variant and seed: ("char-no-mask", "1337") for char-no-mask-s1337."""
    return re.fullmatch(r"(.+?)(?:-s(\d+))?", name).groups()


def read_figures(path: Path = FIGURES) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def record(key: str, command: str, value, path: Path = FIGURES, ran_on: str | None = None) -> None:
    figures = read_figures(path) if path.is_file() else {}
    figures[key] = {
        "command": command,
        "machine": ran_on or machine(),
        "date": time.strftime("%Y-%m-%d"),
        "value": value,
    }
    write_atomically(path, (json.dumps(figures, indent=1, sort_keys=True) + "\n").encode())


def record_result(key: str, module: str, argv: list[str], value) -> None:
    record(key, " ".join(["python -m", module, *argv]), value)
    print(f"recorded in {FIGURES}")


def spans(values: list[float]) -> dict:
    return {"min": min(values), "max": max(values)}


def comparison_figures(folder: Path) -> dict:
    saved = read_figures(folder / "compare.json")
    logs = {name: read_metrics(folder / name) for name in saved["runs"]}
    step0, collapse = {}, {}
    for variant in saved["aggregate"]:
        mine = [rows for name, rows in logs.items() if run_and_seed(name)[0] == variant]
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
            collapse[variant] = spans(steps)
    kept = {key: saved[key] for key in ("seeds", "aggregate", "differences")}
    return kept | {"step0": step0, "collapse": collapse}


def comparison_key(config: str, value: dict) -> str:
    """<config>-<N>seeds, then its changes other than ablations: "char-3seeds-rope"."""
    trained = {name for variant in value["aggregate"] for name in removed(variant, config)}
    others = "".join(f"-{c.name}" for c in CHANGES if c.name in trained and c not in ABLATIONS)
    return f"{config}-{len(value['seeds'])}seeds{others}"


def comparison_command(config: str, value: dict) -> str:
    order = in_table_order(value["aggregate"], config)
    picked = [JOIN.join(removed(variant, config)) for variant in order][1:]
    command = f"python compare.py --config {config} --seeds {len(value['seeds'])}"
    if picked != [a.name for a in ABLATIONS]:
        command += f" --variants {','.join(picked)}"
    return command


def ablation_figures(folder: Path) -> dict | None:
    runs = {}
    for path in sorted(folder.glob("*/inspect/ablation.json")):
        result = read_figures(path)
        result["draws"] = len(result.pop("random_draws"))
        runs[path.parent.parent.name] = result
    if not runs:
        return None
    summary = {
        name: interval([r[key] for r in runs.values()])
        for name, key in (("closed", "closed_fraction"), ("random", "random_closed_fraction"))
    }
    summary["each_head"] = spans([f for r in runs.values() for f in r["each_head"].values()])
    for layer in next(iter(runs.values()))["each_layer"]:
        summary[layer] = spans([r["each_layer"][layer] for r in runs.values()])
    later = [f for r in runs.values() for layer, f in r["each_layer"].items() if layer != "L0"]
    summary["later_layers"] = spans(later) if later else None
    return {"runs": runs, "summary": summary}


def sweep_figures(folder: Path) -> dict:
    saved = read_figures(folder / "sweep.json")
    del saved["runs"]
    return saved


def sweep_command(config: str, value: dict) -> str:
    # --jobs aside: it changes no figure
    return (
        f"python sweep.py --config {config} --seeds {len(value['seeds'])} "
        f"--lrs {','.join(value['lrs'])} --variants {','.join(value['variants'].values())}"
    )


def interval(values: list[float]) -> dict:
    s = spread(values)
    half = half_width(s) or 0.0
    return dataclasses.asdict(s) | {"low": s.mean - half, "high": s.mean + half}


def losses(context: dict) -> dict[str, float]:
    return {"loss": context["loss"]} | {name: b["loss"] for name, b in context["buckets"].items()}


def context_figures(folder: Path, config: str) -> dict | None:
    found = {}  # variant -> seed -> contexts.json
    for path in sorted(folder.glob("*/contexts.json")):
        variant, seed = run_and_seed(path.parent.name)
        found.setdefault(variant, {})[seed] = read_figures(path)
    if not found:
        return None
    order = in_table_order(found, config)
    out: dict = {"differences": {}}
    for variant in order:
        runs = list(found[variant].values())
        out.setdefault("block_size", runs[0]["block_size"])
        contexts = runs[0]["contexts"]
        entry = out[variant] = {"positions": runs[0]["positions"], "seeds": len(runs)}
        for label, first in contexts.items():
            scored = [losses(r["contexts"][label]) for r in runs]
            entry[label] = {name: interval([s[name] for s in scored]) for name in scored[0]}
            entry[label]["length"] = first["length"]
        longest = list(contexts)[-1]
        by_position = [r["contexts"][longest]["by_position"] for r in runs]
        starts = range(0, len(by_position[0]), CURVE_BIN)
        bins = np.array([[np.mean(p[i : i + CURVE_BIN]) for i in starts] for p in by_position])
        entry["curve"] = {"context": longest, "bin": CURVE_BIN, "first": list(starts)}
        entry["curve"] |= {end: getattr(bins, end)(0).tolist() for end in ("mean", "min", "max")}
        for reference in order[: order.index(variant)]:
            seeds = sorted(set(found[variant]) & set(found[reference]))
            for label in contexts:
                if not seeds or label not in found[reference][seeds[0]]["contexts"]:
                    continue
                pairs = [
                    [losses(found[v][s]["contexts"][label]) for v in (variant, reference)]
                    for s in seeds
                ]
                differences = out["differences"].setdefault(variant, {}).setdefault(reference, {})
                differences[label] = {  # paired by seed; the buckets both cut
                    name: interval([a[name] - b[name] for a, b in pairs])
                    for name in pairs[0][0]
                    if name in pairs[0][1]
                }
                for d in differences[label].values():
                    del d["std"]
    return out


def factors_said(contexts: dict) -> str:
    """The --contexts of each variant: "0.5,1 for char; 0.5,1,2,4 for char-rope"."""
    by_factors: dict[str, list[str]] = {}
    for name, entry in curves(contexts).items():
        lengths = lengths_of(entry).values()
        factors = ",".join(f"{n / contexts['block_size']:g}" for n in lengths)
        by_factors.setdefault(factors, []).append(name)
    return "; ".join(f"{factors} for {', '.join(names)}" for factors, names in by_factors.items())


def positions_title(config: str, contexts: dict) -> str:
    seeds = max(e["seeds"] for e in curves(contexts).values())
    return (
        f"{config}: the loss at each position of a window, trained at {contexts['block_size']} "
        f"tokens (score.py --contexts)\nmean over {seeds} seeds, band from the lowest to the "
        f"highest, {CURVE_BIN} positions a point"
    )


def holds(folder: Path, name: str) -> bool:
    path = folder / name
    saved = read_json(path) if path.is_file() else {}
    if not isinstance(saved, dict):
        raise OutputError(f"{path} is not a JSON object; run its command again or move the folder")
    return "aggregate" in saved


def record_runs(runs_dir: Path, quoted: set[str]) -> list[str]:
    recorded = []
    for folder in sorted(runs_folder(runs_dir).iterdir()):
        if not folder.is_dir() or ".old-" in folder.name:
            continue
        if holds(folder, "compare.json"):
            value, config = comparison_figures(folder), folder.name.removeprefix("compare-")
            key, command = comparison_key(config, value), comparison_command(config, value)
            record(key, command, value)
            each = f"--runs-dir {folder} --run RUN"
            if ablations := ablation_figures(folder):
                recorded.append(f"{config}-ablation")
                ablate = f"python inspect_attention.py {each} --ablate next-token"
                record(recorded[-1], f"{ablate}, for each --no-mask RUN of {command}", ablations)
            if contexts := context_figures(folder, config):
                recorded.append(f"{config}-contexts")
                said = f"for each RUN of {command} (FACTORS: {factors_said(contexts)})"
                record(recorded[-1], f"python score.py {each} --contexts FACTORS, {said}", contexts)
                picture = FIGURES.parent / f"contexts-{config}.png"
                plot_positions(contexts, picture, positions_title(config, contexts))
        elif holds(folder, "sweep.json"):
            key, value = f"{folder.name.removeprefix('sweep-')}-sweep", sweep_figures(folder)
            record(key, sweep_command(key.removesuffix("-sweep"), value), value)
            shutil.copyfile(folder / "sweep.png", FIGURES.parent / f"{folder.name}.png")
        elif folder.name in quoted and (rows := evaluations(folder)):
            key = folder.name
            tags = ("step", "loss/train", "loss/val", "loss/val_honest")
            last = {tag: rows[-1][tag] for tag in tags if tag in rows[-1]}
            record(key, f"python train.py (run {key}; its config.json says how)", {"last": last})
        else:
            continue
        recorded.append(key)
    return recorded
