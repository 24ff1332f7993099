"""Break a pretrained GPT-2 at inference: python break_gpt2.py --pretrained gpt2 [--config gpt2-finetune] [--section.field=VALUE ...]

No training: the same weights are evaluated on the val text three ways, as they are, without the
causal mask and without the 1/sqrt(D) scale, and the table compare.py prints for trained runs
comes out for each (loss, honest loss, leak gap, bits per byte, entropy, saturated share,
future mass, score std). compare.py's ablations learned to live without the switch (the
no-mask run learned to cheat); here a model that never saw the future is suddenly shown it.

The val text, the context and the eval batches come from the preset (default gpt2-finetune:
4 batches of 8 x 128 tokens), cut to the model's context if that is shorter. Heatmaps of every
layer for each variant go to <out>/<variant>/, the numbers to <out>/break.json.
"""

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from configs import ConfigError, load_config, parse_args
from data.corpus import check_split_lengths, load_corpus
from engine.cli import OneLineParser, run_command
from engine.evaluation import estimate_loss, make_eval_set, measure_val
from engine.folders import writable_folder
from engine.heatmaps import heatmap_figure
from engine.pretrained import build, load_pretrained
from engine.runtime import setup_runtime
from engine.stats import COLUMNS, aggregate, format_table
from model.ablations import flags_label

VARIANTS = {"": {}, "-no-mask": {"causal": False}, "-no-scale": {"scaled": False}}  # run-name suffix -> switches changed
TABLE = [c for c in COLUMNS if c[1] != "loss/train"]  # nothing is trained, so no training loss


def main(argv: list[str]) -> dict[str, dict]:
    parser = OneLineParser(description="Evaluate a pretrained GPT-2 as it is, without the mask and without the scale.")
    parser.add_argument("--pretrained", required=True, metavar="NAME_OR_FOLDER", help="gpt2, gpt2-medium, ... or a folder")
    parser.add_argument("--out", type=Path, help="folder for heatmaps and break.json (default: <runs-dir>/break-<name>)")
    args, rest = parser.parse_known_args(argv)  # the rest is a config: --config NAME, --data-file, --section.field=VALUE
    if not any(a == "--config" or a.startswith("--config=") for a in rest):
        rest = ["--config", "gpt2-finetune", *rest]
    ignored = [key for key, _ in parse_args(rest)[1] if key.startswith("model.") and key != "model.block_size"]
    if ignored:
        raise ConfigError(
            f"break_gpt2.py takes the model as --pretrained gives it and makes the no-mask and no-scale variants itself, "
            f"so {ignored[0]} would be ignored; leave it out (--model.block_size, the context, is the one model key it reads)"
        )
    cfg = load_config(rest)
    if cfg.data.tokenizer != "gpt2":
        raise ConfigError(f"GPT-2 reads the gpt2 tokenizer's ids, and the config says data.tokenizer = {cfg.data.tokenizer}")
    out = writable_folder(args.out or Path(cfg.train.runs_dir) / f"break-{Path(args.pretrained).name}", "--out", create=False)
    runtime = setup_runtime(cfg.train)
    model, tokenizer, info = load_pretrained(args.pretrained, runtime.device)
    T = min(cfg.model.block_size, model.cfg.block_size)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, block_size=T))
    corpus = load_corpus(cfg.data)
    check_split_lengths(corpus, T)
    ev = make_eval_set(corpus, tokenizer, cfg)
    name = Path(info["name"]).name
    n_val = sum(y.numel() for _, y in ev.batches["val"])
    print(f"{info['name']} ({info['source']}): {model.num_params() / 1e6:.1f}M parameters; {n_val:,} val tokens in blocks of {T}")

    state = model.state_dict()
    results = {}
    for suffix, switches in VARIANTS.items():
        started = time.perf_counter()
        variant = build(dataclasses.replace(model.cfg, **switches), state, info["source"]).to(runtime.device).eval()
        metrics = {"loss/val": estimate_loss(variant, ev.batches["val"], runtime)}
        metrics.update(measure_val(variant, ev, runtime, metrics["loss/val"]))
        metrics["wall_s"] = time.perf_counter() - started
        results[name + suffix] = metrics
        print(f"{name + suffix} ({flags_label(variant.cfg)}): val {metrics['loss/val']:.3f} in {metrics['wall_s']:.1f}s", flush=True)
        write_heatmaps(variant, ev.heatmap_ids, ev.heatmap_labels, out / (name + suffix), name + suffix)

    (out / "break.json").write_text(json.dumps({"model": info, "block_size": T, "val_tokens": n_val, "results": results}, indent=2))
    print(f"\n{format_table({run: aggregate([m]) for run, m in results.items()}, TABLE)}")
    print(f"\nheatmaps: {out}/<variant>/attn_L<layer>.png; numbers: {out / 'break.json'}")
    return results


def write_heatmaps(model, ids: list[int], labels: list[str], folder: Path, title: str) -> None:
    """One grid of heads per layer, on the probe text evaluations draw."""
    writable_folder(folder, "--out")
    weights = model.attention_weights(torch.tensor([ids], device=next(model.parameters()).device))
    for layer, w in enumerate(weights):
        heatmap_figure(w[0], labels, f"{title}: layer {layer} ({flags_label(model.cfg)})").savefig(folder / f"attn_L{layer}.png", dpi=90)


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
