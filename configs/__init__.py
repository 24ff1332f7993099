"""Configuration: a TOML preset parsed into frozen dataclasses, then command-line overrides.

Precedence is dataclass defaults < TOML file < command line. Sections [model], [data] and
[train] map one-to-one onto ModelConfig, DataConfig and TrainConfig, and every field can be
set from the command line with its dotted name:

    python train.py --config base --train.lr=3e-4 --model.n_layer 4
    python train.py --no-mask        # shorthand for --model.causal=false
    python train.py --no-scale       # shorthand for --model.scaled=false
    python train.py --config gpt2-finetune --init-from gpt2   # shorthand for --train.init_from=gpt2

Parsing is data only: stdlib tomllib, and values converted to the annotated field types.
"""

import dataclasses
import difflib
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from data.tokenizer import TOKENIZERS
from model.config import ModelConfig

CONFIG_DIR = Path(__file__).resolve().parent
DEVICES = ("auto", "cpu", "cuda", "mps")
SHORTHANDS = {  # flag -> (dotted field, fixed value or None when the flag takes a value)
    "--no-mask": ("model.causal", "false"),
    "--no-scale": ("model.scaled", "false"),
    "--device": ("train.device", None),
    "--data-file": ("data.path", None),
    "--run-name": ("train.run_name", None),
    "--runs-dir": ("train.runs_dir", None),
    "--resume": ("train.resume", "true"),
    "--init-from": ("train.init_from", None),
}
FROM_TOKENIZER = {"model.vocab_size"}  # set by train.py from the tokenizer, never by hand
MAX_SEED = 2**63 - 1  # torch seeds are 64-bit; this leaves room for the seed + rank and seed + i that runs derive
MAX_RUN_NAME = 200  # characters


class ConfigError(ValueError):
    """A config file or flag that cannot be used; the message says what is valid."""


@dataclass(frozen=True)
class DataConfig:
    path: str = ""  # a UTF-8 text file; empty means Tiny Shakespeare, downloaded once
    tokenizer: str = "gpt2"  # "gpt2" (tiktoken BPE) or "char" (one id per character)
    cache_dir: str = ""  # where downloads and prepared .bin files go; empty means data/cache

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"data.tokenizer must be one of {', '.join(TOKENIZERS)}, got {self.tokenizer!r}")


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 32  # sequences per micro-batch, per process
    grad_accum_steps: int = 1  # micro-batches per optimizer step: global batch = batch_size x grad_accum_steps x processes
    max_steps: int = 1000  # optimizer steps in the whole run
    lr: float = 1e-3  # peak learning rate, reached at the end of warmup
    min_lr: float = 1e-4  # learning rate at the last step of the cosine decay
    warmup_steps: int = 100  # steps of linear warmup from 0 to lr (a shorter run warms up over all of it)
    optimizer: str = "adamw"  # "adamw", or "muon": torch.optim.Muon for the blocks' matrices, AdamW (same lr) for the rest
    muon_dtype: str = "auto"  # Muon's Newton-Schulz in "bfloat16", "float32", or "auto": bfloat16 where the device computes it in hardware
    weight_decay: float = 0.1  # AdamW decay, on matrices only
    beta1: float = 0.9  # AdamW momentum
    beta2: float = 0.99  # AdamW second-moment decay
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    eval_interval: int = 100  # steps between evaluations (and one at the end)
    eval_batches: int = 20  # fixed batches per split in each evaluation
    honest_batches: int = 4  # of those val batches, how many are also scored prefix by prefix (loss/val_honest)
    log_interval: int = 10  # steps between training-loss logs
    seed: int = 1337  # one seed for init and the training batches
    device: str = "auto"  # "auto" picks cuda, then mps, then cpu
    compile: str = "auto"  # torch.compile the training model: "auto" (CUDA only), "true" or "false"
    run_name: str = ""  # folder under runs_dir; empty derives it from config and flags
    runs_dir: str = "runs"  # where every run's folder goes
    resume: bool = False  # continue runs_dir/run_name/ckpt.pt instead of starting afresh
    init_from: str = ""  # start from a GPT-2's weights: gpt2, gpt2-medium, ... or a folder (config.json + model.safetensors)

    def __post_init__(self) -> None:
        for name in ("lr", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip"):
            if not math.isfinite(getattr(self, name)):  # nan slips past every comparison below, inf past most
                raise ValueError(f"train.{name} must be a finite number, got {getattr(self, name)}")
        if not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"train.seed must be between 0 and {MAX_SEED} (2**63 - 1), got {self.seed}")
        for name in ("batch_size", "grad_accum_steps", "max_steps", "eval_interval", "eval_batches", "honest_batches", "log_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be a positive integer, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"train.lr must be positive, got {self.lr}")
        if not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"train.min_lr must be between 0 and train.lr ({self.lr}), got {self.min_lr}")
        if self.warmup_steps < 0:
            raise ValueError(f"train.warmup_steps must be >= 0, got {self.warmup_steps}")
        for name in ("weight_decay", "grad_clip"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.optimizer not in ("adamw", "muon"):
            raise ValueError(f"train.optimizer must be adamw or muon, got {self.optimizer!r}")
        if self.muon_dtype not in ("auto", "bfloat16", "float32"):
            raise ValueError(f"train.muon_dtype must be auto, bfloat16 or float32, got {self.muon_dtype!r}")
        if self.compile not in ("auto", "true", "false"):
            raise ValueError(f"train.compile must be auto, true or false, got {self.compile!r}")
        base = self.device.split(":")[0]
        if base not in DEVICES or (":" in self.device and (base != "cuda" or not self.device.split(":")[1].isdigit())):
            raise ValueError(f"train.device must be one of {', '.join(DEVICES)} (or cuda:N), got {self.device!r}")
        if "/" in self.run_name or self.run_name in (".", ".."):
            raise ValueError(f"train.run_name must be a plain folder name, got {self.run_name!r}")
        if not self.runs_dir.strip():
            raise ValueError("train.runs_dir must name a folder (write . for the current one), got an empty value")
        if len(self.run_name) > MAX_RUN_NAME:  # file systems allow 255 bytes, and a moved-aside run adds .old-<time>
            raise ValueError(f"train.run_name must be at most {MAX_RUN_NAME} characters, got {len(self.run_name)}")

    @property
    def warmup(self) -> int:
        """The warmup the schedule uses: warmup_steps, shrunk to fit a run shorter than it (`--train.max_steps=3`)."""
        return min(self.warmup_steps, self.max_steps)


@dataclass(frozen=True)
class Config:
    name: str = "base"  # the preset it came from
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    @property
    def run_name(self) -> str:
        """`base`, `base-no-mask`, `base-no-scale`, ... unless train.run_name says otherwise."""
        if self.train.run_name:
            return self.train.run_name
        return self.name + ("" if self.model.causal else "-no-mask") + ("" if self.model.scaled else "-no-scale")

    @property
    def run_dir(self) -> Path:
        return Path(self.train.runs_dir) / self.run_name

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}


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


def field_types(section: str) -> dict[str, type]:
    return {f.name: f.type for f in dataclasses.fields(SECTIONS[section])}


def nearest_key(dotted: str) -> str | None:
    """The valid key a typo most likely meant: an abbreviation (learning_rate -> lr), else the closest spelling."""
    section, _, name = dotted.partition(".")
    valid = [f"{s}.{n}" for s in SECTIONS for n in field_types(s)]
    if section in SECTIONS:
        initials = "".join(part[:1] for part in name.split("_"))
        for field_name in field_types(section):
            if field_name == initials or field_name.replace("_", "") == name.replace("_", ""):
                return f"{section}.{field_name}"
        hint = difflib.get_close_matches(name, list(field_types(section)), n=1, cutoff=0.5)
        if hint:
            return f"{section}.{hint[0]}"
    hint = difflib.get_close_matches(dotted, valid, n=1, cutoff=0.5)
    return hint[0] if hint else None


def check_key(dotted: str) -> tuple[str, str]:
    """Split 'section.field' and make sure it exists, suggesting the nearest valid key if not."""
    section, _, name = dotted.partition(".")
    if section not in SECTIONS or name not in field_types(section):
        if section not in SECTIONS and not name:
            raise ConfigError(f"unknown section [{section}]; valid sections are {', '.join(SECTIONS)}")
        hint = nearest_key(dotted)
        valid = [f"{s}.{n}" for s in SECTIONS for n in field_types(s)]
        suggestion = f", did you mean {hint}?" if hint else f"; valid keys: {', '.join(valid)}"
        raise ConfigError(f"unknown key {dotted}{suggestion}")
    if dotted in FROM_TOKENIZER:
        raise ConfigError(f"{dotted} is set from the tokenizer; choose the tokenizer with data.tokenizer instead")
    return section, name


def convert(dotted: str, value, kind: type):
    """Turn a TOML value or a command-line string into the field's type, or explain why not."""
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


def parse_args(argv: list[str]) -> tuple[str, list[tuple[str, str]]]:
    """Return the config name and the (dotted key, string value) overrides, in order."""
    name, overrides, i = "base", [], 0
    while i < len(argv):
        arg = argv[i]
        flag, has_eq, inline = arg.partition("=")
        takes_value = flag == "--config" or (flag in SHORTHANDS and SHORTHANDS[flag][1] is None) or "." in flag
        if flag in SHORTHANDS and SHORTHANDS[flag][1] is not None:
            if has_eq:
                raise ConfigError(f"{flag} takes no value")
            overrides.append(SHORTHANDS[flag])
            i += 1
            continue
        if not flag.startswith("--") or not takes_value:
            shown = [*SHORTHANDS, "--config", "--section.field=VALUE"]
            raise ConfigError(f"unknown argument {arg!r}; valid arguments: {', '.join(shown)}")
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
        i += 1
    return name, overrides


def usage() -> str:
    """What a config-driven script accepts: the presets, the shorthands and every key with its default."""
    shorthands = [f"  {flag:<12} {dotted}" + ("=VALUE" if value is None else f"={value}") for flag, (dotted, value) in SHORTHANDS.items()]
    keys = [
        f"  --{s}.{f.name}={'' if f.default == '' else str(f.default).lower() if isinstance(f.default, bool) else f.default}"
        for s, cls in SECTIONS.items()
        for f in dataclasses.fields(cls)
        if f"{s}.{f.name}" not in FROM_TOKENIZER
    ]
    head = f"--config NAME|PATH: one of {', '.join(presets())} (default base), or a .toml file"
    return "\n".join([head, "shorthands:", *shorthands, "every key, with its default (a preset may change it):", *keys])


def load_config(argv: list[str]) -> Config:
    """Build the Config from `--config NAME|PATH` and the overrides in argv."""
    name, overrides = parse_args(argv)
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
            s, n = check_key(f"{section}.{key}")
            values[s][n] = convert(f"{s}.{n}", value, field_types(s)[n])
    for dotted, value in overrides:
        s, n = check_key(dotted)
        values[s][n] = convert(dotted, value, field_types(s)[n])
    try:
        sections = {s: cls(**values[s]) for s, cls in SECTIONS.items()}
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return Config(name=path.stem, **sections)
