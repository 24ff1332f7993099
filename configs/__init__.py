"""The config schema, its validation, the loader (a preset, then flags), and every key's text."""

# ruff: noqa: F401 (the imports below are the package's names)

from configs.loader import CONFIG_DIR, SHORTHANDS, load_config, parse_args, presets
from configs.reference import usage
from configs.schema import KEYS, MAX_SEED, SECTIONS, Config, DataConfig, TrainConfig
from configs.validation import FROM_TOKENIZER, ConfigError, validate_config
