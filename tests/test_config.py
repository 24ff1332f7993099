"""Tests for configs/: presets, typed CLI overrides, helpful errors, run names, precedence,
immutability.
"""

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest
import torch
from conftest import assert_one_line_error, error_of, run_script, tiny_argv

import train
from configs import (
    CONFIG_DIR,
    FROM_TOKENIZER,
    KEYS,
    Config,
    ConfigError,
    DataConfig,
    TrainConfig,
    load_config,
    validate_config,
)
from model import ModelConfig
from model.ablations import flags_label, variants
from model.config import SOFTCAP_LEAST, SOFTCAP_MOST

SECTION_CLASSES = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}


def assert_matches_toml(cfg: Config, preset: str) -> None:
    """Every key in configs/<preset>.toml is in cfg with the file's value; every other field keeps
    its default.
    """
    table = tomllib.loads((CONFIG_DIR / f"{preset}.toml").read_text(encoding="utf-8"))
    for section, cls in SECTION_CLASSES.items():
        loaded = getattr(cfg, section)
        for f in dataclasses.fields(cls):
            expected = table.get(section, {}).get(f.name, f.default)
            assert getattr(loaded, f.name) == expected, (
                f"{section}.{f.name}: {getattr(loaded, f.name)!r} != {expected!r}"
            )
            assert type(getattr(loaded, f.name)) is f.type, (
                f"{section}.{f.name} has type {type(getattr(loaded, f.name))}"
            )


def write_toml(tmp_path: Path, text: str, name: str = "custom.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# 1. Presets


def test_tiny_preset_loads_with_the_file_values():
    cfg = load_config(["--config", "tiny"])
    assert_matches_toml(cfg, "tiny")
    assert cfg.name == "tiny"
    assert (cfg.model.n_layer, cfg.model.n_head, cfg.model.n_embd, cfg.model.block_size) == (
        2,
        2,
        32,
        32,
    )
    assert cfg.model.head_size == 16
    assert cfg.data.tokenizer == "char"
    assert (cfg.train.batch_size, cfg.train.max_steps, cfg.train.warmup_steps) == (8, 40, 5)
    assert (cfg.train.lr, cfg.train.min_lr) == (3e-3, 3e-4)
    assert (cfg.train.eval_interval, cfg.train.eval_batches, cfg.train.log_interval) == (20, 2, 5)
    assert cfg.train.weight_decay == 0.1  # not in tiny.toml: the dataclass default


@pytest.mark.parametrize("preset", ["base", "char", "char-gpu", "char-modern", "tiny"])
def test_every_preset_loads(preset):
    cfg = load_config(["--config", preset])
    assert cfg.name == preset
    assert_matches_toml(cfg, preset)


def test_base_is_the_default_and_char_uses_characters():
    base = load_config([])
    assert base == load_config(["--config", "base"])
    assert (base.data.tokenizer, base.model.block_size, base.train.max_steps) == ("gpt2", 64, 300)
    char = load_config(["--config", "char"])
    assert (char.data.tokenizer, char.model.block_size, char.train.max_steps) == ("char", 128, 410)


def test_config_from_a_toml_path(tmp_path):
    path = write_toml(tmp_path, "[model]\nn_layer = 3\n", name="mine.toml")
    cfg = load_config(["--config", str(path)])
    assert cfg.name == "mine"
    assert cfg.model.n_layer == 3
    assert cfg.run_name == "mine"


# 2. Typed overrides


@pytest.mark.parametrize(
    "argv", [["--model.n_layer=4"], ["--model.n_layer", "4"], ["--model.n_layer= 4 "]]
)
def test_int_override_both_spellings(argv):
    cfg = load_config(["--config", "tiny", *argv])
    assert cfg.model.n_layer == 4
    assert type(cfg.model.n_layer) is int


@pytest.mark.parametrize(("value", "expected"), [("3e-4", 3e-4), ("0.01", 0.01), ("1", 1.0)])
def test_float_override(value, expected):
    cfg = load_config(["--config", "tiny", "--train.lr", value])
    assert cfg.train.lr == expected
    assert type(cfg.train.lr) is float


@pytest.mark.parametrize(
    ("value", "expected"), [("false", False), ("true", True), ("False", False), ("TRUE", True)]
)
def test_bool_override(value, expected):
    cfg = load_config(["--config", "tiny", f"--model.causal={value}"])
    assert cfg.model.causal is expected


@pytest.mark.parametrize("value", ["yes", "no", "1", "0", "on", ""])
def test_bool_override_accepts_only_true_or_false(value):
    with pytest.raises(ConfigError, match="model.causal takes true or false"):
        load_config(["--config", "tiny", f"--model.causal={value}"])


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--train.lr=abc", "train.lr takes a number, got 'abc'"),
        ("--model.n_layer=4.5", "model.n_layer takes an integer, got '4.5'"),
        ("--train.max_steps=1e3", "train.max_steps takes an integer"),
        ("--model.dropout=lots", "model.dropout takes a number"),
    ],
)
def test_bad_numbers(arg, message):
    with pytest.raises(ConfigError, match=message):
        load_config(["--config", "tiny", arg])


def test_string_override_is_kept_verbatim(tmp_path):
    cfg = load_config(
        ["--config", "tiny", f"--data.path={tmp_path}/my text.txt", "--model.attention=manual"]
    )
    assert cfg.data.path == f"{tmp_path}/my text.txt"
    assert cfg.model.attention == "manual"


def test_toml_values_are_converted_and_checked(tmp_path):
    cfg = load_config(
        ["--config", str(write_toml(tmp_path, "[train]\nlr = 1\n[model]\ncausal = false\n"))]
    )
    assert cfg.train.lr == 1.0 and type(cfg.train.lr) is float
    assert cfg.model.causal is False
    with pytest.raises(
        ConfigError,
        match=r"model.n_layer = 4.5 in .*a.toml is a number, "
        r"and model.n_layer takes a whole number",
    ):
        load_config(
            ["--config", str(write_toml(tmp_path, "[model]\nn_layer = 4.5\n", name="a.toml"))]
        )
    with pytest.raises(
        ConfigError,
        match=r"model.causal = 1 in .*b.toml is a whole number, "
        r"and model.causal takes true or false",
    ):
        load_config(["--config", str(write_toml(tmp_path, "[model]\ncausal = 1\n", name="b.toml"))])


# a checkpoint holding each of these loaded and sampled without a word: "false" and "yes" read as
# true
WRONG_TYPES = [
    ("causal", "false", 'model.causal = "false"', "is text, and model.causal takes true or false"),
    ("qk_norm", "yes", 'model.qk_norm = "yes"', "is text, and model.qk_norm takes true or false"),
    ("scaled", 0, "model.scaled = 0", "is a whole number, and model.scaled takes true or false"),
    ("softcap", True, "model.softcap = true", "is a boolean, and model.softcap takes a number"),
]


@pytest.mark.parametrize(("key", "value", "shown", "found"), WRONG_TYPES)
def test_a_value_of_the_wrong_type_is_refused_from_every_source(tmp_path, key, value, shown, found):
    """One function checks a TOML file and a run's record (a checkpoint's config, config.json)
    alike: the field, the value, the file and what to do, in one line. Python reads any non-empty
    text as true, so causal = "false" kept the mask."""
    toml = write_toml(tmp_path, f"[model]\n{key} = {json.dumps(value)}\n")
    with pytest.raises(ConfigError) as e:
        load_config(["--config", str(toml)])
    assert f"{shown} in {toml} {found}; " in str(e.value) and "\n" not in str(e.value)
    recorded = load_config(["--config", "tiny"]).to_dict()
    recorded["model"][key] = value
    with pytest.raises(ConfigError) as e:
        validate_config(recorded, "runs/tiny/config.json", recorded=True)
    assert f"{shown} in runs/tiny/config.json {found}; train.py writes no such config" in str(
        e.value
    )
    assert str(e.value).endswith("correct it, or train the run again")


def test_a_toml_value_in_quotes_is_shown_without_them_and_a_run_s_record_loads_as_it_was(tmp_path):
    with pytest.raises(ConfigError, match="write it without quotes: causal = false$"):
        load_config(["--config", str(write_toml(tmp_path, '[model]\ncausal = "false"\n'))])
    with pytest.raises(ConfigError, match="write it without quotes: lr = 0.0003$"):
        load_config(["--config", str(write_toml(tmp_path, '[train]\nlr = "3e-4"\n'))])
    cfg = load_config(["--config", "induction", "--no-mask", "--model.n_layer=1"])
    # as train.py records it
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=256))
    assert (
        validate_config(json.loads(json.dumps(cfg.to_dict())), "config.json", recorded=True) == cfg
    )
    unknown = cfg.to_dict() | {"model": {"n_layers": 2}}
    with pytest.raises(
        ConfigError,
        match=r"unknown key model.n_layers in ckpt.pt, "
        r"did you mean model.n_layer\? \(train.py writes",
    ):
        validate_config(unknown, "ckpt.pt", recorded=True)
    with pytest.raises(
        ConfigError,
        match=r"^ckpt.pt: model.n_embd \(128\) must be divisible by model.n_head \(3\); "
        r"try n_head in",
    ):
        validate_config(cfg.to_dict() | {"model": {"n_head": 3}}, "ckpt.pt", recorded=True)
    with pytest.raises(ConfigError, match="ckpt.pt holds no config"):
        validate_config(["model"], "ckpt.pt", recorded=True)


# 3. Unknown names


def test_unknown_key_names_the_nearest_valid_key():
    with pytest.raises(
        ConfigError, match=r"unknown key model\.n_layers, did you mean model\.n_layer\?"
    ):
        load_config(["--config", "tiny", "--model.n_layers=4"])


def test_unknown_key_learning_rate_suggests_lr():
    # docs/command-line.md gives this exact example: "unknown key train.learning_rate, did you mean
    # train.lr?"
    with pytest.raises(ConfigError, match="unknown key train.learning_rate") as e:
        load_config(["--config", "tiny", "--train.learning_rate=1"])
    assert "train.lr" in str(e.value), str(e.value)


def test_unknown_key_in_toml(tmp_path):
    path = write_toml(tmp_path, "[train]\nbatchsize = 4\n")
    with pytest.raises(
        ConfigError,
        match=r"unknown key train\.batchsize in .*custom.toml, did you mean train\.batch_size\?",
    ):
        load_config(["--config", str(path)])


@pytest.mark.parametrize(
    ("arg", "meant"),
    [
        ("--model.rope=true", '--rope (model.positions = "rope")'),
        ("--model.no_mask=true", "--no-mask (model.causal = false)"),
        ("--model.no-scale=true", "--no-scale (model.scaled = false)"),
        ("--model.no_pos=false", '--no-pos (model.positions = "none")'),
    ],
)
def test_a_key_spelled_like_a_change_names_the_change_s_flag(arg, meant, tmp_path):
    """--model.rope=true answered "did you mean model.dropout?" and --model.no_mask=true
    "model.n_head?", the nearest spellings; model/ablations.py's table knows what each means."""
    key = arg[2:].partition("=")[0]
    with pytest.raises(ConfigError) as e:
        load_config(["--config", "tiny", arg])
    assert str(e.value) == f"unknown key {key}, did you mean {meant}?"
    toml = write_toml(tmp_path, f"[model]\n{key.partition('.')[2]} = true\n")
    with pytest.raises(ConfigError) as e:
        load_config(["--config", str(toml)])
    assert str(e.value) == f"unknown key {key} in {toml}, did you mean {meant}?"
    with pytest.raises(
        ConfigError, match=r"unknown argument '--no_mask' \(did you mean --no-mask\?\)"
    ):
        load_config(["--config", "tiny", "--no_mask"])


def test_unknown_section(tmp_path):
    path = write_toml(tmp_path, "[optim]\nlr = 1e-3\n")
    with pytest.raises(ConfigError, match=r"unknown section \[optim\]") as e:
        load_config(["--config", str(path)])
    assert str(path) in str(e.value) and "model, data, train" in str(e.value)
    with pytest.raises(ConfigError, match=r"unknown key optim\.lr, did you mean train\.lr\?"):
        load_config(["--config", "tiny", "--optim.lr=1e-3"])


def test_unknown_config_name_lists_presets():
    with pytest.raises(ConfigError, match="config nope not found") as e:
        load_config(["--config", "nope"])
    assert "base, char, char-gpu, char-modern, gpt2-finetune, induction, tiny" in str(e.value)
    with pytest.raises(ConfigError, match="did you mean tiny?"):
        load_config(["--config", "tinny"])


def test_missing_toml_path(tmp_path):
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigError, match="not found") as e:
        load_config(["--config", str(missing)])
    assert str(missing) in str(e.value)


def test_malformed_toml_names_the_file(tmp_path):
    path = write_toml(tmp_path, "[model\nn_layer = 2\n", name="broken.toml")
    with pytest.raises(ConfigError, match="malformed TOML") as e:
        load_config(["--config", str(path)])
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus"], "unknown argument '--bogus'; valid"),
        (["--seed", "3"], r"unknown argument '--seed' \(did you mean --train\.seed=VALUE\?\)"),
        (["--max-steps=3"], r"did you mean --train\.max_steps=VALUE\?"),
        (["tiny"], "unknown argument 'tiny'"),
        (["--no-mask=true"], "--no-mask takes no value"),
        (["--device"], "--device needs a value"),
        (["--model.n_layer"], "--model.n_layer needs a value"),
    ],
)
def test_bad_arguments(argv, message):
    with pytest.raises(ConfigError, match=message):
        load_config(["--config", "tiny", *argv])


# 4. Checks at load time


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--model.n_head=3", r"model.n_embd \(32\) must be divisible by model.n_head \(3\)"),
        ("--train.lr=0", "train.lr must be positive"),
        ("--train.lr=-1e-3", "train.lr must be positive"),
        ("--train.batch_size=0", "train.batch_size must be a positive integer"),
        ("--model.dropout=-0.1", r"model.dropout must be in \[0, 1\)"),
        ("--model.dropout=1", r"model.dropout must be in \[0, 1\)"),
        ("--model.block_size=0", "model.block_size must be a positive integer"),
        ("--model.n_head=0", "model.n_head must be a positive integer"),
        ("--data.tokenizer=bpe", "data.tokenizer must be one of gpt2, char"),
        ("--train.device=tpu", "train.device must be one of auto, cpu, cuda, mps"),
        ("--train.device=cuda:x", "train.device must be one of"),
        ("--train.min_lr=1", r"train.min_lr must be between 0 and train.lr"),
        ("--train.warmup_steps=-1", "train.warmup_steps must be >= 0"),
        ("--train.run_name=a/b", "train.run_name must be a plain folder name"),
        ("--model.attention=flash", "model.attention must be one of sdpa, manual"),
    ],
)
def test_invalid_values_fail_at_load_time(arg, message):
    with pytest.raises(ConfigError, match=message):
        load_config(["--config", "tiny", arg])


@pytest.mark.parametrize("arg", ["--model.qk_init_std=1e-320", "--train.lr=5e-324"])
def test_a_number_the_cpu_flushes_to_0_is_one_line(arg, tmp_path, corpus_file):
    """1e-320 passed the check for > 0, then training's torch.set_flush_denormal(True) made the CPU
    read it as 0, and a later dataclasses.replace re-ran the check: a ValueError traceback "must be
    positive, got 0.0". In a fresh process, as typed."""
    key, _, value = arg[2:].partition("=")
    proc = run_script("train.py", *tiny_argv(tmp_path, corpus_file, arg, "--train.max_steps=2"))
    assert_one_line_error(proc, f"{key} = {value} is nearer 0 than 2.2e-308")


def test_unknown_device_shorthand():
    with pytest.raises(ConfigError, match="train.device must be one of auto, cpu, cuda, mps"):
        load_config(["--config", "tiny", "--device", "tpu"])
    # checked later, at setup
    assert load_config(["--config", "tiny", "--device", "cuda:1"]).train.device == "cuda:1"


def test_vocab_size_cannot_be_set_by_hand(tmp_path):
    with pytest.raises(ConfigError, match="model.vocab_size is set from the tokenizer"):
        load_config(["--config", "tiny", "--model.vocab_size=100"])
    with pytest.raises(ConfigError, match="model.vocab_size is set from the tokenizer"):
        load_config(["--config", str(write_toml(tmp_path, "[model]\nvocab_size = 100\n"))])


# 5. Shorthands and run names


def test_shorthands_map_to_fields(tmp_path):
    cfg = load_config(
        [
            "--config",
            "tiny",
            "--no-mask",
            "--no-scale",
            "--device",
            "cpu",
            "--data-file",
            str(tmp_path / "t.txt"),
            "--run-name",
            "exp1",
            f"--runs-dir={tmp_path}/runs",
        ]
    )
    assert cfg.model.causal is False and cfg.model.scaled is False
    assert cfg.train.device == "cpu"
    assert cfg.data.path == str(tmp_path / "t.txt")
    assert cfg.train.run_name == "exp1"
    assert cfg.train.runs_dir == f"{tmp_path}/runs"
    assert cfg.run_dir == tmp_path / "runs" / "exp1"


@pytest.mark.parametrize(
    ("flags", "run_name"),
    [
        ([], "base"),
        (["--no-mask"], "base-no-mask"),
        (["--no-scale"], "base-no-scale"),
        (["--no-mask", "--no-scale"], "base-no-mask-no-scale"),
        (["--no-scale", "--no-mask"], "base-no-mask-no-scale"),
        (["--model.causal=false"], "base-no-mask"),
        (["--no-pos"], "base-no-pos"),
        (["--no-pos", "--no-mask"], "base-no-mask-no-pos"),
        (["--model.positions=none"], "base-no-pos"),
        (["--no-mask", "--run-name", "mine"], "mine"),
        (["--qk-norm"], "base-qk-norm"),
        (["--qk-norm", "--no-scale"], "base-no-scale-qk-norm"),
        (["--softcap=50"], "base-softcap50"),
        (["--softcap", "30.5"], "base-softcap30.5"),
        (["--model.positions=rope"], "base-rope"),
        (["--rope", "--qk-norm", "--softcap=50"], "base-qk-norm-softcap50-rope"),
        (["--kv-heads=1"], "base-kv-heads1"),
        (["--window", "32"], "base-window32"),
        (["--sink", "--gate"], "base-gate-sink"),
        (
            ["--sink", "--window=8", "--rope", "--kv-heads=2", "--gate", "--qk-norm"],
            "base-qk-norm-rope-kv-heads2-window8-gate-sink",
        ),
    ],
)
def test_run_name_derivation(flags, run_name):
    cfg = load_config(["--config", "base", *flags])
    assert cfg.run_name == run_name
    assert cfg.run_dir == Path("runs") / run_name


def test_titles_name_positions_only_when_they_are_gone():
    assert flags_label(load_config(["--config", "base"]).model) == "causal, scaled"
    assert (
        flags_label(load_config(["--config", "base", "--no-pos", "--no-mask"]).model)
        == "NO MASK, scaled, NO POS"
    )
    # table order
    assert list(variants(ModelConfig(), ["no-pos", "no-mask"])) == ["", "-no-mask", "-no-pos"]
    with pytest.raises(
        ValueError,
        match="unknown variant 'no-position'; "
        "choose from no-mask, no-scale, no-pos, qk-norm, softcap, rope",
    ):
        variants(ModelConfig(), ["no-position"])


def test_titles_name_the_cures_and_rope_in_capitals():
    def label(*flags: str) -> str:
        return flags_label(load_config(["--config", "char", *flags]).model)

    assert label("--qk-norm") == "causal, scaled, QK-NORM"
    assert label("--no-scale", "--qk-norm") == "causal, NO SCALE, QK-NORM"
    assert label("--softcap=50") == "causal, scaled, SOFTCAP 50"
    assert (
        label("--model.positions=rope", "--qk-norm", "--softcap=20")
        == "causal, scaled, QK-NORM, SOFTCAP 20, ROPE"
    )
    assert (
        label("--kv-heads=2", "--window=16", "--gate", "--sink")
        == "causal, scaled, KV-HEADS 2, WINDOW 16, GATE, SINK"
    )


def test_the_cures_and_rope_are_variants_that_compose():
    base = ModelConfig()
    picked = variants(base, ["no-scale+qk-norm", "rope", "softcap", "qk-norm"])
    # singles in table order, then the pair
    assert list(picked) == ["", "-qk-norm", "-softcap50", "-rope", "-no-scale-qk-norm"]
    assert (picked["-no-scale-qk-norm"].scaled, picked["-no-scale-qk-norm"].qk_norm) == (
        False,
        True,
    )
    assert (picked["-softcap50"].softcap, picked["-rope"].positions) == (50.0, "rope")
    assert picked[""] == base
    with pytest.raises(ValueError, match="no-pos and rope both set model.positions") as e:
        variants(base, ["no-pos+rope"])
    assert "\n" not in str(e.value)
    # by default the three ablations, as ever
    assert list(variants(base)) == ["", "-no-mask", "-no-scale", "-no-pos"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--model.positions=bogus"],
            "model.positions must be one of learned, rope, none, got 'bogus'",
        ),
        (["--model.positions=false"], "model.positions must be one of learned, rope, none"),
        (["--softcap=-1"], r"model.softcap must be a positive cap \(or 0, off\), got -1.0"),
        (["--softcap=nan"], "model.softcap must be a finite number, got nan"),
        (["--softcap=inf"], "model.softcap must be a finite number, got inf"),
        (["--softcap"], "--softcap needs a value"),
        (["--qk-norm=true"], "--qk-norm takes no value"),
        (
            ["--no-pos", "--model.positions=rope"],
            "--no-pos sets model.positions=none and --model.positions=rope sets it to rope",
        ),
        (["--rope", "--no-pos"], "--rope sets model.positions=rope and --no-pos sets it to none"),
        (
            ["--model.positions=rope", "--model.n_head=2", "--model.n_embd=30"],
            "head_size must be even, got 15",
        ),
        (
            ["--model.positions=rope", "--model.n_head=4", "--model.n_embd=36"],
            "head_size must be even, got 9",
        ),
    ],
)
def test_bad_positions_and_cures_are_one_line(flags, message):
    with pytest.raises(ConfigError, match=message) as e:
        load_config(["--config", "char", *flags])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("cap", "why"),
    [
        ("1e300", "is above 2**102 (5.07e+30), the largest cap float32 scores can take"),
        ("4e38", "is above 2**102"),
        ("3e38", "so it would train another model than no cap"),
        ("1e-300", "is below 2**-126 (1.18e-38), float32's smallest normal number"),
        ("1e-40", "the cap reads as 0 there, and C * tanh(score / C) divides by it"),
    ],
)
def test_a_cap_float32_cannot_hold_is_refused_and_says_why(cap, why, tmp_path, corpus_file, capsys):
    """1e300 and 4e38 were blamed on model.qk_init_std; 1e-300 (0 in float32) failed at step 1 with
    advice to lower the learning rate; 3e38 trained another model than no cap, without a word."""
    proc = error_of(train.main, tiny_argv(tmp_path, corpus_file, f"--softcap={cap}"), capsys)
    line = assert_one_line_error(proc, f"model.softcap = {float(cap):g} ", why, "give 0 for no cap")
    assert "qk_init_std" not in line and "--train.lr" not in line
    assert not (tmp_path / "runs").exists()
    assert (
        load_config(["--config", "tiny", f"--softcap={SOFTCAP_MOST!r}"]).model.softcap == 2.0**102
    )
    assert (
        load_config(["--config", "tiny", f"--softcap={SOFTCAP_LEAST!r}"]).model.softcap == 2.0**-126
    )


def test_the_cap_s_bounds_are_where_float32_scores_keep_their_values():
    """Over the largest cap every score that can move a float32 softmax weight (above 2**-24) stays
    a normal number, so the capped scores are the scores; over 3e38 most ordinary scores fall below
    2**-126, which a CPU that flushes such numbers (as training sets it) reads as 0. The smallest
    cap is not 0 in float32, where 1e-300 is."""
    # float32, as attention computes them
    scores = torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * 3
    tiny = torch.finfo(torch.float32).tiny  # 2**-126

    def read_as_0(cap: float) -> torch.Tensor:
        return ((scores / cap).abs() < tiny) & (scores.abs() >= 2**-24)

    assert not read_as_0(SOFTCAP_MOST).any() and read_as_0(3e38).float().mean() > 0.5
    assert torch.equal(SOFTCAP_MOST * torch.tanh(scores / SOFTCAP_MOST), scores)
    capped = SOFTCAP_LEAST * torch.tanh(scores / SOFTCAP_LEAST)
    assert torch.isfinite(capped).all() and capped.abs().max() <= SOFTCAP_LEAST
    assert (
        torch.tensor(SOFTCAP_LEAST) > 0 and torch.tensor(1e-300) == 0 and torch.tensor(4e38).isinf()
    )


def test_configs_stored_with_positions_as_a_boolean_load_as_learned_and_none():
    """Checkpoints and config.json files written before positions had kinds hold true or false."""
    assert (
        ModelConfig(positions=True).positions == "learned"
        and ModelConfig(positions=False).positions == "none"
    )
    stored = dataclasses.asdict(ModelConfig(n_layer=2))
    stored["positions"] = False
    for new_field in ("qk_norm", "softcap"):
        del stored[new_field]  # fields added since then take their defaults
    assert ModelConfig(**stored) == ModelConfig(n_layer=2, positions="none")
    assert (
        ModelConfig(positions=True).max_length == 64
        and ModelConfig(positions="rope").max_length is None
    )


def test_help_lists_the_cures_and_the_kinds_of_positions():
    """--help lists the new fields with their meanings (the same text docs/command-line.md
    shows).
    """
    from configs import usage

    text = usage("char")
    for needle in ("model.qk_norm", "model.softcap", "model.positions", "Gemma 2", "OLMo 2"):
        assert needle in text, needle


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (
            ["--config", "induction", "--data-file", "t.txt"],
            "--data-file t.txt does not apply to data.source = repeated-random",
        ),
        (
            ["--config", "induction", "--data.tokenizer=gpt2"],
            "reads no text, so data.tokenizer would be ignored",
        ),
        (
            ["--config", "tiny", "--data.symbols=16"],
            "--data.symbols=16 sets the repeated-random source, and this run reads a text",
        ),
        (
            ["--config", "gpt2-finetune", "--model.n_layer=3"],
            "the weights of train.init_from = gpt2 fix it, so model.n_layer would be ignored",
        ),
        (
            ["--config", "tiny", "--init-from", "{gpt2}", "--model.gelu=tanh"],
            "so model.gelu would be ignored",
        ),
    ],
)
def test_a_flag_the_run_would_ignore_is_refused(flags, needle, tmp_path, capsys):
    """`--config induction --data-file FILE` trained on the synthetic symbols without a word, and an
    --init-from run with --model.n_layer=3 trained the weights' 2 layers in a folder named for 3: a
    flag that cannot apply is one line, exit 2."""
    argv = [flag.format(gpt2=tmp_path / "gpt2") for flag in flags] + [
        "--runs-dir",
        str(tmp_path / "runs"),
        "--device",
        "cpu",
    ]
    assert_one_line_error(error_of(train.main, argv, capsys), needle, "leave it out")
    assert not (tmp_path / "runs").exists()


def test_flags_that_apply_are_taken():
    assert load_config(
        ["--config", "induction", "--data.source=text", "--data-file", "t.txt"]
    ).data.path == str(Path("t.txt").resolve())
    assert load_config(["--config", "induction", "--data.symbols=16"]).data.symbols == 16
    cfg = load_config(
        ["--config", "gpt2-finetune", "--model.block_size=64", "--model.dropout=0.1", "--no-mask"]
    )
    assert (cfg.model.block_size, cfg.model.dropout, cfg.run_name) == (
        64,
        0.1,
        "gpt2-finetune-no-mask-block_size64",
    )


# 6. Precedence and immutability


def test_precedence_defaults_then_toml_then_cli(tmp_path):
    path = write_toml(tmp_path, "[train]\nlr = 5e-3\nbatch_size = 4\n[model]\nn_layer = 3\n")
    from_file = load_config(["--config", str(path)])
    assert (from_file.train.lr, from_file.train.batch_size, from_file.model.n_layer) == (5e-3, 4, 3)
    # default: not in file or CLI
    assert from_file.train.weight_decay == TrainConfig().weight_decay == 0.1
    assert from_file.model.n_embd == ModelConfig().n_embd == 128
    cfg = load_config(["--config", str(path), "--train.lr=1e-4", "--model.n_embd", "64"])
    assert cfg.train.lr == 1e-4  # CLI beats TOML
    assert cfg.model.n_embd == 64  # CLI beats default
    assert cfg.train.batch_size == 4  # TOML beats default
    # the last flag wins
    assert load_config(["--config", "tiny", "--train.lr=1", "--train.lr=2"]).train.lr == 2.0


def test_configs_are_frozen():
    cfg = load_config(["--config", "tiny"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.lr = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.model.n_layer = 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.data.tokenizer = "gpt2"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "other"
    # the way to derive a variant
    variant = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=1e-3))
    assert (variant.train.lr, cfg.train.lr) == (1e-3, 3e-3)


def test_to_dict_round_trip():
    cfg = load_config(["--config", "tiny", "--no-mask"])
    d = cfg.to_dict()
    assert d["name"] == "tiny" and d["model"]["causal"] is False and d["train"]["lr"] == 3e-3
    rebuilt = Config(name=d["name"], **{s: cls(**d[s]) for s, cls in SECTION_CLASSES.items()})
    assert rebuilt == cfg


def test_docs_command_line_lists_every_key_as_the_schema_says():
    """docs/command-line.md's key tables are written from the fields' meanings; `python -m configs`
    rewrites them.
    """
    from configs.reference import DOCS_PAGE, rewrite

    page = DOCS_PAGE.read_text(encoding="utf-8")
    assert rewrite(page) == page, (
        "docs/command-line.md's key tables are stale: run python -m configs"
    )
    for dotted in KEYS:
        if dotted not in FROM_TOKENIZER:
            assert f"| `{dotted}` |" in page, dotted


def test_a_changed_meaning_makes_the_docs_stale(monkeypatch):
    from configs import reference

    page = reference.DOCS_PAGE.read_text(encoding="utf-8")
    original = reference.meaning
    monkeypatch.setattr(
        reference,
        "meaning",
        lambda dotted: "a new meaning" if dotted == "train.lr" else original(dotted),
    )
    assert "| `train.lr` | `0.001` | a new meaning |" in reference.rewrite(page) != page


def test_differences_name_each_changed_key_once_nested_sections_dotted():
    from configs.schema import config_differences

    saved = {"model": {"n_layer": 2, "causal": True}, "train": {"lr": 1e-3}}
    wanted = {
        "model": {"n_layer": 4, "causal": True, "positions": True},
        "train": {"lr": 1e-3, "run_name": "x"},
    }
    assert config_differences(saved, wanted, ignore=("run_name",)) == [
        "model.n_layer 2 vs 4",
        "model.positions None vs True",
    ]
    assert config_differences(saved["model"], saved["model"]) == []


def test_a_model_of_another_size_gets_a_run_name_of_its_own():
    """A control (`--model.n_layer=1`) or a wider model trains beside the preset's run, not in its
    place; the name says what changed from the preset, after the ablations; a size the preset
    already has, or --run-name, changes nothing."""
    assert (
        load_config(["--config", "induction", "--model.n_layer=1"]).run_name == "induction-n_layer1"
    )
    assert (
        load_config(["--config", "char", "--no-mask", "--model.n_layer", "6"]).run_name
        == "char-no-mask-n_layer6"
    )
    assert (
        load_config(["--config", "char", "--model.block_size=64", "--model.n_embd=64"]).run_name
        == "char-n_embd64-block_size64"
    )
    # 3 is char's own
    assert (
        load_config(["--config", "char", "--model.n_layer=3", "--train.lr=1e-3"]).run_name == "char"
    )
    assert (
        load_config(["--config", "char", "--model.n_layer=6", "--run-name", "wide"]).run_name
        == "wide"
    )
    assert load_config(["--model.n_head=8"]).run_name == "base-n_head8"
