"""Random tokens for the induction-head lesson (docs/induction.md), with a segment that recurs at
a random distance: only content finds the earlier occurrence."""

import json
from dataclasses import dataclass

import torch

from data.files import sha256_of_bytes
from data.tokenizer import CharTokenizer

SOURCES = ("text", "repeated-random")  # data.source
SETTINGS = ("source", "symbols", "min_segment", "max_segment")  # its identity
PROBE_SEED = 0  # the heatmaps' sequence, the same in every run
# letters common fonts draw: ASCII, Latin-1, Greek, Cyrillic, Latin Extended-A
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


@dataclass
class RepeatedRandom:
    vocab_size: int
    min_segment: int
    max_segment: int

    def sequence(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """n random ids, a segment copied later at any distance that fits: a fixed offset teaches
        position, not content."""
        ids = torch.randint(self.vocab_size, (n,), generator=generator)  # (n,)
        longest = min(self.max_segment, n // 2)
        length = int(
            torch.randint(min(self.min_segment, longest), longest + 1, (1,), generator=generator)
        )
        distance = int(torch.randint(length, n - length + 1, (1,), generator=generator))
        first = int(torch.randint(0, n - length - distance + 1, (1,), generator=generator))
        ids[first + distance : first + distance + length] = ids[first : first + length].clone()
        return ids

    def draw(
        self, batch_size: int, block_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # (B, T + 1)
        window = torch.stack([self.sequence(block_size + 1, generator) for _ in range(batch_size)])
        return window[:, :-1], window[:, 1:]


@dataclass
class SyntheticCorpus:
    train: RepeatedRandom
    val: RepeatedRandom
    tokenizer: CharTokenizer
    source: str
    source_sha256: str

    def describe(self) -> str:
        return f"data {self.source}: fresh sequences every step"

    def probe_ids(self, n: int) -> list[int]:
        return self.val.sequence(n, torch.Generator().manual_seed(PROBE_SEED)).tolist()


def load_synthetic(data_cfg) -> SyntheticCorpus:
    source = RepeatedRandom(data_cfg.symbols, data_cfg.min_segment, data_cfg.max_segment)
    settings = {k: getattr(data_cfg, k) for k in SETTINGS}
    described = (
        f"{data_cfg.source} ({data_cfg.symbols} symbols, segments of {data_cfg.min_segment} "
        f"to {data_cfg.max_segment} tokens)"
    )
    return SyntheticCorpus(
        source,
        source,
        CharTokenizer(SYMBOLS[: data_cfg.symbols]),
        described,
        sha256_of_bytes(json.dumps(settings).encode()),
    )
