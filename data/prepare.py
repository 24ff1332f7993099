"""Encode a corpus into train.bin and val.bin in constant memory: a first pass checks and counts,
a second encodes in threads into a temporary folder renamed into place when whole."""

import os
import shutil
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data.chunks import make_tasks
from data.files import (
    remove_abandoned,
    replace_folder,
    sealed_json,
    temporary_twin,
    write_atomically,
)
from data.identity import check_unchanged
from data.sources import CHUNK_CHARS, DataError, Source, read_source
from data.tokenizer import CharTokenizer, GPT2Tokenizer, Tokenizer, TokenizerError

TRAIN_FRACTION = 0.9
FORMAT_VERSION = 3  # 3 seals meta.json with its checksum
PROGRESS_DELAY_S = 1.0  # seconds before a progress bar shows
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)  # no SIGHUP on Windows


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(
            f"{signal.Signals(signum).name} while preparing the data: stopped, nothing kept"
        )


@dataclass
class Scan:
    documents: int = 0
    chars: int = 0
    charset: set = field(default_factory=set)
    blank: bool = True


def workers_to_use(workers: int) -> int:
    if workers:
        return workers
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def progress(desc: str, total: int, unit: str) -> tqdm:
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        delay=PROGRESS_DELAY_S,
        dynamic_ncols=True,
    )


def scan(source: Source, text_field: str, count_chars: bool, check: Callable) -> Scan:
    found = Scan()
    sizes = sum(size for size, _, _ in source.stats)  # taken before reading: check_unchanged
    with progress(f"reading {source.path.name}", sizes, "B") as bar:
        for text, starts, nbytes in read_source(source, text_field):
            check()
            found.documents += starts
            found.chars += len(text)
            found.blank = found.blank and text.isspace()
            if count_chars and text.isascii():  # faster than a set
                counts = np.bincount(np.frombuffer(text.encode(), np.uint8))
                found.charset.update(map(chr, np.flatnonzero(counts)))
            elif count_chars:
                found.charset.update(text)
            bar.update(nbytes)
    if found.blank:  # no document, or nothing but whitespace
        raise DataError(
            f"{source.flag} {source.path} is empty (nothing but whitespace); give a file with "
            "some text"
        )
    return found


def train_cut(source: Source, found: Scan, split: str | None) -> int:
    total = found.chars if source.is_one_text else found.documents
    if split is not None:  # all of one split
        return total + 1 if split == "train" else 0
    if source.is_one_text:
        return int(total * TRAIN_FRACTION)
    return min(int(total * TRAIN_FRACTION), total - 1)  # one for val at least


def split_stream(plan: list[tuple[Source, Scan, str | None]], text_field: str):
    for source, found, split in plan:
        cut, seen = train_cut(source, found, split), 0
        for text, starts, _ in read_source(source, text_field):
            if source.is_one_text:  # its two halves are encoded as two texts
                if seen < cut <= seen + len(text):
                    yield split or "train", text[: cut - seen], starts, False
                    seen, text, starts = cut, text[cut - seen :], True
                yield split or ("train" if seen < cut else "val"), text, starts, False
                seen += len(text)
            else:
                seen += starts
                yield split or ("train" if seen <= cut else "val"), text, starts, starts


def encode_task(
    tokenizer: Tokenizer, pieces: list[tuple[str, bool]], end_of_text: np.ndarray, dtype: np.dtype
) -> np.ndarray:
    parts = [end_of_text[:0]]
    for text, separated in pieces:
        if separated:
            parts.append(end_of_text)
        if text:
            parts.append(tokenizer.encode_array(text))
    return np.concatenate(parts).astype(dtype, copy=False)


@contextmanager
def stopped_by_signals():
    """Stop signals are recorded, and the `check` it yields raises Interrupted between tasks: raised
    by the handler itself, it could leave a lock of the thread pool held, and the pool would never
    shut down (the signal module's note on handlers and exceptions)."""
    received = []

    def check():
        if received:
            raise Interrupted(received[0])

    if threading.current_thread() is not threading.main_thread():
        yield check
        return
    previous = {
        sig: signal.signal(sig, lambda signum, frame: received.append(signum))
        for sig in STOP_SIGNALS
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield check
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:  # after the last check: the data is whole, and the stop goes to the caller
        signal.raise_signal(received[0])


def prepare(
    source: Source,
    tokenizer_name: str,
    key: str,
    folder: Path,
    text_field: str = "text",
    workers: int = 0,
    val_source: Source | None = None,
    chunk_chars: int = CHUNK_CHARS,
    whole: Callable[[Path], bool] = lambda folder: False,  # a folder found in place is finished
) -> dict:
    """meta.json's record. Val is the corpus's end (10 %, at least one document), not a random
    sample: neighbouring text would leak."""
    started, char = time.perf_counter(), tokenizer_name == "char"
    with stopped_by_signals() as check:
        plan = [(source, scan(source, text_field, char, check), "train" if val_source else None)]
        if val_source is not None:
            plan.append((val_source, scan(val_source, text_field, char, check), "val"))
        elif not source.is_one_text and plan[0][1].documents < 2:
            raise DataError(
                f"{source.flag} {source.path} holds 1 document; the split needs 2 (the last one "
                "for val), or set --data.val_path"
            )
        sources = [s for s, _, _ in plan]
        separated = any(not s.is_one_text for s in sources)
        if char:
            charsets = (found.charset for _, found, _ in plan)
            separators = CharTokenizer.END_OF_TEXT if separated else ""
            tokenizer = CharTokenizer(sorted(set().union(*charsets, separators)))
        else:
            tokenizer = GPT2Tokenizer()
        tmp = temporary_twin(folder)
        remove_abandoned(folder)
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            try:
                meta = encode_into(
                    tmp, plan, tokenizer, text_field, workers_to_use(workers), chunk_chars, check
                )
            except (DataError, TokenizerError):  # a file changed since the first pass?
                check_unchanged(sources)
                raise
            check_unchanged(sources)
            meta.update(
                source_sha256=key,
                text_field=text_field,
                seconds=round(time.perf_counter() - started, 3),
                sources=[s.description for s in sources],
                documents=sum(found.documents for _, found, _ in plan),
                val_documents=sum(
                    max(0, found.documents - train_cut(s, found, split))
                    for s, found, split in plan
                    if not s.is_one_text
                ),
            )
            write_atomically(tmp / "meta.json", sealed_json(meta))
            replace_folder(tmp, folder, whole)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return meta


def encode_into(
    folder: Path,
    plan: list,
    tokenizer: Tokenizer,
    text_field: str,
    workers: int,
    chunk_chars: int,
    check: Callable,
) -> dict:
    dtype = np.dtype("uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32")
    separated = any(not s.is_one_text for s, _, _ in plan)
    end_of_text = np.array(tokenizer.end_of_text if separated else [], dtype=np.uint32)
    tokens, in_flight = {"train": 0, "val": 0}, deque()
    started = time.perf_counter()

    def write_oldest(bar: tqdm) -> None:
        check()
        split, chars, future = in_flight.popleft()
        ids = future.result()
        files[split].write(ids.data)
        tokens[split] += len(ids)
        bar.update(chars)
        speed = sum(tokens.values()) / (time.perf_counter() - started)
        bar.set_postfix_str(f"{speed / 1e6:.2f}M tokens/s", refresh=False)

    total_chars = sum(found.chars for _, found, _ in plan)
    files = {split: open(folder / f"{split}.bin", "wb") for split in tokens}
    with (
        progress(f"encoding {plan[0][0].path.name}", total_chars, "char") as bar,
        ThreadPoolExecutor(workers) as pool,
    ):
        try:
            stream = split_stream(plan, text_field)
            # a character's id never depends on its neighbours: cut anywhere
            for split, pieces, chars in make_tasks(stream, chunk_chars, tokenizer.name == "char"):
                task = pool.submit(encode_task, tokenizer, pieces, end_of_text, dtype)
                in_flight.append((split, chars, task))
                while len(in_flight) > 2 * workers:  # memory stays flat
                    write_oldest(bar)
            while in_flight:
                write_oldest(bar)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            for f in files.values():
                f.close()
    meta = {"format": FORMAT_VERSION, "dtype": dtype.name, "tokens": tokens, **tokenizer.state()}
    meta["tokenizer"] = meta.pop("name")
    meta["vocab_size"] = tokenizer.vocab_size
    return meta
