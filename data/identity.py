"""The files a --data-file path names (a folder's .txt, .jsonl and .parquet files, sorted, links
followed, hidden names skipped), and the identity of their text, never of their path."""

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from data.files import checksum, sha256_of

KINDS = {".txt": "text", ".jsonl": "jsonl", ".parquet": "parquet"}
NOT_REGULAR = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class DataError(Exception):
    """A problem with the corpus that the user can fix."""


def kind_of(path: Path) -> str:
    return KINDS.get(path.suffix.lower(), "text")  # a file of any other name is text


@dataclass(frozen=True)
class Source:
    path: Path  # as the user typed it
    flag: str
    files: tuple[Path, ...]

    @property
    def is_folder(self) -> bool:
        return self.files != (self.path,)

    @property
    def is_one_text(self) -> bool:
        return not self.is_folder and kind_of(self.path) == "text"

    def where(self, file: Path) -> str:
        if file == self.path:
            return f"{self.flag} {file}"
        return f"{file} (in {self.flag} {self.path})"

    def stat_of(self, file: Path) -> os.stat_result:
        try:
            return file.stat()
        except OSError as e:  # a broken link, a file deleted meanwhile
            raise DataError(f"cannot read {self.where(file)}: {e.strerror}") from None

    def stamp(self, file: Path) -> tuple[int, int, int]:  # size, mtime, inode
        found = self.stat_of(file)
        return found.st_size, found.st_mtime_ns, found.st_ino

    @cached_property
    def stats(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(self.stamp(file) for file in self.files)

    def relative(self, file: Path) -> str:
        return file.relative_to(self.path).as_posix()

    @cached_property
    def identity(self) -> dict:
        stats = self.stats  # first: a file changed while hashed then differs
        if not self.is_folder:
            return {"kind": kind_of(self.path), "sha256": sha256_of(self.path)}
        files = zip(self.files, stats, strict=True)
        return {"files": [[self.relative(f), size, sha256_of(f)] for f, (size, _, _) in files]}

    @cached_property
    def description(self) -> dict:
        path = str(self.path.resolve())
        if not self.is_folder:
            return {"path": path, "size": self.stats[0][0], "sha256": self.identity["sha256"]}
        files = zip(self.files, self.stats, strict=True)
        stats = [(self.relative(f), size, mtime) for f, (size, mtime, _) in files]
        return {
            "path": path,
            "files": len(stats),
            "size": sum(s[1] for s in stats),
            "sha256": checksum(self.identity),
            "size_mtime_sha256": checksum(stats),
        }


def check_unchanged(sources: Iterable[Source]) -> None:
    for source in sources:
        for file, before in zip(source.files, source.stats, strict=True):
            if source.stamp(file) != before:
                raise DataError(
                    f"{source.where(file)} changed while it was being prepared; nothing was kept: "
                    "prepare again once nothing writes to it"
                )


def one_file(path: Path, flag: str, kinds: str = "") -> Source:
    if not path.is_file():
        problem = "is not a regular file" if path.exists() else "does not exist"
        raise DataError(f"{flag} {path} {problem}; give the path of a UTF-8 text file{kinds}")
    return Source(path, flag, (path,))


def find_source(path: Path, flag: str) -> Source:
    if not path.is_dir():
        return one_file(path, flag, ", a .jsonl or .parquet file, or a folder")
    source, kept, seen = Source(path, flag, folder_files(path, flag)), [], set()
    if not source.files:
        raise DataError(
            f"{flag} {path} holds no .txt, .jsonl or .parquet file (hidden ones skipped)"
        )
    for file in source.files:
        found = source.stat_of(file)
        if not stat.S_ISREG(found.st_mode):
            kind = NOT_REGULAR.get(stat.S_IFMT(found.st_mode), "not a regular file")
            raise DataError(f"{source.where(file)} is {kind}: move it out of the folder")
        if (found.st_dev, found.st_ino) not in seen:  # a second link to a file adds no document
            seen.add((found.st_dev, found.st_ino))
            kept.append(file)
    return Source(path, flag, tuple(kept))


def folder_files(folder: Path, flag: str) -> tuple[Path, ...]:
    found, seen, todo = [], set(), [folder]
    while todo:
        directory = todo.pop()
        try:
            real = directory.stat()
            if (real.st_dev, real.st_ino) in seen:  # reached before, through a link or a loop
                continue
            seen.add((real.st_dev, real.st_ino))
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except OSError as e:
            raise DataError(f"cannot read {directory} (in {flag} {folder}): {e.strerror}") from None
        for entry in entries:
            path = directory / entry.name
            if entry.name.startswith("."):
                continue
            if entry.is_dir():  # follows links
                todo.append(path)
            elif path.suffix.lower() in KINDS:
                found.append(path)
    return tuple(sorted(found, key=lambda f: f.as_posix()))
