"""Tests for data/: tokenizers, corpus preparation and reuse, the 90/10 split, batches,
and errors.
"""

import hashlib
import io
import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import (
    REPO_ROOT,
    REQUIRE_ALL,
    gpt2_encoding_or_skip,
    import_or_skip,
    make_corpus_text,
    write_corpus,
)

import data.corpus
from configs import DataConfig
from data.batches import get_batch
from data.corpus import (
    TINY_SHAKESPEARE_URL,
    DataError,
    check_split_lengths,
    download_tiny_shakespeare,
    load_corpus,
)
from data.prepare import TRAIN_FRACTION
from data.tokenizer import (
    CharTokenizer,
    GPT2Tokenizer,
    TokenizerError,
    decode_stream,
    degenerate,
    tokenizer_from_state,
)


def char_cfg(tmp_path: Path, path: Path | str) -> DataConfig:
    return DataConfig(path=str(path), tokenizer="char", cache_dir=str(tmp_path / "cache"))


def prepared_folders(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "prepared").iterdir())


# 1. Character tokenizer


def test_char_tokenizer_ids_are_sorted_characters():
    tok = CharTokenizer.from_text("hello")
    assert tok.chars == ["e", "h", "l", "o"]
    assert tok.vocab_size == 4
    assert tok.encode("hello") == [1, 0, 2, 2, 3]
    assert tok.decode([3, 2, 0]) == "ole"


def test_char_round_trip_whole_corpus():
    text = make_corpus_text()
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert max(ids) == tok.vocab_size - 1 == len(set(text)) - 1
    assert tok.decode(ids) == text


def test_char_tokenizer_state_round_trip():
    tok = CharTokenizer.from_text("abc\n ")
    state = tok.state()
    assert state == {"name": "char", "chars": ["\n", " ", "a", "b", "c"]}
    again = tokenizer_from_state(state)
    assert isinstance(again, CharTokenizer)
    assert again.encode("cab \n") == tok.encode("cab \n") == [4, 2, 3, 1, 0]


def test_char_tokenizer_rejects_unknown_characters():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(TokenizerError, match="not in the training vocabulary") as e:
        tok.encode("abcé")
    assert "é" in str(e.value)


@pytest.mark.parametrize("chars", [[], ["a", "a"], ["ab"], ["a", 1]])
def test_char_tokenizer_rejects_bad_vocabularies(chars):
    with pytest.raises(TokenizerError, match="distinct single characters"):
        CharTokenizer(chars)


@pytest.mark.parametrize("state", [{"name": "bpe"}, {}, "char", None])
def test_tokenizer_from_state_rejects_unknown(state):
    with pytest.raises(TokenizerError, match="unknown tokenizer"):
        tokenizer_from_state(state)


# 2. GPT-2 tokenizer (needs tiktoken's BPE files)


def test_a_missing_gpt2_dependency_skips_for_a_user_and_fails_in_ci(monkeypatch, tmp_path):
    # an empty cache folder: the BPE files are missing
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(REQUIRE_ALL, raising=False)
    with pytest.raises(pytest.skip.Exception, match="gpt2 BPE files"):
        gpt2_encoding_or_skip()
    with pytest.raises(pytest.skip.Exception, match="could not import no_such_module"):
        import_or_skip("no_such_module", "a test dependency")
    monkeypatch.setenv(REQUIRE_ALL, "1")
    with pytest.raises(pytest.fail.Exception, match="gpt2 BPE files.*must run every test"):
        gpt2_encoding_or_skip()
    with pytest.raises(
        pytest.fail.Exception, match="could not import no_such_module.*must run every test"
    ):
        import_or_skip("no_such_module", "a test dependency")
    # CI lets no GPT-2 test skip
    assert f"\nexport {REQUIRE_ALL}=1" in (REPO_ROOT / ".ci" / "run").read_text()


def test_gpt2_tokenizer_round_trip():
    enc = gpt2_encoding_or_skip()
    tok = GPT2Tokenizer()
    text = make_corpus_text(min_chars=3000) + " <|endoftext|> café €"
    ids = tok.encode(text)
    assert tok.vocab_size == enc.n_vocab == 50257
    assert ids == enc.encode_ordinary(text)
    assert tok.encode("Hello world") == [15496, 995]
    assert len(ids) < len(text) / 2  # BPE merges: far fewer tokens than characters
    assert tok.decode(ids) == text
    assert tokenizer_from_state(tok.state()).encode("Hello world") == [15496, 995]


def test_degenerate_names_blank_and_one_character_texts_and_passes_prose():
    assert degenerate("\n" * 201) == ("all whitespace", "201 newlines, 0 spaces")
    assert degenerate("a" + " " * 7 + "\n" * 2) == ("90% whitespace", "2 newlines, 7 spaces")
    assert degenerate("e" * 9 + "x") == ("90% one character", "'e' 9 times")
    assert degenerate("zzzz") == ("one character repeated", "'z' 4 times")
    assert degenerate("ROMEO:\nBut soft, what light through yonder window breaks?") is None
    assert degenerate("ab" * 10) is None  # half one character is not more than half
    assert degenerate("") is None  # nothing generated (--max-new-tokens 0): nothing to say


def test_decode_stream_holds_back_a_character_split_across_tokens():
    gpt2_encoding_or_skip()
    tok = GPT2Tokenizer()
    # an accented letter, an emoji and two CJK characters: several bytes each
    text = "Caf\u00e9 \U0001f389 \u4f60\u597d!"
    ids = tok.encode(text)
    alone = [tok.decode([i]) for i in ids]
    assert any("\ufffd" in piece for piece in alone), (
        "some token should end inside a character, or the test shows little"
    )
    pieces = list(decode_stream(tok, ids))
    assert "".join(pieces) == text and not any("\ufffd" in piece for piece in pieces)
    assert len(pieces) < len(ids)  # the pieces that were held back came out joined to the next
    chars = CharTokenizer(list("abc"))
    # one character per token: nothing is held back
    assert list(decode_stream(chars, [0, 2, 1])) == ["a", "c", "b"]


def test_gpt2_corpus_split_round_trip(tmp_path):
    gpt2_encoding_or_skip()
    text = make_corpus_text(min_chars=5000)
    path = write_corpus(tmp_path / "text", text=text)
    corpus = load_corpus(
        DataConfig(path=str(path), tokenizer="gpt2", cache_dir=str(tmp_path / "cache"))
    )
    cut = int(len(text) * TRAIN_FRACTION)
    assert corpus.train.dtype == np.uint16  # 50257 ids fit in 16 bits
    assert corpus.tokenizer.decode(corpus.train.tolist()) == text[:cut]
    assert corpus.tokenizer.decode(corpus.val.tolist()) == text[cut:]


def test_gpt2_unavailable_is_a_clear_error(tmp_path, monkeypatch, corpus_file):
    import tiktoken

    def offline(name):
        raise ConnectionError("no network")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(TokenizerError) as e:
        GPT2Tokenizer()
    assert "TIKTOKEN_CACHE_DIR" in str(e.value) and "--data.tokenizer=char" in str(e.value)
    with pytest.raises(DataError, match="TIKTOKEN_CACHE_DIR"):
        load_corpus(
            DataConfig(path=str(corpus_file), tokenizer="gpt2", cache_dir=str(tmp_path / "cache"))
        )


# 3. Preparing the corpus: the 90/10 split, meta.json, reuse


def test_char_split_is_first_90_percent_then_rest(tmp_path, corpus_file):
    text = corpus_file.read_text(encoding="utf-8")
    corpus = load_corpus(char_cfg(tmp_path, corpus_file))
    cut = int(len(text) * 0.9)
    assert len(corpus.train) == cut
    assert len(corpus.val) == len(text) - cut
    assert corpus.tokenizer.decode(corpus.train.tolist()) == text[:cut]
    assert corpus.tokenizer.decode(corpus.val.tolist()) == text[cut:]
    assert corpus.tokenizer.chars == sorted(set(text))
    assert corpus.train.dtype == np.uint16
    assert not corpus.train.flags.writeable  # a read-only memmap
    assert corpus.source == corpus_file


def test_prepared_folder_layout_and_meta(tmp_path, corpus_file):
    text = corpus_file.read_text(encoding="utf-8")
    sha = hashlib.sha256(corpus_file.read_bytes()).hexdigest()
    corpus = load_corpus(char_cfg(tmp_path, corpus_file))
    folder = tmp_path / "cache" / "prepared" / f"corpus-char-{sha[:16]}"
    assert prepared_folders(tmp_path) == [folder]
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "train.bin", "val.bin"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["tokenizer"] == "char"
    assert meta["source_sha256"] == sha == corpus.source_sha256
    assert meta["dtype"] == "uint16"
    assert meta["vocab_size"] == len(set(text)) == len(meta["chars"])
    # uint16: 2 bytes per id
    assert (folder / "train.bin").stat().st_size == 2 * int(len(text) * 0.9)


def test_second_load_reuses_prepared_files(tmp_path, corpus_file, monkeypatch):
    first = load_corpus(char_cfg(tmp_path, corpus_file))
    (folder,) = prepared_folders(tmp_path)
    mtimes = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

    def must_not_prepare(*args, **kwargs):
        raise AssertionError("prepare() ran again although the source and tokenizer did not change")

    monkeypatch.setattr(data.corpus, "prepare", must_not_prepare)
    second = load_corpus(char_cfg(tmp_path, corpus_file))
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == mtimes
    assert np.array_equal(second.train, first.train) and np.array_equal(second.val, first.val)
    assert second.tokenizer.chars == first.tokenizer.chars


def test_changed_source_is_prepared_again(tmp_path, corpus_file, monkeypatch):
    load_corpus(char_cfg(tmp_path, corpus_file))
    new_text = (
        corpus_file.read_text(encoding="utf-8") + "ZEBRA: a brand new line with new letters: XQJ.\n"
    )
    corpus_file.write_text(new_text, encoding="utf-8")
    calls = []
    real_prepare = data.corpus.prepare
    monkeypatch.setattr(
        data.corpus, "prepare", lambda *a, **k: calls.append(a[1]) or real_prepare(*a, **k)
    )
    corpus = load_corpus(char_cfg(tmp_path, corpus_file))
    assert calls == ["char"]
    # the old preparation is left alone, the new one sits beside it
    assert len(prepared_folders(tmp_path)) == 2
    cut = int(len(new_text) * 0.9)
    assert corpus.tokenizer.decode(corpus.val.tolist()) == new_text[cut:]
    assert "Z" in corpus.tokenizer.chars and "X" in corpus.tokenizer.chars


@pytest.mark.parametrize(
    "damage",
    [
        # cut short, odd length
        lambda folder: (folder / "train.bin").write_bytes((folder / "train.bin").read_bytes()[:-3]),
        lambda folder: (folder / "val.bin").unlink(),
        # ids beyond the vocabulary
        lambda folder: (folder / "train.bin").write_bytes(
            b"\xff" * (folder / "train.bin").stat().st_size
        ),
        lambda folder: (folder / "meta.json").write_text(
            (folder / "meta.json").read_text().replace('"uint16"', '"float77"')
        ),
    ],
    ids=["truncated-bin", "missing-bin", "ids-out-of-range", "unknown-dtype"],
)
def test_damaged_prepared_files_are_prepared_again(tmp_path, corpus_file, damage):
    first = load_corpus(char_cfg(tmp_path, corpus_file))
    expected_train, expected_val = np.array(first.train), np.array(first.val)
    (folder,) = prepared_folders(tmp_path)
    damage(folder)
    second = load_corpus(char_cfg(tmp_path, corpus_file))
    assert np.array_equal(second.train, expected_train) and np.array_equal(second.val, expected_val)


def test_damaged_meta_is_prepared_again(tmp_path, corpus_file):
    first = load_corpus(char_cfg(tmp_path, corpus_file))
    (folder,) = prepared_folders(tmp_path)
    (folder / "meta.json").write_text("{not json")
    second = load_corpus(char_cfg(tmp_path, corpus_file))
    assert json.loads((folder / "meta.json").read_text())["tokenizer"] == "char"
    assert np.array_equal(second.train, first.train)


# 4. Batches


def test_batch_targets_are_inputs_shifted_by_one():
    ids = np.arange(1000, dtype=np.uint16)
    x, y = get_batch(ids, batch_size=6, block_size=16, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (6, 16)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(y[:, :-1], x[:, 1:])
    assert torch.equal(y, x + 1)  # consecutive ids: every target is the next id
    assert torch.equal(x, x[:, :1] + torch.arange(16))  # each row is one contiguous window


def test_batch_from_corpus_matches_ids_at_its_offsets(tmp_path, corpus_file):
    corpus = load_corpus(char_cfg(tmp_path, corpus_file))
    ids = np.asarray(corpus.train, dtype=np.int64)
    B, T = 4, 32
    x, y = get_batch(corpus.train, B, T, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    starts = torch.randint(len(ids) - T, (B,), generator=g)  # the offsets get_batch drew
    for b, s in enumerate(starts.tolist()):
        assert x[b].tolist() == ids[s : s + T].tolist()
        assert y[b].tolist() == ids[s + 1 : s + T + 1].tolist()
    assert torch.equal(y[:, :-1], x[:, 1:])


def test_batch_with_exactly_one_window():
    ids = np.arange(9, dtype=np.uint16)  # block_size + 1 ids: the only window starts at 0
    x, y = get_batch(ids, batch_size=3, block_size=8, generator=torch.Generator().manual_seed(0))
    assert x.tolist() == [list(range(8))] * 3
    assert y.tolist() == [list(range(1, 9))] * 3


def test_same_seed_same_batch_different_seed_different_batch():
    ids = np.arange(5000, dtype=np.uint16)
    x1, y1 = get_batch(ids, 8, 16, torch.Generator().manual_seed(42))
    x2, y2 = get_batch(ids, 8, 16, torch.Generator().manual_seed(42))
    x3, _ = get_batch(ids, 8, 16, torch.Generator().manual_seed(43))
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, x3)
    g = torch.Generator().manual_seed(42)
    first, _ = get_batch(ids, 8, 16, g)
    second, _ = get_batch(ids, 8, 16, g)
    assert torch.equal(first, x1) and not torch.equal(second, first)  # the generator moves on


# 5. Errors the user can fix


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(DataError, match="does not exist") as e:
        load_corpus(char_cfg(tmp_path, missing))
    assert str(missing) in str(e.value) and "--data-file" in str(e.value)


def test_folder_without_usable_files(tmp_path):
    folder = tmp_path / "empty"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "notes.rst").write_text("not a .txt, .jsonl or .parquet file")
    with pytest.raises(DataError, match="holds no .txt, .jsonl or .parquet file") as e:
        load_corpus(char_cfg(tmp_path, folder))
    assert str(folder) in str(e.value) and not (tmp_path / "cache" / "prepared").exists()


@pytest.mark.parametrize("content", ["", "   \n\n\t "])
def test_empty_file(tmp_path, content):
    path = write_corpus(tmp_path / "text", text=content)
    with pytest.raises(DataError, match="is empty") as e:
        load_corpus(char_cfg(tmp_path, path))
    assert str(path) in str(e.value)


def test_binary_file_that_decodes_as_utf8(tmp_path):
    path = tmp_path / "utf16.txt"
    # every other byte is NUL: valid UTF-8, but not text
    path.write_bytes("KING:\nTo be".encode("utf-16-le"))
    with pytest.raises(DataError, match="is binary") as e:
        load_corpus(char_cfg(tmp_path, path))
    assert str(path) in str(e.value) and "--data-file" in str(e.value)


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.txt"
    # 0xE9 at offset 3 is not valid UTF-8 here
    path.write_bytes("caf\u00e9 au lait\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8") as e:
        load_corpus(char_cfg(tmp_path, path))
    assert str(path) in str(e.value) and "offset 3" in str(e.value)


def test_split_shorter_than_block_size(tmp_path):
    # 1000 chars: 900 train, 100 val
    path = write_corpus(tmp_path / "text", text="abcdefghij" * 100)
    corpus = load_corpus(char_cfg(tmp_path, path))
    check_split_lengths(corpus, block_size=99)  # val holds exactly one 100-token window
    with pytest.raises(
        DataError, match=r"val split .* has 100 tokens, fewer than block_size \+ 1 = 101"
    ) as e:
        check_split_lengths(corpus, block_size=100)
    assert "--model.block_size" in str(e.value)
    with pytest.raises(DataError, match=r"train split .* has 900 tokens"):
        check_split_lengths(corpus, block_size=900)


def test_one_character_file_is_a_data_error(tmp_path):
    # The train split of a 1-character text is empty. This must be a DataError (a one-line
    # "error:" from train.py), not numpy's "cannot mmap an empty file" ValueError.
    path = write_corpus(tmp_path / "text", text="x")
    with pytest.raises(DataError):
        corpus = load_corpus(char_cfg(tmp_path, path))
        check_split_lengths(corpus, block_size=1)


# 6. Tiny Shakespeare download, without the network


class FakeResponse(io.BytesIO):
    """What urlopen returns: a context manager with read()."""


def test_no_network_error_names_url_cache_path_and_data_file(tmp_path, monkeypatch):
    def offline(url, timeout=None):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as e:
        load_corpus(DataConfig(path="", tokenizer="char", cache_dir=str(cache)))
    message = str(e.value)
    assert TINY_SHAKESPEARE_URL in message
    assert str(cache / "tinyshakespeare.txt") in message
    assert "--data-file" in message
    assert "Temporary failure in name resolution" in message
    assert not (cache / "tinyshakespeare.txt").exists()


@pytest.mark.parametrize(
    "error", [TimeoutError("timed out"), ConnectionResetError("reset"), OSError("network down")]
)
def test_any_os_error_while_downloading_is_a_data_error(tmp_path, monkeypatch, error):
    def broken(url, timeout=None):
        raise error

    monkeypatch.setattr(urllib.request, "urlopen", broken)
    with pytest.raises(DataError, match="could not download Tiny Shakespeare") as e:
        download_tiny_shakespeare(tmp_path)
    assert str(error) in str(e.value)


def test_cached_file_with_wrong_content_is_rejected(tmp_path, monkeypatch):
    def must_not_download(url, timeout=None):
        raise AssertionError("a cached file exists; nothing should be downloaded")

    monkeypatch.setattr(urllib.request, "urlopen", must_not_download)
    cached = tmp_path / "tinyshakespeare.txt"
    cached.write_text("Not Shakespeare at all.\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"is not Tiny Shakespeare \(SHA-256\); delete it") as e:
        load_corpus(DataConfig(path="", tokenizer="char", cache_dir=str(tmp_path)))
    assert str(cached) in str(e.value)
    assert not (tmp_path / "prepared").exists()


def test_download_with_wrong_bytes_is_not_saved(tmp_path, monkeypatch):
    urls = []

    def tampered(url, timeout=None):
        urls.append(url)
        return FakeResponse(b"First Citizen:\nBefore we proceed any further, hear me speak.\n")

    monkeypatch.setattr(urllib.request, "urlopen", tampered)
    with pytest.raises(DataError, match="does not match its expected SHA-256; nothing was saved"):
        download_tiny_shakespeare(tmp_path / "cache")
    assert urls == [TINY_SHAKESPEARE_URL]
    assert not (tmp_path / "cache" / "tinyshakespeare.txt").exists()
    assert not (tmp_path / "cache" / "tinyshakespeare.txt.tmp").exists()


def test_good_download_is_saved_once_and_reused(tmp_path, monkeypatch):
    payload = make_corpus_text(min_chars=5000).encode("utf-8")
    monkeypatch.setattr(data.corpus, "TINY_SHAKESPEARE_SHA256", hashlib.sha256(payload).hexdigest())
    urls = []

    def fake(url, timeout=None):
        urls.append(url)
        return FakeResponse(payload)

    monkeypatch.setattr(urllib.request, "urlopen", fake)
    cfg = DataConfig(path="", tokenizer="char", cache_dir=str(tmp_path / "cache"))
    first = load_corpus(cfg)
    second = load_corpus(cfg)
    assert urls == [TINY_SHAKESPEARE_URL]  # downloaded once, then read from the cache
    assert (tmp_path / "cache" / "tinyshakespeare.txt").read_bytes() == payload
    assert first.source == second.source == tmp_path / "cache" / "tinyshakespeare.txt"
    cut = int(len(payload.decode()) * 0.9)
    assert second.tokenizer.decode(second.train.tolist()) == payload.decode()[:cut]


def test_gpt2s_vocabulary_size_is_written_once_and_true():
    """GPT2_VOCAB_SIZE (data/tokenizer.py) is tiktoken's count, and the model's default
    vocabulary.
    """
    from conftest import gpt2_encoding_or_skip

    from data.tokenizer import GPT2_VOCAB_SIZE
    from model import ModelConfig

    assert gpt2_encoding_or_skip().n_vocab == GPT2_VOCAB_SIZE == ModelConfig().vocab_size == 50257
