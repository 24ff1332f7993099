"""Checkpoint files: written atomically, read as data only, and the run state that --resume
restores.

A checkpoint is a dict of tensors and plain Python data (numbers, strings, lists, dicts). Writing
goes to a temporary file in the same folder, is flushed and fsynced, then renamed over the old file:
a process killed at any moment, even during a save, leaves the previous checkpoint intact. Reading
uses torch.load(weights_only=True), which refuses anything that would run code while unpickling. A
run keeps two files: ckpt.pt, the latest state (weights, optimizer, sampler and random states, the
loop's progress), and best.pt, the weights with the best val loss so far.
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
    """A checkpoint that is missing, unreadable, unsafe or does not fit; the message says what to
    do.
    """


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write payload to path atomically. Refuses non-finite weights; a failed write leaves the old
    file as it was.
    """
    for name, tensor in payload.get("model", {}).items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CheckpointError(f"refusing to save {path}: weight {name} is not finite")
    # while the run wrote into it
    gone = f"its folder {path.parent} is gone (removed or moved away), with what it held"
    earlier = (
        "the previous checkpoint there is intact"
        if path.is_file()
        else "no checkpoint was saved"
        if path.parent.is_dir()
        else gone
    )
    try:
        # the run folder's lock makes this process its only writer
        with atomic_file(path, one_writer=True) as f:
            torch.save(payload, f)
    # torch.save reports a failed write (a full disk) as RuntimeError
    except (OSError, RuntimeError) as e:
        cause = e
        # torch wraps the OSError of a failed write
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        reason = (
            cause.strerror
            if cause is not None and cause.strerror
            else f"the write failed ({type(e).__name__})"
        )
        raise CheckpointError(f"could not save {path}: {reason}; {earlier}") from None


def read_checkpoint(path: Path, map_location="cpu", mmap: bool = False) -> dict:
    """torch.load with weights_only=True, turning every way it can fail into one CheckpointError;
    mmap: tensors read on use.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(
            f"no checkpoint at {path}; train one first (python train.py --config base) or pass --run NAME / --checkpoint PATH"
        )
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        if unsafe:  # a pickle that asks to import and call something: it could run code
            raise CheckpointError(
                f"refused to load {path}: it asks to run {unsafe.group(1)}, and checkpoints may hold only tensors and plain data"
            ) from None
        raise CheckpointError(
            f"cannot read {path}: the file is truncated, corrupt or not a checkpoint"
        ) from None
    except Exception as e:  # noqa: BLE001 (any file can be named: the unpickler fails on arbitrary bytes in many ways)
        raise CheckpointError(
            f"cannot read {path}: the file is truncated, corrupt or not a checkpoint ({type(e).__name__})"
        ) from None
    if (
        not isinstance(checkpoint, dict)
        or not {"model", "config", "tokenizer", "step"} <= checkpoint.keys()
    ):
        raise CheckpointError(
            f"{path} is not a checkpoint of this project (it lacks model, config, tokenizer or step)"
        )
    if not isinstance(checkpoint["model"], dict) or not all(
        isinstance(t, torch.Tensor) for t in checkpoint["model"].values()
    ):
        raise CheckpointError(
            f"{path} is not a checkpoint of this project (its model entry is not a dict of tensors)"
        )
    if (val_loss := checkpoint.get("val_loss")) is not None and not (
        isinstance(val_loss, float) and math.isfinite(val_loss)
    ):
        raise CheckpointError(f"{path} records a non-finite or invalid val loss ({val_loss!r})")
    # its whole config checked, as a command line's: a value of the wrong type stops here
    model_config_of(checkpoint, path)
    return checkpoint


def model_config_of(checkpoint: dict, path: Path) -> ModelConfig:
    """The ModelConfig a checkpoint stores, its whole config checked as any config is
    (configs/validation.py), or a CheckpointError.
    """
    try:
        return validate_config(checkpoint.get("config"), path, recorded=True).model
    except ConfigError as e:
        raise CheckpointError(str(e)) from None


def check_model_config(checkpoint: dict, path: Path, wanted: ModelConfig) -> None:
    """Refuse to resume a checkpoint of another model: every field but the attention backend must
    match.
    """
    diff = config_differences(
        dataclasses.asdict(model_config_of(checkpoint, path)),
        dataclasses.asdict(wanted),
        ignore=("attention",),
    )
    if diff:
        raise CheckpointError(
            f"{path} was trained with another model config ({'; '.join(diff)}); resume with the run's own flags, or start a new run"
        )


def load_model(path: Path, device: str | torch.device = "cpu") -> tuple[GPT, Tokenizer, dict]:
    """Rebuild the model and tokenizer stored in a checkpoint; returns (model in eval mode,
    tokenizer, checkpoint).

    The model config comes from the checkpoint, never from a TOML file, so an old checkpoint
    still loads after the presets change.
    """
    path = Path(path)
    checkpoint = read_checkpoint(path)
    model_cfg = model_config_of(checkpoint, path)
    try:
        tokenizer = tokenizer_from_state(checkpoint["tokenizer"])
    except TokenizerError:
        # the tokenizer's own files are missing (tiktoken offline): not the checkpoint's fault
        raise
    except (TypeError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path} holds an invalid tokenizer: {e}") from None
    if tokenizer.vocab_size != model_cfg.vocab_size:
        raise CheckpointError(
            f"{path} is inconsistent: tokenizer has {tokenizer.vocab_size} tokens, model {model_cfg.vocab_size}"
        )
    check_shapes(path, model_cfg, checkpoint["model"])
    model = GPT(model_cfg)
    load_weights(model, checkpoint["model"], path)
    return model.to(device).eval(), tokenizer, checkpoint


def load_weights(model: GPT, state: dict, path: Path | str) -> None:
    """Load a checkpoint's weights into a model of the right config, or a CheckpointError naming the
    first misfit.
    """
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        detail = str(e).strip().splitlines()[0]
        raise CheckpointError(
            f"{path}: its weights do not fit its model config ({detail[:200]})"
        ) from None


def check_shapes(path: Path, model_cfg: ModelConfig, state: dict) -> None:
    """Refuse weights that do not fit the config before the model takes any memory.

    The model is built on the meta device (shapes only), so a crafted config (block_size 1e9,
    say) costs nothing when its weights do not fit it.
    """
    with torch.device("meta"):
        expected = GPT(model_cfg).state_dict()
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in expected]
    wrong = [
        name for name in expected if name in state and state[name].shape != expected[name].shape
    ]
    if missing or unexpected or wrong:
        if wrong:
            name = wrong[0]
            detail = f"{name} is {tuple(state[name].shape)}, the config says {tuple(expected[name].shape)}"
        else:
            detail = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"{path}: its weights do not fit its model config ({detail})")


@dataclasses.dataclass
class Progress:
    """Where the training loop stands: saved beside the weights so that --resume continues without a
    seam.
    """

    step: int = 0  # optimizer steps done
    # whether `step` was evaluated before the save (a resumed run does not evaluate it again)
    evaluated: bool = False
    best_val: float = math.inf  # the best val loss so far: best.pt holds its weights
    # training loss summed over the steps since the last loss line
    window_loss: float | torch.Tensor = 0.0
    window_steps: int = 0  # how many steps that sum holds
    val_loss: float | None = None  # the latest evaluation's val loss


def read_resumable(cfg: Config, source_sha256: str) -> dict:
    """The run's ckpt.pt, read once, if it can continue this run: same model, same optimizer, same
    text, steps left.

    An --init-from run takes its model config from the checkpoint itself, so initial_model checks
    that one.
    """
    path = cfg.run_dir / "ckpt.pt"
    if not path.is_file():
        earlier = [folder for folder in moved_aside(cfg.run_dir) if (folder / "ckpt.pt").is_file()]
        if earlier:  # a fresh start moved the run aside, then stopped before its first checkpoint
            raise CheckpointError(
                f"nothing to resume: no checkpoint at {path}, but the run there before was moved aside to {earlier[0]}; "
                f"to resume that one, move it back in place of {cfg.run_dir}"
            )
        raise CheckpointError(
            f"nothing to resume: no checkpoint at {path}; check --run-name and --runs-dir, or start afresh without --resume"
        )
    checkpoint = read_checkpoint(path)
    # an --init-from run's model config comes from the checkpoint: initial_model checks it
    if not cfg.train.init_from:
        check_model_config(checkpoint, path, cfg.model)
    saved_optimizer = checkpoint["config"].get("train", {}).get("optimizer", "adamw")
    if saved_optimizer != cfg.train.optimizer:
        raise CheckpointError(
            f"{path} was trained with train.optimizer={saved_optimizer}; resume with the same optimizer, or start a new run"
        )
    # another text, or other settings of a synthetic source (it has no text)
    if checkpoint.get("source_sha256") != source_sha256:
        diff = "; ".join(
            config_differences(
                checkpoint["config"].get("data", {}),
                {k: getattr(cfg.data, k) for k in SETTINGS},
                (),
                "data.",
            )
        )
        other = (
            "another text; resume with the same --data-file"
            if cfg.data.source == "text"
            else f"other data ({diff}); resume with them"
        )
        raise CheckpointError(f"{path} was trained on {other}, or start a new run")
    if not all(k in checkpoint for k in ("optimizer", "train_rng", "torch_rng")):
        raise CheckpointError(
            f"{path} holds weights only (no optimizer or sampler state), so it cannot be resumed"
        )
    # stopped in its last evaluation: that is left
    if checkpoint["step"] >= cfg.train.max_steps and checkpoint.get("evaluated", True):
        raise CheckpointError(
            f"{path} already finished at step {checkpoint['step']}; raise --train.max_steps to train further"
        )
    return checkpoint


def restore(
    checkpoint: dict, model: GPT, optimizer, train_gen: torch.Generator, runtime: Runtime
) -> Progress:
    """Load a resumable checkpoint into the model, the optimizer and the batch sampler; return the
    loop's progress.
    """
    load_weights(model, checkpoint["model"], "the resumed checkpoint")
    optimizer.load_state_dict(checkpoint["optimizer"])
    train_gen.set_state(checkpoint["train_rng"])
    rng_states = checkpoint["torch_rng"]
    # one process's state
    rng_states = [rng_states] if isinstance(rng_states, torch.Tensor) else rng_states
    # saved on a GPU, whose dropout draws from it
    cuda_states = checkpoint.get("cuda_rng") or [None] * len(rng_states)
    if len(rng_states) == runtime.world_size:
        # each process's own dropout stream
        set_random_state(runtime.device, rng_states[runtime.rank], cuda_states[runtime.rank])
    else:
        runtime.say(
            f"note: the checkpoint comes from {len(rng_states)} processes, this run has {runtime.world_size}; dropout draws new random masks"
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
    """Saves one run's ckpt.pt (everything --resume needs) and best.pt (the weights with the best
    val loss).
    """

    def __init__(
        self,
        cfg: Config,
        tokenizer: Tokenizer,
        source_sha256: str,
        runtime: Runtime,
        best_val: float,
    ):
        self.cfg, self.tokenizer, self.source_sha256, self.runtime = (
            cfg,
            tokenizer,
            source_sha256,
            runtime,
        )
        self.best_val = best_val

    def save(self, model: GPT, optimizer, train_gen: torch.Generator, progress: Progress) -> None:
        """Called by every process (they share their dropout random states); only the main one
        writes.
        """
        mine = random_state(self.runtime.device)
        rng_states = [mine]  # dropout randomness differs per rank: keep each rank's
        if self.runtime.world_size > 1:
            rng_states = [None] * self.runtime.world_size
            torch.distributed.all_gather_object(rng_states, mine)
        if not self.runtime.is_main:
            return
        run_dir = self.cfg.run_dir
        payload = {
            "model": model.state_dict(),
            "config": self.cfg.to_dict(),
            "step": progress.step,
            "tokenizer": self.tokenizer.state(),
            "val_loss": progress.val_loss,
            "source_sha256": self.source_sha256,
        }
        if (
            progress.evaluated
            and progress.val_loss is not None
            and progress.val_loss < self.best_val
        ):
            self.best_val = progress.val_loss
            # weights for sampling, no optimizer state
            save_checkpoint(run_dir / "best.pt", payload)
        resume_state = {
            "optimizer": optimizer.state_dict(),
            "train_rng": train_gen.get_state(),
            "torch_rng": [cpu for cpu, _ in rng_states],
            **(
                {"cuda_rng": [cuda for _, cuda in rng_states]}
                if self.runtime.device.type == "cuda"
                else {}
            ),
            "evaluated": progress.evaluated,
            "best_val": self.best_val,
            "window": [float(progress.window_loss), progress.window_steps],
        }
        save_checkpoint(run_dir / "ckpt.pt", {**payload, **resume_state})
