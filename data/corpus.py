"""Find or download the corpus, prepare it once into .bin memmaps, and read them back.

The prepared token ids live in `<cache>/prepared/<name>-<tokenizer>-<hash>/` as train.bin and
val.bin (raw unsigned integers) beside meta.json (tokenizer, vocabulary, dtype, the sources, the
document count, and its own checksum). They are reused while the sources and the tokenizer stay the
same. Reading the sources is data/sources.py; encoding them, in constant memory, is data/prepare.py.
"""

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.files import sha256_of, sha256_of_bytes, unsealed_json, write_atomically
from data.prepare import FORMAT_VERSION, TRAIN_FRACTION, prepare  # noqa: F401 (TRAIN_FRACTION: the split, known here as before)
from data.sources import DataError, Source, find_source
from data.tokenizer import TOKENIZERS, CharTokenizer, GPT2Tokenizer, Tokenizer, TokenizerError

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
DEFAULT_CACHE_DIR = Path(__file__).resolve().parent / "cache"
IDS_BLOCK = 1 << 22  # ids read at a time when checking a .bin


@dataclass
class Corpus:
    train: np.ndarray  # token ids of the first 90% of the text (a read-only memmap)
    val: np.ndarray  # token ids of the last 10%
    tokenizer: Tokenizer
    source: Path  # the text file (or folder, or documents file) the ids came from
    # the SHA-256 of that file, or a fingerprint of every source (see `corpus_key`)
    source_sha256: str
    val_source: Path | None = None  # --data.val_path, when val came from a source of its own

    def describe(self) -> str:
        return f"corpus {self.source}: {len(self.train):,} train / {len(self.val):,} val tokens"

    def probe_ids(self, n: int) -> list[int]:
        """n tokens to look at when the probe text does not fit the tokenizer: the val split's
        first.
        """
        return self.val[:n].tolist()


def download_tiny_shakespeare(cache_dir: Path) -> Path:
    """Return the cached Tiny Shakespeare, downloading it once; it is used only if its SHA-256
    matches.
    """
    path = cache_dir / "tinyshakespeare.txt"
    if not path.exists():
        try:
            with urllib.request.urlopen(TINY_SHAKESPEARE_URL, timeout=30) as response:
                data = response.read()
        except OSError as e:
            raise DataError(
                f"could not download Tiny Shakespeare from {TINY_SHAKESPEARE_URL} ({getattr(e, 'reason', e)}); "
                f"save that file as {path}, or train on your own text with --data-file PATH"
            ) from None
        if sha256_of_bytes(data) != TINY_SHAKESPEARE_SHA256:
            raise DataError(
                f"the file downloaded from {TINY_SHAKESPEARE_URL} does not match its expected SHA-256; nothing was saved"
            )
        cache_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(path, data)
    elif sha256_of(path) != TINY_SHAKESPEARE_SHA256:
        raise DataError(
            f"{path} is not the expected Tiny Shakespeare (SHA-256 mismatch); delete it to download it again"
        )
    return path


class ChangedText(DataError):
    """The corpus that a run names holds another text now than the one it trained on."""


def corpus_key(source: Source, val: Source | None, text_field: str) -> str:
    """What names a preparation: one text file's SHA-256, as always; otherwise a hash of the
    sources' identities (their
    text, never their paths: data/identity.py), the val source's and the JSONL/parquet field."""
    if val is None and source.is_one_text:
        return source.identity["sha256"]
    described = {
        "sources": [source.identity],
        "val": val and val.identity,
        "text_field": text_field,
    }
    return sha256_of_bytes(json.dumps(described, sort_keys=True).encode())


def load_corpus(data_cfg, trained_on: str | None = None) -> Corpus:
    """Return the train and val token ids of data_cfg.path (Tiny Shakespeare when empty), preparing
    them once.

    trained_on, a run's source_sha256: its corpus must hold the same text still (ChangedText),
    checked before anything is prepared. A text prepared under another name (a copy, a folder
    renamed) is found by its key.
    """
    cache_dir = Path(data_cfg.cache_dir) if data_cfg.cache_dir else DEFAULT_CACHE_DIR
    if data_cfg.tokenizer not in TOKENIZERS:
        raise DataError(
            f"unknown tokenizer {data_cfg.tokenizer!r}; choose one of {', '.join(TOKENIZERS)}"
        )
    try:
        path = (
            Path(data_cfg.path).expanduser()
            if data_cfg.path
            else download_tiny_shakespeare(cache_dir)
        )
        source = find_source(path, "--data-file")
        val = (
            find_source(Path(data_cfg.val_path).expanduser(), "--data.val_path")
            if data_cfg.val_path
            else None
        )
        key = corpus_key(source, val, data_cfg.text_field)
        if trained_on is not None and key != trained_on:
            raise ChangedText(
                f"{path} has changed since the run trained on it, so its splits are another text; put the run's text back"
            )
        folders = prepared_folders(
            cache_dir / "prepared", path.resolve().stem, data_cfg.tokenizer, key
        )
        prepared_splits = next(
            filter(None, (read_prepared(folder, key) for folder in folders)), None
        )
        # never prepared, prepared from other text or by an older version, or damaged
        if prepared_splits is None:
            # another process's, prepared at the same time and renamed into place first
            def whole(folder: Path) -> bool:
                return read_prepared(folder, key) is not None

            prepare(
                source,
                data_cfg.tokenizer,
                key,
                folders[0],
                data_cfg.text_field,
                data_cfg.workers,
                val,
                whole=whole,
            )
            prepared_splits = read_prepared(folders[0], key)
        if prepared_splits is None:
            raise DataError(
                f"the prepared data in {folders[0]} cannot be read back after writing it; delete that folder and try again"
            )
        train, val_ids, tokenizer = prepared_splits
    except TokenizerError as e:
        raise DataError(str(e)) from None
    except OSError as e:
        raise DataError(
            f"cannot write prepared data under {cache_dir}: {e.strerror}; set --data.cache_dir to a writable folder"
        ) from None
    return Corpus(train, val_ids, tokenizer, path, key, val and val.path)


def prepared_folders(root: Path, stem: str, tokenizer: str, key: str) -> list[Path]:
    """Where a corpus is prepared, or goes: <stem>-<tokenizer>-<key>, then any other folder of that
    tokenizer and key.
    """
    mine = root / f"{stem}-{tokenizer}-{key[:16]}"
    return [
        mine,
        *sorted(folder for folder in root.glob(f"*-{tokenizer}-{key[:16]}") if folder != mine),
    ]


def read_prepared(folder: Path, source_sha: str) -> tuple[np.ndarray, np.ndarray, Tokenizer] | None:
    """The train and val ids and the tokenizer prepared in `folder`, or None when they must be
    prepared (again).

    Anything amiss means preparing again, never a traceback: a meta.json from other text or an older
    format, a .bin of the wrong size (cut short by a full disk, say), ids outside the vocabulary.
    """
    try:
        # None: edited by hand (a permuted vocabulary, other counts)
        meta = unsealed_json((folder / "meta.json").read_bytes())
        if (
            meta is None
            or meta.get("source_sha256") != source_sha
            or meta.get("format") != FORMAT_VERSION
            or meta["dtype"] not in ("uint16", "uint32")
        ):
            return None
        tokenizer = GPT2Tokenizer() if meta["tokenizer"] == "gpt2" else CharTokenizer(meta["chars"])
        splits = []
        for split in ("train", "val"):
            path, n_tokens = folder / f"{split}.bin", meta["tokens"][split]
            if path.stat().st_size != n_tokens * np.dtype(meta["dtype"]).itemsize:
                return None
            if largest_id(path, meta["dtype"]) >= tokenizer.vocab_size:
                return None
            splits.append(read_ids(path, meta["dtype"]))
    except TokenizerError:
        if meta["tokenizer"] == "gpt2":
            raise  # tiktoken's files are missing: preparing again would not help
        return None  # a damaged char vocabulary
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return splits[0], splits[1], tokenizer


def read_ids(path: Path, dtype: str) -> np.ndarray:
    """Memory-map a .bin of token ids (an empty split cannot be mapped: it becomes an empty array)."""
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def largest_id(path: Path, dtype: str) -> int:
    """The largest id in a .bin (-1 when empty), read block by block: a memmap's max() would keep
    every page resident.
    """
    largest = -1
    with open(path, "rb") as f:
        while len(block := np.fromfile(f, dtype=dtype, count=IDS_BLOCK)):
            largest = max(largest, int(block.max()))
    return largest


def check_split_lengths(corpus: Corpus, block_size: int) -> None:
    """Each split must hold at least one (block_size + 1)-token window: block_size inputs and their
    targets.
    """
    for split in ("train", "val"):
        n = len(getattr(corpus, split))
        if n < block_size + 1:
            source = corpus.val_source if split == "val" and corpus.val_source else corpus.source
            raise DataError(
                f"the {split} split of {source} has {n} tokens, fewer than block_size + 1 = {block_size + 1}; "
                f"use a longer text or a smaller --model.block_size"
            )
