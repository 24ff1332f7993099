"""Tests for model/tiled.py: the online-softmax attention equals the readable attention()."""

import dataclasses
import itertools

import pytest
import torch
from conftest import assert_close

from model import GPT, ModelConfig
from model.attention import MultiHead, attention, causal_mask
from model.tiled import tiled_attention

FLAGS = list(itertools.product([True, False], [True, False]))  # (causal, scaled)
FLAG_IDS = [f"causal={c}-scaled={s}" for c, s in FLAGS]


def qkv(*shape: int, seed: int = 0, requires_grad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).requires_grad_(requires_grad) for _ in range(3)]


def readable(q, k, v, causal: bool, scale: float, softcap: float = 0.0) -> torch.Tensor:
    T, S = q.shape[-2], k.shape[-2]
    mask = torch.ones(S, S, dtype=torch.bool).tril()[S - T :] if causal else None  # the last T rows
    return attention(q, k, v, mask, scale, softcap=softcap)[0]


def tiled(q, k, v, causal: bool, scale: float, **options) -> torch.Tensor:
    """tiled_attention under the causal mask for the last T of S positions (as after a KV cache), or
    none.
    """
    T, S = q.shape[-2], k.shape[-2]
    return tiled_attention(q, k, v, causal_mask(T, S) if causal else None, scale, **options)


# 1. Equal to attention()


@pytest.mark.parametrize(
    "T,tile",
    [(64, 16), (50, 16), (7, 16), (1, 16), (33, 32)],
    ids=["T=4tiles", "T=50", "T<tile", "T=1", "T=33"],
)
@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_tiled_matches_readable(causal, scaled, T, tile):
    q, k, v = qkv(2, 3, T, 8)  # (B, H, T, D)
    scale = 8**-0.5 if scaled else 1.0
    y = tiled(q, k, v, causal, scale, tile=tile)
    assert y.shape == (2, 3, T, 8)
    assert_close(
        y,
        readable(q, k, v, causal, scale),
        atol=1e-5,
        msg=f"tiled vs attention() T={T} tile={tile}",
    )


def test_tiled_any_leading_dims():
    q, k, v = qkv(5, 20, 4)  # (T, D) with one leading dim
    assert_close(
        tiled(q, k, v, True, 0.5, tile=8), readable(q, k, v, True, 0.5), atol=1e-5, msg="(B, T, D)"
    )
    q, k, v = qkv(20, 4)
    assert_close(
        tiled(q, k, v, False, 0.5, tile=8), readable(q, k, v, False, 0.5), atol=1e-5, msg="(T, D)"
    )


@pytest.mark.parametrize("T", [1, 5], ids=["one-query", "five-queries"])
def test_tiled_queries_after_cached_keys(T):
    """Fewer queries than keys: the queries are the last T positions, as after a KV cache."""
    q, _, _ = qkv(2, 2, T, 8, seed=1)
    _, k, v = qkv(2, 2, 37, 8, seed=2)
    y = tiled(q, k, v, True, 8**-0.5, tile=16)
    assert_close(y, readable(q, k, v, True, 8**-0.5), atol=1e-5, msg=f"T={T} queries after 37 keys")


def test_large_scores_do_not_overflow():
    q, k, v = qkv(1, 1, 40, 8)
    q = q * 30  # unscaled scores in the hundreds: a plain exp() would overflow to inf
    y = tiled(q, k, v, True, 1.0, tile=16)
    assert torch.isfinite(y).all()
    assert_close(y, readable(q, k, v, True, 1.0), atol=1e-5, msg="large scores")


@pytest.mark.parametrize(
    "T,tile", [(64, 16), (50, 16), (7, 16)], ids=["T=4tiles", "T=50", "T<tile"]
)
@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_tiled_caps_each_tiles_scores_as_the_readable_path_does(causal, scaled, T, tile):
    q, k, v = qkv(2, 3, T, 8)
    q = q * 20  # scores well past the cap, so that it changes the result
    scale = 8**-0.5 if scaled else 1.0
    y = tiled(q, k, v, causal, scale, tile=tile, softcap=3.0)
    assert_close(
        y,
        readable(q, k, v, causal, scale, softcap=3.0),
        atol=1e-5,
        msg=f"capped: tiled vs attention() T={T}",
    )
    assert (y - readable(q, k, v, causal, scale)).abs().max() > 1e-2, "the cap changes the output"


# 2. Gradients agree with the readable path


@pytest.mark.parametrize("softcap", [0.0, 2.0], ids=["uncapped", "capped"])
@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_tiled_gradients_match(causal, scaled, softcap):
    scale = 8**-0.5 if scaled else 1.0
    grads = []
    for fn in (readable, lambda *a, **kw: tiled(*a, tile=16, **kw)):
        q, k, v = qkv(2, 2, 40, 8, requires_grad=True)
        y = fn(q, k, v, causal, scale, softcap=softcap)
        # a weighted sum, so every output matters differently
        (y * torch.linspace(-1, 1, 8)).sum().backward()
        grads.append((q.grad, k.grad, v.grad))
    for name, g_readable, g_tiled in zip("qkv", *grads, strict=True):
        assert_close(g_tiled, g_readable, atol=1e-4, msg=f"d{name} tiled vs readable")


# 3. The backend in MultiHead and GPT


@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_multihead_tiled_matches_sdpa(causal, scaled):
    torch.manual_seed(0)
    sdpa = MultiHead(12, 3, 40, causal=causal, scaled=scaled, backend="sdpa").eval()
    tiled = MultiHead(12, 3, 40, causal=causal, scaled=scaled, backend="tiled").eval()
    tiled.load_state_dict(sdpa.state_dict())
    x = torch.randn(2, 40, 12)
    with torch.no_grad():
        assert_close(tiled(x), sdpa(x), atol=1e-5, msg="MultiHead tiled vs sdpa")


@pytest.mark.parametrize("causal,scaled", [(True, True), (False, False)])
def test_gpt_tiled_matches_sdpa(causal, scaled):
    cfg = ModelConfig(
        n_layer=2, n_head=2, n_embd=32, block_size=300, vocab_size=65, causal=causal, scaled=scaled
    )
    torch.manual_seed(0)
    sdpa = GPT(cfg).eval()
    tiled = GPT(dataclasses.replace(cfg, attention="tiled")).eval()
    tiled.load_state_dict(sdpa.state_dict())
    # more than one 256-tile
    idx = torch.randint(0, 65, (2, 300), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert_close(tiled(idx)[0], sdpa(idx)[0], atol=1e-5, msg="GPT logits tiled vs sdpa")


def test_gpt_trains_with_tiled_backend():
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            n_layer=2,
            n_head=2,
            n_embd=32,
            block_size=16,
            vocab_size=65,
            dropout=0.1,
            attention="tiled",
        )
    ).train()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 65, (4, 16), generator=g), torch.randint(0, 65, (4, 16), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(p.grad is not None for p in model.parameters())
    assert losses[-1] < 0.8 * losses[0], (
        f"loss {losses[0]:.3f} -> {losses[-1]:.3f} in 30 steps with dropout 0.1"
    )
