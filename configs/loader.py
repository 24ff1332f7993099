"""Dataclass defaults < TOML preset < command-line flags, each a field's dotted name:
python train.py --config base --train.lr=3e-4 --model.n_layer 4 --no-mask"""

import dataclasses
import difflib
import tomllib
from pathlib import Path

from configs.schema import CHOSEN_WITH_WEIGHTS, KEYS, Config
from configs.validation import FROM_TOKENIZER, ConfigError, validate_config
from data.synthetic import SETTINGS
from model.ablations import CHANGES

CONFIG_DIR = Path(__file__).resolve().parent
SHORTHANDS = {  # flag -> (dotted field, fixed value or None)
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
COUNTED = {c.flag: c.counts for c in CHANGES if c.counts}
TAKING_VALUES = {key: flag for flag, (key, fixed) in SHORTHANDS.items() if fixed is None}
SYNTHETIC = {f"data.{key}" for key in SETTINGS if key != "source"}
CHOSEN = {f"model.{name}" for name in (*CHOSEN_WITH_WEIGHTS, *(c.field for c in CHANGES))}
FROM_WEIGHTS = {key for key in KEYS if key.startswith("model.")} - CHOSEN - FROM_TOKENIZER


def presets() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def find_config_file(name: str) -> Path:
    is_path = name.endswith(".toml") or "/" in name or "\\" in name
    path = Path(name) if is_path else CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        hint = [] if is_path else difflib.get_close_matches(name, presets(), n=1)
        did_you_mean = f"did you mean {hint[0]}? " if hint else ""
        raise ConfigError(
            f"config {name} not found; {did_you_mean}give one of {', '.join(presets())}, or a "
            ".toml path"
        )
    return path


def parse_args(argv: list[str], default: str = "base") -> tuple[str, list[tuple[str, str]]]:
    name, given, i = default, [], 0  # given: (the flag as typed, dotted key, value)
    while i < len(argv):
        flag, has_eq, value = argv[i].partition("=")
        i += 1
        dotted, fixed = SHORTHANDS.get(flag, (flag[2:], None))
        if fixed is not None:
            if has_eq:
                raise ConfigError(f"{flag} takes no value")
            given.append((flag, dotted, fixed))
            continue
        if not flag.startswith("--") or not (
            flag in SHORTHANDS or flag == "--config" or "." in flag
        ):
            raise unknown_argument(argv[i - 1], flag)
        if not has_eq:
            if i == len(argv):
                raise ConfigError(f"{flag} needs a value")
            if argv[i].startswith("--"):
                raise ConfigError(
                    f"{flag} needs a value, and got the flag {argv[i]}; for a value starting with "
                    f"--, write {flag}=VALUE"
                )
            value = argv[i]
            i += 1
        if flag in COUNTED and not (value.isdigit() and int(value) >= 1):
            raise ConfigError(
                f"{flag} takes a whole number of {COUNTED[flag]}, at least 1, got {value!r}; "
                f"leave {flag} out for attention without it"
            )
        if flag == "--config":
            name = value
        else:
            given.append((f"{flag}={value}", dotted, value))
    refuse_contradictions(given)
    return name, [(dotted, value) for _, dotted, value in given]


def unknown_argument(arg: str, flag: str) -> ConfigError:
    fields = [
        f"--{key}=VALUE" for key in KEYS if key.partition(".")[2] == flag[2:].replace("-", "_")
    ]
    if flag.replace("_", "-") in SHORTHANDS:  # --no_mask: --no-mask
        fields.append(flag.replace("_", "-"))
    hint = f" (did you mean {' or '.join(fields)}?)" if fields else ""
    shown = [*SHORTHANDS, "--config", "--section.field=VALUE"]
    return ConfigError(f"unknown argument {arg!r}{hint}; valid arguments: {', '.join(shown)}")


def refuse_contradictions(given: list[tuple[str, str, str]]) -> None:
    """--no-pos and --rope set one key two ways: neither wins."""
    for flag, key, value in given:
        for other_flag, other_key, other in given:
            if flag in SHORTHANDS and other_key == key and other.strip().lower() != value:
                raise ConfigError(
                    f"{flag} sets {key}={value} and {other_flag} sets it to {other}; give one of "
                    "them"
                )


def load_config(argv: list[str], default: str = "base") -> Config:
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
    """data.path and val_path resolved: a run finds the same text from any folder."""
    return {
        key: str(Path(data[key]).expanduser().resolve())
        for key in ("path", "val_path")
        if data.get(key)
    }


def refuse_ignored(cfg: Config, overrides: list[tuple[str, str]]) -> None:
    text = cfg.data.source == "text"
    for dotted, value in overrides:
        flag = (
            f"{TAKING_VALUES[dotted]} {value}" if dotted in TAKING_VALUES else f"--{dotted}={value}"
        )
        section, _, key = dotted.partition(".")
        ignored = f"so {dotted} would be ignored; leave it out"
        if section == "data" and not text and key not in SETTINGS:
            raise ConfigError(
                f"{flag} does not apply to data.source = {cfg.data.source}, which reads no text, "
                f"{ignored}, or add --data.source=text"
            )
        if dotted in SYNTHETIC and text:
            raise ConfigError(
                f"{flag} sets the repeated-random source, and this run reads a text, {ignored}, "
                "or add --data.source=repeated-random"
            )
        if dotted in FROM_WEIGHTS and cfg.train.init_from:
            raise ConfigError(
                f"{flag}: the weights of train.init_from = {cfg.train.init_from} fix it, {ignored} "
                f"(such a run chooses only model.{', model.'.join(CHOSEN_WITH_WEIGHTS)}, and may "
                "switch the mask or the scale off)"
            )
