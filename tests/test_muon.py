"""harness/training/muon.py: torch.optim.Muon with a Newton-Schulz dtype, held to the library as its
reference.

With bfloat16 it must compute the library's bits exactly: if a torch upgrade changes the
algorithm (coefficients, the order of the update, the learning-rate adjustment), these fail.
"""

import io

import pytest
import torch

from configs import ConfigError, TrainConfig, load_config
from harness.training.muon import Muon, adjusted_lr, newton_schulz_dtype, zeropower_via_newtonschulz
from harness.training.optim import describe, make_optimizer
from model import GPT, ModelConfig

SHAPES = {"wide": (12, 40), "tall": (40, 12), "square": (24, 24)}
NS = dict(ns_coefficients=(3.4445, -4.7750, 2.0315), ns_steps=5, eps=1e-7)  # the library's defaults


@pytest.fixture(autouse=True)
def one_thread(one_cpu_thread):
    """One torch thread: small matrices, and the same reduction order on every machine's thread
    count.
    """


def make_params(seed: int = 0, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    """One matrix of each shape, the same on every call with the same seed."""
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(*shape, generator=gen).to(dtype).requires_grad_() for shape in SHAPES.values()
    ]


def run_steps(
    opt: torch.optim.Optimizer, params: list[torch.Tensor], steps: int, seed: int = 1
) -> None:
    """`steps` optimizer steps on gradients drawn from a fixed generator (the same for every
    optimizer).
    """
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(p.dtype)
        opt.step()


@pytest.mark.parametrize("adjust_lr_fn", ["original", "match_rms_adamw"])
@pytest.mark.parametrize("nesterov", [True, False])
def test_bfloat16_is_bit_identical_to_torch_muon(nesterov, adjust_lr_fn):
    theirs, ours = make_params(), make_params()
    kwargs = dict(
        lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=nesterov, adjust_lr_fn=adjust_lr_fn
    )
    reference, muon = (
        torch.optim.Muon(theirs, **kwargs),
        Muon(ours, **kwargs, ns_dtype=torch.bfloat16),
    )
    run_steps(reference, theirs, steps=6)
    run_steps(muon, ours, steps=6)
    start = make_params()
    for name, p_ref, p, p0 in zip(SHAPES, theirs, ours, start, strict=True):
        assert (p_ref - p0).abs().max() > 0.01, (
            f"{name}: the reference did not move, so the comparison shows nothing"
        )
        assert torch.equal(p, p_ref), (
            f"{name}: max abs diff {(p - p_ref).abs().max():.3e} after 6 steps"
        )
        assert torch.equal(
            muon.state[p]["momentum_buffer"], reference.state[p_ref]["momentum_buffer"]
        ), name


# a model's blocks repeat shapes: Muon's step stacks each shape's matrices
STACKED = [(24, 40)] * 3 + [(40, 24)] * 2 + [(24, 24)]


def step_both(device: torch.device, shapes=STACKED, steps: int = 6) -> tuple[list, list, list]:
    """torch.optim.Muon and ours (bfloat16) from the same matrices on `device`, stepped on the same
    gradients: (start, theirs, ours).
    """
    gen = torch.Generator().manual_seed(7)
    start = [torch.randn(*shape, generator=gen) for shape in shapes]
    theirs, ours = ([p.to(device, copy=True).requires_grad_() for p in start] for _ in range(2))
    kwargs = dict(
        lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn="match_rms_adamw"
    )
    reference, muon = (
        torch.optim.Muon(theirs, **kwargs),
        Muon(ours, **kwargs, ns_dtype=torch.bfloat16),
    )
    for _ in range(steps):
        for p_ref, p in zip(theirs, ours, strict=True):
            p_ref.grad = torch.randn(p.shape, generator=gen).to(device)
            p.grad = p_ref.grad.clone()
        reference.step()
        muon.step()
    return start, theirs, ours


def test_matrices_of_one_shape_stepped_together_get_the_library_s_bits():
    """Our step orthogonalises every matrix of a shape in one stacked Newton-Schulz; the library,
    one at a time.
    """
    for i, (p0, p_ref, p) in enumerate(zip(*step_both(torch.device("cpu")), strict=True)):
        assert (p_ref - p0).abs().max() > 0.01, (
            f"matrix {i}: the reference did not move, so the comparison shows nothing"
        )
        assert torch.equal(p, p_ref), (
            f"matrix {i} {tuple(p.shape)}: max abs diff {(p - p_ref).abs().max():.3e} after 6 steps"
        )


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_newton_schulz_in_bfloat16_is_the_librarys(shape):
    from torch.optim._muon import _zeropower_via_newtonschulz

    grad = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    want = _zeropower_via_newtonschulz(grad, **NS)
    got = zeropower_via_newtonschulz(grad, **NS, dtype=torch.bfloat16)
    assert got.dtype == want.dtype == torch.bfloat16 and got.shape == shape
    assert torch.equal(got, want), f"max abs diff {(got.float() - want.float()).abs().max():.3e}"


# Newton-Schulz in bfloat16 rounds each iteration's three products to 8 bits of mantissa (2^-9
# relative at worst): over 5 iterations, about 15 x 2^-9 = 3% of the result, relative (Frobenius).
BF16_NS_ROUNDING = 15 * 2**-9


def relative_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_newton_schulz_in_float32_agrees_within_bfloat16_rounding(shape):
    """float32 is the same iteration, rounded less: within bfloat16's rounding of the library's
    result, and within float32's (1e-5) of the same iteration in float64."""
    grad = torch.randn(*shape, generator=torch.Generator().manual_seed(4))
    f32 = zeropower_via_newtonschulz(grad, **NS, dtype=torch.float32)
    bf16 = zeropower_via_newtonschulz(grad, **NS, dtype=torch.bfloat16)
    f64 = zeropower_via_newtonschulz(grad.double(), **NS, dtype=torch.float64)
    assert f32.dtype == torch.float32
    assert relative_diff(f32, bf16) <= BF16_NS_ROUNDING, (
        f"float32 against bfloat16: {relative_diff(f32, bf16):.4f} relative"
    )
    assert relative_diff(f32, f64) <= 1e-5, (
        f"float32 against float64: {relative_diff(f32, f64):.2e} relative"
    )
    assert relative_diff(f32, bf16) > 100 * relative_diff(f32, f64), (
        "float32 rounds like bfloat16: the cast is still there"
    )


@pytest.mark.parametrize("nesterov", [True, False])
def test_float32_steps_agree_with_torch_muon_within_bfloat16_rounding(nesterov):
    """After several steps, the parameters differ from the library's by at most bfloat16's rounding
    of the distance they moved (the updates differ by that much; decay is the same in both)."""
    theirs, ours = make_params(), make_params()
    kwargs = dict(lr=0.02, weight_decay=0.1, nesterov=nesterov, adjust_lr_fn="match_rms_adamw")
    reference, muon = (
        torch.optim.Muon(theirs, **kwargs),
        Muon(ours, **kwargs, ns_dtype=torch.float32),
    )
    run_steps(reference, theirs, steps=6)
    run_steps(muon, ours, steps=6)
    for name, p_ref, p, p0 in zip(SHAPES, theirs, ours, make_params(), strict=True):
        moved, apart = (p_ref - p0).detach().norm().item(), (p - p_ref).detach().norm().item()
        assert apart <= BF16_NS_ROUNDING * moved, (
            f"{name}: {apart:.3e} apart after moving {moved:.3e}"
        )
        assert apart > 0, f"{name}: float32 gave the bfloat16 bits"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_momentum_buffer_is_never_normalised_in_place(dtype):
    """Nesterov off: the update is the momentum buffer itself, and casting it to its own dtype
    returns it, not a copy. The library's bfloat16 path then divides bfloat16 parameters' buffer by
    its norm in place; ours must leave the buffer at (1 - momentum) x grad after one step."""
    (p,) = [
        torch.randn(8, 20, generator=torch.Generator().manual_seed(5)).to(dtype).requires_grad_()
    ]
    muon = Muon([p], lr=0.02, nesterov=False, ns_dtype=dtype)
    p.grad = torch.randn(8, 20, generator=torch.Generator().manual_seed(6)).to(dtype)
    muon.step()
    want = torch.zeros_like(p.grad).lerp_(p.grad, 1 - 0.95)
    assert torch.equal(muon.state[p]["momentum_buffer"], want), (
        "the momentum buffer was changed by Newton-Schulz"
    )


def test_a_torch_muon_state_dict_loads_and_steps_the_same():
    theirs, ours = make_params(), make_params()
    reference = torch.optim.Muon(theirs, lr=0.02, adjust_lr_fn="match_rms_adamw")
    run_steps(reference, theirs, steps=3)
    with torch.no_grad():
        for p, p_ref in zip(ours, theirs, strict=True):
            p.copy_(p_ref)
    # lr, adjust_lr_fn: overwritten by the loaded groups
    muon = Muon(ours, lr=0.5, ns_dtype=torch.bfloat16)
    saved = io.BytesIO()
    # as a checkpoint holds it: loading shares no tensor with the reference
    torch.save(reference.state_dict(), saved)
    muon.load_state_dict(torch.load(io.BytesIO(saved.getvalue())))
    assert (
        muon.param_groups[0]["lr"] == 0.02
        and muon.param_groups[0]["adjust_lr_fn"] == "match_rms_adamw"
    )
    assert muon.ns_dtype == torch.bfloat16  # the machine's choice, not the checkpoint's
    assert muon.state_dict()["state"].keys() == reference.state_dict()["state"].keys()
    assert all(s.keys() == {"momentum_buffer"} for s in muon.state_dict()["state"].values())
    run_steps(reference, theirs, steps=3, seed=7)
    run_steps(muon, ours, steps=3, seed=7)
    for name, p_ref, p in zip(SHAPES, theirs, ours, strict=True):
        assert torch.equal(p, p_ref), f"{name}: max abs diff {(p - p_ref).abs().max():.3e}"


def test_the_constructor_is_the_librarys():
    (p,) = make_params()[:1]
    with pytest.raises(ValueError, match="Adjust learning rate function"):
        Muon([p], adjust_lr_fn="rms")
    with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
        Muon([torch.zeros(3, requires_grad=True)])
    with pytest.raises(ValueError, match="ns_dtype must be one of"):
        Muon([p], ns_dtype=torch.float16)
    # the same groups: nothing of ours in them
    assert Muon([p]).defaults == torch.optim.Muon([p]).defaults


def test_auto_picks_bfloat16_where_the_hardware_computes_it(monkeypatch):
    cpu, cuda, mps = torch.device("cpu"), torch.device("cuda"), torch.device("mps")
    assert (
        newton_schulz_dtype("float32", cuda) == torch.float32
        and newton_schulz_dtype("bfloat16", cpu) == torch.bfloat16
    )
    assert newton_schulz_dtype("auto", cuda) == torch.bfloat16
    assert newton_schulz_dtype("auto", mps) == torch.float32
    for avx512_bf16, amx, want in [
        (True, False, torch.bfloat16),
        (False, True, torch.bfloat16),
        (False, False, torch.float32),
    ]:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v)
        assert newton_schulz_dtype("auto", cpu) == want, (avx512_bf16, amx)


def test_a_missing_or_failing_cpu_probe_means_float32(monkeypatch):
    """torch's CPU probes are private: a release without them, or one that fails, must not stop a
    run.
    """
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported")
    assert newton_schulz_dtype("auto", torch.device("cpu")) == torch.float32

    def broken():
        raise RuntimeError("no cpuinfo")

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", broken, raising=False)
    assert newton_schulz_dtype("auto", torch.device("cpu")) == torch.float32


@pytest.mark.parametrize("rule", [None, "original", "match_rms_adamw", "something-else"])
@pytest.mark.parametrize("shape", [(12, 40), (40, 12), (24, 24), (3, 5, 7)])
def test_the_learning_rate_rule_is_the_librarys(rule, shape):
    """adjusted_lr is written out so that training needs no private torch module; torch's own rule
    is its reference.
    """
    # private: present in the torch the suite runs on, which is what we compare with
    from torch.optim._muon import _adjust_lr

    assert adjusted_lr(0.02, rule, torch.Size(shape)) == _adjust_lr(0.02, rule, torch.Size(shape))


def test_the_config_chooses_the_dtype_and_the_run_says_which():
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11))
    for choice, name in [("float32", "float32"), ("bfloat16", "bfloat16")]:
        optimizer = make_optimizer(
            model, TrainConfig(optimizer="muon", muon_dtype=choice), torch.device("cpu")
        )
        assert describe(optimizer) == f"Muon (Newton-Schulz in {name}) + AdamW"
    assert describe(make_optimizer(model, TrainConfig(), torch.device("cpu"))) == "AdamW"
    assert (
        load_config(["--config", "char", "--train.muon_dtype=float32"]).train.muon_dtype
        == "float32"
    )
    with pytest.raises(
        ConfigError, match="train.muon_dtype must be one of auto, bfloat16, float32, got 'fp32'"
    ):
        load_config(["--config", "char", "--train.muon_dtype=fp32"])
