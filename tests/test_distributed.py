"""Tests for "Scale past one device": train.py under torchrun (DistributedDataParallel over Gloo on
CPU).

A 2-process job must train exactly the model that one process trains with grad_accum_steps=2: the
global batch is the same windows, split over ranks instead of micro-steps. Every run trains the tiny
preset on a synthetic corpus in tmp_path, with its cache and run folders there too.
"""

import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO_ROOT, assert_close, tiny_argv, write_corpus
from test_resume import FORKSERVER_PRELOAD

import harness.training.checkpoints
import harness.training.evaluation
import harness.training.runtime
import train
from configs import load_config
from harness.stopping import StopFlag
from harness.training.checkpoints import read_checkpoint

pytestmark = [
    pytest.mark.skipif(
        not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
        reason="this torch build has no torch.distributed with the Gloo backend",
    ),
    pytest.mark.usefixtures("one_cpu_thread"),  # see conftest: tiny models run faster on one thread
]

STEPS = 10
DDP = [
    f"--train.max_steps={STEPS}",
    "--train.eval_interval=5",
    "--train.eval_batches=2",
    "--train.log_interval=1",
]
ATOL = 1e-5
# Muon orthogonalises in bfloat16: a float32 rounding difference (all-reduce order) can move a bf16
# value by one step
MUON_ATOL = 1e-4


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def by_step(metrics: list[dict], key: str) -> dict[int, float]:
    return {m["step"]: m[key] for m in metrics if key in m}


def cpu_runtime(rank: int, world_size: int) -> harness.training.runtime.Runtime:
    return harness.training.runtime.Runtime(
        device=torch.device("cpu"), autocast_dtype=None, why="", rank=rank, world_size=world_size
    )


def torchrun(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=2 train.py args...` from the repository root
    (--standalone picks a free port).
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "train.py",
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


# 1. Splitting the global batch


@pytest.mark.parametrize(("world_size", "accum"), [(2, 1), (2, 2), (4, 1)])
def test_batches_split_over_ranks_equal_batches_split_over_micro_steps(world_size, accum):
    """Ranks x micro-steps of one global step see the same windows, in the same order, as one
    process with more micro-steps.
    """
    ids = torch.randint(0, 65, (5000,), generator=torch.Generator().manual_seed(0)).numpy()
    cfg = load_config(["--config", "tiny", f"--train.grad_accum_steps={accum}"])
    one = load_config(["--config", "tiny", f"--train.grad_accum_steps={accum * world_size}"])
    per_rank, generators = [], []
    for rank in range(world_size):
        generators.append(torch.Generator().manual_seed(7))
        per_rank.append(
            train.draw_micro_batches(ids, cfg, cpu_runtime(rank, world_size), generators[-1])
        )
    single_gen = torch.Generator().manual_seed(7)
    single = train.draw_micro_batches(ids, one, cpu_runtime(0, 1), single_gen)
    split = [mb for rank_batches in per_rank for mb in rank_batches]
    assert len(split) == len(single) == accum * world_size
    for (x, y), (x1, y1) in zip(split, single, strict=True):
        assert x.shape == y.shape == (cfg.train.batch_size, cfg.model.block_size)
        assert torch.equal(x, x1) and torch.equal(y, y1)
    # the ranks train on different windows
    assert not torch.equal(per_rank[0][0][0], per_rank[1][0][0])
    # every rank's generator moved on exactly like the single process's: the next step stays in sync
    for gen in generators:
        assert torch.equal(gen.get_state(), single_gen.get_state())


# 2. A 2-process Gloo job against one process with gradient accumulation


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("text"))


@pytest.fixture(scope="module")
def ddp_job(tmp_path_factory, corpus) -> dict:
    root = tmp_path_factory.mktemp("torchrun")
    argv = tiny_argv(root, corpus, *DDP)
    proc = torchrun(*argv)
    return {
        "root": root,
        "corpus": corpus,
        "argv": argv,
        "proc": proc,
        "run_dir": root / "runs" / "tiny",
    }


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory, corpus, one_cpu_thread) -> list[dict]:
    """The same run in one process: batch_size sequences x 2 micro-steps per optimizer step."""
    root = tmp_path_factory.mktemp("single")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            harness.training.evaluation, "HEATMAP_MAX_TOKENS", 4
        )  # small heatmaps: the figures are not under test, and are most of an evaluation's time
        train.train(load_config(tiny_argv(root, corpus, *DDP, "--train.grad_accum_steps=2")))
    return read_metrics(root / "runs" / "tiny")


def ddp_metrics(ddp_job) -> list[dict]:
    assert (ddp_job["run_dir"] / "metrics.jsonl").exists(), ddp_job["proc"].stderr[-3000:]
    return read_metrics(ddp_job["run_dir"])


def test_under_torchrun_on_gpus_each_process_takes_its_own_card_and_nccl(monkeypatch):
    """The CUDA branch of joining torchrun's group, which only a machine with GPUs runs: rank 3 on a
    node's second card (LOCAL_RANK 1) trains on cuda:1, selects it before joining, and joins over
    NCCL. CUDA and the group are faked here."""
    joined, selected = [], []
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    monkeypatch.setattr(harness.training.runtime, "has_triton", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: bool(joined))
    monkeypatch.setattr(
        torch.distributed, "init_process_group", lambda backend: joined.append(backend)
    )
    monkeypatch.setattr(torch.distributed, "get_backend", lambda group=None: joined[-1])
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        runtime = harness.training.runtime.setup_runtime(load_config(["--config", "tiny"]).train)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    assert runtime.device == torch.device("cuda:1") and selected == [1] and joined == ["nccl"]
    assert (runtime.rank, runtime.world_size, runtime.is_main) == (3, 4, False)
    assert runtime.why == "auto: CUDA found; rank 3 of 4 (nccl)"
    # what one GPU gets, each process gets
    assert runtime.autocast_dtype == torch.bfloat16 and runtime.use_compile


def test_the_stop_flag_is_reduced_on_the_process_s_own_device(monkeypatch):
    """NCCL reduces only tensors on the process's GPU: the tensor that tells every process a stop
    was asked is made on runtime.device (a meta device stands in for the GPU: the fake all_reduce
    records where the tensor lives, then ends the call). One process asks nothing of the device: a
    GPU would wait for its queued work at every step."""
    seen = []

    class Reduced(Exception):
        pass

    def all_reduce(tensor):
        seen.append(tensor.device)
        raise Reduced

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    stop = StopFlag("")
    meta = harness.training.runtime.Runtime(
        device=torch.device("meta"), autocast_dtype=None, why="", rank=1, world_size=2
    )
    with pytest.raises(Reduced):
        harness.training.runtime.stop_asked(stop, meta)
    assert seen == [torch.device("meta")]
    alone = dataclasses.replace(meta, rank=0, world_size=1)
    assert harness.training.runtime.stop_asked(stop, alone) is False and seen == [
        torch.device("meta")
    ]
    stop.signum = signal.SIGINT
    assert harness.training.runtime.stop_asked(stop, alone) is True


def test_torchrun_job_exits_cleanly(ddp_job):
    proc = ddp_job["proc"]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_torchrun_training_losses_match_gradient_accumulation(ddp_job, accumulated):
    ddp = ddp_metrics(ddp_job)
    got, want = by_step(ddp, "loss/train_step"), by_step(accumulated, "loss/train_step")
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    steps = sorted(want)
    assert_close(
        torch.tensor([got[s] for s in steps]),
        torch.tensor([want[s] for s in steps]),
        atol=ATOL,
        msg="loss/train_step",
    )
    assert by_step(ddp, "lr") == by_step(accumulated, "lr")
    # it did learn: the comparison is not between two untrained models
    assert want[STEPS] < want[1] - 0.3


@pytest.mark.parametrize("key", ["loss/train", "loss/val"])
def test_torchrun_eval_losses_match_gradient_accumulation(ddp_job, accumulated, key):
    got, want = by_step(ddp_metrics(ddp_job), key), by_step(accumulated, key)
    assert sorted(got) == sorted(want) == [0, 5, STEPS]
    steps = sorted(want)
    assert_close(
        torch.tensor([got[s] for s in steps]),
        torch.tensor([want[s] for s in steps]),
        atol=ATOL,
        msg=key,
    )


def test_torchrun_writes_one_set_of_files(ddp_job):
    run_dir = ddp_job["run_dir"]
    names = sorted(p.name for p in run_dir.iterdir())
    events = [n for n in names if n.startswith("events.out.tfevents.")]
    assert len(events) == 1, names  # rank 1 opened no SummaryWriter
    # .lock: rank 0's hold
    assert sorted(set(names) - set(events)) == [
        ".lock",
        "best.pt",
        "ckpt.pt",
        "config.json",
        "metrics.jsonl",
    ]
    # no second run folder, nothing moved aside
    assert sorted(p.name for p in (ddp_job["root"] / "runs").iterdir()) == ["tiny"]
    metrics = ddp_metrics(ddp_job)
    # a training, evaluation or probe line
    keys = [(m["step"], "loss/val" in m, "Probe_attn/entropy" in m) for m in metrics]
    probes = STEPS + 1  # rank 0 probes every step of so short a run, and the last
    assert len(keys) == len(set(keys)) == STEPS + 3 + probes, (
        "a step was logged twice: more than one rank writes metrics.jsonl"
    )
    ckpt = read_checkpoint(run_dir / "ckpt.pt")
    assert ckpt["step"] == STEPS
    # the plain model's weights, not the DDP wrapper's
    assert not any(key.startswith("module.") for key in ckpt["model"])


def test_torchrun_prints_one_progress_and_summary(ddp_job):
    out = ddp_job["proc"].stdout
    assert out.count("done in ") == 1, out[-3000:]
    assert out.count("device: cpu") == 1 and "rank 0 of 2 (gloo)" in out
    for step in (0, 5, STEPS):  # the console line of each evaluation, once
        assert out.count(f"step {step:5d} | train") == 1, out[-3000:]


def test_torchrun_resume_continues_the_run(ddp_job, tmp_path):
    root = tmp_path / "resumed"
    run_dir = root / "runs" / "tiny"
    shutil.copytree(ddp_job["run_dir"], run_dir)
    argv = [
        *tiny_argv(root, ddp_job["corpus"], *DDP),
        "--data.cache_dir",
        str(ddp_job["root"] / "cache"),
    ]
    proc = torchrun(*argv, "--resume", "--train.max_steps=14")
    assert f"resuming {run_dir} from step {STEPS}" in proc.stdout, proc.stderr[-3000:]
    metrics = read_metrics(run_dir)
    # continues, no step twice
    assert [m["step"] for m in metrics if "loss/train_step" in m] == list(range(1, 15))
    assert [m["step"] for m in metrics if "loss/val" in m] == [0, 5, STEPS, 14]
    first = ddp_metrics(ddp_job)
    assert metrics[: len(first)] == first  # the first run's lines are kept as they were
    assert read_checkpoint(run_dir / "ckpt.pt")["step"] == 14
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2


def test_gradient_accumulation_matches_one_big_batch(tmp_path, corpus, accumulated):
    """batch_size 16 in one micro-step trains on the same windows as 8 x 2 micro-steps: the same
    losses, to float error.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.training.evaluation, "HEATMAP_MAX_TOKENS", 4)
        train.train(load_config(tiny_argv(tmp_path, corpus, *DDP, "--train.batch_size=16")))
    got, want = (
        by_step(read_metrics(tmp_path / "runs" / "tiny"), "loss/train_step"),
        by_step(accumulated, "loss/train_step"),
    )
    steps = sorted(want)
    assert sorted(got) == steps
    assert_close(
        torch.tensor([got[s] for s in steps]),
        torch.tensor([want[s] for s in steps]),
        atol=ATOL,
        msg="loss/train_step",
    )


# 3. Resuming a 2-process job with dropout: each rank must get its own random stream back


def ddp_rank(rank: int, port: int, argv: list[str], stop_after: int, log: str) -> None:
    """One rank of a 2-process Gloo job, set up the way torchrun sets it up (environment
    variables).
    """
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1), os.dup2(fd, 2)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # small heatmaps: the figures are not under test
    harness.training.evaluation.HEATMAP_MAX_TOKENS = 4
    if stop_after and rank == 0:  # Ctrl-C reaches rank 0 during step index stop_after - 1
        real, calls = train.draw_micro_batches, [0]

        def draw(*args, **kwargs):
            calls[0] += 1
            if calls[0] == stop_after:
                os.kill(os.getpid(), signal.SIGINT)
            return real(*args, **kwargs)

        train.draw_micro_batches = draw
    # how often this rank's step skipped the gradient all-reduce (DDP.no_sync), to show the branch
    # ran
    entered = [0]
    real_no_sync = torch.nn.parallel.DistributedDataParallel.no_sync

    def no_sync(self):
        entered[0] += 1
        return real_no_sync(self)

    torch.nn.parallel.DistributedDataParallel.no_sync = no_sync
    code = train.main(argv)
    print(f"no_sync entered {entered[0]} times")
    sys.exit(code)


def no_sync_count(log: Path) -> int:
    (line,) = [line for line in log.read_text().splitlines() if line.startswith("no_sync entered ")]
    return int(line.split()[2])


def forkserver() -> multiprocessing.context.BaseContext:
    """A multiprocessing context whose server has imported torch, torch._dynamo (imported by
    torch.optim) and train.py.

    The preload list is the one tests/test_resume.py gives: whichever module starts the server first
    sets it.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return ctx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp_job(argv: list[str], log_dir: Path, stop_after: int = 0) -> list[int]:
    """Both ranks as processes forked from a server that has imported train.py: a start skips
    importing torch again.
    """
    ctx, port = forkserver(), free_port()
    procs = [
        ctx.Process(
            target=ddp_rank, args=(r, port, argv, stop_after, str(log_dir / f"rank{r}.txt"))
        )
        for r in range(2)
    ]
    for proc in procs:
        proc.start()
    # the first rank to finish
    multiprocessing.connection.wait([proc.sentinel for proc in procs], timeout=120)
    # the other follows within seconds, unless it waits forever in a collective for a rank that died
    for proc in procs:
        proc.join(15)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    return [proc.exitcode for proc in procs]


def test_resumed_ddp_run_with_dropout_equals_the_uninterrupted_one(tmp_path, corpus):
    """Stopped after step 6 and resumed, a 2-process run with dropout must log the numbers of the
    run that was never stopped.

    Each rank seeds its dropout with seed + rank; resuming has to give every rank its own stream
    back.
    """
    args = [*DDP, "--model.dropout=0.1"]
    full_root, resumed_root = tmp_path / "full", tmp_path / "resumed"
    for folder in (full_root, resumed_root):
        folder.mkdir()
    assert run_ddp_job(tiny_argv(full_root, corpus, *args), full_root) == [0, 0]
    argv = tiny_argv(resumed_root, corpus, *args)
    # rank 0 got the SIGINT; rank 1 stopped with it, cleanly
    assert run_ddp_job(argv, resumed_root, stop_after=6) == [130, 0]
    assert read_checkpoint(resumed_root / "runs" / "tiny" / "ckpt.pt")["step"] == 6
    assert run_ddp_job([*argv, "--resume"], resumed_root) == [0, 0]
    full, resumed = (
        read_metrics(full_root / "runs" / "tiny"),
        read_metrics(resumed_root / "runs" / "tiny"),
    )
    assert [m["step"] for m in resumed] == [m["step"] for m in full]
    for key in ("loss/train_step", "loss/val"):
        got, want = by_step(resumed, key), by_step(full, key)
        assert sorted(got) == sorted(want)
        # logged by the first, interrupted job: same as the full run
        before = [s for s in sorted(want) if s <= 6]
        assert [got[s] for s in before] == [want[s] for s in before], key
        after = [s for s in sorted(want) if s > 6]
        got_after, want_after = (
            torch.tensor([got[s] for s in after]),
            torch.tensor([want[s] for s in after]),
        )
        assert_close(
            got_after,
            want_after,
            atol=1e-6,
            msg=f"{key} at steps {after}, after resuming from step 6:",
        )


# 4. Muon (the char and base presets' optimizer) with gradient accumulation inside each rank


def test_ddp_with_muon_and_accumulation_equals_one_process(tmp_path, corpus):
    """2 ranks x 2 micro-steps with Muon train the model of 1 process x 4 micro-steps: the first
    micro-step of each rank runs under DDP's no_sync (no all-reduce), so the gradients add up
    locally and are averaged once, on the last."""
    args = [*DDP, "--train.optimizer=muon"]
    ddp_root, one_root = tmp_path / "ddp", tmp_path / "one"
    ddp_root.mkdir()
    assert run_ddp_job(
        tiny_argv(ddp_root, corpus, *args, "--train.grad_accum_steps=2"), ddp_root
    ) == [0, 0]
    for rank in range(2):
        # one micro-step without all-reduce per step, on every rank
        assert no_sync_count(ddp_root / f"rank{rank}.txt") == STEPS
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(harness.training.evaluation, "HEATMAP_MAX_TOKENS", 4)
        train.train(load_config(tiny_argv(one_root, corpus, *args, "--train.grad_accum_steps=4")))
    ddp, one = read_metrics(ddp_root / "runs" / "tiny"), read_metrics(one_root / "runs" / "tiny")
    for key in ("loss/train_step", "loss/val"):
        got, want = by_step(ddp, key), by_step(one, key)
        assert sorted(got) == sorted(want) and len(want) >= 3
        steps = sorted(want)
        got_t, want_t = (
            torch.tensor([got[s] for s in steps]),
            torch.tensor([want[s] for s in steps]),
        )
        assert_close(got_t, want_t, atol=MUON_ATOL, msg=f"muon {key}")
    assert by_step(ddp, "lr") == by_step(one, "lr")
    # it learned
    assert by_step(one, "loss/train_step")[STEPS] < by_step(one, "loss/train_step")[1] - 0.3
