"""Tests for model/attention.py: attention(), Head and MultiHead (docs/layout.md, rule 8: tests
assert real numbers).
"""

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close

from model import GPT, ModelConfig
from model.attention import Head, MultiHead, attention, attention_scores
from model.qk import rotate

FLAGS = list(itertools.product([True, False], [True, False]))  # (causal, scaled)
FLAG_IDS = [f"causal={c}-scaled={s}" for c, s in FLAGS]


def make_head(
    causal: bool = True,
    scaled: bool = True,
    n_embd: int = 8,
    head_size: int = 4,
    block_size: int = 6,
) -> Head:
    torch.manual_seed(0)
    return Head(n_embd, head_size, block_size, dropout=0.0, causal=causal, scaled=scaled).eval()


def make_multihead(
    causal: bool = True,
    scaled: bool = True,
    n_embd: int = 12,
    n_head: int = 3,
    block_size: int = 6,
    backend: str = "sdpa",
) -> MultiHead:
    torch.manual_seed(0)
    return MultiHead(
        n_embd, n_head, block_size, dropout=0.0, causal=causal, scaled=scaled, backend=backend
    ).eval()


# 1. Hand-computed examples


def test_attention_hand_computed_two_tokens():
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # T = 2, D = 2; q = k = v = x
    scale = 2**-0.5
    causal = torch.ones(2, 2, dtype=torch.bool).tril()

    y, w = attention(x, x, x, causal, scale)
    # Token 0 sees only itself; token 1 has scores [0, 1/sqrt(2)] -> weights [0.3302, 0.6698].
    assert_close(w, torch.tensor([[1.0, 0.0], [0.3302, 0.6698]]), atol=1e-4, msg="masked weights")
    assert_close(y, torch.tensor([[1.0, 0.0], [0.3302, 0.6698]]), atol=1e-4, msg="masked output")

    y_open, w_open = attention(x, x, x, None, scale)
    # Without the mask token 0 also sees token 1: scores [1/sqrt(2), 0].
    assert_close(y_open[0], torch.tensor([0.6698, 0.3302]), atol=1e-4, msg="unmasked token 0")
    assert_close(y_open[1], torch.tensor([0.3302, 0.6698]), atol=1e-4, msg="unmasked token 1")
    assert w_open[0, 1].item() == pytest.approx(0.3302, abs=1e-4)


def test_head_hand_computed_identity_projections():
    head = Head(n_embd=2, head_size=2, block_size=3).eval()
    with torch.no_grad():
        for lin in (head.query, head.key, head.value):
            lin.weight.copy_(torch.eye(2))
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])  # (1, 3, 2)
    # Token 2: q = [1, 1], scores [1, 1, 2] / sqrt(2) -> weights [0.2483, 0.2483, 0.5035].
    expected = torch.tensor([[[1.0, 0.0], [0.3302, 0.6698], [0.7517, 0.7517]]])

    y_manual, w = head(x, return_weights=True)
    assert_close(y_manual, expected, atol=1e-4, msg="Head return_weights=True")
    assert_close(
        w[0, 2], torch.tensor([0.2483, 0.2483, 0.5035]), atol=1e-4, msg="Head weights row 2"
    )
    y_sdpa = head(x)
    assert_close(y_sdpa, expected, atol=1e-4, msg="Head default (sdpa) path")


# 2. Against PyTorch


@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_attention_matches_sdpa(causal, scaled):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    scale = 4**-0.5 if scaled else 1.0
    mask = torch.ones(5, 5, dtype=torch.bool).tril() if causal else None
    y, w = attention(q, k, v, mask, scale)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    assert_close(y, ref, atol=1e-5, msg=f"attention vs sdpa causal={causal} scaled={scale}")
    assert w.shape == (2, 3, 5, 5)


# 3. Both paths agree


@pytest.mark.parametrize("T", [6, 4], ids=["T=block_size", "T<block_size"])
@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_head_weights_path_matches_sdpa(causal, scaled, T):
    head = make_head(causal, scaled, block_size=6)
    x = torch.randn(2, T, 8)
    y_default = head(x)
    y_manual, w = head(x, return_weights=True)
    assert y_default.shape == (2, T, 4)
    assert w.shape == (2, T, T)
    assert_close(y_manual, y_default, atol=1e-5, msg="Head manual vs sdpa")


@pytest.mark.parametrize("T", [6, 4], ids=["T=block_size", "T<block_size"])
@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_multihead_weights_path_matches_sdpa(causal, scaled, T):
    mh = make_multihead(causal, scaled, block_size=6)
    x = torch.randn(2, T, 12)
    y_default = mh(x)
    y_manual, w = mh(x, return_weights=True)
    assert y_default.shape == (2, T, 12)
    assert w.shape == (2, 3, T, T)
    assert_close(y_manual, y_default, atol=1e-5, msg="MultiHead return_weights vs default")


@pytest.mark.parametrize("T", [6, 4], ids=["T=block_size", "T<block_size"])
@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_multihead_manual_backend_matches_sdpa(causal, scaled, T):
    sdpa = make_multihead(causal, scaled, backend="sdpa")
    manual = MultiHead(12, 3, 6, dropout=0.0, causal=causal, scaled=scaled, backend="manual").eval()
    manual.load_state_dict(sdpa.state_dict())
    torch.manual_seed(1)
    x = torch.randn(2, T, 12)
    y_sdpa = sdpa(x)
    y_manual = manual(x)
    assert_close(y_manual, y_sdpa, atol=1e-5, msg="backend manual vs sdpa")
    y_manual_w, w = manual(x, return_weights=True)
    assert_close(y_manual_w, y_sdpa, atol=1e-5, msg="manual backend's weights path vs sdpa")
    # The returned weights, recomputed here from the qkv matrix: rows [q heads; k heads; v heads], D
    # = 4.
    q, k, _ = (x @ manual.qkv.weight.detach().T).split(12, dim=-1)  # (B, T, C) each
    q, k = (t.view(2, T, 3, 4).transpose(1, 2) for t in (q, k))  # (B, H, T, D)
    scores = q @ k.transpose(-2, -1) * (0.5 if scaled else 1.0)  # 1/sqrt(D) = 1/2
    if causal:
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    assert_close(
        w, scores.softmax(-1), atol=1e-6, msg="manual backend's weights vs softmax of q k^T by hand"
    )


# 4. Heads: MultiHead is H Heads side by side


def heads_from_multihead(
    mh: MultiHead, n_embd: int, n_head: int, block_size: int, **options
) -> list[Head]:
    D = n_embd // n_head
    W = mh.qkv.weight.detach()  # (3C, C): rows [q heads 0..H-1; k heads; v heads]
    heads = []
    for h in range(n_head):
        head = Head(n_embd, D, block_size, dropout=0.0, **options).eval()
        with torch.no_grad():
            for part, lin in enumerate((head.query, head.key, head.value)):
                start = part * n_embd + h * D
                lin.weight.copy_(W[start : start + D])
        heads.append(head)
    return heads


@pytest.mark.parametrize("causal,scaled", FLAGS, ids=FLAG_IDS)
def test_heads_concat_match_multihead(causal, scaled):
    C, H, T = 12, 3, 6
    mh = make_multihead(causal, scaled, n_embd=C, n_head=H, block_size=T)
    heads = heads_from_multihead(mh, C, H, T, causal=causal, scaled=scaled)
    torch.manual_seed(1)
    x = torch.randn(2, T, C)
    with torch.no_grad():
        concat = torch.cat([head(x) for head in heads], dim=-1)  # (B, T, C)
        assert_close(mh.proj(concat), mh(x), atol=1e-5, msg="proj(concat(Heads)) vs MultiHead")
        # The per-head weights also match MultiHead's weights for that head.
        _, w_mh = mh(x, return_weights=True)
        for h, head in enumerate(heads):
            _, w_h = head(x, return_weights=True)
            assert_close(w_h, w_mh[:, h], atol=1e-6, msg=f"weights of head {h}")


def test_heads_concat_match_multihead_identity_proj():
    C, H, T = 12, 3, 6
    mh = make_multihead(n_embd=C, n_head=H, block_size=T)
    with torch.no_grad():
        mh.proj.weight.copy_(torch.eye(C))
        mh.proj.bias.zero_()
    heads = heads_from_multihead(mh, C, H, T, causal=True, scaled=True)
    torch.manual_seed(1)
    x = torch.randn(2, T, C)
    with torch.no_grad():
        concat = torch.cat([head(x) for head in heads], dim=-1)
        assert_close(concat, mh(x), atol=1e-5, msg="concat(Heads) vs MultiHead with identity proj")


# 5. Causality


@pytest.mark.parametrize("kind", ["head", "multihead", "multihead-manual"])
@pytest.mark.parametrize("causal", [True, False])
def test_causality(kind, causal):
    if kind == "head":
        module, C = make_head(causal=causal, n_embd=8, block_size=6), 8
    else:
        backend = "manual" if kind == "multihead-manual" else "sdpa"
        module, C = make_multihead(causal=causal, n_embd=12, block_size=6, backend=backend), 12
    T, t = 6, 2
    torch.manual_seed(1)
    x = torch.randn(2, T, C)
    x2 = x.clone()
    x2[:, t + 1 :] = torch.randn(2, T - t - 1, C)  # change only the future of position t
    with torch.no_grad():
        y, y2 = module(x), module(x2)
    past_diff = (y[:, : t + 1] - y2[:, : t + 1]).abs().max().item()
    future_diff = (y[:, t + 1 :] - y2[:, t + 1 :]).abs().max().item()
    assert future_diff > 1e-3, (
        f"changing x after t should change outputs after t (max diff {future_diff:.3e})"
    )
    if causal:
        assert_close(
            y[:, : t + 1], y2[:, : t + 1], atol=1e-6, msg="causal outputs at positions <= t"
        )
    else:
        assert past_diff > 1e-3, (
            f"non-causal: earlier outputs should change, max diff {past_diff:.3e}"
        )


# 6. Weights


@pytest.mark.parametrize("kind", ["head", "multihead"])
@pytest.mark.parametrize("causal", [True, False])
def test_weights_rows_and_mask(kind, causal):
    T = 6
    if kind == "head":
        module, C = make_head(causal=causal, block_size=T), 8
    else:
        module, C = make_multihead(causal=causal, block_size=T), 12
    torch.manual_seed(1)
    x = torch.randn(2, T, C)
    with torch.no_grad():
        _, w = module(x, return_weights=True)
    assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-6, msg="rows sum to 1")
    above = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    upper = w[..., above]  # entries strictly above the diagonal
    if causal:
        assert torch.count_nonzero(upper).item() == 0, (
            f"causal weights above diagonal, max {upper.abs().max().item():.3e}"
        )
        assert (w[..., ~above] > 0).all(), "causal weights on/below the diagonal should be > 0"
    else:
        assert (upper > 0).all(), (
            f"non-causal weights above diagonal should be > 0, min {upper.min().item():.3e}"
        )


# 7. Errors


def test_too_long_sequence_raises():
    head = make_head(block_size=6)
    mh = make_multihead(block_size=6)
    with pytest.raises(ValueError, match="block_size"):
        head(torch.randn(1, 7, 8))
    with pytest.raises(ValueError, match="block_size"):
        head(torch.randn(1, 7, 8), return_weights=True)
    with pytest.raises(ValueError, match="block_size"):
        mh(torch.randn(1, 7, 12))
    with pytest.raises(ValueError, match="block_size"):
        mh(torch.randn(1, 7, 12), return_weights=True)


def test_indivisible_heads_raise():
    with pytest.raises(ValueError, match=r"n_embd \(10\) must be divisible by n_head \(3\)"):
        MultiHead(n_embd=10, n_head=3, block_size=4)


# 8. The causal mask: built per call, never stored


def test_causal_mask_not_in_state_dict():
    head, mh = make_head(), make_multihead()
    assert sorted(head.state_dict()) == ["key.weight", "query.weight", "value.weight"]
    assert sorted(mh.state_dict()) == ["proj.bias", "proj.weight", "qkv.weight"]
    # built when asked for
    assert torch.equal(mh.mask(6), torch.ones(6, 6, dtype=torch.bool).tril())
    # 2 queries after 2 cached positions
    after_cache = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mh.mask(2, 4), after_cache)
    assert math.isclose(head.scale, 4**-0.5)


def test_a_long_context_costs_no_mask_memory():
    """A stored (block_size, block_size) mask per layer made block_size 100,000 cost 10 GB a layer;
    masks are built per call now.
    """
    model = GPT(
        ModelConfig(
            n_layer=2, n_head=2, n_embd=16, block_size=4096, vocab_size=11, attention="manual"
        )
    )
    assert sum(b.numel() for b in model.buffers()) == 0
    idx = torch.randint(0, 11, (1, 5), generator=torch.Generator().manual_seed(0))
    weights = model.attention_weights(idx)[0]  # (1, H, 5, 5)
    # still causal
    assert weights.shape == (1, 2, 5, 5) and weights.triu(1).abs().max().item() == 0.0


# 9. The cures and rotary positions: QK-norm, the softcap, RoPE

OPTIONS = {  # Head/MultiHead keyword arguments for each change and the combinations tested
    "plain": {},
    "no-mask": {"causal": False},
    "no-scale": {"scaled": False},
    "qk-norm": {"qk_norm": True},
    "softcap": {"softcap": 1.5},  # small enough to bend the scores of random weights
    "rope": {"rope": True},
    "no-scale+qk-norm": {"scaled": False, "qk_norm": True},
    "rope+qk-norm+softcap": {"rope": True, "qk_norm": True, "softcap": 1.5},
    "no-mask+rope+softcap": {"causal": False, "rope": True, "softcap": 1.5},
}
GPT_OPTIONS = {  # the same as ModelConfig fields
    name: {"positions": "rope"} | {k: v for k, v in options.items() if k != "rope"}
    if options.get("rope")
    else dict(options)
    for name, options in OPTIONS.items()
} | {"no-pos": {"positions": "none"}}


def multihead(backend: str, **options) -> MultiHead:
    torch.manual_seed(0)
    mh = MultiHead(12, 3, 8, dropout=0.0, backend=backend, **options).eval()
    with torch.no_grad():
        # larger q and k than the init's, so that the cap and the norm change the scores visibly
        mh.qkv.weight.mul_(4.0)
    return mh


def reference_rotate(x: torch.Tensor, start: int = 0) -> torch.Tensor:
    """RoPE in complex numbers: each adjacent pair (x[2i], x[2i+1]) is x[2i] + i x[2i+1], multiplied
    by e^(i p theta_i).
    """
    T, D = x.shape[-2:]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    angles = torch.arange(start, start + T, dtype=torch.float64)[:, None] * theta  # (T, D/2)
    # (..., T, D/2) complex
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], D // 2, 2).contiguous())
    turned = pairs * torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(turned).reshape(x.shape).to(x.dtype)


@pytest.mark.parametrize("backend", ["manual", "sdpa", "tiled"])
@pytest.mark.parametrize("name", OPTIONS)
def test_every_backend_equals_the_readable_path_with_each_change(name, backend):
    mh = multihead(backend, **OPTIONS[name])
    x = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y_readable, _ = mh(x, return_weights=True)
        assert_close(
            mh(x),
            y_readable,
            atol=1e-5,
            msg=f"{name}: {backend} (core {mh.core}) vs the readable path",
        )


@pytest.mark.parametrize(
    "name", ["qk-norm", "softcap", "rope", "rope+qk-norm+softcap", "no-scale+qk-norm"]
)
def test_the_readable_path_equals_the_formulas_by_hand(name):
    """The weights, recomputed from qkv's rows with RoPE in complex numbers, the RMS norm and the
    cap written out.
    """
    options = OPTIONS[name]
    mh = multihead("manual", **options)
    x = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, w = mh(x, return_weights=True)
        q, k, _ = (x @ mh.qkv.weight.T).split(12, dim=-1)  # (B, T, C) each
        q, k = (t.view(2, 8, 3, 4).transpose(1, 2) for t in (q, k))  # (B, H, T, D)
        if options.get("qk_norm"):
            q, k = (t / (t.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() for t in (q, k))
        if options.get("rope"):
            q, k = reference_rotate(q), reference_rotate(k)
        scores = q @ k.transpose(-2, -1) * (0.5 if options.get("scaled", True) else 1.0)
        if options.get("softcap"):
            scores = 1.5 * torch.tanh(scores / 1.5)
        scores = scores.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
    assert_close(w, scores.softmax(-1), atol=1e-5, msg=f"{name}: weights vs the formulas")


@pytest.mark.parametrize("backend", ["manual", "sdpa", "tiled"])
@pytest.mark.parametrize("name", GPT_OPTIONS)
def test_every_backend_gives_the_readable_gpt_logits_with_each_change(name, backend):
    torch.manual_seed(0)
    cfg = ModelConfig(
        n_layer=2,
        n_head=2,
        n_embd=16,
        block_size=8,
        vocab_size=11,
        qk_init_std=0.5,
        **GPT_OPTIONS[name],
    )
    model = GPT(dataclasses.replace(cfg, attention=backend)).eval()
    readable = GPT(dataclasses.replace(cfg, attention="manual")).eval()
    readable.load_state_dict(model.state_dict())
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert_close(
            model(idx)[0],
            readable(idx)[0],
            atol=1e-5,
            msg=f"{name}: GPT logits, {backend} vs manual",
        )


def test_the_cap_bounds_every_score_even_for_huge_queries_and_keys():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 16, 8, generator=g) * 1e3, torch.randn(2, 3, 16, 8, generator=g) * 1e3
    raw = attention_scores(q, k, None, 8**-0.5)
    capped = attention_scores(q, k, None, 8**-0.5, softcap=50.0)
    assert raw.abs().max() > 1e5 and capped.abs().max() <= 50.0
    # small scores pass almost unchanged
    small = attention_scores(q / 1e4, k / 1e4, None, 8**-0.5, softcap=50.0)
    assert_close(
        small,
        attention_scores(q / 1e4, k / 1e4, None, 8**-0.5),
        atol=1e-6,
        msg="small scores under the cap",
    )
    model = GPT(
        ModelConfig(
            n_layer=2,
            n_head=2,
            n_embd=16,
            block_size=8,
            vocab_size=11,
            qk_init_std=30.0,
            softcap=5.0,
        )
    )
    for scores, _ in model.attention_probe(torch.randint(0, 11, (2, 8))):
        visible = scores[scores.isfinite()]
        assert visible.abs().max() <= 5.0 and visible.abs().max() > 4.9, (
            "the probe sees the capped scores the model uses"
        )


def test_qk_norm_leaves_each_heads_queries_and_keys_at_unit_rms():
    mh = multihead("sdpa", qk_norm=True)
    with torch.no_grad():
        mh.qkv.weight.mul_(100.0)  # norms that would grow without bound
        q, k, v = mh.split_heads(torch.randn(2, 8, 12))
    for t in (q, k):
        rms = t.pow(2).mean(-1).sqrt()  # (B, H, T): one per head and position
        assert_close(rms, torch.ones_like(rms), atol=1e-4, msg="RMS of each head's query and key")
    assert v.pow(2).mean(-1).sqrt().min() > 10, "the values are left as they are"


def test_the_rotation_equals_the_complex_number_reference():
    x = torch.randn(2, 3, 40, 8, generator=torch.Generator().manual_seed(0))
    for start in (0, 5, 1000):
        assert_close(
            rotate(x, start),
            reference_rotate(x, start),
            atol=2e-5,
            msg=f"rotate from position {start}",
        )
    assert_close(
        rotate(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5, msg="a rotation keeps every length"
    )
    assert torch.equal(rotate(x)[..., 0, :], x[..., 0, :]), "position 0 is not turned"


def test_rope_scores_depend_only_on_the_distance():
    """Shift every position by the same offset: queries and keys turn further, their scores stay the
    same.
    """
    mh = multihead("manual", rope=True)
    x = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        # (B, H, T, T)
        scores = [
            attention_scores(*mh.split_heads(x, start)[:2], None, mh.scale)
            for start in (0, 17, 300)
        ]
        q0, k0, _ = mh.split_heads(x, 0)
        q17, k17, _ = mh.split_heads(x, 17)
    assert (q17 - q0).abs().max() > 0.1, "the offset turns the queries"
    for shifted, start in zip(scores[1:], (17, 300), strict=True):
        assert_close(
            shifted, scores[0], atol=1e-4, msg=f"scores with every position shifted by {start}"
        )
    plain = attention_scores(*multihead("manual").split_heads(x)[:2], None, mh.scale)
    assert (plain - scores[0]).abs().max() > 0.1, "RoPE changes the scores"


@pytest.mark.parametrize("name", OPTIONS)
def test_heads_concatenated_equal_multihead_with_each_change(name):
    options = OPTIONS[name]
    mh = multihead("sdpa", **options)
    heads = heads_from_multihead(mh, 12, 3, 8, **options)
    x = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        concat = torch.cat([head(x) for head in heads], dim=-1)  # (B, T, C)
        assert_close(
            mh.proj(concat), mh(x), atol=1e-5, msg=f"{name}: proj(concat(Heads)) vs MultiHead"
        )
        _, w_mh = mh(x, return_weights=True)
        for h, head in enumerate(heads):
            assert_close(
                head(x, return_weights=True)[1],
                w_mh[:, h],
                atol=1e-5,
                msg=f"{name}: weights of head {h}",
            )
