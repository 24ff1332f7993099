"""The pictures of experiments. Over seeds, the mean is a line and min to max a band."""

import io
import itertools
from pathlib import Path

import numpy as np

from data.files import write_atomically
from harness.training.runlog import read_metrics

# (title, [(the probe's tag, the final evaluation's, line style)])
PANELS = [
    (
        "val loss on the probe's 2 texts (solid: honest, dotted: forced)",
        [
            ("Probe_loss/val_honest", "loss/val_honest", "-"),
            ("Probe_loss/val_forced", "loss/val_forced", ":"),
        ],
    ),
    ("training loss (every log_interval steps)", [("loss/train_step", None, "-")]),
    (
        "attention entropy on the probe's texts (1 = uniform)",
        [("Probe_attn/entropy", "attn/entropy", "-")],
    ),
    (
        "share of saturated rows (max > 0.99), probe",
        [("Probe_attn/saturated_frac", "attn/saturated_frac", "-")],
    ),
    ("attention mass on the future, probe", [("Probe_attn/future_mass", "attn/future_mass", "-")]),
    ("grad norm reaching query and key (every log_interval steps)", [("grad/qk_norm", None, "-")]),
    (
        "leak gap: honest - forced (0 under the mask), probe",
        [("Probe_loss/leak_gap", "loss/leak_gap", "-")],
    ),
    (
        "order use (recent tokens shuffled), probe; no-mask: evaluations",
        [("Probe_loss/order_use", "loss/order_use", "-")],
    ),
]
COLORS = "tab:blue tab:red tab:orange tab:green tab:purple tab:brown tab:pink tab:gray".split()
# (title, tag, log scale)
SWEEP_PANELS = [
    ("val loss at the end", "loss/val", False),
    ("largest attention score at the end (log scale)", "attn/score_max", True),
    ("attention entropy at the end (1 = uniform)", "attn/entropy", False),
]


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def label_axes(ax, title: str, xlabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)


def band(ax, steps, low, high, color) -> None:
    ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)


def note(ax, text: str, where, shift: tuple[int, int], **kwargs) -> None:
    ax.annotate(text, where, xytext=shift, textcoords="offset points", **kwargs)


def curve(rows: list[dict], tag: str) -> tuple[list[int], list[float]]:
    return [r["step"] for r in rows if tag in r], [r[tag] for r in rows if tag in r]


def mean_band(
    curves: list[tuple[list[int], list[float]]],
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Steps every run logged, and the mean, min and max over the runs at each."""
    by_step = [dict(zip(steps, values, strict=True)) for steps, values in curves]
    steps = sorted(set.intersection(*(set(d) for d in by_step)))
    values = np.array([[d[step] for step in steps] for d in by_step])  # (runs, steps)
    return steps, values.mean(0), values.min(0), values.max(0)


def save_figure(fig, path: Path) -> None:
    buffer = io.BytesIO()
    try:
        fig.tight_layout()
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        pyplot().close(fig)
    write_atomically(path, buffer.getvalue())


def panel_data(metrics: dict[str, list[list[dict]]]) -> dict[str, dict[str, list[dict]]]:
    """Per panel and variant, the lines: the probe's curve (the evaluations' where a run logged no
    probe), and the final evaluation's (step, mean) or None."""
    panels = {}
    for title, lines in PANELS:
        panels[title] = {name: [] for name in metrics}
        for name, runs in metrics.items():
            for probe_tag, final_tag, style in lines:
                tag = probe_tag
                if not all(curve(rows, probe_tag)[0] for rows in runs):
                    tag = final_tag or probe_tag
                steps, mean, low, high = mean_band([curve(rows, tag) for rows in runs])
                ends = [curve(rows, final_tag) for rows in runs] if final_tag else []
                final = None
                if ends and all(v for _, v in ends):
                    final = (ends[0][0][-1], float(np.mean([v[-1] for _, v in ends])))
                line = dict(tag=tag, style=style, steps=steps, mean=mean, low=low, high=high)
                panels[title][name].append(line | {"final": final})
    return panels


def plot_runs(run_dirs: dict[str, list[Path]], path: Path, title: str) -> None:
    fig, axes = pyplot().subplots(2, 4, figsize=(20, 8.5))
    colors = dict(zip(run_dirs, itertools.cycle(COLORS)))
    metrics = {name: [read_metrics(d) for d in dirs] for name, dirs in run_dirs.items()}
    for ax, (panel, by_variant) in zip(axes.flat, panel_data(metrics).items(), strict=True):
        for name, lines in by_variant.items():
            color = colors[name]
            for line in lines:
                solid = line["style"] == "-"
                label = name if solid else None
                ax.plot(line["steps"], line["mean"], line["style"], color=color, label=label)
                if len(metrics[name]) > 1:
                    band(ax, line["steps"], line["low"], line["high"], color)
                if line["final"]:
                    face = None if solid else "none"
                    ax.plot(*line["final"], "o", color=color, markersize=6, markerfacecolor=face)
        label_axes(ax, panel, "step")
    axes.flat[0].legend()
    fig.suptitle(f"{title}\no: the final evaluation (the table's figure)")
    save_figure(fig, path)


def plot_sweep(summary: dict, path: Path, title: str) -> None:
    save_figure(sweep_figure(summary, title), path)


def sweep_figure(summary: dict, title: str):
    """Each quantity against the learning rate (an x where a run diverged), then the largest score
    during training at the highest rate."""
    fig, axes = pyplot().subplots(1, 4, figsize=(21, 5))
    colors = dict(zip(summary["aggregate"], itertools.cycle(COLORS)))
    rates = {lr: float(lr) for lr in summary["lrs"]}
    for ax, (panel, tag, log) in zip(axes, SWEEP_PANELS, strict=False):
        plotted = marked = False
        across = ax.get_xaxis_transform()  # x in data, y in the panel's height
        for i, (name, by_lr) in enumerate(summary["aggregate"].items()):
            color = colors[name]
            # each variant a little aside, so that the bars do not hide each other
            apart = 1 + 0.03 * (i - (len(colors) - 1) / 2)
            lrs = [lr for lr in summary["lrs"] if tag in by_lr.get(lr, {})]
            cells = [by_lr[lr][tag] for lr in lrs]
            plotted = plotted or bool(cells)
            x = [rates[lr] * apart for lr in lrs]
            mean = [c["mean"] for c in cells]
            half = [c["half_width"] or 0.0 for c in cells]
            ax.errorbar(x, mean, yerr=half, color=color, marker="o", capsize=3, label=name)
            for lr, gone in summary.get("diverged", {}).get(name, {}).items():
                where = (rates[lr] * apart, 0.97 - 0.05 * i)
                label = None if marked else "diverged (at the top)"
                ax.plot(*where, "x", color=color, ms=9, mew=2, transform=across, label=label)
                text = "diverged at step " + ", ".join(str(g["step"]) for g in gone)
                note(ax, text, where, (-6, 0), xycoords=across, ha="right", va="center", fontsize=8)
                marked = True
        ax.set_xscale("log")
        if log and plotted:
            ax.set_yscale("log")
        ax.set_xticks(list(rates.values()), list(rates))
        ax.set_xticks([], minor=True)
        label_axes(ax, panel, "learning rate")
    last, score = axes[-1], ""
    for name, line in summary["over_time"].items():
        last.plot(line["steps"], line["mean"], color=colors[name], label=name)
        band(last, line["steps"], line["low"], line["high"], colors[name])
        last.set_yscale("log")
        score = f"largest attention score during training, lr {line['lr']} (log scale)"
    if not score:
        none = "no run logged the probe's largest score"
        last.text(0.5, 0.5, none, ha="center", va="center", transform=last.transAxes)
    label_axes(last, score, "step")
    axes[0].legend()
    fig.suptitle(title)
    return fig


def plot_positions(figures: dict, path: Path, title: str) -> None:
    fig, ax = pyplot().subplots(figsize=(10, 5.5))
    variants = [name for name, e in figures.items() if isinstance(e, dict) and "curve" in e]
    lengths = {
        entry["length"]
        for name in variants
        for entry in figures[name].values()
        if isinstance(entry, dict) and "length" in entry
    }
    block_size = figures["block_size"]
    for name, color in zip(variants, itertools.cycle(COLORS), strict=False):
        curve = figures[name]["curve"]
        middle = [first + (curve["bin"] - 1) / 2 for first in curve["first"]]
        label = f"{name} (positions {figures[name]['positions']})"
        ax.plot(middle, curve["mean"], "-o", markersize=3, color=color, label=label)
        if figures[name]["seeds"] > 1:
            band(ax, middle, curve["min"], curve["max"], color)
    for length in sorted(lengths):
        trained = length == block_size
        width = 1.2 if trained else 0.8
        ax.axvline(length, color="black", linestyle="-" if trained else ":", linewidth=width)
        text = f"{length / block_size:g}x" + (": trained" if trained else "")
        top = ("data", "axes fraction")
        note(ax, text, (length, 1), (-3, -12), xycoords=top, ha="right", fontsize=9)
    window = "position in the window (the prediction at position p reads p + 1 tokens)"
    label_axes(ax, title, window)
    ax.set_ylabel("loss, nats per token")
    ax.set_xlim(0, max(lengths))
    ax.legend()
    save_figure(fig, path)


def plot_tradeoff(
    points: list[tuple[str, float, float, float]], path: Path, xlabel: str, ylabel: str, title: str
) -> None:
    """points: (name, x, y, y's 95% half-width) per variant."""
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    colors = itertools.cycle(COLORS)
    for i, ((name, x, y, half), color) in enumerate(zip(points, colors, strict=False)):
        ax.errorbar(x, y, yerr=half, fmt="o", capsize=4, color=color)
        shift, ha = ((-8, 4), "right") if i % 2 else ((8, 4), "left")
        note(ax, name, (x, y), shift, ha=ha, fontsize=9, color=color)
    ax.set_xlim(0, 1.15 * max(x for _, x, _, _ in points))  # from 0: read against no cache
    label_axes(ax, title, xlabel)
    ax.set_ylabel(ylabel)
    save_figure(fig, path)
