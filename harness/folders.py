"""Folders the scripts write into: checked before any work, a run's folder locked while it trains,
an earlier run moved aside (never a folder that is not a run's)."""

import fcntl
import json
import os
import tempfile
import time
from pathlib import Path

LOCK_NAME = ".lock"
RUN_FILES = ("metrics.jsonl", "ckpt.pt", "best.pt", "compare.json", "sweep.json", LOCK_NAME)
EXPORT_FILES = {"config.json", "model.safetensors"}  # what export_gpt2.py writes


class OutputError(Exception):
    pass


def writable_folder(path: Path, flag: str, create: bool = True) -> Path:
    """`path`, once a file can be written there (without create: in its nearest existing folder)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise OutputError(f"{flag} {path} is a file, not a folder; give a folder to write into")
        if create:
            path.mkdir(parents=True, exist_ok=True)
        nearest = next(folder for folder in (path, *path.parents) if folder.exists())
        if not nearest.is_dir():
            raise OutputError(
                f"{flag} {path} lies inside {nearest}, which is a file; give a folder to write into"
            )
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as e:
        raise cannot_write(f"{flag} {path}", e) from None
    return path


def cannot_write(where: str, e: OSError) -> OutputError:
    why = e.strerror or type(e).__name__
    return OutputError(f"cannot write into {where}: {why}; choose a folder you can write to")


class FolderLock:
    """A lock on <folder>/.lock that the system drops when this process ends, however it ends."""

    def __init__(self, folder: Path, choose: str = "--run-name"):
        self.folder = Path(folder)
        try:
            self.file = open(self.folder / LOCK_NAME, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as e:
            raise cannot_write(str(self.folder), e) from None
        try:
            fcntl.lockf(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.seek(0)
            owner = self.file.read().strip() or "unknown"
            self.file.close()
            raise OutputError(
                f"{self.folder} is in use by a live run (process {owner}); "
                f"wait for it to end or stop it, or choose another {choose}"
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
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def read_json(path: Path):
    try:
        return parse_json(Path(path).read_bytes())
    except OSError:
        return None


def holds_run_files(folder: Path) -> bool:
    return any((folder / name).exists() for name in RUN_FILES)


def is_run_folder(folder: Path) -> bool:
    """A run of ours or a comparison of runs."""
    config = read_json(folder / "config.json")
    return (
        holds_run_files(folder)
        or any(folder.glob("events.out.tfevents.*"))
        or (isinstance(config, dict) and {"model", "data", "train"} <= config.keys())
        or any(child.is_dir() and holds_run_files(child) for child in folder.iterdir())
    )


def move_aside(folder: Path) -> Path:
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
    folder: Path, resume: bool, choose: str = "--run-name"
) -> tuple[FolderLock, Path | None]:
    """(the folder's lock, where an earlier run there was moved aside or None)."""
    other = " or ".join(dict.fromkeys((choose, "--runs-dir")))
    folder = Path(folder)
    writable_folder(folder.parent, "--runs-dir")
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{folder} is a file, not a run folder; choose another {choose}")
    moved = None
    if folder.is_dir() and not resume and any(folder.iterdir()):
        if not is_run_folder(folder):
            raise OutputError(
                f"{folder} exists and is not a run folder, so it is left alone; "
                f"choose another {other}"
            )
        held = FolderLock(folder, choose)  # refuses a live run's folder
        moved = move_aside(folder)
        held.release()
    writable_folder(folder, "the run folder")
    return FolderLock(folder, choose), moved


def moved_aside(folder: Path) -> list[Path]:
    """Newest first."""
    return sorted(
        folder.parent.glob(f"{folder.name}.old-*"), key=lambda p: p.stat().st_mtime, reverse=True
    )


def export_folder(folder: Path, overwrite: bool) -> Path:
    """A folder an export may write into: new, empty, or (with overwrite) an earlier export."""
    folder = writable_folder(folder, "--out", create=False)
    present = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if present and is_run_folder(folder):
        raise OutputError(f"{folder} holds a training run; export to another folder")
    if present and not (overwrite and present <= EXPORT_FILES):
        why = "export to a new or empty folder"
        if present <= EXPORT_FILES:
            why = "pass --overwrite to replace the earlier export there"
        more = ", ..." if len(present) > 3 else ""
        raise OutputError(f"{folder} is not empty ({', '.join(sorted(present)[:3])}{more}); {why}")
    return folder
