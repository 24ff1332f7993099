"""How the weights move: the optimizer (AdamW, or Muon for the blocks' matrices) and its
learning-rate schedule.
"""

import math

import torch

from configs import TrainConfig
from harness.training.muon import Muon, newton_schulz_dtype
from model import GPT


def lr_at(step: int, train_cfg: TrainConfig) -> float:
    """Linear warmup to lr, then cosine decay to min_lr at the last step.

    A run shorter than the preset's warmup (`--train.max_steps=3` to try it out) warms up over
    the whole run instead (`TrainConfig.warmup`).
    """
    warmup = train_cfg.warmup
    if step < warmup:
        return train_cfg.lr * (step + 1) / warmup
    decay_steps = max(1, train_cfg.max_steps - 1 - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    return train_cfg.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (
        train_cfg.lr - train_cfg.min_lr
    )


class CombinedOptimizer:
    """Several torch optimizers stepped as one: torch.optim.Muon takes 2-D matrices only, so the
    rest needs AdamW.

    It offers what the loop, the checkpoints and bench.py use of an optimizer, and nothing more.
    """

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        """The optimizers' groups as they are now: load_state_dict replaces them, so a list kept
        from before would go stale.
        """
        return [group for opt in self.optimizers for group in opt.param_groups]

    @property
    def state(self) -> dict:
        return {p: s for opt in self.optimizers for p, s in opt.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def state_dict(self) -> dict:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state: dict) -> None:
        for opt, opt_state in zip(self.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(opt_state)


def make_optimizer(
    model: GPT, train_cfg: TrainConfig, device: torch.device
) -> torch.optim.Optimizer | CombinedOptimizer:
    """train.optimizer = "adamw": AdamW, with weight decay on matrices (and the embedding) only, so
    that biases and LayerNorm gains keep their scale.

    "muon": the blocks' weight matrices go to Muon instead (torch.optim.Muon with its Newton-Schulz
    in train.muon_dtype, harness/training/muon.py). Muon orthogonalises each matrix's momentum (a
    few Newton-Schulz iterations) before the step, so every direction of the matrix moves by a
    similar amount, so it reaches a given loss in fewer steps (docs/experiment.md has the measured
    comparison). Its "match_rms_adamw" scaling gives the update the size of an AdamW update, so one
    lr from lr_at drives both. The embeddings (the output head shares the token embedding), biases
    and gains stay on AdamW.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    in_blocks = {id(p) for p in model.blocks.parameters()}
    matrices = (
        [p for p in params if p.dim() == 2 and id(p) in in_blocks]
        if train_cfg.optimizer == "muon"
        else []
    )
    rest = [p for p in params if all(p is not m for m in matrices)]
    groups = [
        {"params": [p for p in rest if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
        {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0},
    ]
    betas = (train_cfg.beta1, train_cfg.beta2)
    # one kernel per step
    adamw = torch.optim.AdamW(
        groups, lr=train_cfg.lr, betas=betas, fused=device.type in ("cpu", "cuda")
    )
    if not matrices:
        return adamw
    ns_dtype = newton_schulz_dtype(train_cfg.muon_dtype, device)
    muon = Muon(
        matrices,
        lr=train_cfg.lr,
        weight_decay=train_cfg.weight_decay,
        adjust_lr_fn="match_rms_adamw",
        ns_dtype=ns_dtype,
    )
    return CombinedOptimizer(muon, adamw)


def describe(optimizer: torch.optim.Optimizer | CombinedOptimizer) -> str:
    """What steps the weights, for the start-up line: "AdamW", or "Muon (Newton-Schulz in bfloat16)
    + AdamW".
    """
    optimizers = optimizer.optimizers if isinstance(optimizer, CombinedOptimizer) else (optimizer,)
    names = [
        f"{type(opt).__name__} (Newton-Schulz in {str(opt.ns_dtype).removeprefix('torch.')})"
        if isinstance(opt, Muon)
        else type(opt).__name__
        for opt in optimizers
    ]
    return " + ".join(names)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
