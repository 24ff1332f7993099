"""Our tensors under the names of each TransformerLens model: lens_weights for 3.x's HookedTransformer, native_weights
for 4.x's NativeModel (which harness/lens.py wraps in a TransformerBridge), and HeadRMSNorm, our QK-norm for the native
model, which has none. Each refuses in one line a tensor it has no place for, or one it expects and ours lacks.
"""

from collections.abc import Callable

import torch
import torch.nn as nn

from model import GPT
from model.qk import rms_norm


class LensError(ValueError):
    """A model that TransformerLens cannot take as it is, or TransformerLens missing: the message says what to do."""


def our_tensors(model: GPT) -> tuple[dict[str, torch.Tensor], Callable[[str], torch.Tensor]]:
    """Our tensors by name (the tied head listed once, as tok_emb.weight), and take(name), which hands each out once:
    what is left after a table has taken its share has no place in that model. A LensError for a name ours lacks."""
    if model.lm_head.weight is not model.tok_emb.weight:
        raise LensError("the output head is not tied to the token embedding, and harness/lens_weights.py maps only a tied one")
    ours = {name: p.detach() for name, p in model.named_parameters()}

    def take(name: str) -> torch.Tensor:
        if name not in ours:
            raise LensError(f"our model has no tensor {name}, which harness/lens_weights.py maps: map the model as it is now")
        return ours.pop(name)

    return ours, take


def lens_weights(model: GPT, context: int | None = None) -> dict[str, torch.Tensor]:
    """Our tensors under HookedTransformer's names and shapes, or a LensError naming a tensor that has no place there.
    (context: as lens_config's, the rows of the position table.)

    Ours keep every head's query, key and value in one (3C, C) matrix, rows h*D .. h*D + D - 1 for head h;
    TransformerLens keeps W_Q, W_K, W_V as (H, C, D) and W_O as (H, D, C), multiplying from the right.
    """
    cfg, C, H, D = model.cfg, model.cfg.n_embd, model.cfg.n_head, model.cfg.head_size
    ours, take = our_tensors(model)

    zeros = torch.zeros_like
    out = {"embed.W_E": take("tok_emb.weight")}  # (V, C)
    out |= {"unembed.W_U": out["embed.W_E"].T, "unembed.b_U": zeros(out["embed.W_E"][:, 0])}  # (C, V), (V,): tied, no bias
    n_ctx = context or cfg.block_size
    if cfg.positions == "learned":
        out["pos_embed.W_pos"] = take("pos_emb.weight")[:n_ctx]  # (n_ctx, C)
    elif cfg.positions == "none":
        out["pos_embed.W_pos"] = out["embed.W_E"].new_zeros(n_ctx, C)  # (n_ctx, C): a table that adds nothing
    # rope: queries and keys turned by their positions, and no table on either side
    for block in (f"blocks.{i}." for i in range(cfg.n_layer)):  # each block's prefix, the same on both sides
        out[block + "ln1.w"], out[block + "ln1.b"] = take(block + "ln1.weight"), take(block + "ln1.bias")
        qkv = take(block + "attn.qkv.weight")  # (3C, C)
        qkv_bias = take(block + "attn.qkv.bias") if cfg.qkv_bias else zeros(qkv[:, 0])  # (3C,)
        for kind, weight, bias in zip("QKV", qkv.split(C), qkv_bias.split(C), strict=True):
            out[f"{block}attn.W_{kind}"] = weight.view(H, D, C).transpose(1, 2)  # (C, C) -> (H, D, C) -> (H, C, D)
            out[f"{block}attn.b_{kind}"] = bias.view(H, D)  # (C,) -> (H, D)
        if cfg.qk_norm:  # ours divides by the RMS alone; TransformerLens's RMSNorm then multiplies by its gains, ones here
            out[block + "attn.q_norm.w"], out[block + "attn.k_norm.w"] = qkv.new_ones(D), qkv.new_ones(D)
        out[block + "attn.W_O"] = take(block + "attn.proj.weight").view(C, H, D).permute(1, 2, 0)  # (C, H*D) -> (H, D, C)
        out[block + "attn.b_O"] = take(block + "attn.proj.bias")
        if cfg.mlp:
            out[block + "ln2.w"], out[block + "ln2.b"] = take(block + "ln2.weight"), take(block + "ln2.bias")
            out[block + "mlp.W_in"], out[block + "mlp.b_in"] = take(block + "mlp.fc.weight").T, take(block + "mlp.fc.bias")  # (C, 4C)
            out[block + "mlp.W_out"], out[block + "mlp.b_out"] = take(block + "mlp.proj.weight").T, take(block + "mlp.proj.bias")  # (4C, C)
    out["ln_final.w"], out["ln_final.b"] = take("ln_f.weight"), take("ln_f.bias")
    if ours:
        raise LensError(f"our tensor {next(iter(ours))} has no place in TransformerLens's model in harness/lens.py yet")
    return out


def native_weights(model: GPT, context: int | None = None) -> dict[str, torch.Tensor]:
    """Our tensors under the names of TransformerLens 4.x's NativeModel, or a LensError naming a tensor that has no place
    there. (context: as lens_config's, the rows of the position table.)

    Its q, k, v, o and MLP are nn.Linear layers, as ours: the (3C, C) qkv matrix splits into three (C, C) ones, rows
    h*D .. h*D + D - 1 for head h on both sides; its output head has no bias, and takes the token embedding, as ours.
    """
    cfg, C = model.cfg, model.cfg.n_embd
    ours, take = our_tensors(model)

    out = {"tok_embed.weight": take("tok_emb.weight")}  # (V, C)
    out["head.weight"] = out["tok_embed.weight"]
    n_ctx = context or cfg.block_size
    if cfg.positions == "learned":
        out["pos.weight"] = take("pos_emb.weight")[:n_ctx]  # (n_ctx, C)
    elif cfg.positions == "none":
        out["pos.weight"] = out["tok_embed.weight"].new_zeros(n_ctx, C)  # (n_ctx, C): a table that adds nothing
    for i in range(cfg.n_layer):
        block, layer = f"blocks.{i}.", f"layers.{i}."
        out[layer + "ln1.weight"], out[layer + "ln1.bias"] = take(block + "ln1.weight"), take(block + "ln1.bias")
        qkv = take(block + "attn.qkv.weight")  # (3C, C)
        qkv_bias = take(block + "attn.qkv.bias") if cfg.qkv_bias else torch.zeros_like(qkv[:, 0])  # (3C,)
        for kind, weight, bias in zip("qkv", qkv.split(C), qkv_bias.split(C), strict=True):
            out[f"{layer}attn.{kind}.weight"], out[f"{layer}attn.{kind}.bias"] = weight, bias  # (C, C), (C,)
        out[layer + "attn.o.weight"], out[layer + "attn.o.bias"] = take(block + "attn.proj.weight"), take(block + "attn.proj.bias")
        if cfg.mlp:
            out[layer + "ln2.weight"], out[layer + "ln2.bias"] = take(block + "ln2.weight"), take(block + "ln2.bias")
            out[layer + "mlp.fc_in.weight"], out[layer + "mlp.fc_in.bias"] = take(block + "mlp.fc.weight"), take(block + "mlp.fc.bias")
            out[layer + "mlp.fc_out.weight"], out[layer + "mlp.fc_out.bias"] = (
                take(block + "mlp.proj.weight"),
                take(block + "mlp.proj.bias"),
            )
    out["ln_out.weight"], out["ln_out.bias"] = take("ln_f.weight"), take("ln_f.bias")
    if ours:
        raise LensError(f"our tensor {next(iter(ours))} has no place in TransformerLens's model in harness/lens.py yet")
    return out


class HeadRMSNorm(nn.Linear):
    """A query or key projection that divides each head's vector by its RMS, as our QK-norm does (model.attention.rms_norm):
    what 4.x's native attention, which has no QK-norm, computes its scores from. hook_q and hook_k then hold the
    normalised vectors, before the turn."""

    def __init__(self, linear: nn.Linear, head_size: int):
        super().__init__(linear.in_features, linear.out_features, device=linear.weight.device, dtype=linear.weight.dtype)
        self.load_state_dict(linear.state_dict())
        self.head_size = head_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(super().forward(x).unflatten(-1, (-1, self.head_size))).flatten(-2)  # (B, T, C) -> (B, T, H, D) -> (B, T, C)
