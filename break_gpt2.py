"""Break a pretrained GPT-2 at inference: python break_gpt2.py --pretrained gpt2 [--config
gpt2-finetune] [--section.field=VALUE ...]. The same weights, evaluated as they are and once per
ablation: unlike compare.py's runs, this model never saw the future and is suddenly shown it."""

from harness.stopping import exit_on_signal

# before the slow imports: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from configs import ConfigError
from data.corpus import check_split_lengths, load_corpus
from data.files import write_atomically
from harness.cli import OneLineParser, run_command
from harness.experiments.stats import COLUMNS, aggregate, format_table
from harness.folders import writable_folder
from harness.gpt2 import build, load_pretrained
from harness.pictures.heatmaps import save_layer_heatmaps
from harness.training.evaluation import estimate_loss, make_eval_set, measure_breakage
from harness.training.runtime import setup_runtime
from model.ablations import flags_label, variants

# nothing is trained, so no training loss
UNTRAINED_COLUMNS = [c for c in COLUMNS if c[1] != "loss/train"]


def main(argv: list[str]) -> dict[str, dict]:
    parser = OneLineParser(
        "Evaluate a pretrained GPT-2 as it is and without its mask, its scale or its positions.",
        config="gpt2-finetune",
    )
    parser.add_argument(
        "--pretrained",
        required=True,
        metavar="NAME_OR_FOLDER",
        help="gpt2, gpt2-medium, ... or a folder",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="folder for heatmaps and break.json (default: <runs-dir>/break-<name>)",
    )
    args, cfg = parser.parse_with_config(argv)
    ignored = [
        key for key, _ in args.overrides if key.startswith("model.") and key != "model.block_size"
    ]
    if ignored:
        raise ConfigError(
            "break_gpt2.py takes the model as --pretrained gives it and makes its ablated "
            f"variants itself, so {ignored[0]} would be ignored; leave it out "
            "(--model.block_size, the context, is the one model key it reads)"
        )
    if cfg.data.tokenizer != "gpt2":
        raise ConfigError(
            "GPT-2 reads the gpt2 tokenizer's ids, "
            f"and the config says data.tokenizer = {cfg.data.tokenizer}"
        )
    out = writable_folder(
        args.out or Path(cfg.train.runs_dir) / f"break-{Path(args.pretrained).name}",
        "--out",
        create=False,
    )
    runtime = setup_runtime(cfg.train)
    model, tokenizer, info = load_pretrained(args.pretrained, runtime.device)
    T = min(cfg.model.block_size, model.cfg.block_size)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, block_size=T))
    corpus = load_corpus(cfg.data)
    check_split_lengths(corpus, T)
    eval_set = make_eval_set(corpus, tokenizer, cfg)
    name = Path(info["name"]).name
    size = f"{model.num_params() / 1e6:.1f}M parameters"
    tokens = f"{eval_set.val_tokens:,} val tokens in blocks of {T}"
    print(f"{info['name']} ({info['source']}): {size}; {tokens}")

    state = model.state_dict()
    results = {}
    for suffix, variant_cfg in variants(model.cfg).items():
        started, run = time.perf_counter(), name + suffix
        kept = dict(state)  # -no-pos: without the table, the positions add nothing
        if variant_cfg.positions != "learned":
            del kept["pos_emb.weight"]
        variant = build(variant_cfg, kept, info["source"]).to(runtime.device).eval()
        metrics = {"loss/val": estimate_loss(variant, eval_set.batches["val"], runtime)}
        metrics.update(measure_breakage(variant, eval_set, runtime, metrics["loss/val"]))
        metrics["wall_s"] = time.perf_counter() - started
        results[run] = metrics
        flags = flags_label(variant_cfg)
        print(
            f"{run} ({flags}): val {metrics['loss/val']:.3f} in {metrics['wall_s']:.1f}s",
            flush=True,
        )
        weights = variant.attention_weights(
            torch.tensor([eval_set.heatmap_ids], device=runtime.device)
        )
        folder = writable_folder(out / run, "--out")
        labels = eval_set.heatmap_labels
        save_layer_heatmaps(weights, labels, folder, run, flags, dpi=90, causal=variant_cfg.causal)

    summary = {"model": info, "block_size": T, "val_tokens": eval_set.val_tokens}
    summary["results"] = results
    write_atomically(out / "break.json", json.dumps(summary, indent=2).encode())
    table = format_table({run: aggregate([m]) for run, m in results.items()}, UNTRAINED_COLUMNS)
    print(f"\n{table}")
    print(f"\nheatmaps: {out}/<variant>/attn_L<layer>.png; numbers: {out / 'break.json'}")
    return results


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
