"""The model a run starts from: fresh weights, or GPT-2's (--init-from), of which the preset sets
only the context, dropout, attention backend and ablations."""

import dataclasses

import torch

from configs import Config, ConfigError
from configs.schema import CHOSEN_WITH_WEIGHTS
from harness.training.budget import check_affordable
from harness.training.checkpoints import check_model_config, model_config_of
from harness.training.runtime import Runtime
from model import GPT, ModelConfig
from model.ablations import CURE, POSITIONS, SHIPPED, applied


def initial_model(
    cfg: Config, runtime: Runtime, checkpoint: dict | None = None, speed: float | None = None
) -> tuple[Config, GPT]:
    """(the run's config, its model), checked before the weights are made."""
    if not cfg.train.init_from:
        check_affordable(cfg, runtime.device, speed)
        model = GPT(cfg.model).to(runtime.device)
        if checkpoint is None:
            check_finite_start(model)
        core = model.blocks[0].attn.core
        if core != cfg.model.attention:  # torch's fused kernel cannot cap scores
            runtime.say(
                f"note: model.attention = {cfg.model.attention} cannot cap scores "
                f"(model.softcap); attention runs the {core} path"
            )
        return cfg, model
    if cfg.data.tokenizer != "gpt2":
        raise ConfigError(
            f"--init-from needs data.tokenizer = gpt2, got {cfg.data.tokenizer}; drop the override"
        )
    # a resumed run finds its folder again
    pinned = dataclasses.replace(cfg.train, run_name=cfg.run_name)
    if checkpoint is not None:
        check_gpt2_can_start(cfg.model, cfg.train.init_from)
        path = cfg.run_dir / "ckpt.pt"
        model_cfg = chosen_fields(cfg.model, model_config_of(checkpoint, path))
        check_model_config(checkpoint, path, model_cfg)
    else:
        from harness.gpt2 import build, load_pretrained

        pretrained, _, info = load_pretrained(cfg.train.init_from, "cpu")
        model_cfg = starting_config(cfg.model, pretrained.cfg, info["name"])
    run_cfg = dataclasses.replace(cfg, model=model_cfg, train=pinned)
    check_affordable(run_cfg, runtime.device, speed)
    if checkpoint is not None:  # restore() brings the weights
        return run_cfg, GPT(model_cfg).to(runtime.device)
    state = pretrained.state_dict()
    state["pos_emb.weight"] = state["pos_emb.weight"][: model_cfg.block_size]
    model = build(model_cfg, state, info["source"])
    kept = [
        f"{switch}=false"
        for switch in ("causal", "scaled")
        if getattr(cfg.model, switch) and not getattr(model_cfg, switch)
    ]
    line = (
        f"init from {info['name']} ({info['source']}): {model_cfg.n_layer} layers, "
        f"{model_cfg.n_head} heads, {model_cfg.n_embd} wide, context {model_cfg.block_size} of its "
        f"{pretrained.cfg.block_size}; the preset's sizes do not apply"
    )
    if kept:
        line += f"; kept its {', '.join(kept)}"
    runtime.say(line)
    return run_cfg, model.train().to(runtime.device)


@torch.no_grad()
def check_finite_start(model: GPT) -> None:
    """Refuse fresh weights whose logits are not finite; its own generator leaves the run's random
    stream unchanged."""
    T, device = min(model.cfg.block_size, 64), model.lm_head.weight.device
    idx = torch.randint(
        model.cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(0)
    ).to(device)
    finite = (
        all(torch.isfinite(p).all() for p in model.parameters())
        and torch.isfinite(model.eval()(idx)[0]).all()
    )
    model.train()
    if not finite:
        raise ConfigError(
            "fresh weights give logits that are not finite (float32 overflows); lower "
            f"model.qk_init_std ({model.cfg.qk_init_std:g} here, GPT-2's is 0.02)"
        )


def starting_config(preset: ModelConfig, pretrained: ModelConfig, name: str) -> ModelConfig:
    check_gpt2_can_start(preset, name)
    if preset.block_size > pretrained.block_size:
        raise ConfigError(
            f"model.block_size {preset.block_size} is longer than {name}'s context "
            f"({pretrained.block_size}); set --model.block_size={pretrained.block_size} or less"
        )
    return chosen_fields(preset, pretrained)


def check_gpt2_can_start(preset: ModelConfig, name: str) -> None:
    if preset.positions == "none":
        raise ConfigError(
            f"{name} was trained with learned positions: a run without them cannot start from "
            "them; train from scratch, or see break_gpt2.py for GPT-2 with its positions zeroed"
        )
    added = [c.flag for c in applied(preset, (CURE, POSITIONS, SHIPPED))]
    if added:
        raise ConfigError(
            f"{name} was trained without {' and '.join(added)}: leave them out to fine-tune, or "
            "train from scratch"
        )


def chosen_fields(preset: ModelConfig, weights: ModelConfig) -> ModelConfig:
    chosen = {field: getattr(preset, field) for field in CHOSEN_WITH_WEIGHTS}
    ablations = {
        switch: getattr(weights, switch) and getattr(preset, switch)
        for switch in ("causal", "scaled")
    }
    return dataclasses.replace(weights, **chosen, **ablations)
