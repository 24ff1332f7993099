"""Files written whole or not at all, and their SHA-256 fingerprints."""

import errno
import glob
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

REPLACE_TRIES = 5


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_of_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checksum(body: dict) -> str:
    return sha256_of_bytes(json.dumps(body, sort_keys=True).encode())


def sealed_json(record: dict) -> bytes:
    """The JSON with its SHA-256 as "checksum": an edit by hand shows."""
    return json.dumps({**record, "checksum": checksum(record)}, indent=1).encode()


def unsealed_json(data: bytes) -> dict | None:
    record = json.loads(data)
    if isinstance(record, dict) and record.pop("checksum", None) == checksum(record):
        return record
    return None


def temporary_twin(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


@contextmanager
def atomic_file(path: Path, one_writer: bool = False) -> Iterator[BinaryIO]:
    """A binary file that replaces `path` whole when the block ends. The only writer (a run holding
    its folder's lock) may use a fixed <name>.tmp; others add their pid."""
    tmp = path.with_name(f"{path.name}.tmp") if one_writer else temporary_twin(path)
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomically(path: Path, data: bytes) -> None:
    with atomic_file(path) as f:
        f.write(data)


def replace_folder(tmp: Path, folder: Path, whole: Callable[[Path], bool]) -> bool:
    """Rename `tmp` to `folder`; False when one in place that `whole` accepts stays (another
    process may read it). One it refuses is moved aside first: the path is never missing."""
    for path in tmp.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    aside = folder.with_name(f"{folder.name}.old{os.getpid()}")  # remove_abandoned reads the pid
    try:
        for _ in range(REPLACE_TRIES):
            try:
                os.replace(tmp, folder)
                return True
            except OSError as e:  # a folder is there (EACCES on Windows)
                busy = (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES)
                if e.errno not in busy or not folder.exists():
                    raise
            if whole(folder):
                shutil.rmtree(tmp)
                return False
            shutil.rmtree(aside, ignore_errors=True)
            with suppress(FileNotFoundError):  # another writer moved it first
                os.replace(folder, aside)
        os.replace(tmp, folder)  # raise the reason
        return True
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def running(pid: int) -> bool:
    if os.name == "nt":  # yes: signal 0 would end it
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


def remove_abandoned(path: Path) -> None:
    """Delete the <path>.tmp<pid> and .old<pid> of processes killed outright."""
    for twin in path.parent.glob(f"{glob.escape(path.name)}.*"):
        pid = re.fullmatch(r"(?:tmp|old)(\d+)", twin.name[len(path.name) + 1 :])
        if pid is None or int(pid[1]) == os.getpid() or running(int(pid[1])):
            continue
        if twin.is_dir():
            shutil.rmtree(twin, ignore_errors=True)
        else:
            twin.unlink(missing_ok=True)
