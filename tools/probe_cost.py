"""What the probe costs a whole run, from `bench.py --whole-run --json` reports."""

import math
import statistics
from pathlib import Path

from configs import ConfigError
from harness.folders import read_json
from tools.figures import FIGURES, record

TIMES = ("calls", "wall_s", "cpu_s")  # each phase's


def is_number(value, least: float = 0.0) -> bool:
    return type(value) in (int, float) and least <= value < math.inf  # JSON's numbers, no bool


def what_is_wrong(path: Path, report) -> str | None:
    if not path.is_file():
        return "is a folder" if path.is_dir() else "is not there"
    if report is None:
        return "is not JSON (or cannot be read)"
    if not isinstance(report, dict):
        return "is not a JSON object"
    for key in ("wall_s", "cpu_s"):  # the shares divide by them
        if not is_number(report.get(key), least=1e-9):
            return f"has no positive number {key!r}"
    for key in ("command", "machine", "torch_version"):
        if not isinstance(report.get(key), str):
            return f"has no text {key!r}"
    if not isinstance(report.get("torch_threads"), int):
        return "has no whole number 'torch_threads'"
    if "val" not in report or not (report["val"] is None or is_number(report["val"], -math.inf)):
        return "has no 'val' (a number or null)"
    phases = report.get("phases")
    if not isinstance(phases, dict) or not all(
        isinstance(p, dict) and all(is_number(p.get(key)) for key in TIMES) for p in phases.values()
    ):
        return f"has no 'phases', each with its {', '.join(TIMES)}"


def record_probe_cost(key: str, *reports: str) -> str:
    if key.endswith(".json") or Path(key).is_file():
        raise ConfigError(
            "--probe-cost takes the name to record under first (probe-cost-char), then the "
            f"reports; got the file {key}"
        )
    runs = [read_json(path) for path in reports]
    for path, report in zip(reports, runs, strict=True):
        if wrong := what_is_wrong(Path(path), report):
            raise ConfigError(
                f"--probe-cost: {path} {wrong}, not a report of python bench.py --config char "
                "--whole-run --json > REPORT"
            )
    value = probe_cost(runs)
    ran_on = {
        f"{r['machine']}, {r['torch_threads']} torch threads, torch {r['torch_version']}"
        for r in runs
    }
    commands = "; ".join(value["commands"])
    said = f"bench.py --whole-run --json, with the probe and without, in turns: {commands}"
    record(key, said, value, ran_on="; ".join(sorted(ran_on)))
    most = max(value["wall_share"])
    return f"recorded {key} in {FIGURES}: the probe took {most:.1%} of a run's wall time at most"


def probe_cost(reports: list[dict]) -> dict:
    probed = [
        r
        for r in reports
        if any(name.startswith("probe:") and p["calls"] for name, p in r["phases"].items())
    ]
    bare = [r for r in reports if r not in probed]
    if not probed or not bare:
        raise ConfigError(
            "give bench.py --whole-run --json reports both with the probe and without it "
            "(--train.probes=0)"
        )

    def phase(r):
        return next(p for name, p in r["phases"].items() if name.startswith("probe:"))

    def medians(runs):
        times = {key: statistics.median(r[key] for r in runs) for key in ("wall_s", "cpu_s")}
        return times | {"val": [r["val"] for r in runs]}

    with_it, without = medians(probed), medians(bare)
    return {
        "commands": sorted({r["command"] for r in reports}),
        "probes": [phase(r)["calls"] for r in probed],
        "wall_share": [phase(r)["wall_s"] / r["wall_s"] for r in probed],
        "cpu_share": [phase(r)["cpu_s"] / r["cpu_s"] for r in probed if r["cpu_s"]],
        "with": with_it,
        "without": without,
        "wall_ratio": with_it["wall_s"] / without["wall_s"],
        "cpu_ratio": with_it["cpu_s"] / without["cpu_s"],
        "load_avg_1min": [r.get("load_avg_1min") for r in reports],
    }
