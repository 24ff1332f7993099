"""Attention as shipped models have it (model/ablations.py's SHIPPED changes): grouped-query heads
(--kv-heads), a sliding window (--window, model.window_layers), an output gate (--gate) and a
learned sink (--sink), on every path, in the KV cache, against Head and the formulas by hand, and as
one-line errors. Their resume is in tests/test_resume.py."""

import dataclasses

import pytest
import torch
from conftest import assert_close, assert_one_line_error, error_of

import train
from model import GPT, ModelConfig
from model.attention import Head, MultiHead, attention, causal_mask
from model.heads import head_name
from model.measurements import attention_summary, normalized_entropy
from model.roles import head_roles
from model.tiled import tiled_attention

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

SMALL = {
    "n_layer": 2,
    "n_head": 4,
    "n_embd": 16,
    "block_size": 12,
    "vocab_size": 11,
    "dropout": 0.0,
    "qk_init_std": 0.5,
}
ALL = {"kv_heads": 2, "window": 3, "gate": True, "sink": True}
VARIANTS = {  # ModelConfig fields of each variant and of the combinations tested
    "kv-heads1": {"kv_heads": 1},
    "kv-heads2": {"kv_heads": 2},
    "window3": {"window": 3},
    "window3-LG": {"window": 3, "window_layers": "LG"},
    "window1": {"window": 1},  # each query sees only itself
    "gate": {"gate": True},
    "sink": {"sink": True},
    "all": ALL,
    "all+rope+qk-norm": {**ALL, "positions": "rope", "qk_norm": True},
    "all+no-scale": {**ALL, "scaled": False},
    "all+softcap": {**ALL, "softcap": 1.5},
    "window3+no-mask": {"window": 3, "causal": False},
    "all+no-mask": {**ALL, "causal": False},
}
CAUSAL = [name for name, fields in VARIANTS.items() if fields.get("causal", True)]


def make_gpt(backend: str = "manual", seed: int = 0, **fields) -> GPT:
    """A small GPT; its sinks drawn away from 0 and its gates' biases from 0, so that both do
    something at once.
    """
    torch.manual_seed(seed)
    model = GPT(ModelConfig(**{**SMALL, **fields, "attention": backend})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("sink", "gate.bias")):
                p.normal_(0.0, 1.0)
    return model


def twin(model: GPT, backend: str) -> GPT:
    """The same model (one state dict) on another backend."""
    other = GPT(dataclasses.replace(model.cfg, attention=backend)).eval()
    other.load_state_dict(model.state_dict())
    return other


def batch(T: int = 12, B: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(
        0, SMALL["vocab_size"], (B, T), generator=torch.Generator().manual_seed(seed)
    )


# 1. Every backend equals the readable path, forward and gradients


@pytest.mark.parametrize("backend", ["sdpa", "tiled"])
@pytest.mark.parametrize("name", VARIANTS)
def test_every_backend_equals_the_readable_path_forward_and_backward(name, backend):
    readable = make_gpt("manual", **VARIANTS[name])
    fast = twin(readable, backend)
    idx, targets = batch(), batch(seed=2)
    results = []
    for model in (readable, fast):
        logits, loss = model(idx, targets)
        loss.backward()
        results.append((logits, {n: p.grad for n, p in model.named_parameters()}))
    (logits_r, grads_r), (logits_f, grads_f) = results
    assert_close(logits_f, logits_r, atol=1e-5, msg=f"{name}: logits, {backend} vs manual")
    assert grads_r.keys() == grads_f.keys()
    for n, grad in grads_r.items():
        assert grad is not None and grad.abs().max() > 0, f"{name}: {n} gets no gradient"
        assert_close(
            grads_f[n], grad, atol=1e-5, msg=f"{name}: gradient of {n}, {backend} vs manual"
        )


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "no-mask"])
@pytest.mark.parametrize("window", [0, 5])
def test_the_tiled_core_equals_attention_across_tiles_with_a_window_and_a_sink(causal, window):
    """Tiles of 4 over 7 queries after 6 cached keys: tiles hidden behind the window are skipped,
    the sink starts each row.
    """
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 7, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 3, 13, 8, generator=g, requires_grad=True) for _ in range(2))
    sink = torch.randn(3, generator=g, requires_grad=True)
    mask = causal_mask(7, 13, window=window, causal=causal)
    y_tiled = tiled_attention(q, k, v, mask, 8**-0.5, tile=4, sink=sink)
    y, _ = attention(q, k, v, mask, 8**-0.5, sink=sink)
    assert_close(y_tiled, y, atol=1e-5, msg="tiled vs attention()")
    grads = [torch.autograd.grad(out.square().sum(), (q, k, v, sink)) for out in (y_tiled, y)]
    for name, got, want in zip("qkv", grads[0], grads[1], strict=False):
        assert_close(got, want, atol=1e-5, msg=f"gradient of {name}")
    assert_close(grads[0][3], grads[1][3], atol=1e-5, msg="gradient of the sink")


# 2. The KV cache: token by token, the full pass; a K-head cache holds K heads, a windowed one W - 1
# positions


@pytest.mark.parametrize("backend", ["manual", "sdpa", "tiled"])
@pytest.mark.parametrize("name", CAUSAL)
def test_cached_steps_equal_the_full_pass(name, backend):
    model = make_gpt(backend, **VARIANTS[name])
    idx = batch()
    caches = model.new_caches()
    with torch.no_grad():
        full, _ = model(idx)  # (B, T, V)
        assert_close(
            model.lm_head(model.hidden(idx[:, :5], caches)),
            full[:, :5],
            atol=1e-5,
            msg=f"{name}: prefill",
        )
        for t in range(5, 12):  # then one position at a time
            step = model.lm_head(model.hidden(idx[:, t : t + 1], caches))  # (B, 1, V)
            assert_close(
                step[:, 0],
                full[:, t],
                atol=1e-5,
                msg=f"{name}, {backend}: cached logits at position {t}",
            )
    assert len(caches[0]) == 12


@pytest.mark.parametrize("backend", ["manual", "sdpa", "tiled"])
@pytest.mark.parametrize("name", ["all", "all+rope+qk-norm", "window3-LG"])
def test_generate_gives_the_same_tokens_with_and_without_the_cache(name, backend):
    model = make_gpt(backend, **VARIANTS[name])
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    kwargs = {"temperature": 1.5}
    # past block_size
    cached = model.generate(
        prompt, 20, generator=torch.Generator().manual_seed(7), use_cache=True, **kwargs
    )
    uncached = model.generate(
        prompt, 20, generator=torch.Generator().manual_seed(7), use_cache=False, **kwargs
    )
    assert torch.equal(cached, uncached), (
        f"{name}: first differing column {int((cached != uncached).any(0).nonzero()[0])}"
    )
    assert len(set(cached[:, 3:].flatten().tolist())) > 5, (
        "samples should vary, or the test shows little"
    )


@pytest.mark.parametrize("backend", ["manual", "sdpa", "tiled"])
def test_a_windowed_rope_cache_runs_past_block_size_keeping_w_minus_1_positions(backend):
    """With RoPE nothing ends at block_size: 3 x block_size positions, one at a time, each equal to
    the full pass.
    """
    model = make_gpt(backend, **VARIANTS["all+rope+qk-norm"], window_layers="LG")
    idx = batch(T=36)
    caches = model.new_caches()
    with torch.no_grad():
        full, _ = model(idx)  # (B, 36, V)
        model.hidden(idx[:, :4], caches)
        for t in range(4, 36):
            step = model.lm_head(model.hidden(idx[:, t : t + 1], caches))
            assert_close(
                step[:, 0], full[:, t], atol=1e-5, msg=f"{backend}: cached logits at position {t}"
            )
    local, wide = caches  # "LG": layer 0 has the window, layer 1 sees everything
    assert (len(local), len(wide)) == (36, 36)
    # (B, K, S, D): W - 1 = 2 kept, and all 36
    assert local.k.shape == (2, 2, 2, 4) and wide.k.shape == (2, 2, 36, 4)


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_a_k_head_cache_holds_k_of_h_heads_keys_and_values(kv_heads):
    model = make_gpt(kv_heads=kv_heads)
    caches = model.new_caches()
    with torch.no_grad():
        model.hidden(batch(T=10), caches)
    for cache in caches:
        assert cache.k.shape == cache.v.shape == (2, kv_heads, 10, 4)  # (B, K, S, D)
    full = make_gpt()
    full_caches = full.new_caches()
    with torch.no_grad():
        full.hidden(batch(T=10), full_caches)
    # K / H of the keys of a model with H
    assert cache.k.numel() * SMALL["n_head"] == full_caches[0].k.numel() * kv_heads


# 3. What the window and the sink do to the weights


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "no-mask"])
def test_a_window_leaves_exactly_zero_weight_past_it(causal):
    model = make_gpt(window=3, window_layers="LG", causal=causal)
    local, wide = model.attention_weights(batch())  # (B, H, T, T) each
    back = torch.arange(12)[:, None] - torch.arange(12)  # (T, T): how far back each key lies
    outside = back.abs() >= 3 if not causal else (back >= 3) | (back < 0)
    assert torch.equal(local[..., outside], torch.zeros_like(local[..., outside])), (
        "weight past the window"
    )
    assert (local[..., ~outside] > 0).all(), "every position in the window gets some weight"
    assert (wide[..., back >= 3] > 0).all(), "the global layer sees past the window"
    assert_close(local.sum(-1), torch.ones(2, 4, 12), atol=1e-6, msg="rows sum to 1")


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "no-mask"])
def test_entropy_counts_what_a_windowed_row_may_see(causal):
    """Uniform weights over a window are entropy 1, as over the whole past without one: the window
    sets the visible count.
    """
    mask = causal_mask(12, 12, window=4, causal=causal)  # (T, S)
    # (T, S): each row's weight spread over what it sees
    uniform = mask / mask.sum(-1, keepdim=True)
    assert_close(
        normalized_entropy(uniform, causal, window=4),
        torch.ones(11 if causal else 12),
        atol=1e-6,
        msg="uniform",
    )
    assert (normalized_entropy(uniform, causal) < 0.99).any(), (
        "counted without the window, the same rows look focused"
    )


def test_the_role_table_and_tensorboard_give_a_windowed_head_one_entropy():
    """inspect_attention.py's role table and attn/entropy's heads count the rows a window lets a
    query see alike.
    """
    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            n_layer=2,
            n_head=2,
            n_embd=16,
            block_size=16,
            vocab_size=20,
            window=4,
            window_layers="LG",
        )
    ).eval()
    idx = torch.randint(0, 20, (1, 16))
    summary = attention_summary(model, idx)
    windows = [block.attn.window for block in model.blocks]
    for row in head_roles(model.attention_weights(idx), True, idx, windows):
        tag = f"heads/entropy/{head_name(row['layer'], row['head'])}"
        assert row["entropy"] == pytest.approx(summary[tag], abs=1e-6), tag


def test_with_a_sink_each_row_and_the_sink_s_share_sum_to_1():
    model = make_gpt(sink=True)
    idx = batch()
    x = model.blocks[0].ln1(model.embed(idx))
    attn = model.blocks[0].attn
    with torch.no_grad():
        _, weights = attn(x, return_weights=True)  # (B, H, T, T)
        q, k, _ = attn.split_heads(x)
        scores = (q @ k.transpose(-2, -1) * attn.scale).masked_fill(
            torch.ones(12, 12, dtype=torch.bool).triu(1), float("-inf")
        )
        sink = attn.sink.view(1, 4, 1)  # (H,) -> (1, H, 1)
        # (B, H, T): the sink's weight, by hand
        share = sink.exp() / (sink.exp() + scores.exp().sum(-1))
    assert (share > 0).all(), "every row gives the sink some weight"
    assert_close(weights.sum(-1) + share, torch.ones(2, 4, 12), atol=1e-6, msg="row plus sink")
    assert (weights.sum(-1) < 1).all(), "the tokens get less than 1"


def test_a_sink_at_0_is_softmax_off_by_one():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 4, generator=g) for _ in range(3))
    mask = causal_mask(5, 5)
    _, weights = attention(q, k, v, mask, 0.5, sink=torch.zeros(()))
    scores = (q @ k.transpose(-2, -1) * 0.5).masked_fill(~mask, float("-inf"))
    assert_close(
        weights,
        scores.exp() / (1 + scores.exp().sum(-1, keepdim=True)),
        atol=1e-6,
        msg="exp(s) / (1 + sum exp(s))",
    )


# 4. The lessons' Head: the same heads, one at a time


@pytest.mark.parametrize(
    "name", ["window3", "gate", "sink", "window3+gate+sink", "window3+no-mask+sink"]
)
def test_heads_concatenated_equal_multihead(name):
    options = {
        "window": 3 if "window3" in name else 0,
        "gate": "gate" in name,
        "sink": "sink" in name,
        "causal": "no-mask" not in name,
    }
    C, H, D, T = 12, 3, 4, 8
    torch.manual_seed(0)
    mh = MultiHead(C, H, T, backend="sdpa", **options).eval()
    heads = [Head(C, D, T, **options).eval() for _ in range(H)]
    W = mh.qkv.weight.detach()  # (3C, C): rows [q heads; k heads; v heads]
    with torch.no_grad():
        if mh.sink is not None:
            mh.sink.normal_()
        if mh.gate is not None:
            mh.gate.bias.normal_()
        for h, head in enumerate(heads):
            rows = slice(h * D, (h + 1) * D)
            for part, lin in enumerate((head.query, head.key, head.value)):
                lin.weight.copy_(W[part * C :][rows])
            if head.gate is not None:
                (
                    head.gate.weight.copy_(mh.gate.weight[rows]),
                    head.gate.bias.copy_(mh.gate.bias[rows]),
                )
            if head.sink is not None:
                head.sink.copy_(mh.sink[h])
        x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
        concat = torch.cat([head(x) for head in heads], dim=-1)  # (B, T, C)
        assert_close(
            mh.proj(concat), mh(x), atol=1e-5, msg=f"{name}: proj(concat(Heads)) vs MultiHead"
        )
        _, w_mh = mh(x, return_weights=True)
        for h, head in enumerate(heads):
            assert_close(
                head(x, return_weights=True)[1],
                w_mh[:, h],
                atol=1e-6,
                msg=f"{name}: weights of head {h}",
            )


def test_a_gated_head_by_hand():
    """y = attention's y * sigmoid(x W^T + b), channel by channel."""
    torch.manual_seed(0)
    head, plain = Head(6, 3, 5, gate=True).eval(), Head(6, 3, 5).eval()
    plain.load_state_dict({k: v for k, v in head.state_dict().items() if not k.startswith("gate")})
    x = torch.randn(2, 5, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = plain(x) * torch.sigmoid(x @ head.gate.weight.T + head.gate.bias)
        assert_close(head(x), want, atol=1e-6, msg="gated head")


def test_grouped_query_heads_are_multihead_with_each_key_and_value_head_copied():
    """K = 2 of H = 4: query heads 0, 1 read key/value head 0, heads 2, 3 head 1; as a model with 4
    whose copies match.
    """
    torch.manual_seed(0)
    gqa, mha = MultiHead(16, 4, 8, kv_heads=2).eval(), MultiHead(16, 4, 8).eval()
    q, k, v = gqa.qkv.weight.detach().split([16, 8, 8])  # (C, C), 2 x (KD, C)

    def repeat(w: torch.Tensor) -> torch.Tensor:  # (K D, C) -> (H D, C)
        return w.view(2, 1, 4, 16).expand(2, 2, 4, 16).reshape(16, 16)

    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat([q, repeat(k), repeat(v)]))
        mha.proj.load_state_dict(gqa.proj.state_dict())
        x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
        assert_close(gqa(x), mha(x), atol=1e-6, msg="K = 2 vs H = 4 with copied heads")
    assert gqa.qkv.weight.shape == (32, 16) and mha.qkv.weight.shape == (48, 16)


# 5. Bad values: one line each


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"kv_heads": 3},
            r"model.kv_heads \(3\) must divide model.n_head \(4\): try one of \[1, 2, 4\]",
        ),
        ({"kv_heads": -1}, "must divide"),
        (
            {"window": 13},
            r"model.window must be a number of positions from 1 to block_size \(12\), "
            r"or 0 for none, got 13",
        ),
        ({"window": -2}, "model.window must be a number of positions"),
        ({"window": 3, "window_layers": "LX"}, "model.window_layers is a pattern of L"),
        ({"window": 3, "window_layers": ""}, "model.window_layers is a pattern of L"),
        ({"window": 3, "window_layers": "GG"}, "with an L"),
    ],
)
def test_bad_model_configs_are_one_line(fields, message):
    with pytest.raises(ValueError, match=message) as e:
        ModelConfig(**{**SMALL, **fields})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--window=0"], "--window takes a whole number of positions, at least 1, got '0'"),
        (["--window=abc"], "--window takes a whole number of positions, at least 1, got 'abc'"),
        (["--window=-3"], "--window takes a whole number of positions"),
        (
            ["--config", "char", "--window=1000"],
            "model.window must be a number of positions from 1 to block_size (128)",
        ),
        (["--config", "char", "--kv-heads=3"], "model.kv_heads (3) must divide model.n_head (4)"),
        (["--kv-heads=0"], "--kv-heads takes a whole number of key/value heads, at least 1"),
        (["--gate=true"], "--gate takes no value"),
        (
            ["--window=4", "--model.window_layers=local"],
            "model.window_layers is a pattern of L (local) and G (global) layers",
        ),
    ],
)
def test_bad_flags_are_one_line_and_exit_code_2(argv, needle, tmp_path, capsys):
    proc = error_of(
        train.main, [*argv, "--runs-dir", str(tmp_path / "runs"), "--device", "cpu"], capsys
    )
    assert_one_line_error(proc, needle)
    assert not (tmp_path / "runs").exists()
