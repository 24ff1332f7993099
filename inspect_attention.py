"""Look inside a trained model: python inspect_attention.py --run NAME --text "ROMEO: But soft"

Writes token-labelled heatmaps of the attention weights (one grid of heads per layer, and one
picture per head) and prints, per head, the statistics that TensorBoard logs during training.
Works on any checkpoint, including --no-mask and --no-scale runs.
"""

import sys
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from data.tokenizer import Tokenizer, TokenizerError
from model.diagnostics import flags_label, head_statistics


def token_labels(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    """One readable label per token: whitespace made visible, long tokens shortened."""
    labels = []
    for i in ids:
        text = tokenizer.decode([i]).replace("\n", "\\n").replace(" ", "\u2423")
        labels.append(text if len(text) <= 8 else text[:7] + "\u2026")
    return labels


class HeatmapGrid:
    """A grid of (T, T) heatmaps, one per head, for weights (H, T, T); rows are queries, columns keys.

    Laying out and drawing the token labels is most of the cost of a picture, so the grid is built
    once and draw() only refills the heatmaps and the title; pixels() also draws the labels only
    once and afterwards paints just the heatmaps and the title over a saved copy of them ("blitting"):
    training renders one grid per layer at every evaluation. A matplotlib Figure that pyplot does
    not track, so it goes when it is dropped.
    """

    def __init__(self, n_heads: int, labels: list[str], head_names: list[str] | None = None):
        T = len(labels)
        cols = min(n_heads, 4)
        rows = (n_heads + cols - 1) // cols
        size = 1.6 + 0.09 * T  # inches per panel: room for T labels, small enough to render fast
        self.fig = Figure(figsize=(size * cols, size * rows + 0.6))
        axes = self.fig.subplots(rows, cols, squeeze=False)
        self.fig.subplots_adjust(
            left=0.08 / cols, right=1 - 0.02 / cols, bottom=0.12 / rows, top=1 - 0.5 / (size * rows + 0.6), wspace=0.25, hspace=0.3
        )
        fontsize = max(4, min(8, 200 // max(T, 1)))
        self.images = []
        for h, ax in enumerate(axes.flat):
            if h >= n_heads:
                ax.axis("off")
                continue
            self.images.append(ax.imshow(np.zeros((T, T)), cmap="viridis", vmin=0.0, vmax=1.0))
            ax.set_title(head_names[h] if head_names else f"head {h}", fontsize=9)
            ax.set_xticks(range(T), labels, rotation=90, fontsize=fontsize)
            if h % cols == 0:  # query labels on the first column only: tick labels are slow to draw
                ax.set_yticks(range(T), labels, fontsize=fontsize)
                ax.set_ylabel("query", fontsize=8)
            else:
                ax.set_yticks([])
            if h // cols == rows - 1:
                ax.set_xlabel("key (attended to)", fontsize=8)
        self.title = self.fig.suptitle("")
        self.canvas = FigureCanvasAgg(self.fig)
        frames = [spine for ax in self.fig.axes for spine in ax.spines.values()]  # drawn over the heatmaps' edges
        self.on_top = [*self.images, *frames, self.title]  # what pixels() repaints, in the order of a full draw
        self.background = None  # the rendered grid without self.on_top, after the first pixels()

    def draw(self, weights: torch.Tensor, title: str) -> Figure:
        """The figure, showing weights (H, T, T) under `title`."""
        for image, head_weights in zip(self.images, weights, strict=True):
            image.set_data(head_weights.float().cpu().numpy())
        self.title.set_text(title)
        return self.fig

    def pixels(self, weights: torch.Tensor, title: str) -> np.ndarray:
        """The picture of weights (H, T, T) under `title`, as (height, width, 3) uint8 RGB."""
        self.draw(weights, title)
        if self.background is None:
            for artist in self.on_top:
                artist.set_animated(True)  # left out of a full draw
            self.canvas.draw()
            self.background = self.canvas.copy_from_bbox(self.fig.bbox)
            for artist in self.on_top:
                artist.set_animated(False)
        self.canvas.restore_region(self.background)
        for artist in self.on_top:
            self.fig.draw_artist(artist)
        return np.asarray(self.canvas.buffer_rgba())[..., :3].copy()


def heatmap_figure(weights: torch.Tensor, labels: list[str], title: str, head_names: list[str] | None = None) -> Figure:
    """A one-off grid of heatmaps for weights (H, T, T)."""
    return HeatmapGrid(weights.shape[0], labels, head_names).draw(weights, title)


def main(argv: list[str]) -> Path:
    from sample import CheckpointError, OneLineParser, load_model  # noqa: F401  (sample imports train)

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
    from sample import CheckpointError

    try:
        main(sys.argv[1:])
    except (CheckpointError, TokenizerError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
