"""docs/figures.json: every measured figure that README.md and docs/ quote, in one file.

Each entry is the result of one command, with that command, the machine it ran on (processor, cores,
torch threads and version, the load average when it was recorded) and the date. tools/docs_figures.py
renders the docs' tables and quoted numbers from it, and tests/test_docs_figures.py fails when a doc
quotes a figure that this file does not hold.
"""

import json
import os
import platform
import time
from pathlib import Path

import torch

from data.files import write_atomically

FIGURES = Path(__file__).resolve().parent.parent / "docs" / "figures.json"


def machine() -> str:
    """This machine in words: processor, cores, torch threads, torch version, and how busy it is now."""
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


def record(key: str, command: str, value, path: Path = FIGURES) -> Path:
    """Store `value`, the result of `command`, under `key` with this machine and today's date; returns the file."""
    figures = read_figures(path) if path.is_file() else {}
    figures[key] = {"command": command, "machine": machine(), "date": time.strftime("%Y-%m-%d"), "value": value}
    write_atomically(path, (json.dumps(figures, indent=1, sort_keys=True) + "\n").encode())
    return path
