"""Checkpoint files: written atomically, read as data only.

A checkpoint is a dict of tensors and plain Python data (numbers, strings, lists, dicts).
Writing goes to a temporary file in the same folder, is flushed and fsynced, then renamed over
the old file: a process killed at any moment, even during a save, leaves the previous
checkpoint intact. Reading uses torch.load(weights_only=True), which refuses anything that
would run code while unpickling.
"""

import math
import os
import pickle
import re
import zipfile
from pathlib import Path

import torch


class CheckpointError(Exception):
    """A checkpoint that is missing, unreadable, unsafe or does not fit; the message says what to do."""


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write payload to path atomically. Refuses non-finite weights; a failed write leaves the old file as it was."""
    for name, tensor in payload.get("model", {}).items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"refusing to save {path}: weight {name} is not finite")
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write (a full disk) as RuntimeError
        tmp.unlink(missing_ok=True)
        cause = e
        while cause is not None and not isinstance(cause, OSError):  # torch wraps the OSError of a failed write
            cause = cause.__cause__ or cause.__context__
        reason = cause.strerror if cause is not None and cause.strerror else f"the write failed ({type(e).__name__})"
        raise CheckpointError(f"could not save {path}: {reason}; the previous checkpoint there is intact") from None


def read_checkpoint(path: Path, map_location="cpu") -> dict:
    """torch.load with weights_only=True, turning every way it can fail into one CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"no checkpoint at {path}; train one first (python train.py --config base) or pass --run NAME / --checkpoint PATH"
        )
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        if unsafe:  # a pickle that asks to import and call something: it could run code
            raise CheckpointError(
                f"refused to load {path}: it asks to run {unsafe.group(1)}, and checkpoints may hold only tensors and plain data"
            ) from None
        raise CheckpointError(f"cannot read {path}: the file is truncated, corrupt or not a checkpoint") from None
    except (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
        raise CheckpointError(f"cannot read {path}: the file is truncated, corrupt or not a checkpoint ({type(e).__name__})") from None
    if not isinstance(checkpoint, dict) or not {"model", "config", "tokenizer", "step"} <= checkpoint.keys():
        raise CheckpointError(f"{path} is not a checkpoint of this project (it lacks model, config, tokenizer or step)")
    if not isinstance(checkpoint["model"], dict) or not all(isinstance(t, torch.Tensor) for t in checkpoint["model"].values()):
        raise CheckpointError(f"{path} is not a checkpoint of this project (its model entry is not a dict of tensors)")
    val_loss = checkpoint.get("val_loss")
    if val_loss is not None and not (isinstance(val_loss, float) and math.isfinite(val_loss)):
        raise CheckpointError(f"{path} records a non-finite or invalid val loss ({val_loss!r})")
    return checkpoint
