"""How many GPT-2 ids the forced cuts of data/chunks.py change: python -m tools.forced_cuts
[--chunk-chars 16384] [--record]

Text with no safe place to cut (no single space or newline between two non-space characters) is cut
by force within a bound. Here texts made from Tiny Shakespeare with no safe place at all are cut as
preparation cuts them (make_tasks, `--chunk-chars` a task, by default as far apart as preparation's
forced cuts), each piece encoded alone, and the ids compared with tiktoken's encoding of the whole
text at once: a token of one that is not in the other, at the same place, differs. The texts: the
play with its whitespace taken out (letters and punctuation, as CJK prose), its base64 (letters,
digits and symbols), its letters alone, lower-cased (one pre-token, as DNA or a word a megabyte
long), and random ACGT. --record writes the result into docs/figures.json.
"""

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


def texts() -> dict[str, str]:
    play = download_tiny_shakespeare(DEFAULT_CACHE_DIR).read_text(encoding="utf-8")
    return {
        "no_whitespace": re.sub(r"\s+", "", play),
        "base64": base64.b64encode(play.encode()).decode(),
        "letters_only": re.sub(r"[^a-z]", "", play.lower()),
        "acgt": "".join(random.Random(0).choices("ACGT", k=len(play))),
    }


def placed(ids: list[int], lengths: np.ndarray) -> set[tuple[int, int]]:
    """Each token as (its byte offset, its id)."""
    ends = np.cumsum(lengths[ids])
    return set(zip((ends - lengths[ids]).tolist(), ids, strict=True))


def measure(text: str, chunk_chars: int, tokenizer: GPT2Tokenizer, lengths: np.ndarray) -> dict:
    """The forced cuts of one text and the tokens they change, against the whole text's encoding."""
    stream = (
        ("train", text[i : i + chunk_chars], i == 0, False)
        for i in range(0, len(text), chunk_chars)
    )
    pieces = [piece for _, task, _ in make_tasks(stream, chunk_chars) for piece, _ in task]
    whole = tokenizer.encode(text)
    cut = [i for piece in pieces for i in tokenizer.encode(piece)]
    a, b = placed(whole, lengths), placed(cut, lengths)
    cuts = np.cumsum([len(piece.encode()) for piece in pieces])[:-1]
    # the cut nearest each differing token
    changing = {int(np.abs(cuts - offset).argmin()) for offset, _ in a ^ b}
    return {
        "chars": len(text),
        "cuts": len(cuts),
        "cuts_changing_ids": len(changing),
        "tokens_whole": len(whole),
        "tokens_cut": len(cut),
        "differ_whole": len(a - b),
        "differ_cut": len(b - a),
        "differ_per_cut": len(b - a) / max(1, len(cuts)),
    }


def main(argv: list[str]) -> dict:
    parser = OneLineParser(__doc__)
    parser.add_argument(
        "--chunk-chars",
        type=positive_int,
        default=FORCED_CHARS,
        help="characters a task (default: a forced piece)",
    )
    parser.add_argument(
        "--record", action="store_true", help="write the result into docs/figures.json"
    )
    args = parser.parse_args(argv)
    tokenizer = GPT2Tokenizer()
    lengths = np.array(
        [len(tokenizer.enc.decode_single_token_bytes(i)) for i in range(tokenizer.vocab_size)]
    )
    result = {"chunk_chars": args.chunk_chars, "force_after": FORCE_AFTER}
    for name, text in texts().items():
        found = result[name] = measure(text, args.chunk_chars, tokenizer, lengths)
        print(
            f"{name}: {found['chars']:,} characters, {found['cuts']} cuts ({found['cuts_changing_ids']} change ids); "
            f"{found['tokens_whole']:,} tokens whole, {found['tokens_cut']:,} cut; {found['differ_whole']} of the whole's "
            f"differ, {found['differ_cut']} of the cut's ({found['differ_per_cut']:.2f} a cut)"
        )
    if args.record:
        record_result("forced-cuts", "tools.forced_cuts", argv, result)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
