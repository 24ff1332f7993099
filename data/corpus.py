"""Find or download the corpus, prepare it once into `<cache>/prepared/<name>-<tokenizer>-<hash>/`
(train.bin, val.bin and a sealed meta.json), and read them back."""

import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.files import checksum, sha256_of, sha256_of_bytes, unsealed_json, write_atomically
from data.prepare import FORMAT_VERSION, prepare
from data.sources import DataError, Source, find_source
from data.tokenizer import CharTokenizer, GPT2Tokenizer, Tokenizer, TokenizerError

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
DEFAULT_CACHE_DIR = Path(__file__).resolve().parent / "cache"
IDS_BLOCK = 1 << 22  # ids read at a time when checking a .bin


@dataclass
class Corpus:
    train: np.ndarray  # a read-only memmap
    val: np.ndarray
    tokenizer: Tokenizer
    source: Path
    source_sha256: str  # `corpus_key`
    val_source: Path | None = None

    def describe(self) -> str:
        return f"corpus {self.source}: {len(self.train):,} train / {len(self.val):,} val tokens"

    def probe_ids(self, n: int) -> list[int]:
        return self.val[:n].tolist()


def download_tiny_shakespeare(cache_dir: Path) -> Path:
    path, url = cache_dir / "tinyshakespeare.txt", TINY_SHAKESPEARE_URL
    if path.exists():
        if sha256_of(path) != TINY_SHAKESPEARE_SHA256:
            raise DataError(
                f"{path} is not Tiny Shakespeare (SHA-256); delete it to download again"
            )
        return path
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            data = response.read()
    except OSError as e:
        raise DataError(
            f"could not download Tiny Shakespeare from {url} ({getattr(e, 'reason', e)}); save it "
            f"as {path}, or give --data-file PATH"
        ) from None
    if sha256_of_bytes(data) != TINY_SHAKESPEARE_SHA256:
        raise DataError(f"{url} does not match its expected SHA-256; nothing was saved")
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(path, data)
    return path


class ChangedText(DataError):
    """The corpus holds another text than the run trained on."""


def corpus_key(source: Source, val: Source | None, text_field: str) -> str:
    """One text file's SHA-256, else a hash of the sources' identities and the field."""
    if val is None and source.is_one_text:
        return source.identity["sha256"]
    return checksum(
        {"sources": [source.identity], "val": val and val.identity, "text_field": text_field}
    )


def load_corpus(data_cfg, trained_on: str | None = None) -> Corpus:
    """trained_on: a run's source_sha256, the text it must still hold (else ChangedText)."""
    cache_dir = Path(data_cfg.cache_dir or DEFAULT_CACHE_DIR)
    try:
        if data_cfg.path:
            path = Path(data_cfg.path).expanduser()
        else:
            path = download_tiny_shakespeare(cache_dir)
        source, val = find_source(path, "--data-file"), None
        if data_cfg.val_path:
            val = find_source(Path(data_cfg.val_path).expanduser(), "--data.val_path")
        key = corpus_key(source, val, data_cfg.text_field)
        if trained_on is not None and key != trained_on:
            raise ChangedText(
                f"{path} has changed since the run trained on it, so its splits are another "
                "text; put the run's text back"
            )
        root, tokenizer, short = cache_dir / "prepared", data_cfg.tokenizer, key[:16]
        mine = root / f"{path.resolve().stem}-{tokenizer}-{short}"
        # or the same text under another name (a copy)
        others = sorted(folder for folder in root.glob(f"*-{tokenizer}-{short}") if folder != mine)
        prepared = next(filter(None, (read_prepared(f, key) for f in [mine, *others])), None)
        if prepared is None:
            prepare(
                source,
                tokenizer,
                key,
                mine,
                data_cfg.text_field,
                data_cfg.workers,
                val,
                # another process's, renamed into place first
                whole=lambda folder: read_prepared(folder, key) is not None,
            )
            prepared = read_prepared(mine, key)
        if prepared is None:
            raise DataError(f"{mine} cannot be read back after writing it; delete it and retry")
    except TokenizerError as e:
        raise DataError(str(e)) from None
    except OSError as e:
        raise DataError(
            f"cannot write under {cache_dir}: {e.strerror}; set --data.cache_dir to a writable "
            "folder"
        ) from None
    return Corpus(*prepared, path, key, val and val.path)


def read_prepared(folder: Path, key: str) -> tuple[np.ndarray, np.ndarray, Tokenizer] | None:
    try:
        meta = unsealed_json((folder / "meta.json").read_bytes())
        if (
            meta is None
            or meta.get("source_sha256") != key
            or meta.get("format") != FORMAT_VERSION
            or meta["dtype"] not in ("uint16", "uint32")
        ):
            return None
        tokenizer = GPT2Tokenizer() if meta["tokenizer"] == "gpt2" else CharTokenizer(meta["chars"])
        splits, dtype = [], meta["dtype"]
        for split in ("train", "val"):
            path = folder / f"{split}.bin"
            size = path.stat().st_size
            if (
                size != meta["tokens"][split] * np.dtype(dtype).itemsize
                or largest_id(path, dtype) >= tokenizer.vocab_size
            ):
                return None
            splits.append(np.memmap(path, dtype, "r") if size else np.zeros(0, dtype))
    except TokenizerError:
        if meta["tokenizer"] == "gpt2":
            raise  # tiktoken's files are missing
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return None
    return splits[0], splits[1], tokenizer


def largest_id(path: Path, dtype: str) -> int:
    """By blocks: a memmap's max() keeps every page."""
    largest = -1
    with open(path, "rb") as f:
        while len(block := np.fromfile(f, dtype=dtype, count=IDS_BLOCK)):
            largest = max(largest, int(block.max()))
    return largest


def check_split_lengths(corpus: Corpus, block_size: int) -> None:
    for split in ("train", "val"):
        n = len(getattr(corpus, split))
        if n < block_size + 1:
            source = corpus.val_source if split == "val" and corpus.val_source else corpus.source
            raise DataError(
                f"the {split} split of {source} has {n} tokens, fewer than block_size + 1 = "
                f"{block_size + 1}; give a longer text or a smaller --model.block_size"
            )
