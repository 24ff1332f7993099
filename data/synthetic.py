"""Synthetic token streams for the induction-head lesson (docs/induction.md): random tokens with a
segment that recurs.

`RepeatedRandom` draws every sequence afresh from the torch.Generator it is handed: uniformly
random tokens, then one random segment of them copied to a later place. The segment's length,
where it starts and the filler before its copy are drawn anew for each sequence, so the distance
from a token to its earlier occurrence varies: no head can find the earlier occurrence by position
alone, only by content (a previous-token head in one layer composing with an induction head in the
next). The tokens are characters, so the char tokenizer prints, samples and labels them like text.
"""

import json
from dataclasses import dataclass

import torch

from data.files import sha256_of_bytes
from data.tokenizer import CharTokenizer

SOURCES = ("text", "repeated-random")  # data.source
# the data settings a synthetic source is made from: its identity
SETTINGS = ("source", "symbols", "min_segment", "max_segment")
# the sequence that heatmaps show is drawn from its own generator: the same in every run
PROBE_SEED = 0
# Letters that common fonts draw, so heatmap labels and samples stay readable: ASCII letters and
# digits, Latin-1, Greek and Cyrillic letters, then Latin Extended-A.
SYMBOL_RANGES = (
    (0x30, 0x39),
    (0x41, 0x5A),
    (0x61, 0x7A),
    (0xC0, 0xFF),
    (0x391, 0x3A9),
    (0x3B1, 0x3C9),
    (0x410, 0x44F),
    (0x100, 0x17F),
)
SYMBOLS = [chr(c) for lo, hi in SYMBOL_RANGES for c in range(lo, hi + 1) if chr(c).isalnum()]


class RepeatedRandom:
    """A batch source of random sequences in which one segment, min_segment to max_segment tokens
    long, recurs later.

    draw(batch_size, block_size, generator) returns (x, y) as data.batches.get_batch does for text.
    """

    def __init__(self, vocab_size: int, min_segment: int, max_segment: int):
        self.vocab_size, self.min_segment, self.max_segment = vocab_size, min_segment, max_segment

    def sequence(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n token ids: uniformly random, then a segment copied to a later place.

        The distance from the segment to its copy is drawn uniformly from all that fit, so no
        distance is more likely than another and attending to a fixed offset earns little. The
        segment is at most n // 2 long, so that two copies fit (a short probe sequence gets a short
        segment).
        """
        ids = torch.randint(self.vocab_size, (n,), generator=generator)  # (n,)
        longest = min(self.max_segment, n // 2)
        length = int(
            torch.randint(min(self.min_segment, longest), longest + 1, (1,), generator=generator)
        )
        # from the segment to its copy
        distance = int(torch.randint(length, n - length + 1, (1,), generator=generator))
        # where the segment starts
        first = int(torch.randint(0, n - length - distance + 1, (1,), generator=generator))
        ids[first + distance : first + distance + length] = ids[first : first + length].clone()
        return ids

    def draw(
        self, batch_size: int, block_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs x and targets y (B, T) int64, y being x shifted one position left; every draw is
        fresh.
        """
        # (B, T + 1)
        window = torch.stack([self.sequence(block_size + 1, generator) for _ in range(batch_size)])
        return window[:, :-1], window[:, 1:]


@dataclass
class SyntheticCorpus:
    """What training reads from a synthetic source, named as data.corpus.Corpus names it: both
    splits draw from the same source (evaluation with its own generator), and the source's settings
    stand in for a text's hash."""

    train: RepeatedRandom
    val: RepeatedRandom
    tokenizer: CharTokenizer
    source: str
    source_sha256: str

    def describe(self) -> str:
        return f"data {self.source}: fresh sequences every step"

    def probe_ids(self, n: int) -> list[int]:
        """n tokens to look at (heatmaps, the sample's prompt): one sequence with its repeat, the
        same in every run.
        """
        return self.val.sequence(n, torch.Generator().manual_seed(PROBE_SEED)).tolist()


def load_synthetic(data_cfg) -> SyntheticCorpus:
    """The source data_cfg names (data.source other than "text"), with a char tokenizer over its
    symbols.
    """
    source = RepeatedRandom(data_cfg.symbols, data_cfg.min_segment, data_cfg.max_segment)
    settings = {k: getattr(data_cfg, k) for k in SETTINGS}
    described = f"{data_cfg.source} ({data_cfg.symbols} symbols, segments of {data_cfg.min_segment} to {data_cfg.max_segment} tokens)"
    return SyntheticCorpus(
        source,
        source,
        CharTokenizer(SYMBOLS[: data_cfg.symbols]),
        described,
        sha256_of_bytes(json.dumps(settings).encode()),
    )
