"""bench.py --whole-run: `python -m harness.experiments.whole_run REPORT train.py ARGS...` runs
train.py unchanged with the functions in PHASES clocked, and writes REPORT as JSON."""

# ruff: noqa: E402 (the imports below the clock on purpose)
import time

# first thing: the interpreter's start lies before this line
STARTED = (time.time(), time.perf_counter(), time.process_time())

import functools
import json
import os
import pkgutil
import resource
import runpy
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

IMPORTS, LOOP = "start-up: imports", "the rest: the loop's own work (schedule, progress bar)"
EXIT, CONFIG = "the rest: the interpreter's exit", "start-up: the config"
PHASES = {
    CONFIG: ["harness.cli:OneLineParser.parse_with_config"],
    "start-up: device and backend switches": ["harness.training.runtime:setup_runtime"],
    "start-up: the model built": ["harness.training.starting_weights:initial_model"],
    "start-up: the optimizer": ["harness.training.optim:make_optimizer"],
    "start-up: the run folder and config.json": ["harness.training.runlog:open_run_dir"],
    "start-up: TensorBoard's writer": ["harness.training.runlog:RunLogger.__init__"],
    "data: corpus and tokenizer": ["harness.training.runtime:load_data"],
    "data: the evaluation batches": ["harness.training.evaluation:make_eval_set"],
    "data: the training batches": ["harness.training.step:draw_micro_batches"],
    "steps: forward": ["model.gpt:GPT.forward"],
    "steps: backward and clip": ["torch:Tensor.backward", "torch.nn.utils:clip_grad_norm_"],
    "steps: the optimizer's update": [
        "harness.training.step:check_finite",  # waits for the device
        "torch.optim:Adam.step",  # AdamW's, alone or under CombinedOptimizer's
        "harness.training.optim:CombinedOptimizer.step",
    ],
    "evaluations: losses": ["harness.training.evaluation:estimate_loss"],
    "evaluations: honest loss, attention statistics": [
        "harness.training.evaluation:measure_breakage"
    ],
    "evaluations: heatmap weights, a sample": ["harness.training.evaluation:evaluate"],
    "probe: the story's signals between evaluations (train.probes)": [
        "harness.training.probe:probe"
    ],
    "logging: scalars, TensorBoard, metrics.jsonl": [
        "model.gradients:qk_grad_norm",
        "harness.training.runlog:RunLogger.log",
        "harness.training.runlog:RunLogger.close",
    ],
    "logging: heatmap pictures, the sample": ["harness.training.runlog:RunLogger.log_evaluation"],
    "checkpoints: ckpt.pt and best.pt written": ["harness.training.checkpoints:Checkpointer.save"],
}
# clocked only when the loop calls them: an evaluation's forward passes are its own
IN_LOOP = ("steps: forward", "steps: backward and clip")
GROUPS = [*dict.fromkeys(name.partition(":")[0] for name in PHASES), "the rest"]
REPO_ROOT = Path(__file__).resolve().parents[2]


class PhaseClock:
    """Calls, wall and CPU seconds per phase: a phase entered inside another pauses the outer's."""

    def __init__(self):
        self.stack = [IMPORTS]
        self.phases = defaultdict(lambda: {"calls": 0, "wall_s": 0.0, "cpu_s": 0.0})
        self.mark = STARTED[1:]  # (wall, CPU) seconds when the clock last charged

    def charge(self) -> None:
        now, top = (time.perf_counter(), time.process_time()), self.phases[self.stack[-1]]
        top["wall_s"] += now[0] - self.mark[0]
        top["cpu_s"] += now[1] - self.mark[1]
        self.mark = now

    def timed(self, fn, phase: str):
        @functools.wraps(fn)
        def clocked(*args, **kwargs):
            top = self.stack[-1]  # an evaluation's forward, AdamW's step in CombinedOptimizer's
            if (phase in IN_LOOP and top != LOOP) or top == phase:
                return fn(*args, **kwargs)
            self.charge()
            if phase == CONFIG:  # the imports end here; then what no phase claims is the loop's
                self.stack[0] = LOOP
            self.stack.append(phase)
            self.phases[phase]["calls"] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.charge()
                self.stack.pop()

        return clocked


def child(report: str, script: str, argv: list[str]) -> None:
    clock = PhaseClock()
    for phase, functions in PHASES.items():
        for where in functions:
            module_name, _, path = where.partition(":")
            owner_path, _, name = path.rpartition(".")
            owner = pkgutil.resolve_name(f"{module_name}:{owner_path}")
            setattr(owner, name, clock.timed(getattr(owner, name), phase))
    sys.argv, code = [script, *argv], 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    finally:
        clock.charge()
        times = {"started": STARTED[0], "ended": time.time(), "cpu_before": STARTED[2]}
        Path(report).write_text(json.dumps({**times, "code": code, "phases": clock.phases}))
    sys.exit(code)


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def profile_whole_run(argv: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        cpu_before, spawned = children_cpu_s(), time.time()
        cmd = [sys.executable, "-m", "harness.experiments.whole_run", report, "train.py", *argv]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        code = subprocess.run(cmd, cwd=REPO_ROOT, stdout=sys.stderr.fileno(), env=env).returncode
        exited, cpu = time.time(), children_cpu_s() - cpu_before
        if not report.is_file():
            return {"code": code or 1, "phases": {}}
        r = json.loads(report.read_text())
    interpreter = {"calls": 1, "wall_s": r["started"] - spawned, "cpu_s": r["cpu_before"]}
    phases = {"start-up: the interpreter": interpreter, **r["phases"]}
    exit_cpu = cpu - r["cpu_before"] - sum(phase["cpu_s"] for phase in r["phases"].values())
    phases[EXIT] = {"calls": 1, "wall_s": exited - r["ended"], "cpu_s": exit_cpu}
    return {"code": r["code"], "phases": phases, "wall_s": exited - spawned, "cpu_s": cpu}


def format_whole_run(r: dict) -> str:
    # here: the child imports nothing before its clock
    from harness.experiments.profiling import machine_line
    from harness.experiments.stats import markdown_table

    groups = {group: [] for group in GROUPS}
    for name, phase in r["phases"].items():
        group, _, detail = name.partition(": ")
        groups[group].append((detail, phase))

    def row(label: str, calls: str, wall: float, cpu: float, bold: str = "") -> list[str]:
        cells = (f"{wall:.2f}", f"{100 * wall / r['wall_s']:.1f} %", f"{cpu:.2f}")
        return [label, calls, *(f"{bold}{cell}{bold}" for cell in cells)]

    rows = [["phase", "calls", "wall s", "share of wall", "CPU s"]]
    for group, members in groups.items():
        if not members:
            continue
        wall, cpu = (sum(phase[key] for _, phase in members) for key in ("wall_s", "cpu_s"))
        rows.append(row(f"**{group}**", "", wall, cpu, "**"))
        for detail, phase in members:
            calls = f"{phase['calls']:,}" if phase["calls"] else ""
            rows.append(row(f"&nbsp; {detail}", calls, phase["wall_s"], phase["cpu_s"]))
    total = [f"**{r['wall_s']:.2f}**", "**100 %**", f"**{r['cpu_s']:.2f}**"]
    rows.append(["**the whole run**", "", *total])
    run = f"`{r['command']}`: {r['wall_s']:.1f} s of wall time, {r['cpu_s']:.2f} s of CPU time"
    return f"{machine_line(r)}\n\n{run}, final val {r['val']}\n\n{markdown_table(rows)}"


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3:])
