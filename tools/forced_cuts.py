"""How many GPT-2 ids data/chunks.py's forced cuts change on texts with no safe place to cut:
each piece encoded alone against the whole's ids."""

import base64
import random
import re
import sys

import numpy as np

from data.chunks import FORCE_AFTER, FORCED_CHARS, make_tasks
from data.corpus import DEFAULT_CACHE_DIR, download_tiny_shakespeare
from data.tokenizer import GPT2Tokenizer
from harness.arguments import positive_int
from harness.cli import OneLineParser, run_command
from tools.figures import record_result

LINE = (
    "{name}: {chars:,} characters, {cuts} cuts ({cuts_changing_ids} change ids); {tokens_whole:,} "
    "tokens whole, {tokens_cut:,} cut; {differ_whole} of the whole's differ, {differ_cut} of the "
    "cut's ({differ_per_cut:.2f} a cut)"
)


def texts() -> dict[str, str]:
    play = download_tiny_shakespeare(DEFAULT_CACHE_DIR).read_text(encoding="utf-8")
    return dict(
        no_whitespace=re.sub(r"\s+", "", play),
        base64=base64.b64encode(play.encode()).decode(),
        letters_only=re.sub(r"[^a-z]", "", play.lower()),
        acgt="".join(random.Random(0).choices("ACGT", k=len(play))),
    )


def placed(ids: list[int], lengths: np.ndarray) -> set[tuple[int, int]]:
    ends = np.cumsum(lengths[ids])
    return set(zip((ends - lengths[ids]).tolist(), ids, strict=True))


def measure(text: str, chunk_chars: int, tokenizer: GPT2Tokenizer, lengths: np.ndarray) -> dict:
    starts = range(0, len(text), chunk_chars)
    stream = (("train", text[i : i + chunk_chars], i == 0, False) for i in starts)
    pieces = [piece for _, task, _ in make_tasks(stream, chunk_chars) for piece, _ in task]
    whole = tokenizer.encode(text)
    cut = [i for piece in pieces for i in tokenizer.encode(piece)]
    a, b = placed(whole, lengths), placed(cut, lengths)
    cuts = np.cumsum([len(piece.encode()) for piece in pieces])[:-1]
    changing = {int(np.abs(cuts - offset).argmin()) for offset, _ in a ^ b}  # nearest cuts
    return dict(
        chars=len(text),
        cuts=len(cuts),
        cuts_changing_ids=len(changing),
        tokens_whole=len(whole),
        tokens_cut=len(cut),
        differ_whole=len(a - b),
        differ_cut=len(b - a),
        differ_per_cut=len(b - a) / max(1, len(cuts)),
    )


def main(argv: list[str]) -> dict:
    parser = OneLineParser(__doc__)
    add = parser.add_argument
    add("--chunk-chars", type=positive_int, default=FORCED_CHARS, help="(default: a forced piece)")
    add("--record", action="store_true", help="write it into docs/figures.json")
    args = parser.parse_args(argv)
    tokenizer = GPT2Tokenizer()
    lengths = np.array(
        [len(tokenizer.enc.decode_single_token_bytes(i)) for i in range(tokenizer.vocab_size)]
    )
    result = {"chunk_chars": args.chunk_chars, "force_after": FORCE_AFTER}
    for name, text in texts().items():
        found = result[name] = measure(text, args.chunk_chars, tokenizer, lengths)
        print(LINE.format(name=name, **found))
    if args.record:
        record_result("forced-cuts", "tools.forced_cuts", argv, result)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
