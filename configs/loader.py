"""The loader: a TOML preset, then command-line overrides, checked against the schema and converted
to its types.

Precedence is dataclass defaults < TOML file < command line. Sections [model], [data] and
[train] map one-to-one onto ModelConfig, DataConfig and TrainConfig, and every field can be
set from the command line with its dotted name:

    python train.py --config base --train.lr=3e-4 --model.n_layer 4 python train.py --no-mask
    # shorthand for --model.causal=false python train.py --no-scale       # shorthand for
    --model.scaled=false python train.py --no-pos         # shorthand for --model.positions=none
    python train.py --qk-norm        # shorthand for --model.qk_norm=true (model/ablations.py holds
    every such change) python train.py --softcap=50     # shorthand for --model.softcap=50 python
    train.py --config gpt2-finetune --init-from gpt2   # shorthand for --train.init_from=gpt2

Parsing is data only: stdlib tomllib, and values converted to the annotated field types.
"""

import dataclasses
import difflib
import tomllib
from pathlib import Path

from configs.schema import CHOSEN_WITH_WEIGHTS, KEYS, Config
from configs.validation import FROM_TOKENIZER, ConfigError, validate_config
from data.synthetic import SETTINGS
from model.ablations import CHANGES

CONFIG_DIR = Path(__file__).resolve().parent
SHORTHANDS = {  # flag -> (dotted field, fixed value or None when the flag takes a value)
    # --no-mask, --qk-norm, ...
    **{
        c.flag: (f"model.{c.field}", None if c.takes_value else str(c.value).lower())
        for c in CHANGES
    },
    "--device": ("train.device", None),
    "--data-file": ("data.path", None),
    "--run-name": ("train.run_name", None),
    "--runs-dir": ("train.runs_dir", None),
    "--resume": ("train.resume", "true"),
    "--init-from": ("train.init_from", None),
}
# --window=W, --kv-heads=K: a count from 1
COUNTED = {c.flag: c.counts for c in CHANGES if c.counts}
# what only a synthetic source reads
SYNTHETIC = {f"data.{key}" for key in SETTINGS if key != "source"}
# with weights: the run's, or refused
CHOSEN = {f"model.{name}" for name in (*CHOSEN_WITH_WEIGHTS, *(c.field for c in CHANGES))}
# what pretrained weights fix
FROM_WEIGHTS = {key for key in KEYS if key.startswith("model.")} - CHOSEN - FROM_TOKENIZER
# A relative path names another file from another folder: the run's config.json and checkpoints
# record these resolved, so that score.py and inspect_attention.py find a run's text from anywhere,
# and a run resumed from elsewhere records the same text.
TEXT_PATHS = ("path", "val_path")


def presets() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def find_config_file(name: str) -> Path:
    if name.endswith(".toml") or "/" in name or "\\" in name:
        path = Path(name)
        if not path.is_file():
            raise ConfigError(
                f"config file {name} not found; give a path to a .toml file or one of: {', '.join(presets())}"
            )
        return path
    path = CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        hint = difflib.get_close_matches(name, presets(), n=1)
        did_you_mean = f"did you mean {hint[0]}? " if hint else ""
        raise ConfigError(
            f"unknown config {name!r}; {did_you_mean}choose one of: {', '.join(presets())}, or a path to a .toml file"
        )
    return path


def parse_args(argv: list[str], default: str = "base") -> tuple[str, list[tuple[str, str]]]:
    """Return the config name (`default` unless --config gives one) and the (dotted key, string
    value) overrides, in order.
    """
    name, overrides, spelled, i = default, [], [], 0  # spelled: each override as it was typed
    while i < len(argv):
        arg = argv[i]
        flag, has_eq, inline = arg.partition("=")
        takes_value = (
            flag == "--config"
            or (flag in SHORTHANDS and SHORTHANDS[flag][1] is None)
            or "." in flag
        )
        if flag in SHORTHANDS and SHORTHANDS[flag][1] is not None:
            if has_eq:
                raise ConfigError(f"{flag} takes no value")
            overrides.append(SHORTHANDS[flag])
            spelled.append(flag)
            i += 1
            continue
        if not flag.startswith("--") or not takes_value:
            shown = [*SHORTHANDS, "--config", "--section.field=VALUE"]
            fields = [
                f"--{dotted}=VALUE"
                for dotted in KEYS
                if dotted.partition(".")[2] == flag[2:].replace("-", "_")
            ]
            # --no_mask: --no-mask
            fields += [flag.replace("_", "-")] if flag.replace("_", "-") in SHORTHANDS else []
            hint = f" (did you mean {' or '.join(fields)}?)" if fields else ""
            raise ConfigError(
                f"unknown argument {arg!r}{hint}; valid arguments: {', '.join(shown)}"
            )
        if has_eq:
            value = inline
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, i = argv[i + 1], i + 1
        # `--run-name --no-mask`: the value was left out; write --flag=--value to mean it
        elif i + 1 < len(argv):
            raise ConfigError(
                f"{flag} needs a value, and got the flag {argv[i + 1]}; to give a value that starts with --, write {flag}=VALUE"
            )
        else:
            raise ConfigError(f"{flag} needs a value")
        if flag in COUNTED and not (value.isdigit() and int(value) >= 1):
            raise ConfigError(
                f"{flag} takes a whole number of {COUNTED[flag]}, at least 1, got {value!r}; leave {flag} out for attention without it"
            )
        if flag == "--config":
            name = value
        else:
            overrides.append((SHORTHANDS[flag][0] if flag in SHORTHANDS else flag[2:], value))
            spelled.append(f"{flag}={value}")
        i += 1
    refuse_contradictions(overrides, spelled)
    return name, overrides


def refuse_contradictions(overrides: list[tuple[str, str]], spelled: list[str]) -> None:
    """A flag that sets a fixed value (--no-pos: model.positions=none) and another that sets the
    same key otherwise (--rope, --model.positions=rope) contradict each other: neither silently
    wins."""
    for (key, value), flag in zip(overrides, spelled, strict=True):
        if flag not in SHORTHANDS:
            continue
        for (other_key, other), other_flag in zip(overrides, spelled, strict=True):
            if other_key == key and other.strip().lower() != value:
                raise ConfigError(
                    f"{flag} sets {key}={value} and {other_flag} sets it to {other}; give one of them"
                )


def load_config(argv: list[str], default: str = "base") -> Config:
    """Build the Config from `--config NAME|PATH` (`default` if absent) and the overrides in argv."""
    name, overrides = parse_args(argv, default)
    path = find_config_file(name)
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"malformed TOML in {path}: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    cfg = validate_config(table, path, overrides)
    refuse_ignored(cfg, overrides)
    return dataclasses.replace(
        cfg, data=dataclasses.replace(cfg.data, **resolved_texts(dataclasses.asdict(cfg.data)))
    )


def resolved_texts(data: dict) -> dict[str, str]:
    """A data section's texts (TEXT_PATHS) as the files they name from here, not as typed: one file
    however it is written.
    """
    return {key: str(Path(data[key]).expanduser().resolve()) for key in TEXT_PATHS if data.get(key)}


def refuse_ignored(cfg: Config, overrides: list[tuple[str, str]]) -> None:
    """A flag the run would not use is refused, never silently ignored: a text's settings when the
    source draws its own tokens (the induction preset's), a synthetic source's settings when it
    reads a text, and a model field that pretrained weights fix (train.init_from: the sizes, the
    bias, the GELU, ...), which the weights' values replace."""
    for dotted, value in overrides:
        flag = next(
            (
                f"{f} {value}"
                for f, (key, fixed) in SHORTHANDS.items()
                if key == dotted and fixed is None
            ),
            f"--{dotted}={value}",
        )
        if (
            dotted.startswith("data.")
            and cfg.data.source != "text"
            and dotted not in SYNTHETIC
            and dotted != "data.source"
        ):
            raise ConfigError(
                f"{flag} does not apply to data.source = {cfg.data.source}, which draws its own tokens (data.symbols of them) and "
                f"reads no text, so {dotted} would be ignored; leave it out, or add --data.source=text to train on a text"
            )
        if dotted in SYNTHETIC and cfg.data.source == "text":
            raise ConfigError(
                f"{flag} sets the repeated-random source, and this run reads a text (data.source = text), so {dotted} would be "
                "ignored; leave it out, or add --data.source=repeated-random"
            )
        if dotted in FROM_WEIGHTS and cfg.train.init_from:
            raise ConfigError(
                f"{flag} cannot apply to a run from pretrained weights (train.init_from = {cfg.train.init_from}): their own value "
                f"replaces it, so {dotted} would be ignored; leave it out (such a run chooses only "
                f"model.{', model.'.join(CHOSEN_WITH_WEIGHTS)}, and may switch the mask or the scale off)"
            )
