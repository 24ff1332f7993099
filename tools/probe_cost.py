"""What the probe costs a whole run, from `bench.py --whole-run --json` reports (python -m
tools.docs_figures --probe-cost KEY REPORT...): each report read and checked whole before any figure
is taken from it, so that a missing file, a file that is not JSON or a report that lacks a field is
one line naming the file and the field, never a traceback.
"""

import math
import statistics
from pathlib import Path

from configs import ConfigError
from harness.folders import read_json
from tools.figures import FIGURES, record

WRITE_ONE = "python bench.py --config char --whole-run --json > REPORT writes one"
# the fields of a report that are text; "torch_threads" is a whole number
TEXTS = ("command", "machine", "torch_version")
TIMES = ("calls", "wall_s", "cpu_s")  # each phase's


def is_number(value, least: float = 0.0) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and least <= value < math.inf
    )


def what_is_wrong(report) -> str | None:
    """What keeps `report` from being a whole `bench.py --whole-run --json` report, in words; None
    when it is one.
    """
    if not isinstance(report, dict):
        return "is not a JSON object"
    for key in ("wall_s", "cpu_s"):  # the shares divide by them
        if not is_number(report.get(key), least=1e-9):
            return f"has no positive number {key!r}"
    if missing := [key for key in TEXTS if not isinstance(report.get(key), str)]:
        return f"has no text {missing[0]!r}"
    if not isinstance(report.get("torch_threads"), int):
        return "has no whole number 'torch_threads'"
    if "val" not in report or not (report["val"] is None or is_number(report["val"], -math.inf)):
        return "has no 'val' (the run's final val loss, or null)"
    phases = report.get("phases")
    if not isinstance(phases, dict) or not all(
        isinstance(p, dict) and all(is_number(p.get(key)) for key in TIMES) for p in phases.values()
    ):
        return f"has no 'phases', each with its {', '.join(TIMES)}"
    return None


def read_report(path: str) -> dict:
    """One report, or a one-line refusal that names the file and what is wrong with it."""
    where = Path(path)
    if not where.is_file():
        raise ConfigError(
            f"--probe-cost: {path} is {'a folder' if where.is_dir() else 'not there'}, not a report; {WRITE_ONE}"
        )
    report = read_json(where)  # None: unreadable, or not JSON
    wrong = "is not JSON (or cannot be read)" if report is None else what_is_wrong(report)
    if wrong:
        raise ConfigError(
            f"--probe-cost: {path} {wrong}, so it is not a bench.py --whole-run --json report; {WRITE_ONE}"
        )
    return report


def record_probe_cost(key: str, *reports: str) -> str:
    """Store under key what the probe costs a whole run (probe_cost), from bench.py --whole-run
    --json reports (files).
    """
    if key.endswith(".json") or Path(key).is_file():
        raise ConfigError(
            f"--probe-cost takes the name to record under first (probe-cost-char), then the reports; got the file {key}"
        )
    runs = [read_report(path) for path in reports]
    value = probe_cost(runs)
    ran_on = "; ".join(
        sorted(
            {
                f"{r['machine']}, {r['torch_threads']} torch threads, torch {r['torch_version']}"
                for r in runs
            }
        )
    )
    record(
        key,
        "bench.py --whole-run --json, with the probe and without, in turns: "
        + "; ".join(value["commands"]),
        value,
        ran_on=ran_on,
    )
    return f"recorded {key} in {FIGURES}: the probe took {max(value['wall_share']):.1%} of a run's wall time at most"


def probe_cost(reports: list[dict]) -> dict:
    """What the probe costs a whole run, from `bench.py --whole-run --json` reports of one preset,
    some with the probe and some without (--train.probes=0), run in turns: per run with it, the
    probe's share of the run's wall and CPU time (its "probe: ..." phase); the median wall and CPU
    time with it and without, and their ratio; each run's final val."""
    probed = [
        r
        for r in reports
        if any(name.startswith("probe:") and p["calls"] for name, p in r["phases"].items())
    ]
    bare = [r for r in reports if r not in probed]
    if not probed or not bare:
        raise ConfigError(
            "give bench.py --whole-run --json reports both with the probe and without it (--train.probes=0)"
        )
    phase = lambda r: next(p for name, p in r["phases"].items() if name.startswith("probe:"))  # noqa: E731
    median = lambda runs, key: statistics.median(r[key] for r in runs)  # noqa: E731
    return {
        "commands": sorted({r["command"] for r in reports}),
        "probes": [phase(r)["calls"] for r in probed],
        "wall_share": [phase(r)["wall_s"] / r["wall_s"] for r in probed],
        "cpu_share": [phase(r)["cpu_s"] / r["cpu_s"] for r in probed if r["cpu_s"]],
        "with": {
            "wall_s": median(probed, "wall_s"),
            "cpu_s": median(probed, "cpu_s"),
            "val": [r["val"] for r in probed],
        },
        "without": {
            "wall_s": median(bare, "wall_s"),
            "cpu_s": median(bare, "cpu_s"),
            "val": [r["val"] for r in bare],
        },
        "wall_ratio": median(probed, "wall_s") / median(bare, "wall_s"),
        "cpu_ratio": median(probed, "cpu_s") / median(bare, "cpu_s"),
        "load_avg_1min": [r.get("load_avg_1min") for r in reports],
    }
