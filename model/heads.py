"""Switch chosen attention heads off, to see what they carry (head ablation).

Head h's output is columns h*D .. (h+1)*D - 1 of the heads' side-by-side output (B, T, C) that
enters the block's output projection `proj`. Zeroing them removes everything the head adds to the
residual stream; mean-ablation puts their average over a reference batch there instead, so the
layers above still see an input of the usual size, only no longer depending on the tokens. "L0H1"
is layer 0, head 1. No parameter changes: hooks come off on exit.
"""

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch

from model.gpt import GPT

HEAD_NAME = re.compile(r"L(\d+)H(\d+)")
LAYER_NAME = re.compile(r"L(\d+)")  # every head of one layer


def head_name(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def all_heads(model: GPT) -> list[tuple[int, int]]:
    return [(layer, head) for layer in range(model.cfg.n_layer) for head in range(model.cfg.n_head)]


def parse_heads(text: str, n_layer: int, n_head: int) -> list[tuple[int, int]]:
    """ "L0H1,L0H3" (or "L1" for every head of layer 1) -> [(0, 1), (0, 3)], checked against the
    model's sizes."""
    heads = []
    for name in (part.strip() for part in text.split(",")):
        if match := HEAD_NAME.fullmatch(name):
            layer, head = int(match[1]), int(match[2])
        elif match := LAYER_NAME.fullmatch(name):
            layer, head = int(match[1]), None
        else:
            raise ValueError(
                f"{name!r} names no head; write heads as L<layer>H<head> (L0H1,L1H3) or a whole "
                "layer as L<layer>"
            )
        if layer >= n_layer:
            raise ValueError(
                f"{name}: layer {layer} is out of range, the model has layers 0 to {n_layer - 1}"
            )
        if head is not None and head >= n_head:
            raise ValueError(
                f"{name}: head {head} is out of range, the model has heads 0 to {n_head - 1} per "
                "layer"
            )
        heads += [(layer, head)] if head is not None else [(layer, h) for h in range(n_head)]
    return list(dict.fromkeys(heads))  # in order, each once


@contextmanager
def ablate_heads(
    model: GPT, heads: Iterable[tuple[int, int]], means: list[torch.Tensor] | None = None
) -> Iterator[GPT]:
    """Within the block, the model runs with `heads` (layer, head) switched off: each one's slice
    of the input to proj set to zero, or with `means` (head_means) to its mean. Every attention
    backend and the KV cache end in proj, so this works on all of them."""
    D = model.cfg.head_size
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def switch_off(layer: int, chosen: list[int]):
        def hook(proj, inputs):
            y = inputs[0].clone()  # (B, T, C): heads side by side, before the projection mixes them
            for head in chosen:
                cols = slice(head * D, (head + 1) * D)
                # (B, T, D) <- 0 or (D,)
                y[..., cols] = 0.0 if means is None else means[layer][cols].to(y.dtype)
            return (y,)

        return hook

    handles = [
        model.blocks[layer].attn.proj.register_forward_pre_hook(switch_off(layer, chosen))
        for layer, chosen in by_layer.items()
    ]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def head_means(model: GPT, idx: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, the (C,) mean of the heads' output before proj over idx (B, T): mean-ablation's
    values."""
    sums: list[torch.Tensor] = []

    def record(proj, inputs):
        sums.append(inputs[0].float().mean(dim=(0, 1)))  # (B, T, C) -> (C,)

    handles = [block.attn.proj.register_forward_pre_hook(record) for block in model.blocks]
    try:
        model.hidden(idx)
    finally:
        for handle in handles:
            handle.remove()
    return sums
