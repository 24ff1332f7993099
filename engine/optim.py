"""How the weights move: the optimizer and its learning-rate schedule."""

import math

import torch

from configs import TrainConfig
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


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
