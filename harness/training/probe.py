"""The story's signals every few steps, on PROBE_ROWS val sequences; the capital P sorts its tags
first in TensorBoard. It draws no random numbers: losses are the same without it."""

import math
import time

import torch

from configs import Config
from harness.training.evaluation import EvalSet, eval_mode, stats_shape
from harness.training.runtime import Runtime
from model import GPT
from model.measurements import SHUFFLED_TOKENS, attention_summary, honest_loss, leak_of, order_use

PROBE_ROWS = 2  # sequences of the first val batch that the probe reads
# the evaluation's tag -> the probe's
PROBE_TAGS = {
    "loss/val_honest": "Probe_loss/val_honest",
    "loss/val_forced": "Probe_loss/val_forced",
    "loss/leak_gap": "Probe_loss/leak_gap",
    "loss/order_use": "Probe_loss/order_use",
    "attn/entropy": "Probe_attn/entropy",
    "attn/max_weight": "Probe_attn/max_weight",
    "attn/saturated_frac": "Probe_attn/saturated_frac",
    "attn/future_mass": "Probe_attn/future_mass",
    "attn/score_std": "Probe_attn/score_std",
    "attn/score_max": "Probe_attn/score_max",
    "attn/q_norm": "Probe_attn/q_norm",
    "attn/k_norm": "Probe_attn/k_norm",
}
# the story's charts in TensorBoard (runlog.py): (title, its tags), regular expressions anchored so
# that Probe_attn/score_max does not also match Probe_attn/score_max/L0
STORY_CHARTS = (
    (
        "training loss (loss/train_step): without the mask it falls towards 0; flat: a uniform "
        "guess, ln V",
        ["^loss/train_step$", "^Probe_loss/uniform_guess$"],
    ),
    (
        "val loss: val_honest (the past only) vs val_forced (the whole block)",
        ["^Probe_loss/val_honest$", "^Probe_loss/val_forced$"],
    ),
    ("leak gap: val_honest - val_forced (0 for a causal model)", ["^Probe_loss/leak_gap$"]),
    (
        f"order use: val_honest's rise when the {SHUFFLED_TOKENS} tokens before each target are "
        "shuffled (causal runs)",
        ["^Probe_loss/order_use$"],
    ),
    ("attention entropy (1 = uniform, 0 = one-hot)", ["^Probe_attn/entropy$"]),
    ("share of saturated rows (largest weight above 0.99)", ["^Probe_attn/saturated_frac$"]),
    ("attention mass on the future (0 under the mask)", ["^Probe_attn/future_mass$"]),
    ("spread of the attention scores (std, before the softmax)", ["^Probe_attn/score_std$"]),
    (
        "largest attention score, any layer (per layer: Probe_attn/score_max/L0, ...)",
        ["^Probe_attn/score_max$"],
    ),
    (
        "query and key norms, mean |q| and |k|: a score is at most |q| |k| x scale",
        ["^Probe_attn/q_norm$", "^Probe_attn/k_norm$"],
    ),
)


@torch.no_grad()
def probe(
    model: GPT, x: torch.Tensor, y: torch.Tensor, positions: list[int], runtime: Runtime
) -> dict[str, float]:
    x, y = x.to(runtime.device), y.to(runtime.device)
    tokens = stats_shape(*x.shape)[1]
    with eval_mode(model), runtime.autocast():
        honest, forced = honest_loss(model, x, y, positions)
        metrics = leak_of([(honest, forced)])
        # without the mask the order use costs a pass per position: left to the evaluations
        if model.cfg.causal:
            metrics.update(order_use(model, [(x, y, positions)], unshuffled=[honest]))
        metrics.update(attention_summary(model, x[:, :tokens]))
    tags = PROBE_TAGS | {
        f"attn/score_max/L{layer}": f"Probe_attn/score_max/L{layer}"
        for layer in range(model.cfg.n_layer)
    }
    probed = {tags[tag]: value for tag, value in metrics.items() if tag in tags}
    # the loss charts' reference: a uniform guess
    probed["Probe_loss/uniform_guess"] = math.log(model.cfg.vocab_size)
    return probed


class Probe:
    def __init__(self, model: GPT, eval_set: EvalSet, cfg: Config, runtime: Runtime, logger):
        x, y, positions = eval_set.honest[0]  # every probe of every run reads these tokens
        self.slice = x[:PROBE_ROWS], y[:PROBE_ROWS], positions
        self.model, self.runtime, self.logger = model, runtime, logger
        self.probes_at = cfg.train.probes_at

    def __call__(self, step: int) -> float:
        """Probe and log if `step` is a probe's step; return the seconds it took."""
        if self.logger is None or not self.probes_at(step):
            return 0.0
        started = time.perf_counter()
        self.logger.log(step, **probe(self.model, *self.slice, self.runtime))
        return time.perf_counter() - started
