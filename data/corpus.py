"""Find or download the text, split it into train and val, encode it once into .bin memmaps.

The prepared token ids live in `<cache>/prepared/<name>-<tokenizer>-<hash>/` as train.bin and
val.bin (raw unsigned integers) beside meta.json (tokenizer, vocabulary, dtype, source hash).
They are reused while the source text and the tokenizer stay the same.
"""

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.files import sha256_of, sha256_of_bytes, write_atomically
from data.tokenizer import TOKENIZERS, CharTokenizer, GPT2Tokenizer, Tokenizer, TokenizerError

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
DEFAULT_CACHE_DIR = Path(__file__).resolve().parent / "cache"
TRAIN_FRACTION = 0.9
FORMAT_VERSION = 2  # 2 records each split's token count, so a cut-short .bin is noticed


class DataError(Exception):
    """A problem with the corpus that the user can fix; the message says how."""


@dataclass
class Corpus:
    train: np.ndarray  # token ids of the first 90% of the text (a read-only memmap)
    val: np.ndarray  # token ids of the last 10%
    tokenizer: Tokenizer
    source: Path  # the text file the ids came from
    source_sha256: str

    def describe(self) -> str:
        return f"corpus {self.source}: {len(self.train):,} train / {len(self.val):,} val tokens"

    def probe_ids(self, n: int) -> list[int]:
        """n tokens to look at when the probe text does not fit the tokenizer: the val split's first."""
        return self.val[:n].tolist()


def download_tiny_shakespeare(cache_dir: Path) -> Path:
    """Return the cached Tiny Shakespeare, downloading it once; it is used only if its SHA-256 matches."""
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
            raise DataError(f"the file downloaded from {TINY_SHAKESPEARE_URL} does not match its expected SHA-256; nothing was saved")
        cache_dir.mkdir(parents=True, exist_ok=True)
        write_atomically(path, data)
    elif sha256_of(path) != TINY_SHAKESPEARE_SHA256:
        raise DataError(f"{path} is not the expected Tiny Shakespeare (SHA-256 mismatch); delete it to download it again")
    return path


def read_text(path: Path, flag: str = "--data-file") -> str:
    """The UTF-8 text of a file named with `flag`; a missing, binary, non-UTF-8 or empty file is a DataError saying so."""
    if not path.exists():
        raise DataError(f"{flag} {path} does not exist; give the path of a UTF-8 text file")
    if not path.is_file():
        raise DataError(f"{flag} {path} is not a regular file; give the path of a UTF-8 text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{flag} {path} is not UTF-8 text (bad byte at offset {e.start}); convert it to UTF-8 or pick a text file"
        ) from None
    except OSError as e:
        raise DataError(f"cannot read {flag} {path}: {e.strerror}") from None
    if "\0" in text:  # valid UTF-8, but no text holds NUL characters: an image, an archive, a tensor file
        raise DataError(f"{flag} {path} is binary (it holds NUL bytes); give a UTF-8 text file")
    if not text.strip():
        raise DataError(f"{flag} {path} is empty (nothing but whitespace); give a file with some text")
    return text


def make_tokenizer(name: str, text: str) -> Tokenizer:
    if name == "gpt2":
        return GPT2Tokenizer()
    if name == "char":
        return CharTokenizer.from_text(text)
    raise DataError(f"unknown tokenizer {name!r}; choose one of {', '.join(TOKENIZERS)}")


def load_corpus(data_cfg) -> Corpus:
    """Return the train and val token ids of data_cfg.path (Tiny Shakespeare when empty), preparing them once."""
    cache_dir = Path(data_cfg.cache_dir) if data_cfg.cache_dir else DEFAULT_CACHE_DIR
    try:
        source = Path(data_cfg.path).expanduser() if data_cfg.path else download_tiny_shakespeare(cache_dir)
        text = None if not data_cfg.path else read_text(source)  # read early so bad files fail fast
        source_sha = sha256_of(source)
        prepared = cache_dir / "prepared" / f"{source.stem}-{data_cfg.tokenizer}-{source_sha[:16]}"
        prepared_splits = read_prepared(prepared, source_sha)
        if prepared_splits is None:  # never prepared, prepared from other text or by an older version, or damaged
            prepare(text if text is not None else read_text(source), data_cfg.tokenizer, source_sha, prepared)
            prepared_splits = read_prepared(prepared, source_sha)
        if prepared_splits is None:
            raise DataError(f"the prepared data in {prepared} cannot be read back after writing it; delete that folder and try again")
        train, val, tokenizer = prepared_splits
    except TokenizerError as e:
        raise DataError(str(e)) from None
    except OSError as e:
        raise DataError(f"cannot write prepared data under {cache_dir}: {e.strerror}; set --data.cache_dir to a writable folder") from None
    return Corpus(train, val, tokenizer, source, source_sha)


def read_prepared(folder: Path, source_sha: str) -> tuple[np.ndarray, np.ndarray, Tokenizer] | None:
    """The train and val ids and the tokenizer prepared in `folder`, or None when they must be prepared (again).

    Anything amiss means preparing again, never a traceback: a meta.json from other text or an
    older format, a .bin of the wrong size (cut short by a full disk, say), ids outside the vocabulary.
    """
    try:
        meta = json.loads((folder / "meta.json").read_text())
        if meta.get("source_sha256") != source_sha or meta.get("format") != FORMAT_VERSION or meta["dtype"] not in ("uint16", "uint32"):
            return None
        tokenizer = GPT2Tokenizer() if meta["tokenizer"] == "gpt2" else CharTokenizer(meta["chars"])
        splits = []
        for split in ("train", "val"):
            path, n_tokens = folder / f"{split}.bin", meta["tokens"][split]
            if path.stat().st_size != n_tokens * np.dtype(meta["dtype"]).itemsize:
                return None
            ids = read_ids(path, meta["dtype"])
            if len(ids) and int(ids.max()) >= tokenizer.vocab_size:
                return None
            splits.append(ids)
    except TokenizerError:
        if meta["tokenizer"] == "gpt2":
            raise  # tiktoken's files are missing: preparing again would not help
        return None  # a damaged char vocabulary
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return splits[0], splits[1], tokenizer


def read_ids(path: Path, dtype: str) -> np.ndarray:
    """Memory-map a .bin of token ids (an empty split cannot be mapped: it becomes an empty array)."""
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def prepare(text: str, tokenizer_name: str, source_sha: str, folder: Path) -> dict:
    """Encode both splits and write them; meta.json is written last, so it marks a finished job.

    Validation is the last 10% of the text, not a random sample: contiguous text would leak
    across a random split (neighbouring lines share names, phrases and scenes).
    """
    tokenizer = make_tokenizer(tokenizer_name, text)
    cut = int(len(text) * TRAIN_FRACTION)
    dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
    folder.mkdir(parents=True, exist_ok=True)
    tokens = {}
    for split, part in (("train", text[:cut]), ("val", text[cut:])):
        ids = np.array(tokenizer.encode(part), dtype=dtype)
        write_atomically(folder / f"{split}.bin", ids.tobytes())
        tokens[split] = len(ids)
    meta = {"format": FORMAT_VERSION, "source_sha256": source_sha, "dtype": dtype, "tokens": tokens, **tokenizer.state()}
    meta["tokenizer"] = meta.pop("name")
    meta["vocab_size"] = tokenizer.vocab_size
    write_atomically(folder / "meta.json", json.dumps(meta).encode())
    return meta


def check_split_lengths(corpus: Corpus, block_size: int) -> None:
    """Each split must hold at least one (block_size + 1)-token window: block_size inputs and their targets."""
    for split in ("train", "val"):
        n = len(getattr(corpus, split))
        if n < block_size + 1:
            raise DataError(
                f"the {split} split of {corpus.source} has {n} tokens, fewer than block_size + 1 = {block_size + 1}; "
                f"use a longer text or a smaller --model.block_size"
            )
