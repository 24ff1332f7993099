"""What a --data-file path names: the files of a corpus, and the identity of their text.

A path names one file, or a folder: every .txt, .jsonl and .parquet file under it, sorted by their
paths relative to it. A folder is walked as a careful user would read it:
- links to folders are followed, as links to files are; a folder or file reached twice (through a
  second link, or a loop back to a folder above) is read once, under its first path in sorted order,
  so no document is taken twice;
- names that begin with "." (.git, .ipynb_checkpoints, .DS_Store) are skipped at any depth: tools
  keep their copies and metadata there, and a notebook's checkpoint copy of a document would land in
  train and val at once;
- anything that is not a regular file (a FIFO, a device, a socket) is refused: the corpus is read
  twice, and a pipe would block the first pass or give other text to the second.

A corpus is identified by its text, not by where it lies: one file by its SHA-256; a folder by a
SHA-256 over each file's path relative to the folder, size and SHA-256. The same folder typed as a
relative path, through "..", through a link, copied elsewhere or touched keeps its identity; a
changed byte changes it. Each file's size, modification time and inode are taken before its text is
hashed, and compared after preparation: a file that changed meanwhile stops the preparation
(`check_unchanged`).
"""

import json
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from data.files import sha256_of, sha256_of_bytes

KINDS = {".txt": "text", ".jsonl": "jsonl", ".parquet": "parquet"}
NOT_REGULAR = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class DataError(Exception):
    """A problem with the corpus that the user can fix; the message says how."""


def kind_of(path: Path) -> str:
    # a single file of any other name is read as text, as before
    return KINDS.get(path.suffix.lower(), "text")


@dataclass(frozen=True)
class Source:
    """What --data-file (or --data.val_path) names: one file, or a folder and the usable files in
    it, in sorted order.
    """

    path: Path  # as the user typed it, for messages
    flag: str  # the flag that named it, for error messages
    files: tuple[Path, ...]

    @cached_property
    def is_one_text(self) -> bool:
        """One text file: one document, no separator, split by characters (as it always was)."""
        return not self.is_folder and kind_of(self.path) == "text"

    @property
    def is_folder(self) -> bool:
        return self.files != (self.path,)

    def where(self, file: Path) -> str:
        return (
            f"{self.flag} {file}" if file == self.path else f"{file} (in {self.flag} {self.path})"
        )

    @cached_property
    def stats(self) -> tuple[tuple[int, int, int], ...]:
        """Each file's (size, modification time, inode), taken before its text is hashed or read."""
        return tuple(self.stamp(file) for file in self.files)

    def stat_of(self, file: Path) -> os.stat_result:
        try:
            return file.stat()
        except OSError as e:  # a broken link, a file deleted meanwhile
            raise DataError(f"cannot read {self.where(file)}: {e.strerror}") from None

    def stamp(self, file: Path) -> tuple[int, int, int]:
        found = self.stat_of(file)
        return found.st_size, found.st_mtime_ns, found.st_ino

    @cached_property
    def identity(self) -> dict:
        """What names the text (see the module's docstring): its kind and SHA-256, or every file's
        relative path, size and SHA-256.
        """
        # first: a file that changes while it is hashed differs from them afterwards
        stats = self.stats
        if not self.is_folder:
            return {"kind": kind_of(self.path), "sha256": sha256_of(self.path)}
        return {
            "files": [
                [self.relative(f), size, sha256_of(f)]
                for f, (size, _, _) in zip(self.files, stats, strict=True)
            ]
        }

    def relative(self, file: Path) -> str:
        return file.relative_to(self.path).as_posix()

    @cached_property
    def description(self) -> dict:
        """What meta.json records of the source: its resolved path, a file's size and SHA-256, or a
        folder's file count, total size, the SHA-256 of its identity and a SHA-256 of every file's
        path, size and modification time."""
        if not self.is_folder:
            return {
                "path": str(self.path.resolve()),
                "size": self.stats[0][0],
                "sha256": self.identity["sha256"],
            }
        stats = [
            (self.relative(f), size, mtime)
            for f, (size, mtime, _) in zip(self.files, self.stats, strict=True)
        ]
        return {
            "path": str(self.path.resolve()),
            "files": len(stats),
            "size": sum(s[1] for s in stats),
            "sha256": sha256_of_bytes(json.dumps(self.identity).encode()),
            "size_mtime_sha256": sha256_of_bytes(json.dumps(stats).encode()),
        }


def check_unchanged(sources: Iterable[Source]) -> None:
    """Raise a DataError if a file's size, modification time or inode differs from its `stats`: it
    was written meanwhile.
    """
    for source in sources:
        for file, before in zip(source.files, source.stats, strict=True):
            if source.stamp(file) != before:
                raise DataError(
                    f"{source.where(file)} changed while it was being prepared (its size or modification time differs); "
                    "nothing was kept: prepare again once nothing writes to it"
                )


def find_source(path: Path, flag: str) -> Source:
    """The source a path names; a missing path, or a folder without a .txt, .jsonl or .parquet file,
    is a DataError.
    """
    if path.is_dir():
        files = folder_files(path, flag)
        if not files:
            raise DataError(
                f"{flag} {path} holds no .txt, .jsonl or .parquet file (searched every subfolder, skipping names that begin "
                "with '.'); point it at your data"
            )
        source, kept, seen = Source(path, flag, tuple(files)), [], set()
        for file in files:
            found = source.stat_of(file)
            if not stat.S_ISREG(found.st_mode):
                raise DataError(
                    f"{source.where(file)} is {NOT_REGULAR.get(stat.S_IFMT(found.st_mode), 'not a regular file')}, not a file of "
                    "text; a corpus is read twice, so it takes regular files only: move it out of the folder"
                )
            # a second link to a file already taken adds no document
            if (found.st_dev, found.st_ino) not in seen:
                seen.add((found.st_dev, found.st_ino))
                kept.append(file)
        return Source(path, flag, tuple(kept))
    if not path.exists():
        raise DataError(
            f"{flag} {path} does not exist; give the path of a UTF-8 text file, a .jsonl or .parquet file, or a folder"
        )
    if not path.is_file():
        raise DataError(f"{flag} {path} is not a regular file; give the path of a UTF-8 text file")
    return Source(path, flag, (path,))


def folder_files(folder: Path, flag: str) -> list[Path]:
    """The .txt, .jsonl and .parquet files under folder, walked as the module's docstring says,
    sorted by path.
    """
    found, seen, todo = [], set(), [folder]
    while todo:
        directory = todo.pop()
        try:
            real = directory.stat()
            if (real.st_dev, real.st_ino) in seen:  # reached before, through another link or a loop
                continue
            seen.add((real.st_dev, real.st_ino))
            # popped in sorted order
            entries = sorted(os.scandir(directory), key=lambda e: e.name, reverse=True)
        except OSError as e:
            raise DataError(f"cannot read {directory} (in {flag} {folder}): {e.strerror}") from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = directory / entry.name
            # follows a link to a folder; a broken link is no folder (it is refused below, by name)
            if entry.is_dir():
                todo.append(path)
            elif path.suffix.lower() in KINDS:
                found.append(path)
    return sorted(found, key=lambda f: f.as_posix())
