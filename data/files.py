"""Files written whole or not at all, and their fingerprints: the two file utilities every package
uses.
"""

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

# how many times replace_folder moves a refused folder aside (each time, another process put one
# there)
REPLACE_TRIES = 5


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_of_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sealed_json(record: dict) -> bytes:
    """The JSON of a record with its own SHA-256 added as "checksum", so that an edit by hand shows
    (`unsealed_json`).
    """
    body = {k: v for k, v in record.items() if k != "checksum"}
    return json.dumps(
        {**body, "checksum": sha256_of_bytes(json.dumps(body, sort_keys=True).encode())}, indent=1
    ).encode()


def unsealed_json(data: bytes) -> dict | None:
    """The record that sealed_json wrote, or None when its checksum is missing or does not match (an
    edited record).
    """
    record = json.loads(data)
    body = (
        {k: v for k, v in record.items() if k != "checksum"} if isinstance(record, dict) else None
    )
    if body is None or record.get("checksum") != sha256_of_bytes(
        json.dumps(body, sort_keys=True).encode()
    ):
        return None
    return record


def temporary_twin(path: Path) -> Path:
    """Where this process writes `path` before renaming it into place: <name>.tmp<pid>
    (remove_abandoned reads the pid).
    """
    return path.with_name(f"{path.name}.tmp{os.getpid()}")


@contextmanager
def atomic_file(path: Path, one_writer: bool = False) -> Iterator[BinaryIO]:
    """An open binary file whose contents replace `path` when the block ends, all at once: readers
    never see half a file.

    It is written beside `path` under a temporary name, flushed to disk, then renamed over `path`.
    If the block raises, the temporary file is removed and `path` is left as it was. The name is
    <name>.tmp<pid>, so that concurrent writers never share one; a caller that is the only writer
    (a run holding its folder's lock) passes one_writer=True for a fixed <name>.tmp, which a
    process killed mid-write leaves behind once and the next save overwrites.
    """
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
    """Replace `path` with `data` all at once (see atomic_file)."""
    with atomic_file(path) as f:
        f.write(data)


def replace_folder(
    tmp: Path, folder: Path, whole: Callable[[Path], bool] = lambda folder: False
) -> bool:
    """Make a folder written whole under a temporary name appear as `folder`, all at once; False
    when another's stays.

    Its files are flushed to disk first, so that a crash never leaves a folder that looks whole with
    half its bytes. Two processes may write the same folder at once (two runs started together on a
    new corpus): a folder already in place that `whole` accepts is the other's, finished first, and
    stays, since that process may be reading it; tmp is removed instead. One that `whole` refuses
    (damaged, or from an older version) is renamed aside, and removed only once tmp has taken its
    place, so that a reader never finds the path missing while a folder's files are deleted.
    """
    for path in tmp.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    aside = folder.with_name(f"{folder.name}.old{os.getpid()}")  # remove_abandoned reads the pid
    try:
        for _ in range(REPLACE_TRIES):
            try:
                os.replace(tmp, folder)
                return True
            except OSError as e:  # a folder is there: ENOTEMPTY or EEXIST (EACCES on Windows)
                if (
                    e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES)
                    or not folder.exists()
                ):
                    raise
            if whole(folder):
                shutil.rmtree(tmp)
                return False
            shutil.rmtree(aside, ignore_errors=True)
            with suppress(FileNotFoundError):  # another writer moved it first
                os.replace(folder, aside)
        # folders that `whole` refuses kept coming back: say why it cannot be replaced
        os.replace(tmp, folder)
        return True
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def running(pid: int) -> bool:
    """Whether a process with this id exists (on Windows, where signal 0 would end it, always taken
    as yes).
    """
    if os.name == "nt":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_abandoned(path: Path) -> None:
    """Delete the <path>.tmp<pid> twins (files or folders), and the <path>.old<pid> folders put
    aside by replace_folder, of processes that no longer run: a writer killed outright (SIGKILL, a
    power cut) could not clean up, and a half-written corpus may take gigabytes. A live writer's
    twin stays."""
    for twin in path.parent.glob(f"{glob.escape(path.name)}.*"):
        pid = re.fullmatch(r"(?:tmp|old)(\d+)", twin.name[len(path.name) + 1 :])
        if pid is None or int(pid[1]) == os.getpid() or running(int(pid[1])):
            continue
        if twin.is_dir():
            shutil.rmtree(twin, ignore_errors=True)
        else:
            twin.unlink(missing_ok=True)
