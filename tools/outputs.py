"""The outputs README.md and docs/ show: each the text one command prints on a recorded run, kept in
docs/figures.json.

A page shows an output in the first ```text fence after the command (the command as the page writes
it, wrapped anywhere). `python -m tools.docs_figures --record-outputs` runs each command on the runs
under runs/ (one torch thread, as the runs' own figures were measured) and stores what it printed,
with the run's last step and val loss; the pages are then rendered from that file, as the figures
are. `--check-outputs` runs them again and names each output that the code no longer prints. The
suite cannot (it never reads runs/): it checks that each page shows what the file holds, that each
output was recorded on the run whose figures the pages quote, and that the commands, run on small
runs of the test's own, still print the lines the recorded outputs frame their text with.
"""

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


@dataclass(frozen=True)
class Output:
    key: str  # its entry in docs/figures.json
    # the page that shows it, after its command; None: only figures of it are quoted (--json)
    doc: str | None
    command: str  # as the page writes it
    run: str  # the run it reads, under runs/
    lines: int = 0  # the page shows the command stopped early (Ctrl-C): its first lines only
    # the text without the "# <checkpoint> ..." line and the newlines that open it (a prompt of one
    # newline)
    body: bool = False
    stderr: bool = False  # stderr first: a note the command prints there
    # (name, text): files the command reads, by the name the page gives
    files: tuple[tuple[str, str], ...] = ()


SAMPLE = "python sample.py --run char"
OUTPUTS = [
    Output("output-char-sample", "README.md", f"{SAMPLE} --max-new-tokens 300", "char", body=True),
    Output(
        "output-char-stopped",
        "docs/sampling.md",
        f'{SAMPLE} --prompt "JULIET:" --max-new-tokens 100000',
        "char",
        lines=6,
    ),
    Output(
        "output-char-greedy",
        "docs/sampling.md",
        f'{SAMPLE} --prompt "ROMEO:" --max-new-tokens 150 --temperature 0',
        "char",
    ),
    Output(
        "output-char-top-p",
        "docs/sampling.md",
        f'{SAMPLE} --prompt "ROMEO:" --max-new-tokens 150 --top-p 0.9 --num-samples 2',
        "char",
    ),
    Output(
        "output-char-prompt-file",
        "docs/sampling.md",
        f"{SAMPLE} --prompt-file prompt.txt --max-new-tokens 80 --temperature 0.6",
        "char",
        files=(("prompt.txt", "KING RICHARD II:\nNow is the"),),
    ),
    Output(
        "output-base-sample",
        "docs/sampling.md",
        "python sample.py --max-new-tokens 100",
        "base",
        body=True,
    ),
    Output("output-char-score", "docs/sampling.md", "python score.py --run char --top 5", "char"),
    Output(
        "output-char-no-mask-score",
        "docs/sampling.md",
        "python score.py --run char-no-mask --stride 128",
        "char-no-mask",
        stderr=True,
    ),
    Output(
        "output-char-score-stride", None, "python score.py --run char --stride 128 --json", "char"
    ),
]


def described(output: Output) -> str:
    """The command as docs/figures.json records it: as the page writes it, and what of its output
    the page keeps.
    """
    kept = (
        [f"stopped as Ctrl-C stops it once its first {output.lines} lines are out"]
        if output.lines
        else []
    )
    kept += ["the text after its first line and the newlines that open it"] if output.body else []
    kept += ["stderr, then stdout"] if output.stderr else []
    kept += [f"{name} holding {text!r}" for name, text in output.files]
    return f"OMP_NUM_THREADS=1 {output.command}" + (f" ({'; '.join(kept)})" if kept else "")


def run_output(output: Output, runs_dir: Path = ROOT / "runs", timeout: float = 7200) -> str:
    """What output's command prints, run from the repository's root on the runs under runs_dir, with
    one torch thread.
    """
    argv = shlex.split(output.command)
    with tempfile.TemporaryDirectory() as scratch:
        for name, text in output.files:
            (Path(scratch) / name).write_text(text, encoding="utf-8")
            argv = [str(Path(scratch) / name) if arg == name else arg for arg in argv]
        if runs_dir.resolve() != (ROOT / "runs").resolve():
            argv += ["--runs-dir", str(runs_dir)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        command = [sys.executable, *argv[1:]]
        if output.lines:  # read its first lines, then stop it as Ctrl-C would
            with subprocess.Popen(
                command,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ) as proc:
                shown = [proc.stdout.readline() for _ in range(output.lines)]
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=timeout)
            if not shown[-1].endswith("\n"):
                raise RuntimeError(
                    f"{output.command} printed fewer than {output.lines} lines (exit code {proc.returncode})"
                )
            return "".join(shown).removesuffix("\n")
        proc = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{output.command} exits with {proc.returncode}: {proc.stderr.strip()[-500:]}"
        )
    # the line end after the last line
    text = (proc.stderr if output.stderr else "") + proc.stdout.removesuffix("\n")
    if output.body:
        text = text.split("\n", 1)[1].lstrip("\n")
    return text


def runs_folder(runs_dir: Path) -> Path:
    """--runs-dir as the commands that read runs take it: a folder, or a one-line refusal."""
    if not runs_dir.is_dir():
        what = "a file" if runs_dir.exists() else "not there"
        raise ConfigError(
            f"--runs-dir {runs_dir} is {what}; give the folder that holds the runs (python train.py writes them in runs/)"
        )
    return runs_dir


def run_state(run: str, runs_dir: Path) -> dict:
    """The run's last evaluation, as its figures in docs/figures.json hold it: step and val loss."""
    log = runs_folder(runs_dir) / run / "metrics.jsonl"
    rows = evaluations(log.parent) if log.is_file() else []
    if not rows:
        raise ConfigError(
            f"--runs-dir {runs_dir} holds no run {run} with an evaluation in its metrics.jsonl; train it there first"
        )
    return {"step": rows[-1]["step"], "loss/val": rows[-1]["loss/val"]}


def record_output(output: Output, runs_dir: Path) -> dict:
    """The value docs/figures.json keeps for output: the run's state, the text, the command's CPU
    seconds (user and
    system: what a loaded machine stretches least), and the object a --json command prints."""
    import resource  # Unix only: the CPU seconds of the finished command processes

    # first: a run that is not there is one line, before its command fails on it
    state = run_state(output.run, runs_dir)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = run_output(output, runs_dir)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    value = {"run": output.run, **state, "text": text, "cpu_s": cpu_s}
    if "--json" in shlex.split(output.command):
        value["json"] = json.loads(text)
    return value


def check_outputs(figures: dict, runs_dir: Path, keys: list[str] | None = None) -> list[str]:
    """Each output the code no longer prints on runs_dir's runs as docs/figures.json recorded it, in
    words.
    """
    problems = []
    for output in [o for o in OUTPUTS if keys is None or o.key in keys]:
        recorded = figures[output.key]["value"]
        now = {
            "run": output.run,
            **run_state(output.run, runs_dir),
            "text": run_output(output, runs_dir),
        }
        if {k: recorded[k] for k in now} != now:
            differs = [k for k in now if recorded[k] != now[k]]
            problems.append(
                f"{output.key}: `{output.command}` now prints another {' and '.join(differs)} than docs/figures.json holds"
            )
    return problems


def fence_after(text: str, command: str) -> tuple[int, int] | None:
    """Where the first ```text fence after command (wrapped anywhere) holds its text, as (start,
    end); None without one.
    """
    words = r"\s+".join(re.escape(word) for word in command.split())
    found = re.search(words, text)
    fence = (
        re.compile(r"^```text\n(.*?)\n?^```", re.MULTILINE | re.DOTALL).search(text, found.end())
        if found
        else None
    )
    return (fence.start(1), fence.end(1)) if fence else None


def render_outputs(figures: dict, texts: dict[str, str]) -> list[str]:
    """Put each recorded output into its page (texts: page -> its text, changed in place); returns
    what differed.

    An output must also have been recorded on the run that the pages' figures come from (its last
    step and val loss), or the pages would show one run's text under another run's numbers."""
    problems = []
    for output in OUTPUTS:
        if output.key not in figures:
            problems.append(
                f"docs/figures.json holds no {output.key}: record it (--record-outputs --outputs {output.key})"
            )
            continue
        value = figures[output.key]["value"]
        run = figures.get(output.run, {}).get("value", {}).get("last", {})
        if (value["step"], value["loss/val"]) != (run.get("step"), run.get("loss/val")):
            problems.append(
                f"{output.key} was recorded on a {output.run} run (step {value['step']}, val {value['loss/val']:.4f}) other than "
                f"the one docs/figures.json's {output.run} holds; record the outputs again (--record-outputs)"
            )
        if output.doc is None:
            continue
        text = texts[output.doc]
        where = fence_after(text, output.command)
        if where is None:
            problems.append(
                f"{output.doc} no longer shows `{output.command}` followed by a ```text fence"
            )
        elif text[where[0] : where[1]] != value["text"]:
            problems.append(
                f"{output.doc}: the output of `{output.command}` differs from docs/figures.json's {output.key}"
            )
            texts[output.doc] = text[: where[0]] + value["text"] + text[where[1] :]
    return problems


# a Python repr of a string: score.py --top's contexts
QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\"""")


def frame(output: Output, text: str) -> list[str]:
    """The lines that frame an output's text, their numbers, paths, quoted strings and device
    blanked: every line of a score, a sample's "# <checkpoint> ... on cpu" and "note:" lines and the
    rules between samples (the sampled text is the model's). The docs' outputs were recorded on a
    CPU; on a GPU or a Mac the same lines end "on cuda" or "on mps"."""
    kept = [
        line
        for line in text.split("\n")
        if "score.py" in output.command or line.startswith(("# ", "note:", "----"))
    ]
    kept = [re.sub(r" on (cpu|cuda|mps)(:\d+)?$", " on DEVICE", line) for line in kept]
    blanked = [
        re.sub(r"[-+]?\d+(?:[.,]\d+)*", "#", re.sub(r"\S*/\S*", "PATH", QUOTED.sub("Q", line)))
        for line in kept
    ]
    return [" ".join(line.split()) for line in blanked]
