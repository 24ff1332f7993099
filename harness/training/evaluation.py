"""An evaluation: losses, the honest loss, attention statistics, heatmaps, a sample. Its batches
come from their own generator: every run sees the same ones, and training's never shift."""

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from configs import Config
from data.batches import draw_batch
from data.tokenizer import Tokenizer, TokenizerError, token_labels
from harness.training.budget import (
    EVAL_WARNING_S,
    HONEST_BUDGET_STEPS,
    cap_prefix_work,
    duration,
    forward_flops,
    honest_flops,
    step_flops,
)
from harness.training.runtime import Runtime
from model import GPT
from model.induction import induction_summary
from model.measurements import (
    attention_summary,
    bits_per_byte,
    honest_loss,
    honest_positions,
    leak_of,
    order_use,
)

EVAL_SEED = 2024
HONEST_POSITIONS = 8  # a sequence's, for loss/val_honest
SAMPLE_TOKENS = 200
PROBE_TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?"
HEATMAP_MAX_TOKENS = 32
# (T, T) weights a head at most, in a pass over eval rows (a stop waits ~1 s) and in the statistics
ROWS_WEIGHTS = 2**24
STATS_WEIGHTS = 2**20


@dataclass
class EvalSet:
    batches: dict[str, list[tuple[torch.Tensor, torch.Tensor]]]
    honest: list[tuple[torch.Tensor, torch.Tensor, list[int]]]  # val batches, positions scored
    val_bytes: int  # of the val targets, for bits per byte
    heatmap_ids: list[int]
    heatmap_labels: list[str]
    prompt_ids: list[int]
    induction: bool

    @property
    def positions(self) -> list[list[int]]:
        return [p for _, _, p in self.honest]

    @property
    def scored_positions(self) -> int:
        return sum(map(len, self.positions))

    def prefix_passes(self, causal: bool) -> int:
        """A causal model's honest loss is read off the forced pass."""
        return 0 if causal else self.scored_positions

    @property
    def val_tokens(self) -> int:
        return sum(y.numel() for _, y in self.batches["val"])


@dataclass
class Evaluation:
    metrics: dict[str, float]
    heatmaps: list[torch.Tensor] = field(default_factory=list)  # (1, H, T, T) per layer
    heatmap_labels: list[str] = field(default_factory=list)
    sample: str = ""
    sample_tokens: int = 0


def make_eval_set(corpus, tokenizer: Tokenizer, cfg: Config) -> EvalSet:
    B, T = cfg.train.batch_size, cfg.model.block_size
    gen = torch.Generator().manual_seed(EVAL_SEED)
    batches = {
        split: [
            draw_batch(getattr(corpus, split), B, T, gen) for _ in range(cfg.train.eval_batches)
        ]
        for split in ("train", "val")
    }
    positions = [
        honest_positions(T, HONEST_POSITIONS, gen)
        for _ in batches["val"][: cfg.train.honest_batches]
    ]
    if not cfg.model.causal:
        positions = cap_prefix_work(positions, cfg)
    honest = [(x, y, p) for (x, y), p in zip(batches["val"], positions, strict=False)]
    val_bytes = sum(
        len(tokenizer.decode(row.tolist()).encode()) for _, y in batches["val"] for row in y
    )
    try:
        heatmap_ids = tokenizer.encode(PROBE_TEXT)[: min(T, HEATMAP_MAX_TOKENS)]
        prompt_ids = tokenizer.encode("\n")
    except TokenizerError:  # a corpus without these characters, or synthetic
        heatmap_ids = corpus.probe_ids(min(T, HEATMAP_MAX_TOKENS))
        prompt_ids = heatmap_ids[:1]
    labels = token_labels(tokenizer, heatmap_ids)
    # synthetic segments recur by design; in text, induction scores mean nothing
    induction = cfg.data.source != "text"
    return EvalSet(batches, honest, val_bytes, heatmap_ids, labels, prompt_ids, induction)


def evaluation_flops(cfg: Config, eval_set: EvalSet) -> float:
    B, T = cfg.train.batch_size, cfg.model.block_size
    prefixes = honest_flops(cfg, eval_set.positions)
    return (
        2 * cfg.train.eval_batches * forward_flops(cfg.model, B, T)
        + (1 if cfg.model.causal else 2) * prefixes
        + forward_flops(cfg.model, *stats_shape(B, T))
    )


def evaluation_notes(
    cfg: Config, eval_set: EvalSet, speed: float, device: torch.device
) -> tuple[list[str], float]:
    """The notes before training on an evaluation's cost, and its seconds at `speed`."""
    seconds, notes = evaluation_flops(cfg, eval_set) / speed, []
    if not cfg.model.causal:
        prefixes = eval_set.positions
        steps = honest_flops(cfg, prefixes) / step_flops(cfg)
        longest = max(map(max, prefixes)) + 1
        notes.append(
            f"honest loss without the mask: {eval_set.scored_positions} prefix passes in "
            f"{len(prefixes)} batch(es), up to {longest} tokens: {steps:.1f} training steps of "
            f"compute per evaluation (at most {HONEST_BUDGET_STEPS}), as many again for the order "
            "use"
        )
    if seconds > EVAL_WARNING_S:
        batches = cfg.train.eval_batches
        notes.append(
            f"note: each evaluation will take about {duration(seconds)} on this {device.type} "
            f"({2 * batches} batches of {cfg.train.batch_size} x {cfg.model.block_size} tokens); "
            f"--train.eval_batches=N (now {batches}) or --train.honest_batches=N shortens it, "
            "and Ctrl-C stops it"
        )
    return notes, seconds


def rows_per_pass(B: int, T: int) -> int:
    """Fewer rows a pass at a long context: a stop waits for the pass under way."""
    return max(1, min(B, ROWS_WEIGHTS // (T * T)))


def stats_shape(B: int, T: int) -> tuple[int, int]:
    tokens = min(T, int(STATS_WEIGHTS**0.5))
    return max(1, min(B, STATS_WEIGHTS // tokens**2)), tokens


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module):
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def estimate_loss(
    model: GPT, batches: list, runtime: Runtime, between: Callable[[], None] | None = None
) -> float:
    """Mean loss; under torchrun each rank scores every world_size-th batch."""
    total = torch.zeros(2, dtype=torch.float64, device=runtime.device)  # (losses, batches)
    with eval_mode(model):
        for x, y in batches[runtime.rank :: runtime.world_size]:
            B, rows = x.shape[0], rows_per_pass(*x.shape)
            for i in range(0, B, rows):
                if between is not None:
                    between()
                xs, ys = x[i : i + rows].to(runtime.device), y[i : i + rows].to(runtime.device)
                with runtime.autocast():
                    _, loss = model(xs, ys)
                share = len(xs) / B
                total[0] += loss.double() * share
                total[1] += share
    if runtime.world_size > 1:
        torch.distributed.all_reduce(total)
    return (total[0] / total[1]).item()


@torch.no_grad()
def measure_breakage(
    model: GPT,
    eval_set: EvalSet,
    runtime: Runtime,
    val_loss: float,
    between: Callable[[], None] | None = None,
) -> dict[str, float]:
    device = runtime.device
    metrics = {"loss/val_bpc": bits_per_byte(val_loss, eval_set.val_tokens, eval_set.val_bytes)}
    x, y = eval_set.batches["val"][0]
    rows, tokens = stats_shape(*x.shape)
    with eval_mode(model), runtime.autocast():
        honest = [(x.to(device), y.to(device), positions) for x, y, positions in eval_set.honest]
        pairs = [honest_loss(model, x, y, positions, between) for x, y, positions in honest]
        metrics.update(leak_of(pairs))
        metrics.update(order_use(model, honest, between=between, unshuffled=[h for h, _ in pairs]))
        xs, ys = x[:rows, :tokens].to(device), y[:rows, :tokens].to(device)
        probe = model.attention_probe(xs)  # one pass serves both summaries
        metrics.update(attention_summary(model, xs, probe))
        if eval_set.induction:
            metrics.update(induction_summary(model, xs, ys, [weights for _, weights in probe]))
    return metrics


@torch.no_grad()
def evaluate(
    model: GPT,
    eval_set: EvalSet,
    runtime: Runtime,
    tokenizer: Tokenizer,
    started: float,
    poll: Callable[[], None] | None,
    progress: bool,
) -> Evaluation:
    """Losses on every process, the rest on the main one; `poll`, called before every pass, raises
    to stop."""
    device = runtime.device
    B, T = eval_set.batches["val"][0][0].shape
    units = (
        2 * len(eval_set.batches["val"]) * -(-B // rows_per_pass(B, T))
        + eval_set.prefix_passes(model.cfg.causal)
        + eval_set.scored_positions  # the order use's shuffled prefixes
    )
    begun = False

    def between() -> None:
        nonlocal begun
        if poll is not None:
            poll()
        if begun:
            bar.update(1)  # the pass before this one
        begun = True

    shown = progress and runtime.is_main
    with tqdm(
        total=units, desc="evaluating", leave=False, dynamic_ncols=True, disable=not shown
    ) as bar:
        metrics = {
            "loss/train": estimate_loss(model, eval_set.batches["train"], runtime, between),
            "loss/val": estimate_loss(model, eval_set.batches["val"], runtime, between),
        }
        if not runtime.is_main:
            return Evaluation(metrics)
        metrics.update(measure_breakage(model, eval_set, runtime, metrics["loss/val"], between))
    with eval_mode(model):
        with runtime.autocast():
            heatmaps = model.attention_weights(torch.tensor([eval_set.heatmap_ids], device=device))
        generator = torch.Generator(device=device).manual_seed(EVAL_SEED)
        prompt = torch.tensor([eval_set.prompt_ids], device=device)
        ids = model.generate(prompt, SAMPLE_TOKENS, temperature=0.8, top_k=200, generator=generator)
        sample = tokenizer.decode(ids[0].tolist())
    metrics["perf/elapsed_s"] = time.perf_counter() - started
    return Evaluation(metrics, heatmaps, eval_set.heatmap_labels, sample, ids.shape[1])
