"""Heatmaps of attention weights, one panel per head, built without pyplot so that nothing global
is kept; and an interactive HTML page of every head."""

import html
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from model.heads import head_name

TITLE_HEIGHT = 0.3  # inches
COLORBAR_WIDTH = 0.12  # inches


def fit_panels(fig: Figure, axes: np.ndarray, panel: float, title: Text, bar, pad=0.08) -> None:
    """Size fig so that square panels of `panel` inches keep their labels whole (each column as wide
    as its widest labels need, each row as tall as its tallest); the colour bar by the first row."""
    placed = set(fig.axes)
    renderer = fig.canvas.get_renderer()
    margins = np.zeros((*axes.shape, 4))  # pixels: left, right, below, above
    for (r, c), ax in np.ndenumerate(axes):
        if ax in placed:
            box, tight = ax.get_window_extent(renderer), ax.get_tightbbox(renderer)
            margins[r, c] = (
                box.x0 - tight.x0,
                tight.x1 - box.x1,
                box.y0 - tight.y0,
                tight.y1 - box.y1,
            )
    left, right = margins[..., :2].max(0).T / fig.dpi
    below, above = margins[..., 2:].max(1).T / fig.dpi
    # inches from the left edge, and from the top
    x0 = pad + starts(left + panel + right + pad) + left
    title_box = title.get_window_extent(renderer)
    title_height = max(title_box.height / fig.dpi, TITLE_HEIGHT)
    top = pad + title_height + starts(above + panel + below + pad) + above
    width, height = x0[-1] + panel + right[-1] + pad, top[-1] + panel + below[-1] + pad
    # a title wider than the panels: widen both sides
    extra = max(0.0, title_box.width / fig.dpi + 2 * pad - width)
    x0, width = x0 + extra / 2, width + extra
    box, tight = bar.get_window_extent(renderer), bar.get_tightbbox(renderer)
    # inches: a gap, the bar, its ticks and label, the margin
    wide = width + (0.1 + COLORBAR_WIDTH + (tight.width - box.width) / fig.dpi + 0.08)
    fig.set_size_inches(wide, height)
    for (r, c), ax in np.ndenumerate(axes):
        if ax in placed:
            y0 = 1 - (top[r] + panel) / height
            ax.set_position([x0[c] / wide, y0, panel / wide, panel / height])
    y0 = 1 - (top[0] + panel) / height
    bar.set_position([(width + 0.1) / wide, y0, COLORBAR_WIDTH / wide, panel / height])
    title.set_position((0.5 * width / wide, 1 - pad / height))  # centred over the panels


def starts(sizes: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(sizes)[:-1]])


class HeatmapGrid:
    """Heatmaps of weights (H, T, T), laid out once: pixels() paints only heatmaps and title over a
    saved copy (blitting). A red outline, t or without the mask t+1, marks each row's cell."""

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
        panel = 1.2 + 0.08 * T  # inches per heatmap
        fontsize = max(4, min(9, 72 * panel / max(T, 1)))  # points: a label as tall as its cell
        self.images, outlines = [], []
        offset = 0 if causal else 1  # the outlined cells: (t, t + offset)
        for h, ax in enumerate(axes.flat[:n_heads]):
            self.images.append(ax.imshow(np.zeros((T, T)), cmap="viridis", vmin=0.0, vmax=1.0))
            for t in range(T - offset):
                corner = (t + offset - 0.5, t - 0.5)
                box = Rectangle(corner, 1, 1, fill=False, edgecolor="red", linewidth=0.6)
                outlines.append(ax.add_patch(box))
            ax.set_title(head_names[h] if head_names else f"head {h}", fontsize=9)
            ax.set_xticks(range(T), labels, rotation=90, fontsize=fontsize)
            if h % cols == 0:  # slow to draw: once a row
                ax.set_yticks(range(T), labels, fontsize=fontsize)
                ax.set_ylabel("queries (rows)", fontsize=8)
            else:
                ax.set_yticks([])
            if h + cols >= n_heads:  # the lowest panel of each column
                ax.set_xlabel("keys (columns): attended to", fontsize=8)
        self.title = self.fig.suptitle(title, va="top")
        bar = self.fig.add_axes([0, 0, 0.02, 0.5])
        label = "weight; red: " + ("t, the diagonal" if causal else "t+1, the answer")
        self.fig.colorbar(self.images[0], cax=bar).set_label(label, fontsize=8)
        bar.tick_params(labelsize=7)
        fit_panels(self.fig, axes, panel, self.title, bar)
        frames = [spine for ax in axes.flat[:n_heads] for spine in ax.spines.values()]
        # what pixels() repaints, in the order of a full draw
        self.on_top = [*self.images, *outlines, *frames, self.title]
        self.background = None

    def draw(self, weights: torch.Tensor, title: str) -> Figure:
        for image, head_weights in zip(self.images, weights, strict=True):
            image.set_data(head_weights.float().cpu().numpy())
        self.title.set_text(title)
        return self.fig

    def pixels(self, weights: torch.Tensor, title: str) -> np.ndarray:
        """(height, width, 3) uint8 RGB."""
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
    return HeatmapGrid(weights.shape[0], labels, head_names, title, causal).draw(weights, title)


def save_layer_heatmaps(
    weights_per_layer: list[torch.Tensor],
    labels: list[str],
    folder: Path,
    title: str,
    flags: str,
    dpi: int,
    causal: bool = True,
    per_head: bool = False,
) -> None:
    """attn_L<layer>.png per layer of weights (1, H, T, T), and with per_head each head's."""
    from tqdm import tqdm

    bar = tqdm(weights_per_layer, desc="drawing layers", leave=False, disable=None)
    for layer, weights in enumerate(bar):
        fig = heatmap_figure(weights[0], labels, f"{title}: layer {layer} ({flags})", causal=causal)
        fig.savefig(folder / f"attn_L{layer}.png", dpi=dpi)
        for head in range(weights.shape[1] if per_head else 0):
            named = [head_name(layer, head)]
            one = weights[0, head : head + 1]
            fig = heatmap_figure(one, labels, f"{title}: layer {layer}, head {head}", named, causal)
            fig.savefig(folder / f"attn_L{layer}_H{head}.png", dpi=dpi)


MASKED_LEGEND = (
    "<b style='color:red'>Red</b>: the weight each position t puts on itself, the diagonal; blue: "
    "on every other key it may see, darker for more; grey: the future, hidden by the mask. A blue "
    "line just left of the diagonal is a head reading the previous token (t-1). "
)
UNMASKED_LEGEND = (
    "<b>No causal mask</b>: every query may read the tokens after it. "
    "<b style='color:red'>Red</b>: the weight on t+1, the token position t is asked to predict; "
    "blue: the weight on every other key, darker for more. A dark red line just right of the "
    "diagonal is a head reading the answer (a next-token head), not a head attending to itself. "
)


def attention_page(
    weights_per_layer: list[torch.Tensor], tokens: list[str], title: str, causal: bool, path: Path
) -> Path:
    """One widget (each inlines CircuitsVis's 1.3 MB of JavaScript); the outlined cells negated, so
    that CircuitsVis shows them in red."""
    import circuitsvis.attention

    heads = torch.cat([w.float().cpu() for w in weights_per_layer])  # (n_layer * H, T, T)
    offset = 0 if causal else 1  # as HeatmapGrid outlines
    t = torch.arange(heads.shape[-1] - offset)
    heads[:, t, t + offset] *= -1
    names = [
        head_name(layer, h) for layer, w in enumerate(weights_per_layer) for h in range(len(w))
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
    legend = MASKED_LEGEND if causal else UNMASKED_LEGEND
    page = (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "</head>\n"
        f"<body style='font-family: sans-serif'><h2>{html.escape(title)}</h2>\n"
        "<p>Click a head (L = layer, H = head) to enlarge it; hover a token to see where it looks "
        "(rows: queries, columns: keys).</p>\n"
        f"<p>{legend}A red cell's hover value shows a minus sign: the sign only makes it red.</p>\n"
        f"{widget.local_src}\n</body></html>\n"
    )
    path.write_text(page, encoding="utf-8")
    return path
