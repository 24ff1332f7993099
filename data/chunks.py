"""Text cut into encoder tasks whose ids stay those of the whole text: GPT-2's pre-tokens never
cross `word| word` or `line\n|Next`; text without such places (CJK, DNA) is cut at an `EDGE`."""

import re
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import pairwise

SAFE_CUT = re.compile(r"(?<=\S)(?= \S)|(?<=\S\n)(?=\S)")
# letter|non-letter, digit|non-digit, symbol|letter or digit (not after ': 's is one pre-token)
EDGE = r"(?<=\p{L})(?=[^\p{L}\s])|(?<=\p{N})(?=[^\p{N}\s])|(?<=[^\s\p{L}\p{N}'])(?=[\p{L}\p{N}])"
WINDOWS = (1 << 8, 1 << 12, 1 << 16, 1 << 62)  # characters searched back from the limit, in turn
FORCE_AFTER = 1 << 18  # characters past the limit searched for a safe place
FORCED_CHARS = 1 << 12  # forced cuts come at most this far apart


def last_match(pattern, text: str, limit: int, start: int) -> int | None:
    end = min(len(text), limit + 2)  # a cut at `limit` looks two characters ahead
    for window in WINDOWS:
        first = max(start, limit - window)
        last = deque(pattern.finditer(text, first, end), maxlen=1)
        if last:
            return last[0].start()
        if first == start:
            return None


def safe_cut(text: str, limit: int, start: int, end: int) -> int | None:
    end = min(end, len(text))
    if text.find(" ", start, end) < 0 and text.find("\n", start, end) < 0:
        return None
    if start <= limit and (last := last_match(SAFE_CUT, text, limit, start)) is not None:
        return last
    after = SAFE_CUT.search(text, max(start, limit + 1), end)
    return after.start() if after else None


def forced_cuts(text: str, limit: int) -> list[int]:
    import regex  # tiktoken's dependency, for Unicode classes

    cuts = [0]
    while cuts[-1] < limit:
        start, end = cuts[-1], min(limit, cuts[-1] + FORCED_CHARS)
        half = start + (end - start + 1) // 2
        window = text[half - 1 : end + 1]
        one_run = window.isalpha() or window.isdecimal()
        edge = None if one_run else last_match(regex.compile(EDGE), text, end - 1, half)
        cuts.append(end if edge is None else edge)
        if edge is not None and end == limit:
            break
    return cuts[1:]


Piece = tuple[str, bool]  # a text, and whether the end-of-text separator goes before it
Task = tuple[str, list[Piece], int]  # split, pieces, characters


def make_tasks(
    stream: Iterable[tuple[str, str, bool, bool]], chunk_chars: int, anywhere: bool = False
) -> Iterator[Task]:
    """Tasks of about chunk_chars, one split each. A document cut by force is cut so to its end;
    one that ends within FORCE_AFTER of the limit with no safe place is encoded whole."""
    split, pieces, size = None, [], 0
    pending, separated = "", False  # the document's text not cut yet; a separator before it
    searched, forced = 1, False  # no safe place before `searched`

    def cut_pending(final: bool) -> Iterator[Task]:
        nonlocal pieces, size, pending, separated, searched, forced
        while len(pending) > chunk_chars:
            bound = len(pending) if final else chunk_chars + FORCE_AFTER + 2
            if anywhere:
                cuts = [chunk_chars]
            elif (cut := safe_cut(pending, chunk_chars, searched, bound)) is not None:
                cuts = [cut]
            elif len(pending) >= chunk_chars + FORCE_AFTER + 2 or (final and forced):
                cuts, searched, forced = forced_cuts(pending, chunk_chars), bound - 1, True
            else:
                searched = max(1, len(pending) - 1)
                return  # the rest waits for more text, or (final) is encoded whole
            for begin, end in pairwise([0, *cuts]):
                pieces.append((pending[begin:end], separated))
                separated = False
            yield split, pieces, size + cuts[-1]
            pieces, size, pending = [], 0, pending[cuts[-1] :]
            searched = max(1, searched - cuts[-1])

    def end_document() -> Iterator[Task]:
        nonlocal size
        yield from cut_pending(final=True)
        if pending or separated:
            pieces.append((pending, separated))
            size += len(pending)

    for piece_split, text, starts, piece_separated in stream:
        if starts or piece_split != split:
            yield from end_document()
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
    yield from end_document()
    if pieces:
        yield split, pieces, size
