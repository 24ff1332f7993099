"""DataConfig, TrainConfig and Config, checked in __post_init__: a bad value fails when the config
is built, not at step 3000."""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from data.synthetic import SOURCES, SYMBOLS
from data.tokenizer import TOKENIZERS
from model.ablations import name_suffix
from model.config import ModelConfig, check_choice, check_finite, check_positive, setting
from model.induction import INDUCTION_THRESHOLD, SHORTEST_CONTEXT

# torch seeds are 64-bit; room is left for the seed + rank and seed + i that runs derive
MAX_SEED = 2**63 - 1
MAX_RUN_NAME = 200  # file systems allow 255 bytes, and a moved-aside run adds .old-<time>
# the model fields a run from pretrained weights takes from its config
CHOSEN_WITH_WEIGHTS = ("block_size", "dropout", "attention")


def check_between(dotted: str, value, low, high, shown: str = "") -> None:
    if not low <= value <= high:
        raise ValueError(f"{dotted} must be between {low} and {shown or high}, got {value}")


@dataclass(frozen=True)
class DataConfig:
    path: str = setting("", "a text, .jsonl or .parquet file, or a folder; empty: Tiny Shakespeare")
    tokenizer: str = setting("gpt2", '"gpt2" (tiktoken BPE) or "char" (one id per character)')
    cache_dir: str = setting("", "downloads and prepared .bin files; empty: data/cache")
    text_field: str = setting("text", "the JSONL field or parquet column of the text")
    val_path: str = setting("", "a validation file or folder; empty: data.path's last 10%")
    workers: int = setting(0, "threads that encode the corpus; 0: one per core")
    source: str = setting(
        "text", '"text" (data.path) or "repeated-random": a recurring segment (docs/induction.md)'
    )
    symbols: int = setting(256, "repeated-random: distinct tokens")
    min_segment: int = setting(8, "repeated-random: shortest recurring segment, in tokens")
    max_segment: int = setting(32, "repeated-random: longest; two copies fit in a block")

    def __post_init__(self) -> None:
        check_choice("data.tokenizer", self.tokenizer, TOKENIZERS)
        check_choice("data.source", self.source, SOURCES)
        check_between("data.symbols", self.symbols, 2, len(SYMBOLS))
        longest = f"data.max_segment ({self.max_segment})"
        check_between("data.min_segment", self.min_segment, 1, self.max_segment, longest)
        if not self.text_field:
            raise ValueError("data.text_field must name a field, got an empty value")
        if self.workers < 0:
            raise ValueError(f"data.workers must be >= 0, got {self.workers}")


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = setting(32, "sequences per micro-batch, per process")
    grad_accum_steps: int = setting(1, "micro-batches per optimizer step")
    max_steps: int = setting(1000, "optimizer steps in the run")
    lr: float = setting(1e-3, "peak learning rate, after warmup")
    min_lr: float = setting(1e-4, "learning rate at the end of the cosine decay")
    warmup_steps: int = setting(100, "steps of linear warmup from 0 to lr")
    optimizer: str = setting(
        "adamw", '"adamw", or "muon": Muon for the blocks\' matrices, AdamW for the rest'
    )
    muon_dtype: str = setting(
        "auto", 'Muon\'s Newton-Schulz: "bfloat16", "float32", or "auto" (bfloat16 in hardware)'
    )
    weight_decay: float = setting(0.1, "AdamW decay, on matrices only")
    beta1: float = setting(0.9, "AdamW momentum")
    beta2: float = setting(0.99, "AdamW second-moment decay")
    grad_clip: float = setting(1.0, "max global gradient norm; 0 turns clipping off")
    eval_interval: int = setting(100, "steps between evaluations (and one at the end)")
    eval_batches: int = setting(20, "fixed batches per split in each evaluation")
    honest_batches: int = setting(4, "of those val batches, how many score prefix by prefix")
    probes: int = setting(20, "Probe_* measurements per run (and at the last step); 0: none")
    log_interval: int = setting(10, "steps between training-loss logs")
    seed: int = setting(1337, "one seed for init and the training batches")
    device: str = setting("auto", '"auto" picks cuda, then mps, then cpu')
    compile: str = setting("auto", 'torch.compile: "auto" (CUDA only), "true" or "false"')
    run_name: str = setting("", "folder under runs_dir; empty: named from config and flags")
    runs_dir: str = setting("runs", "where run folders go")
    resume: bool = setting(False, "continue runs_dir/run_name/ckpt.pt")
    init_from: str = setting(
        "", "GPT-2 weights to start from: gpt2, gpt2-medium, ... or a Hugging Face folder"
    )

    def __post_init__(self) -> None:
        check_finite(self, "train", ("lr", "min_lr", "weight_decay", "beta1", "beta2", "grad_clip"))
        check_between("train.seed", self.seed, 0, MAX_SEED, f"{MAX_SEED} (2**63 - 1)")
        counts = ("batch_size", "grad_accum_steps", "max_steps", "eval_interval", "eval_batches")
        check_positive(self, "train", (*counts, "honest_batches", "log_interval"))
        if not self.lr > 0:
            raise ValueError(f"train.lr must be positive, got {self.lr}")
        check_between("train.min_lr", self.min_lr, 0, self.lr, f"train.lr ({self.lr})")
        for name in ("warmup_steps", "weight_decay", "grad_clip", "probes"):
            if getattr(self, name) < 0:
                raise ValueError(f"train.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be in [0, 1), got {getattr(self, name)}")
        check_choice("train.optimizer", self.optimizer, ("adamw", "muon"))
        check_choice("train.muon_dtype", self.muon_dtype, ("auto", "bfloat16", "float32"))
        check_choice("train.compile", self.compile, ("auto", "true", "false"))
        base, _, index = self.device.partition(":")
        if not (base == "cuda" and index.isdigit()):  # cuda:N names one GPU
            check_choice(
                "train.device", self.device, ("auto", "cpu", "cuda", "mps"), " (or cuda:N)"
            )
        if "/" in self.run_name or self.run_name in (".", ".."):
            raise ValueError(f"train.run_name must be a plain folder name, got {self.run_name!r}")
        if not self.runs_dir.strip():
            raise ValueError("train.runs_dir must name a folder (write . for the current one)")
        if len(self.run_name) > MAX_RUN_NAME:
            raise ValueError(
                f"train.run_name must be at most {MAX_RUN_NAME} characters, got "
                f"{len(self.run_name)}"
            )

    @property
    def warmup(self) -> int:
        return min(self.warmup_steps, self.max_steps)

    def probes_at(self, step: int) -> bool:
        return self.probes > 0 and (
            step % max(1, self.max_steps // self.probes) == 0 or step == self.max_steps
        )


@dataclass(frozen=True)
class Config:
    name: str = "base"  # the preset
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    shape: str = ""  # "-n_layer1": the sizes the command line changed from the preset's

    def __post_init__(self) -> None:
        if self.data.source == "text":
            return
        block_size, min_segment = self.model.block_size, self.data.min_segment
        if block_size < SHORTEST_CONTEXT:
            raise ValueError(
                f"model.block_size must be at least {SHORTEST_CONTEXT} to measure induction heads, "
                f"got {block_size}: even attention puts {1 / block_size:.2f} on every target, over "
                f"half the {INDUCTION_THRESHOLD} that names one"
            )
        if min_segment < 2:
            raise ValueError(
                "data.min_segment must be at least 2 for the induction measurements, got "
                f"{min_segment} (loss/repeated would be NaN)"
            )
        if 2 * self.data.max_segment > block_size + 1:
            raise ValueError(
                f"data.max_segment ({self.data.max_segment}) must be at most "
                f"(model.block_size + 1) // 2 ({(block_size + 1) // 2}): a block holds the segment "
                "and its copy"
            )

    @property
    def run_name(self) -> str:
        """`base-no-mask-n_layer6`: preset, ablations, changed sizes; or train.run_name."""
        return self.train.run_name or self.name + name_suffix(self.model) + self.shape

    @property
    def run_dir(self) -> Path:
        return Path(self.train.runs_dir) / self.run_name

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig}
SECTION_MEANINGS = {
    "model": "the network: its sizes, the switches that break attention, those that mend it, and "
    "attention as shipped models have it",
    "data": "the text and how it becomes token ids",
    "train": "the run: optimizer, schedule, evaluations, device, where results go",
}
KEYS = {
    f"{section}.{f.name}": f for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)
}


def config_differences(
    saved: dict, wanted: dict, ignore: tuple[str, ...] = (), prefix: str = ""
) -> list[str]:
    """["model.n_layer 2 vs 4", ...] between two `to_dict()`s; a key the record lacks shows None."""
    found = []
    for key, value in wanted.items():
        if key in ignore:
            continue
        if isinstance(value, dict):
            found += config_differences(saved.get(key) or {}, value, ignore, f"{prefix}{key}.")
        elif saved.get(key) != value:
            found.append(f"{prefix}{key} {saved.get(key)!r} vs {value!r}")
    return found
