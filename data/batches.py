"""Training batches: random windows of a long array of token ids, or a synthetic source's draw."""

import numpy as np
import torch


def get_batch(
    ids: np.ndarray, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """x, y (B, T) int64: y is x shifted one left, so each of the B*T positions is an example."""
    starts = torch.randint(len(ids) - block_size, (batch_size,), generator=generator)  # (B,)
    offsets = starts[:, None] + torch.arange(block_size + 1)  # (B, 1) + (T + 1,) -> (B, T + 1)
    window = torch.from_numpy(ids[offsets.numpy()].astype(np.int64))  # (B, T + 1)
    return window[:, :-1], window[:, 1:]  # x (B, T), y (B, T)


def draw_batch(
    split, batch_size: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(split, np.ndarray):
        return get_batch(split, batch_size, block_size, generator)
    return split.draw(batch_size, block_size, generator)
