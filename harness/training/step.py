"""One training step: draw this process's micro-batches, run forward and backward over them, clip, check, update."""

import contextlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import torch

from configs import Config
from data.batches import draw_batch
from data.files import write_atomically
from harness.training.runtime import Runtime

DIVERGED = "diverged.json"  # in the run's folder: the step whose loss or gradient was not finite (compare.py and sweep.py read it)


class TrainingError(Exception):
    """Training cannot go on (a non-finite loss or gradient); the message names the step and the last checkpoint."""


def draw_micro_batches(split, cfg: Config, runtime: Runtime, generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's micro-batches for one optimizer step.

    `split` is the train split's token ids or a synthetic source (data.batches.draw_batch).
    Every rank draws the whole global batch (batch_size x grad_accum_steps x world_size windows)
    from an identically seeded generator and keeps its own chunks, so a global step sees the same
    tokens whether it is split over 2 ranks x 1 micro-step or 1 rank x 2 micro-steps.
    """
    B, A = cfg.train.batch_size, cfg.train.grad_accum_steps
    x, y = draw_batch(split, B * A * runtime.world_size, cfg.model.block_size, generator)  # (B*A*W, T)
    first = runtime.rank * A
    return [(x[(first + m) * B : (first + m + 1) * B], y[(first + m) * B : (first + m + 1) * B]) for m in range(A)]


def train_step(model, micro_batches: list, runtime: Runtime, grad_clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over the micro-batches, then clip; returns (mean loss, gradient norm) as tensors.

    Gradients add up over micro-batches; under DDP they are averaged across ranks on the last one only.
    """
    total = torch.zeros((), device=runtime.device)
    for m, (x, y) in enumerate(micro_batches):
        last = m == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last or runtime.world_size == 1 else model.no_sync()
        with sync:
            with runtime.autocast():
                _, loss = model(x.to(runtime.device, non_blocking=True), y.to(runtime.device, non_blocking=True))
            (loss / len(micro_batches)).backward()
        total += loss.detach() / len(micro_batches)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else math.inf)
    return total, grad_norm


def check_finite(loss: torch.Tensor, grad_norm: torch.Tensor, step: int, checkpoint: Path | None, record: bool = True) -> None:
    """Stop before the update when the loss or the gradient is not finite: one sync per step, weights untouched.

    With `record`, the run's folder (where `checkpoint` lies) keeps the step in diverged.json: an experiment tells a run
    that diverged, a result it shows, from one that failed, and its --resume does not train that run again.
    """
    if not torch.isfinite(loss + grad_norm):
        bad = "loss" if not torch.isfinite(loss) else "gradient"
        if checkpoint is not None and record:
            with contextlib.suppress(OSError):  # a folder that cannot take it: the error below says what happened all the same
                write_atomically(checkpoint.parent / DIVERGED, json.dumps({"step": step + 1, "non_finite": bad}).encode())
        kept = f". The last good checkpoint, {checkpoint}, is untouched" if checkpoint is not None else ""
        raise TrainingError(
            f"non-finite {bad} at step {step + 1}; stopped before the update{kept}; try a lower --train.lr or --train.grad_clip"
        )


def optimizer_step(
    model,
    optimizer: torch.optim.Optimizer,
    micro_batches: list,
    runtime: Runtime,
    grad_clip: float,
    step: int,
    checkpoint: Path | None = None,
    before_update: Callable[[], object] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, object]:
    """One optimizer step, as the training loop and the benchmark take it: zero the gradients, train_step
    (forward, backward, clip), stop on a non-finite loss or gradient, update the weights.

    before_update, if given, runs between the check and the update, when the gradients are final and the
    weights not yet moved (the loop reads the query/key gradient norm there). Returns (mean loss, gradient
    norm, what before_update returned, else None).
    """
    optimizer.zero_grad(set_to_none=True)
    loss, grad_norm = train_step(model, micro_batches, runtime, grad_clip)
    check_finite(loss, grad_norm, step, checkpoint, record=runtime.is_main)
    seen = before_update() if before_update is not None else None
    optimizer.step()
    return loss, grad_norm, seen


def tokens_per_step(cfg: Config, runtime: Runtime) -> int:
    """Tokens one optimizer step trains on, over every process: batch x accumulation x processes x context."""
    return cfg.train.batch_size * cfg.train.grad_accum_steps * runtime.world_size * cfg.model.block_size


def tokens_per_second(n_tokens: int, seconds: float) -> float:
    return n_tokens / max(seconds, 1e-9)
