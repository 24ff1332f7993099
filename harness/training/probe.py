"""The probe: the story's signals every few steps, between the evaluations, on a small fixed slice
of the val text.

An evaluation scores every eval batch, draws the heatmaps and writes a sample, which costs as much
as several training steps, so a run evaluates a few times and its evaluations' curves have a few
points. The probe measures what the story shows with model/measurements.py's own functions, on
PROBE_ROWS sequences of the first val batch, at the positions the
honest loss scores there: the honest and teacher-forced losses and their gap (no extra pass for a
causal model: its honest loss is its forced one), the order use (of a causal model only: without the
mask it would cost as many passes again as the honest loss, so there the evaluations alone measure
it), attention entropy, saturated rows, the mass on the future, the spread and the largest of the
scores, the query and key norms, and beside the losses a uniform guess's, ln V. It runs every
max_steps // train.probes steps and at the last (TrainConfig.probes_at). Its tags are Probe_loss/...
and Probe_attn/..., named after the evaluation's (Probe_loss/leak_gap beside loss/leak_gap): the
same measurements on less data, so companions of the evaluation's curves, not more points of them.

Why the capital P: TensorBoard's TIME SERIES and SCALARS tabs sort their sections by name, uppercase
before lowercase, and open only the first two. Those two are then the probe's, a point every few
steps, which read truly at TensorBoard's default smoothing of 0.6; the evaluation's loss/... and
attn/... have a few points a run (two for `char`), which that smoothing draws far from the values
logged, so they come later, closed.

It reads the model in eval() mode (no dropout) and draws nothing at random but from order_use's own
generator, so training's random streams (the batch generator, torch's global one) are untouched: a
run's losses are the same with the probe and without it.
"""

import math
import time

import torch

from configs import Config
from harness.training.evaluation import EvalSet, eval_mode, stats_shape
from harness.training.runtime import Runtime
from model import GPT
from model.measurements import attention_summary, honest_loss, leak_of, order_use

PROBE_ROWS = 2  # sequences of the first val batch that the probe reads
# loss/leak_gap -> Probe_loss/leak_gap: sections that TensorBoard sorts first and opens (the
# module's docstring)
PREFIX = "Probe_"


def probe_slice(eval_set: EvalSet) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(x, y, positions): the first PROBE_ROWS sequences (PROBE_ROWS, T) of the first val batch and
    the honest loss's positions there; drawn once, like the evaluation's batches, so that every
    probe of every run reads the same tokens."""
    x, y, positions = eval_set.honest[0]
    return x[:PROBE_ROWS], y[:PROBE_ROWS], positions


@torch.no_grad()
def probe(
    model: GPT, x: torch.Tensor, y: torch.Tensor, positions: list[int], runtime: Runtime
) -> dict[str, float]:
    """The story's signals on x, y (R, T) at `positions`, as Probe_loss/... and Probe_attn/... tags:
    the evaluation's loss/... and attn/... measurements (less bits per byte, the induction heads and
    the per-head entropies) on this slice."""
    x, y = x.to(runtime.device), y.to(runtime.device)
    # the attention statistics read as many tokens as the evaluation's (all at the presets' sizes)
    tokens = stats_shape(*x.shape)[1]
    with eval_mode(model), runtime.autocast():
        # a causal model's honest loss is read off its forced pass
        honest, forced = honest_loss(model, x, y, positions)
        metrics = leak_of([(honest, forced)])
        # a pass per position, as many as the honest loss costs a model without the mask: left to
        # its evaluations
        if model.cfg.causal:
            metrics.update(order_use(model, [(x, y, positions)], unshuffled=[honest]))
        metrics.update(attention_summary(model, x[:, :tokens]))
    # the loss charts' reference: a uniform guess over the vocabulary
    metrics["loss/uniform_guess"] = math.log(model.cfg.vocab_size)
    return {PREFIX + tag: value for tag, value in metrics.items() if not tag.startswith("heads/")}


class Probe:
    """Calls probe() at the steps train.probes picks and logs what it measured; on the main process
    only.
    """

    def __init__(self, model: GPT, eval_set: EvalSet, cfg: Config, runtime: Runtime, logger):
        self.model, self.slice, self.train_cfg, self.runtime, self.logger = (
            model,
            probe_slice(eval_set),
            cfg.train,
            runtime,
            logger,
        )

    def __call__(self, step: int) -> float:
        """Probe and log at `step` if it is a probe's step; returns the seconds it took (0 if none),
        which are not training's.
        """
        if self.logger is None or not self.train_cfg.probes_at(step):
            return 0.0
        started = time.perf_counter()
        self.logger.log(step, **probe(self.model, *self.slice, self.runtime))
        return time.perf_counter() - started
