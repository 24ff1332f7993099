"""Pictures of attention: token-labelled heatmaps of the weights, one panel per head.

Training draws one grid per layer at every evaluation (TensorBoard's heatmaps/ images), and
inspect_attention.py saves them as PNG files. Matplotlib figures here are built without pyplot,
so nothing global is kept and a figure goes when it is dropped. For models with many heads
(GPT-2 has 12 x 12) attention_page writes one interactive HTML page instead of a wall of grids.
"""

import html
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from data.tokenizer import Tokenizer


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


def attention_page(weights_per_layer: list[torch.Tensor], tokens: list[str], title: str, causal: bool, path: Path) -> Path:
    """One self-contained HTML page of every head, written with CircuitsVis; returns path.

    weights_per_layer: n_layer tensors (H, T, T) for one text. The page shows a thumbnail per head,
    named L{layer}H{head}; clicking one enlarges it, and hovering a token shows where it looks.
    All heads go into one widget because each widget inlines CircuitsVis's 1.3 MB of JavaScript:
    that inlined copy (`local_src`, never the CDN version that str() gives) is what makes the page
    work offline.
    """
    import circuitsvis.attention  # imported here, by the scripts that write pages: training runs never need it

    heads = torch.cat([w.float().cpu() for w in weights_per_layer])  # n_layer x (H, T, T) -> (n_layer * H, T, T)
    names = [f"L{layer}H{head}" for layer, w in enumerate(weights_per_layer) for head in range(w.shape[0])]
    widget = circuitsvis.attention.attention_heads(attention=heads, tokens=tokens, attention_head_names=names, mask_upper_tri=causal)
    page = (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>\n"
        f"<body style='font-family: sans-serif'><h2>{html.escape(title)}</h2>\n"
        "<p>Click a head (L = layer, H = head) to enlarge it; hover a token to see where it looks (rows: queries, columns: keys).</p>\n"
        f"{widget.local_src}\n</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path
