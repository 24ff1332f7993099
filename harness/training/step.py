"""The bookkeeping around train.py's step: micro-batches, the DDP sync, the finite check."""

import contextlib
import json
from pathlib import Path

import torch

from configs import Config
from data.batches import draw_batch
from data.files import write_atomically
from harness.training.runtime import Runtime

# in the run's folder: the step whose loss or gradient was not finite
DIVERGED = "diverged.json"


class TrainingError(Exception):
    """Training cannot go on (a non-finite loss or gradient)."""


def draw_micro_batches(
    split, cfg: Config, runtime: Runtime, generator: torch.Generator
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's micro-batches for one step: every rank draws the whole global batch from an
    identically seeded generator and keeps its own, so the split does not change the tokens."""
    B, A = cfg.train.batch_size, cfg.train.grad_accum_steps
    # (B*A*W, T)
    x, y = draw_batch(split, B * A * runtime.world_size, cfg.model.block_size, generator)
    mine = slice(runtime.rank * A, (runtime.rank + 1) * A)
    return list(zip(x.split(B)[mine], y.split(B)[mine], strict=True))


def micro_steps(model, micro_batches: list, runtime: Runtime):
    """Each micro-batch on the device, with its context: under DDP, no_sync() on all but the last,
    so gradients are averaged across ranks once."""
    for m, (x, y) in enumerate(micro_batches):
        last = m == len(micro_batches) - 1
        ddp_sync = contextlib.nullcontext() if last or runtime.world_size == 1 else model.no_sync()
        yield (
            x.to(runtime.device, non_blocking=True),
            y.to(runtime.device, non_blocking=True),
            ddp_sync,
        )


def check_finite(
    loss: torch.Tensor,
    grad_norm: torch.Tensor,
    step: int,
    checkpoint: Path | None,
    record: bool = True,
) -> None:
    """Stop before the update when the loss or the gradient is not finite (one sync per step);
    with `record`, diverged.json tells a run that diverged from one that failed."""
    if torch.isfinite(loss + grad_norm):
        return
    bad = "loss" if not torch.isfinite(loss) else "gradient"
    kept = ""
    if checkpoint is not None:
        kept = f". The last good checkpoint, {checkpoint}, is untouched"
        if record:
            # the error below says what happened all the same
            with contextlib.suppress(OSError):
                write_atomically(
                    checkpoint.parent / DIVERGED,
                    json.dumps({"step": step + 1, "non_finite": bad}).encode(),
                )
    raise TrainingError(
        f"non-finite {bad} at step {step + 1}; stopped before the update{kept}; "
        "try a lower --train.lr or --train.grad_clip"
    )


def tokens_per_step(cfg: Config, runtime: Runtime) -> int:
    train = cfg.train
    return train.batch_size * train.grad_accum_steps * runtime.world_size * cfg.model.block_size
