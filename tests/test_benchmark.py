"""harness/experiments/benchmark.py and bench.py: each measurement on tiny inputs, and the tables
they print.
"""

import dataclasses
import json
import re

import pytest
import torch

import train
from configs import load_config
from harness.experiments import benchmark, profiling
from harness.training import budget
from harness.training.optim import lr_at, make_optimizer, set_lr
from harness.training.runlog import read_metrics
from harness.training.runtime import load_data, setup_runtime, wrap_for_training
from harness.training.step import draw_micro_batches
from model import GPT

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

MiB = 2**20


# 2. The measurements run on a tiny config, in a fraction of a second each


def test_bench_functions_on_tiny_config():
    # the CPU paths: the tracker, the measured peak
    cfg = load_config(["--config", "tiny", "--device", "cpu"])
    runtime = setup_runtime(cfg.train)
    result = {
        "config": "tiny",
        "machine": profiling.machine_name(runtime.device),
        "device": "cpu",
        "torch_threads": 1,
        "torch_version": "x",
    }
    result.update(
        {name: getattr(cfg.model, name) for name in ("n_layer", "n_head", "n_embd", "attention")}
    )
    result["peak_flops"] = profiling.matmul_peak_flops(
        runtime.device, torch.float32, sizes=(64,), seconds=0.02
    )
    result["peak_flops_dtype"], result["peak_flops_source"] = "float32", "measured here"
    result.update(benchmark.bench_training(cfg, runtime, warmup_steps=1, steps=1))
    result["mfu"] = benchmark.mfu(result)
    result.update(benchmark.bench_sampling(cfg, runtime, new_tokens=40))  # past block_size 32
    result.update(benchmark.bench_attention(2, 8, runtime.device, lengths=(64, 1024), repeats=1))

    # tiny with the char vocabulary: 12*2*32^2 + 10*2*32 + 65*32 + 32*32 + 2*32 = 28,384 parameters.
    # The weights that multiply, N = 12*2*32^2 + 65*32 = 26,656, take 6 FLOPs a token; attention 12
    # * L * T * C = 12 * 2 * 32 * 32 = 24,576.
    assert result["params"] == 28_384
    assert result["flops_per_token"] == 6 * 26_656 + 24_576 == 184_512
    assert result["model_flops_per_s"] == pytest.approx(184_512 * result["tokens_per_s"], rel=1e-12)
    assert result["tokens_per_step"] == 8 * 32  # batch 8 x block 32
    assert result["tokens_per_s"] * result["ms_per_step"] / 1e3 == pytest.approx(256, rel=1e-9)
    # One timed step: its two parts lie inside it (the rest is drawing the batch and zeroing the
    # gradients).
    assert 0 < result["forward_backward_ms"] and 0 < result["optimizer_ms"]
    assert result["forward_backward_ms"] + result["optimizer_ms"] <= result["ms_per_step"]
    assert result["optimizer"] == "AdamW"
    # The step's new gradients alone are one float32 per parameter: the peak holds at least those.
    assert result["train_peak_mem"] >= 4 * 28_384, f"peak {result['train_peak_mem']} bytes"
    assert result["sample_tokens_match"], "cached and uncached sampling should give the same tokens"
    # At T=1024 the readable path holds (2, 1024, 1024) float32 scores and weights: 8 MiB each.
    assert result["readable_peak_mem_1024"] >= 16 * MiB
    assert result["tiled_peak_mem_1024"] <= result["readable_peak_mem_1024"] / 8
    assert result["tiled_readable_mem_ratio_1024"] <= 1 / 8
    # compile is off on a CPU unless asked for
    assert result["compiled"] is False and result["compile_s"] == 0.0

    table = benchmark.format_tables(result)
    assert "| tiled |" in table and "T=1024" in table and "MFU (the optimizer's FLOPs" in table
    assert (
        "| of which forward + backward (and clip) |" in table
        and "| of which the optimizer step: AdamW |" in table
    )
    assert "| torch.compile | off |" in table and "| autocast | off: float32 |" in table
    # no dropout in tiny
    assert "| attention kernel (torch's pick) | flash |" in table
    assert "| float32 peak: measured here |" in table
    assert json.loads(json.dumps(result)) == result


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_bench_times_the_step_train_py_takes(tmp_path, monkeypatch, optimizer):
    """bench.py keeps its own copy of train.py's step (a script imports no other): from the same
    weights and the same micro-batches (two a step, at the schedule's rates), the two give the same
    losses, bit for bit. Dropout is off, so the losses depend on nothing else."""
    from conftest import tiny_argv, write_corpus

    extra = [
        "--train.max_steps=4",
        "--train.log_interval=1",
        "--train.grad_accum_steps=2",
        "--model.dropout=0.0",
    ]
    cfg = load_config(
        tiny_argv(
            tmp_path, write_corpus(tmp_path / "text"), *extra, f"--train.optimizer={optimizer}"
        )
    )
    start, real_make = {}, train.make_optimizer

    # the weights as train.py's first step finds them
    def make_optimizer_after_the_init(model, *args):
        start.update({name: t.clone() for name, t in model.state_dict().items()})
        return real_make(model, *args)

    monkeypatch.setattr(train, "make_optimizer", make_optimizer_after_the_init)
    train.train(cfg)
    trained = [
        row["loss/train_step"] for row in read_metrics(cfg.run_dir) if "loss/train_step" in row
    ]

    runtime = setup_runtime(cfg.train)
    corpus, cfg = load_data(cfg, runtime)
    model = GPT(cfg.model)
    model.load_state_dict(start)
    step_model, optimizer = (
        wrap_for_training(model, runtime),
        make_optimizer(model, cfg.train, runtime.device),
    )
    generator, benched = torch.Generator().manual_seed(cfg.train.seed), []
    for step in range(cfg.train.max_steps):
        set_lr(optimizer, lr_at(step, cfg.train))
        micro_batches = draw_micro_batches(corpus.train, cfg, runtime, generator)
        loss, _ = profiling.training_step(
            step_model, optimizer, micro_batches, runtime, cfg.train.grad_clip
        )
        benched.append(loss.item())
    assert len(trained) == 4 and benched == trained, (benched, trained)


def test_bench_refuses_what_train_py_refuses_before_it_builds_and_estimates_first(
    monkeypatch, capsys
):
    """bench.py built a million-layer model silently (10.7 GB after 250 s) where train.py refuses it
    at once; now it runs train.py's checks first, then the readable core's memory at T = 4096, each
    one line, with no model built; what it does measure it estimates first, within a factor 3 of the
    time it takes."""
    from conftest import assert_one_line_error, error_of

    import bench

    def no_model(*args, **kwargs):
        raise AssertionError("a model was built before the refusal")

    # a 2-core CPU's order of magnitude, on any machine
    monkeypatch.setattr(budget, "measured_speed", lambda device: 20e9)
    monkeypatch.setattr(budget, "device_memory_bytes", lambda device: 2.0**34)  # 16 GiB
    monkeypatch.setattr(benchmark, "GPT", no_model)
    tiny = ["--config", "tiny", "--device", "cpu"]
    for extra, needle in (
        (
            ["--model.n_layer=1000000"],
            "training a model of about 12,288M parameters needs about 183 GiB, and this cpu has 16 "
            "GiB",
        ),
        (["--model.block_size=100000"], "one training step at block_size 100000 would take about"),
        (
            ["--model.n_head=256", "--model.n_embd=256"],
            "the readable attention core at T = 4096 with 256 heads needs about 32 GiB",
        ),
    ):
        proc = error_of(bench.main, [*tiny, *extra], capsys)
        assert_one_line_error(proc, needle)
        assert proc.stdout == ""
    monkeypatch.undo()
    result = bench.main([*tiny, "--json"])
    err = capsys.readouterr().err.splitlines()
    estimate = float(
        re.fullmatch(
            r"benchmarking: about (\d+) s \(estimated\), after train.py's checks of the model and "
            r"its step",
            err[0],
        )[1]
    )
    assert err[1] == "the peak to divide by ..."  # said before any measurement
    assert result["bench_s"] / 5 < estimate < result["bench_s"] * 5, (
        f"estimated {estimate} s, took {result['bench_s']:.1f} s"
    )


def test_bench_training_compiles_the_step_when_train_py_would(monkeypatch):
    """With train.compile on, the timed step runs the compiled model, as train.py's loop does."""
    cfg = load_config(["--config", "tiny", "--device", "cpu", "--train.compile=true"])
    runtime = setup_runtime(cfg.train)
    assert runtime.use_compile
    compiled = []

    def fake_compile(model):  # stands in for torch.compile: records the call, runs the model as is
        compiled.append(model)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    result = benchmark.bench_training(cfg, runtime, warmup_steps=1, steps=1)
    assert len(compiled) == 1 and result["compiled"] is True and result["compile_s"] > 0
    table = benchmark.format_tables({**result, **_table_fillers(cfg)})
    assert f"| torch.compile | on: {result['compile_s']:.0f} s to compile, once |" in table

    # compiles to something that fails at its first call, as Inductor without Triton does
    def failing_compile(model):
        def first_call(*args, **kwargs):
            raise RuntimeError("Cannot find a working triton installation")

        return first_call

    monkeypatch.setattr(torch, "compile", failing_compile)
    result = benchmark.bench_training(cfg, runtime, warmup_steps=1, steps=1)
    assert (
        result["compiled"] is False
        and result["compile_failed"] is True
        and result["compile_s"] == 0.0
    )
    table = benchmark.format_tables({**result, **_table_fillers(cfg)})
    assert "| torch.compile | failed: ran eagerly |" in table


def _table_fillers(cfg) -> dict:
    """The keys format_tables needs besides the training ones, with placeholder values."""
    fillers = {
        "config": "tiny",
        "machine": "m",
        "device": "cpu",
        "torch_threads": 1,
        "torch_version": "x",
        "load_avg_1min": None,
    }
    fillers.update(dataclasses.asdict(cfg.model))
    fillers.update(
        {
            "peak_flops": 1e9,
            "peak_flops_dtype": "float32",
            "peak_flops_source": "measured here",
            "mfu": 0.1,
        }
    )
    fillers.update({"sample_new_tokens": 1})
    fillers.update(
        {
            "sample_tokens_per_s_cached": 1.0,
            "sample_tokens_per_s_uncached": 1.0,
            "sample_cache_speedup": 1.0,
        }
    )
    fillers.update({"sample_tokens_match": True, "tiled_readable_mem_ratio_64": 0.1})
    fillers.update(
        {
            f"{name}_{what}_64": 1.0
            for name in ("readable", "sdpa", "tiled")
            for what in ("ms", "peak_mem")
        }
    )
    return fillers


def test_bench_variants_measures_each_cache_by_hand_and_refuses_in_one_line(capsys):
    """bench.py --variants on tiny at a 64-token context: a full cache is 2 (keys, values) x 2
    layers x 2 heads x 64 positions x 16 numbers x 4 bytes = 32 KiB, 512 bytes a token; one
    key/value head keeps half of it (2 heads share it); a window of 32 keeps 31 positions in every
    layer, 31/64 of it. The gate adds a (C, C) matrix and a bias per layer, the sink H logits."""
    from conftest import assert_one_line_error, error_of

    import bench
    from harness.experiments import variant_bench

    cfg = load_config(["--config", "tiny", "--device", "cpu", "--model.block_size=64"])
    runtime = setup_runtime(cfg.train)
    result = variant_bench.bench_variants(
        cfg, runtime, ["kv-heads", "window", "gate", "sink"], new_tokens=4, repeats=1, train_steps=1
    )
    rows = result["variants"]
    assert list(rows) == ["tiny", "tiny-kv-heads1", "tiny-window32", "tiny-gate", "tiny-sink"]
    assert (
        result["variant_context"] == 64
        and rows["tiny"]["cache_bytes"] == 2 * 2 * 2 * 64 * 16 * 4 == 32 * 2**10
    )
    assert (
        rows["tiny"]["cache_bytes_per_token"] == 512
        and rows["tiny-kv-heads1"]["cache_bytes_per_token"] == 256
    )
    assert (
        rows["tiny-window32"]["cache_bytes"] == 2 * 2 * 2 * 31 * 16 * 4
        and rows["tiny-window32"]["cache_fraction"] == 31 / 64
    )
    assert rows["tiny-gate"]["cache_fraction"] == rows["tiny-sink"]["cache_fraction"] == 1.0
    # 28,384 (test_bench_functions_on_tiny_config) at block 32, plus 32 rows of positions
    params = rows["tiny"]["params"]
    assert params == 28_384 + 32 * 32
    # the fused projection's outputs: 3C -> C + 2D, per layer
    assert rows["tiny-kv-heads1"]["params"] == params - 2 * 32 * 32
    assert (
        rows["tiny-gate"]["params"] == params + 2 * (32 * 32 + 32)
        and rows["tiny-sink"]["params"] == params + 2 * 2
    )
    assert (
        all(row["sample_tokens_per_s"] > 0 and row["step_ms"] > 0 for row in rows.values())
        and rows["tiny"]["sample_speedup"] == 1.0
    )
    table = variant_bench.format_variants({**result, **_table_fillers(cfg)})
    assert "| tiny-window32 | 0.029 M | 15.5 KiB | 248 | 48 % |" in table
    assert "sampling 4 tokens after a 64-token prompt, KV cache" in table

    assert capsys.readouterr().err.startswith("variants at a context of 64 tokens: kv-heads, ")
    tiny = ["--config", "tiny", "--device", "cpu"]
    assert_one_line_error(
        error_of(bench.main, [*tiny, "--variants", "gate", "--model.gate=true"], capsys),
        "leave those flags out",
    )
    assert_one_line_error(
        error_of(bench.main, [*tiny, "--variants", "nothing"], capsys), "--variants"
    )


# 3. MFU on a GPU: the card's peak, the model's FLOPs, GPT-2 124M's shape, checked by hand on any
# machine


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989),  # the SXM card, as torch names it
        ("NVIDIA H100 PCIe", 756),
        ("NVIDIA H100 NVL", 835),
        ("NVIDIA H200", 989),
        ("NVIDIA A100-SXM4-80GB", 312),
        ("NVIDIA A100 80GB PCIe", 312),
        ("NVIDIA L4", 121),
        ("NVIDIA L40S", 362),
        ("NVIDIA L40", 181),
        ("NVIDIA A10", 125),
        ("NVIDIA GeForce RTX 4090", 165),
        ("NVIDIA GeForce RTX 3090", 71),
    ],
)
def test_a_card_in_the_table_gets_its_datasheet_bf16_peak(name, tflops):
    peak, source = profiling.card_peak(name)
    assert peak == tflops * 1e12 and ("datasheet" in source or "whitepaper" in source)


@pytest.mark.parametrize(
    "name",
    [
        "Tesla T4",
        "NVIDIA A10G",
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA B200",
    ],
)
def test_a_card_the_table_lacks_is_not_mistaken_for_a_neighbour(name):
    assert profiling.card_peak(name) is None


def test_the_mfu_denominator_is_the_card_s_on_cuda_and_measured_elsewhere(monkeypatch):
    """peak_flops on a CUDA card (its name faked: no GPU here): the table's peak for a known card
    under bf16; a matmul measured on the device for an unknown card or float32, and on a CPU, each
    saying so."""
    measured = []
    monkeypatch.setattr(
        profiling,
        "matmul_peak_flops",
        lambda device, dtype: measured.append((device.type, dtype)) or 7e12,
    )
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    cuda = torch.device("cuda")
    assert (
        profiling.peak_flops(cuda, torch.bfloat16)
        == (989e12, "NVIDIA H100 datasheet (SXM), 1,979 with sparsity")
        and not measured
    )
    # no autocast: TF32 or float32, measured
    assert profiling.peak_flops(cuda, torch.float32) == (7e12, "measured here")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA B200")
    assert profiling.peak_flops(cuda, torch.bfloat16) == (
        7e12,
        "measured here: NVIDIA B200 is not in the table of cards' peaks",
    )
    assert profiling.peak_flops(torch.device("cpu"), torch.float32) == (7e12, "measured here")
    assert measured == [("cuda", torch.float32), ("cuda", torch.bfloat16), ("cpu", torch.float32)]


def test_gpt2_124m_is_one_flag_with_gpt2_s_shape_and_flops():
    """--gpt2-124m: GPT-2 small's 124,439,808 parameters; 6N + 12LTC by hand; at a million tokens/s
    on an H100, 86.4% MFU.
    """
    argv = benchmark.expand_gpt2_124m(["--config", "base", "--gpt2-124m", "--train.batch_size=8"])
    cfg = load_config(argv)
    m = cfg.model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.qkv_bias, cfg.data.tokenizer) == (
        12,
        12,
        768,
        1024,
        True,
        "gpt2",
    )
    # the preset and the flags after it give the rest
    assert cfg.train.batch_size == 8 and cfg.train.optimizer == "muon"
    model_cfg = dataclasses.replace(m, vocab_size=benchmark.VOCAB_SIZES[cfg.data.tokenizer])
    with torch.device("meta"):  # the shapes only: no memory for 124M weights
        assert GPT(model_cfg).num_params() == 124_439_808  # GPT-2 small's own count
    # N = 12 * 12 * 768^2 + 50257 * 768 = 84,934,656 + 38,597,376 = 123,532,032; 12 L T C = 12 * 12
    # * 1024 * 768 = 113,246,208
    assert budget.flops_per_token(model_cfg) == 6 * 123_532_032 + 113_246_208 == 854_438_400
    h100, _ = profiling.card_peak("NVIDIA H100 80GB HBM3")
    assert benchmark.mfu(
        {"flops_per_token": 854_438_400, "tokens_per_s": 1e6, "peak_flops": h100}
    ) == pytest.approx(0.86394, abs=1e-5)
    later = load_config(benchmark.expand_gpt2_124m(["--gpt2-124m", "--model.block_size=512"]))
    # a flag after it overrides it
    assert later.model.block_size == 512 and later.model.n_embd == 768


def test_the_attention_kernel_is_the_one_torch_picks():
    """On a CPU torch's fused kernel (flash) takes no dropout: a model with dropout trains on the
    math kernel there.
    """
    cfg = load_config(["--config", "char-gpu"]).model
    cpu = torch.device("cpu")
    assert (
        profiling.attention_kernel(cfg, 4, cpu, torch.float32)
        == "math (the (T, T) weights held in memory)"
    )
    assert (
        profiling.attention_kernel(dataclasses.replace(cfg, dropout=0.0), 4, cpu, torch.bfloat16)
        == "flash"
    )
    manual = dataclasses.replace(cfg, attention="manual")
    assert (
        profiling.attention_kernel(manual, 4, cpu, torch.float32)
        == "none: model.attention = manual"
    )


def test_the_table_shows_a_gpu_s_figures(monkeypatch):
    """The lines a GPU run prints, from its numbers: compile, autocast, kernel, the card's peak in
    TFLOP/s, MFU.
    """
    cfg = load_config(["--config", "tiny"])
    r = _table_fillers(cfg) | {
        "params": 124_439_808,
        "tokens_per_step": 16_384,
        "batch_size": 16,
        "block_size": 1024,
    }
    r |= {
        "ms_per_step": 16.4,
        "forward_backward_ms": 14.0,
        "optimizer_ms": 2.0,
        "optimizer": "Muon + AdamW",
        "compiled": True,
    }
    r |= {
        "compile_failed": False,
        "compile_s": 41.0,
        "autocast": "bfloat16",
        "attention_kernel": "flash",
        "tokens_per_s": 1e6,
    }
    r |= {
        "flops_per_token": 854_438_400,
        "model_flops_per_s": 854.4384e12,
        "peak_flops": 989e12,
        "peak_flops_dtype": "bfloat16",
    }
    r |= {
        "peak_flops_source": "NVIDIA H100 datasheet (SXM), 1,979 with sparsity",
        "train_peak_mem": 9 * 2**30,
        "train_state_mem": 2**30,
    }
    r["mfu"] = benchmark.mfu(r)
    lines = benchmark.format_tables(r).splitlines()
    for line in [
        "| torch.compile | on: 41 s to compile, once |",
        "| autocast | bfloat16 |",
        "| attention kernel (torch's pick) | flash |",
        "| training throughput | 1,000,000 tokens/s |",
        "| model FLOPs per token (6N + 12LTC) | 854.44 M |",
        "| model FLOP/s | 854.4 TFLOP/s |",
        "| bfloat16 peak: NVIDIA H100 datasheet (SXM), 1,979 with sparsity | 989.0 TFLOP/s |",
        "| MFU (the optimizer's FLOPs not counted) | 86.4 % |",
        "| peak memory of a training step (above params + optimizer state, 1024.0 MiB) | 9216.0 "
        "MiB |",
    ]:
        assert line in lines, line


def test_whole_run_profiles_a_real_train_py_run_phase_by_phase(tmp_path):
    """bench.py --whole-run on tiny: every call of the run lands in its phase, and the phases add up
    to the run.
    """
    from conftest import run_script, tiny_argv, write_corpus

    corpus = write_corpus(tmp_path / "text")
    argv = tiny_argv(
        tmp_path, corpus, "--train.max_steps=4", "--train.eval_interval=2", "--train.log_interval=2"
    )
    proc = run_script("bench.py", "--whole-run", "--json", *argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    calls = {name: phase["calls"] for name, phase in result["phases"].items()}
    # 4 steps of one micro-batch, each one forward (the evaluations' forward passes are theirs, not
    # the steps'), then backward and the clip, then the finiteness check and the update: two calls
    # each.
    assert (
        calls["steps: forward"] == 4
        and calls["steps: backward and clip"] == calls["steps: the optimizer's update"] == 8
    )
    assert calls["data: the training batches"] == 4
    # Evaluations at steps 0, 2 and 4: each scores train and val, and saves a checkpoint.
    assert (
        calls["evaluations: heatmap weights, a sample"] == 3 and calls["evaluations: losses"] == 6
    )
    assert (
        calls["checkpoints: ckpt.pt and best.pt written"] == 3
        and calls["start-up: TensorBoard's writer"] == 1
    )
    # The probe at every step of so short a run (4 steps, 20 probes asked for: one a step), and at
    # the end.
    assert calls["probe: the story's signals between evaluations (train.probes)"] == 5
    assert {name.partition(":")[0] for name in calls} == {
        "start-up",
        "data",
        "steps",
        "evaluations",
        "probe",
        "logging",
        "checkpoints",
        "the rest",
    }
    phases_s = sum(phase["wall_s"] for phase in result["phases"].values())
    assert phases_s == pytest.approx(result["wall_s"], abs=0.05), (
        "the phases and the interpreter's start and exit make up the run"
    )
    assert all(phase["wall_s"] >= 0 for phase in result["phases"].values())
    assert (
        result["cpu_s"] is None
        or result["cpu_s"] > result["phases"]["start-up: imports"]["cpu_s"] > 0
    )
    metrics = [
        json.loads(line)
        for line in (tmp_path / "runs" / "tiny" / "metrics.jsonl").read_text().splitlines()
    ]
    assert result["val"] == round([row["loss/val"] for row in metrics if "loss/val" in row][-1], 4)
    assert "| **steps** |" in proc.stderr and "| &nbsp; forward | 4 |" in proc.stderr
