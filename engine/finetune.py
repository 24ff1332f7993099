"""The model a run starts from: fresh weights, or a pretrained GPT-2's (train.init_from, --init-from).

Fine-tuning keeps everything of GPT-2 that its weights depend on (sizes, the query/key/value
bias, the tanh GELU, the vocabulary) and takes from the preset what a run may choose: the context
length (block_size, at most GPT-2's: the position embedding is cropped, never grown), dropout,
the attention backend and the two ablation switches. The derived config is the run's config, so
it is what config.json and every checkpoint store, and sample.py rebuilds the model from it.
"""

import dataclasses

from configs import Config, ConfigError
from engine.pretrained import build, load_pretrained
from engine.runtime import Runtime
from model import GPT, ModelConfig


def initial_model(cfg: Config, runtime: Runtime) -> tuple[Config, GPT]:
    """(the run's config, its model on runtime.device): GPT(cfg.model) with fresh weights, or GPT-2's weights when
    cfg.train.init_from names one. A resumed run starts here too, so that its config matches the checkpoint's;
    restore() then overwrites the weights."""
    if not cfg.train.init_from:
        return cfg, GPT(cfg.model).to(runtime.device)
    if cfg.data.tokenizer != "gpt2":
        raise ConfigError(f"--init-from needs data.tokenizer = gpt2 (GPT-2's ids), got {cfg.data.tokenizer}; drop the tokenizer override")
    pretrained, _, info = load_pretrained(cfg.train.init_from, "cpu")
    model_cfg = starting_config(cfg.model, pretrained.cfg, info["name"])
    state = pretrained.state_dict()
    state["pos_emb.weight"] = state["pos_emb.weight"][: model_cfg.block_size]  # (block_size, C): the first positions only
    model = build(model_cfg, state, info["source"])
    runtime.say(
        f"init from {info['name']} ({info['source']}): {model_cfg.n_layer} layers, {model_cfg.n_head} heads, "
        f"{model_cfg.n_embd} wide, context {model_cfg.block_size} of its {pretrained.cfg.block_size}; the preset's sizes do not apply"
    )
    return dataclasses.replace(cfg, model=model_cfg), model.train().to(runtime.device)


def starting_config(preset: ModelConfig, pretrained: ModelConfig, name: str) -> ModelConfig:
    """GPT-2's ModelConfig with the preset's block_size, dropout, attention backend, causal and scaled."""
    if preset.block_size > pretrained.block_size:
        raise ConfigError(
            f"model.block_size {preset.block_size} is longer than {name}'s context ({pretrained.block_size}); "
            f"set --model.block_size={pretrained.block_size} or less"
        )
    chosen = ("block_size", "dropout", "attention", "causal", "scaled")
    return dataclasses.replace(pretrained, **{field: getattr(preset, field) for field in chosen})
