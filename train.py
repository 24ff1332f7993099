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
from data.tokenizer import Tokenizer, TokenizerError
from model import GPT
from model.diagnostics import attention_summary, bits_per_byte, honest_loss, honest_positions, qk_grad_norm

EVAL_SEED = 2024  # eval batches come from their own generator: identical on every run
HONEST_POSITIONS = 8  # prefix positions scored per sequence for loss/val_honest
SAMPLE_TOKENS = 200  # length of the sample logged at every evaluation
HEATMAP_TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?"
HEATMAP_MAX_TOKENS = 48
CONSOLE_TAGS = ("loss/train", "loss/val", "loss/val_honest", "attn/entropy", "attn/saturated_frac", "attn/future_mass")


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
            shown = [(tag.split("/")[-1], metrics[tag]) for tag in CONSOLE_TAGS if tag in metrics]
            tqdm.write(f"step {step:5d} | " + " | ".join(f"{name} {value:.4g}" for name, value in shown))

    def log_text(self, step: int, tag: str, text: str) -> None:
        self.writer.add_text(tag, "\n".join("    " + line for line in text.splitlines()), step)  # indented: shown verbatim

    def log_figure(self, step: int, tag: str, figure) -> None:
        self.writer.add_figure(tag, figure, step)  # closes the figure

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


@dataclass
class EvalSet:
    """Everything an evaluation looks at, drawn once so that every evaluation sees the same data."""

    batches: dict[str, list[tuple[torch.Tensor, torch.Tensor]]]  # split -> fixed (x, y) batches
    honest: list[tuple[torch.Tensor, torch.Tensor, list[int]]]  # val batches and the positions scored honestly
    val_bytes: int  # UTF-8 bytes of the decoded val targets, for bits per byte
    heatmap_ids: list[int]  # the probe text drawn in the heatmaps
    heatmap_labels: list[str]
    prompt_ids: list[int]  # start of the logged samples


def make_eval_set(corpus, tokenizer: Tokenizer, cfg: Config) -> EvalSet:
    from inspect_attention import token_labels

    B, T = cfg.train.batch_size, cfg.model.block_size
    gen = torch.Generator().manual_seed(EVAL_SEED)
    batches = {split: [get_batch(getattr(corpus, split), B, T, gen) for _ in range(cfg.train.eval_batches)] for split in ("train", "val")}
    honest = [(x, y, honest_positions(T, HONEST_POSITIONS, gen)) for x, y in batches["val"][: cfg.train.honest_batches]]
    val_bytes = sum(len(tokenizer.decode(row.tolist()).encode("utf-8")) for _, y in batches["val"] for row in y)
    try:
        heatmap_ids = tokenizer.encode(HEATMAP_TEXT)[: min(T, HEATMAP_MAX_TOKENS)]
        prompt_ids = tokenizer.encode("\n")
    except TokenizerError:  # a corpus without these characters: use its own text
        heatmap_ids = corpus.val[: min(T, HEATMAP_MAX_TOKENS)].tolist()
        prompt_ids = corpus.val[:1].tolist()
    return EvalSet(batches, honest, val_bytes, heatmap_ids, token_labels(tokenizer, heatmap_ids), prompt_ids)


@torch.no_grad()
def evaluate(model: GPT, ev: EvalSet, runtime: Runtime, tokenizer: Tokenizer, logger: "RunLogger", step: int) -> dict[str, float]:
    """Losses, honest loss, attention statistics, heatmaps and a sample, all logged at `step`."""
    from inspect_attention import heatmap_figure

    device = runtime.device
    metrics = {f"loss/{split}": estimate_loss(model, batches, runtime) for split, batches in ev.batches.items()}
    n_val_tokens = sum(y.numel() for _, y in ev.batches["val"])
    metrics["loss/val_bpc"] = bits_per_byte(metrics["loss/val"], n_val_tokens, ev.val_bytes)
    model.eval()
    with runtime.autocast():
        pairs = [honest_loss(model, x.to(device), y.to(device), positions) for x, y, positions in ev.honest]
        metrics["loss/val_honest"] = sum(h for h, _ in pairs) / len(pairs)
        metrics["loss/leak_gap"] = metrics["loss/val_honest"] - sum(f for _, f in pairs) / len(pairs)
        metrics.update(attention_summary(model, ev.batches["val"][0][0].to(device)))
        heatmaps = model.attention_weights(torch.tensor([ev.heatmap_ids], device=device))
    flags = ("causal" if model.cfg.causal else "NO MASK") + ", " + ("scaled" if model.cfg.scaled else "NO SCALE")
    for layer, weights in enumerate(heatmaps):
        logger.log_figure(
            step, f"attn/heatmap/L{layer}", heatmap_figure(weights[0], ev.heatmap_labels, f"layer {layer} at step {step} ({flags})")
        )
    generator = torch.Generator(device=device).manual_seed(EVAL_SEED)
    prompt = torch.tensor([ev.prompt_ids], device=device)
    sample = tokenizer.decode(model.generate(prompt, SAMPLE_TOKENS, temperature=0.8, top_k=200, generator=generator)[0].tolist())
    logger.log_text(step, "samples", sample)
    model.train()
    logger.log(step, console=True, **metrics)
    return {**metrics, "sample": sample}


def main(cfg: Config) -> dict:
    runtime = setup_runtime(cfg.train)
    corpus = load_corpus(cfg.data)
    check_split_lengths(corpus, cfg.model.block_size)
    tokenizer = corpus.tokenizer
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=tokenizer.vocab_size))
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
    ev = make_eval_set(corpus, tokenizer, cfg)
    logger = RunLogger(run_dir)
    last: dict = {}

    def evaluate_and_save(step: int) -> None:
        last.update(evaluate(model, ev, runtime, tokenizer, logger, step))
        checkpoint = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "config": cfg.to_dict(),
            "step": step,
            "tokenizer": tokenizer.state(),
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
        log_now = (step + 1) % cfg.train.log_interval == 0 or step + 1 == cfg.train.max_steps
        qk_norm = qk_grad_norm(model) if log_now else None  # before clipping: what the softmax let through
        if cfg.train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        window_loss, window_steps = window_loss + loss.detach(), window_steps + 1
        if log_now:
            mean_loss = (window_loss / window_steps).item()  # the only sync with the device
            tok_s = tokens_per_second(window_steps * B * T, time.perf_counter() - window_start)
            logger.log(step + 1, **{"loss/train_step": mean_loss, "lr": lr, "perf/tokens_per_s": tok_s, "grad/qk_norm": qk_norm})
            bar.set_postfix(loss=f"{mean_loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s / 1e3:.1f}k")
            window_start, window_loss, window_steps = time.perf_counter(), 0.0, 0
    bar.close()
    evaluate_and_save(cfg.train.max_steps)
    logger.close()
    elapsed = time.perf_counter() - start
    summary = {**last, "wall_s": elapsed, "tokens_per_s": cfg.train.max_steps * B * T / elapsed}
    print(
        f"done in {elapsed:.1f}s: train {last['loss/train']:.4f}, val {last['loss/val']:.4f}, "
        f"honest {last['loss/val_honest']:.4f}; checkpoint {run_dir / 'ckpt.pt'}\nsample at the last step:\n{last['sample']}"
    )
    return summary


if __name__ == "__main__":
    try:
        main(load_config(sys.argv[1:]))
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
