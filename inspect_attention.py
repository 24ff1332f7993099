"""Look inside a trained model: python inspect_attention.py --run NAME --text "ROMEO: But soft"

Writes token-labelled heatmaps of the attention weights (one grid of heads per layer, and one
picture per head) and prints, per head, the statistics that TensorBoard logs during training.
Works on any checkpoint, including --no-mask and --no-scale runs.
"""

import sys
from pathlib import Path

import torch

from data.tokenizer import TokenizerError
from engine.checkpoints import load_model
from engine.cli import OneLineParser, run_command
from engine.diagnostics import flags_label, head_statistics
from engine.heatmaps import heatmap_figure, token_labels


def main(argv: list[str]) -> Path:
    parser = OneLineParser(description="Heatmaps and per-head statistics of a trained model's attention.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--run", default="base", help="run folder name under --runs-dir (default: base)")
    where.add_argument("--checkpoint", type=Path, help="path to a ckpt.pt (overrides --run)")
    parser.add_argument("--runs-dir", default="runs")
    parser.add_argument("--text", default="ROMEO:\nBut soft, what light through yonder window breaks?")
    parser.add_argument("--out", type=Path, help="folder for the PNGs (default: <run folder>/inspect)")
    args = parser.parse_args(argv)

    path = args.checkpoint or Path(args.runs_dir) / args.run / "ckpt.pt"
    model, tokenizer, _ = load_model(path, "cpu")
    ids = tokenizer.encode(args.text)
    if not ids:
        raise TokenizerError("the text is empty; give some with --text")
    block_size = model.cfg.block_size
    if len(ids) > block_size:
        print(f"note: the text is {len(ids)} tokens; only its first {block_size} (block_size) are shown")
        ids = ids[:block_size]
    weights = model.attention_weights(torch.tensor([ids]))  # n_layer x (1, H, T, T)
    labels = token_labels(tokenizer, ids)
    out = args.out or path.parent / "inspect"
    out.mkdir(parents=True, exist_ok=True)
    flags = flags_label(model.cfg)
    for layer, w in enumerate(weights):
        fig = heatmap_figure(w[0], labels, f"{path.parent.name}: layer {layer} ({flags})")
        fig.savefig(out / f"attn_L{layer}.png", dpi=110)
        for head in range(w.shape[1]):
            fig = heatmap_figure(w[0, head : head + 1], labels, f"{path.parent.name}: layer {layer}, head {head}", [f"L{layer}H{head}"])
            fig.savefig(out / f"attn_L{layer}_H{head}.png", dpi=110)

    print(f"{path} ({flags}), {len(ids)} tokens; heatmaps in {out}/")
    print("| layer | head | entropy | max weight | saturated | future mass |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in head_statistics(weights, model.cfg.causal):
        print(
            f"| {row['layer']} | {row['head']} | {row['entropy']:.3f} | {row['max_weight']:.3f} | "
            f"{row['saturated']:.2f} | {row['future_mass']:.3f} |"
        )
    return out


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
