"""Random training windows drawn from a long array of token ids."""

import numpy as np
import torch


def get_batch(ids: np.ndarray, batch_size: int, block_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw batch_size windows at random offsets; return inputs x and targets y, both (B, T) int64.

    y is x shifted one position left: y[b, t] is the token that follows x[b, t]. Every position
    of a window is a training example, so one (B, T) batch carries B*T predictions.
    The offsets come from `generator` alone, so a seeded generator gives the same batches.
    """
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)  # (B,)
    offsets = starts[:, None] + torch.arange(block_size + 1)  # (B, 1) + (T + 1,) -> (B, T + 1)
    window = torch.from_numpy(ids[offsets.numpy()].astype(np.int64))  # (B, T + 1)
    return window[:, :-1], window[:, 1:]  # x (B, T), y (B, T)
