"""Folders the scripts write into: checked before any work, and a run's folder guarded while a
process uses it.

Every output flag (--runs-dir, --out) goes through `writable_folder`, so a folder that cannot be
written is one line naming the flag, before a run spends minutes on work it cannot save.

A run folder belongs to the process that trains in it. That process holds a lock on
`<folder>/.lock` for as long as it lives; the operating system drops the lock when the process
ends, however it ends (Ctrl-C, SIGKILL, a crash), so a lock file left behind never blocks
anyone. A second process that wants the folder, to start afresh there or to resume it, is
refused while the first one lives: moving a live run's folder aside would send its later
checkpoints into the newcomer's folder.

Starting afresh moves an earlier run aside (to <name>.old-<time>), never mixes into it or
deletes it. Only a folder that is recognisably a run (or a comparison of runs) is moved: any
other folder, say a package of this project given as --runs-dir . --run-name model, is refused.
"""

import json
import os
import tempfile
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no POSIX locks, so run folders go unguarded there
    fcntl = None

LOCK_NAME = ".lock"
# any of them marks a folder as a run's
RUN_FILES = ("metrics.jsonl", "ckpt.pt", "best.pt", "compare.json", "sweep.json", LOCK_NAME)


class OutputError(Exception):
    """An output folder that cannot be used: not writable, not a folder, or in use; the message says
    what to do.
    """


def writable_folder(path: Path, flag: str, create: bool = True) -> Path:
    """Make sure files can be written into `path`; `flag` names it in errors.

    With create, `path` and its parents are created if missing. Without it (a check before the work,
    which may still fail) nothing is created: the nearest existing folder on the way is tested.
    """
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise OutputError(f"{flag} {path} is a file, not a folder; give a folder to write into")
        if create:
            path.mkdir(parents=True, exist_ok=True)
        nearest = next(folder for folder in (path, *path.parents) if folder.exists())
        if not nearest.is_dir():
            raise OutputError(
                f"{flag} {path} lies inside {nearest}, which is a file, not a folder; give a folder to write into"
            )
        # the only sure test: permissions, read-only mounts, /proc, quotas
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as e:
        raise OutputError(
            f"cannot write into {flag} {path}: {e.strerror or type(e).__name__}; choose a folder you can write to"
        ) from None
    return path


class FolderLock:
    """An exclusive lock on <folder>/.lock, held until `release` or until this process ends.

    The lock is a POSIX record lock (lockf): it belongs to the process, so the kernel drops it when
    the process dies, and the file holds the owner's process id only for the message. `choose` is
    the flag that picks another folder, for that message: --run-name for a run, --runs-dir for
    compare.py's and sweep.py's.
    """

    def __init__(self, folder: Path, choose: str = "--run-name"):
        self.folder = Path(folder)
        self.file = None
        if fcntl is None:
            return
        path = self.folder / LOCK_NAME
        try:
            self.file = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held open for the run's life)
        except OSError as e:
            raise OutputError(
                f"cannot write into {self.folder}: {e.strerror}; choose a folder you can write to"
            ) from None
        try:
            fcntl.lockf(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.seek(0)
            owner = self.file.read().strip() or "unknown"
            self.file.close()
            raise OutputError(
                f"{self.folder} is in use by a live run (process {owner}); wait for it to end or stop it, or choose another {choose}"
            ) from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(str(os.getpid()))
        self.file.flush()

    def release(self) -> None:
        if self.file is not None:
            self.file.close()  # closing drops the lock
            self.file = None


def parse_json(text: bytes | str):
    """One JSON document of a run (a file's text, a metrics.jsonl line) as Python data, or None when
    it is damaged in any
    way: torn by a killed process, bytes that are not UTF-8 (what a crash can leave at a file's
    end), nested too deep to read. Every reader of a run's files goes through here, so each treats
    any damage alike."""
    try:
        return json.loads(text)
    # UnicodeDecodeError is a ValueError; RecursionError: [[[[... past the interpreter's limit
    except (ValueError, RecursionError):
        return None


def read_json(path: Path):
    """A run's JSON file (config.json, compare.json) as Python data, or None when it is missing,
    unreadable or damaged.
    """
    try:
        return parse_json(Path(path).read_bytes())
    except OSError:
        return None


def is_run_folder(folder: Path) -> bool:
    """Whether `folder` holds a run of ours (metrics, checkpoints, TensorBoard events, its
    config.json) or a comparison of runs.
    """
    if any((folder / name).exists() for name in RUN_FILES) or any(
        folder.glob("events.out.tfevents.*")
    ):
        return True
    config = read_json(folder / "config.json")
    if isinstance(config, dict) and {"model", "data", "train"} <= config.keys():
        return True
    return any(
        child.is_dir() and any((child / name).exists() for name in RUN_FILES)
        for child in folder.iterdir()
    )


def move_aside(folder: Path) -> Path:
    """Rename `folder` to <name>.old-<its time>[-n], the first such name that is free; return the
    new path.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(folder.stat().st_mtime))
    target, n = folder.with_name(f"{folder.name}.old-{stamp}"), 1
    while target.exists():
        target, n = folder.with_name(f"{folder.name}.old-{stamp}-{n}"), n + 1
    try:
        folder.rename(target)
    except OSError as e:
        raise OutputError(
            f"cannot move the earlier run {folder} aside to {target.name}: {e.strerror}"
        ) from None
    return target


def claim_run_folder(
    folder: Path, resume: bool, flag: str = "--runs-dir", choose: str = "--run-name"
) -> tuple[FolderLock, Path | None]:
    """Take `folder` for this process: (its lock, where an earlier run there went, or None).

    Resuming keeps what is there. Starting afresh moves an earlier run aside and begins in an empty
    folder. Either way a folder that a live process holds is refused, and so is one that is not a
    run's. `flag` names the parent folder in errors (compare.py and train.py both use --runs-dir),
    `choose` the flag that names another folder (train.py's --run-name; compare.py and sweep.py name
    theirs for the preset, so --runs-dir).
    """
    other = " or ".join(dict.fromkeys((choose, flag)))  # --run-name or --runs-dir; --runs-dir alone
    folder = Path(folder)
    writable_folder(folder.parent, flag)
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder} is a file, not a run folder; choose another {choose}")
    moved = None
    if folder.is_dir() and not resume and any(folder.iterdir()):
        if not is_run_folder(folder):
            raise OutputError(
                f"{folder} exists and is not a run folder (no metrics, checkpoint or run config in it), "
                f"so it is left alone; choose another {other}"
            )
        held = FolderLock(folder, choose)  # refuses a folder that a live run holds
        moved = move_aside(folder)
        held.release()
    writable_folder(folder, "the run folder")
    return FolderLock(folder, choose), moved


def moved_aside(folder: Path) -> list[Path]:
    """The earlier runs of `folder` that `claim_run_folder` moved aside, newest first."""
    return sorted(
        folder.parent.glob(f"{folder.name}.old-*"), key=lambda p: p.stat().st_mtime, reverse=True
    )


EXPORT_FILES = {"config.json", "model.safetensors"}  # what export_gpt2.py writes


def export_folder(folder: Path, overwrite: bool) -> Path:
    """A folder an export may write into: new, empty, or (with overwrite) an earlier export; never a
    run's folder.

    A run's config.json is its record of how it was trained, so no flag lets an export replace it.
    Nothing is created: this is the check before the model loads.
    """
    folder = writable_folder(folder, "--out", create=False)
    present = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if present and is_run_folder(folder):
        raise OutputError(
            f"{folder} holds a training run, whose config.json records how it was trained; export to another folder"
        )
    if present and not (overwrite and present <= EXPORT_FILES):
        why = (
            "pass --overwrite to replace the earlier export there"
            if present <= EXPORT_FILES
            else "export to a new or empty folder"
        )
        raise OutputError(
            f"{folder} is not empty ({', '.join(sorted(present)[:3])}{', ...' if len(present) > 3 else ''}); {why}"
        )
    return folder
