"""Where a run's measurements go: one RunLogger writes TensorBoard, metrics.jsonl and the console
line.

TensorBoard groups scalars by the part of the tag before the first "/" and lists the groups
alphabetically, so each run also writes a custom-scalars layout (the CUSTOM SCALARS tab) that puts
the story on one screen, every run of the folder overlaid: the training loss, then what the probe
(harness/training/probe.py) measures every few steps on a slice of val: the honest and forced losses
and their gap, how much each run reads word order (the --no-pos run beside the others), attention
entropy, the share of saturated rows, the mass on the future, the spread and the largest of the
scores and the query and key norms. A run that measures induction heads (docs/induction.md) adds a
section for them.
"""

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
from harness.training.probe import PROBE_ROWS
from harness.training.runtime import Runtime, preset_advice
from model.heads import head_name
from model.induction import INDUCTION_THRESHOLD
from model.measurements import SHUFFLED_TOKENS

CONSOLE_TAGS = (
    "loss/train",
    "loss/val",
    "loss/val_honest",
    "attn/entropy",
    "attn/saturated_frac",
    "attn/future_mass",
)
# TensorBoard smooths every curve by 0.6 unless told otherwise, and a curve of a few evaluations
# smoothed that way is drawn far from the values logged. The induction section's titles say so;
# this address opens the tab with smoothing off.
UNSMOOTHED = "#custom_scalars&_smoothingWeight=0"
STORY = f"the story: mask, scale and positions (a point every few steps, train.probes; losses at {HONEST_POSITIONS} positions of {PROBE_ROWS} val texts)"
INDUCTION = f"induction heads (one point per evaluation: set Smoothing to 0, or open localhost:6006/{UNSMOOTHED})"
# tags are regular expressions, anchored so that Probe_attn/score_max does not also match
# Probe_attn/score_max/L0
LAYOUT = {
    STORY: {
        title: ["Multiline", tags]
        for title, tags in (
            (
                "training loss (loss/train_step): without the mask it falls towards 0; flat: a uniform guess, ln V",
                ["^loss/train_step$", "^Probe_loss/uniform_guess$"],
            ),
            (
                "val loss: val_honest (the past only) vs val_forced (the whole block)",
                ["^Probe_loss/val_honest$", "^Probe_loss/val_forced$"],
            ),
            ("leak gap: val_honest - val_forced (0 for a causal model)", ["^Probe_loss/leak_gap$"]),
            (
                f"order use: val_honest's rise when the {SHUFFLED_TOKENS} tokens before each target are shuffled (causal runs)",
                ["^Probe_loss/order_use$"],
            ),
            ("attention entropy (1 = uniform, 0 = one-hot)", ["^Probe_attn/entropy$"]),
            (
                "share of saturated rows (largest weight above 0.99)",
                ["^Probe_attn/saturated_frac$"],
            ),
            ("attention mass on the future (0 under the mask)", ["^Probe_attn/future_mass$"]),
            (
                "spread of the attention scores (std, before the softmax)",
                ["^Probe_attn/score_std$"],
            ),
            (
                "largest attention score, any layer (per layer: Probe_attn/score_max/L0, ...)",
                ["^Probe_attn/score_max$"],
            ),
            (
                "query and key norms, mean |q| and |k|: a score is at most |q| |k| x scale",
                ["^Probe_attn/q_norm$", "^Probe_attn/k_norm$"],
            ),
        )
    },
    INDUCTION: {
        f"{title} [read at Smoothing 0]": ["Multiline", tags]
        for title, tags in (
            (
                "largest induction score: attention from a repeated token to what followed its earlier occurrence",
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
    },
}


def story_layout(induction: bool) -> dict:
    """The custom-scalars layout a run writes: the story, and the induction heads' section for a run
    that measures them.
    """
    return {
        section: charts for section, charts in LAYOUT.items() if induction or section != INDUCTION
    }


def parse_row(line: bytes | str) -> dict | None:
    """A metrics.jsonl line as its row, or None for a damaged line, whatever the damage
    (folders.parse_json: torn, not UTF-8, nested too deep) or a line that is not a row: not an
    object, or a step that is not a whole number (1e999, "x")."""
    row = parse_json(line)
    return row if isinstance(row, dict) and type(row.get("step")) is int else None


def parse_step(line: bytes | str) -> int | None:
    """The step of a metrics.jsonl line, or None for a damaged line (parse_row)."""
    row = parse_row(line)
    return None if row is None else row["step"]


def metric_lines(path: Path) -> list[tuple[bytes, dict]]:
    """The intact lines of a metrics.jsonl, each with its row, in order: the file's one reader. A
    damaged line (parse_row) is skipped, wherever it is; read as bytes, a line that is not UTF-8 is
    one damaged line, not a failure of the file."""
    return [
        (line, row)
        for line in path.read_bytes().splitlines()
        if (row := parse_row(line)) is not None
    ]


def read_metrics(run_dir: Path) -> list[dict]:
    """Every intact row of a run's metrics.jsonl, as dicts (a damaged line is skipped; a file
    deleted by hand has none).
    """
    return (
        [row for _, row in metric_lines(run_dir / "metrics.jsonl")]
        if (run_dir / "metrics.jsonl").is_file()
        else []
    )


def evaluations(run_dir: Path) -> list[dict]:
    """The run's logged evaluations (the metrics.jsonl rows with a val loss), in order."""
    return [row for row in read_metrics(run_dir) if "loss/val" in row]


def phase_change(run_dir: Path) -> str:
    """One line on the induction heads of a run, from its metrics.jsonl: the step at which the
    largest induction score first reached INDUCTION_THRESHOLD (the phase change), and the loss on
    repeated positions before it and at the end."""
    rows = [row for row in read_metrics(run_dir) if "induction/max" in row]
    if not rows:
        return "induction heads: no evaluation measured them"
    at = next(
        (i for i, row in enumerate(rows) if row["induction/max"] >= INDUCTION_THRESHOLD), None
    )
    before, last = rows[max(at - 1, 0) if at is not None else 0], rows[-1]
    when = (
        f"crossed {INDUCTION_THRESHOLD} at step {rows[at]['step']}"
        if at is not None
        else f"never reached {INDUCTION_THRESHOLD}"
    )
    return (
        f"induction heads: largest score {last['induction/max']:.3f} at step {last['step']} ({when}); loss on repeated positions "
        f"{before['loss/repeated']:.3f} at step {before['step']}, {last['loss/repeated']:.3f} at step {last['step']} "
        f"(first occurrences {last['loss/first']:.3f})"
    )


def sample_markdown(text: str, n_tokens: int) -> str:
    """A sample for TensorBoard's text tab, verbatim in a code block.

    A broken model can emit nothing but newlines (the --no-mask run does), which TensorBoard shows
    as an empty box; such a sample (data.tokenizer.degenerate) gets a note and visible whitespace,
    so it reads as what it is.
    """
    if (verdict := degenerate(text)) is None:
        return "\n".join("    " + line for line in text.splitlines())  # indented: shown verbatim
    note = (
        f"**{n_tokens} tokens, {verdict[0]}** ({verdict[1]}; whitespace shown as \u21b5 and \u2423)"
    )
    visible = text.replace(" ", "\u2423").replace("\n", "\u21b5")
    return note + "\n\n" + "\n".join("    " + line for line in textwrap.wrap(visible, 100) or [""])


def what_is_saved(run_dir: Path) -> str:
    """What a run folder that can no longer be written still holds, read from the disk: its
    checkpoint, or none, or nothing.
    """
    checkpoint = run_dir / "ckpt.pt"
    if not checkpoint.is_file():
        return (
            "no checkpoint was saved there"
            if run_dir.is_dir()
            else "the folder is gone (removed or moved away), with what it held"
        )
    try:
        return f"{checkpoint} holds step {read_checkpoint(checkpoint, mmap=True)['step']}, the last one saved"
    except CheckpointError:
        return f"{checkpoint} is there but cannot be read back"


class RunLogger:
    """The one place metrics go: TensorBoard, runs/<name>/metrics.jsonl, and the console.

    A write that fails (the run folder removed or moved away, made read-only, or full) ends the run
    in one line (`writing`). TensorBoard's own thread, which writes its events, fails without a
    traceback: TensorBoard raises the same error again at the logger's next write, where it becomes
    that line."""

    def __init__(self, run_dir: Path, resume_step: int | None = None, induction: bool = False):
        # imported here: tensorboard is slow to import
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir, path = run_dir, run_dir / "metrics.jsonl"
        # drop what an interrupted run logged after its checkpoint
        if resume_step is not None and path.is_file():
            kept = [line for line, row in metric_lines(path) if row["step"] <= resume_step]
            write_atomically(path, b"".join(line + b"\n" for line in kept))
        # TensorBoard hides later events of the old run
        purge = None if resume_step is None else resume_step + 1
        before = set(threading.enumerate())
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge)
        # TensorBoard's, which writes the events file
        self.writer_threads = set(threading.enumerate()) - before
        self.writer.add_custom_scalars(story_layout(induction))
        try:
            self.jsonl = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held open for the run's life)
        except OSError as e:  # a folder, or a file without write permission, in its place
            raise OutputError(
                f"cannot append to {path}: {e.strerror}; move it out of the way, or choose another --run-name"
            ) from None
        self.other_threads_failed, threading.excepthook = threading.excepthook, self.thread_failed
        # one HeatmapGrid of one panel for every head (same labels), laid out at the first
        # evaluation
        self.heatmap_grid = None

    def thread_failed(self, args: threading.ExceptHookArgs) -> None:
        """threading.excepthook while the logger is open: TensorBoard's writer thread fails quietly,
        any other as before.
        """
        if args.thread not in self.writer_threads:
            self.other_threads_failed(args)

    @contextlib.contextmanager
    def writing(self):
        """A write into the run folder: if it fails, one line that says what the folder still holds,
        and ends the run.
        """
        try:
            yield
        except OSError as e:
            threading.excepthook, reason = self.other_threads_failed, e.strerror or e
            raise OutputError(
                f"could not write into the run folder {self.run_dir}: {reason}; {what_is_saved(self.run_dir)}"
            ) from None

    def log(self, step: int, console: bool = False, **metrics: float) -> None:
        with self.writing():
            for tag, value in metrics.items():
                self.writer.add_scalar(tag, value, step)
            self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
            self.jsonl.flush()
        if console:
            shown = [(tag.split("/")[-1], metrics[tag]) for tag in CONSOLE_TAGS if tag in metrics]
            # as the run's last line
            tqdm.write(
                f"step {step:5d} | " + " | ".join(f"{name} {value:.4f}" for name, value in shown)
            )

    def log_evaluation(
        self, step: int, evaluation: Evaluation, flags: str, causal: bool = True
    ) -> None:
        """An evaluation's heatmaps (of a model with the mask when causal), sample and scalars (the
        scalars also on the console).
        """
        self.log_heatmaps(step, evaluation.heatmaps, evaluation.heatmap_labels, flags, causal)
        with self.writing():
            self.writer.add_text(
                "samples", sample_markdown(evaluation.sample, evaluation.sample_tokens), step
            )
        self.log(step, console=True, **evaluation.metrics)

    def log_heatmaps(
        self,
        step: int,
        weights_per_layer: list[torch.Tensor],
        labels: list[str],
        flags: str,
        causal: bool = True,
    ) -> None:
        """One heatmaps/L{layer}H{head} image per head from weights (1, H, T, T) per layer. One head
        a picture: TensorBoard shows an image at its card's width (350 pixels in IMAGES), where a
        layer's grid of heads shrinks its token labels past reading. Every picture refills one grid
        of one panel: laying out the labels is most of a picture's cost, and the heads differ only
        in their weights and title, which pixels() repaints."""
        # laid out once, wide enough for the last head's title with a seven-digit step
        if self.heatmap_grid is None:
            last = f"{head_name(len(weights_per_layer) - 1, weights_per_layer[0].shape[1] - 1)} at step {10**6} ({flags})"
            self.heatmap_grid = HeatmapGrid(
                1, labels, head_names=["attention weights"], title=last, causal=causal
            )
        for layer, weights in enumerate(weights_per_layer):
            for head in range(weights.shape[1]):
                name = head_name(layer, head)
                # (height, width, 3)
                picture = self.heatmap_grid.pixels(
                    weights[0, head : head + 1], f"{name} at step {step} ({flags})"
                )
                with self.writing():
                    self.writer.add_image(f"heatmaps/{name}", picture, step, dataformats="HWC")

    def close(self) -> None:
        with self.writing():
            self.writer.close()
            self.jsonl.close()
        threading.excepthook = self.other_threads_failed


def open_run_dir(cfg: Config, runtime: Runtime) -> FolderLock | None:
    """A fresh run folder (an earlier run there is moved aside) or the resumed one, with
    config.json; say where.

    Returns the folder's lock, held while the run lives: no other process can take the folder
    meanwhile.
    """
    if not runtime.is_main:
        return None
    lock, moved = claim_run_folder(cfg.run_dir, cfg.train.resume)
    try:
        write_atomically(cfg.run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2).encode())
    except OSError as e:  # a full disk: the checkpoint there, if any, is intact
        raise OutputError(
            f"could not save {cfg.run_dir / 'config.json'}: {e.strerror}; free some space or choose another --runs-dir"
        ) from None
    runtime.say(
        f"device: {runtime.device} ({runtime.why}); run folder: {cfg.run_dir}"
        + (f" (previous run moved to {moved})" if moved else "")
    )
    if advice := preset_advice(cfg.name, runtime.device):
        runtime.say(advice)
    runtime.say(
        f"config {cfg.name}: "
        + " | ".join(f"{s}: {getattr(cfg, s)}" for s in ("model", "data", "train"))
    )
    return lock
