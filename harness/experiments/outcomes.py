"""What each run of an experiment (compare.py, sweep.py) came to, read from its folder: finished
(its log, or else its checkpoint), diverged (the record train.py's non-finite check leaves), or
ended from outside by a signal.

A run is what its settings are, not where its folder lies: a finished comparison moved, copied, or
named by a relative path from another directory is the same comparison, so the folders in a run's
config (train.runs_dir, data.cache_dir) are not compared, and its texts (data.path, data.val_path)
are compared as the files they name.
"""

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
    """The runs an earlier experiment recorded in its compare.json or sweep.json (rewritten after
    each run), by run name.
    """
    saved = read_json(saved)
    runs = saved.get("runs") if isinstance(saved, dict) else None
    return runs if isinstance(runs, dict) else {}


def settings(config: dict) -> dict:
    """A run's config as an experiment compares it: data's files as the files they name."""
    return {**config, "data": {**config["data"], **resolved_texts(config["data"])}}


def check_settings(cfg: Config, recorded, where: Path) -> None:
    """Refuse a finished run whose recorded settings (config.json's, or the checkpoint's at `where`)
    are not these: a comparison resumed with other flags. A record with a value of the wrong type is
    refused as a checkpoint's is (older records, positions true/false, read as they were); a missing
    or damaged one has no settings, so every one differs."""
    recorded = (
        settings(validate_config(recorded, where, recorded=True).to_dict())
        if isinstance(recorded, dict)
        else {}
    )
    differs = config_differences(
        recorded,
        settings({section: cfg.to_dict()[section] for section in SECTIONS}),
        ignore=WHERE_NOT_WHAT,
    )
    if differs:
        raise ConfigError(
            f"{cfg.run_dir} finished with other settings ({'; '.join(differs[:3])}); "
            "resume with the comparison's own flags, or start it afresh without --resume"
        )


def recorded_settings(run_dir: Path) -> tuple[dict | None, Path]:
    """What a run recorded of its settings, and where: its config.json, or if that is gone or
    damaged its checkpoint's.
    """
    recorded = read_json(run_dir / "config.json")
    if isinstance(recorded, dict):
        return recorded, run_dir / "config.json"
    try:
        return read_checkpoint(run_dir / "ckpt.pt", mmap=True)["config"], run_dir / "ckpt.pt"
    except CheckpointError:
        return None, run_dir / "config.json"


def finished_checkpoint(cfg: Config) -> dict | None:
    """The run's ckpt.pt when it says that the run finished (evaluated at max_steps), else None (a
    damaged file included:
    train.py, resuming it, says what is wrong with it)."""
    try:
        checkpoint = read_checkpoint(cfg.run_dir / "ckpt.pt")
    except CheckpointError:
        return None
    return (
        checkpoint
        if checkpoint["step"] == cfg.train.max_steps and checkpoint.get("evaluated", True)
        else None
    )


def finished_run(cfg: Config, saved_runs: dict) -> dict | None:
    """What a run of an earlier, stopped experiment gave, if it already finished with these
    settings: a checkpoint and an evaluation at max_steps in its metrics.jsonl, or else a checkpoint
    that says it finished (its log deleted or cut short); else None. Its numbers come from
    compare.json or sweep.json (with its wall time), or else its log, or else the checkpoint's val
    loss."""
    if not (cfg.run_dir / "ckpt.pt").is_file():
        return None
    last = (evaluations(cfg.run_dir) or [{}])[-1]
    recorded, where = recorded_settings(cfg.run_dir)
    if last.get("step") != cfg.train.max_steps:
        checkpoint = finished_checkpoint(cfg)
        if checkpoint is None:
            return None
        last, recorded, where = (
            {"step": checkpoint["step"], "loss/val": checkpoint.get("val_loss")},
            checkpoint["config"],
            cfg.run_dir / "ckpt.pt",
        )
    check_settings(cfg, recorded, where)
    saved = saved_runs.get(cfg.run_name, {})
    return (
        saved
        if saved.get("step") == last["step"] and saved.get("exit_code") == 0
        else {**last, "exit_code": 0}
    )


def earlier_outcome(cfg: Config, saved_runs: dict, diverged_too: bool) -> dict | None:
    """What an earlier attempt at this run left that --resume keeps: a finished run, or
    (diverged_too) one that diverged with these settings; else None, and the run resumes or
    starts."""
    done = finished_run(cfg, saved_runs)
    if done is None and diverged_too and (done := diverged_run(cfg.run_dir)) is not None:
        check_settings(cfg, *recorded_settings(cfg.run_dir))
    return done


def diverged_run(run_dir: Path) -> dict | None:
    """A run whose loss or gradient stopped being finite, as its folder records it: the step, and
    the last training loss it logged (finite: the check stops a run before it logs a non-finite one)
    with that loss's step; None if it did not."""
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
    return {
        "exit_code": 1,
        "diverged": {"step": record["step"], "last_loss": loss, "last_loss_step": last.get("step")},
    }


def killed_from_outside(code: int, run_name: str, what: str) -> str | None:
    """The line for a run whose process a signal ended before it could save or say anything (a
    negative exit code:
    SIGKILL, as the kernel's out-of-memory killer sends it), or None for a run that ended by
    itself."""
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
