"""harness/folders.py: a live run's folder is never taken, only runs are moved aside, and unwritable
outputs are one line.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, assert_one_line_error, error_of, tiny_argv, write_corpus

import sweep
import train
from harness.folders import OutputError, claim_run_folder, is_run_folder, writable_folder

HOLD_LOCK = """
import sys
from pathlib import Path
from harness.folders import FolderLock
lock = FolderLock(Path(sys.argv[1]))
print("locked", flush=True)
sys.stdin.read()  # hold the folder until the test closes our stdin
"""


def hold(folder: Path) -> subprocess.Popen:
    """Another process that holds `folder` as a live run does (harness.folders imports no torch: it
    starts fast).
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(folder)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_live_runs_folder_is_refused_to_a_second_run(
    tmp_path, corpus_file, one_cpu_thread, capsys
):
    """Two runs with one --run-name: the second used to move the first one's folder aside while it
    was still writing.
    """
    run_dir = tmp_path / "runs" / "dup"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 10, "loss/val": 3.0}\n')
    (run_dir / "ckpt.pt").write_bytes(b"the live run's checkpoint")
    holder = hold(run_dir)
    before = sorted(p.name for p in run_dir.iterdir())
    try:
        for resume in (False, True):
            with pytest.raises(
                OutputError, match=rf"{run_dir} is in use by a live run \(process {holder.pid}\)"
            ):
                claim_run_folder(run_dir, resume)
        argv = tiny_argv(tmp_path, corpus_file, "--run-name", "dup", "--train.max_steps=1")
        assert train.main(argv) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"error: {run_dir} is in use by a live run (process {holder.pid}); wait for it to end "
            "or stop it, or choose another --run-name"
        ]
        assert sorted(p.name for p in run_dir.iterdir()) == before and not list(
            tmp_path.glob("runs/dup.old-*")
        )
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    lock, moved = claim_run_folder(run_dir, resume=False)  # the holder ended: its lock went with it
    assert (
        moved.name.startswith("dup.old-")
        and (moved / "ckpt.pt").read_bytes() == b"the live run's checkpoint"
    )
    assert [p.name for p in run_dir.iterdir()] == [".lock"] and (
        run_dir / ".lock"
    ).read_text() == str(os.getpid())
    lock.release()


def test_only_a_run_is_moved_aside(tmp_path):
    """--runs-dir . --run-name model used to rename the project's own model/ package."""
    package = tmp_path / "model"
    package.mkdir()
    (package / "__init__.py").write_text("x = 1\n")
    with pytest.raises(
        OutputError,
        match=rf"{package} exists and is not a run folder, .* choose another --run-name or "
        r"--runs-dir",
    ):
        claim_run_folder(package, resume=False)
    assert [p.name for p in package.iterdir()] == ["__init__.py"] and sorted(
        p.name for p in tmp_path.iterdir()
    ) == ["model"]
    # config.json alone is not enough: an export (or any project) has one
    exported = tmp_path / "export"
    exported.mkdir()
    (exported / "config.json").write_text('{"model_type": "gpt2"}')
    assert not is_run_folder(exported)
    run = tmp_path / "crashed-at-start"  # a run that got no further than its config
    run.mkdir()
    (run / "config.json").write_text('{"model": {}, "data": {}, "train": {}}')
    comparison = tmp_path / "compare-tiny"  # a comparison: its runs are one level down
    (comparison / "tiny").mkdir(parents=True)
    (comparison / "tiny" / "metrics.jsonl").write_text("")
    assert is_run_folder(run) and is_run_folder(comparison)


def test_an_earlier_run_is_moved_aside_and_an_empty_folder_is_reused(tmp_path):
    run_dir = tmp_path / "runs" / "exp"
    lock, moved = claim_run_folder(run_dir, resume=False)
    assert moved is None and run_dir.is_dir()
    lock.release()
    (run_dir / "metrics.jsonl").write_text("first\n")
    first_mtime = run_dir.stat().st_mtime
    lock, moved = claim_run_folder(run_dir, resume=False)
    lock.release()
    assert moved.name.startswith("exp.old-") and (moved / "metrics.jsonl").read_text() == "first\n"
    assert [p.name for p in run_dir.iterdir()] == [".lock"]
    (run_dir / "metrics.jsonl").write_text("second\n")
    os.utime(run_dir, (first_mtime, first_mtime))  # the same timestamp: the names would collide
    lock, again = claim_run_folder(run_dir, resume=False)
    lock.release()
    assert again.name == moved.name + "-1"
    assert (again / "metrics.jsonl").read_text() == "second\n" and (
        moved / "metrics.jsonl"
    ).read_text() == "first\n"


def test_outputs_that_cannot_be_written_are_one_line(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    with pytest.raises(OutputError, match=rf"--runs-dir {a_file} is a file, not a folder"):
        claim_run_folder(a_file / "exp", resume=False)
    with pytest.raises(OutputError, match=rf"{a_file} is a file, not a run folder"):
        claim_run_folder(a_file, resume=False)
    with pytest.raises(
        OutputError, match=rf"cannot write into --out {a_file}/deeper/out: Not a directory"
    ):
        writable_folder(a_file / "deeper" / "out", "--out")
    with pytest.raises(OutputError, match="cannot write into --runs-dir .*: File name too long"):
        writable_folder(tmp_path / ("r" * 300), "--runs-dir")
    assert writable_folder(tmp_path / "new" / "out", "--out").is_dir()


def test_a_live_sweeps_folder_is_refused_naming_the_flag_sweep_py_takes(
    tmp_path, corpus_file, capsys
):
    """A second sweep into a live sweep's folder was told to "choose another --run-name", a flag
    sweep.py does not take.
    """
    folder = tmp_path / "runs" / "sweep-tiny"
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text("{}")
    holder = hold(folder)
    try:
        proc = error_of(
            sweep.main, tiny_argv(tmp_path, corpus_file, "--lrs", "3e-3", "--seeds", "1"), capsys
        )
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert_one_line_error(
        proc,
        f"{folder} is in use by a live run (process {holder.pid}); wait for it to end or stop it, "
        "or choose another --runs-dir",
    )
    # nothing moved aside, nothing begun
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "sweep.json"]
    # a folder of the user's own, by chance where a sweep would go
    mine = tmp_path / "mine" / "sweep-tiny"
    write_corpus(mine, "notes.txt", "mine")
    proc = error_of(
        sweep.main,
        tiny_argv(
            tmp_path, corpus_file, "--lrs", "3e-3", "--seeds", "1", "--runs-dir", str(mine.parent)
        ),
        capsys,
    )
    assert_one_line_error(
        proc,
        f"{mine} exists and is not a run folder",
        "so it is left alone; choose another --runs-dir",
    )
