"""Configuration: the schema (configs/schema.py: typed, checked dataclasses), the one way into it
from any source (configs/validation.py: a TOML file, the command line, a checkpoint's or
config.json's record), the loader (configs/loader.py: a TOML preset, then command-line overrides),
and what --help and docs/command-line.md say of every key (configs/reference.py). The presets are
the .toml files here."""

from configs.loader import CONFIG_DIR, SHORTHANDS, load_config, parse_args, presets
from configs.reference import usage
from configs.schema import KEYS, MAX_SEED, SECTIONS, Config, DataConfig, TrainConfig
from configs.validation import FROM_TOKENIZER, ConfigError, validate_config

__all__ = [
    "CONFIG_DIR",
    "FROM_TOKENIZER",
    "KEYS",
    "MAX_SEED",
    "SECTIONS",
    "SHORTHANDS",
    "Config",
    "ConfigError",
    "DataConfig",
    "TrainConfig",
    "load_config",
    "parse_args",
    "presets",
    "usage",
    "validate_config",
]
