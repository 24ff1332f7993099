"""Tests for data/identity.py: which files a folder names (links, hidden names, special files) and
the identity of a corpus's text, which names its preparation and ties a run to it: the same however
its path is typed, refused when changed."""

import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_corpus_text, tiny_argv, write_corpus

import data.corpus
import data.prepare
import train
from configs import DataConfig, load_config
from data.corpus import DataError, check_split_lengths, load_corpus
from data.prepare import prepare
from data.sources import find_source, read_text
from harness.experiments.head_ablation import run_batches
from harness.training.checkpoints import CheckpointError, read_checkpoint, read_resumable
from harness.training.evaluation import make_eval_set
from model import GPT

pytestmark = pytest.mark.usefixtures("one_cpu_thread")


def cfg(tmp_path: Path, path: Path | str, **kwargs) -> DataConfig:
    return DataConfig(path=str(path), tokenizer="char", cache_dir=str(tmp_path / "cache"), **kwargs)


def documents(folder: Path, n: int = 3, chars: int = 3000) -> Path:
    """A folder of n small text files, each a document."""
    for i in range(n):
        write_corpus(folder, f"part{i}.txt", make_corpus_text(chars, seed=i))
    return folder


def names(folder: Path, flag: str = "--data-file") -> list[str]:
    return [f.relative_to(folder).as_posix() for f in find_source(folder, flag).files]


def counting_prepare(monkeypatch) -> list[Path]:
    """Every folder load_corpus prepares from now on."""
    calls, real = [], data.corpus.prepare
    monkeypatch.setattr(data.corpus, "prepare", lambda *a, **k: calls.append(a[3]) or real(*a, **k))
    return calls


# 1. A folder's identity: its text, not how its path is typed, where it lies or when it was touched


def test_a_folder_is_the_same_corpus_however_its_path_is_typed_copied_or_touched(
    tmp_path, monkeypatch
):
    """The key used to hold the folder's path as typed and every file's modification time: a
    relative path, a path through "..", a copy or a bare touch prepared the whole corpus again and
    made its runs unresumable."""
    folder = documents(tmp_path / "f")
    first = load_corpus(cfg(tmp_path, folder))
    calls = counting_prepare(monkeypatch)
    monkeypatch.chdir(tmp_path)
    relative = load_corpus(cfg(tmp_path, "f"))
    dotted = load_corpus(cfg(tmp_path, Path("f") / ".." / "f"))
    (tmp_path / "here").symlink_to(folder)
    linked = load_corpus(cfg(tmp_path, "here"))
    os.utime(folder / "part1.txt", ns=(1, 1))  # touched: same bytes, another modification time
    touched = load_corpus(cfg(tmp_path, folder))
    shutil.copytree(folder, tmp_path / "copy")
    copied = load_corpus(cfg(tmp_path, tmp_path / "copy"))
    # none prepared again: the copy finds the folder prepared under the original's name by its key
    assert calls == []
    for corpus in (relative, dotted, linked, touched, copied):
        assert corpus.source_sha256 == first.source_sha256
        assert np.array_equal(corpus.train, first.train) and np.array_equal(corpus.val, first.val)
    # a changed text
    (tmp_path / "copy" / "part2.txt").write_text(
        make_corpus_text(3000, seed=2).replace("king", "kong")
    )
    changed = load_corpus(cfg(tmp_path, tmp_path / "copy"))
    assert changed.source_sha256 != first.source_sha256 and len(calls) == 1
    moved = tmp_path / "copy" / "part2.txt"
    # the same bytes under another name: another corpus (the order changes)
    moved.rename(tmp_path / "copy" / "renamed.txt")
    assert load_corpus(cfg(tmp_path, tmp_path / "copy")).source_sha256 not in (
        first.source_sha256,
        changed.source_sha256,
    )


def test_a_run_trained_on_a_folder_resumes_from_another_spelling_of_its_path(tmp_path, monkeypatch):
    """The reproduction: train on a folder, then resume from another working folder with a relative
    path; it was
    refused: "ckpt.pt was trained on another text; resume with the same --data-file"."""
    folder = documents(tmp_path / "f")
    argv = tiny_argv(
        tmp_path, folder, "--train.max_steps=2", "--train.eval_interval=2", "--run-name", "f"
    )
    train.train(load_config(argv))
    monkeypatch.chdir(folder.parent)
    resumed = [
        *tiny_argv(
            tmp_path, Path("f"), "--train.max_steps=4", "--train.eval_interval=2", "--run-name", "f"
        ),
        "--resume",
    ]
    assert train.train(load_config(resumed))["stopped_at"] is None
    assert read_checkpoint(tmp_path / "runs" / "f" / "ckpt.pt")["step"] == 4
    # and it was not prepared again
    assert len(list((tmp_path / "cache" / "prepared").iterdir())) == 1


def test_inspect_attentions_ablation_refuses_a_changed_corpus_before_preparing_it(tmp_path):
    """--ablate rebuilt the run's evaluation batches from whatever the corpus held now: the leak gap
    of another text, without a word, and the new text prepared into the cache. It refuses as
    score.py does, and prepares nothing."""
    path = write_corpus(tmp_path / "text")
    run = load_config(tiny_argv(tmp_path, path, "--no-mask"))
    corpus = load_corpus(run.data)
    run = dataclasses.replace(
        run, model=dataclasses.replace(run.model, vocab_size=corpus.tokenizer.vocab_size)
    )
    checkpoint = {"config": run.to_dict(), "source_sha256": corpus.source_sha256}
    batches = run_batches(GPT(run.model), checkpoint, corpus.tokenizer)
    # the run's own evaluation batches
    expected = make_eval_set(corpus, corpus.tokenizer, run).honest
    assert [(x.tolist(), p) for x, _, p in batches] == [
        (x.tolist(), p) for x, _, p in expected
    ] and batches
    # the change: the text reversed, the same characters
    path.write_text(path.read_text()[::-1])
    prepared = sorted((tmp_path / "cache" / "prepared").iterdir())
    with pytest.raises(DataError, match=f"{path} has changed since the run trained on it"):
        run_batches(GPT(run.model), checkpoint, corpus.tokenizer)
    # nothing prepared on the way
    assert sorted((tmp_path / "cache" / "prepared").iterdir()) == prepared


# 2. Which files a folder holds


def test_links_to_folders_are_followed_and_each_folder_is_read_once(tmp_path):
    """rglob did not follow links to folders (it follows links to files): a linked folder's
    documents were left out without a word. They are read now; a loop back up, or a second link to
    the same folder, reads nothing twice."""
    folder, other = documents(tmp_path / "sl", n=2), documents(tmp_path / "other", n=1)
    (folder / "linked").symlink_to(other)
    # a second link to the same folder: its files are already in
    (folder / "again").symlink_to(other)
    (other / "up").symlink_to(folder)  # a loop: other/up/linked/up/... would never end
    # a file reached twice: "part1-link.txt" sorts first
    (folder / "part1-link.txt").symlink_to(folder / "part1.txt")
    assert names(folder) == ["again/part0.txt", "part0.txt", "part1-link.txt"]
    corpus = load_corpus(cfg(tmp_path, folder))
    # three documents, each after a blank line
    assert corpus.tokenizer.decode(corpus.train.tolist()).count("\n\n") >= 3


def test_hidden_files_and_folders_are_not_documents(tmp_path):
    """A notebook's .ipynb_checkpoints copy of a document would sit in train and val at once; .git
    holds no corpus.
    """
    folder = documents(tmp_path / "f", n=2)
    for hidden in (
        ".git/notes.txt",
        ".ipynb_checkpoints/part0-checkpoint.txt",
        ".hidden.txt",
        "sub/.DS_Store.txt",
    ):
        write_corpus((folder / hidden).parent, Path(hidden).name, "not a document")
    write_corpus(folder / "sub", "kept.txt", "a document in a subfolder")
    assert names(folder) == ["part0.txt", "part1.txt", "sub/kept.txt"]
    lone = tmp_path / "lone"
    write_corpus(lone / ".git", "only.txt", "hidden")
    with pytest.raises(
        DataError,
        match=r"holds no .txt, .jsonl or .parquet file \(hidden ones skipped\)",
    ):
        find_source(lone, "--data-file")
    # named itself: read
    assert find_source(folder / ".hidden.txt", "--data-file").files == (folder / ".hidden.txt",)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_fifo_in_a_corpus_folder_is_refused_by_name_not_read(tmp_path):
    """The first pass opened the FIFO and waited for ever. Now it is named before anything is
    read.
    """
    folder = documents(tmp_path / "f", n=2)
    os.mkfifo(folder / "stream.txt")
    with pytest.raises(
        DataError,
        match=r"stream.txt \(in --data-file .*\) is a FIFO: move it out of the folder",
    ):
        find_source(folder, "--data-file")
    with pytest.raises(DataError, match="is a FIFO"):
        load_corpus(cfg(tmp_path, folder))


# 3. A file changed while it is prepared


@pytest.mark.parametrize("change", ["append", "truncate"])
def test_a_file_changed_during_preparation_stops_it_and_keeps_nothing(
    tmp_path, monkeypatch, change
):
    """The key and meta.json's sizes came from before reading: a file truncated or appended to
    during the encoding pass gave a run a split nobody asked for, and meta.json recorded the old
    size."""
    path = write_corpus(tmp_path / "text", text=make_corpus_text(40_000))
    encode, calls = data.prepare.encode_task, []

    def encode_while_written(*args):
        if not calls:
            with open(path, "a" if change == "append" else "r+") as f:
                if change == "append":
                    f.write(make_corpus_text(5000, seed=1))
                else:
                    f.truncate(100)
        calls.append(1)
        return encode(*args)

    monkeypatch.setattr(data.prepare, "encode_task", encode_while_written)
    with pytest.raises(
        DataError, match=f"{path} changed while it was being prepared; nothing was kept"
    ):
        load_corpus(cfg(tmp_path, path))
    assert not any((tmp_path / "cache" / "prepared").iterdir())
    monkeypatch.undo()
    corpus = load_corpus(cfg(tmp_path, path))  # prepared again, whole, from the file as it is now
    assert len(corpus.train) + len(corpus.val) == len(path.read_text())


# 4. What the prepared folder and the messages say


def test_a_hand_edited_meta_json_is_not_trusted(tmp_path):
    """docs/own-text.md: anything amiss means preparing again. A permuted vocabulary (still valid
    JSON, ids in range) decoded every id as another character, and token counts edited along with an
    emptied .bin were believed."""
    path = write_corpus(tmp_path / "text")
    text = path.read_text()
    load_corpus(cfg(tmp_path, path))
    (folder,) = (tmp_path / "cache" / "prepared").iterdir()
    meta = json.loads((folder / "meta.json").read_text())
    meta["chars"] = meta["chars"][1:] + meta["chars"][:1]
    (folder / "meta.json").write_text(json.dumps(meta))
    corpus = load_corpus(cfg(tmp_path, path))
    assert corpus.tokenizer.decode(corpus.val.tolist()) == text[int(len(text) * 0.9) :]
    meta = json.loads((folder / "meta.json").read_text())
    meta["tokens"]["train"] = 0
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "train.bin").write_bytes(b"")
    assert len(load_corpus(cfg(tmp_path, path)).train) == int(len(text) * 0.9)


def test_a_short_val_source_is_named_in_the_error(tmp_path):
    """The error named the --data-file for a --data.val_path that was too short."""
    path, val = (
        write_corpus(tmp_path / "text"),
        write_corpus(tmp_path / "val", "short.txt", "KING:\nToo short."),
    )
    corpus = load_corpus(cfg(tmp_path, path, val_path=str(val)))
    with pytest.raises(
        DataError, match=f"the val split of {val} has 16 tokens, fewer than block_size"
    ):
        check_split_lengths(corpus, block_size=32)


def test_a_missing_prompt_or_score_file_is_offered_only_what_those_flags_read(tmp_path):
    """--prompt-file and --file read one text file: the hint offered a .jsonl or .parquet file, or a
    folder.
    """
    with pytest.raises(DataError) as e:
        read_text(tmp_path / "nonexistent", "--prompt-file")
    expected = (
        f"--prompt-file {tmp_path / 'nonexistent'} does not exist; "
        "give the path of a UTF-8 text file"
    )
    assert str(e.value) == expected


def test_resuming_a_synthetic_source_with_other_settings_names_them(tmp_path):
    """The induction preset has no text: "trained on another text; resume with the same --data-file"
    sent the user after a file. The settings that differ are named instead."""
    argv = [
        "--config",
        "induction",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--device",
        "cpu",
        "--train.max_steps=1",
    ]
    saved = load_config(argv)
    run_dir = saved.run_dir
    run_dir.mkdir(parents=True)
    torch.save(
        {
            "model": {},
            "config": saved.to_dict(),
            "tokenizer": {},
            "step": 0,
            "source_sha256": "other",
        },
        run_dir / "ckpt.pt",
    )
    wanted = load_config([*argv, f"--data.min_segment={saved.data.min_segment - 1}"])
    with pytest.raises(CheckpointError) as e:
        read_resumable(wanted, "this")
    assert f"data.min_segment {saved.data.min_segment} vs {saved.data.min_segment - 1}" in str(
        e.value
    )
    assert "text" not in str(e.value) and "--data-file" not in str(e.value)


def test_preparation_records_the_resolved_path_and_a_seal(tmp_path, monkeypatch):
    folder = documents(tmp_path / "f", n=2)
    monkeypatch.chdir(tmp_path)
    meta = prepare(find_source(Path("f"), "--data-file"), "char", "k", tmp_path / "out")
    assert (
        meta["sources"][0]["path"] == str(folder.resolve())
        and meta["format"] == data.prepare.FORMAT_VERSION
    )
    written = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert len(written.pop("checksum")) == 64 and written == meta
