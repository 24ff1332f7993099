"""A Config from a TOML file, the command line or a run's record, every key and type checked:
Python would read causal = "false" as true."""

import difflib
import json
import struct
from collections.abc import Iterable
from pathlib import Path

from configs.schema import KEYS, SECTIONS, Config
from model.ablations import CHANGES

FROM_TOKENIZER = {"model.vocab_size"}
SHAPE = ("n_layer", "n_head", "n_embd", "block_size")
TAKES = {bool: "true or false", int: "a whole number", float: "a number", str: "text, in quotes"}
IS = {**TAKES, bool: "a boolean", str: "text", list: "a list", dict: "a table", type(None): "null"}
RECORDED_FIX = "train.py writes no such config (was it edited?); correct it, or train the run again"


class ConfigError(ValueError):
    pass


def nearest_key(dotted: str) -> str | None:
    """What a typo meant: a change's flag (no_mask -> --no-mask), initials, else the closest."""
    section, _, name = dotted.partition(".")
    for change in CHANGES:
        if change.name == name.replace("_", "-"):
            value = "C" if change.takes_value else json.dumps(change.value)
            return f"{change.flag} (model.{change.field} = {value})"
    if section in SECTIONS:
        names = [key.partition(".")[2] for key in KEYS if key.startswith(f"{section}.")]
        initials = "".join(part[:1] for part in name.split("_"))
        if initials in names:
            return f"{section}.{initials}"
        hint = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        if hint:
            return f"{section}.{hint[0]}"
    hint = difflib.get_close_matches(dotted, list(KEYS), n=1, cutoff=0.5)
    return hint[0] if hint else None


def check_key(dotted: str, where: str = "", recorded: bool = False) -> None:
    in_file = f" in {where}" if where else ""
    if dotted not in KEYS:
        hint = nearest_key(dotted)
        suggestion = f", did you mean {hint}?" if hint else f"; valid keys: {', '.join(KEYS)}"
        raise ConfigError(
            f"unknown key {dotted}{in_file}{suggestion}"
            + (f" ({RECORDED_FIX})" if recorded else "")
        )
    if dotted in FROM_TOKENIZER and not recorded:
        raise ConfigError(
            f"{dotted} is set from the tokenizer; choose the tokenizer with data.tokenizer instead"
        )


def is_denormal(x: float) -> bool:
    """From the bits: a CPU that flushes denormals (as training sets it) compares them as 0."""
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    return (bits >> 52) & 0x7FF == 0 and bits & (2**52 - 1) != 0


def convert(dotted: str, value):
    kind, number = KEYS[dotted].type, value
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool:
            if text not in ("true", "false"):
                raise ConfigError(f"{dotted} takes true or false, got {value!r}")
            return text == "true"
        try:
            number = kind(text)
        except ValueError:
            raise ConfigError(
                f"{dotted} takes {'an integer' if kind is int else 'a number'}, got {value!r}"
            ) from None
    elif kind is float and type(value) is int:
        if abs(value) > 2**1023:  # float() would raise OverflowError
            raise ConfigError(f"{dotted} = {value} is too large for a float; give a smaller value")
        number = float(value)
    if kind is float and is_denormal(number):
        raise ConfigError(
            f"{dotted} = {value} is nearer 0 than 2.2e-308: a CPU reads 0; give a larger value"
        )
    return number


def typed(dotted: str, value, where: str, recorded: bool):
    kind = KEYS[dotted].type
    # recorded before positions had kinds: ModelConfig reads true as "learned", false as "none"
    if recorded and dotted == "model.positions" and type(value) is bool:
        return value
    if type(value) is kind or (kind is float and type(value) is int):
        return convert(dotted, value)
    fix = RECORDED_FIX if recorded else f"write {TAKES[kind]}"
    if not recorded and isinstance(value, str):
        try:
            unquoted = json.dumps(convert(dotted, value))
            fix = f"write it without quotes: {dotted.partition('.')[2]} = {unquoted}"
        except ConfigError:
            pass
    # as TOML and JSON spell it: "false" in quotes is text, false is not
    shown = json.dumps(value, default=repr)
    found = IS.get(type(value), type(value).__name__)
    raise ConfigError(
        f"{dotted} = {shown} in {where} is {found}, and {dotted} takes {TAKES[kind]}; {fix}"
    )


def shape_suffix(preset: dict, model) -> str:
    """ "-n_layer1" for sizes the command line changed: such a run trains beside the preset's."""
    changed = [
        key for key in SHAPE if getattr(model, key) != preset.get(key, KEYS[f"model.{key}"].default)
    ]
    return "".join(f"-{key}{getattr(model, key)}" for key in changed)


def validate_config(
    table, where: str | Path, overrides: Iterable[tuple[str, str]] = (), recorded: bool = False
) -> Config:
    """The Config of a TOML file's sections, or with `recorded` of a run's Config.to_dict() (a field
    added since takes its default), then the (dotted key, text) overrides."""
    if not isinstance(table, dict):
        raise ConfigError(
            f"{where} holds no config (found {IS.get(type(table), type(table).__name__)}); "
            f"{RECORDED_FIX}"
        )
    values: dict[str, dict] = {section: {} for section in SECTIONS}
    for section, body in table.items():
        if recorded and section in ("name", "shape"):  # beside the sections
            if not isinstance(body, str):
                raise ConfigError(
                    f"{section} = {json.dumps(body, default=repr)} in {where} is not text; "
                    f"{RECORDED_FIX}"
                )
            continue
        if section not in SECTIONS or not isinstance(body, dict):
            raise ConfigError(
                f"unknown section [{section}] in {where}; valid sections are {', '.join(SECTIONS)}"
            )
        for key, value in body.items():
            dotted = f"{section}.{key}"
            check_key(dotted, str(where), recorded)
            values[section][key] = typed(dotted, value, str(where), recorded)
    preset = dict(values["model"])
    for dotted, text in overrides:
        check_key(dotted)
        section, _, key = dotted.partition(".")
        values[section][key] = convert(dotted, text)
    try:
        sections = {s: cls(**values[s]) for s, cls in SECTIONS.items()}
        if recorded:
            return Config(name=table.get("name", "run"), **sections, shape=table.get("shape", ""))
        return Config(
            name=Path(where).stem, **sections, shape=shape_suffix(preset, sections["model"])
        )
    except ValueError as e:
        raise ConfigError(f"{where}: {e}; {RECORDED_FIX}" if recorded else str(e)) from None
