"""The bookkeeping around train.py's step: micro-batches, the DDP sync, the finite check."""

import contextlib
import json
from pathlib import Path

import torch

from configs import Config
from data.batches import draw_batch
from data.files import write_atomically
from harness.training.runtime import Runtime

DIVERGED = "diverged.json"  # in the run folder: the step whose loss or gradient was not finite


class TrainingError(Exception):
    """A non-finite loss or gradient."""


def draw_micro_batches(
    split, cfg: Config, runtime: Runtime, generator: torch.Generator
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's share of the global batch (B*A*W, T) that every rank draws: the number of ranks
    does not change the tokens."""
    B, A = cfg.train.batch_size, cfg.train.grad_accum_steps
    x, y = draw_batch(split, B * A * runtime.world_size, cfg.model.block_size, generator)
    mine = slice(runtime.rank * A, (runtime.rank + 1) * A)
    return list(zip(x.split(B)[mine], y.split(B)[mine], strict=True))


def micro_steps(model, micro_batches: list, runtime: Runtime):
    """Each micro-batch on the device, with no_sync() under DDP on all but the last: gradients are
    averaged across ranks once."""
    device = runtime.device
    for m, (x, y) in enumerate(micro_batches):
        sync = m == len(micro_batches) - 1 or runtime.world_size == 1
        context = contextlib.nullcontext() if sync else model.no_sync()
        yield x.to(device, non_blocking=True), y.to(device, non_blocking=True), context


def check_finite(loss, grad_norm, step: int, checkpoint: Path | None, record: bool = True) -> None:
    """Stop before the update on a non-finite loss or gradient (one sync per step); with `record`,
    diverged.json tells a run that diverged from one that failed."""
    if torch.isfinite(loss + grad_norm):
        return
    bad = "gradient" if torch.isfinite(loss) else "loss"
    kept = ""
    if checkpoint is not None:
        kept = f"; {checkpoint} is untouched"
        if record:  # the error says what happened all the same
            diverged = json.dumps({"step": step + 1, "non_finite": bad}).encode()
            with contextlib.suppress(OSError):
                write_atomically(checkpoint.parent / DIVERGED, diverged)
    raise TrainingError(
        f"non-finite {bad} at step {step + 1}; stopped before the update{kept}; "
        "try a lower --train.lr or --train.grad_clip"
    )


def tokens_per_step(cfg: Config, runtime: Runtime) -> int:
    train = cfg.train
    return train.batch_size * train.grad_accum_steps * runtime.world_size * cfg.model.block_size
