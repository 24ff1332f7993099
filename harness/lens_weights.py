"""Our tensors under the names of each TransformerLens model: lens_weights for 3.x's
HookedTransformer, native_weights for 4.x's NativeModel (which harness/lens.py wraps in a
TransformerBridge), and HeadRMSNorm, our QK-norm for the native model, which has none. Each refuses
in one line a tensor it has no place for, or one it expects and ours lacks.
"""

from collections.abc import Callable

import torch
import torch.nn as nn

from model import GPT, ModelConfig
from model.attention import causal_mask
from model.qk import rms_norm


class LensError(ValueError):
    """A model that TransformerLens cannot take as it is, or TransformerLens missing: the message
    says what to do.
    """


def our_tensors(model: GPT) -> tuple[dict[str, torch.Tensor], Callable[[str], torch.Tensor]]:
    """Our tensors by name (the tied head listed once, as tok_emb.weight), and take(name), which
    hands each out once:
    what is left after a table has taken its share has no place in that model. A LensError for a
    name ours lacks."""
    if model.lm_head.weight is not model.tok_emb.weight:
        raise LensError(
            "the output head is not tied to the token embedding, and harness/lens_weights.py maps only a tied one"
        )
    ours = {name: p.detach() for name, p in model.named_parameters()}

    def take(name: str) -> torch.Tensor:
        if name not in ours:
            raise LensError(
                f"our model has no tensor {name}, which harness/lens_weights.py maps: map the model as it is now"
            )
        return ours.pop(name)

    return ours, take


def lens_weights(model: GPT, context: int | None = None) -> dict[str, torch.Tensor]:
    """Our tensors under HookedTransformer's names and shapes, or a LensError naming a tensor that
    has no place there. (context: as lens_config's, the rows of the position table.)

    Ours keep every head's query, then every key/value head's key and value, in one (C + 2KD, C)
    matrix, rows h*D .. h*D + D - 1 for head h of each; TransformerLens keeps W_Q as (H, C, D), W_K
    and W_V as (K, C, D) (named _W_K and _W_V when it has grouped-query heads) and W_O as (H, D, C),
    multiplying from the right.
    """
    cfg, C, H, D = model.cfg, model.cfg.n_embd, model.cfg.n_head, model.cfg.head_size
    K = cfg.kv_heads or H
    # its GroupedQueryAttention keeps the K heads under these names
    grouped = "_" if cfg.kv_heads else ""
    ours, take = our_tensors(model)

    zeros = torch.zeros_like
    out = {"embed.W_E": take("tok_emb.weight")}  # (V, C)
    # (C, V), (V,): tied, no bias
    out |= {"unembed.W_U": out["embed.W_E"].T, "unembed.b_U": zeros(out["embed.W_E"][:, 0])}
    n_ctx = context or cfg.block_size
    if cfg.positions == "learned":
        out["pos_embed.W_pos"] = take("pos_emb.weight")[:n_ctx]  # (n_ctx, C)
    elif cfg.positions == "none":
        # (n_ctx, C): a table that adds nothing
        out["pos_embed.W_pos"] = out["embed.W_E"].new_zeros(n_ctx, C)
    # rope: queries and keys turned by their positions, and no table on either side
    # each block's prefix, the same on both sides
    for block in (f"blocks.{i}." for i in range(cfg.n_layer)):
        out[block + "ln1.w"], out[block + "ln1.b"] = (
            take(block + "ln1.weight"),
            take(block + "ln1.bias"),
        )
        qkv = take(block + "attn.qkv.weight")  # (C + 2KD, C)
        qkv_bias = take(block + "attn.qkv.bias") if cfg.qkv_bias else zeros(qkv[:, 0])  # (C + 2KD,)
        sizes = [C, K * D, K * D]
        for kind, heads, weight, bias in zip(
            ["Q", "K", "V"], [H, K, K], qkv.split(sizes), qkv_bias.split(sizes), strict=True
        ):
            # blocks.0.attn.W_Q, and blocks.0.attn._W_K with K heads
            named = f"{block}attn.{grouped if kind != 'Q' else ''}"
            # (HD, C) -> (H, D, C) -> (H, C, D); K heads alike
            out[f"{named}W_{kind}"] = weight.view(heads, D, C).transpose(1, 2)
            out[f"{named}b_{kind}"] = bias.view(heads, D)  # (HD,) -> (H, D)
        if cfg.sink:
            # (H,): one logit a head, joining each row's softmax
            out[block + "attn.sinks"] = take(block + "attn.sink")
        # ours divides by the RMS alone; TransformerLens's RMSNorm then multiplies by its gains,
        # ones here
        if cfg.qk_norm:
            out[block + "attn.q_norm.w"], out[block + "attn.k_norm.w"] = (
                qkv.new_ones(D),
                qkv.new_ones(D),
            )
        # (C, H*D) -> (H, D, C)
        out[block + "attn.W_O"] = take(block + "attn.proj.weight").view(C, H, D).permute(1, 2, 0)
        out[block + "attn.b_O"] = take(block + "attn.proj.bias")
        if cfg.mlp:
            out[block + "ln2.w"], out[block + "ln2.b"] = (
                take(block + "ln2.weight"),
                take(block + "ln2.bias"),
            )
            # (C, 4C)
            out[block + "mlp.W_in"], out[block + "mlp.b_in"] = (
                take(block + "mlp.fc.weight").T,
                take(block + "mlp.fc.bias"),
            )
            # (4C, C)
            out[block + "mlp.W_out"], out[block + "mlp.b_out"] = (
                take(block + "mlp.proj.weight").T,
                take(block + "mlp.proj.bias"),
            )
    out["ln_final.w"], out["ln_final.b"] = take("ln_f.weight"), take("ln_f.bias")
    if ours:
        raise LensError(
            f"our tensor {next(iter(ours))} has no place in TransformerLens's model in harness/lens.py yet"
        )
    return out


def native_weights(model: GPT, context: int | None = None) -> dict[str, torch.Tensor]:
    """Our tensors under the names of TransformerLens 4.x's NativeModel, or a LensError naming a
    tensor that has no place there. (context: as lens_config's, the rows of the position table.)

    Its q, k, v, o and MLP are nn.Linear layers, as ours: the (C + 2KD, C) qkv matrix splits into
    (C, C), (KD, C) and (KD, C) ones, rows h*D .. h*D + D - 1 for head h on both sides; its output
    head has no bias, and takes the token embedding, as ours.
    """
    cfg, C = model.cfg, model.cfg.n_embd
    KD = (cfg.kv_heads or cfg.n_head) * cfg.head_size
    ours, take = our_tensors(model)

    out = {"tok_embed.weight": take("tok_emb.weight")}  # (V, C)
    out["head.weight"] = out["tok_embed.weight"]
    n_ctx = context or cfg.block_size
    if cfg.positions == "learned":
        out["pos.weight"] = take("pos_emb.weight")[:n_ctx]  # (n_ctx, C)
    elif cfg.positions == "none":
        # (n_ctx, C): a table that adds nothing
        out["pos.weight"] = out["tok_embed.weight"].new_zeros(n_ctx, C)
    for i in range(cfg.n_layer):
        block, layer = f"blocks.{i}.", f"layers.{i}."
        out[layer + "ln1.weight"], out[layer + "ln1.bias"] = (
            take(block + "ln1.weight"),
            take(block + "ln1.bias"),
        )
        qkv = take(block + "attn.qkv.weight")  # (C + 2KD, C)
        # (C + 2KD,)
        qkv_bias = take(block + "attn.qkv.bias") if cfg.qkv_bias else torch.zeros_like(qkv[:, 0])
        for kind, weight, bias in zip(
            "qkv", qkv.split([C, KD, KD]), qkv_bias.split([C, KD, KD]), strict=True
        ):
            # (C, C), (C,); k, v: (KD, C), (KD,)
            out[f"{layer}attn.{kind}.weight"], out[f"{layer}attn.{kind}.bias"] = weight, bias
        out[layer + "attn.o.weight"], out[layer + "attn.o.bias"] = (
            take(block + "attn.proj.weight"),
            take(block + "attn.proj.bias"),
        )
        if cfg.mlp:
            out[layer + "ln2.weight"], out[layer + "ln2.bias"] = (
                take(block + "ln2.weight"),
                take(block + "ln2.bias"),
            )
            out[layer + "mlp.fc_in.weight"], out[layer + "mlp.fc_in.bias"] = (
                take(block + "mlp.fc.weight"),
                take(block + "mlp.fc.bias"),
            )
            out[layer + "mlp.fc_out.weight"], out[layer + "mlp.fc_out.bias"] = (
                take(block + "mlp.proj.weight"),
                take(block + "mlp.proj.bias"),
            )
    out["ln_out.weight"], out["ln_out.bias"] = take("ln_f.weight"), take("ln_f.bias")
    if ours:
        raise LensError(
            f"our tensor {next(iter(ours))} has no place in TransformerLens's model in harness/lens.py yet"
        )
    return out


class HeadRMSNorm(nn.Linear):
    """A query or key projection that divides each head's vector by its RMS, as our QK-norm does
    (model.attention.rms_norm):
    what 4.x's native attention, which has no QK-norm, computes its scores from. hook_q and hook_k
    then hold the normalised vectors, before the turn."""

    def __init__(self, linear: nn.Linear, head_size: int):
        super().__init__(
            linear.in_features,
            linear.out_features,
            device=linear.weight.device,
            dtype=linear.weight.dtype,
        )
        self.load_state_dict(linear.state_dict())
        self.head_size = head_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, T, C) -> (B, T, H, D) -> (B, T, C)
        return rms_norm(super().forward(x).unflatten(-1, (-1, self.head_size))).flatten(-2)


def add_ours(native: nn.Module, cfg: ModelConfig) -> None:
    """Give 4.x's NativeModel, in place, what its attention lacks and the run has: an unscaled score
    (its scale set to 1), QK-norm (HeadRMSNorm on its query and key projections) and the sliding
    window (its mask buffer, True where a query may not look, made ours in each local layer: the
    config's window_size and attn_types, which it takes, it does not read)."""
    for i, layer in enumerate(native.layers):
        if not cfg.scaled:
            # its scores are divided by this: sqrt(d_head) whatever use_attn_scale says
            layer.attn.scale = 1.0
        if cfg.qk_norm:
            layer.attn.q, layer.attn.k = (
                HeadRMSNorm(layer.attn.q, cfg.head_size),
                HeadRMSNorm(layer.attn.k, cfg.head_size),
            )
        if cfg.local(i):
            n_ctx = layer.attn.causal_mask.shape[0]
            # (n_ctx, n_ctx)
            layer.attn.causal_mask = ~causal_mask(
                n_ctx, n_ctx, layer.attn.causal_mask.device, cfg.window
            )
