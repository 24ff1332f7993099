"""Tests for the KV cache: cached generation gives the same tokens as recomputing every step."""

import pytest
import torch
from conftest import assert_close

from model import GPT, ModelConfig
from model.attention import KVCache, MultiHead
from model.sampling import sample_next

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 65, "dropout": 0.0}
BACKENDS = ["sdpa", "manual", "tiled"]


def make_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(**{**TINY, **overrides})).eval()


def generate_both(
    model: GPT, prompt: torch.Tensor, n: int, seed: int = 7, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    cached = model.generate(
        prompt, n, generator=torch.Generator().manual_seed(seed), use_cache=True, **kwargs
    )
    uncached = model.generate(
        prompt, n, generator=torch.Generator().manual_seed(seed), use_cache=False, **kwargs
    )
    return cached, uncached


# 1. Same tokens with and without the cache


@pytest.mark.parametrize("scaled", [True, False], ids=["scaled", "unscaled"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_new", [10, 60], ids=["within-block", "past-block"])
def test_cached_equals_uncached(backend, scaled, n_new):
    model = make_gpt(attention=backend, scaled=scaled)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6], [7, 8, 9]])  # B = 3
    # a hot temperature: varied tokens
    cached, uncached = generate_both(model, prompt, n_new, temperature=1.5)
    assert cached.shape == (3, 3 + n_new)
    assert torch.equal(cached, uncached), (
        f"first differing column {int((cached != uncached).any(0).nonzero()[0])}"
    )
    assert len(set(cached[:, 3:].flatten().tolist())) > 5, (
        "samples should vary, or the test shows little"
    )


def test_cached_equals_uncached_long_prompt():
    model = make_gpt()
    # longer than block_size
    prompt = torch.randint(0, 65, (2, 40), generator=torch.Generator().manual_seed(0))
    cached, uncached = generate_both(model, prompt, 30)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached[:, :40], prompt)


def record_hidden_calls(model: GPT) -> list[tuple[int, int]]:
    """Wrap model.hidden to record, per call, (cached positions before it, new positions it
    encodes); -1: no cache.
    """
    calls, hidden = [], model.hidden

    def recording(idx, caches=None):
        calls.append((len(caches[0]) if caches is not None else -1, idx.shape[1]))
        return hidden(idx, caches)

    model.hidden = recording
    return calls


@pytest.mark.parametrize("block_size", [1, 4])
def test_small_block_sizes(block_size):
    """block_size 1 prefills a fresh cache every step; block_size 4 also appends to a cache that
    holds a past.
    """
    model = make_gpt(block_size=block_size)
    calls = record_hidden_calls(model)
    cached, uncached = generate_both(model, torch.tensor([[3], [5]]), 10, temperature=1.5)
    assert torch.equal(cached, uncached), (
        f"first differing column {int((cached != uncached).any(0).nonzero()[0])}"
    )
    assert len(set(cached[:, 1:].flatten().tolist())) > 5, (
        "samples should vary, or the test shows little"
    )
    steps = calls[:10]  # the cached run's 10 steps: (cached positions before, new positions)
    appends = [past for past, new in steps if past > 0]
    if block_size == 1:
        assert appends == [], (
            f"with block_size 1 every window is one token, so each step is a prefill: {steps}"
        )
    else:
        # Window of 4, then halved to 2 (block_size // 2): a prefill of 1 then appends at 1, 2, 3;
        # after each halving a prefill of 2 then appends at 2, 3.
        assert appends == [1, 2, 3, 2, 3, 2, 3], f"(cached, new) per step: {steps}"
        assert all(new == 1 for past, new in steps if past > 0), steps


# 2. Non-causal models cannot cache


def test_non_causal_generate_recomputes_every_step():
    """A no-mask model ignores use_cache: its tokens are those of a full forward pass on each step's
    window.
    """
    model = make_gpt(causal=False)
    assert not model.can_cache and make_gpt().can_cache
    calls = record_hidden_calls(model)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = model.generate(
        prompt, 24, generator=torch.Generator().manual_seed(7), temperature=1.5, use_cache=True
    )
    assert len(calls) == 24 and all(past == -1 for past, _ in calls), (
        f"a non-causal model must not use a cache: {calls}"
    )
    # The same sampling, step by step, with generate's window policy: at most 16 tokens, the last 8
    # kept when full.
    g, window, expected = torch.Generator().manual_seed(7), prompt, prompt
    for _ in range(24):  # 3 + 24 tokens: the window fills and is halved once
        with torch.no_grad():
            logits, _ = model(window)
        token = sample_next(logits[:, -1], 1.5, generator=g)
        expected, window = torch.cat([expected, token], 1), torch.cat([window, token], 1)
        if window.shape[1] > 16:
            window = window[:, -8:]
    assert torch.equal(out, expected), (
        f"first differing column {int((out != expected).any(0).nonzero()[0])}"
    )
    assert len(set(out[:, 3:].flatten().tolist())) > 5, (
        "samples should vary, or the test shows little"
    )


def test_multihead_refuses_cache_without_mask():
    mh = MultiHead(12, 3, 8, causal=False).eval()
    with pytest.raises(ValueError, match="causal"):
        mh(torch.randn(1, 2, 12), cache=KVCache())


# 3. Per-step logits equal the full forward pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_cached_step_logits_match_full_forward(backend):
    model = make_gpt(attention=backend)
    idx = torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(1))
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        full, _ = model(idx)  # (B, T, V)
        prefill = model.lm_head(model.hidden(idx[:, :5], caches))  # positions 0..4 at once
        assert_close(prefill, full[:, :5], atol=1e-5, msg=f"{backend} prefill logits")
        for t in range(5, 16):
            step = model.lm_head(model.hidden(idx[:, t : t + 1], caches))  # (B, 1, V)
            assert_close(
                step[:, 0], full[:, t], atol=1e-5, msg=f"{backend} cached logits at position {t}"
            )
            assert len(caches[0]) == t + 1
        chunk_caches = [KVCache() for _ in model.blocks]
        model.hidden(idx[:, :6], chunk_caches)
        # several new positions after a cached past
        chunk = model.lm_head(model.hidden(idx[:, 6:11], chunk_caches))
        assert_close(chunk, full[:, 6:11], atol=1e-5, msg=f"{backend} chunk after a cached past")


def test_cache_cannot_grow_past_block_size():
    model = make_gpt(block_size=4)
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        model.hidden(torch.zeros(1, 4, dtype=torch.long), caches)
        with pytest.raises(ValueError, match="block_size"):
            model.hidden(torch.zeros(1, 1, dtype=torch.long), caches)


# 4. The cures and rotary positions: a cached key keeps the turn of its own position

CHANGES = {
    "rope": {"positions": "rope"},
    "qk-norm": {"qk_norm": True},
    "softcap": {"softcap": 2.0},
    "rope+qk-norm+softcap": {"positions": "rope", "qk_norm": True, "softcap": 2.0},
    "no-pos": {"positions": "none"},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CHANGES)
def test_cached_equals_uncached_with_each_change(name, backend):
    # larger scores, so that the cap bites
    model = make_gpt(attention=backend, qk_init_std=0.3, **CHANGES[name])
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    # past the 16-token window: halved and refilled
    cached, uncached = generate_both(model, prompt, 40, temperature=1.5)
    assert torch.equal(cached, uncached), (
        f"{name}: first differing column {int((cached != uncached).any(0).nonzero()[0])}"
    )
    assert len(set(cached[:, 3:].flatten().tolist())) > 5, (
        "samples should vary, or the test shows little"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_rope_cached_steps_equal_the_full_pass_past_block_size(backend):
    """RoPE has no table: the cache may grow past block_size, each new query and key turned at
    len(cache) + t.
    """
    model = make_gpt(attention=backend, positions="rope", qk_norm=True)
    # 2.5 x block_size
    idx = torch.randint(0, 65, (2, 40), generator=torch.Generator().manual_seed(1))
    caches = [KVCache() for _ in model.blocks]
    with torch.no_grad():
        full, _ = model(idx)  # (B, 40, V)
        assert_close(
            model.lm_head(model.hidden(idx[:, :10], caches)), full[:, :10], atol=1e-5, msg="prefill"
        )
        for t in range(10, 40, 3):  # chunks of three new positions after the cached past
            chunk = model.lm_head(model.hidden(idx[:, t : t + 3], caches))
            assert_close(
                chunk,
                full[:, t : t + 3],
                atol=1e-5,
                msg=f"{backend}: positions {t}..{t + 2} after a cache",
            )
    assert len(caches[0]) == 40
