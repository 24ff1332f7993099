"""Training batches: random windows of a long array of token ids, or what a synthetic source draws."""

import numpy as np
import torch


def get_batch(
    ids: np.ndarray, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw batch_size windows at random offsets; return inputs x and targets y, both (B, T) int64.

    y is x shifted one position left: y[b, t] is the token that follows x[b, t]. Every position
    of a window is a training example, so one (B, T) batch carries B*T predictions.
    The offsets come from `generator` alone, so a seeded generator gives the same batches.
    """
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)  # (B,)
    offsets = starts[:, None] + torch.arange(block_size + 1)  # (B, 1) + (T + 1,) -> (B, T + 1)
    window = torch.from_numpy(ids[offsets.numpy()].astype(np.int64))  # (B, T + 1)
    return window[:, :-1], window[:, 1:]  # x (B, T), y (B, T)


def draw_batch(
    split, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y (B, T) from a split: windows of its token ids (get_batch), or a synthetic source's own
    draw (data/synthetic.py). Either way `generator` alone decides them, so a checkpoint of it
    resumes the stream."""
    if isinstance(split, np.ndarray):
        return get_batch(split, batch_size, block_size, generator)
    return split.draw(batch_size, block_size, generator)
