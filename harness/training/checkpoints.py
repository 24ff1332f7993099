"""Checkpoints, written atomically and read as data only (weights_only=True): ckpt.pt (the latest
state, what --resume restores) and best.pt (the best val loss's weights).
"""

import dataclasses
import math
import pickle
import re
from pathlib import Path

import torch

from configs.schema import Config, config_differences
from configs.validation import ConfigError, validate_config
from data.files import atomic_file
from data.synthetic import SETTINGS
from data.tokenizer import Tokenizer, TokenizerError, tokenizer_from_state
from harness.folders import moved_aside
from harness.training.runtime import Runtime, random_state, set_random_state
from model import GPT, ModelConfig


class CheckpointError(Exception):
    """A checkpoint that is missing, unreadable, unsafe or does not fit."""


def save_checkpoint(path: Path, payload: dict) -> None:
    for name, tensor in payload.get("model", {}).items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"refusing to save {path}: weight {name} is not finite")
    earlier = f"its folder {path.parent} is gone (removed or moved away), with what it held"
    if path.is_file():
        earlier = "the previous checkpoint there is intact"
    elif path.parent.is_dir():
        earlier = "no checkpoint was saved"
    try:
        with atomic_file(path, one_writer=True) as f:  # the run folder's lock: its only writer
            torch.save(payload, f)
    # torch.save wraps a failed write's OSError (a full disk) in a RuntimeError
    except (OSError, RuntimeError) as e:
        cause = e
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        reason = getattr(cause, "strerror", None) or f"the write failed ({type(e).__name__})"
        raise CheckpointError(f"could not save {path}: {reason}; {earlier}") from None


def read_checkpoint(path: Path, mmap: bool = False) -> dict:
    """torch.load(weights_only=True), any failure a CheckpointError."""
    if not Path(path).is_file():
        raise CheckpointError(
            f"no checkpoint at {path}; train one (python train.py) or pass --run NAME / "
            "--checkpoint PATH"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # noqa: BLE001 (the unpickler fails on arbitrary bytes in many ways)
        unpickling = isinstance(e, pickle.UnpicklingError)
        unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        if unpickling and unsafe:
            raise CheckpointError(
                f"refused to load {path}: it asks to run {unsafe.group(1)}; a checkpoint holds "
                "only tensors and plain data"
            ) from None
        kind = "" if unpickling else f" ({type(e).__name__})"
        raise CheckpointError(
            f"cannot read {path}: the file is truncated, corrupt or not a checkpoint{kind}"
        ) from None
    not_ours = f"{path} is not a checkpoint of this project"
    needed = {"model", "config", "tokenizer", "step"}
    if not isinstance(checkpoint, dict) or not checkpoint.keys() >= needed:
        raise CheckpointError(f"{not_ours} (it lacks model, config, tokenizer or step)")
    weights = checkpoint["model"]
    if not isinstance(weights, dict) or not all(map(torch.is_tensor, weights.values())):
        raise CheckpointError(f"{not_ours} (its model is not a dict of tensors)")
    val_loss = checkpoint.get("val_loss")
    if val_loss is not None and not (isinstance(val_loss, float) and math.isfinite(val_loss)):
        raise CheckpointError(f"{path}: invalid val loss {val_loss!r}")
    model_config_of(checkpoint, path)
    return checkpoint


def model_config_of(checkpoint: dict, path: Path) -> ModelConfig:
    try:
        return validate_config(checkpoint.get("config"), path, recorded=True).model
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def check_model_config(checkpoint: dict, path: Path, wanted: ModelConfig) -> None:
    """Refuse another model's checkpoint; the attention backend may differ."""
    saved = dataclasses.asdict(model_config_of(checkpoint, path))
    if diff := config_differences(saved, dataclasses.asdict(wanted), ignore=("attention",)):
        raise CheckpointError(
            f"{path} was trained with another model config ({'; '.join(diff)}); "
            "resume with the run's own flags, or start a new run"
        )


def load_model(path: Path, device: str | torch.device = "cpu") -> tuple[GPT, Tokenizer, dict]:
    """(model in eval mode, tokenizer, checkpoint), from the checkpoint's own config."""
    checkpoint = read_checkpoint(path)
    model_cfg = model_config_of(checkpoint, path)
    try:
        tokenizer = tokenizer_from_state(checkpoint["tokenizer"])
    except TokenizerError:  # tiktoken's files missing offline: not the checkpoint's fault
        raise
    except (TypeError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path} holds an invalid tokenizer: {e}") from None
    if tokenizer.vocab_size != model_cfg.vocab_size:
        raise CheckpointError(
            f"{path}: the tokenizer has {tokenizer.vocab_size} tokens, the model "
            f"{model_cfg.vocab_size}"
        )
    check_shapes(path, model_cfg, checkpoint["model"])
    model = GPT(model_cfg)
    model.load_state_dict(checkpoint["model"])
    return model.to(device).eval(), tokenizer, checkpoint


def check_shapes(path: Path | str, model_cfg: ModelConfig, state: dict) -> None:
    """Refuse weights that do not fit the config; on the meta device a crafted one costs nothing."""
    with torch.device("meta"):
        expected = GPT(model_cfg).state_dict()
    misfits = [
        f"{name} is {tuple(state[name].shape)}, the config says {tuple(weights.shape)}"
        for name, weights in expected.items()
        if name in state and state[name].shape != weights.shape
    ]
    misfits += [f"missing {name}" for name in expected if name not in state]
    misfits += [f"unexpected {name}" for name in state if name not in expected]
    if misfits:
        raise CheckpointError(f"{path}: its weights do not fit its model config ({misfits[0]})")


@dataclasses.dataclass
class Progress:
    step: int = 0
    evaluated: bool = False  # whether `step` was evaluated before the save
    best_val: float = math.inf  # the best val loss so far: best.pt holds its weights
    window_loss: float | torch.Tensor = 0.0  # training loss summed since the last loss line
    window_steps: int = 0
    val_loss: float | None = None


def read_resumable(cfg: Config, source_sha256: str) -> dict:
    """The run's ckpt.pt if it can continue: same model, optimizer and text, steps left."""
    path = cfg.run_dir / "ckpt.pt"
    if not path.is_file():
        for folder in moved_aside(cfg.run_dir):  # by a fresh start stopped before its first save
            if (folder / "ckpt.pt").is_file():
                raise CheckpointError(
                    f"nothing to resume: no checkpoint at {path}, but the run there before was "
                    f"moved aside to {folder}; move it back to resume it"
                )
        raise CheckpointError(
            f"nothing to resume: no checkpoint at {path}; check --run-name and --runs-dir, "
            "or drop --resume"
        )
    checkpoint = read_checkpoint(path)
    # an --init-from run's model config comes from the checkpoint: initial_model checks it
    if not cfg.train.init_from:
        check_model_config(checkpoint, path, cfg.model)
    saved = checkpoint["config"]
    optimizer = saved.get("train", {}).get("optimizer", "adamw")
    if optimizer != cfg.train.optimizer:
        raise CheckpointError(
            f"{path} was trained with train.optimizer={optimizer}; "
            "resume with the same optimizer, or start a new run"
        )
    if checkpoint.get("source_sha256") != source_sha256:
        other = "another text; resume with the same --data-file"
        if cfg.data.source != "text":
            wanted = {k: getattr(cfg.data, k) for k in SETTINGS}
            diff = config_differences(saved.get("data", {}), wanted, (), "data.")
            other = f"other data ({'; '.join(diff)}); resume with them"
        raise CheckpointError(f"{path} was trained on {other}, or start a new run")
    if not {"optimizer", "train_rng", "torch_rng"} <= set(checkpoint):
        raise CheckpointError(f"{path} holds weights only (no optimizer state): not resumable")
    if checkpoint["step"] >= cfg.train.max_steps and checkpoint.get("evaluated", True):
        raise CheckpointError(
            f"{path} already finished at step {checkpoint['step']}; "
            "raise --train.max_steps to train further"
        )
    return checkpoint


def restore(
    checkpoint: dict, model: GPT, optimizer, train_gen: torch.Generator, runtime: Runtime
) -> Progress:
    check_shapes("the resumed checkpoint", model.cfg, checkpoint["model"])
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    train_gen.set_state(checkpoint["train_rng"])
    rng_states = checkpoint["torch_rng"]
    if isinstance(rng_states, torch.Tensor):  # one process's state
        rng_states = [rng_states]
    cuda_states = checkpoint.get("cuda_rng") or [None] * len(rng_states)  # dropout's on a GPU
    if len(rng_states) == runtime.world_size:  # each process's own dropout stream
        set_random_state(runtime.device, rng_states[runtime.rank], cuda_states[runtime.rank])
    else:
        runtime.say(
            f"note: the checkpoint comes from {len(rng_states)} processes, this run has "
            f"{runtime.world_size}: dropout draws new masks"
        )
    window_loss, window_steps = checkpoint.get("window", (0.0, 0))
    return Progress(
        step=checkpoint["step"],
        evaluated=checkpoint.get("evaluated", False),
        best_val=checkpoint.get("best_val", math.inf),
        window_loss=window_loss,
        window_steps=window_steps,
        val_loss=checkpoint.get("val_loss"),
    )


class Checkpointer:
    """Saves a run's ckpt.pt (everything --resume needs) and best.pt."""

    def __init__(
        self, cfg: Config, tokenizer: Tokenizer, source_sha256: str, runtime: Runtime, best_val
    ):
        self.cfg, self.tokenizer, self.source_sha256 = cfg, tokenizer, source_sha256
        self.runtime, self.best_val = runtime, best_val

    def save(self, model: GPT, optimizer, train_gen: torch.Generator, progress: Progress) -> None:
        """Called by every process (they share their random states); the main one writes."""
        mine = random_state(self.runtime.device)
        rng_states = [mine]  # dropout randomness differs per rank: keep each rank's
        if self.runtime.world_size > 1:
            rng_states = [None] * self.runtime.world_size
            torch.distributed.all_gather_object(rng_states, mine)
        if not self.runtime.is_main:
            return
        payload = {
            "model": model.state_dict(),
            "config": self.cfg.to_dict(),
            "step": progress.step,
            "tokenizer": self.tokenizer.state(),
            "val_loss": progress.val_loss,
            "source_sha256": self.source_sha256,
        }
        val_loss = progress.val_loss
        if progress.evaluated and val_loss is not None and val_loss < self.best_val:
            self.best_val = val_loss
            save_checkpoint(self.cfg.run_dir / "best.pt", payload)
        resume_state = {
            "optimizer": optimizer.state_dict(),
            "train_rng": train_gen.get_state(),
            "torch_rng": [cpu for cpu, _ in rng_states],
            "evaluated": progress.evaluated,
            "best_val": self.best_val,
            "window": [float(progress.window_loss), progress.window_steps],
        }
        if self.runtime.device.type == "cuda":
            resume_state["cuda_rng"] = [cuda for _, cuda in rng_states]
        save_checkpoint(self.cfg.run_dir / "ckpt.pt", {**payload, **resume_state})
