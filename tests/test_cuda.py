"""What only a CUDA card runs, each held to a reference: torch's fused attention kernels against the
readable path, Muon's Newton-Schulz on the card against torch.optim.Muon, and the char-gpu preset's
path (bfloat16 autocast, Muon in bfloat16, dropout drawn from the device's generator) stopped by
Ctrl-C and resumed. Every test here skips without CUDA; the CPU runs the same code paths in the rest
of the suite (docs/tests.md), and docs/performance.md#on-a-gpu says what a card gave.
"""

import dataclasses
import math

import pytest
import torch
from conftest import assert_close
from test_muon import step_both
from test_resume import (  # noqa: F401 (fixtures)
    read_metrics,
    restore_signal_handlers,
    run_stopped_at,
    small_heatmaps,
    without_timing,
)

from configs import load_config
from harness.experiments.profiling import attention_kernel
from harness.training.checkpoints import read_checkpoint
from model import GPT, ModelConfig

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA GPU: the card's kernels, autocast and compile",
)
CUDA = torch.device("cuda")


@pytest.fixture
def exact_float32():
    """float32 matmuls in float32, not TF32 (which setup_runtime turns on for training), for the
    length of a test.
    """
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("backend", ["sdpa", "tiled"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "no-mask"])
def test_each_backend_gives_the_readable_logits_on_the_card(backend, causal, exact_float32):
    """The char-gpu shape's heads (64 wide) on the card: float32 to 1e-4, and under bfloat16
    autocast, as training runs, within bfloat16's rounding of the float32 readable logits."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        n_layer=2,
        n_head=6,
        n_embd=384,
        block_size=256,
        vocab_size=65,
        causal=causal,
        attention="manual",
    )
    readable = GPT(cfg).to(CUDA).eval()
    fast = GPT(dataclasses.replace(cfg, attention=backend)).to(CUDA).eval()
    fast.load_state_dict(readable.state_dict())
    idx = torch.randint(0, 65, (8, 256), device=CUDA)
    with torch.no_grad():
        reference = readable(idx)[0]
        assert_close(
            fast(idx)[0], reference, atol=1e-4, msg=f"{backend} vs the readable path, float32"
        )
        with torch.autocast("cuda", dtype=torch.bfloat16):
            fast_bf16, readable_bf16 = fast(idx)[0], readable(idx)[0]
    assert (
        relative_error(fast_bf16, reference) < 2e-2
        and relative_error(readable_bf16, reference) < 2e-2
    )


def test_the_preset_s_attention_kernel_on_the_card_is_a_fused_one():
    """bench.py's kernel line for char-gpu in bfloat16 (dropout 0.2, heads of 64): torch's
    dispatcher picks a fused kernel.
    """
    cfg = load_config(["--config", "char-gpu"])
    kernel = attention_kernel(
        dataclasses.replace(cfg.model, vocab_size=65), cfg.train.batch_size, CUDA, torch.bfloat16
    )
    # an H200 with torch 2.11: cuDNN
    assert kernel in ("flash", "memory-efficient", "cuDNN"), kernel


def test_muon_on_the_card_is_torch_muon_bit_for_bit():
    """Our Muon, Newton-Schulz in bfloat16 on each shape's stacked matrices, computes
    torch.optim.Muon's bits on the card too (tests/test_muon.py: on the CPU)."""
    for i, (p0, p_ref, p) in enumerate(zip(*step_both(CUDA), strict=True)):
        assert (p_ref.cpu() - p0).abs().max() > 0.01, (
            f"matrix {i}: the reference did not move, so the comparison shows nothing"
        )
        assert torch.equal(p, p_ref), (
            f"matrix {i} {tuple(p.shape)}: max abs diff {(p - p_ref).abs().max():.3e} after 6 steps"
        )


PRESET_SMALL = [
    "--model.n_layer=2",
    "--model.n_embd=128",
    "--model.n_head=2",
    "--model.block_size=64",
    "--train.batch_size=16",
    "--train.max_steps=30",
    "--train.warmup_steps=8",
    "--train.eval_interval=10",
    "--train.log_interval=1",
    "--train.eval_batches=2",
]


def test_the_preset_stopped_and_resumed_on_the_card_follows_the_uninterrupted_run(
    tmp_path, corpus_file
):
    """char-gpu's path at a small size on the card, in bfloat16, Muon and dropout 0.2: stopped by
    Ctrl-C in warmup, after an evaluation and mid-decay, resumed each time. CUDA's kernels add in a
    varying order (atomic adds in the embedding's and attention's backward), so two uninterrupted
    runs may differ in the last digits: the resumed run must land within that spread of them (and
    equal them when they are equal), and keep the card's random state."""
    runs = {}
    # the k-th batch of each process: steps 4, 10, 19
    for name, stops in (("full", []), ("again", []), ("resumed", [4, 6, 9])):
        folders = ["--data.cache_dir", str(tmp_path / "cache"), "--runs-dir", str(tmp_path / name)]
        argv = [
            "--config",
            "char-gpu",
            "--data-file",
            str(corpus_file),
            *folders,
            *PRESET_SMALL,
            "--device",
            "cuda",
        ]
        summaries, _ = run_stopped_at(argv, stops)
        runs[name] = tmp_path / name / load_config(argv).run_name
    assert [s["stopped_at"] for s in summaries] == [4, 10, 19, None]
    cuda_rng = read_checkpoint(runs["resumed"] / "ckpt.pt").get("cuda_rng")
    assert cuda_rng is not None and cuda_rng[0].numel() > 0
    metrics = {name: without_timing(read_metrics(run_dir)) for name, run_dir in runs.items()}
    assert [m["step"] for m in metrics["resumed"]] == [m["step"] for m in metrics["full"]]

    def largest_difference(a: str, b: str) -> float:
        return max(
            abs(x[k] - y[k])
            for x, y in zip(metrics[a], metrics[b], strict=True)
            for k in x
            if k.startswith("loss/")
        )

    spread = largest_difference("full", "again")
    assert all(
        math.isfinite(m["loss/train_step"]) for m in metrics["resumed"] if "loss/train_step" in m
    )
    assert largest_difference("resumed", "full") <= 10 * spread + 1e-6, (
        f"run-to-run spread {spread:.2e}"
    )
