"""Configuration: the schema, the one way into it from any source (validation.py), the loader (a
TOML preset, then the command line), what --help says of every key, and the .toml presets."""

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
