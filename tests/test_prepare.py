"""Tests for the corpus at scale: data/sources.py (files, JSONL, parquet, folders), data/chunks.py
(safe cuts) and data/prepare.py (streaming, documents, the split, bad input, interruption,
memory)."""

import base64
import codecs
import importlib.util
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    REPO_ROOT,
    assert_one_line_error,
    error_of,
    gpt2_encoding_or_skip,
    import_or_skip,
    make_corpus_text,
    tiny_argv,
    write_corpus,
)

import data.chunks
import data.prepare
from configs import DataConfig
from data.chunks import make_tasks
from data.corpus import DataError, load_corpus
from data.files import replace_folder, sha256_of, sha256_of_bytes
from data.prepare import prepare
from data.sources import CHUNK_CHARS, find_source, read_text
from harness.cli import run_command
from harness.scoring import text_ids

TEXT = (
    make_corpus_text(min_chars=20_000)
    + "Caf\u00e9 \u4f60\u597d\u3002\n\u4e16\u754c   \n\n\n  <|endoftext|>\t\r\nend"
)


def cfg(tmp_path: Path, path: Path, tokenizer: str = "char", **kwargs) -> DataConfig:
    return DataConfig(
        path=str(path), tokenizer=tokenizer, cache_dir=str(tmp_path / "cache"), **kwargs
    )


def nothing_prepared(tmp_path: Path) -> bool:
    """No prepared folder, whole or half-written, is left in the cache."""
    prepared = tmp_path / "cache" / "prepared"
    return not prepared.exists() or not any(prepared.iterdir())


def ids_of(folder: Path, split: str) -> list[int]:
    meta = json.loads((folder / "meta.json").read_text())
    return np.fromfile(folder / f"{split}.bin", dtype=meta["dtype"]).tolist()


# 1. Safe cuts: ids equal to the whole text's


def test_random_texts_cut_anywhere_safe_keep_gpt2_ids():
    """Texts made of the characters that GPT-2's pre-tokenizer treats specially (runs of spaces and
    newlines, \\r, a contraction, Unicode spaces, CJK, an emoji) cut into tasks of 1 to 9
    characters: the pieces encode as the whole."""
    enc = gpt2_encoding_or_skip()
    rng = random.Random(0)
    alphabet = [
        *"ab cd\n\n  \t\r'.,!9\u00e9\u4e2d",
        "'ll",
        " 's",
        "\u3000",
        "\xa0",
        "\x1c",
        "\u2028",
        "\U0001f600",
        "  \n",
        "\n ",
    ]
    cuts = 0
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        tasks = list(make_tasks([("train", text, True, False)], rng.randint(1, 9)))
        pieces = [piece for _, task, _ in tasks for piece, _ in task]
        assert "".join(pieces) == text
        assert sum((enc.encode_ordinary(p) for p in pieces), []) == enc.encode_ordinary(text), (
            pieces
        )
        cuts += len(pieces) - 1
    assert cuts > 500  # the texts were cut often, not passed whole


@pytest.mark.parametrize("tokenizer", ["gpt2", "char"])
def test_file_cut_into_many_chunks_tokenizes_as_the_whole_text(tmp_path, tokenizer):
    """One text file (CRLF line ends included), prepared 300 characters at a time: the same ids as
    encoding its first 90 % and last 10 % whole, as the corpus always was, and the same as
    load_corpus's own preparation."""
    path = tmp_path / "corpus.txt"
    path.write_bytes(TEXT.replace("\n", "\r\n", 50).encode())
    text = path.read_text(encoding="utf-8")  # Python's newlines: \r\n read as \n
    if tokenizer == "gpt2":
        enc = gpt2_encoding_or_skip().encode_ordinary
    else:
        chars = sorted(set(text))
        enc = lambda t: [chars.index(c) for c in t]  # noqa: E731
    meta = prepare(
        find_source(path, "--data-file"),
        tokenizer,
        "key",
        tmp_path / "small",
        chunk_chars=300,
        workers=3,
    )
    cut = int(len(text) * 0.9)
    assert ids_of(tmp_path / "small", "train") == enc(text[:cut])
    assert ids_of(tmp_path / "small", "val") == enc(text[cut:])
    assert meta["tokens"] == {"train": len(enc(text[:cut])), "val": len(enc(text[cut:]))}
    assert meta["documents"] == 1 and meta["sources"][0]["size"] == path.stat().st_size
    corpus = load_corpus(cfg(tmp_path, path, tokenizer))
    assert corpus.train.tolist() == enc(text[:cut]) and corpus.val.tolist() == enc(text[cut:])


# 2. Documents: a folder of .txt, .jsonl and .parquet, joined by the end-of-text


def write_documents(folder: Path) -> list[str]:
    """A folder of every kind of source; returns its documents in the order they are read (sorted
    paths: b/d.jsonl before b/deep/c.txt, as "." sorts before "e")."""
    pa, pq = (
        import_or_skip("pyarrow", "parquet sources need it"),
        import_or_skip("pyarrow.parquet", "parquet sources need it"),
    )
    (folder / "b" / "deep").mkdir(parents=True)
    (folder / "a.txt").write_text("First file.\nTwo lines.")
    (folder / "b" / "deep" / "c.txt").write_text("A story in a subfolder. " * 30)
    (folder / "b" / "notes.rst").write_text("not a source: neither .txt, .jsonl nor .parquet")
    lines = [
        '{"text": "Once upon a time"}',
        "",
        '{"text": "", "id": 2}',
        '{"text": "the end.\\n", "id": 3}',
    ]
    (folder / "b" / "d.jsonl").write_text("\n".join(lines) + "\n")
    pq.write_table(
        pa.table({"text": ["Row one.", "Row two, \u00e9t\u00e9."], "n": [1, 2]}),
        folder / "e.parquet",
        row_group_size=1,
    )
    return [
        "First file.\nTwo lines.",
        "Once upon a time",
        "the end.\n",
        "A story in a subfolder. " * 30,
        "Row one.",
        "Row two, \u00e9t\u00e9.",
    ]


def test_folder_documents_are_joined_by_gpt2_end_of_text(tmp_path):
    enc = gpt2_encoding_or_skip()
    docs = write_documents(tmp_path / "corpus")
    corpus = load_corpus(cfg(tmp_path, tmp_path / "corpus", "gpt2"))
    # each document after one <|endoftext|>
    joined = [[50256, *enc.encode_ordinary(d)] for d in docs]
    # the last 10 %: at least one document
    assert corpus.train.tolist() == sum(joined[:5], []) and corpus.val.tolist() == joined[5]
    assert len(corpus.train) + len(corpus.val) == sum(
        len(enc.encode_ordinary(d)) for d in docs
    ) + len(docs)
    meta = json.loads(
        next((tmp_path / "cache" / "prepared").glob("corpus-gpt2-*/meta.json")).read_text()
    )
    assert meta["documents"] == 6 and meta["val_documents"] == 1
    assert meta["sources"][0]["files"] == 4 and len(meta["sources"][0]["size_mtime_sha256"]) == 64


def test_documents_with_the_char_tokenizer_and_a_separate_val_file(tmp_path):
    docs = write_documents(tmp_path / "corpus")
    (tmp_path / "val.jsonl").write_text('{"text": "Valid."}\n{"text": "Two."}\n')
    corpus = load_corpus(cfg(tmp_path, tmp_path / "corpus", val_path=str(tmp_path / "val.jsonl")))
    tok = corpus.tokenizer
    # a blank line before each document
    assert tok.decode(corpus.train.tolist()) == "".join("\n\n" + d for d in docs)
    assert tok.decode(corpus.val.tolist()) == "\n\nValid.\n\nTwo."
    assert tok.chars == sorted(set("".join(docs) + "\n" + "Valid.Two."))
    again = load_corpus(cfg(tmp_path, tmp_path / "corpus", val_path=str(tmp_path / "val.jsonl")))
    # reused
    assert (
        np.array_equal(again.val, corpus.val)
        and len(list((tmp_path / "cache" / "prepared").iterdir())) == 1
    )


# 3. Bad input: one line naming the file and where, nothing left in the cache


def bad(tmp_path: Path, name: str, content: bytes) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir(exist_ok=True)
    (folder / "a.txt").write_text("A good document comes first.")
    (folder / name).write_bytes(content)
    return folder


@pytest.mark.parametrize(
    "name, content, needles",
    [
        (
            "b.jsonl",
            b'{"text": "fine"}\n{"text": "broken\n',
            ["b.jsonl", "line 2 is not valid JSON"],
        ),
        (
            "b.jsonl",
            b'{"text": "fine"}\n\n{"content": "x"}\n',
            ["b.jsonl", "line 3 has no field 'text'", "--data.text_field"],
        ),
        ("b.jsonl", b'{"text": 7}\n', ["line 1: field 'text' holds int"]),
        (
            "b.jsonl",
            b'{"text": "ok"}\n{"text": "caf\xe9"}\n',
            ["b.jsonl", "line 2 is not UTF-8", "offset 28"],
        ),
        ("b.txt", b"fine text\nthen caf\xe9", ["b.txt", "not UTF-8", "offset 18"]),
        ("b.txt", "KING:".encode("utf-16-le"), ["b.txt", "is binary", "offset 1"]),
        ("b.parquet", b"PAR1 not really", ["b.parquet", "is not a parquet file"]),
    ],
    ids=[
        "broken-json",
        "missing-field",
        "not-a-string",
        "jsonl-not-utf8",
        "txt-not-utf8",
        "binary",
        "not-parquet",
    ],
)
def test_bad_input_is_one_line_naming_the_file(tmp_path, name, content, needles):
    # pyarrow is optional (requirements-dev.txt):
    if name.endswith(".parquet") and importlib.util.find_spec("pyarrow") is None:
        # without it the file is never opened, and the line says what to install
        needles = [name, "needs pyarrow: pip install pyarrow"]
    folder = bad(tmp_path, name, content)
    with pytest.raises(DataError) as e:
        load_corpus(cfg(tmp_path, folder))
    assert "\n" not in str(e.value) and f"(in --data-file {folder})" in str(e.value)
    for needle in needles:
        assert needle in str(e.value)
    assert nothing_prepared(tmp_path)


def test_parquet_without_the_column_and_without_pyarrow(tmp_path, monkeypatch):
    pa, pq = (
        import_or_skip("pyarrow", "parquet sources need it"),
        import_or_skip("pyarrow.parquet", "parquet sources need it"),
    )
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"content": ["a", "b"]}), path)
    with pytest.raises(
        DataError,
        match=r"rows.parquet has no column 'text' \(it has content\); "
        r"name it with --data.text_field",
    ):
        load_corpus(cfg(tmp_path, path))
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
        with pytest.raises(DataError, match="needs pyarrow: pip install pyarrow"):
            load_corpus(cfg(tmp_path, path, text_field="content"))
    assert nothing_prepared(tmp_path)
    # the column named: one document each split
    corpus = load_corpus(cfg(tmp_path, path, text_field="content"))
    assert (
        corpus.tokenizer.decode(corpus.train.tolist()) == "\n\na"
        and corpus.tokenizer.decode(corpus.val.tolist()) == "\n\nb"
    )


def test_unreadable_file_and_one_document(tmp_path):
    folder = bad(tmp_path, "placeholder.txt", b"")
    (folder / "gone.txt").symlink_to(tmp_path / "nowhere.txt")  # a file that cannot be opened
    with pytest.raises(
        DataError, match=r"cannot read .*gone.txt \(in --data-file .*\): No such file"
    ):
        load_corpus(cfg(tmp_path, folder))
    (folder / "gone.txt").unlink()
    # the empty file is no document
    with pytest.raises(DataError, match="holds 1 document; the split needs 2"):
        load_corpus(cfg(tmp_path, folder))
    assert nothing_prepared(tmp_path)


# 4. Interruption and memory


def slow_preparation(tmp_path: Path) -> str:
    """A Python program that prepares a text 200 characters a task, each task held 20 ms: long
    enough to be stopped.
    """
    path = tmp_path / "corpus.txt"
    path.write_text(make_corpus_text(min_chars=200_000))
    return f"""
import sys, time
import data.prepare
from data.sources import find_source
from data.tokenizer import CharTokenizer
from harness.cli import run_command
encode = CharTokenizer.encode_array
CharTokenizer.encode_array = lambda self, text: time.sleep(0.02) or encode(self, text)
data.prepare.PROGRESS_DELAY_S = 0
folder = {str(tmp_path / "cache" / "prepared" / "corpus")!r}
sys.exit(
    run_command(
        lambda argv: data.prepare.prepare(
            find_source(data.prepare.Path({str(path)!r}), "-"),
            "char",
            "k",
            data.prepare.Path(folder),
            chunk_chars=200,
            workers=1,
        ),
        [],
    )
)
"""


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP], ids=["sigterm", "sighup: the terminal closed"]
)
def test_a_stop_signal_while_preparing_stops_and_keeps_nothing(tmp_path, sig):
    """SIGHUP used to end the process at once, by its default action, and its half-written folder
    stayed for good.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", slow_preparation(tmp_path)], cwd=REPO_ROOT, stderr=subprocess.PIPE
    )
    seen, deadline = b"", time.monotonic() + 60
    # the progress bar of the second pass, moving
    while b"tokens/s" not in seen and time.monotonic() < deadline:
        if select.select([proc.stderr], [], [], 1)[0]:
            seen += os.read(proc.stderr.fileno(), 4096)
    assert b"encoding corpus.txt" in seen and b"tokens/s" in seen, seen.decode(errors="replace")
    proc.send_signal(sig)
    rest = proc.communicate(timeout=30)[1]
    assert proc.returncode == 128 + sig, (proc.returncode, rest)
    lines = (seen + rest).decode().replace("\r", "\n").strip().splitlines()
    assert lines[-1].startswith(
        f"{sig.name} while preparing the data: stopped"
    ) and "Traceback" not in "".join(lines), lines
    assert nothing_prepared(tmp_path)  # neither the folder nor its temporary twin


def test_what_a_killed_preparation_left_is_removed_by_the_next(tmp_path):
    """A preparation killed outright (SIGKILL) cannot clean up: its <folder>.tmp<pid> stays, and the
    <folder>.old<pid> it was removing. The next one removes those of processes that no longer run,
    and leaves a live writer's twin alone."""
    path = tmp_path / "corpus.txt"
    path.write_text(make_corpus_text(min_chars=20_000))
    folder = tmp_path / "cache" / "prepared" / "corpus"
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead, alive = (
        folder.with_name(f"corpus.tmp{gone.stdout.strip()}"),
        folder.with_name(f"corpus.tmp{os.getppid()}"),
    )
    for twin in (dead, alive):
        twin.mkdir(parents=True)
        (twin / "train.bin").write_bytes(b"\0" * 1000)  # half-written tokens
    # another corpus's twin: not this folder's to judge
    (folder.parent / f"corpus-other.tmp{gone.stdout.strip()}").mkdir()
    # a damaged folder put aside, not yet removed
    (folder.parent / f"corpus.old{gone.stdout.strip()}").mkdir()
    prepare(find_source(path, "-"), "char", "k", folder, workers=1)
    assert sorted(p.name for p in folder.parent.iterdir()) == sorted(
        ["corpus", alive.name, f"corpus-other.tmp{gone.stdout.strip()}"]
    )


@pytest.fixture
def restore_signal_handlers():
    """run_command ignores SIGINT and SIGTERM as its process ends; in pytest's process, later tests'
    subprocesses would inherit that, so the handlers are put back."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("restore_signal_handlers")
def test_ctrl_c_while_preparing_exits_130_and_keeps_nothing(tmp_path, capsys):
    path = tmp_path / "corpus.txt"
    path.write_text(make_corpus_text(min_chars=100_000))
    folder = tmp_path / "cache" / "prepared" / "corpus"
    encode, calls = data.prepare.encode_task, []

    def encode_and_count(*args):
        calls.append(1)
        if len(calls) == 5:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the second pass
        time.sleep(0.001)
        return encode(*args)

    data.prepare.encode_task = encode_and_count
    try:
        code = run_command(
            lambda argv: prepare(
                find_source(path, "-"), "char", "k", folder, chunk_chars=1000, workers=1
            ),
            [],
        )
    finally:
        data.prepare.encode_task = encode
    assert code == 130 and "SIGINT while preparing the data: stopped" in capsys.readouterr().err
    assert (
        5 <= len(calls) < 100
        and nothing_prepared(tmp_path)
        and threading.current_thread() is threading.main_thread()
    )
    # the next run prepares it whole
    prepare(find_source(path, "-"), "char", "k", folder, chunk_chars=1000, workers=1)
    text = path.read_text()
    chars = sorted(set(text))
    assert sorted(p.name for p in folder.parent.iterdir()) == ["corpus"]
    assert ids_of(folder, "val") == [chars.index(c) for c in text[int(len(text) * 0.9) :]]


@pytest.mark.usefixtures("restore_signal_handlers")
def test_a_stop_signal_raises_at_a_check_and_one_after_the_last_reaches_the_caller():
    passed_on = []
    signal.signal(signal.SIGTERM, lambda signum, frame: passed_on.append(signum))
    with pytest.raises(data.prepare.Interrupted, match="SIGTERM while preparing"):
        with data.prepare.stopped_by_signals() as check:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)  # the handler has run, and raised nothing
            check()
    assert passed_on == []
    with data.prepare.stopped_by_signals():
        os.kill(os.getpid(), signal.SIGTERM)  # after the last check: the data was whole
        time.sleep(0.01)
    assert passed_on == [signal.SIGTERM]


def test_stop_signals_at_random_moments_never_hang_the_thread_pool(tmp_path):
    """The handler used to raise wherever the main thread was, inside the pool's own code too: a
    lock left held there kept the worker, and the process, waiting forever. With the GIL handed
    over every microsecond, that hung within the first few dozen stops."""
    path = tmp_path / "corpus.txt"
    path.write_text(make_corpus_text(min_chars=40_000))
    program = f"""
import random, signal, sys, threading
from pathlib import Path
import data.prepare
from data.sources import find_source
sys.setswitchinterval(1e-6)
random.seed(0)
encode, main = data.prepare.encode_task, threading.main_thread().ident
source = find_source(Path({str(path)!r}), "-")
stopped, prepared = 0, Path({str(tmp_path / "cache" / "prepared")!r})
for run in range(150):
    calls, at = [], random.randrange(1, 30)

    def encode_and_stop(*args):
        calls.append(1)
        if len(calls) == at:
            to = random.choice([main, None])  # None: the timer's own thread
            stop = lambda: signal.pthread_kill(to or threading.get_ident(), signal.SIGTERM)
            threading.Timer(random.random() / 500, stop).start()
        return encode(*args)

    data.prepare.encode_task = encode_and_stop
    try:
        data.prepare.prepare(source, "char", "k", prepared / str(run), chunk_chars=50)
    except data.prepare.Interrupted:
        stopped += 1
print(stopped, "stopped")
"""
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.stdout == "150 stopped\n", done.stderr[-2000:]
    assert nothing_prepared(tmp_path)


@pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads the peak memory from Linux's /proc"
)
def test_memory_stays_flat_in_the_corpus_size(tmp_path):
    """A 24 MB text prepared in a fresh process: its peak resident memory stays far below the 14x of
    the file that reading it whole used to take (the ids alone, as a Python list, took 8 bytes a
    character)."""
    path = tmp_path / "big.txt"
    block = make_corpus_text(min_chars=1 << 20)
    with open(path, "w") as f:
        for i in range(24):
            # some variety, so that no block is the last one repeated
            f.write(block.replace("the", f"the{i}"))
    size = path.stat().st_size
    program = f"""
from pathlib import Path
from data.prepare import prepare
from data.sources import find_source
meta = prepare(
    find_source(Path({str(path)!r}), "-"), "char", "k", Path({str(tmp_path / "out")!r}), workers=2
)
# VmHWM: this process's peak, not the parent's (ru_maxrss survives exec)
status = Path("/proc/self/status").read_text()
print(sum(meta["tokens"].values()), int(status.split("VmHWM:")[1].split()[0]) * 1024)
"""
    proc = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    tokens, peak = map(int, proc.stdout.split())
    assert tokens == len(path.read_text())
    assert peak < 96 * 2**20 < 14 * size / 3, (
        f"peak {peak / 2**20:.0f} MiB for a {size / 2**20:.0f} MiB text"
    )


# 5. Odd contents: one line from the first pass, or read as a careful user expects


@pytest.mark.parametrize("tokenizer", ["char", "gpt2"])
def test_a_lone_surrogate_in_jsonl_is_one_line_from_the_first_pass(tmp_path, tokenizer):
    """ "\\ud800" is valid JSON, half of a character: it passed the first pass and crashed the
    encoder thread.
    """
    if tokenizer == "gpt2":
        gpt2_encoding_or_skip()
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"text": "ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab"}\n{"text": "\\ud83d\\ude00 '
        'fine"}\n{"text": "\\ud800 x"}\n'
    )
    with pytest.raises(
        DataError,
        match=r"s.jsonl line 3: field 'text' holds a lone UTF-16 surrogate "
        r"\('\\ud800' at character 0\)",
    ):
        load_corpus(cfg(tmp_path, path, tokenizer))
    assert nothing_prepared(tmp_path)


def test_a_deeply_nested_json_line_is_one_line_error(tmp_path, capsys):
    """json.loads raised RecursionError, which the reader did not catch: a traceback from
    train.py.
    """
    import train

    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine"}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    proc = error_of(train.main, tiny_argv(tmp_path, path), capsys)
    assert_one_line_error(
        proc, f"--data-file {path} line 2 nests arrays or objects too deeply to read"
    )
    assert nothing_prepared(tmp_path)


def test_a_leading_byte_order_mark_is_not_text(tmp_path):
    """Notepad's BOM became a character of the char vocabulary (3 tokens of a gpt2 document), and
    score.py --file or sample.py --prompt-file with such a file was refused: "1 character(s) not in
    the training vocabulary: '\\ufeff'"."""
    text = make_corpus_text(min_chars=5000)
    path = tmp_path / "notepad.txt"
    path.write_bytes(codecs.BOM_UTF8 + text.replace("\n", "\r\n").encode())
    corpus = load_corpus(cfg(tmp_path, path))
    assert (
        corpus.tokenizer.chars == sorted(set(text))
        and corpus.tokenizer.decode(corpus.train.tolist() + corpus.val.tolist()) == text
    )
    folder = tmp_path / "docs"
    write_corpus(folder, "a.txt", "\ufeffFirst, and a mark \ufeff inside, which is a character.")
    (folder / "b.jsonl").write_bytes(codecs.BOM_UTF8 + b'{"text": "Second."}\n')
    docs = load_corpus(cfg(tmp_path, folder))
    assert (
        docs.tokenizer.decode(docs.train.tolist())
        == "\n\nFirst, and a mark \ufeff inside, which is a character."
    )
    assert docs.tokenizer.decode(docs.val.tolist()) == "\n\nSecond."
    assert read_text(path, "--prompt-file") == text
    ids, _ = text_ids(corpus.tokenizer, path, None)  # score.py --file
    assert ids == corpus.tokenizer.encode(text)


def test_dictionary_encoded_and_string_view_parquet_columns_are_text(tmp_path):
    """pandas' category columns are written dictionary-encoded, newer writers use string_view: both
    were refused as "holds dictionary<values=string, ...>, not text"."""
    pa, pq = (
        import_or_skip("pyarrow", "parquet sources need it"),
        import_or_skip("pyarrow.parquet", "parquet sources need it"),
    )
    for name, column in (
        ("category", pa.array(["Once.", "Twice.", "Once."]).dictionary_encode()),
        ("view", pa.array(["Once.", "Twice.", "Once."], type=pa.string_view())),
    ):
        pq.write_table(pa.table({"text": column}), tmp_path / f"{name}.parquet")
        corpus = load_corpus(cfg(tmp_path, tmp_path / f"{name}.parquet"))
        assert (
            corpus.tokenizer.decode(corpus.train.tolist()) == "\n\nOnce.\n\nTwice."
            and corpus.tokenizer.decode(corpus.val.tolist()) == "\n\nOnce."
        )
    pq.write_table(pa.table({"text": pa.array([[1], [2]])}), tmp_path / "lists.parquet")
    with pytest.raises(DataError, match=r"column 'text' holds list<\w+: int64>, not text"):
        load_corpus(cfg(tmp_path, tmp_path / "lists.parquet"))


# 6. Text without a safe place: cut anywhere (char) or forced within a bound (gpt2), in linear time


def line_of(n: int, letters: str = "abcdefghij", seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choices(letters, k=n))


def task_sizes(monkeypatch) -> list[tuple[int, int]]:
    """The characters of every task that preparation hands to an encoder from now on, and of its
    longest piece.
    """
    sizes, encode = [], data.prepare.encode_task

    def encode_and_measure(tokenizer, pieces, *args):
        sizes.append((sum(len(p) for p, _ in pieces), max(len(p) for p, _ in pieces)))
        return encode(tokenizer, pieces, *args)

    monkeypatch.setattr(data.prepare, "encode_task", encode_and_measure)
    return sizes


@pytest.mark.parametrize("tokenizer", ["char", "gpt2"])
def test_a_line_without_a_safe_place_is_encoded_in_bounded_tasks(tmp_path, monkeypatch, tokenizer):
    """The issue's reproduction, made small: a line of letters with no space was held and encoded as
    one task per split (all its memory at once, a bar that jumped from 0 to 90 %, a Ctrl-C that
    waited for it). The char tokenizer cuts anywhere; gpt2 forces a cut once no safe place came
    within FORCE_AFTER characters."""
    enc = gpt2_encoding_or_skip() if tokenizer == "gpt2" else None
    path = tmp_path / "line.txt"
    path.write_text(line_of(1_600_000))
    sizes = task_sizes(monkeypatch)
    meta = prepare(find_source(path, "-"), tokenizer, "k", tmp_path / "out", workers=2)
    bound = CHUNK_CHARS if tokenizer == "char" else CHUNK_CHARS + data.chunks.FORCE_AFTER + 2
    assert (
        sum(n for n, _ in sizes) == 1_600_000
        and max(n for n, _ in sizes) <= bound
        and len(sizes) >= 6
    ), sizes
    # the forced tasks are cut in pieces, so that no pre-token is longer than FORCED_CHARS
    if tokenizer == "gpt2":
        assert max(longest for _, longest in sizes[:4]) == data.chunks.FORCED_CHARS, sizes
    decode = enc.decode if enc else (lambda ids: "".join(meta["chars"][i] for i in ids))
    assert (
        decode(ids_of(tmp_path / "out", "train") + ids_of(tmp_path / "out", "val"))
        == path.read_text()
    )


def test_forced_cuts_fall_where_tiktoken_splits_else_at_the_limit():
    """Letters next to digits and symbols (base64) have edges between pre-tokens: a cut there keeps
    the ids of the whole. One run of letters (DNA) has none: it is cut at the limit, and only the
    ids next to each cut differ."""
    enc = gpt2_encoding_or_skip()
    encoded = base64.b64encode(random.Random(1).randbytes(225_000)).decode()  # 300,000 characters
    pieces = [
        p for _, task, _ in make_tasks([("train", encoded, True, False)], 1000) for p, _ in task
    ]
    assert (
        "".join(pieces) == encoded
        and all(500 <= len(p) <= 1000 for p in pieces[:-1])
        and len(pieces) >= 30
    )
    assert len(pieces[-1]) <= 1000 + data.chunks.FORCE_AFTER + 2  # the rest of the document, whole
    assert sum((enc.encode_ordinary(p) for p in pieces), []) == enc.encode_ordinary(encoded)
    dna = line_of(300_000, "ACGT")
    pieces = [p for _, task, _ in make_tasks([("train", dna, True, False)], 1000) for p, _ in task]
    assert (
        [len(p) for p in pieces[:-1]] == [1000] * (len(pieces) - 1)
        and "".join(pieces) == dna
        and len(pieces) >= 30
    )
    whole, cut = enc.encode_ordinary(dna), sum((enc.encode_ordinary(p) for p in pieces), [])
    # the same tokens away from the cuts
    assert spans_far_from(whole, enc, pieces) == spans_far_from(cut, enc, pieces)
    assert whole != cut


def test_the_forced_cuts_tool_counts_the_ids_each_cut_changes(monkeypatch, capsys):
    """python -m tools.forced_cuts (docs/own-text.md) on texts of the test's own, 300,000 characters
    cut 1,000 a task past
    the limit: base64 keeps every id of the whole text's encoding, one run of letters changes a few
    next to each cut."""
    import tools.forced_cuts

    gpt2_encoding_or_skip()
    encoded = base64.b64encode(random.Random(2).randbytes(225_000)).decode()
    monkeypatch.setattr(
        tools.forced_cuts,
        "texts",
        lambda: {"base64": encoded, "letters_only": line_of(300_000, "acgt")},
    )
    found = tools.forced_cuts.main(["--chunk-chars", "1000"])
    assert (
        found["base64"]["cuts"] >= 30
        and found["base64"]["differ_whole"] == found["base64"]["differ_cut"] == 0
    )
    letters = found["letters_only"]
    assert letters["cuts"] >= 30 and 0 < letters["cuts_changing_ids"] <= letters["cuts"]
    assert 0 < letters["differ_cut"] <= 10 * letters["cuts"]
    assert letters["differ_per_cut"] == letters["differ_cut"] / letters["cuts"]
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].startswith(
        f"letters_only: 300,000 characters, {letters['cuts']} cuts ({letters['cuts_changing_ids']} "
        "change ids)"
    )


def spans_far_from(
    ids: list[int], enc, pieces: list[str], margin: int = 24
) -> list[tuple[int, int]]:
    """The (start, end) character spans of the tokens that lie more than `margin` characters from
    every cut.
    """
    cuts = np.cumsum([len(p) for p in pieces])[:-1]
    # ASCII text: one byte a character
    ends = np.cumsum([len(enc.decode_single_token_bytes(i)) for i in ids])
    starts = np.concatenate([[0], ends[:-1]])
    far = [
        np.abs(cuts - s).min() > margin and np.abs(cuts - e).min() > margin
        for s, e in zip(starts, ends, strict=True)
    ]
    return [(int(s), int(e)) for s, e, f in zip(starts, ends, far, strict=True) if f]


def test_text_without_a_safe_place_is_searched_once_not_for_every_piece(monkeypatch):
    """Each new piece of a document without a safe place made safe_cut search all the text held so
    far again (and copied it): 5 MB took 2.5 s, 20 MB 35 s. Words between double spaces have spaces
    but no safe place."""
    scanned, real = [], data.chunks.SAFE_CUT

    class Counting:
        def finditer(self, text, pos=0, endpos=sys.maxsize):
            scanned.append(min(endpos, len(text)) - pos)
            return real.finditer(text, pos, endpos)

        def search(self, text, pos=0, endpos=sys.maxsize):
            scanned.append(min(endpos, len(text)) - pos)
            return real.search(text, pos, endpos)

    monkeypatch.setattr(data.chunks, "SAFE_CUT", Counting())
    text = "  ".join(line_of(300_000).split("a"))
    stream = [("train", text[i : i + 1000], i == 0, False) for i in range(0, len(text), 1000)]
    pieces = [p for _, task, _ in make_tasks(stream, 1000) for p, _ in task]
    assert sum(scanned) < 3 * len(text), (
        f"{sum(scanned):,} characters searched for a text of {len(text):,}"
    )
    assert "".join(pieces) == text and len(pieces) >= 50 and max(map(len, pieces[:-1])) <= 1000


# 7. Two preparations of one new corpus at once (sweep.py --jobs 2, two train.py started together)

TOGETHER = """
import hashlib, sys, time
from pathlib import Path
from types import SimpleNamespace
import data.prepare
from data.corpus import load_corpus
replace, me, root = data.prepare.replace_folder, sys.argv[1], Path(sys.argv[2])


# each waits for the other before renaming: the two renames collide every time
def replace_together(tmp, folder, *args):
    (folder.parent / f"ready{me}").touch()
    deadline = time.monotonic() + 10  # the other failed before it: go on alone
    while len(list(folder.parent.glob("ready*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    return replace(tmp, folder, *args)


data.prepare.replace_folder = replace_together
for attempt in range(ROUNDS):
    # a DataConfig's fields: configs would import torch, 2 s of start-up a process
    cache_dir = str(root / f"cache{attempt}")
    corpus = load_corpus(
        SimpleNamespace(
            path=str(root / "corpus.txt"),
            val_path="",
            text_field="text",
            tokenizer="char",
            cache_dir=cache_dir,
            workers=1,
        )
    )
    print(
        hashlib.sha256(corpus.train.tobytes() + corpus.val.tobytes()).hexdigest(),
        len(corpus.train),
        len(corpus.val),
    )
"""


def test_two_preparations_of_one_new_corpus_at_once_both_read_the_same_tokens(tmp_path):
    """Two processes preparing the same new corpus both reach the rename at once, three times over
    (once where a damaged folder stands). The second used to delete the folder that the first had
    just renamed into place and was reading back ("cannot be read back after writing it"), or failed
    on its own rename ("Directory not empty"); now it keeps the first's folder and drops its own."""
    path = write_corpus(tmp_path, text=make_corpus_text(min_chars=5_000))
    program = TOGETHER.replace("ROUNDS", "3")
    # the second time, over a damaged folder
    damaged = tmp_path / "cache1" / "prepared" / f"corpus-char-{sha256_of(path)[:16]}"
    damaged.mkdir(parents=True)
    (damaged / "meta.json").write_text("{}")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", program, str(i), str(tmp_path)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], [err for _, err in outputs]
    # the same text prepared by one process, in a cache of its own
    alone = load_corpus(cfg(tmp_path, path))
    digest = sha256_of_bytes(alone.train.tobytes() + alone.val.tobytes())
    expected = f"{digest} {len(alone.train)} {len(alone.val)}"
    assert [out.split("\n")[:-1] for out, _ in outputs] == [[expected] * 3] * 2
    # one folder each time, and nothing half-written or put aside beside it
    for attempt in range(3):
        prepared = tmp_path / f"cache{attempt}" / "prepared"
        assert sorted(p.name for p in prepared.iterdir()) == [
            f"corpus-char-{alone.source_sha256[:16]}",
            "ready0",
            "ready1",
        ]


def test_a_folder_in_place_is_kept_when_whole_and_replaced_when_not(tmp_path):
    """replace_folder with the destination already there: a whole one (another writer's, finished
    first) stays and the new copy is removed; a refused one (damaged, older) is replaced, and the
    copy put aside is removed too."""
    folder, tmp = tmp_path / "corpus", tmp_path / "corpus.tmp1"
    for name, text in ((folder, "first"), (tmp, "second")):
        name.mkdir()
        (name / "train.bin").write_text(text)
    assert replace_folder(tmp, folder, lambda f: (f / "train.bin").read_text() == "first") is False
    assert [p.name for p in tmp_path.iterdir()] == ["corpus"] and (
        folder / "train.bin"
    ).read_text() == "first"
    tmp.mkdir()
    (tmp / "train.bin").write_text("third")
    assert replace_folder(tmp, folder, lambda f: False) is True
    assert [p.name for p in tmp_path.iterdir()] == ["corpus"] and (
        folder / "train.bin"
    ).read_text() == "third"
