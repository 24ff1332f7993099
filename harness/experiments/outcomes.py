"""What each run of an experiment came to, read from its folder: finished, diverged, or ended by a
signal. A run is its settings, not where its folder lies."""

import signal
from pathlib import Path

from configs import SECTIONS, Config, ConfigError, validate_config
from configs.loader import resolved_texts
from configs.schema import config_differences
from harness.folders import read_json
from harness.training.checkpoints import CheckpointError, read_checkpoint
from harness.training.runlog import evaluations, read_metrics
from harness.training.step import DIVERGED

# where a run lies or how it was started, derived
WHERE_NOT_WHAT = ("runs_dir", "cache_dir", "run_name", "resume", "vocab_size")


def read_saved_runs(saved: Path) -> dict:
    saved = read_json(saved)
    runs = saved.get("runs") if isinstance(saved, dict) else None
    return runs if isinstance(runs, dict) else {}


def settings(config: dict) -> dict:
    return {**config, "data": {**config["data"], **resolved_texts(config["data"])}}


def check_settings(cfg: Config, recorded, where: Path) -> None:
    """Refuse a finished run recorded (in `where`) with other settings: an experiment resumed with
    other flags. A missing or damaged record differs in every setting."""
    theirs = {}
    if isinstance(recorded, dict):
        theirs = settings(validate_config(recorded, where, recorded=True).to_dict())
    ours = settings({section: cfg.to_dict()[section] for section in SECTIONS})
    differs = config_differences(theirs, ours, ignore=WHERE_NOT_WHAT)
    if differs:
        raise ConfigError(
            f"{cfg.run_dir} finished with other settings ({'; '.join(differs[:3])}); "
            "resume with the experiment's own flags, or start afresh without --resume"
        )


def recorded_settings(run_dir: Path) -> tuple[dict | None, Path]:
    recorded = read_json(run_dir / "config.json")
    if isinstance(recorded, dict):
        return recorded, run_dir / "config.json"
    try:
        return read_checkpoint(run_dir / "ckpt.pt", mmap=True)["config"], run_dir / "ckpt.pt"
    except CheckpointError:
        return None, run_dir / "config.json"


def finished_run(cfg: Config, saved_runs: dict) -> dict | None:
    """What a run gave if it finished with these settings."""
    ckpt = cfg.run_dir / "ckpt.pt"
    if not ckpt.is_file():
        return None
    last = (evaluations(cfg.run_dir) or [{}])[-1]
    if last.get("step") == cfg.train.max_steps:
        check_settings(cfg, *recorded_settings(cfg.run_dir))
    else:
        # a damaged checkpoint is no finished run: train.py, resuming it, says what is wrong
        try:
            checkpoint = read_checkpoint(ckpt)
        except CheckpointError:
            return None
        if checkpoint["step"] != cfg.train.max_steps or not checkpoint.get("evaluated", True):
            return None
        last = {"step": checkpoint["step"], "loss/val": checkpoint.get("val_loss")}
        check_settings(cfg, checkpoint["config"], ckpt)
    saved = saved_runs.get(cfg.run_name, {})
    if saved.get("step") == last["step"] and saved.get("exit_code") == 0:
        return saved
    return {**last, "exit_code": 0}


def earlier_outcome(cfg: Config, saved_runs: dict, diverged_too: bool) -> dict | None:
    """What --resume keeps: a finished run, or (diverged_too) one that diverged."""
    done = finished_run(cfg, saved_runs)
    if done is None and diverged_too and (done := diverged_run(cfg.run_dir)) is not None:
        check_settings(cfg, *recorded_settings(cfg.run_dir))
    return done


def diverged_run(run_dir: Path) -> dict | None:
    """Where a run's loss or gradient stopped being finite, and its last training loss."""
    record = read_json(run_dir / DIVERGED)
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        return None
    # a record older than the checkpoint: the run was resumed by hand past the step where it failed
    try:
        if read_checkpoint(run_dir / "ckpt.pt", mmap=True)["step"] > record["step"]:
            return None
    except CheckpointError:  # no checkpoint yet: it failed before its first save
        pass
    rows = [row for row in read_metrics(run_dir) if "loss/train_step" in row or "loss/train" in row]
    last = rows[-1] if rows else {}
    loss = last.get("loss/train_step", last.get("loss/train"))
    where = {"step": record["step"], "last_loss": loss, "last_loss_step": last.get("step")}
    return {"exit_code": 1, "diverged": where}


def killed_from_outside(code: int, run_name: str, what: str) -> str | None:
    """The line for a run a signal ended (a negative code) before it could say anything."""
    if code >= 0:
        return None
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if -code == signal.SIGKILL:
        how = "from outside (as the kernel's out-of-memory killer does)"
    elif -code in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        how = "from outside"
    else:  # SIGSEGV, SIGABRT, SIGBUS, ...: the process itself failed
        how = "(the process crashed)"
    return (
        f"error: {run_name} was ended by {name} {how}; every checkpoint it saved is kept: "
        f"the same command plus --resume continues the {what}, that run from its last checkpoint"
    )
