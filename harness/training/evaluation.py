"""What an evaluation measures: losses on fixed batches, the honest loss, attention statistics, heatmaps, a sample.

The data an evaluation looks at is drawn once per run from its own generator (EVAL_SEED), so
every evaluation of every run sees the same batches, and the training batches never shift.
"""

import time
from dataclasses import dataclass, field

import torch

from configs import Config
from data.batches import draw_batch
from data.tokenizer import Tokenizer, TokenizerError, token_labels
from harness.training.runtime import Runtime
from model import GPT
from model.induction import induction_summary
from model.measurements import attention_summary, bits_per_byte, honest_positions, leak, order_use

EVAL_SEED = 2024  # eval batches come from their own generator: identical on every run
HONEST_POSITIONS = 8  # prefix positions scored per sequence for loss/val_honest
SAMPLE_TOKENS = 200  # length of the sample logged at every evaluation
PROBE_TEXT = "ROMEO:\nBut soft, what light through yonder window breaks?"  # the text whose attention is drawn
HEATMAP_MAX_TOKENS = 32


@dataclass
class EvalSet:
    """Everything an evaluation looks at, drawn once so that every evaluation sees the same data."""

    batches: dict[str, list[tuple[torch.Tensor, torch.Tensor]]]  # split -> fixed (x, y) batches
    honest: list[tuple[torch.Tensor, torch.Tensor, list[int]]]  # val batches and the positions scored honestly
    val_bytes: int  # UTF-8 bytes of the decoded val targets, for bits per byte
    heatmap_ids: list[int]  # the probe text drawn in the heatmaps
    heatmap_labels: list[str]
    prompt_ids: list[int]  # start of the logged samples

    @property
    def val_tokens(self) -> int:
        """How many targets the val batches hold: the tokens that loss/val averages over."""
        return sum(y.numel() for _, y in self.batches["val"])


@dataclass
class Evaluation:
    """One evaluation's results: scalars for every process, pictures and a sample from the main one."""

    metrics: dict[str, float]
    heatmaps: list[torch.Tensor] = field(default_factory=list)  # per layer, weights (1, H, T, T) on the probe text
    heatmap_labels: list[str] = field(default_factory=list)  # the probe text's tokens
    sample: str = ""  # the prompt and SAMPLE_TOKENS generated tokens, decoded
    sample_tokens: int = 0  # how many tokens that text holds


def make_eval_set(corpus, tokenizer: Tokenizer, cfg: Config) -> EvalSet:
    B, T = cfg.train.batch_size, cfg.model.block_size
    gen = torch.Generator().manual_seed(EVAL_SEED)
    batches = {split: [draw_batch(getattr(corpus, split), B, T, gen) for _ in range(cfg.train.eval_batches)] for split in ("train", "val")}
    honest = [(x, y, honest_positions(T, HONEST_POSITIONS, gen)) for x, y in batches["val"][: cfg.train.honest_batches]]
    val_bytes = sum(len(tokenizer.decode(row.tolist()).encode("utf-8")) for _, y in batches["val"] for row in y)
    try:
        heatmap_ids = tokenizer.encode(PROBE_TEXT)[: min(T, HEATMAP_MAX_TOKENS)]
        prompt_ids = tokenizer.encode("\n")
    except TokenizerError:  # a corpus without these characters (or synthetic tokens): use its own
        heatmap_ids = corpus.probe_ids(min(T, HEATMAP_MAX_TOKENS))
        prompt_ids = heatmap_ids[:1]
    return EvalSet(batches, honest, val_bytes, heatmap_ids, token_labels(tokenizer, heatmap_ids), prompt_ids)


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


@torch.no_grad()
def measure_breakage(model: GPT, eval_set: EvalSet, runtime: Runtime, val_loss: float) -> dict[str, float]:
    """What shows a model break on the val text, beyond its loss: bits per byte, the honest and teacher-forced
    loss and their gap (model/measurements.py: leak), the order use (the honest loss's rise when the tokens
    before each target are shuffled), and on the first val batch the attention statistics (attn/...) and the
    induction heads (induction/..., and loss/repeated: the loss where the context gives the next token away).

    Called by evaluate() during training, and by break_gpt2.py on a pretrained model, untrained.
    """
    device = runtime.device
    metrics = {"loss/val_bpc": bits_per_byte(val_loss, eval_set.val_tokens, eval_set.val_bytes)}
    was_training = model.training
    model.eval()
    with runtime.autocast():
        honest = [(x.to(device), y.to(device), positions) for x, y, positions in eval_set.honest]
        metrics.update(leak(model, honest))
        metrics.update(order_use(model, honest))
        x, y = eval_set.batches["val"][0]
        metrics.update(attention_summary(model, x.to(device)))
        metrics.update(induction_summary(model, x.to(device), y.to(device)))
    model.train(was_training)
    return metrics


@torch.no_grad()
def evaluate(model: GPT, eval_set: EvalSet, runtime: Runtime, tokenizer: Tokenizer, started: float) -> Evaluation:
    """Losses on every process; then, on the main one, the honest loss, attention statistics, heatmaps and a sample.

    `started` is when training began: perf/elapsed_s, the time-to-loss curve, counts evaluations too.
    """
    device = runtime.device
    metrics = {f"loss/{split}": estimate_loss(model, batches, runtime) for split, batches in eval_set.batches.items()}
    if not runtime.is_main:
        return Evaluation(metrics)  # the other ranks only help with the losses
    metrics.update(measure_breakage(model, eval_set, runtime, metrics["loss/val"]))
    was_training = model.training
    model.eval()
    with runtime.autocast():
        heatmaps = model.attention_weights(torch.tensor([eval_set.heatmap_ids], device=device))
    generator = torch.Generator(device=device).manual_seed(EVAL_SEED)
    prompt = torch.tensor([eval_set.prompt_ids], device=device)
    sample = tokenizer.decode(model.generate(prompt, SAMPLE_TOKENS, temperature=0.8, top_k=200, generator=generator)[0].tolist())
    model.train(was_training)
    metrics["perf/elapsed_s"] = time.perf_counter() - started  # wall time of this process so far, evaluations included
    return Evaluation(metrics, heatmaps, eval_set.heatmap_labels, sample, sample_tokens=len(eval_set.prompt_ids) + SAMPLE_TOKENS)
