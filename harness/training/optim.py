"""How the weights move: AdamW (or Muon for the blocks' matrices) and the learning-rate schedule."""

import math

import torch

from configs import TrainConfig
from harness.training.muon import Muon, newton_schulz_dtype
from model import GPT


def lr_at(step: int, train_cfg: TrainConfig) -> float:
    """Linear warmup to lr, then cosine decay to min_lr at the last step."""
    warmup = train_cfg.warmup
    if step < warmup:
        return train_cfg.lr * (step + 1) / warmup
    decay_steps = max(1, train_cfg.max_steps - 1 - warmup)
    progress = min(1.0, (step - warmup) / decay_steps)
    return train_cfg.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (
        train_cfg.lr - train_cfg.min_lr
    )


class CombinedOptimizer:
    """Torch optimizers stepped as one (Muon takes only matrices, AdamW the rest)."""

    def __init__(self, *optimizers: torch.optim.Optimizer):
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict]:
        # read each time: load_state_dict replaces them
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
    """AdamW, decaying matrices only; for "muon" the blocks' matrices go to Muon, whose
    "match_rms_adamw" update has AdamW's size."""
    params = [p for p in model.parameters() if p.requires_grad]
    in_blocks = {id(p) for p in model.blocks.parameters()}
    matrices = []
    if train_cfg.optimizer == "muon":
        matrices = [p for p in params if p.dim() == 2 and id(p) in in_blocks]
    rest = [p for p in params if all(p is not m for m in matrices)]
    groups = [
        {"params": [p for p in rest if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
        {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0},
    ]
    betas = (train_cfg.beta1, train_cfg.beta2)
    fused = device.type in ("cpu", "cuda")  # one kernel per step
    adamw = torch.optim.AdamW(groups, lr=train_cfg.lr, betas=betas, fused=fused)
    if not matrices:
        return adamw
    muon = Muon(
        matrices,
        lr=train_cfg.lr,
        weight_decay=train_cfg.weight_decay,
        adjust_lr_fn="match_rms_adamw",
        ns_dtype=newton_schulz_dtype(train_cfg.muon_dtype, device),
    )
    return CombinedOptimizer(muon, adamw)


def describe(optimizer: torch.optim.Optimizer | CombinedOptimizer) -> str:
    names = []
    for opt in getattr(optimizer, "optimizers", (optimizer,)):
        names.append(type(opt).__name__)
        if isinstance(opt, Muon):
            names[-1] += f" (Newton-Schulz in {str(opt.ns_dtype).removeprefix('torch.')})"
    return " + ".join(names)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
