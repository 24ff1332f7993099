"""The loader: a TOML preset, then command-line overrides, checked against the schema and converted to its types.

Precedence is dataclass defaults < TOML file < command line. Sections [model], [data] and
[train] map one-to-one onto ModelConfig, DataConfig and TrainConfig, and every field can be
set from the command line with its dotted name:

    python train.py --config base --train.lr=3e-4 --model.n_layer 4
    python train.py --no-mask        # shorthand for --model.causal=false
    python train.py --no-scale       # shorthand for --model.scaled=false
    python train.py --no-pos         # shorthand for --model.positions=none
    python train.py --qk-norm        # shorthand for --model.qk_norm=true (model/ablations.py holds every such change)
    python train.py --softcap=50     # shorthand for --model.softcap=50
    python train.py --config gpt2-finetune --init-from gpt2   # shorthand for --train.init_from=gpt2

Parsing is data only: stdlib tomllib, and values converted to the annotated field types.
"""

import difflib
import struct
import tomllib
from pathlib import Path

from configs.schema import KEYS, SECTIONS, Config
from model.ablations import CHANGES

CONFIG_DIR = Path(__file__).resolve().parent
SHORTHANDS = {  # flag -> (dotted field, fixed value or None when the flag takes a value)
    **{c.flag: (f"model.{c.field}", None if c.takes_value else str(c.value).lower()) for c in CHANGES},  # --no-mask, --qk-norm, ...
    "--device": ("train.device", None),
    "--data-file": ("data.path", None),
    "--run-name": ("train.run_name", None),
    "--runs-dir": ("train.runs_dir", None),
    "--resume": ("train.resume", "true"),
    "--init-from": ("train.init_from", None),
}
# A relative path names another file from another folder: the run's config.json and checkpoints record these resolved, so that
# score.py and inspect_attention.py find a run's text from anywhere, and a run resumed from elsewhere records the same text.
TEXT_PATHS = ("path", "val_path")
FROM_TOKENIZER = {"model.vocab_size"}  # set by train.py from the tokenizer, never by hand
SHAPE = ("n_layer", "n_head", "n_embd", "block_size")  # a model of another size is another run, named for it: shape_suffix


class ConfigError(ValueError):
    """A config file or flag that cannot be used; the message says what is valid."""


def presets() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def find_config_file(name: str) -> Path:
    if name.endswith(".toml") or "/" in name or "\\" in name:
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"config file {name} not found; give a path to a .toml file or one of: {', '.join(presets())}")
        return path
    path = CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        hint = difflib.get_close_matches(name, presets(), n=1)
        did_you_mean = f"did you mean {hint[0]}? " if hint else ""
        raise ConfigError(f"unknown config {name!r}; {did_you_mean}choose one of: {', '.join(presets())}, or a path to a .toml file")
    return path


def nearest_key(dotted: str) -> str | None:
    """The valid key a typo most likely meant: an abbreviation (learning_rate -> lr), else the closest spelling."""
    section, _, name = dotted.partition(".")
    if section in SECTIONS:
        names = [key.partition(".")[2] for key in KEYS if key.startswith(f"{section}.")]
        initials = "".join(part[:1] for part in name.split("_"))
        for field_name in names:
            if field_name == initials or field_name.replace("_", "") == name.replace("_", ""):
                return f"{section}.{field_name}"
        hint = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        if hint:
            return f"{section}.{hint[0]}"
    hint = difflib.get_close_matches(dotted, list(KEYS), n=1, cutoff=0.5)
    return hint[0] if hint else None


def check_key(dotted: str) -> None:
    """Make sure 'section.field' exists and may be set, suggesting the nearest valid key if not."""
    if dotted not in KEYS:
        section, _, name = dotted.partition(".")
        if section not in SECTIONS and not name:
            raise ConfigError(f"unknown section [{section}]; valid sections are {', '.join(SECTIONS)}")
        hint = nearest_key(dotted)
        suggestion = f", did you mean {hint}?" if hint else f"; valid keys: {', '.join(KEYS)}"
        raise ConfigError(f"unknown key {dotted}{suggestion}")
    if dotted in FROM_TOKENIZER:
        raise ConfigError(f"{dotted} is set from the tokenizer; choose the tokenizer with data.tokenizer instead")


def is_denormal(x: float) -> bool:
    """Whether x is below the smallest normal double (2.2e-308) but not 0: read from its bits, since a CPU that flushes
    denormals (as training sets it to) reads such a number as 0 in any comparison."""
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    return (bits >> 52) & 0x7FF == 0 and bits & (2**52 - 1) != 0


def convert(dotted: str, value):
    """Turn a TOML value or a command-line string into the type of field `dotted`, or explain why not."""
    number = converted(dotted, value)
    if isinstance(number, float) and is_denormal(number):  # 1e-320 passes a check for > 0, then training's CPU reads it as 0
        raise ConfigError(
            f"{dotted} = {value} is nearer 0 than 2.2e-308, so near that the CPU reads it as 0 in training; give a larger value"
        )
    return number


def converted(dotted: str, value):
    """convert's body: the value in the field's type."""
    kind = KEYS[dotted].type
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool:
            if text not in ("true", "false"):
                raise ConfigError(f"{dotted} takes true or false, got {value!r}")
            return text == "true"
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(f"{dotted} takes {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not kind:
        raise ConfigError(f"{dotted} takes {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def shape_suffix(preset: dict, model) -> str:
    """What a run's default name gets for the model sizes the command line changed from its preset's: "-n_layer1", ...

    `--config induction --model.n_layer=1` then trains runs/induction-n_layer1 beside runs/induction, instead of moving
    the two-layer run aside; a size the preset already has adds nothing, and --run-name always wins. It is kept apart
    from the run name (Config.shape), so that variants derived from the config (compare.py's, the notebook's) keep it
    under names of their own."""
    changed = [key for key in SHAPE if getattr(model, key) != preset.get(key, KEYS[f"model.{key}"].default)]
    return "".join(f"-{key}{getattr(model, key)}" for key in changed)


def parse_args(argv: list[str], default: str = "base") -> tuple[str, list[tuple[str, str]]]:
    """Return the config name (`default` unless --config gives one) and the (dotted key, string value) overrides, in order."""
    name, overrides, spelled, i = default, [], [], 0  # spelled: each override as it was typed
    while i < len(argv):
        arg = argv[i]
        flag, has_eq, inline = arg.partition("=")
        takes_value = flag == "--config" or (flag in SHORTHANDS and SHORTHANDS[flag][1] is None) or "." in flag
        if flag in SHORTHANDS and SHORTHANDS[flag][1] is not None:
            if has_eq:
                raise ConfigError(f"{flag} takes no value")
            overrides.append(SHORTHANDS[flag])
            spelled.append(flag)
            i += 1
            continue
        if not flag.startswith("--") or not takes_value:
            shown = [*SHORTHANDS, "--config", "--section.field=VALUE"]
            fields = [dotted for dotted in KEYS if dotted.partition(".")[2] == flag[2:].replace("-", "_")]
            hint = f" (did you mean {' or '.join(f'--{f}=VALUE' for f in fields)}?)" if fields else ""
            raise ConfigError(f"unknown argument {arg!r}{hint}; valid arguments: {', '.join(shown)}")
        if has_eq:
            value = inline
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, i = argv[i + 1], i + 1
        elif i + 1 < len(argv):  # `--run-name --no-mask`: the value was left out; write --flag=--value to mean it
            raise ConfigError(
                f"{flag} needs a value, and got the flag {argv[i + 1]}; to give a value that starts with --, write {flag}=VALUE"
            )
        else:
            raise ConfigError(f"{flag} needs a value")
        if flag == "--config":
            name = value
        else:
            overrides.append((SHORTHANDS[flag][0] if flag in SHORTHANDS else flag[2:], value))
            spelled.append(f"{flag}={value}")
        i += 1
    refuse_contradictions(overrides, spelled)
    return name, overrides


def refuse_contradictions(overrides: list[tuple[str, str]], spelled: list[str]) -> None:
    """A flag that sets a fixed value (--no-pos: model.positions=none) and another that sets the same key otherwise
    (--rope, --model.positions=rope) contradict each other: neither silently wins."""
    for (key, value), flag in zip(overrides, spelled, strict=True):
        if flag not in SHORTHANDS:
            continue
        for (other_key, other), other_flag in zip(overrides, spelled, strict=True):
            if other_key == key and other.strip().lower() != value:
                raise ConfigError(f"{flag} sets {key}={value} and {other_flag} sets it to {other}; give one of them")


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
    values: dict[str, dict] = {section: {} for section in SECTIONS}
    for section, body in table.items():
        if section not in SECTIONS or not isinstance(body, dict):
            raise ConfigError(f"unknown section [{section}] in {path}; valid sections are {', '.join(SECTIONS)}")
        for key, value in body.items():
            check_key(f"{section}.{key}")
            values[section][key] = convert(f"{section}.{key}", value)
    preset = dict(values["model"])
    for dotted, value in overrides:
        check_key(dotted)
        section, _, key = dotted.partition(".")
        values[section][key] = convert(dotted, value)
    for key in [key for key in TEXT_PATHS if values["data"].get(key)]:  # kept as they resolve here, not as typed: see TEXT_PATHS
        values["data"][key] = str(Path(values["data"][key]).expanduser().resolve())
    try:
        sections = {s: cls(**values[s]) for s, cls in SECTIONS.items()}
        return Config(name=path.stem, **sections, shape=shape_suffix(preset, sections["model"]))
    except ValueError as e:
        raise ConfigError(str(e)) from None
