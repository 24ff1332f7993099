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
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from model.heads import head_name

TITLE_HEIGHT = 0.3  # inches kept for the figure's title, even while it is empty
COLORBAR_WIDTH = 0.12  # inches: the colour bar's strip, right of the panels


def fit_panels(fig: Figure, axes: np.ndarray, panel: float, title: Text, pad: float = 0.08) -> None:
    """Size fig and place the (rows, cols) axes so that every square panel of `panel` inches keeps
    its tick labels, axis names and title in full, under the figure's title.

    Each panel's decorations are measured (they depend on the text, not on where the panel sits),
    each column gets the room its widest labels need and each row the room of its tallest, and the
    figure grows to hold them, and to hold the title's current text. Axes removed from fig are
    skipped.
    """
    placed = set(fig.axes)
    renderer = fig.canvas.get_renderer()
    dpi = fig.dpi
    rows, cols = axes.shape
    left, right, below, above = (np.zeros(cols), np.zeros(cols), np.zeros(rows), np.zeros(rows))
    for (r, c), ax in np.ndenumerate(axes):
        if ax not in placed:
            continue
        # pixels: the square and all it draws
        box, tight = ax.get_window_extent(renderer), ax.get_tightbbox(renderer)
        left[c] = max(left[c], (box.x0 - tight.x0) / dpi)
        right[c] = max(right[c], (tight.x1 - box.x1) / dpi)
        below[r] = max(below[r], (box.y0 - tight.y0) / dpi)
        above[r] = max(above[r], (tight.y1 - box.y1) / dpi)
    # inches from the left edge
    x0 = pad + np.concatenate([[0.0], np.cumsum(left + panel + right + pad)[:-1]]) + left
    title_box = title.get_window_extent(renderer)
    title_height = max(title_box.height / dpi, TITLE_HEIGHT)
    # from the top edge
    top = (
        pad
        + title_height
        + np.concatenate([[0.0], np.cumsum(above + panel + below + pad)[:-1]])
        + above
    )
    width, height = x0[-1] + panel + right[-1] + pad, top[-1] + panel + below[-1] + pad
    # a title wider than the panels: widen both sides
    extra = max(0.0, title_box.width / dpi + 2 * pad - width)
    x0, width = x0 + extra / 2, width + extra
    fig.set_size_inches(width, height)
    for (r, c), ax in np.ndenumerate(axes):
        if ax in placed:
            ax.set_position(
                [x0[c] / width, 1 - (top[r] + panel) / height, panel / width, panel / height]
            )
    title.set_y(1 - pad / height)


class HeatmapGrid:
    """A grid of (T, T) heatmaps, one per head, for weights (H, T, T); rows are queries, columns
    keys.

    Laying out and drawing the token labels is most of the cost of a picture, so the grid is built
    once and draw() only refills the heatmaps and the title; pixels() also draws the labels only
    once and afterwards paints just the heatmaps and the title over a saved copy of them
    ("blitting"):
    training renders one grid per layer at every evaluation. A matplotlib Figure that pyplot does
    not track, so it goes when it is dropped.

    Each panel outlines one cell per row, so that a line one cell off the diagonal cannot be
    misread:
    under the mask the diagonal (t: the last position a query may see), without it t+1 (the token
    position t is asked to predict: a head that looks there copies the answer). A colour bar gives
    the scale, 0 to 1.
    """

    def __init__(
        self,
        n_heads: int,
        labels: list[str],
        head_names: list[str] | None = None,
        title: str = "",
        causal: bool = True,
    ):
        T = len(labels)
        cols = min(n_heads, 4)
        rows = (n_heads + cols - 1) // cols
        self.fig = Figure()
        self.canvas = FigureCanvasAgg(self.fig)
        axes = self.fig.subplots(rows, cols, squeeze=False)
        for ax in axes.flat[n_heads:]:
            ax.remove()  # the empty places of the last row
        panel = 1.2 + 0.08 * T  # inches per heatmap: room for T cells, small enough to render fast
        # points: a label as tall as its cell, readable however the picture is shrunk
        fontsize = max(4, min(9, 72 * panel / max(T, 1)))
        self.images, outlines = [], []
        # the outlined cells: (t, t) under the mask, (t, t+1) without it
        offset = 0 if causal else 1
        for h, ax in enumerate(axes.flat[:n_heads]):
            self.images.append(ax.imshow(np.zeros((T, T)), cmap="viridis", vmin=0.0, vmax=1.0))
            # cell (row t, column t + offset) spans [t + offset - 0.5, t + offset + 0.5] across
            for t in range(T - offset):
                box = Rectangle(
                    (t + offset - 0.5, t - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=0.6
                )
                outlines.append(ax.add_patch(box))
            ax.set_title(head_names[h] if head_names else f"head {h}", fontsize=9)
            ax.set_xticks(range(T), labels, rotation=90, fontsize=fontsize)
            if h % cols == 0:  # query labels on the first column only: tick labels are slow to draw
                ax.set_yticks(range(T), labels, fontsize=fontsize)
                ax.set_ylabel("queries (rows)", fontsize=8)
            else:
                ax.set_yticks([])
            if h + cols >= n_heads:  # the lowest panel of each column
                ax.set_xlabel("keys (columns): attended to", fontsize=8)
        # the figure is made wide enough for this text
        self.title = self.fig.suptitle(title, va="top")
        fit_panels(self.fig, axes, panel, self.title)
        # drawn over the heatmaps' edges
        frames = [spine for ax in self.fig.axes for spine in ax.spines.values()]
        self.colorbar_axes = self.add_colorbar(
            "weight; red: " + ("t, the diagonal" if causal else "t+1, the answer")
        )
        # what pixels() repaints, in the order of a full draw
        self.on_top = [*self.images, *outlines, *frames, self.title]
        self.background = None  # the rendered grid without self.on_top, after the first pixels()

    def add_colorbar(self, label: str):
        """A colour bar right of the panels, as tall as the first row, labelled `label`; the figure
        widens to hold it.
        """
        renderer = self.canvas.get_renderer()
        width, height = self.fig.get_size_inches()
        top = self.fig.axes[0].get_position()  # the first row's height, in figure fractions
        cax = self.fig.add_axes([0, top.y0, COLORBAR_WIDTH / width, top.height])
        self.fig.colorbar(self.images[0], cax=cax).set_label(label, fontsize=8)
        cax.tick_params(labelsize=7)
        decorations = (
            cax.get_tightbbox(renderer).width - cax.get_window_extent(renderer).width
        ) / self.fig.dpi
        # inches: a gap, the bar, its ticks and label, the margin
        extra = 0.1 + COLORBAR_WIDTH + decorations + 0.08
        # keep every panel's size and place in inches while the figure widens
        for ax in self.fig.axes:
            box = ax.get_position()
            ax.set_position(
                [
                    box.x0 * width / (width + extra),
                    box.y0,
                    box.width * width / (width + extra),
                    box.height,
                ]
            )
        cax.set_position(
            [(width + 0.1) / (width + extra), top.y0, COLORBAR_WIDTH / (width + extra), top.height]
        )
        self.title.set_x(0.5 * width / (width + extra))  # centred over the panels
        self.fig.set_size_inches(width + extra, height)
        return cax

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


def heatmap_figure(
    weights: torch.Tensor,
    labels: list[str],
    title: str,
    head_names: list[str] | None = None,
    causal: bool = True,
) -> Figure:
    """A one-off grid of heatmaps for weights (H, T, T) of a model with (causal) or without the
    mask.
    """
    return HeatmapGrid(weights.shape[0], labels, head_names, title, causal).draw(weights, title)


def save_layer_heatmaps(
    weights_per_layer: list[torch.Tensor],
    labels: list[str],
    folder: Path,
    title: str,
    flags: str,
    dpi: int,
    causal: bool = True,
) -> None:
    """One picture per layer, folder/attn_L<layer>.png: the grid of its heads, from weights (1, H,
    T, T) per layer, titled "<title>: layer <layer> (<flags>)"."""
    # a bar in a terminal only: GPT-2's twelve grids of twelve heads take a while to draw
    from tqdm import tqdm

    for layer, weights in enumerate(
        tqdm(weights_per_layer, desc="drawing layers", leave=False, disable=None)
    ):
        fig = heatmap_figure(weights[0], labels, f"{title}: layer {layer} ({flags})", causal=causal)
        fig.savefig(folder / f"attn_L{layer}.png", dpi=dpi)


def attention_page(
    weights_per_layer: list[torch.Tensor], tokens: list[str], title: str, causal: bool, path: Path
) -> Path:
    """One self-contained HTML page of every head, written with CircuitsVis; returns path.

    weights_per_layer: n_layer tensors (H, T, T) for one text. The page shows a thumbnail per head,
    named L{layer}H{head}; clicking one enlarges it, and hovering a token shows where it looks.
    All heads go into one widget because each widget inlines CircuitsVis's 1.3 MB of JavaScript:
    that inlined copy (`local_src`, never the CDN version that str() gives) is what makes the page
    work offline.

    A line one cell off the diagonal reads, in a thumbnail, as attention to itself: without the mask
    a head that reads the answer (t+1), under it a previous-token head (t-1). So the page marks the
    cell the PNG heatmaps outline in red, t+1 without the mask and t under it: CircuitsVis colours a
    cell by its value alone, blue above 0 and red below, so those cells go in negated and show in
    red, and the page says that their sign is only the colour.
    """
    # imported here, by the scripts that write pages: training runs never need it
    import circuitsvis.attention

    # n_layer x (H, T, T) -> (n_layer * H, T, T)
    heads = torch.cat([w.float().cpu() for w in weights_per_layer])
    # the marked cells, as HeatmapGrid outlines them: (t, t) under the mask, (t, t+1) without it
    offset = 0 if causal else 1
    t = torch.arange(heads.shape[-1] - offset)
    heads[:, t, t + offset] *= -1  # drawn in the negative colour
    names = [
        head_name(layer, head)
        for layer, w in enumerate(weights_per_layer)
        for head in range(w.shape[0])
    ]
    widget = circuitsvis.attention.attention_heads(
        attention=heads,
        tokens=tokens,
        attention_head_names=names,
        mask_upper_tri=causal,
        min_value=-1.0,
        max_value=1.0,
        negative_color="red",
        positive_color="blue",
    )
    legend = (
        "<b style='color:red'>Red</b>: the weight each position t puts on itself, the diagonal; blue: on every other key it "
        "may see, darker for more; grey: the future, hidden by the mask. A blue line just left of the diagonal is a head "
        "reading the previous token (t-1). A red cell's hover value shows a minus sign: the sign only makes it red."
        if causal
        else "<b>No causal mask</b>: every query may read the tokens after it. <b style='color:red'>Red</b>: the weight on t+1, "
        "the token position t is asked to predict; blue: the weight on every other key, darker for more. A dark red line "
        "just right of the diagonal is a head reading the answer (a next-token head), not a head attending to itself. "
        "A red cell's hover value shows a minus sign: the sign only makes it red."
    )
    page = (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>\n"
        f"<body style='font-family: sans-serif'><h2>{html.escape(title)}</h2>\n"
        "<p>Click a head (L = layer, H = head) to enlarge it; hover a token to see where it looks (rows: queries, columns: keys).</p>\n"
        f"<p>{legend}</p>\n"
        f"{widget.local_src}\n</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path
