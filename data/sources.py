"""Readers of a text file (one document), a .jsonl or .parquet file (a document a line or row):
`(text, starts, nbytes)` pieces, `starts` on a document's first."""

import codecs
import json
import mmap
import os
import re
from collections.abc import Iterator
from itertools import chain
from pathlib import Path

from data.identity import (
    DataError,
    Source,
    find_source,  # noqa: F401 (re-exported for its callers)
    kind_of,
    one_file,
)

CHUNK_CHARS = 1 << 18
PARQUET_BATCH_ROWS = 1024
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # half a UTF-16 character, maybe alone
Pieces = Iterator[tuple[str, bool, int]]


def read_source(source: Source, text_field: str) -> Pieces:
    for file in source.files:
        kind = kind_of(file)
        if kind == "text":
            yield from read_text_file(file, source)
        elif kind == "jsonl":
            yield from read_jsonl(file, source, text_field)
        else:
            yield from read_parquet(file, source, text_field)


def open_or_fail(file: Path, source: Source, mode: str = "rb", **kwargs):
    try:
        return open(file, mode, **kwargs)
    except OSError as e:
        raise DataError(f"cannot read {source.where(file)}: {e.strerror}") from None


def read_text_file(file: Path, source: Source) -> Pieces:
    where = source.where(file)
    with open_or_fail(file, source, "r", encoding="utf-8-sig") as f:  # no byte-order mark
        starts, position = True, 0
        while True:
            try:
                text = f.read(CHUNK_CHARS)
            except UnicodeDecodeError:
                offset = bad_utf8_offset(file)
                raise DataError(
                    f"{where} is not UTF-8 text (bad byte at offset {offset}); convert it to UTF-8"
                ) from None
            except OSError as e:
                raise DataError(f"cannot read {where}: {e.strerror}") from None
            if not text:
                return
            if "\0" in text:  # valid UTF-8, but not text: an image, an archive
                offset = nul_offset(file)
                raise DataError(
                    f"{where} is binary (it holds NUL bytes), the first at offset {offset}"
                )
            now = f.buffer.tell()
            yield text, starts, now - position
            starts, position = False, now


def bad_utf8_offset(file: Path) -> int:
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    with open(file, "rb") as f:
        for block in chain(iter(lambda: f.read(1 << 20), b""), [b""]):
            held = len(decoder.getstate()[0])
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                return offset - held + e.start
            offset += len(block)
    return offset


def nul_offset(file: Path) -> int:
    with open(file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return mapped.find(b"\0")


def read_jsonl(file: Path, source: Source, field: str) -> Pieces:
    with open_or_fail(file, source) as f:
        offset = 0
        for number, line in enumerate(f, 1):
            where = f"{source.where(file)} line {number}"
            offset += len(line)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except UnicodeDecodeError as e:
                offset += e.start - len(line)
                raise DataError(f"{where} is not UTF-8 (bad byte at offset {offset})") from None
            except ValueError as e:
                reason = e.args[0].split(":")[0]
                raise DataError(
                    f"{where} is not valid JSON ({reason}); write one object a line"
                ) from None
            except RecursionError:
                raise DataError(
                    f"{where} nests arrays or objects too deeply to read; write one object a line"
                ) from None
            if not isinstance(record, dict) or field not in record:
                raise DataError(f"{where} has no field {field!r}; name it with --data.text_field")
            text = record[field]
            if not isinstance(text, str):
                raise DataError(f"{where}: field {field!r} holds {type(text).__name__}, not text")
            if SURROGATE_ESCAPE.search(line) and not text.isascii():  # cheap, seldom true
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise DataError(
                        f"{where}: field {field!r} holds a lone UTF-16 surrogate "
                        f"({text[e.start]!r} at character {e.start}); remove it"
                    ) from None
            if text:
                yield text, True, len(line)


def read_parquet(file: Path, source: Source, field: str) -> Pieces:
    where = source.where(file)
    try:
        import pyarrow as pa  # here: only parquet sources need it
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"reading {where} needs pyarrow: pip install pyarrow") from None
    try:
        parquet = pq.ParquetFile(open_or_fail(file, source))
    except Exception as e:  # pyarrow's ArrowInvalid, OSError
        raise DataError(f"{where} is not a parquet file ({str(e).splitlines()[0][:120]})") from None
    columns = parquet.schema_arrow.names
    if field not in columns:
        raise DataError(
            f"{where} has no column {field!r} (it has {', '.join(columns[:8])}); "
            "name it with --data.text_field"
        )
    kind = parquet.schema_arrow.field(field).type
    # a dictionary-encoded column: pandas' category
    values = kind.value_type if pa.types.is_dictionary(kind) else kind
    if str(values) not in ("string", "large_string", "string_view"):
        raise DataError(f"{where}: column {field!r} holds {kind}, not text")
    size, rows, row = os.path.getsize(file), max(1, parquet.metadata.num_rows), 0
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[field]):
        for text in batch.column(0).to_pylist():
            row += 1
            if text is None:
                raise DataError(f"{where} row {row} has no text (null in column {field!r})")
            if text:
                yield text, True, size // rows


def read_text(path: Path, flag: str = "--data-file") -> str:
    source = one_file(path, flag)
    text = "".join(piece for piece, _, _ in read_text_file(path, source))
    if not text.strip():
        raise DataError(f"{flag} {path} is empty (nothing but whitespace)")
    return text
