"""Train the GPT: python train.py --config base [--no-mask] [--no-scale] [--section.field=VALUE ...]

Everything of a run lives in runs/<run-name>/: TensorBoard events, metrics.jsonl, config.json
and ckpt.pt. `main(cfg)` reads like an outline; the helpers above it are small and pure.
"""

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from configs import Config, ConfigError, TrainConfig, load_config
from data.batches import get_batch
from data.corpus import DataError, check_split_lengths, load_corpus, write_atomically
from model import GPT

EVAL_SEED = 2024  # eval batches come from their own generator: identical on every run


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # bf16 on CUDA, None elsewhere
    why: str  # how the device was chosen, for the start-up line

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)


def setup_runtime(train_cfg: TrainConfig) -> Runtime:
    """Resolve train.device ("auto": CUDA, then Apple MPS, then CPU) and the backend switches."""
    has_cuda, has_mps = torch.cuda.is_available(), torch.backends.mps.is_available()
    wanted = train_cfg.device
    if wanted == "auto":
        wanted = "cuda" if has_cuda else "mps" if has_mps else "cpu"
        why = "auto: " + ("CUDA found" if has_cuda else "Apple MPS found" if has_mps else "no CUDA or MPS found")
    else:
        why = "from train.device"
    if wanted.startswith("cuda") and not has_cuda:
        raise ConfigError(f"--device {wanted} asked for, but this machine has no CUDA; use --device auto or --device cpu")
    if wanted == "mps" and not has_mps:
        raise ConfigError("--device mps asked for, but Apple MPS is not available here; use --device auto or --device cpu")
    device = torch.device(wanted)
    autocast_dtype = None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        autocast_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    return Runtime(device, autocast_dtype, why)


def lr_at(step: int, train_cfg: TrainConfig) -> float:
    """Linear warmup to lr over warmup_steps, then cosine decay to min_lr at the last step."""
    if step < train_cfg.warmup_steps:
        return train_cfg.lr * (step + 1) / train_cfg.warmup_steps
    decay_steps = max(1, train_cfg.max_steps - 1 - train_cfg.warmup_steps)
    progress = min(1.0, (step - train_cfg.warmup_steps) / decay_steps)
    return train_cfg.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (train_cfg.lr - train_cfg.min_lr)


def make_optimizer(model: GPT, train_cfg: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices (and the embedding) only: biases and LayerNorm gains keep their scale."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    betas = (train_cfg.beta1, train_cfg.beta2)
    return torch.optim.AdamW(groups, lr=train_cfg.lr, betas=betas, fused=device.type == "cuda")


@torch.no_grad()
def estimate_loss(model: GPT, batches: list, runtime: Runtime) -> float:
    """Mean loss over a fixed list of (x, y) batches, in eval() mode (no dropout)."""
    was_training = model.training
    model.eval()
    total = 0.0
    for x, y in batches:
        with runtime.autocast():
            _, loss = model(x.to(runtime.device), y.to(runtime.device))
        total += loss.item()
    model.train(was_training)
    return total / len(batches)


def tokens_per_second(n_tokens: int, seconds: float) -> float:
    return n_tokens / max(seconds, 1e-9)


class RunLogger:
    """The one place metrics go: TensorBoard, runs/<name>/metrics.jsonl, and the console."""

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir))
        self.jsonl = open(run_dir / "metrics.jsonl", "a", encoding="utf-8")

    def log(self, step: int, console: bool = False, **metrics: float) -> None:
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)
        self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self.jsonl.flush()
        if console:
            tqdm.write(f"step {step:5d} | " + " | ".join(f"{tag} {value:.4g}" for tag, value in metrics.items()))

    def close(self) -> None:
        self.writer.close()
        self.jsonl.close()


def start_run_dir(run_dir: Path) -> str | None:
    """Make an empty run folder. A previous run there is moved aside, never mixed in or deleted."""
    moved = None
    if run_dir.exists() and any(run_dir.iterdir()):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(run_dir.stat().st_mtime))
        target = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
        n = 1
        while target.exists():
            target, n = run_dir.with_name(f"{run_dir.name}.old-{stamp}-{n}"), n + 1
        run_dir.rename(target)
        moved = str(target)
    run_dir.mkdir(parents=True, exist_ok=True)
    return moved


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the old checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(cfg: Config) -> dict:
    runtime = setup_runtime(cfg.train)
    corpus = load_corpus(cfg.data)
    check_split_lengths(corpus, cfg.model.block_size)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=corpus.tokenizer.vocab_size))
    run_dir = cfg.run_dir
    moved = start_run_dir(run_dir)
    write_atomically(run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2).encode())
    print(f"device: {runtime.device} ({runtime.why}); run folder: {run_dir}" + (f" (previous run moved to {moved})" if moved else ""))
    print(f"config {cfg.name}: " + " | ".join(f"{s}: {getattr(cfg, s)}" for s in ("model", "data", "train")))

    torch.manual_seed(cfg.train.seed)
    model = GPT(cfg.model).to(runtime.device)
    optimizer = make_optimizer(model, cfg.train, runtime.device)
    print(
        f"model: {model.num_params() / 1e6:.2f}M parameters; corpus {corpus.source}: {len(corpus.train):,} train / {len(corpus.val):,} val tokens"
    )

    B, T = cfg.train.batch_size, cfg.model.block_size
    train_gen = torch.Generator().manual_seed(cfg.train.seed)
    eval_gen = torch.Generator().manual_seed(EVAL_SEED)
    eval_sets = {
        split: [get_batch(getattr(corpus, split), B, T, eval_gen) for _ in range(cfg.train.eval_batches)] for split in ("train", "val")
    }
    logger = RunLogger(run_dir)
    last: dict[str, float] = {}

    def evaluate_and_save(step: int) -> None:
        last.update({f"loss/{split}": estimate_loss(model, batches, runtime) for split, batches in eval_sets.items()})
        logger.log(step, console=True, **last)
        checkpoint = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "config": cfg.to_dict(),
            "step": step,
            "tokenizer": corpus.tokenizer.state(),
            "val_loss": last["loss/val"],
        }
        save_checkpoint(run_dir / "ckpt.pt", checkpoint)

    start = time.perf_counter()
    window_start, window_loss, window_steps = time.perf_counter(), 0.0, 0
    bar = tqdm(range(cfg.train.max_steps), desc=cfg.run_name, dynamic_ncols=True)
    for step in bar:
        if step % cfg.train.eval_interval == 0:
            evaluate_and_save(step)
            window_start = time.perf_counter()  # evaluation time is not training throughput
        lr = lr_at(step, cfg.train)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(corpus.train, B, T, train_gen)
        with runtime.autocast():
            _, loss = model(x.to(runtime.device), y.to(runtime.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        window_loss, window_steps = window_loss + loss.detach(), window_steps + 1
        if (step + 1) % cfg.train.log_interval == 0 or step + 1 == cfg.train.max_steps:
            mean_loss = (window_loss / window_steps).item()  # the only sync with the device
            tok_s = tokens_per_second(window_steps * B * T, time.perf_counter() - window_start)
            logger.log(step + 1, **{"loss/train_step": mean_loss, "lr": lr, "perf/tokens_per_s": tok_s})
            bar.set_postfix(loss=f"{mean_loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s / 1e3:.1f}k")
            window_start, window_loss, window_steps = time.perf_counter(), 0.0, 0
    bar.close()
    evaluate_and_save(cfg.train.max_steps)
    logger.close()
    elapsed = time.perf_counter() - start
    summary = {**last, "wall_s": elapsed, "tokens_per_s": cfg.train.max_steps * B * T / elapsed}
    print(f"done in {elapsed:.1f}s: train {last['loss/train']:.4f}, val {last['loss/val']:.4f}; checkpoint {run_dir / 'ckpt.pt'}")
    return summary


if __name__ == "__main__":
    try:
        main(load_config(sys.argv[1:]))
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
