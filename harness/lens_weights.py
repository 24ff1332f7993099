"""Our tensors under TransformerLens's names: lens_weights for 3.x, native_weights for 4.x (and
add_ours for what 4.x's native attention lacks)."""

import torch
import torch.nn as nn

from model import GPT, ModelConfig
from model.attention import causal_mask
from model.qk import rms_norm


class LensError(ValueError):
    """A model that TransformerLens cannot take, or TransformerLens missing."""


def our_tensors(model: GPT):
    """Our tensors by name (the tied head once), and take(name), which hands each out once: what is
    left at the end has no place in that model."""
    ours = {name: p.detach() for name, p in model.named_parameters()}

    def take(name: str) -> torch.Tensor:
        if name not in ours:
            raise LensError(f"our model has no tensor {name}, which harness/lens_weights.py maps")
        return ours.pop(name)

    return ours, take


def place_positions(out: dict, name: str, cfg: ModelConfig, take, context: int | None) -> None:
    n_ctx = context or cfg.block_size
    if cfg.positions == "learned":
        out[name] = take("pos_emb.weight")[:n_ctx]
    if cfg.positions == "none":
        out[name] = torch.zeros(n_ctx, cfg.n_embd)


def split_qkv(take, block: str, cfg: ModelConfig):
    weight = take(block + "attn.qkv.weight")
    bias = take(block + "attn.qkv.bias") if cfg.qkv_bias else torch.zeros_like(weight[:, 0])
    sizes = [cfg.n_embd] + 2 * [(cfg.kv_heads or cfg.n_head) * cfg.head_size]
    return zip(weight.split(sizes), bias.split(sizes), strict=True)


def move(out: dict, take, ours: str, theirs: str, kinds=("weight", "bias")) -> None:
    for our_kind, kind in zip(("weight", "bias"), kinds, strict=True):
        out[f"{theirs}.{kind}"] = take(f"{ours}.{our_kind}")


def finished(ours: dict, out: dict) -> dict:
    if ours:
        raise LensError(
            f"our tensor {next(iter(ours))} has no place in TransformerLens in harness/lens.py yet"
        )
    return out


def lens_weights(model: GPT, context: int | None = None) -> dict[str, torch.Tensor]:
    """HookedTransformer's names and shapes: it multiplies from the right."""
    cfg, C, D = model.cfg, model.cfg.n_embd, model.cfg.head_size
    ours, take = our_tensors(model)
    out = {"embed.W_E": take("tok_emb.weight")}  # (V, C)
    out["unembed.W_U"] = out["embed.W_E"].T  # (C, V): tied
    out["unembed.b_U"] = torch.zeros_like(out["embed.W_E"][:, 0])
    place_positions(out, "pos_embed.W_pos", cfg, take, context)
    # its grouped-query attention names the K heads' tensors _W_K and _W_V
    grouped = "_" if cfg.kv_heads else ""
    for i in range(cfg.n_layer):
        block = f"blocks.{i}."
        move(out, take, block + "ln1", block + "ln1", ("w", "b"))
        for kind, (weight, bias) in zip("QKV", split_qkv(take, block, cfg), strict=True):
            named = block + "attn." + (grouped if kind != "Q" else "")
            out[f"{named}W_{kind}"] = weight.view(-1, D, C).transpose(1, 2)  # (HD, C) -> (H, C, D)
            out[f"{named}b_{kind}"] = bias.view(-1, D)  # (HD,) -> (H, D)
        if cfg.sink:
            out[block + "attn.sinks"] = take(block + "attn.sink")  # (H,)
        if cfg.qk_norm:
            # ours has no gains
            out[block + "attn.q_norm.w"] = out[block + "attn.k_norm.w"] = torch.ones(D)
        # (C, HD) -> (H, D, C)
        out[block + "attn.W_O"] = take(block + "attn.proj.weight").view(C, -1, D).permute(1, 2, 0)
        out[block + "attn.b_O"] = take(block + "attn.proj.bias")
        if cfg.mlp:
            move(out, take, block + "ln2", block + "ln2", ("w", "b"))
            out[block + "mlp.W_in"] = take(block + "mlp.fc.weight").T  # (C, 4C)
            out[block + "mlp.b_in"] = take(block + "mlp.fc.bias")
            out[block + "mlp.W_out"] = take(block + "mlp.proj.weight").T  # (4C, C)
            out[block + "mlp.b_out"] = take(block + "mlp.proj.bias")
    move(out, take, "ln_f", "ln_final", ("w", "b"))
    return finished(ours, out)


def native_weights(model: GPT, context: int | None = None) -> dict[str, torch.Tensor]:
    """4.x's NativeModel's names: its layers are nn.Linear, as ours."""
    cfg = model.cfg
    ours, take = our_tensors(model)
    out = {"tok_embed.weight": take("tok_emb.weight")}  # (V, C)
    out["head.weight"] = out["tok_embed.weight"]
    place_positions(out, "pos.weight", cfg, take, context)
    for i in range(cfg.n_layer):
        block, layer = f"blocks.{i}.", f"layers.{i}."
        move(out, take, block + "ln1", layer + "ln1")
        for kind, (weight, bias) in zip("qkv", split_qkv(take, block, cfg), strict=True):
            out[f"{layer}attn.{kind}.weight"] = weight
            out[f"{layer}attn.{kind}.bias"] = bias
        move(out, take, block + "attn.proj", layer + "attn.o")
        if cfg.mlp:
            move(out, take, block + "ln2", layer + "ln2")
            move(out, take, block + "mlp.fc", layer + "mlp.fc_in")
            move(out, take, block + "mlp.proj", layer + "mlp.fc_out")
    move(out, take, "ln_f", "ln_out")
    return finished(ours, out)


def add_ours(native: nn.Module, cfg: ModelConfig) -> None:
    """What 4.x's native attention lacks: an unscaled score, QK-norm (hook_q and hook_k hold the
    normalised vectors), and the window (its mask ignores it)."""

    def qk_norm(linear: nn.Linear, x, out: torch.Tensor) -> torch.Tensor:
        # (B, T, C) -> (B, T, H, D) -> (B, T, C)
        return rms_norm(out.unflatten(-1, (-1, cfg.head_size))).flatten(-2)

    for i, layer in enumerate(native.layers):
        if not cfg.scaled:
            layer.attn.scale = 1.0  # its divisor, sqrt(d_head) whatever use_attn_scale says
        if cfg.qk_norm:
            layer.attn.q.register_forward_hook(qk_norm)
            layer.attn.k.register_forward_hook(qk_norm)
        if cfg.local(i):
            mask = layer.attn.causal_mask  # (n_ctx, n_ctx), True where a query may not look
            n_ctx = mask.shape[0]
            layer.attn.causal_mask = ~causal_mask(n_ctx, n_ctx, mask.device, cfg.window)
