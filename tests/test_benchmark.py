"""harness/experiments/benchmark.py and bench.py: each measurement on tiny inputs, and the tables they print."""

import dataclasses
import json

import pytest
import torch

from configs import load_config
from harness.experiments import benchmark, profiling
from harness.training.runtime import setup_runtime

pytestmark = pytest.mark.usefixtures("one_cpu_thread")  # see conftest: tiny models run faster on one thread

MiB = 2**20


# 2. The measurements run on a tiny config, in a fraction of a second each


def test_bench_functions_on_tiny_config():
    cfg = load_config(["--config", "tiny"])
    runtime = setup_runtime(cfg.train)
    result = {
        "config": "tiny",
        "machine": profiling.machine_name(runtime.device),
        "device": "cpu",
        "torch_threads": 1,
        "torch_version": "x",
    }
    result.update({name: getattr(cfg.model, name) for name in ("n_layer", "n_head", "n_embd", "attention")})
    result["peak_flops"] = profiling.matmul_peak_flops(runtime.device, torch.float32, sizes=(64,), seconds=0.02)
    result["peak_flops_dtype"] = "float32"
    result.update(benchmark.bench_training(cfg, runtime, warmup_steps=1, steps=1))
    result["mfu"] = result["model_flops_per_s"] / result["peak_flops"]
    result.update(benchmark.bench_sampling(cfg, runtime, new_tokens=40))  # past block_size 32
    result.update(benchmark.bench_attention(2, 8, runtime.device, lengths=(64, 1024), repeats=1))

    # tiny with the char vocabulary: 12*2*32^2 + 10*2*32 + 65*32 + 32*32 + 2*32 = 28,384 parameters;
    # 6 FLOPs per parameter per token, plus 12 * L * C * T = 12 * 2 * 32 * 32 = 24,576 for attention.
    assert result["params"] == 28_384
    assert result["flops_per_token"] == 6 * 28_384 + 24_576 == 194_880
    assert result["tokens_per_step"] == 8 * 32  # batch 8 x block 32
    assert result["tokens_per_s"] * result["ms_per_step"] / 1e3 == pytest.approx(256, rel=1e-9)
    # One timed step: its two parts lie inside it (the rest is drawing the batch and zeroing the gradients).
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
    assert result["compiled"] is False and result["compile_s"] == 0.0  # compile is off on a CPU unless asked for

    table = benchmark.format_tables(result)
    assert "| tiled |" in table and "T=1024" in table and "MFU (model FLOPs only" in table
    assert "| of which forward + backward (and clip) |" in table and "| of which the optimizer step: AdamW |" in table
    assert json.loads(json.dumps(result)) == result


def test_bench_training_compiles_the_step_when_train_py_would(monkeypatch):
    """With train.compile on, the timed step runs the compiled model, as train.py's loop does."""
    cfg = load_config(["--config", "tiny", "--train.compile=true"])
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
    assert "torch.compile:" in table


def _table_fillers(cfg) -> dict:
    """The keys format_tables needs besides the training ones, with placeholder values."""
    fillers = {"config": "tiny", "machine": "m", "device": "cpu", "torch_threads": 1, "torch_version": "x", "load_avg_1min": None}
    fillers.update(dataclasses.asdict(cfg.model))
    fillers.update({"peak_flops": 1e9, "peak_flops_dtype": "float32", "mfu": 0.1, "sample_new_tokens": 1})
    fillers.update({"sample_tokens_per_s_cached": 1.0, "sample_tokens_per_s_uncached": 1.0, "sample_cache_speedup": 1.0})
    fillers.update({"sample_tokens_match": True, "tiled_readable_mem_ratio_64": 0.1})
    fillers.update({f"{name}_{what}_64": 1.0 for name in ("readable", "sdpa", "tiled") for what in ("ms", "peak_mem")})
    return fillers


def test_whole_run_profiles_a_real_train_py_run_phase_by_phase(tmp_path):
    """bench.py --whole-run on tiny: every call of the run lands in its phase, and the phases add up to the run."""
    from conftest import run_script, tiny_argv, write_corpus

    corpus = write_corpus(tmp_path / "text")
    argv = tiny_argv(tmp_path, corpus, "--train.max_steps=4", "--train.eval_interval=2", "--train.log_interval=2")
    proc = run_script("bench.py", "--whole-run", "--json", *argv)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    calls = {name: phase["calls"] for name, phase in result["phases"].items()}
    # 4 steps, each one forward (the evaluations' forward passes are theirs, not the steps'), backward and update.
    assert calls["steps: forward"] == calls["steps: backward and clip"] == calls["steps: the optimizer's update"] == 4
    assert calls["data: the training batches"] == 4
    # Evaluations at steps 0, 2 and 4: each scores train and val, and saves a checkpoint.
    assert calls["evaluations: heatmap weights, a sample"] == 3 and calls["evaluations: losses"] == 6
    assert calls["checkpoints: ckpt.pt and best.pt written"] == 3 and calls["start-up: TensorBoard's writer"] == 1
    # The probe at every step of so short a run (4 steps, 20 probes asked for: one a step), and at the end.
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
    assert phases_s == pytest.approx(result["wall_s"], abs=0.05), "the phases and the interpreter's start and exit make up the run"
    assert all(phase["wall_s"] >= 0 for phase in result["phases"].values())
    assert result["cpu_s"] is None or result["cpu_s"] > result["phases"]["start-up: imports"]["cpu_s"] > 0
    metrics = [json.loads(line) for line in (tmp_path / "runs" / "tiny" / "metrics.jsonl").read_text().splitlines()]
    assert result["val"] == round([row["loss/val"] for row in metrics if "loss/val" in row][-1], 4)
    assert "| **steps** |" in proc.stderr and "| &nbsp; forward | 4 |" in proc.stderr
