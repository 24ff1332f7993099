"""Tests for model/gpt.py: shapes, loss at init, parameter count, init, overfitting, generate,
flags.
"""

import math

import pytest
import torch
from conftest import assert_close

from model import GPT, ModelConfig
from model.sampling import SamplingError, sample_next

# see conftest: tiny models run faster on one thread
pytestmark = pytest.mark.usefixtures("one_cpu_thread")

TINY = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 65, "dropout": 0.0}


def make_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(**{**TINY, **overrides}))


def expected_params(L: int, C: int, V: int, T: int) -> int:
    return 12 * L * C**2 + 10 * L * C + V * C + T * C + 2 * C


# 1. Shape and initial loss


def test_logits_shape_and_initial_loss():
    model = make_gpt(n_embd=64, n_head=4, block_size=32).eval()
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 65, (4, 32), generator=g)
    targets = torch.randint(0, 65, (4, 32), generator=g)
    with torch.no_grad():
        logits, loss = model(idx, targets)
        logits_only, no_loss = model(idx)
    assert logits.shape == (4, 32, 65)
    assert no_loss is None
    assert_close(logits_only, logits, atol=0.0, msg="logits with and without targets")
    assert abs(loss.item() - math.log(65)) < 0.3, (
        f"initial loss {loss.item():.4f}, expected ~ln 65 = {math.log(65):.4f}"
    )


# 2. Parameter count


def test_num_params_small_counted_two_ways():
    model = make_gpt()
    assert model.num_params() == expected_params(L=2, C=32, V=65, T=16) == 27_872
    # state_dict lists the tied matrix twice (tok_emb.weight and lm_head.weight): count it once.
    state = model.state_dict()
    assert state["lm_head.weight"].data_ptr() == state["tok_emb.weight"].data_ptr()
    assert sum(t.numel() for name, t in state.items() if name != "lm_head.weight") == 27_872


def test_num_params_reference_config():
    assert expected_params(L=6, C=384, V=65, T=256) == 10_763_904
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65))
    assert model.num_params() == 10_763_904


# 3. Weight tying


def test_lm_head_tied_to_token_embedding():
    model = make_gpt()
    assert model.lm_head.weight is model.tok_emb.weight
    assert model.lm_head.weight.data_ptr() == model.tok_emb.weight.data_ptr()


# 4. Initialisation


@pytest.mark.parametrize("qk_std", [0.02, 1 / math.sqrt(64)], ids=["qk=0.02", "qk=1/sqrt(C)"])
def test_init_stds(qk_std):
    L, C = 4, 64
    model = make_gpt(n_layer=L, n_head=4, n_embd=C, qk_init_std=qk_std)
    resid_std = 0.02 / math.sqrt(2 * L)
    for i, block in enumerate(model.blocks):
        for name, w in (("attn.proj", block.attn.proj.weight), ("mlp.proj", block.mlp.proj.weight)):
            std = w.std().item()
            assert abs(std / resid_std - 1) < 0.1, (
                f"block {i} {name} std {std:.5f}, expected {resid_std:.5f}"
            )
        qk = block.attn.qkv.weight[: 2 * C]
        v = block.attn.qkv.weight[2 * C :]
        assert abs(qk.std().item() / qk_std - 1) < 0.1, (
            f"block {i} q/k std {qk.std().item():.5f}, expected {qk_std:.5f}"
        )
        assert abs(v.std().item() / 0.02 - 1) < 0.1, (
            f"block {i} value std {v.std().item():.5f}, expected 0.02"
        )
        assert abs(block.mlp.fc.weight.std().item() / 0.02 - 1) < 0.1
        assert torch.count_nonzero(block.attn.proj.bias).item() == 0
        assert torch.count_nonzero(block.mlp.fc.bias).item() == 0
    assert abs(model.tok_emb.weight.std().item() / 0.02 - 1) < 0.1


# 5. Overfitting one batch


def test_overfits_one_batch():
    model = make_gpt().train()
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 65, (4, 16), generator=g)
    y = torch.randint(0, 65, (4, 16), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _, loss = model(x, y)
    start = loss.item()
    for _ in range(200):
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if loss.item() < start / 2:
            break
    with torch.no_grad():
        _, final = model.eval()(x, y)
    assert final.item() < start / 2, (
        f"loss {start:.3f} -> {final.item():.3f} after 200 steps, expected < {start / 2:.3f}"
    )


# 6. generate


def test_generate_top_k_1_is_greedy_and_deterministic():
    model = make_gpt().eval()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out1 = model.generate(prompt, max_new_tokens=5, top_k=1)
    out2 = model.generate(prompt, max_new_tokens=5, top_k=1)
    assert out1.shape == (2, 3 + 5)
    assert torch.equal(out1, out2)
    assert torch.equal(out1[:, :3], prompt)
    # Each new token is the argmax of the logits at the previous position.
    with torch.no_grad():
        logits, _ = model(out1[:, :-1])
    assert torch.equal(logits[:, 2:].argmax(-1), out1[:, 3:])


def test_generate_seeded_generator_reproducible():
    model = make_gpt().eval()
    prompt = torch.zeros(2, 1, dtype=torch.long)
    a = model.generate(prompt, 20, generator=torch.Generator().manual_seed(123))
    b = model.generate(prompt, 20, generator=torch.Generator().manual_seed(123))
    c = model.generate(prompt, 20, generator=torch.Generator().manual_seed(124))
    assert a.shape == (2, 21)
    assert torch.equal(a, b)
    assert not torch.equal(a, c), "a different seed should give different samples"
    assert int(a.min()) >= 0 and int(a.max()) < 65


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_generate_past_block_size_crops_context(use_cache):
    model = make_gpt(block_size=8).eval()
    prompt = torch.tensor([[7, 8, 9]])
    out = model.generate(prompt, max_new_tokens=20, top_k=1, use_cache=use_cache)
    assert out.shape == (1, 23)

    def greedy(context: torch.Tensor) -> int:
        with torch.no_grad():
            logits, _ = model(context)
        return int(logits[0, -1].argmax())

    # The window grows to block_size = 8 tokens; the token after a full window restarts it
    # from the most recent 8 // 2 = 4 tokens. Token 8 is predicted from out[0:8]; token 9,
    # once the window was halved, from out[5:9] (positions 0..3), not from out[1:9].
    assert greedy(out[:, 0:8]) == int(out[0, 8])
    assert greedy(out[:, 5:9]) == int(out[0, 9])
    # Every token follows that policy: replay it step by step with full forward passes.
    window = prompt
    for t in range(3, 23):
        assert greedy(window) == int(out[0, t]), (
            f"token {t} is not the greedy prediction from its window"
        )
        window = torch.cat([window, out[:, t : t + 1]], dim=1)
        if window.shape[1] > 8:
            window = window[:, -4:]


# Sampler: 20,000 draws from one logits vector. A token of probability p appears N p times, with a
# binomial standard deviation sqrt(N p (1 - p)); in frequency, at most sqrt(0.25 / N) = 0.0035. 5
# standard deviations (0.0177) bound every frequency: a seeded draw fails only on a real difference,
# and the distributions compared below differ by more than that.
DRAWS = 20_000
# unsorted, so top-k must map back to token ids
SAMPLER_LOGITS = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0, -3.0])


def frequencies(temperature: float, top_k: int | None, top_p: float | None = None) -> torch.Tensor:
    logits = SAMPLER_LOGITS.expand(DRAWS, -1)  # (N, V): every row the same vector
    ids = sample_next(logits, temperature, top_k, top_p, torch.Generator().manual_seed(0))  # (N, 1)
    assert ids.shape == (DRAWS, 1)
    return torch.bincount(ids[:, 0], minlength=6).double() / DRAWS


def binomial_tolerance(p: torch.Tensor) -> torch.Tensor:
    return 5 * (p * (1 - p) / DRAWS).sqrt() + 1e-12


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_sample_next_frequencies_match_softmax_at_temperature(temperature):
    p = (SAMPLER_LOGITS.double() / temperature).softmax(-1)
    f = frequencies(temperature, top_k=None)
    off = (f - p).abs()
    assert (off <= binomial_tolerance(p)).all(), (
        f"frequencies {f.tolist()} vs softmax {p.tolist()}: max diff {off.max():.4f}"
    )
    other = SAMPLER_LOGITS.double().softmax(-1)  # what ignoring the temperature would give
    if temperature != 1.0:
        assert (other - p).abs().max() > 10 * binomial_tolerance(p).max(), (
            "the test could not tell the temperatures apart"
        )


@pytest.mark.parametrize("top_k", [2, 3, 5])
def test_sample_next_top_k_renormalises_the_k_likeliest(top_k):
    order = SAMPLER_LOGITS.argsort(descending=True)  # token ids, likeliest first: 2, 4, 0, 3, 1, 5
    kept, dropped = order[:top_k], order[top_k:]
    f = frequencies(0.8, top_k)
    assert f[dropped].sum() == 0, f"tokens outside the top {top_k} were drawn: {f.tolist()}"
    # the softmax over the k likeliest alone, at temperature 0.8
    p = (SAMPLER_LOGITS[kept].double() / 0.8).softmax(-1)
    off = (f[kept] - p).abs()
    assert (off <= binomial_tolerance(p)).all(), (
        f"top-{top_k} frequencies {f[kept].tolist()} vs {p.tolist()}: max diff {off.max():.4f}"
    )


# At temperature 1 the sampler's probabilities, likeliest first, are
# token 2: 0.5609, 4: 0.2063, 0: 0.1252, 3: 0.0759, 1: 0.0279, 5: 0.0038 (cumulative 0.5609, 0.7672,
# 0.8924, 0.9683, 0.9962, 1). The nucleus for p is the shortest run of that list whose cumulative
# probability reaches p. With top_k = 3 first, tokens 2, 4, 0 renormalised are 0.6285, 0.2312,
# 0.1403 (cumulative 0.6285, 0.8597, 1).
@pytest.mark.parametrize(
    ("top_k", "top_p", "nucleus"),
    [
        (None, 0.5, [2]),
        (None, 0.7, [2, 4]),
        (None, 0.8, [2, 4, 0]),
        (None, 0.95, [2, 4, 0, 3]),
        (None, 1.0, [2, 4, 0, 3, 1, 5]),
        (3, 0.8, [2, 4]),
        (3, 0.9, [2, 4, 0]),
        (5, 0.97, [2, 4, 0, 3]),
    ],
)
def test_sample_next_top_p_renormalises_the_nucleus(top_k, top_p, nucleus):
    probs = SAMPLER_LOGITS.double().softmax(-1)
    order = SAMPLER_LOGITS.argsort(descending=True)[: top_k or 6]
    pool = probs[order] / probs[order].sum()  # after top-k, renormalised
    # the figures above hold: the shortest run of the likeliest tokens that reaches top_p
    n = len(nucleus)
    assert order[:n].tolist() == nucleus and pool[: n - 1].sum() < top_p <= pool[:n].sum() + 1e-12
    f = frequencies(1.0, top_k, top_p)
    outside = [t for t in range(6) if t not in nucleus]
    assert f[outside].sum() == 0, (
        f"top-p {top_p} drew tokens outside the nucleus {nucleus}: {f.tolist()}"
    )
    p = probs[nucleus] / probs[nucleus].sum()  # the nucleus renormalised
    off = (f[nucleus] - p).abs()
    assert (off <= binomial_tolerance(p)).all(), (
        f"top-p {top_p} frequencies {f[nucleus].tolist()} vs {p.tolist()}: max diff {off.max():.4f}"
    )


# 1e-300 and 1e-46 are 0 in float32: the nucleus must not end up empty
@pytest.mark.parametrize("top_p", [1e-300, 1e-46, 1e-9])
def test_the_nucleus_always_holds_the_likeliest_token(top_p):
    """However small top_p is, the likeliest token alone makes up the nucleus: every draw is token 2
    (probability 0.5609).
    """
    f = frequencies(1.0, None, top_p)
    assert f[2] == 1.0, f"top-p {top_p} drew {f.tolist()}"
    for top_k in (1, 3):
        assert (
            sample_next(
                SAMPLER_LOGITS.expand(64, -1), 0.8, top_k, top_p, torch.Generator().manual_seed(0)
            )
            == 2
        ).all()


def test_temperature_zero_is_greedy_whatever_the_filters_and_seed():
    logits = torch.randn(64, 65, generator=torch.Generator().manual_seed(0))
    expected = logits.argmax(-1, keepdim=True)
    for top_k, top_p, seed in [(None, None, 0), (5, None, 1), (None, 0.3, 2), (200, 0.9, 3)]:
        assert torch.equal(
            sample_next(logits, 0, top_k, top_p, torch.Generator().manual_seed(seed)), expected
        )
    model = make_gpt().eval()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    greedy = model.generate(prompt, 12, temperature=0, generator=torch.Generator().manual_seed(5))
    assert torch.equal(greedy, model.generate(prompt, 12, top_k=1)), (
        "temperature 0 should pick what top_k=1 picks"
    )


# 1e-50 is 0 in float32; 2 / 1e-40 overflows it
@pytest.mark.parametrize("temperature", [1e-50, 1e-40])
def test_a_temperature_too_small_for_float32_is_an_error(temperature):
    with pytest.raises(
        SamplingError,
        match=f"temperature {temperature:g} is too small: .* use 0 for greedy decoding",
    ):
        sample_next(SAMPLER_LOGITS[None], temperature)
    # small, but the logits still fit: the likeliest token
    assert sample_next(SAMPLER_LOGITS[None], 1e-30).item() == 2


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_logits_are_an_error_not_a_token(bad):
    logits = SAMPLER_LOGITS.clone()
    logits[1] = bad
    for temperature in (0, 1.0):
        with pytest.raises(SamplingError, match="logits are not finite"):
            sample_next(logits[None], temperature, top_k=3)


# 7. causal / scaled flags reach every head


def test_flags_reach_every_block():
    for causal, scaled in ((True, True), (False, False)):
        model = make_gpt(n_layer=3, causal=causal, scaled=scaled)
        head_size = 32 // 2
        for i, block in enumerate(model.blocks):
            assert block.attn.causal is causal, (
                f"block {i} causal={block.attn.causal}, config causal={causal}"
            )
            expected_scale = head_size**-0.5 if scaled else 1.0
            assert block.attn.scale == expected_scale, (
                f"block {i} scale {block.attn.scale}, expected {expected_scale}"
            )


@pytest.mark.parametrize("causal", [True, False])
def test_attention_weights_every_layer(causal):
    model = make_gpt(n_layer=3, causal=causal).eval()
    idx = torch.randint(0, 65, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        weights = model.attention_weights(idx)
    assert len(weights) == 3
    above = torch.ones(10, 10, dtype=torch.bool).triu(diagonal=1)
    for i, w in enumerate(weights):
        assert w.shape == (2, 2, 10, 10)
        assert_close(w.sum(-1), torch.ones(2, 2, 10), atol=1e-6, msg=f"layer {i} rows sum to 1")
        upper = w[..., above]
        if causal:
            assert torch.count_nonzero(upper).item() == 0, (
                f"layer {i}: max weight above diagonal {upper.max().item():.3e}"
            )
        else:
            assert (upper > 0).all(), (
                f"layer {i}: min weight above diagonal {upper.min().item():.3e}"
            )


# 8. sdpa and manual give the same logits


@pytest.mark.parametrize("causal,scaled", [(True, True), (False, False)])
def test_sdpa_and_manual_same_logits(causal, scaled):
    sdpa = make_gpt(attention="sdpa", causal=causal, scaled=scaled).eval()
    manual = make_gpt(seed=1, attention="manual", causal=causal, scaled=scaled).eval()
    manual.load_state_dict(sdpa.state_dict())
    idx = torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits_sdpa, _ = sdpa(idx)
        logits_manual, _ = manual(idx)
    assert_close(logits_manual, logits_sdpa, atol=1e-5, msg="manual vs sdpa logits")


# 9. Errors


def test_too_long_input_raises():
    model = make_gpt(block_size=8)
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="block_size"):
        model.attention_weights(torch.zeros(1, 9, dtype=torch.long))
    logits, _ = model(torch.zeros(1, 8, dtype=torch.long))  # exactly block_size is fine
    assert logits.shape == (1, 8, 65)


# 10. Without positions (--no-pos): attention is blind to order, until the mask gives it back


def logits_of(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(idx)[0]


def test_without_positions_there_is_no_position_embedding():
    model = make_gpt(positions=False)
    assert model.pos_emb is None and not any(
        name.startswith("pos_emb") for name in model.state_dict()
    )
    assert model.num_params() == expected_params(L=2, C=32, V=65, T=16) - 16 * 32 == 27_360


@pytest.mark.parametrize("attention", ["sdpa", "manual"])
def test_without_mask_and_positions_the_gpt_is_permutation_equivariant(attention):
    """A bag of tokens: permute the input and every output permutes with it, nothing else
    changes.
    """
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 65, (2, 16), generator=g)
    perm = torch.randperm(16, generator=g)
    bag = make_gpt(causal=False, positions=False, attention=attention).eval()
    assert_close(
        logits_of(bag, idx[:, perm]),
        logits_of(bag, idx)[:, perm],
        atol=1e-5,
        msg="permuted input vs permuted output",
    )
    # the same, with learned positions: order now matters
    placed = make_gpt(causal=False, attention=attention).eval()
    moved = (logits_of(placed, idx[:, perm]) - logits_of(placed, idx)[:, perm]).abs().max().item()
    assert moved > 1e-2, (
        f"with positions, permuting the input changed the permuted output by only {moved:.2e}"
    )


def test_under_the_mask_a_model_without_positions_tells_order():
    """Swap the first two tokens: one layer sees the same bag at the last position; two layers see
    the swap, because under the mask position 0 saw one token and position 1 two, and layer 1 reads
    what they made of it."""
    idx = torch.randint(0, 65, (1, 12), generator=torch.Generator().manual_seed(0))
    idx[0, :2] = torch.tensor([3, 40])
    swapped = idx.clone()
    swapped[0, :2] = torch.tensor([40, 3])
    one = make_gpt(n_layer=1, positions=False).eval()
    assert_close(
        logits_of(one, swapped)[:, -1],
        logits_of(one, idx)[:, -1],
        atol=1e-5,
        msg="one layer: the last position sees a bag",
    )
    two = make_gpt(n_layer=2, positions=False).eval()
    told = (logits_of(two, swapped)[:, -1] - logits_of(two, idx)[:, -1]).abs().max().item()
    assert told > 1e-3, (
        f"two causal layers without positions changed the last logits by only {told:.2e} for a swap"
    )


# 11. Rotary positions, the cures, and inputs longer than block_size


@pytest.mark.parametrize(
    ("changes", "params"),
    [
        ({"positions": "rope"}, 27_360),  # no table: learned positions' 16 x 32 less
        ({"qk_norm": True}, 27_872),  # a parameter-free norm
        ({"softcap": 50.0}, 27_872),
        ({"positions": "rope", "qk_norm": True, "softcap": 50.0}, 27_360),
    ],
)
def test_the_cures_add_no_parameters_and_rope_drops_the_table(changes, params):
    model = make_gpt(**changes)
    assert model.num_params() == params and expected_params(L=2, C=32, V=65, T=16) == 27_872
    assert (model.pos_emb is None) == (changes.get("positions") == "rope")
    assert all(
        name.startswith(("tok_emb", "pos_emb", "blocks", "ln_f", "lm_head"))
        for name in model.state_dict()
    )


@pytest.mark.parametrize("positions", ["rope", "none"])
def test_rope_and_none_models_run_past_block_size_and_learned_refuses_in_one_line(positions):
    """block_size stays the training length; only a learned table ends there
    (ModelConfig.max_length).
    """
    model = make_gpt(positions=positions).eval()
    assert model.cfg.max_length is None
    # 4 x block_size
    idx = torch.randint(0, 65, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits, _ = model(idx)
        hidden = model.hidden(idx)
    assert (
        logits.shape == (2, 64, 65) and hidden.shape == (2, 64, 32) and torch.isfinite(logits).all()
    )
    assert_close(
        logits[:, :16],
        logits_of(model, idx[:, :16]),
        atol=1e-5,
        msg="causal: the first 16 positions as alone",
    )
    learned = make_gpt().eval()
    assert learned.cfg.max_length == 16
    with pytest.raises(
        ValueError, match="exceeds block_size 16, and a learned position table has no row past it"
    ) as e:
        learned(idx)
    assert "\n" not in str(e.value)


def test_a_rope_model_reads_order_without_a_table():
    """Unlike no positions, RoPE tells order even without the mask: permuting the input changes more
    than the order of outputs.
    """
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 65, (2, 16), generator=g)
    perm = torch.randperm(16, generator=g)
    rope = make_gpt(causal=False, positions="rope", qk_init_std=0.3).eval()
    moved = (logits_of(rope, idx[:, perm]) - logits_of(rope, idx)[:, perm]).abs().max().item()
    assert moved > 1e-3, (
        f"with RoPE, permuting the input changed the permuted output by only {moved:.2e}"
    )


def test_the_probe_sees_the_scores_the_model_uses():
    """attention_probe recomputes the scores: its weights are the softmax of its scores, with every
    change applied.
    """
    model = make_gpt(positions="rope", qk_norm=True, softcap=0.8, qk_init_std=0.5).eval()
    idx = torch.randint(0, 65, (2, 12), generator=torch.Generator().manual_seed(0))
    probe = model.attention_probe(idx)
    for layer, (scores, weights) in enumerate(probe):
        assert_close(
            scores.softmax(-1),
            weights,
            atol=1e-6,
            msg=f"layer {layer}: softmax(scores) vs the weights",
        )
        assert scores[scores.isfinite()].abs().max() <= 0.8
