"""Cutting a stream of text into tasks for the encoders, only where the ids stay those of the whole text.

GPT-2's tokenizer first splits text into pre-tokens with a regular expression, then merges bytes
inside each pre-token. Two pieces encoded apart give the ids of the whole only if the cut falls
between two pre-tokens that do not depend on each other. Two places are safe:
- before a single space that sits between two non-space characters (`word| word`): a pre-token
  never runs on into a space, and the space always opens the next one (` ?\\p{L}+` and its kin);
- after a single newline between two non-space characters (`line\\n|Next`): the newline is then a
  pre-token of its own, whether the text goes on or ends there.
Not inside a run of spaces or newlines, which the expression merges (`\\s+(?!\\S)` looks ahead).
Python's `\\S` is a little stricter than tiktoken's (it counts a few control characters as space),
which can only skip a safe place, never make an unsafe one. The char tokenizer is safe anywhere.
"""

import re
from collections import deque
from collections.abc import Iterable, Iterator

SAFE_CUT = re.compile(r"(?<=\S)(?= \S)|(?<=\S\n)(?=\S)")
WINDOWS = (1 << 8, 1 << 12, 1 << 16, 1 << 62)  # characters searched back from the limit, a wider window each time


def safe_cut(text: str, limit: int) -> int | None:
    """The last safe place to cut `text` at or before `limit`, else the first one after it, else None (no safe place yet)."""
    end = min(len(text), limit + 2)  # a cut at `limit` looks two characters ahead
    for window in WINDOWS:  # most text has a safe place within a few characters: look near the limit first
        start = max(1, limit - window)
        last = deque(SAFE_CUT.finditer(text, start, end), maxlen=1)
        if last:
            return last[0].start()
    after = SAFE_CUT.search(text, limit + 1)
    return after.start() if after else None


Piece = tuple[str, bool]  # a text, and whether the end-of-text separator goes before it
Task = tuple[str, list[Piece], int]  # the split it belongs to, its pieces, its characters


def make_tasks(stream: Iterable[tuple[str, str, bool, bool]], chunk_chars: int) -> Iterator[Task]:
    """Group (split, text, starts, separated) pieces into tasks of about chunk_chars characters.

    `starts` marks a boundary: a new document, or the train/val cut of one text. The text of one
    document is gathered until it is long enough, then cut at a safe place; short documents are
    gathered whole, many to a task. A task never holds two splits, and the tasks come in order.
    """
    split, pieces, size = None, [], 0
    pending, separated = "", False  # the current document's text, not cut yet
    for piece_split, text, starts, piece_separated in stream:
        if starts or piece_split != split:
            if pending or separated:
                pieces.append((pending, separated))
                size += len(pending)
            pending, separated = "", piece_separated
            if piece_split != split and pieces:
                yield split, pieces, size
                pieces, size = [], 0
            split = piece_split
        pending += text
        while len(pending) > chunk_chars and (cut := safe_cut(pending, chunk_chars)) is not None:
            pieces.append((pending[:cut], separated))
            yield split, pieces, size + cut
            pieces, size, pending, separated = [], 0, pending[cut:], False
        if size >= chunk_chars:
            yield split, pieces, size
            pieces, size = [], 0
    if pending or separated:
        pieces.append((pending, separated))
        size += len(pending)
    if pieces:
        yield split, pieces, size
