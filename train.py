"""Train the GPT: python train.py --config base [--no-mask] [--no-scale] [--section.field=VALUE ...]

Everything of a run lives in runs/<run-name>/: TensorBoard events, metrics.jsonl, config.json,
ckpt.pt (the latest state, for --resume) and best.pt (the best val loss so far). Ctrl-C or
SIGTERM stops after the current step and saves a checkpoint. Under torchrun the same file trains
with DistributedDataParallel. `main(cfg)` reads like an outline; the helpers above it are small.
"""

import contextlib
import ctypes
import dataclasses
import json
import math
import os
import platform
import signal
import sys
import threading
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
from model.checkpoint import CheckpointError, read_checkpoint, save_checkpoint
from model.diagnostics import attention_summary, bits_per_byte, flags_label, honest_loss, honest_positions, qk_grad_norm

EVAL_SEED = 2024  # eval batches come from their own generator: identical on every run
HONEST_POSITIONS = 8  # prefix positions scored per sequence for loss/val_honest
SAMPLE_TOKENS = 200  # length of the sample logged at every evaluation
HEATMAP_TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?"
HEATMAP_MAX_TOKENS = 32
CONSOLE_TAGS = ("loss/train", "loss/val", "loss/val_honest", "attn/entropy", "attn/saturated_frac", "attn/future_mass")


class TrainingError(Exception):
    """Training cannot go on (a non-finite loss or gradient); the message names the step and the last checkpoint."""


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None  # bf16 on CUDA, None elsewhere
    why: str  # how the device was chosen, for the start-up line
    rank: int = 0  # this process's index under torchrun
    world_size: int = 1  # number of processes
    use_compile: bool = False  # torch.compile the training model

    @property
    def is_main(self) -> bool:
        return self.rank == 0  # only rank 0 writes logs and checkpoints

    def autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)


def keep_freed_memory(threshold: int = 2**30) -> bool:
    """Make glibc's malloc keep freed blocks up to `threshold` bytes for reuse; True if it took effect.

    On a CPU every tensor comes from malloc, and by default glibc hands big freed blocks back to
    the kernel, so each training step faults its activations in again, page by page, zeroed. Here
    that was thousands of page faults per char step and 205,000 per base step (its logits are
    206 MB): 474 ms per base step instead of 264. Raising the mmap and trim thresholds lets the
    next step reuse the memory of the last. Other C libraries (macOS, musl) are left alone.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the C library this process already runs on
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # from glibc's malloc.h
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold) and libc.mallopt(M_TRIM_THRESHOLD, threshold))


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
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world_size > 1:  # launched by torchrun: one process per device
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if wanted.startswith("cuda"):
            wanted = f"cuda:{local_rank}"
            torch.cuda.set_device(local_rank)
        if not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend="nccl" if wanted.startswith("cuda") else "gloo")
        why += f"; rank {rank} of {world_size} ({torch.distributed.get_backend()})"
    device = torch.device(wanted)
    if device.type == "cpu":
        keep_freed_memory()
        # Round float32 values below 1.2e-38 (denormals) to zero: a saturated softmax, as in
        # --no-scale, fills attention's backward with them, and the CPU computes them 3 to 4x
        # slower. Threads inherit the setting when created, so it is set before torch's thread
        # pool starts, with the first parallel op; later, it would reach this thread only.
        torch.set_flush_denormal(True)
    autocast_dtype = None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        autocast_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else None
    # torch.compile pays on a GPU; on a CPU it took 22 s here and made the char step no faster.
    use_compile = train_cfg.compile == "true" or (train_cfg.compile == "auto" and device.type == "cuda")
    return Runtime(device, autocast_dtype, why, rank, world_size, use_compile)


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
    return torch.optim.AdamW(groups, lr=train_cfg.lr, betas=betas, fused=device.type in ("cpu", "cuda"))  # one kernel per step


@torch.no_grad()
def estimate_loss(model: GPT, batches: list, runtime: Runtime) -> float:
    """Mean loss over a fixed list of (x, y) batches, in eval() mode (no dropout).

    Under torchrun each rank scores every world_size-th batch and the sums are added up.
    """
    was_training = model.training
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=runtime.device)  # (sum of losses, count)
    for x, y in batches[runtime.rank :: runtime.world_size]:
        with runtime.autocast():
            _, loss = model(x.to(runtime.device), y.to(runtime.device))
        total += torch.stack([loss.double(), torch.ones((), dtype=torch.float64, device=runtime.device)])
    if runtime.world_size > 1:
        torch.distributed.all_reduce(total)
    model.train(was_training)
    return (total[0] / total[1]).item()


def tokens_per_second(n_tokens: int, seconds: float) -> float:
    return n_tokens / max(seconds, 1e-9)


def parse_step(line: str) -> int | None:
    """The step of a metrics.jsonl line, or None for a line torn by a killed process."""
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


class RunLogger:
    """The one place metrics go: TensorBoard, runs/<name>/metrics.jsonl, and the console."""

    def __init__(self, run_dir: Path, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        path = run_dir / "metrics.jsonl"
        if resume_step is not None:  # drop what an interrupted run logged after its checkpoint
            steps = [(line, parse_step(line)) for line in path.read_text().splitlines()]
            kept = [line for line, step in steps if step is not None and step <= resume_step]
            write_atomically(path, "".join(line + "\n" for line in kept).encode())
        purge = None if resume_step is None else resume_step + 1  # TensorBoard hides later events of the old run
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge)
        self.jsonl = open(path, "a", encoding="utf-8")
        self.heatmap_grids = []  # one inspect_attention.HeatmapGrid per layer, laid out at the first evaluation

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

    def log_heatmaps(self, step: int, weights_per_layer: list[torch.Tensor], labels: list[str], flags: str) -> None:
        """One attn/heatmap/L{layer} image per layer from weights (1, H, T, T); every evaluation refills the same grids."""
        from inspect_attention import HeatmapGrid

        if not self.heatmap_grids:
            self.heatmap_grids = [HeatmapGrid(weights.shape[1], labels) for weights in weights_per_layer]
        for layer, (weights, grid) in enumerate(zip(weights_per_layer, self.heatmap_grids, strict=True)):
            picture = grid.pixels(weights[0], f"layer {layer} at step {step} ({flags})")  # (height, width, 3)
            self.writer.add_image(f"attn/heatmap/L{layer}", picture, step, dataformats="HWC")

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


class StopFlag:
    """Ctrl-C and SIGTERM set a flag instead of raising, so training stops between steps, never mid-update.

    A second Ctrl-C while the checkpoint is saved changes nothing: the save goes on, and it is atomic anyway.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.signum: int | None = None
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            self.previous = {sig: signal.signal(sig, self.handle) for sig in self.SIGNALS}
        return self

    def handle(self, signum, frame) -> None:
        if self.signum is None:
            tqdm.write(f"\n{signal.Signals(signum).name}: stopping after this step and saving a checkpoint...")
        self.signum = signum

    def __exit__(self, *exc) -> None:
        if self.signum is not None:
            return  # a stop was asked for: the run is ending, so later signals stay harmless until exit
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def check_resumable(checkpoint: dict, cfg: Config, source_sha256: str, path: Path) -> None:
    """A checkpoint can continue only the run it came from: same model, same tokenizer, same text."""
    saved = checkpoint["config"].get("model", {}) if isinstance(checkpoint.get("config"), dict) else {}
    wanted = dataclasses.asdict(cfg.model)
    diff = [f"{k} {saved.get(k)!r} vs {v!r}" for k, v in wanted.items() if saved.get(k) != v and k != "attention"]
    if diff:
        raise CheckpointError(
            f"{path} was trained with another model config ({'; '.join(diff)}); resume with the run's own flags, or start a new run"
        )
    if checkpoint.get("source_sha256") != source_sha256:
        raise CheckpointError(f"{path} was trained on another text; resume with the same --data-file, or start a new run")
    if not all(k in checkpoint for k in ("optimizer", "train_rng", "torch_rng")):
        raise CheckpointError(f"{path} holds weights only (no optimizer or sampler state), so it cannot be resumed")
    if checkpoint["step"] >= cfg.train.max_steps:
        raise CheckpointError(f"{path} already finished at step {checkpoint['step']}; raise --train.max_steps to train further")


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
def evaluate(
    model: GPT, ev: EvalSet, runtime: Runtime, tokenizer: Tokenizer, logger: "RunLogger", step: int, started: float
) -> dict[str, float]:
    """Losses, honest loss, attention statistics, heatmaps and a sample, all logged at `step`."""
    device = runtime.device
    metrics = {f"loss/{split}": estimate_loss(model, batches, runtime) for split, batches in ev.batches.items()}
    if not runtime.is_main:
        return metrics  # the other ranks only help with the losses
    n_val_tokens = sum(y.numel() for _, y in ev.batches["val"])
    metrics["loss/val_bpc"] = bits_per_byte(metrics["loss/val"], n_val_tokens, ev.val_bytes)
    model.eval()
    with runtime.autocast():
        pairs = [honest_loss(model, x.to(device), y.to(device), positions) for x, y, positions in ev.honest]
        metrics["loss/val_honest"] = sum(h for h, _ in pairs) / len(pairs)
        metrics["loss/leak_gap"] = metrics["loss/val_honest"] - sum(f for _, f in pairs) / len(pairs)
        metrics.update(attention_summary(model, ev.batches["val"][0][0].to(device)))
        heatmaps = model.attention_weights(torch.tensor([ev.heatmap_ids], device=device))
    logger.log_heatmaps(step, heatmaps, ev.heatmap_labels, flags_label(model.cfg))
    generator = torch.Generator(device=device).manual_seed(EVAL_SEED)
    prompt = torch.tensor([ev.prompt_ids], device=device)
    sample = tokenizer.decode(model.generate(prompt, SAMPLE_TOKENS, temperature=0.8, top_k=200, generator=generator)[0].tolist())
    logger.log_text(step, "samples", sample)
    model.train()
    metrics["perf/elapsed_s"] = time.perf_counter() - started  # wall time of this process so far, evaluations included
    logger.log(step, console=True, **metrics)
    return {**metrics, "sample": sample}


def draw_micro_batches(ids, cfg: Config, runtime: Runtime, generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's micro-batches for one optimizer step.

    Every rank draws the whole global batch (batch_size x grad_accum_steps x world_size windows)
    from an identically seeded generator and keeps its own chunks, so a global step sees the same
    tokens whether it is split over 2 ranks x 1 micro-step or 1 rank x 2 micro-steps.
    """
    B, A = cfg.train.batch_size, cfg.train.grad_accum_steps
    x, y = get_batch(ids, B * A * runtime.world_size, cfg.model.block_size, generator)  # (B*A*W, T)
    first = runtime.rank * A
    return [(x[(first + m) * B : (first + m + 1) * B], y[(first + m) * B : (first + m + 1) * B]) for m in range(A)]


def train_step(model, micro_batches: list, runtime: Runtime, grad_clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward and backward over the micro-batches, then clip; returns (mean loss, gradient norm) as tensors.

    Gradients add up over micro-batches; under DDP they are averaged across ranks on the last one only.
    """
    total = torch.zeros((), device=runtime.device)
    for m, (x, y) in enumerate(micro_batches):
        last = m == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last or runtime.world_size == 1 else model.no_sync()
        with sync:
            with runtime.autocast():
                _, loss = model(x.to(runtime.device, non_blocking=True), y.to(runtime.device, non_blocking=True))
            (loss / len(micro_batches)).backward()
        total += loss.detach() / len(micro_batches)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip if grad_clip > 0 else math.inf)
    return total, grad_norm


def mean_over_ranks(value: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    if runtime.world_size > 1:
        value = value.clone()
        torch.distributed.all_reduce(value)
        value /= runtime.world_size
    return value


def main(cfg: Config) -> dict:
    runtime = setup_runtime(cfg.train)
    say = print if runtime.is_main else (lambda *args, **kwargs: None)
    if runtime.is_main:  # one process prepares the .bin files; the others then read them
        corpus = load_corpus(cfg.data)
    if runtime.world_size > 1:
        torch.distributed.barrier()
    if not runtime.is_main:
        corpus = load_corpus(cfg.data)
    check_split_lengths(corpus, cfg.model.block_size)
    tokenizer = corpus.tokenizer
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=tokenizer.vocab_size))
    run_dir, resume = cfg.run_dir, cfg.train.resume
    if resume and not (run_dir / "ckpt.pt").is_file():
        raise CheckpointError(
            f"nothing to resume: no checkpoint at {run_dir / 'ckpt.pt'}; check --run-name and --runs-dir, or start afresh without --resume"
        )
    checkpoint = read_checkpoint(run_dir / "ckpt.pt") if resume else None
    if checkpoint is not None:
        check_resumable(checkpoint, cfg, corpus.source_sha256, run_dir / "ckpt.pt")
    if runtime.is_main:
        moved = None if resume else start_run_dir(run_dir)
        write_atomically(run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2).encode())
        say(f"device: {runtime.device} ({runtime.why}); run folder: {run_dir}" + (f" (previous run moved to {moved})" if moved else ""))
        say(f"config {cfg.name}: " + " | ".join(f"{s}: {getattr(cfg, s)}" for s in ("model", "data", "train")))

    torch.manual_seed(cfg.train.seed + runtime.rank)  # same init everywhere (DDP broadcasts rank 0's), own dropout
    model = GPT(cfg.model).to(runtime.device)
    optimizer = make_optimizer(model, cfg.train, runtime.device)
    train_gen = torch.Generator().manual_seed(cfg.train.seed)
    start_step, evaluated, best_val, window = 0, False, math.inf, (0.0, 0)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        train_gen.set_state(checkpoint["train_rng"])
        rng_states = checkpoint["torch_rng"]
        rng_states = [rng_states] if isinstance(rng_states, torch.Tensor) else rng_states  # one process's state
        if len(rng_states) == runtime.world_size:
            torch.set_rng_state(rng_states[runtime.rank])
        else:
            say(
                f"note: the checkpoint comes from {len(rng_states)} processes, this run has {runtime.world_size}; dropout draws new random masks"
            )
        start_step, evaluated = checkpoint["step"], checkpoint.get("evaluated", False)
        best_val, window = checkpoint.get("best_val", math.inf), tuple(checkpoint.get("window", (0.0, 0)))
        say(f"resuming {run_dir} from step {start_step}")
    ddp_model = torch.nn.parallel.DistributedDataParallel(model) if runtime.world_size > 1 else model
    if runtime.use_compile:
        ddp_model = torch.compile(ddp_model)  # training steps only; evaluation runs the plain model
    tokens_per_step = cfg.train.batch_size * cfg.train.grad_accum_steps * runtime.world_size * cfg.model.block_size
    say(
        f"model: {model.num_params() / 1e6:.2f}M parameters; corpus {corpus.source}: {len(corpus.train):,} train / "
        f"{len(corpus.val):,} val tokens; {tokens_per_step:,} tokens per step"
    )

    ev = make_eval_set(corpus, tokenizer, cfg)
    logger = RunLogger(run_dir, start_step if resume else None) if runtime.is_main else None
    last: dict = {} if checkpoint is None else {"loss/val": checkpoint.get("val_loss")}  # the latest evaluation

    last_eval_step = start_step if evaluated else None

    def save(step: int) -> None:
        nonlocal best_val
        rng_states = [torch.get_rng_state()]  # dropout randomness differs per rank: keep each rank's
        if runtime.world_size > 1:
            rng_states = [None] * runtime.world_size
            torch.distributed.all_gather_object(rng_states, torch.get_rng_state())
        if not runtime.is_main:
            return
        was_evaluated = last_eval_step == step
        payload = {
            "model": model.state_dict(),
            "config": cfg.to_dict(),
            "step": step,
            "tokenizer": tokenizer.state(),
            "val_loss": last.get("loss/val"),
            "source_sha256": corpus.source_sha256,
        }
        if was_evaluated and last.get("loss/val") is not None and last["loss/val"] < best_val:
            best_val = last["loss/val"]
            save_checkpoint(run_dir / "best.pt", payload)  # weights for sampling, no optimizer state
        resume_state = {
            "optimizer": optimizer.state_dict(),
            "train_rng": train_gen.get_state(),
            "torch_rng": rng_states,
            "evaluated": was_evaluated,
            "best_val": best_val,
            "window": [float(window_loss), window_steps],
        }
        save_checkpoint(run_dir / "ckpt.pt", {**payload, **resume_state})

    start = time.perf_counter()
    window_start, (window_loss, window_steps) = time.perf_counter(), window
    stopped = None
    bar = tqdm(
        range(start_step, cfg.train.max_steps),
        desc=cfg.run_name,
        dynamic_ncols=True,
        disable=not runtime.is_main,
        initial=start_step,
        total=cfg.train.max_steps,
    )
    with StopFlag() as stop:
        for step in bar:
            if step % cfg.train.eval_interval == 0 and last_eval_step != step:
                last.update(evaluate(model, ev, runtime, tokenizer, logger, step, start))
                last_eval_step = step
                save(step)
                window_start = time.perf_counter()  # evaluation time is not training throughput
            if mean_over_ranks(torch.tensor(float(stop.signum or 0)), runtime).item() > 0:
                stopped = step
                break
            lr = lr_at(step, cfg.train)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad(set_to_none=True)
            loss, grad_norm = train_step(ddp_model, draw_micro_batches(corpus.train, cfg, runtime, train_gen), runtime, cfg.train.grad_clip)
            if not torch.isfinite(loss + grad_norm):  # one sync per step; the optimizer has not touched the weights
                bad = "loss" if not torch.isfinite(loss) else "gradient"
                raise TrainingError(
                    f"non-finite {bad} at step {step + 1}; stopped before the update. The last good checkpoint, "
                    f"{run_dir / 'ckpt.pt'}, is untouched; try a lower --train.lr or --train.grad_clip"
                )
            log_now = (step + 1) % cfg.train.log_interval == 0 or step + 1 == cfg.train.max_steps
            qk_norm = qk_grad_norm(model) if log_now else None  # before the update: what the softmax let through
            optimizer.step()
            window_loss, window_steps = window_loss + loss.detach(), window_steps + 1
            if log_now:
                mean_loss = mean_over_ranks(window_loss / window_steps, runtime).item()
                tok_s = tokens_per_second(window_steps * tokens_per_step, time.perf_counter() - window_start)
                if runtime.is_main:
                    logger.log(step + 1, **{"loss/train_step": mean_loss, "lr": lr, "perf/tokens_per_s": tok_s, "grad/qk_norm": qk_norm})
                    bar.set_postfix(loss=f"{mean_loss:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s / 1e3:.1f}k")
                window_start, window_loss, window_steps = time.perf_counter(), 0.0, 0
        bar.close()
        if stopped is None:
            last.update(evaluate(model, ev, runtime, tokenizer, logger, cfg.train.max_steps, start))
            last_eval_step = cfg.train.max_steps
        save(stopped if stopped is not None else cfg.train.max_steps)
        if logger is not None:
            logger.close()
        elapsed = time.perf_counter() - start
        steps_done = (stopped if stopped is not None else cfg.train.max_steps) - start_step
        summary = {
            **last,
            "wall_s": elapsed,
            "tokens_per_s": steps_done * tokens_per_step / elapsed,
            "stopped_at": stopped,
            "signal": stop.signum,
        }
        if stopped is not None:
            say(f"stopped at step {stopped}; checkpoint saved to {run_dir / 'ckpt.pt'}. Resume with the same command plus --resume")
        elif runtime.is_main:
            say(
                f"done in {elapsed:.1f}s: train {last['loss/train']:.4f}, val {last['loss/val']:.4f}, honest {last['loss/val_honest']:.4f}; "
                f"checkpoints {run_dir / 'ckpt.pt'} (latest), {run_dir / 'best.pt'} (best val)\nsample at the last step:\n{last['sample']}"
            )
    return summary


USER_ERRORS = (ConfigError, DataError, CheckpointError, TokenizerError)  # mistakes in what was typed: exit code 2


def run(argv: list[str]) -> int:
    """The command line: train, and turn every expected failure into one line and an exit code."""
    try:
        summary = main(load_config(argv))
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted before training started; nothing was saved", file=sys.stderr)
        return 130
    finally:
        for sig in StopFlag.SIGNALS:  # shutting down: a late Ctrl-C must not print a traceback
            signal.signal(sig, signal.SIG_IGN)
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 128 + summary["signal"] if summary["signal"] else 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
