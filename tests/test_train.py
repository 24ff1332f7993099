"""Tests for train.py: the learning-rate schedule, the helpers, a smoke run of tiny.toml, and user
errors.

Every run trains on a synthetic corpus in tmp_path, with its cache and run folders there too.
"""

import json
import math
import platform
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    assert_close,
    assert_one_line_error,
    gpt2_encoding_or_skip,
    run_script,
    tiny_argv,
    write_corpus,
)

import harness.cli
import harness.training.evaluation
import harness.training.optim
import harness.training.runlog
import harness.training.runtime
import train
from configs import ConfigError, TrainConfig, load_config
from data.corpus import DataError
from data.tokenizer import TokenizerError
from harness.experiments.profiling import training_step
from harness.training.checkpoints import CheckpointError
from harness.training.step import TrainingError
from model import GPT, ModelConfig

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

SMOKE_STEPS = 20
# a few steps: enough to check files and folders
SHORT = ["--train.max_steps=2", "--train.warmup_steps=1"]


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def eval_lines(metrics: list[dict]) -> list[dict]:
    return [m for m in metrics if "loss/val" in m]


def quiet_main(argv: list[str], capsys) -> dict:
    summary = train.train(load_config(argv))
    capsys.readouterr()  # the console lines are not under test here
    return summary


# 1. Learning-rate schedule


# 100 decay steps after warmup
SCHEDULE = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, max_steps=111)


def test_lr_rises_linearly_through_warmup():
    lrs = [harness.training.optim.lr_at(step, SCHEDULE) for step in range(10)]
    assert lrs == pytest.approx([1e-4 * (step + 1) for step in range(10)], rel=1e-12)
    steps = [b - a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert steps == pytest.approx([1e-4] * 9, rel=1e-9)  # equal increments: a straight line


def test_lr_at_end_of_warmup_middle_and_last_step():
    # step == warmup_steps: the peak
    assert harness.training.optim.lr_at(10, SCHEDULE) == pytest.approx(1e-3, rel=1e-12)
    # halfway down the cosine
    assert harness.training.optim.lr_at(60, SCHEDULE) == pytest.approx((1e-3 + 1e-4) / 2, rel=1e-12)
    # step max_steps - 1: min_lr
    assert harness.training.optim.lr_at(110, SCHEDULE) == pytest.approx(1e-4, rel=1e-12)
    # past the end it stays at min_lr
    assert harness.training.optim.lr_at(500, SCHEDULE) == pytest.approx(1e-4, rel=1e-12)


def test_lr_decreases_monotonically_after_warmup():
    lrs = [harness.training.optim.lr_at(step, SCHEDULE) for step in range(10, 111)]
    assert all(b < a for a, b in zip(lrs, lrs[1:], strict=False))
    assert max(lrs) == lrs[0] and min(lrs) == lrs[-1]


def test_lr_without_warmup_starts_at_peak():
    cfg = TrainConfig(lr=2e-3, min_lr=2e-4, warmup_steps=0, max_steps=5)
    assert [harness.training.optim.lr_at(s, cfg) for s in (0, 4)] == pytest.approx(
        [2e-3, 2e-4], rel=1e-12
    )


def test_a_run_shorter_than_its_warmup_warms_up_over_the_whole_run():
    # the base preset's warmup, a 3-step try
    cfg = TrainConfig(lr=3e-3, min_lr=3e-4, warmup_steps=50, max_steps=3)
    assert cfg.warmup == 3
    assert [harness.training.optim.lr_at(s, cfg) for s in range(3)] == pytest.approx(
        [1e-3, 2e-3, 3e-3], rel=1e-12
    )  # the peak on the last step


def test_base_preset_with_three_steps_runs_end_to_end(tmp_path, corpus_file, one_cpu_thread):
    """`python train.py --config base --train.max_steps=3`: the preset's 50 warmup steps shrink to
    fit.
    """
    gpt2_encoding_or_skip()
    argv = [
        "--config",
        "base",
        "--train.max_steps=3",
        "--data-file",
        str(corpus_file),
        "--data.cache_dir",
        str(tmp_path / "cache"),
    ]
    summary = train.train(
        load_config(
            [
                *argv,
                "--runs-dir",
                str(tmp_path / "runs"),
                "--device",
                "cpu",
                "--train.eval_batches=1",
            ]
        )
    )
    metrics = [
        json.loads(line)
        for line in (tmp_path / "runs" / "base" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [m["step"] for m in metrics if "loss/val" in m] == [0, 3]
    peak = load_config(["--config", "base"]).train.lr
    # step 3 of 3: the peak, then the run ends
    assert [m["lr"] for m in metrics if "lr" in m] == pytest.approx([peak], rel=1e-12)
    # three steps at a warmed-up rate already lower the loss
    assert summary["loss/val"] < metrics[0]["loss/val"]


def decay_split_by_module(model: GPT) -> tuple[set[str], set[str]]:
    """Parameter names that should decay (Linear and Embedding weights) and that should not (biases,
    LayerNorm).

    Named as model.named_parameters() names them: the tied lm_head.weight is tok_emb.weight.
    """
    names = {id(p): name for name, p in model.named_parameters()}
    decay, keep = set(), set()
    for module in model.modules():
        for attr, p in module.named_parameters(recurse=False):
            is_matrix = (
                isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and attr == "weight"
            )
            (decay if is_matrix else keep).add(names[id(p)])
    return decay, keep


def test_optimizer_decays_matrices_and_the_tied_embedding_only():
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11))
    optimizer = harness.training.optim.make_optimizer(
        model, TrainConfig(weight_decay=0.1), torch.device("cpu")
    )
    # the tied matrix once, as tok_emb.weight
    names = {id(p): name for name, p in model.named_parameters()}
    by_decay = {
        group["weight_decay"]: {names[id(p)] for p in group["params"]}
        for group in optimizer.param_groups
    }
    decay, keep = decay_split_by_module(model)
    # embeddings, then qkv, proj, fc, mlp.proj per block
    assert "tok_emb.weight" in decay and len(decay) == 2 + 2 * 4
    # ln_f; per block ln1, ln2 (gain and bias each), proj and MLP biases
    assert len(keep) == 2 + 2 * 7
    assert by_decay == {0.1: decay, 0.0: keep}
    # each parameter once
    assert sum(len(group["params"]) for group in optimizer.param_groups) == len(names)


def test_adamw_step_on_zero_gradient_only_decays():
    """With a zero gradient Adam's update is 0, so one step scales decayed weights by exactly 1 - lr
    * wd.
    """
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11))
    with torch.no_grad():
        for module in model.modules():
            # gains 1 and biases 0 would hide a wrong decay on them
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    optimizer = harness.training.optim.make_optimizer(
        model, TrainConfig(lr=0.1, min_lr=0.01, weight_decay=0.5), torch.device("cpu")
    )
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    decay, keep = decay_split_by_module(model)
    for name, p in model.named_parameters():
        # 0.95, or unchanged
        expected = before[name] * (1 - 0.1 * 0.5) if name in decay else before[name]
        assert_close(p, expected, atol=1e-8 if name in decay else 0.0, msg=name)


# 2. Small helpers


def test_estimate_loss_is_the_eval_mode_mean_and_restores_train_mode():
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, dropout=0.5)
    )
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randint(0, 11, (2, 8), generator=g), torch.randint(0, 11, (2, 8), generator=g))
        for _ in range(3)
    ]
    runtime = harness.training.runtime.setup_runtime(TrainConfig(device="cpu"))
    model.train()
    loss = harness.training.evaluation.estimate_loss(model, batches, runtime)
    assert model.training  # switched back
    model.eval()
    with torch.no_grad():
        expected = sum(model(x, y)[1].item() for x, y in batches) / 3  # no dropout in eval()
    assert loss == pytest.approx(expected, abs=1e-6)
    assert harness.training.evaluation.estimate_loss(model, batches, runtime) == pytest.approx(
        expected, abs=1e-6
    )
    assert not model.training  # an eval-mode model stays in eval mode


def test_setup_runtime_cpu():
    runtime = harness.training.runtime.setup_runtime(TrainConfig(device="cpu"))
    assert runtime.device == torch.device("cpu")
    assert runtime.autocast_dtype is None
    assert runtime.why == "from train.device"


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the no-CUDA machine; this one has CUDA"
)
def test_setup_runtime_without_cuda():
    runtime = harness.training.runtime.setup_runtime(TrainConfig(device="auto"))
    if not torch.backends.mps.is_available():
        assert runtime.device == torch.device("cpu")
        assert "no CUDA" in runtime.why
    with pytest.raises(
        ConfigError, match="--device cuda is not available here; use --device auto or cpu"
    ):
        harness.training.runtime.setup_runtime(TrainConfig(device="cuda"))


def test_setup_runtime_gpu_defaults_without_a_gpu(monkeypatch):
    """The defaults the README promises, checked on any machine by pretending CUDA or MPS is there.

    CUDA: bf16 autocast, TF32 matmuls, fused AdamW and torch.compile. MPS: no autocast, no compile.
    The real thing runs in test_cuda_run_uses_bf16_autocast_and_compile, on a CUDA machine.
    """
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(harness.training.runtime, "has_triton", lambda: True)
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        cuda = harness.training.runtime.setup_runtime(TrainConfig(device="auto"))
        assert cuda.device == torch.device("cuda") and "CUDA found" in cuda.why
        assert cuda.autocast_dtype == torch.bfloat16 and cuda.use_compile
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert not harness.training.runtime.setup_runtime(
            TrainConfig(device="cuda", compile="false")
        ).use_compile
        # CUDA without Triton: Windows, most often
        monkeypatch.setattr(harness.training.runtime, "has_triton", lambda: False)
        no_triton = harness.training.runtime.setup_runtime(TrainConfig(device="auto"))
        assert not no_triton.use_compile and no_triton.why.endswith(
            "; torch.compile off: no working Triton"
        )
        # asked for: tried
        assert harness.training.runtime.setup_runtime(
            TrainConfig(device="auto", compile="true")
        ).use_compile
        # A card that only emulates bf16 (a T4, a V100: torch says yes only when emulation counts)
        # trains in float32.
        monkeypatch.setattr(
            torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation
        )
        assert (
            harness.training.runtime.setup_runtime(TrainConfig(device="auto")).autocast_dtype
            is None
        )
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11))
    # one fused kernel where torch has one
    for device, fused in (("cuda", True), ("cpu", True), ("mps", False)):
        assert (
            harness.training.optim.make_optimizer(
                model, TrainConfig(), torch.device(device)
            ).defaults["fused"]
            is fused
        )

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    mps = harness.training.runtime.setup_runtime(TrainConfig(device="auto"))
    assert mps.device == torch.device("mps") and "Apple MPS found" in mps.why
    assert mps.autocast_dtype is None and not mps.use_compile


def test_a_gpu_given_a_cpu_preset_is_told_which_preset_suits_it(tmp_path, monkeypatch, capsys):
    """`python train.py` on a CUDA machine: under the device line, one line names the GPU preset; on
    a CPU, nothing.
    """
    # the device decision, faked: no CUDA here
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(harness.training.runtime, "has_triton", lambda: True)
    tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        gpu = harness.training.runtime.setup_runtime(TrainConfig(device="auto"))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    cpu = harness.training.runtime.setup_runtime(TrainConfig(device="cpu"))
    for preset in ("base", "char", "char-modern", "char-gpu"):
        cfg = load_config(["--config", preset, "--runs-dir", str(tmp_path / "runs")])
        for runtime in (gpu, cpu):
            harness.training.runlog.open_run_dir(cfg, runtime).release()
            lines = capsys.readouterr().out.splitlines()
            assert lines[0].startswith(f"device: {runtime.device} (")
            advice = [line for line in lines if "python train.py --config" in line]
            if runtime is gpu and preset != "char-gpu":
                wanted = (
                    f"note: the {preset} preset is sized for a 2-core CPU; for one GPU, try "
                    "python train.py --config char-gpu (docs/performance.md#on-a-gpu)"
                )
                assert advice == [lines[1]] == [wanted]  # one line, right under the device line
            else:
                assert advice == [], (preset, runtime.device)
    # the line names a preset that exists
    assert load_config(["--config", "char-gpu"]).name == "char-gpu"


def test_the_gpu_preset_trains_its_first_steps_on_a_cpu(
    tmp_path, corpus_file, one_cpu_thread, capsys
):
    """char-gpu as the preset has it (6 heads, dropout 0.2, Muon, character tokens, its warmup),
    made shallower, narrower and shorter-sighted so that a CPU takes a few steps in seconds (each
    evaluation draws every layer's heatmap): the loss falls."""
    shrunk = [
        "--model.n_layer=2",
        "--model.n_embd=24",
        "--model.block_size=16",
        "--train.batch_size=4",
    ]
    shrunk += ["--train.max_steps=8", "--train.eval_interval=8"]
    argv = [
        "--config",
        "char-gpu",
        "--data-file",
        str(corpus_file),
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--device",
        "cpu",
    ]
    cfg = load_config(
        [*argv, *shrunk, "--train.eval_batches=2", "--runs-dir", str(tmp_path / "runs")]
    )
    assert (cfg.model.n_head, cfg.model.dropout, cfg.data.tokenizer, cfg.train.optimizer) == (
        6,
        0.2,
        "char",
        "muon",
    )
    summary = train.train(cfg)
    assert "optimizer Muon (Newton-Schulz in" in capsys.readouterr().out
    metrics = [
        json.loads(line) for line in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    first, last = [m for m in metrics if "loss/val" in m]
    assert first["step"] == 0 and last["step"] == 8
    # 8 steps, warming up
    assert last["loss/train"] < first["loss/train"] - 0.1, (first["loss/train"], last["loss/train"])
    assert summary["loss/val"] == last["loss/val"]


def test_bf16_autocast_trains_on_a_cpu_close_to_float32(one_cpu_thread):
    """CUDA's autocast path (runtime.autocast with bfloat16) run on a CPU: the same steps from the
    same weights and batches as in float32, with the GPU preset's optimizer (Muon), give finite
    losses within bf16's rounding of float32's."""
    cfg = load_config(
        [
            "--config",
            "char-gpu",
            "--model.n_embd=48",
            "--model.block_size=32",
            "--model.dropout=0.0",
        ]
    )
    model_cfg = ModelConfig(**{**cfg.model.__dict__, "vocab_size": 65})
    x = torch.randint(0, 65, (4, 33), generator=torch.Generator().manual_seed(0))
    batches = [(x[:, :-1], x[:, 1:])] * 8  # one (B, T) batch of inputs and targets, learnt by heart
    losses = {}
    for dtype in (None, torch.bfloat16):
        torch.manual_seed(0)
        model = GPT(model_cfg)
        runtime = harness.training.runtime.Runtime(
            device=torch.device("cpu"), autocast_dtype=dtype, why=""
        )
        optimizer = harness.training.optim.make_optimizer(model, cfg.train, runtime.device)
        # train.py's step, as bench.py keeps it (tests/test_benchmark.py holds the two equal)
        step = training_step
        losses[dtype] = [
            step(model, optimizer, [batch], runtime, cfg.train.grad_clip)[0].item()
            for batch in batches
        ]
    fp32, bf16 = losses[None], losses[torch.bfloat16]
    assert all(math.isfinite(v) for v in bf16) and fp32 != bf16, (fp32, bf16)  # bf16 did round
    # both learn the batch
    assert fp32[-1] < fp32[0] - 0.5 and bf16[-1] < bf16[0] - 0.5, (fp32, bf16)
    # bf16 keeps 8 bits of mantissa
    assert max(abs(a - b) for a, b in zip(fp32, bf16, strict=True)) < 5e-3, (fp32, bf16)


def test_muon_takes_the_blocks_matrices_and_adamw_the_rest():
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8, vocab_size=11))
    optimizer = harness.training.optim.make_optimizer(
        model, TrainConfig(optimizer="muon", lr=1e-3), torch.device("cpu")
    )
    muon, adamw = optimizer.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    names = {id(p): n for n, p in model.named_parameters()}
    in_muon = sorted(names[id(p)] for g in muon.param_groups for p in g["params"])
    assert in_muon == sorted(
        n for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2
    )
    assert len(in_muon) == 2 * 4  # qkv, attention proj, mlp fc and mlp proj in each block
    everything = [id(p) for g in optimizer.param_groups for p in g["params"]]
    # each parameter exactly once
    assert sorted(everything) == sorted(id(p) for p in model.parameters())
    assert "tok_emb.weight" not in in_muon and "pos_emb.weight" not in in_muon
    x = torch.randint(0, 11, (2, 8))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(x, x)[1].backward()
    optimizer.step()
    assert all(not torch.equal(before[n], p) for n, p in model.named_parameters()), (
        "every parameter takes a step"
    )
    again = harness.training.optim.make_optimizer(
        model, TrainConfig(optimizer="muon", lr=1e-3), torch.device("cpu")
    )
    again.load_state_dict(optimizer.state_dict())  # resume: both optimizers' state comes back
    assert len(again.state) == sum(1 for _ in model.parameters())
    # load_state_dict gave each optimizer new group dicts: the rate must reach those
    harness.training.optim.set_lr(again, 0.25)
    assert [g["lr"] for opt in again.optimizers for g in opt.param_groups] == [0.25] * 3


def test_a_compile_that_fails_at_the_first_step_trains_eagerly(
    tmp_path, corpus_file, monkeypatch, capsys
):
    """torch.compile with a backend that raises, as Inductor does without Triton: one line says so,
    and the run is the eager run.
    """

    def no_triton(graph, example_inputs):
        raise RuntimeError(
            "Cannot find a working triton installation (a stand-in for a machine without it)"
        )

    real_compile = torch.compile
    args = [
        "--train.max_steps=4",
        "--train.eval_interval=4",
        "--train.log_interval=1",
        "--model.dropout=0.1",
    ]
    eager = train.train(
        load_config(tiny_argv(tmp_path / "eager", corpus_file, *args, "--train.compile=false"))
    )
    capsys.readouterr()
    monkeypatch.setattr(torch, "compile", lambda model: real_compile(model, backend=no_triton))
    try:
        fell_back = train.train(
            load_config(
                tiny_argv(tmp_path / "compiled", corpus_file, *args, "--train.compile=true")
            )
        )
    finally:
        torch._dynamo.reset()  # forget the failed attempt's caches
    lines = [line for line in capsys.readouterr().out.splitlines() if "torch.compile" in line]
    assert lines == [
        "torch.compile failed at the first step (RuntimeError: Cannot find a working triton "
        "installation "
        "(a stand-in for a machine without it)); training without it"
    ]
    assert fell_back["loss/val"] == eager["loss/val"]
    without_perf = [
        {k: v for k, v in m.items() if not k.startswith("perf/")}
        for m in read_metrics(tmp_path / "compiled" / "runs" / "tiny")
    ]
    assert without_perf == [
        {k: v for k, v in m.items() if not k.startswith("perf/")}
        for m in read_metrics(tmp_path / "eager" / "runs" / "tiny")
    ]


# Inductor writes and compiles C++ for the forward and the backward: see docs/tests.md
@pytest.mark.slow
def test_torch_compile_trains_on_a_cpu_as_the_eager_model_does(
    tmp_path, corpus_file, one_cpu_thread, capsys
):
    """The compiled training model, as CUDA runs it by default, here on a CPU with Inductor's C++
    kernels (no GPU needed):
    it compiles without falling back, and its losses are the eager run's within float32 rounding
    (its kernels fuse and reorder the arithmetic). Without dropout: compiled code draws its random
    masks differently."""
    args = ["--train.max_steps=4", "--train.eval_interval=4", "--train.log_interval=1"]
    eager = train.train(
        load_config(tiny_argv(tmp_path / "eager", corpus_file, *args, "--train.compile=false"))
    )
    capsys.readouterr()
    try:
        compiled = train.train(
            load_config(
                tiny_argv(tmp_path / "compiled", corpus_file, *args, "--train.compile=true")
            )
        )
    finally:
        torch._dynamo.reset()  # the compiled graphs hold on to this test's model
    assert "torch.compile failed" not in capsys.readouterr().out
    rows = {name: read_metrics(tmp_path / name / "runs" / "tiny") for name in ("eager", "compiled")}
    steps = {
        name: [(m["step"], m["loss/train_step"]) for m in metrics if "loss/train_step" in m]
        for name, metrics in rows.items()
    }
    assert (
        [step for step, _ in steps["compiled"]]
        == [step for step, _ in steps["eager"]]
        == [1, 2, 3, 4]
    )
    for (_, a), (_, b) in zip(steps["compiled"], steps["eager"], strict=True):
        assert a == pytest.approx(b, abs=1e-4), (steps["compiled"], steps["eager"])
    assert compiled["loss/val"] == pytest.approx(eager["loss/val"], abs=1e-4)
    assert compiled["loss/val"] < rows["eager"][0]["loss/val"]  # and it learnt


# Minor page faults of making and freeing a 64 MiB tensor (16,384 pages) three times, before and
# after keep_freed_memory(), in a fresh interpreter: the test process may have tuned malloc already.
PAGE_FAULTS_SCRIPT = """
import resource, sys, torch
sys.path.insert(0, ".")
import harness.training.runtime

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        torch.ones(16 * 2**20)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

# The best of a few rounds each: on a shared virtual machine a round now and then refaults its
# pages although they stayed in the heap (seen here in about one run in three, with or without
# keep_freed_memory), so one round proves nothing either way.
faults()
default = min(faults() for _ in range(3))
took = harness.training.runtime.keep_freed_memory()
faults()
print(took, default, min(faults() for _ in range(5)))
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="keep_freed_memory tunes glibc's malloc only"
)
def test_keep_freed_memory_stops_refaulting_freed_tensors():
    proc = run_script("-c", PAGE_FAULTS_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    took, default, kept = proc.stdout.split()
    assert took == "True"
    # What glibc does by default depends on the kernel: 4 KiB pages refault all 49,152 pages,
    # transparent huge pages set to "always" far fewer. Kept in the heap, the freed tensors need no
    # new page at all, whatever the kernel.
    assert int(kept) < 1_000, f"{kept} page faults with keep_freed_memory, {default} without"


# Multiplies the smallest float32 denormal (1.4e-45, made from its bits) by 1 on two threads:
# a thread that flushes denormals gets 0. "late" starts torch's thread pool before setup_runtime.
DENORMALS_SCRIPT = """
import sys, torch
sys.path.insert(0, ".")
import harness.training.runtime
from configs import TrainConfig

torch.set_num_threads(2)
if sys.argv[1] == "late":
    torch.ones(1_000_000) * 2.0  # a parallel op: the pool's threads start here
harness.training.runtime.setup_runtime(TrainConfig(device="cpu"))
x = torch.full((1_000_000,), 1, dtype=torch.int32).view(torch.float32)
print(int((x * 1.0 != 0).sum()))  # elements not flushed to zero
"""


def test_setup_runtime_flushes_denormals_on_every_thread():
    first = run_script("-c", DENORMALS_SCRIPT, "first")
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["0"], (
        "both threads should flush: they start after setup_runtime"
    )
    late = run_script("-c", DENORMALS_SCRIPT, "late")
    assert int(late.stdout) > 0, (
        "a thread started before the setting keeps denormals: why setup_runtime comes first"
    )


def test_save_checkpoint_replaces_atomically(tmp_path):
    path = tmp_path / "ckpt.pt"
    harness.training.checkpoints.save_checkpoint(path, {"step": 1, "w": torch.ones(3)})
    harness.training.checkpoints.save_checkpoint(path, {"step": 2, "w": torch.zeros(3)})
    loaded = torch.load(path, weights_only=True)
    assert loaded["step"] == 2
    assert_close(loaded["w"], torch.zeros(3), atol=0.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # no .tmp left behind


# 3. A smoke run of tiny.toml


@pytest.fixture(scope="module")
def smoke(tmp_path_factory, one_cpu_thread):
    """One 20-step run of the tiny preset; several tests read what it wrote."""
    root = tmp_path_factory.mktemp("smoke")
    corpus = write_corpus(root / "text")
    argv = tiny_argv(root, corpus, f"--train.max_steps={SMOKE_STEPS}", "--train.eval_interval=10")
    cfg = load_config(argv)
    start = time.perf_counter()
    summary = train.train(cfg)
    main_s = time.perf_counter() - start
    return {
        "root": root,
        "corpus": corpus,
        "argv": argv,
        "cfg": cfg,
        "summary": summary,
        "main_s": main_s,
        "run_dir": root / "runs" / "tiny",
    }


def test_smoke_run_lowers_val_loss(smoke):
    evals = eval_lines(read_metrics(smoke["run_dir"]))
    assert [m["step"] for m in evals] == [0, 10, SMOKE_STEPS]
    first, last = evals[0]["loss/val"], evals[-1]["loss/val"]
    vocab = len(set(smoke["corpus"].read_text(encoding="utf-8")))
    # about ln V at initialisation
    assert abs(first - torch.log(torch.tensor(float(vocab))).item()) < 0.3
    assert last < first - 0.3, f"val loss {first:.3f} -> {last:.3f}"
    assert evals[-1]["loss/train"] < evals[0]["loss/train"] - 0.3


def test_smoke_summary_matches_the_last_evaluation(smoke):
    summary, last = smoke["summary"], eval_lines(read_metrics(smoke["run_dir"]))[-1]
    assert {"loss/train", "loss/val", "wall_s", "tokens_per_s"} <= summary.keys()
    assert summary["loss/val"] == last["loss/val"] and summary["loss/train"] == last["loss/train"]
    assert 0 < summary["wall_s"] <= smoke["main_s"], (
        f"wall_s {summary['wall_s']:.3f} s, main() took {smoke['main_s']:.3f} s"
    )
    # 20 steps of batch 8 x 32
    assert summary["tokens_per_s"] * summary["wall_s"] == pytest.approx(
        SMOKE_STEPS * 8 * 32, rel=1e-9
    )


def test_smoke_logs_the_schedule(smoke):
    logged = [m for m in read_metrics(smoke["run_dir"]) if "lr" in m]
    assert [m["step"] for m in logged] == [5, 10, 15, 20]  # every log_interval = 5 steps
    # The lr of the step just taken (steps 4, 9, 14, 19): tiny warms up over 5 steps to 3e-3, then a
    # cosine over the 14 steps 5..19 down to 3e-4: 3e-4 + 1.35e-3 * (1 + cos(pi * 4/14)) =
    # 2.49171e-3 at step 9.
    expected = [3e-3, 2.491711e-3, 1.064257e-3, 3e-4]
    assert [m["lr"] for m in logged] == pytest.approx(expected, rel=1e-6)


def test_smoke_checkpoint_contents(smoke):
    ckpt = torch.load(smoke["run_dir"] / "ckpt.pt", map_location="cpu", weights_only=True)
    assert {"model", "optimizer", "config", "step", "tokenizer"} <= ckpt.keys()
    assert ckpt["step"] == SMOKE_STEPS
    chars = sorted(set(smoke["corpus"].read_text(encoding="utf-8")))
    assert ckpt["tokenizer"] == {"name": "char", "chars": chars}
    assert ckpt["config"]["model"]["vocab_size"] == len(chars)
    assert ckpt["config"]["train"]["max_steps"] == SMOKE_STEPS
    assert ckpt["model"]["tok_emb.weight"].shape == (len(chars), 32)
    # the causal mask is built per call, never saved
    assert not any("mask" in key for key in ckpt["model"])
    model = GPT(ModelConfig(**ckpt["config"]["model"]))
    model.load_state_dict(ckpt["model"])  # strict: every key and shape fits
    assert ckpt["optimizer"]["param_groups"][0]["lr"] == pytest.approx(3e-4, rel=1e-12)
    assert len(ckpt["optimizer"]["state"]) == sum(1 for p in model.parameters())
    assert ckpt["val_loss"] == eval_lines(read_metrics(smoke["run_dir"]))[-1]["loss/val"]


def test_smoke_config_json_has_vocab_size(smoke):
    saved = json.loads((smoke["run_dir"] / "config.json").read_text())
    ckpt = torch.load(smoke["run_dir"] / "ckpt.pt", map_location="cpu", weights_only=True)
    assert saved == ckpt["config"]
    assert saved["name"] == "tiny"
    assert saved["model"]["vocab_size"] == len(set(smoke["corpus"].read_text(encoding="utf-8")))
    assert saved["data"]["path"] == str(smoke["corpus"])
    assert {k: v for k, v in saved["model"].items() if k != "vocab_size"} == {
        k: v for k, v in smoke["cfg"].to_dict()["model"].items() if k != "vocab_size"
    }


def test_smoke_writes_tensorboard_events(smoke):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = smoke["run_dir"].glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert {"loss/train", "loss/val", "lr"} <= set(acc.Tags()["scalars"])
    scalars = acc.Scalars("loss/val")
    evals = eval_lines(read_metrics(smoke["run_dir"]))
    assert [s.step for s in scalars] == [m["step"] for m in evals]
    # float32 in TensorBoard
    assert [s.value for s in scalars] == pytest.approx([m["loss/val"] for m in evals], rel=1e-6)


def test_smoke_prepares_data_in_the_given_cache_only(smoke):
    prepared = list((smoke["root"] / "cache" / "prepared").iterdir())
    assert len(prepared) == 1 and prepared[0].name.startswith("corpus-char-")


def test_identical_runs_give_identical_losses(smoke, capsys):
    quiet_main([*smoke["argv"], "--run-name", "again"], capsys)
    first, second = read_metrics(smoke["run_dir"]), read_metrics(smoke["root"] / "runs" / "again")

    def without_timing(lines):
        return [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in lines]

    assert len(first) == len(second)
    assert without_timing(first) == without_timing(second)  # exact equality, not approx
    assert [m["loss/val"] for m in eval_lines(second)] == [m["loss/val"] for m in eval_lines(first)]


# 4. Run folders


def test_second_run_moves_the_first_aside(tmp_path, corpus_file, capsys):
    quiet_main(
        tiny_argv(tmp_path, corpus_file, "--train.max_steps=4", "--train.warmup_steps=1"), capsys
    )
    quiet_main(tiny_argv(tmp_path, corpus_file, *SHORT), capsys)
    runs = tmp_path / "runs"
    names = sorted(p.name for p in runs.iterdir())
    assert len(names) == 2 and names[0] == "tiny" and names[1].startswith("tiny.old-"), names
    old, new = read_metrics(runs / names[1]), read_metrics(runs / "tiny")
    # evaluations at 0 and 4, the probe at every step of so short a run
    assert {m["step"] for m in old} == {0, 1, 2, 3, 4}
    assert {m["step"] for m in new} == {0, 1, 2}  # only the new run's lines
    assert [m["step"] for m in eval_lines(new)] == [0, 2]
    assert json.loads((runs / names[1] / "config.json").read_text())["train"]["max_steps"] == 4
    assert json.loads((runs / "tiny" / "config.json").read_text())["train"]["max_steps"] == 2
    assert torch.load(runs / names[1] / "ckpt.pt", weights_only=True)["step"] == 4


def test_no_mask_run_gets_its_own_folder(tmp_path, corpus_file, capsys):
    quiet_main(tiny_argv(tmp_path, corpus_file, "--no-mask", *SHORT), capsys)
    run_dir = tmp_path / "runs" / "tiny-no-mask"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["tiny-no-mask"]
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["model"]["causal"] is False and saved["model"]["scaled"] is True
    assert torch.load(run_dir / "ckpt.pt", weights_only=True)["config"]["model"]["causal"] is False


def test_block_size_longer_than_val_split_fails_before_the_run_folder(tmp_path, corpus_file):
    with pytest.raises(DataError, match="fewer than block_size"):
        train.train(load_config(tiny_argv(tmp_path, corpus_file, "--model.block_size=5000")))
    assert not (tmp_path / "runs").exists()


# 5. The script: user errors are one line on stderr and exit code 2 (each message is tested where it
# is raised)


def test_script_bad_number(tmp_path, corpus_file):
    proc = run_script("train.py", *tiny_argv(tmp_path, corpus_file, "--train.lr=abc"))
    assert_one_line_error(proc, "train.lr takes a number, got 'abc'")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ConfigError, 2),
        (DataError, 2),
        (CheckpointError, 2),
        (TokenizerError, 2),
        (TrainingError, 1),
    ],
)
def test_run_command_turns_each_expected_failure_into_one_line(capsys, error, code):
    def command(argv):
        raise error(f"bad {argv[0]}")

    assert harness.cli.run_command(command, ["thing"]) == code
    out, err = capsys.readouterr()
    assert out == "" and err == "error: bad thing\n"


def test_an_evaluation_puts_the_model_back_in_its_mode_even_when_stopped():
    """eval_mode (harness/training/evaluation.py): dropout off inside, the caller's mode restored
    after, a stop included.
    """
    from harness.training.evaluation import eval_mode
    from model import GPT, ModelConfig

    model = GPT(
        ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11, dropout=0.1)
    ).train()
    with pytest.raises(KeyboardInterrupt), eval_mode(model):
        assert not model.training
        raise KeyboardInterrupt
    assert model.training
    with eval_mode(model.eval()):
        pass
    assert not model.training
