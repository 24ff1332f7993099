"""Cutting a stream of text into tasks for the encoders, where the ids stay those of the whole text.

The char tokenizer maps each character alone: it is cut anywhere, at exactly chunk_chars.

GPT-2's tokenizer first splits text into pre-tokens with a regular expression, then merges bytes
inside each pre-token. Two pieces encoded apart give the ids of the whole only if the cut falls
between two pre-tokens that do not depend on each other. Two places are safe:
- before a single space that sits between two non-space characters (`word| word`): a pre-token
  never runs on into a space, and the space always opens the next one (` ?\\p{L}+` and its kin);
- after a single newline between two non-space characters (`line\\n|Next`): the newline is then a
  pre-token of its own, whether the text goes on or ends there.
Not inside a run of spaces or newlines, which the expression merges (`\\s+(?!\\S)` looks ahead).
Python's `\\S` is a little stricter than tiktoken's (it counts a few control characters as space),
which can only skip a safe place, never make an unsafe one.

Some text has no such place for megabytes: CJK prose, DNA, base64, minified data. Searching on and
holding it all would take time that grows with the square of its length, and memory with its length.
So a safe place is looked for up to `force_after` characters past the limit; when none is there, the
task up to the limit is cut by force into pieces of at most FORCED_CHARS, each cut at the last edge
between pre-tokens in the second half before that bound (`EDGE`: a letter next to a digit or a
symbol, `中文|。` or `abc|123`, where tiktoken's expression splits whatever follows), else at the bound
itself, inside one pre-token (a run of letters, digits or symbols) that tiktoken would have merged
whole: only the ids next to such a cut can differ (docs/own-text.md measures how many). Byte-pair
merging costs more a character the longer the pre-token, so such a run is cut short, not a task
long. A document cut by force is cut so to its end; one that ends within the bound with no safe
place is encoded whole.
"""

import re
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import pairwise

SAFE_CUT = re.compile(r"(?<=\S)(?= \S)|(?<=\S\n)(?=\S)")
# A letter before a non-letter, a digit before a non-digit, a symbol (not an apostrophe: 's and 't
# are pre-tokens) before a letter or digit, none of them space: tiktoken's classes, for the `regex`
# module that tiktoken itself depends on.
EDGE = r"(?<=\p{L})(?=[^\p{L}\s])|(?<=\p{N})(?=[^\p{N}\s])|(?<=[^\s\p{L}\p{N}'])(?=[\p{L}\p{N}])"
# characters searched back from the limit, a wider window each time
WINDOWS = (1 << 8, 1 << 12, 1 << 16, 1 << 62)
# gpt2: characters past the limit searched for a safe place before a cut is forced
FORCE_AFTER = 1 << 18
# gpt2: forced cuts come at most this far apart (BPE costs more a character on longer pre-tokens)
FORCED_CHARS = 1 << 12


def last_match(pattern, text: str, limit: int, start: int = 1) -> int | None:
    """The last place at or before `limit` (or just after, up to limit + 1) where `pattern` matches,
    not before `start`.
    """
    end = min(len(text), limit + 2)  # a cut at `limit` looks two characters ahead
    # most text has a safe place within a few characters: look near the limit first
    for window in WINDOWS:
        first = max(start, limit - window)
        last = deque(pattern.finditer(text, first, end), maxlen=1)
        if last:
            return last[0].start()
        if first == start:
            return None
    return None


def safe_cut(text: str, limit: int, start: int = 1, end: int | None = None) -> int | None:
    """The last safe place to cut `text` at or before `limit`, else the first one after it (before
    `end`), else None (no safe place yet). No place before `start` is looked at: the caller knows
    there is none."""
    end = len(text) if end is None else min(end, len(text))
    # no space, no newline: no safe place, found fast
    if text.find(" ", start, end) < 0 and text.find("\n", start, end) < 0:
        return None
    if start <= limit and (last := last_match(SAFE_CUT, text, limit, start)) is not None:
        return last
    after = SAFE_CUT.search(text, max(start, limit + 1), end)
    return after.start() if after else None


def forced_cuts(text: str, limit: int) -> list[int]:
    """Where to cut text[:limit], which holds no safe place: at least every FORCED_CHARS characters,
    each cut at the last edge between pre-tokens in the second half before it, else there. The last
    cut is at `limit`, or an edge before it."""
    # tiktoken's own dependency, for its Unicode classes; only gpt2 text without a safe place comes
    # here
    import regex

    cuts = [0]
    while cuts[-1] < limit:
        start, end = cuts[-1], min(limit, cuts[-1] + FORCED_CHARS)
        half = start + (end - start + 1) // 2
        window = text[half - 1 : end + 1]
        # letters or digits only (DNA, a long word): no edge, found fast
        one_run = window.isalpha() or window.isdecimal()
        edge = None if one_run else last_match(regex.compile(EDGE), text, end - 1, half)
        cuts.append(end if edge is None else edge)
        if edge is not None and end == limit:
            break
    return cuts[1:]


Piece = tuple[str, bool]  # a text, and whether the end-of-text separator goes before it
Task = tuple[str, list[Piece], int]  # the split it belongs to, its pieces, its characters


def make_tasks(
    stream: Iterable[tuple[str, str, bool, bool]],
    chunk_chars: int,
    anywhere: bool = False,
    force_after: int = FORCE_AFTER,
) -> Iterator[Task]:
    """Group (split, text, starts, separated) pieces into tasks of about chunk_chars characters.

    `starts` marks a boundary: a new document, or the train/val cut of one text. The text of one
    document is gathered until it is long enough, then cut: `anywhere` (the char tokenizer) at
    chunk_chars, else at a safe place, or a forced one (see the module's docstring). Short documents
    are gathered whole, many to a task. A task never holds two splits, and the tasks come in order.
    Each character is searched about once, so the time grows with the text, and the text held with
    chunk_chars.
    """
    split, pieces, size = None, [], 0
    # the current document's text, not cut yet, and whether a separator goes before it
    pending, separated = "", False
    # no safe place before `searched`; whether this document has been cut by force
    searched, forced = 1, False

    def cut_pending(final: bool) -> Iterator[Task]:
        """Tasks from the head of `pending` while it is longer than chunk_chars; final: the document
        has ended.
        """
        nonlocal pieces, size, pending, separated, searched, forced
        while len(pending) > chunk_chars:
            bound = len(pending) if final else chunk_chars + force_after + 2
            if anywhere:
                cuts = [chunk_chars]
            elif (cut := safe_cut(pending, chunk_chars, searched, bound)) is not None:
                cuts = [cut]
            # a document cut by force ends so too
            elif len(pending) >= chunk_chars + force_after + 2 or (final and forced):
                # no safe place before bound - 1
                cuts, searched, forced = forced_cuts(pending, chunk_chars), bound - 1, True
            else:
                # every place before the last two characters was looked at
                searched = max(1, len(pending) - 1)
                return  # the rest waits for more text, or (final) is encoded whole
            for begin, end in pairwise([0, *cuts]):
                pieces.append((pending[begin:end], separated))
                separated = False
            yield split, pieces, size + cuts[-1]
            pieces, size, pending = [], 0, pending[cuts[-1] :]
            searched = max(1, searched - cuts[-1])

    for piece_split, text, starts, piece_separated in stream:
        if starts or piece_split != split:
            yield from cut_pending(final=True)
            if pending or separated:
                pieces.append((pending, separated))
                size += len(pending)
            pending, separated, searched, forced = "", piece_separated, 1, False
            if piece_split != split and pieces:
                yield split, pieces, size
                pieces, size = [], 0
            split = piece_split
        pending += text
        yield from cut_pending(final=False)
        if size >= chunk_chars:
            yield split, pieces, size
            pieces, size = [], 0
    yield from cut_pending(final=True)
    if pending or separated:
        pieces.append((pending, separated))
        size += len(pending)
    if pieces:
        yield split, pieces, size
