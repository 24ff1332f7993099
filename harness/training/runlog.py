"""Where a run's measurements go: TensorBoard (the story on one screen of its CUSTOM SCALARS tab),
metrics.jsonl and the console."""

import contextlib
import json
import textwrap
import threading
from pathlib import Path

import torch
from tqdm import tqdm

from configs import Config
from data.files import write_atomically
from data.tokenizer import degenerate
from harness.folders import FolderLock, OutputError, claim_run_folder, parse_json
from harness.pictures.heatmaps import HeatmapGrid
from harness.training.checkpoints import CheckpointError, read_checkpoint
from harness.training.evaluation import HONEST_POSITIONS, Evaluation
from harness.training.probe import PROBE_ROWS, STORY_CHARTS
from harness.training.runtime import Runtime
from model.heads import head_name
from model.induction import INDUCTION_THRESHOLD

CONSOLE_TAGS = (
    "loss/train loss/val loss/val_honest attn/entropy attn/saturated_frac attn/future_mass".split()
)
# TensorBoard's smoothing (0.6) draws a curve of a few points far from them: this opens it at 0
UNSMOOTHED = "#custom_scalars&_smoothingWeight=0"
STORY = (
    "the story: mask, scale and positions (a point every few steps, train.probes; losses at "
    f"{HONEST_POSITIONS} positions of {PROBE_ROWS} val texts)"
)
INDUCTION = (
    "induction heads (one point per evaluation: set Smoothing to 0, or open "
    f"localhost:6006/{UNSMOOTHED})"
)
# as probe.py's STORY_CHARTS
INDUCTION_CHARTS = (
    (
        "largest induction score: attention from a repeated token to what followed its earlier "
        "occurrence",
        ["^induction/max$"],
    ),
    ("induction score of every head (layer L, head H)", ["^induction/L\\d+H\\d+$"]),
    (
        "loss where the context gives the next token away (repeated) vs where it cannot (first)",
        ["^loss/repeated$", "^loss/first$"],
    ),
    (
        "in-context learning score: repeated - first (below 0 once the model reads its context)",
        ["^icl/score$"],
    ),
)


def story_layout(induction: bool) -> dict:
    layout = {STORY: {title: ["Multiline", tags] for title, tags in STORY_CHARTS}}
    if induction:
        layout[INDUCTION] = {
            f"{title} [read at Smoothing 0]": ["Multiline", tags]
            for title, tags in INDUCTION_CHARTS
        }
    return layout


def parse_row(line: bytes | str) -> dict | None:
    """A metrics.jsonl line's row, or None for a damaged line."""
    row = parse_json(line)
    return row if isinstance(row, dict) and type(row.get("step")) is int else None


def metric_lines(path: Path) -> list[tuple[bytes, dict]]:
    rows = [(line, parse_row(line)) for line in path.read_bytes().splitlines()]
    return [(line, row) for line, row in rows if row is not None]


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [row for _, row in metric_lines(path)] if path.is_file() else []


def evaluations(run_dir: Path) -> list[dict]:
    return [row for row in read_metrics(run_dir) if "loss/val" in row]


def phase_change(run_dir: Path) -> str:
    rows = [row for row in read_metrics(run_dir) if "induction/max" in row]
    if not rows:
        return "induction heads: no evaluation measured them"
    crossed = [i for i, row in enumerate(rows) if row["induction/max"] >= INDUCTION_THRESHOLD]
    before, last = rows[0], rows[-1]
    when = f"never reached {INDUCTION_THRESHOLD}"
    if crossed:
        before = rows[max(crossed[0] - 1, 0)]
        when = f"crossed {INDUCTION_THRESHOLD} at step {rows[crossed[0]]['step']}"
    return (
        f"induction heads: largest score {last['induction/max']:.3f} at step {last['step']} "
        f"({when}); loss on repeated positions {before['loss/repeated']:.3f} at step "
        f"{before['step']}, {last['loss/repeated']:.3f} at step {last['step']} "
        f"(first occurrences {last['loss/first']:.3f})"
    )


def sample_markdown(text: str, n_tokens: int) -> str:
    """Indented for TensorBoard's text tab (verbatim); a degenerate one (--no-mask's newlines) gets
    a note and visible whitespace, not an empty box."""
    note, lines = "", text.splitlines()
    if verdict := degenerate(text):
        what, counts = verdict
        note = f"**{n_tokens} tokens, {what}** ({counts}; whitespace shown as ↵ and ␣)\n\n"
        lines = textwrap.wrap(text.replace(" ", "␣").replace("\n", "↵"), 100) or [""]
    return note + "\n".join("    " + line for line in lines)


def what_is_saved(run_dir: Path) -> str:
    checkpoint = run_dir / "ckpt.pt"
    if not run_dir.is_dir():
        return "the folder is gone (removed or moved away), with what it held"
    if not checkpoint.is_file():
        return "no checkpoint was saved there"
    try:
        step = read_checkpoint(checkpoint, mmap=True)["step"]
    except CheckpointError:
        return f"{checkpoint} is there but cannot be read back"
    return f"{checkpoint} holds step {step}, the last one saved"


class RunLogger:
    """A failed write ends the run in one line, TensorBoard's writer thread's too (it fails
    quietly)."""

    def __init__(self, run_dir: Path, resume_step: int | None = None, induction: bool = False):
        from torch.utils.tensorboard import SummaryWriter  # slow to import

        self.run_dir, path = run_dir, run_dir / "metrics.jsonl"
        purge = None  # a resumed run drops what was logged after its checkpoint
        if resume_step is not None:
            purge = resume_step + 1
            if path.is_file():
                kept = [line for line, row in metric_lines(path) if row["step"] <= resume_step]
                write_atomically(path, b"".join(line + b"\n" for line in kept))
        before = set(threading.enumerate())
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge)
        self.writer_threads = set(threading.enumerate()) - before
        self.writer.add_custom_scalars(story_layout(induction))
        try:
            self.jsonl = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the run)
        except OSError as e:  # a folder, or a read-only file, in its place
            raise OutputError(
                f"cannot append to {path}: {e.strerror}; move it away or choose another --run-name"
            ) from None
        self.other_threads_failed, threading.excepthook = threading.excepthook, self.thread_failed
        self.heatmap_grid = None  # laid out at the first evaluation

    def thread_failed(self, args: threading.ExceptHookArgs) -> None:
        if args.thread not in self.writer_threads:
            self.other_threads_failed(args)

    @contextlib.contextmanager
    def writing(self):
        try:
            yield
        except OSError as e:
            threading.excepthook, reason = self.other_threads_failed, e.strerror or e
            raise OutputError(
                f"could not write into the run folder {self.run_dir}: {reason}; "
                f"{what_is_saved(self.run_dir)}"
            ) from None

    def log(self, step: int, console: bool = False, **metrics: float) -> None:
        with self.writing():
            for tag, value in metrics.items():
                self.writer.add_scalar(tag, value, step)
            self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
            self.jsonl.flush()
        if console:
            shown = [
                f"{tag.split('/')[1]} {metrics[tag]:.4f}" for tag in CONSOLE_TAGS if tag in metrics
            ]
            tqdm.write(f"step {step:5d} | " + " | ".join(shown))

    def log_evaluation(self, step: int, report: Evaluation, flags: str, causal: bool) -> None:
        self.log_heatmaps(step, report.heatmaps, report.heatmap_labels, flags, causal)
        text = sample_markdown(report.sample, report.sample_tokens)
        with self.writing():
            self.writer.add_text("samples", text, step)
        self.log(step, console=True, **report.metrics)

    def log_heatmaps(
        self, step: int, weights: list[torch.Tensor], labels: list[str], flags: str, causal=True
    ) -> None:
        """One image per head (a grid of heads would shrink the labels past reading), repainting one
        panel laid out once (most of a picture's cost)."""
        if self.heatmap_grid is None:  # wide enough for the last head's title at step 10**6
            last = head_name(len(weights) - 1, weights[0].shape[1] - 1)
            title = f"{last} at step {10**6} ({flags})"
            self.heatmap_grid = HeatmapGrid(1, labels, ["attention weights"], title, causal=causal)
        for layer, layer_weights in enumerate(weights):
            for head in range(layer_weights.shape[1]):
                name = head_name(layer, head)
                title = f"{name} at step {step} ({flags})"
                picture = self.heatmap_grid.pixels(layer_weights[0, head : head + 1], title)
                with self.writing():
                    self.writer.add_image(f"heatmaps/{name}", picture, step, dataformats="HWC")

    def close(self) -> None:
        with self.writing():
            self.writer.close()
            self.jsonl.close()
        threading.excepthook = self.other_threads_failed


def open_run_dir(cfg: Config, runtime: Runtime) -> FolderLock | None:
    """Claim the run folder (an earlier run moved aside unless resumed), write config.json; return
    its lock."""
    if not runtime.is_main:
        return None
    lock, moved = claim_run_folder(cfg.run_dir, cfg.train.resume)
    try:
        write_atomically(cfg.run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2).encode())
    except OSError as e:  # a full disk
        raise OutputError(
            f"could not save {cfg.run_dir / 'config.json'}: {e.strerror}; free some space or "
            "choose another --runs-dir"
        ) from None
    moved = f" (previous run moved to {moved})" if moved else ""
    runtime.say(f"device: {runtime.device} ({runtime.why}); run folder: {cfg.run_dir}{moved}")
    if runtime.device.type == "cuda" and cfg.name in ("base", "char", "char-modern"):
        runtime.say(
            f"note: the {cfg.name} preset is sized for a 2-core CPU; for one GPU, try "
            "python train.py --config char-gpu (docs/performance.md#on-a-gpu)"
        )
    sections = " | ".join(f"{s}: {getattr(cfg, s)}" for s in ("model", "data", "train"))
    runtime.say(f"config {cfg.name}: {sections}")
    return lock


def step_bar(cfg: Config, runtime: Runtime, first_step: int) -> tqdm:
    return tqdm(
        range(first_step, cfg.train.max_steps),
        desc=cfg.run_name,
        dynamic_ncols=True,
        disable=not runtime.is_main,
        initial=first_step,
        total=cfg.train.max_steps,
    )


def last_words(cfg: Config, last: dict, elapsed: float, stopped: int | None) -> str:
    if stopped is not None:
        return (
            f"stopped at step {stopped}; checkpoint saved to {cfg.run_dir / 'ckpt.pt'}. "
            "Resume with the same command plus --resume"
        )
    return (
        f"done in {elapsed:.1f}s: train {last['loss/train']:.4f}, val {last['loss/val']:.4f}, "
        f"honest {last['loss/val_honest']:.4f}; checkpoints {cfg.run_dir / 'ckpt.pt'} "
        f"(latest), {cfg.run_dir / 'best.pt'} (best val)\nsample at the last step:\n"
        f"{last['sample']}"
    )
