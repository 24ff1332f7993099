"""Tests for model/heads.py: head ablation leaves the model as it was, and equals zeroing that
head's slice of the projection.
"""

import copy

import pytest
import torch
from conftest import assert_close

from model import GPT, ModelConfig
from model.heads import ablate_heads, all_heads, head_means, head_name, parse_heads

pytestmark = pytest.mark.usefixtures("one_cpu_thread")

TINY = {
    "n_layer": 2,
    "n_head": 4,
    "n_embd": 32,
    "block_size": 16,
    "vocab_size": 65,
    "causal": False,
}


def make_gpt(**overrides) -> GPT:
    torch.manual_seed(0)
    model = GPT(ModelConfig(**{**TINY, **overrides})).eval()
    # biases away from zero, so that zeroing a head and zeroing the whole projection differ
    with torch.no_grad():
        for block in model.blocks:
            block.attn.proj.bias.normal_(std=0.1)
    return model


def logits_of(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(idx)[0]


IDX = torch.randint(0, 65, (2, 16), generator=torch.Generator().manual_seed(1))


def test_the_model_is_unchanged_after_the_block():
    model = make_gpt()
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    before = logits_of(model, IDX)
    with ablate_heads(model, [(0, 1), (1, 3)]):
        during = logits_of(model, IDX)
    assert (during - before).abs().max() > 1e-3, "ablating two heads changed nothing"
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in state.items())
    assert all(not block.attn.proj._forward_pre_hooks for block in model.blocks), (
        "a hook was left behind"
    )
    assert_close(logits_of(model, IDX), before, atol=0.0, msg="logits after the block")


@pytest.mark.parametrize(
    "changes",
    [{}, {"qk_norm": True, "softcap": 2.0, "positions": "rope"}],
    ids=["plain", "cured-rope"],
)
@pytest.mark.parametrize("attention", ["sdpa", "manual", "tiled"])
def test_ablating_a_head_equals_zeroing_its_slice_of_the_projection(attention, changes):
    model = make_gpt(attention=attention, **changes)
    D = model.cfg.head_size
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        # head 2's columns: what it adds to the stream
        zeroed.blocks[1].attn.proj.weight[:, 2 * D : 3 * D] = 0.0
    with ablate_heads(model, [(1, 2)]):
        assert_close(
            logits_of(model, IDX), logits_of(zeroed, IDX), atol=1e-5, msg="hook vs zeroed weights"
        )


def test_mean_ablation_equals_a_bias_that_replaces_the_head():
    model = make_gpt()
    D = model.cfg.head_size
    means = head_means(model, IDX)
    assert [m.shape for m in means] == [(32,), (32,)]
    replaced = copy.deepcopy(model)
    proj = replaced.blocks[0].attn.proj
    with torch.no_grad():
        # the head's mean output, through the projection, as a constant
        proj.bias += proj.weight[:, :D] @ means[0][:D]
        proj.weight[:, :D] = 0.0
    with ablate_heads(model, [(0, 0)], means=means):
        assert_close(
            logits_of(model, IDX),
            logits_of(replaced, IDX),
            atol=1e-5,
            msg="mean-ablation vs constant bias",
        )


def test_head_names_parse_both_ways():
    assert parse_heads("L0H1,L1H3", 2, 4) == [(0, 1), (1, 3)]
    # a whole layer, each head once
    assert parse_heads("L1, L1H2", 2, 4) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert [head_name(*h) for h in all_heads(make_gpt())[:3]] == ["L0H0", "L0H1", "L0H2"]
    for text, why in (
        ("L2H0", "layer 2 is out of range"),
        ("L0H4", "head 4 is out of range"),
        ("head1", "names no head"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_heads(text, 2, 4)
