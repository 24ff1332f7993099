"""Tests for harness/lens.py: every run opens in TransformerLens computing what ours computes.

Against TransformerLens's own HookedTransformer: the logits of every variant (each combination of
the ablations, the cures and the position kinds, with and without the MLP, GPT-2's switches) within
1e-4, on random weights and after a short Muon run; every head's cached attention pattern equal to
attention_weights(); its head detector naming the heads that inspect_attention.py's role table names
on an induction run; a variant it cannot express refused in one line. TransformerLens is a test-only
dependency (requirements-dev.txt): without it these tests skip, or fail under
TINYGPT_REQUIRE_ALL_TESTS=1.
"""

import dataclasses
import itertools
import string
import sys

import pytest
import torch
import torch.nn as nn
from conftest import (
    assert_close,
    gpt2_encoding_or_skip,
    import_or_skip,
    make_corpus_text,
    write_corpus,
)

import train
from configs import load_config
from data.tokenizer import CharTokenizer, GPT2Tokenizer, TokenizerError
from harness.lens import INSTALL, LensError, has_bridge, load_hooked, to_hooked
from harness.lens_tokenizer import hf_tokenizer
from harness.training.checkpoints import load_model
from model import GPT, ModelConfig
from model.ablations import CHANGES, JOIN, SHIPPED, name_suffix, variant_changes
from model.gpt import lm_loss
from model.heads import ablate_heads
from model.induction import INDUCTION_THRESHOLD
from model.qk import rms_norm
from model.roles import PREVIOUS_TOKEN_THRESHOLD, head_roles, next_token_weight
from tools.lens_page import figures_of, run_page

# small models: a second thread only waits for a core
pytestmark = pytest.mark.usefixtures("one_cpu_thread")


@pytest.fixture(scope="module")
def lens():
    """transformer_lens, 3.x or 4.x (.ci/run runs this file under each), or a skip that says how to
    install it.
    """
    return import_or_skip("transformer_lens", f"TransformerLens is a test dependency: {INSTALL}")


def opened_as(lens) -> type:
    """What this TransformerLens opens a run as: a HookedTransformer (3.x), a TransformerBridge
    (4.x).
    """
    return lens.TransformerBridge if has_bridge(lens) else lens.HookedTransformer


def frozen_for(lens, cfg: ModelConfig) -> set[str]:
    """The parameters that stay as they are when the opened model is trained: what ours does not
    learn. Without positions, the table of zeros; with QK-norm, 3.x's gains of ones (4.x's native
    attention normalises with no gain)."""
    if has_bridge(lens):
        return {"pos._original_component.weight"} if cfg.positions == "none" else set()
    frozen = {"pos_embed.W_pos"} if cfg.positions == "none" else set()
    return frozen | (
        {f"blocks.{i}.attn.{n}_norm.w" for i in range(cfg.n_layer) for n in "qk"}
        if cfg.qk_norm
        else set()
    )


# ModelConfig settings that change what the network computes, besides the changes of
# model/ablations.py
SHAPES = {
    "char": {"vocab_size": 65},
    "attention-only": {"vocab_size": 65, "mlp": False},  # the induction preset's blocks
    "gpt2": {"vocab_size": 50257, "qkv_bias": True, "gelu": "tanh"},  # what --pretrained loads
}
# What the changes that take a number set in these tests: a softcap of 2 (on their random weights
# scores reach several units, so it changes the logits), 2 key/value heads for the 4 query heads, a
# window of 5 of the 24 positions.
NUMBERS = {"softcap": 2.0, "kv_heads": 2, "window": 5}
# the ablations, the cures and rope; the shipped changes come below
LESSONS = [c for c in CHANGES if c.kind != SHIPPED]
# Every variant of those: for each field that they set, the field as it is or one change that sets
# it (positions:
# learned, no-pos or rope), named as compare.py's --variants names them ("no-scale+qk-norm"), "base"
# for none. by the field they set
GROUPS = [
    [c for c in LESSONS if c.field == field] for field in dict.fromkeys(c.field for c in LESSONS)
]
EVERY = [
    JOIN.join(c.name for c in picked if c) or "base"
    for picked in itertools.product(*([None, *group] for group in GROUPS))
]
# The other shapes take a sample: each change alone, all the ablations, and combinations of cures,
# ablations and rope.
SAMPLE = [
    "base",
    *(c.name for c in LESSONS),
    "no-mask+no-scale+no-pos",
    "no-scale+qk-norm",
    "rope+qk-norm+softcap",
    "no-mask+rope",
    "no-mask+no-scale+rope+qk-norm+softcap",
]
# Grouped-query heads, the window and the sink (3.x: 4.x refuses it, below), alone and with the
# others (the gate: refused).
SHIPPED_SAMPLE = [
    "kv-heads",
    "window",
    "kv-heads+window",
    "no-scale+kv-heads+softcap",
    "no-pos+window",
    "rope+qk-norm+kv-heads+window",
    "sink",
    "softcap+window+sink",
    "no-mask+rope+kv-heads+sink",
]
VARIANTS = [("char", name) for name in EVERY + SHIPPED_SAMPLE] + [
    (shape, name) for shape in SHAPES if shape != "char" for name in SAMPLE
]
# a bias split by K heads; windows without an MLP
VARIANTS += [("gpt2", "kv-heads"), ("attention-only", "rope+window")]


def variant(shape: str, name: str, window_layers: str = "L") -> ModelConfig:
    """The shape's small model with the changes a variant name spells (a number at its NUMBERS
    value).
    """
    cfg = ModelConfig(
        n_layer=2,
        n_head=4,
        n_embd=32,
        block_size=24,
        attention="manual",
        window_layers=window_layers,
        **SHAPES[shape],
    )
    changes = variant_changes(name) if name != "base" else []
    return dataclasses.replace(
        cfg, **{c.field: NUMBERS[c.field] if c.takes_value else c.value for c in changes}
    )


def opens(lens, cfg: ModelConfig) -> bool:
    """Whether this TransformerLens opens such a run: a sink only in 3.x (4.x's native model has
    none, and refuses it).
    """
    return not (cfg.sink and has_bridge(lens))


def random_model(cfg: ModelConfig, seed: int = 0) -> GPT:
    """Every parameter drawn at std 0.3 (LayerNorm gains around 1), so that rows of attention and
    logits differ.
    """
    torch.manual_seed(seed)
    model = GPT(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if ("ln" in name and name.endswith("weight")) else 0.0, 0.3)
    return model


def assert_same_model(model: GPT, hooked, idx: torch.Tensor) -> None:
    """The same logits, and every head's cached pattern equal to attention_weights(), within 1e-4
    (float32 rounding of scores in the hundreds without the scale)."""
    logits, cache = hooked.run_with_cache(idx)
    assert_close(logits, model(idx)[0], atol=1e-4, msg="logits")
    # (B, H, T, T): every head of the layer
    for layer, weights in enumerate(model.attention_weights(idx)):
        assert_close(
            cache["pattern", layer], weights, atol=1e-4, msg=f"layer {layer}'s attention pattern"
        )


def test_the_variants_are_every_combination_of_the_changes_and_the_sample_covers_each():
    # mask, scale, positions (learned, none, rope), QK-norm, softcap
    assert len(EVERY) == 2 * 2 * 3 * 2 * 2 == len(set(EVERY))
    assert {c.name for c in LESSONS} <= set(SAMPLE) <= set(EVERY)
    assert {c.name for c in CHANGES if c.kind == SHIPPED} - {"gate"} <= set(SHIPPED_SAMPLE), (
        "each shipped change TransformerLens has"
    )


@pytest.mark.parametrize(
    ("shape", "name"), VARIANTS, ids=[f"{shape}-{name}" for shape, name in VARIANTS]
)
def test_every_variant_gives_our_logits_and_attention_in_transformer_lens(lens, shape, name):
    model = random_model(variant(shape, name))
    cfg = model.cfg
    if not opens(lens, cfg):
        with pytest.raises(
            LensError,
            match=r"^model\.sink = True: TransformerLens 4\.x has no sink logit "
            r"\(3\.x has one from 3\.7\): pip install 'transformer-lens>=3\.7,<4'$",
        ):
            to_hooked(model)
        return
    hooked = to_hooked(model)
    assert isinstance(hooked, opened_as(lens))
    assert hooked.cfg.attention_dir == ("causal" if cfg.causal else "bidirectional")
    assert hooked.cfg.use_attn_scale == cfg.scaled and hooked.cfg.use_qk_norm == cfg.qk_norm
    assert hooked.cfg.positional_embedding_type == (
        "rotary" if cfg.positions == "rope" else "standard"
    )
    idx = torch.randint(
        cfg.vocab_size, (3, cfg.block_size), generator=torch.Generator().manual_seed(1)
    )
    assert_same_model(model, hooked, idx)
    # a shorter sequence: the mask and positions cut to its length
    assert_same_model(model, hooked, idx[:, :7])
    if cfg.positions == "none":
        assert not hooked.pos_embed.W_pos.any(), (
            "no positions: the table TransformerLens adds holds zeros"
        )
    if cfg.positions == "rope":
        assert hooked.cfg.rotary_dim == cfg.head_size, "rope turns the whole head"
    assert hooked.cfg.n_key_value_heads == (cfg.kv_heads or None)
    assert hooked.cfg.attn_types == (
        ["local", "local"] if cfg.window else None
    ) and hooked.cfg.window_size == (cfg.window or None)
    # neither is an identity on these weights: without it the logits differ
    for field, off in (("softcap", 0.0), ("window", 0)):
        if getattr(cfg, field):
            without = GPT(dataclasses.replace(cfg, **{field: off})).eval()
            without.load_state_dict(model.state_dict())
            assert (without(idx)[0] - model(idx)[0]).abs().max() > 0.01, field
    assert {n for n, p in hooked.named_parameters() if not p.requires_grad} == frozen_for(lens, cfg)


@pytest.mark.parametrize("positions", ["rope", "none"])
def test_a_rope_or_none_run_opens_longer_than_its_block_size_as_ours_reads(lens, positions):
    model = random_model(variant("char", "rope" if positions == "rope" else "no-pos"))
    hooked = to_hooked(model, context=3 * model.cfg.block_size)
    idx = torch.randint(
        65, (2, 3 * model.cfg.block_size), generator=torch.Generator().manual_seed(2)
    )
    assert_same_model(model, hooked, idx)


RUNS = {
    "char": [],
    "char-no-mask": ["--no-mask"],
    "char-qk-norm": ["--qk-norm"],
    "char-rope": ["--rope"],
    "char-qk-norm-softcap2-rope": ["--rope", "--qk-norm", "--softcap=2"],
}


def test_its_hooks_hold_the_queries_and_keys_where_each_version_says(lens):
    """3.x: hook_q and hook_k hold the projections, before the QK-norm, and hook_rot_q and
    hook_rot_k what our split_heads gives the scores, normalised and turned. 4.x: hook_q and hook_k
    hold them normalised, before the turn, and there is no hook after it. Each layer's input is
    ours, from TransformerLens's residual stream."""
    model = random_model(variant("char", "rope+qk-norm"))
    _, cache = to_hooked(model).run_with_cache(
        torch.randint(65, (2, 24), generator=torch.Generator().manual_seed(3))
    )
    B, T, C = cache["resid_pre", 0].shape
    H, D = model.cfg.n_head, model.cfg.head_size
    for layer, block in enumerate(model.blocks):
        x = block.ln1(cache["resid_pre", layer])  # (B, T, C)
        # 3 x (B, T, H, D)
        projected = [p.view(B, T, H, D) for p in block.attn.qkv(x).split(C, dim=2)]
        turned = block.attn.split_heads(x)  # 3 x (B, H, T, D)
        for kind, raw, ready in zip("qk", projected, turned, strict=False):
            hooked_there = rms_norm(raw) if has_bridge(lens) else raw
            assert_close(
                cache[kind, layer], hooked_there, atol=1e-5, msg=f"layer {layer}'s hook_{kind}"
            )
            if not has_bridge(lens):
                assert_close(
                    cache[f"rot_{kind}", layer],
                    ready.transpose(1, 2),
                    atol=1e-5,
                    msg=f"layer {layer}'s hook_rot_{kind}",
                )
    assert has_bridge(lens) == ("blocks.0.attn.hook_rot_q" not in cache.keys())


@pytest.fixture(scope="module")
def char_runs(tmp_path_factory, lens) -> dict:
    """The char preset's optimizer (Muon) and tokenizer, small: 6 steps of each of RUNS, in runs/
    under one folder. The text ends with every printable character, so that the docs page's text
    reads in its vocabulary."""
    root = tmp_path_factory.mktemp("lens")
    text = write_corpus(root / "text", text=make_corpus_text() + string.printable)
    for run, flags in RUNS.items():
        train.train(
            load_config(
                [
                    "--config",
                    "char",
                    f"--run-name={run}",
                    "--data-file",
                    str(text),
                    "--data.cache_dir",
                    str(root / "cache"),
                    "--runs-dir",
                    str(root / "runs"),
                    "--device",
                    "cpu",
                    "--model.n_layer=2",
                    "--model.n_embd=32",
                    "--model.block_size=96",
                    "--train.batch_size=4",
                    "--train.max_steps=6",
                    "--train.eval_interval=6",
                    "--train.eval_batches=1",
                    "--train.honest_batches=1",
                    *flags,
                ]
            )
        )
    return {"root": root} | {run: root / "runs" / run / "ckpt.pt" for run in RUNS}


@pytest.mark.parametrize("run", RUNS)
def test_a_short_muon_run_opens_from_its_checkpoint_reading_strings_with_its_own_ids(
    char_runs, run
):
    model, tokenizer, checkpoint = load_model(char_runs[run])
    assert checkpoint["step"] == 6 and "char" + name_suffix(model.cfg) == run, (
        "the run has the changes its flags ask"
    )
    hooked = load_hooked(char_runs[run])
    prompt = make_corpus_text()[:95]
    tokens = hooked.to_tokens(prompt)
    assert tokens.tolist() == [tokenizer.encode(prompt)], (
        "TransformerLens reads a string with the run's own ids"
    )
    assert hooked.to_str_tokens(prompt) == list(prompt)
    assert_same_model(model, hooked, tokens)
    with pytest.raises(
        TokenizerError, match=r"^1 character\(s\) not in the training vocabulary: 'é'; use only"
    ):
        hooked.to_tokens(prompt + "é")
    if model.cfg.positions == "rope":  # any length, as ours reads it: here twice its block_size
        longer = make_corpus_text()[: 2 * model.cfg.block_size]
        assert_same_model(
            model,
            load_hooked(char_runs[run], context=len(longer)),
            torch.tensor([tokenizer.encode(longer)]),
        )


def test_the_docs_page_runs_as_written_and_finds_what_our_measurements_find(char_runs, capsys):
    """docs/transformer-lens.md's Python on a small char --no-mask run: each head's score is our
    weight on t+1 (over T-1 rows) times (T-1)/T, the loss is ours, and its hooks switch heads off as
    ablate_heads does."""
    page = run_page(char_runs["root"])
    model, _, _ = load_model(char_runs["char-no-mask"])
    tokens = page["tokens"]
    T = tokens.shape[1]
    for layer, weights in enumerate(model.attention_weights(tokens)):
        for head in range(model.cfg.n_head):
            assert page["scores"][layer, head] == pytest.approx(
                next_token_weight(weights[:, head]) * (T - 1) / T, abs=1e-5
            )
    logits = model(tokens)[0]
    assert page["loss"] == pytest.approx(lm_loss(logits[:, :-1], tokens[:, 1:]).item(), abs=1e-5)
    heads = [(0, 1), (1, 0), (1, 3)]
    with ablate_heads(model, heads):
        ablated = lm_loss(model(tokens)[0][:, :-1], tokens[:, 1:]).item()
    hooked = page["model"]
    assert hooked.run_with_hooks(
        tokens, return_type="loss", fwd_hooks=page["switch_off"](heads)
    ).item() == pytest.approx(ablated, abs=1e-5)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed[:2]] == ["layer 0", "layer 1"] and printed[
        2
    ].startswith("loss ")
    assert figures_of(page)["scores"]["L1H0"] == page["scores"][1, 0]


def test_the_char_tokenizer_gives_our_ids_and_pads_past_the_vocabulary():
    import_or_skip("transformers", f"the tokenizer is a Hugging Face one: {INSTALL}")
    ours = CharTokenizer.from_text(make_corpus_text() + string.printable)
    theirs = hf_tokenizer(ours)
    # the padding token's name, read as the characters it is
    text = make_corpus_text(2000, seed=1) + "<|endoftext|>"
    assert theirs(text)["input_ids"] == theirs.encode(text) == ours.encode(text)
    assert theirs.decode(ours.encode(text)) == text
    assert theirs.pad_token_id == ours.vocab_size, "no character stands in for padding"
    assert theirs(["ab", "abc"], padding=True)["input_ids"] == [
        ours.encode("ab") + [ours.vocab_size],
        ours.encode("abc"),
    ]


def test_a_character_outside_a_char_runs_vocabulary_is_named_in_one_line():
    import_or_skip("transformers", f"the tokenizer is a Hugging Face one: {INSTALL}")
    theirs = hf_tokenizer(CharTokenizer(list("abc ")))
    message = (
        r"^2 character\(s\) not in the training vocabulary: 'xé'; "
        r"use only characters of the training text$"
    )
    for read in (
        theirs,
        theirs.encode,
        theirs.tokenize,
        lambda text: theirs(["abc", text], padding=True),
    ):
        with pytest.raises(TokenizerError, match=message):
            read("a béx")


def test_the_gpt2_tokenizer_gives_tiktokens_ids(monkeypatch):
    import_or_skip("transformers", f"the tokenizer is a Hugging Face one: {INSTALL}")
    gpt2_encoding_or_skip()
    ours = GPT2Tokenizer()
    theirs = hf_tokenizer(ours)
    text = (
        make_corpus_text(20_000)
        + " naïve café, 日本語 🤖 x's we'll   \n\n 12345 <eot> <|endoftext|>"
    )
    assert theirs(text)["input_ids"] == ours.encode(text)
    assert theirs.decode(ours.encode(text)) == text
    assert theirs.eos_token_id == ours.end_of_text[0] == 50256


def test_without_transformer_lens_the_error_says_how_to_install_it(monkeypatch):
    # import transformer_lens now raises ImportError
    monkeypatch.setitem(sys.modules, "transformer_lens", None)
    with pytest.raises(LensError) as e:
        to_hooked(GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11)))
    expected = (
        "TransformerLens is not installed: pip install -r requirements-dev.txt "
        "(or pip install transformer-lens)"
    )
    assert str(e.value) == expected


@dataclasses.dataclass(frozen=True)
class LaterConfig(ModelConfig):
    """A config with a field the lens does not know yet, as a new variant brings one."""

    latent: int = 16  # as multi-head latent attention (DeepSeek's) would bring


def test_a_3x_without_a_field_the_run_needs_refuses_in_one_line(lens, monkeypatch):
    """3.6 and older have no use_attention_sinks: a config class like the installed one less that
    field stands in for one.
    """
    if has_bridge(lens):
        pytest.skip(
            "3.x opens runs as a HookedTransformer: under 4.x, a sink is refused by the test above"
        )
    older = dataclasses.make_dataclass(
        "Older",
        [
            (f.name, object, None)
            for f in dataclasses.fields(lens.HookedTransformerConfig)
            if f.name != "use_attention_sinks"
        ],
    )
    monkeypatch.setattr(lens, "HookedTransformerConfig", older)
    with pytest.raises(
        LensError,
        match=r"^TransformerLens 3\.\d+\.\d+ has no use_attention_sinks, which this run needs: "
        r"pip install 'transformer-lens>=3\.7,<4' \(or 4\.x\)$",
    ):
        to_hooked(random_model(variant("char", "sink")))


@pytest.mark.parametrize("pattern", ["LG", "GL"])
def test_a_window_opens_local_in_the_layers_its_pattern_names(lens, pattern):
    model = random_model(variant("char", "rope+window", window_layers=pattern))
    hooked = to_hooked(model)
    assert hooked.cfg.attn_types == ["local" if letter == "L" else "global" for letter in pattern]
    idx = torch.randint(65, (2, 24), generator=torch.Generator().manual_seed(4))
    assert_same_model(model, hooked, idx)
    _, cache = hooked.run_with_cache(idx)
    back = torch.arange(24)[:, None] - torch.arange(24)  # (T, T): how far back each key lies
    # a local layer leaves exactly zero weight W or more positions back
    for layer, letter in enumerate(pattern):
        assert (cache["pattern", layer][..., back >= 5] == 0).all() == (letter == "L"), layer


def test_what_transformer_lens_cannot_take_is_refused_in_one_line_naming_it(lens):
    small = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11)
    refused = {}  # what is changed -> the start of the one line that refuses it
    model = GPT(small)
    model.cfg = LaterConfig(**vars(small))
    refused["a field"] = (
        model,
        r"^model\.latent has no TransformerLens counterpart in harness/lens\.py yet",
    )
    refused["the gate"] = (
        GPT(dataclasses.replace(small, gate=True)),
        r"^model\.gate = True: TransformerLens has no attention-output gate; "
        r"open a run trained without it$",
    )
    refused["a window without the mask"] = (
        GPT(dataclasses.replace(small, window=3, causal=False)),
        r"^model\.window without the causal mask sees both sides, TransformerLens's only "
        r"the W - 1 before; keep the mask on$",
    )
    model = GPT(small)
    model.cfg = dataclasses.replace(small)
    # a kind of positions the lens has no entry for
    object.__setattr__(model.cfg, "positions", "alibi")
    refused["a value"] = (
        model,
        r"^model\.positions = 'alibi' has no TransformerLens counterpart in harness/lens\.py yet",
    )
    model = GPT(small)
    # a tensor no table maps: a QK-norm gain, which ours does not have
    model.blocks[0].attn.q_norm = nn.RMSNorm(8)
    refused["a tensor"] = (
        model,
        r"^our tensor blocks\.0\.attn\.q_norm\.weight has no place in TransformerLens",
    )
    model = GPT(dataclasses.replace(small, qk_norm=True))
    for norm in (m for m in model.modules() if isinstance(m, nn.LayerNorm)):
        # TransformerLens's RMSNorm takes the LayerNorms' eps, and ours keeps its own
        norm.eps = 1e-6
    refused["an eps"] = (
        model,
        r"^the model's LayerNorms and QK-norm use eps \[1e-06, 1e-05\], "
        r"and TransformerLens takes one",
    )
    for what, (model, message) in refused.items():
        with pytest.raises(LensError, match=message) as e:
            to_hooked(model)
        assert "\n" not in str(e.value), what
    for positions, context, message in (
        ("learned", 9, r"^context = 9: give 1 to 8, the rows of its learned position table$"),
        ("rope", 0, r"^context = 0: give 1 or more$"),
    ):
        with pytest.raises(LensError, match=message):
            to_hooked(GPT(dataclasses.replace(small, positions=positions)), context=context)


# The induction circuit, set by hand. Training the induction preset to its phase change takes about
# a thousand Muon steps (docs/induction.md), too long for the suite; these weights make the circuit
# the papers describe, so each head's role is known before either tool looks. Residual stream (C =
# 32): tokens a..h one-hot in dims 0-7, positions 0-15 one-hot in dims 8-23, and L0H0 writes the
# previous token into dims 24-31. Every vector has as many ones wherever it stands, so LayerNorm
# scales them alike and the scores below keep their order.
# SHARP: how far a matching score stands above the rest
CIRCUIT_CHARS, CIRCUIT_T, SHARP = list("abcdefgh"), 16, 4.0
TOKENS, POSITIONS, PREVIOUS = slice(0, 8), slice(8, 24), slice(24, 32)


def induction_circuit() -> GPT:
    cfg = ModelConfig(
        n_layer=2,
        n_head=2,
        n_embd=32,
        block_size=CIRCUIT_T,
        vocab_size=8,
        mlp=False,
        attention="manual",
    )
    model = GPT(cfg).eval()
    eye = torch.eye
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.blocks[0].ln1, model.blocks[1].ln1, model.ln_f):
            norm.weight.fill_(1.0)
        model.tok_emb.weight[:, TOKENS] = eye(8)
        model.pos_emb.weight[:, POSITIONS] = eye(CIRCUIT_T)
        # L0H0, the previous-token head: the query at t is position t-1, the key at s is position s;
        # the value is the token, written into PREVIOUS. Rows 0-15 of qkv are the queries, 32-47 the
        # keys, 64-79 the values (head 0).
        qkv, proj = model.blocks[0].attn.qkv.weight, model.blocks[0].attn.proj.weight
        qkv[0:15, 9:24] = SHARP * eye(15)  # query dim p reads position p+1: at t it lights dim t-1
        qkv[32:48, POSITIONS] = eye(CIRCUIT_T)
        qkv[64:72, TOKENS] = eye(8)
        proj[PREVIOUS, 0:8] = eye(8)
        # L1H0, the induction head: the query at t is its token, the key at s the token before s.
        qkv, proj = model.blocks[1].attn.qkv.weight, model.blocks[1].attn.proj.weight
        qkv[0:8, TOKENS] = SHARP * eye(8)
        qkv[32:40, PREVIOUS] = eye(8)
        qkv[64:72, TOKENS] = eye(8)  # it copies the token found there
        proj[TOKENS, 0:8] = eye(8)
    return model


def test_the_head_detector_names_the_heads_that_inspect_attention_names(lens):
    """TransformerLens's detect_head and our role table (head_roles, what inspect_attention.py
    prints) on a repeated sequence. Its "mul" score is a head's weight on the detection pattern over
    all T rows; ours, the mean over the rows that have a target (T-1 for t-1; the repeated tokens
    for induction): the same sums, so each score is ours times rows/T, to float rounding, and both
    name the same heads."""
    from transformer_lens.head_detector import detect_head

    model, tokenizer = induction_circuit(), CharTokenizer(CIRCUIT_CHARS)
    hooked = to_hooked(model, tokenizer)
    # each token at most twice: our target is the one TransformerLens's pattern marks
    text = "abcdefgh" + "abcdefg"
    # T < block_size: detect_head takes no longer one
    idx, T = torch.tensor([tokenizer.encode(text)]), len(text)
    rows = {
        (r["layer"], r["head"]): r
        for r in head_roles(model.attention_weights(idx), causal=True, idx=idx)
    }
    for kind, key, threshold, target_rows in (
        ("previous_token_head", "previous", PREVIOUS_TOKEN_THRESHOLD, T - 1),
        ("induction_head", "induction", INDUCTION_THRESHOLD, T - 8),
    ):
        scores = detect_head(hooked, text, kind)  # (layers, heads)
        ours = torch.tensor([[rows[layer, head][key] for head in range(2)] for layer in range(2)])
        assert_close(scores, ours * target_rows / T, atol=1e-5, msg=kind)
        named_here = {(layer, head) for (layer, head), row in rows.items() if row[key] > threshold}
        named_there = {
            (layer, head)
            for layer in range(2)
            for head in range(2)
            if scores[layer, head] > threshold * target_rows / T
        }
        assert named_here == named_there == {(0, 0) if key == "previous" else (1, 0)}, (
            kind,
            scores,
        )
