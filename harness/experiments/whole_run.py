"""Where the time of one whole training run goes (bench.py --whole-run): run as
`python -m harness.experiments.whole_run REPORT train.py ARGS...`, it puts a clock around the
functions train.py calls (PHASES), runs train.py unchanged and writes REPORT as JSON. A phase
entered inside another pauses the outer one's clock."""

import time

# first thing: the interpreter's start lies before this line
STARTED = (time.time(), time.perf_counter(), time.process_time())

import functools  # noqa: E402 (below the clock on purpose)
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import runpy  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

INTERPRETER, IMPORTS = "start-up: the interpreter", "start-up: imports"
LOOP = "the rest: the loop's own work (schedule, progress bar)"
EXIT = "the rest: the interpreter's exit"
BACKWARD = "steps: backward and clip"
UPDATE = "steps: the optimizer's update"
LOGGING = "logging: scalars, TensorBoard, metrics.jsonl"
# (module:attribute, phase, only inside this phase or None)
PHASES = [
    ("harness.cli:OneLineParser.parse_with_config", "start-up: the config", None),
    ("harness.training.runtime:setup_runtime", "start-up: device and backend switches", None),
    ("harness.training.starting_weights:initial_model", "start-up: the model built", None),
    ("harness.training.optim:make_optimizer", "start-up: the optimizer", None),
    ("harness.training.runlog:open_run_dir", "start-up: the run folder and config.json", None),
    ("harness.training.runlog:RunLogger.__init__", "start-up: TensorBoard's writer", None),
    ("harness.training.runtime:load_data", "data: corpus and tokenizer", None),
    ("harness.training.evaluation:make_eval_set", "data: the evaluation batches", None),
    ("harness.training.step:draw_micro_batches", "data: the training batches", None),
    # the steps' own: an evaluation's forward passes are its own
    ("model.gpt:GPT.forward", "steps: forward", LOOP),
    ("torch:Tensor.backward", BACKWARD, LOOP),
    ("torch.nn.utils:clip_grad_norm_", BACKWARD, LOOP),
    ("harness.training.step:check_finite", UPDATE, LOOP),  # waits for the device
    ("torch.optim:Adam.step", UPDATE, None),  # AdamW's, alone or under CombinedOptimizer's
    ("harness.training.optim:CombinedOptimizer.step", UPDATE, None),
    ("harness.training.evaluation:estimate_loss", "evaluations: losses", None),
    (
        "harness.training.evaluation:measure_breakage",
        "evaluations: honest loss, attention statistics",
        None,
    ),
    ("harness.training.evaluation:evaluate", "evaluations: heatmap weights, a sample", None),
    (
        "harness.training.probe:probe",
        "probe: the story's signals between evaluations (train.probes)",
        None,
    ),
    ("model.gradients:qk_grad_norm", LOGGING, None),
    ("harness.training.runlog:RunLogger.log", LOGGING, None),
    ("harness.training.runlog:RunLogger.close", LOGGING, None),
    (
        "harness.training.runlog:RunLogger.log_evaluation",
        "logging: heatmap pictures, the sample",
        None,
    ),
    (
        "harness.training.checkpoints:Checkpointer.save",
        "checkpoints: ckpt.pt and best.pt written",
        None,
    ),
]
GROUPS = ("start-up", "data", "steps", "evaluations", "probe", "logging", "checkpoints", "the rest")
REPO_ROOT = Path(__file__).resolve().parents[2]


class PhaseClock:
    """Wall and CPU seconds per phase, each counting only its own time."""

    def __init__(self, first: str, mark: tuple[float, float]):
        self.stack, self.wall, self.cpu, self.calls = [first], {}, {}, {}
        self.mark = mark  # (wall, CPU) seconds when the clock last charged

    def charge(self) -> None:
        now, top = (time.perf_counter(), time.process_time()), self.stack[-1]
        self.wall[top] = self.wall.get(top, 0.0) + now[0] - self.mark[0]
        self.cpu[top] = self.cpu.get(top, 0.0) + now[1] - self.mark[1]
        self.mark = now

    def timed(self, fn, phase: str, inside: str | None):
        @functools.wraps(fn)
        def clocked(*args, **kwargs):
            # an evaluation's forward, or AdamW's step inside the combined optimizer's
            if (inside is not None and self.stack[-1] != inside) or self.stack[-1] == phase:
                return fn(*args, **kwargs)
            self.charge()
            self.stack.append(phase)
            self.calls[phase] = self.calls.get(phase, 0) + 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.charge()
                self.stack.pop()

        return clocked


def child(report: str, script: str, argv: list[str]) -> None:
    """Run `python script argv...` under the clock, then write the report (also if it fails)."""
    clock = PhaseClock(IMPORTS, STARTED[1:])
    for where, phase, inside in PHASES:
        module_name, name = where.split(":")
        owner = importlib.import_module(module_name)
        if "." in name:  # a method: wrap it on its class
            class_name, name = name.split(".")
            owner = getattr(owner, class_name)
        # a renamed function fails here, loudly
        setattr(owner, name, clock.timed(getattr(owner, name), phase, inside))
    parser_class = importlib.import_module("harness.cli").OneLineParser
    parse = parser_class.parse_with_config  # clocked above

    # the imports end where the config is read; then what no phase claims is the loop's
    def parse_then_loop(self, argv):
        clock.charge()
        clock.stack[0] = LOOP
        return parse(self, argv)

    parser_class.parse_with_config = parse_then_loop
    sys.argv, code = [script, *argv], 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    finally:
        clock.charge()
        ended = {"started": STARTED[0], "ended": time.time(), "cpu_before": STARTED[2]}
        report_json = {**ended, "code": code, "wall": clock.wall, "cpu": clock.cpu}
        Path(report).write_text(json.dumps({**report_json, "calls": clock.calls}))
    sys.exit(code)


def children_cpu_s() -> float:
    """CPU seconds of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def profile_whole_run(argv: list[str]) -> dict:
    """Run `python train.py argv...` under the phase clock, its output on stderr: its exit code and
    each phase's calls, wall and CPU seconds."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        cpu_before, spawned = children_cpu_s(), time.time()
        cmd = [sys.executable, "-m", "harness.experiments.whole_run", str(report), "train.py"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        code = subprocess.run(
            [*cmd, *argv], cwd=REPO_ROOT, stdout=sys.stderr.fileno(), env=env
        ).returncode
        exited, cpu_after = time.time(), children_cpu_s()
        if not report.is_file():
            return {"code": code or 1, "phases": {}}
        r = json.loads(report.read_text())
    phases = {INTERPRETER: {"calls": 1, "wall_s": r["started"] - spawned, "cpu_s": r["cpu_before"]}}
    phases |= {
        name: {"calls": r["calls"].get(name, 0), "wall_s": wall, "cpu_s": r["cpu"][name]}
        for name, wall in r["wall"].items()
    }
    cpu = cpu_after - cpu_before
    exit_cpu = cpu - r["cpu_before"] - sum(r["cpu"].values())
    phases[EXIT] = {"calls": 1, "wall_s": exited - r["ended"], "cpu_s": exit_cpu}
    return {"code": r["code"], "phases": phases, "wall_s": exited - spawned, "cpu_s": cpu}


def format_whole_run(r: dict) -> str:
    """The phases grouped as the run goes, each group's total in bold."""
    # here: the child process imports nothing before its clock
    from harness.experiments.profiling import machine_line

    groups = {}
    for name, phase in r["phases"].items():
        group, _, detail = name.partition(": ")
        groups.setdefault(group, []).append((detail, phase))
    lines = [
        machine_line(r),
        "",
        f"`{r['command']}`: {r['wall_s']:.1f} s of wall time, {r['cpu_s']:.2f} s of CPU time, "
        f"final val {r['val']}",
        "",
        "| phase | calls | wall s | share of wall | CPU s |",
        "|---|---:|---:|---:|---:|",
    ]
    for group in sorted(groups, key=GROUPS.index):
        rows = groups[group]
        wall = sum(phase["wall_s"] for _, phase in rows)
        cpu = sum(phase["cpu_s"] for _, phase in rows)
        share = 100 * wall / r["wall_s"]
        lines.append(f"| **{group}** | | **{wall:.2f}** | **{share:.1f} %** | **{cpu:.2f}** |")
        for detail, phase in rows:
            share = 100 * phase["wall_s"] / r["wall_s"]
            # the imports and the loop are no call
            calls = f"{phase['calls']:,}" if phase["calls"] else ""
            lines.append(
                f"| &nbsp; {detail} | {calls} | {phase['wall_s']:.2f} | {share:.1f} % "
                f"| {phase['cpu_s']:.2f} |"
            )
    total = f"**{r['wall_s']:.2f}** | **100 %** | **{r['cpu_s']:.2f}**"
    lines.append(f"| **the whole run** | | {total} |")
    return "\n".join(lines)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3:])
