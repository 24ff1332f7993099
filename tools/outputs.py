"""What the docs show each command print on a recorded run (one torch thread), kept in
docs/figures.json and shown in the first ```text fence after the command."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from configs import ConfigError
from harness.training.runlog import evaluations

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```text\n(.*?)\n?^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Output:
    key: str  # in docs/figures.json
    doc: str | None  # the page showing it; None: only its figures are quoted
    command: str  # as the page writes it
    run: str = "char"  # under runs/
    lines: int = 0  # stopped as by Ctrl-C after this many lines
    body: bool = False  # less its "# <checkpoint> ..." line and the newlines after it
    stderr: bool = False  # stderr first
    files: tuple[tuple[str, str], ...] = ()  # (name, text): files it reads, named as the page does


SAMPLE, SAMPLING = "python sample.py --run char", "docs/sampling.md"
ROMEO = f'{SAMPLE} --prompt "ROMEO:" --max-new-tokens 150'
OUTPUTS = [
    Output("output-char-sample", "README.md", f"{SAMPLE} --max-new-tokens 300", body=True),
    Output(
        "output-char-stopped",
        SAMPLING,
        f'{SAMPLE} --prompt "JULIET:" --max-new-tokens 100000',
        lines=6,
    ),
    Output("output-char-greedy", SAMPLING, f"{ROMEO} --temperature 0"),
    Output("output-char-top-p", SAMPLING, f"{ROMEO} --top-p 0.9 --num-samples 2"),
    Output(
        "output-char-prompt-file",
        SAMPLING,
        f"{SAMPLE} --prompt-file prompt.txt --max-new-tokens 80 --temperature 0.6",
        files=(("prompt.txt", "KING RICHARD II:\nNow is the"),),
    ),
    Output(
        "output-base-sample", SAMPLING, "python sample.py --max-new-tokens 100", "base", body=True
    ),
    Output("output-char-score", SAMPLING, "python score.py --run char --top 5"),
    Output(
        "output-char-no-mask-score",
        SAMPLING,
        "python score.py --run char-no-mask --stride 128",
        "char-no-mask",
        stderr=True,
    ),
    Output("output-char-score-stride", None, "python score.py --run char --stride 128 --json"),
]


def described(output: Output) -> str:
    kept = []
    if output.lines:
        kept.append(f"stopped as Ctrl-C stops it once its first {output.lines} lines are out")
    if output.body:
        kept.append("the text after its first line and the newlines that open it")
    if output.stderr:
        kept.append("stderr, then stdout")
    kept += [f"{name} holding {text!r}" for name, text in output.files]
    return f"OMP_NUM_THREADS=1 {output.command}" + (f" ({'; '.join(kept)})" if kept else "")


def run_output(output: Output, runs_dir: Path, timeout: float = 7200) -> str:
    argv = shlex.split(output.command)[1:]
    with tempfile.TemporaryDirectory() as scratch:
        for name, text in output.files:
            (Path(scratch) / name).write_text(text, encoding="utf-8")
            argv = [str(Path(scratch) / name) if arg == name else arg for arg in argv]
        if runs_dir.resolve() != (ROOT / "runs").resolve():
            argv += ["--runs-dir", str(runs_dir)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        pipe = subprocess.PIPE
        with subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env=env, text=True, stdout=pipe, stderr=pipe
        ) as proc:
            shown = [proc.stdout.readline() for _ in range(output.lines)]
            if output.lines:
                proc.send_signal(signal.SIGINT)  # as Ctrl-C stops it
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
    if output.lines:
        if not shown[-1].endswith("\n"):
            raise RuntimeError(
                f"{output.command} printed under {output.lines} lines (exit {proc.returncode})"
            )
        return "".join(shown).removesuffix("\n")
    if proc.returncode != 0:
        raise RuntimeError(f"{output.command} exits with {proc.returncode}: {err.strip()[-500:]}")
    text = (err if output.stderr else "") + out.removesuffix("\n")
    if output.body:
        text = text.split("\n", 1)[1].lstrip("\n")
    return text


def runs_folder(runs_dir: Path) -> Path:
    if not runs_dir.is_dir():
        what = "a file" if runs_dir.exists() else "not there"
        raise ConfigError(f"--runs-dir {runs_dir} is {what}; give the runs' folder (runs/)")
    return runs_dir


def record_output(output: Output, runs_dir: Path) -> dict:
    import resource  # Unix only

    rows = evaluations(runs_folder(runs_dir) / output.run)  # first: a run not there is one line
    if not rows:
        raise ConfigError(
            f"--runs-dir {runs_dir} holds no run {output.run} with an evaluation; train it first"
        )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = run_output(output, runs_dir)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    state = {"step": rows[-1]["step"], "loss/val": rows[-1]["loss/val"]}
    value = {"run": output.run, **state, "text": text, "cpu_s": cpu_s}
    if "--json" in shlex.split(output.command):
        value["json"] = json.loads(text)
    return value


def check_outputs(figures: dict, runs_dir: Path, keys: list[str]) -> list[str]:
    problems = []
    for output in [o for o in OUTPUTS if o.key in keys]:
        recorded, now = figures[output.key]["value"], record_output(output, runs_dir)
        if differs := [k for k in ("run", "step", "loss/val", "text") if recorded[k] != now[k]]:
            problems.append(
                f"{output.key}: `{output.command}` now prints another {' and '.join(differs)} "
                "than docs/figures.json holds"
            )
    return problems


def fence_after(text: str, command: str) -> tuple[int, int] | None:
    found = re.search(r"\s+".join(re.escape(word) for word in command.split()), text)
    fence = found and FENCE.search(text, found.end())
    return (fence.start(1), fence.end(1)) if fence else None


def render_outputs(figures: dict, texts: dict[str, str]) -> list[str]:
    """Puts each output into its page in texts; returns what differed."""
    problems = []
    for output in OUTPUTS:
        if output.key not in figures:
            problems.append(f"docs/figures.json holds no {output.key}: --record-outputs it")
            continue
        value = figures[output.key]["value"]
        run = figures.get(output.run, {}).get("value", {}).get("last", {})
        if (value["step"], value["loss/val"]) != (run.get("step"), run.get("loss/val")):
            problems.append(
                f"{output.key} was recorded on a {output.run} run (step {value['step']}, "
                f"val {value['loss/val']:.4f}) other than"
                " docs/figures.json's; --record-outputs again"
            )
        if output.doc is None:
            continue
        text = texts[output.doc]
        where = fence_after(text, output.command)
        if where is None:
            problems.append(f"{output.doc} shows no `{output.command}` then a ```text fence")
        elif text[where[0] : where[1]] != value["text"]:
            problems.append(f"{output.doc}: `{output.command}` differs from {output.key}")
            texts[output.doc] = text[: where[0]] + value["text"] + text[where[1] :]
    return problems
