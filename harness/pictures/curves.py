"""The picture of a comparison: each logged quantity per variant, the mean over seeds as a line and
min to max as a band.

The comparison's lines are the probe's curves (harness/training/probe.py: a point every few steps),
not the evaluations' (a char run evaluates twice: a straight line between two points); the final
evaluation's value, the figure compare.py's table prints, is a marker at the last step."""

import io
import itertools
from pathlib import Path

import numpy as np

from data.files import write_atomically
from harness.training.runlog import read_metrics

# (title, [(the probe's tag, the final evaluation's, line style)]): a probe tag for a curve with a
# point every few steps
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
FINAL = "o: the final evaluation (the table's figure)"  # said once, under the picture's title


# one per variant: base and the three ablations alone first, then the variants that remove several
# at once
COLORS = [
    "tab:blue",
    "tab:red",
    "tab:orange",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:gray",
]


def curve(rows: list[dict], tag: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[tag]) for r in rows if tag in r]
    return [s for s, _ in points], [v for _, v in points]


def mean_band(
    curves: list[tuple[list[int], list[float]]],
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Steps logged by every run, and the mean, min and max over the runs at each of them."""
    by_step = [dict(zip(steps, values, strict=True)) for steps, values in curves]
    steps = sorted(set.intersection(*(set(d) for d in by_step)))
    # (runs, steps)
    values = np.array([[d[step] for step in steps] for d in by_step]).reshape(
        len(curves), len(steps)
    )
    return steps, values.mean(0), values.min(0), values.max(0)


def save_figure(fig, path: Path) -> None:
    """fig as a PNG at path, whole or not at all (data/files.py): drawn into memory first, so that a
    picture cut short (a Ctrl-C while it is written) never leaves an empty or half file where an
    earlier one was."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    write_atomically(path, buffer.getvalue())


def panel_data(metrics: dict[str, list[list[dict]]]) -> dict[str, dict[str, list[dict]]]:
    """What each panel of plot_runs draws, from each variant's runs' metrics.jsonl rows: per panel
    title and variant, per line its tag, style, steps, mean, min and max over the runs (mean_band),
    and the final evaluation's value at its step (the mean over the runs, or None). A line is the
    probe's curve (a point every few steps); a run that logged no probe (--train.probes=0, or order
    use without the mask) draws the evaluations' curve of that quantity instead, if any."""
    panels = {}
    for title, lines in PANELS:
        panels[title] = {name: [] for name in metrics}
        for name, runs in metrics.items():
            for probe_tag, final_tag, style in lines:
                tag = (
                    probe_tag
                    if all(curve(rows, probe_tag)[0] for rows in runs)
                    else final_tag or probe_tag
                )
                steps, mean, low, high = mean_band([curve(rows, tag) for rows in runs])
                ends = [curve(rows, final_tag) for rows in runs] if final_tag else []
                final = (
                    (ends[0][0][-1], float(np.mean([v[-1] for _, v in ends])))
                    if ends and all(v for _, v in ends)
                    else None
                )
                panels[title][name].append(
                    {
                        "tag": tag,
                        "style": style,
                        "steps": steps,
                        "mean": mean,
                        "low": low,
                        "high": high,
                        "final": final,
                    }
                )
    return panels


def plot_runs(run_dirs: dict[str, list[Path]], path: Path, title: str) -> None:
    """One panel per quantity (panel_data); per variant the mean over its seeds as a line, min to
    max over seeds as a band, and the final evaluation's value (what compare.py's table prints) as a
    marker at its step."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt  # imported here: only a finished comparison draws

    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    # past eight variants the colours come round again
    colors = dict(zip(run_dirs, itertools.cycle(COLORS)))
    # each file read once
    metrics = {name: [read_metrics(d) for d in dirs] for name, dirs in run_dirs.items()}
    for ax, (panel, by_variant) in zip(axes.flat, panel_data(metrics).items(), strict=True):
        for name, lines in by_variant.items():
            for line in lines:
                ax.plot(
                    line["steps"],
                    line["mean"],
                    line["style"],
                    color=colors[name],
                    label=name if line["style"] == "-" else None,
                )
                if len(metrics[name]) > 1:
                    ax.fill_between(
                        line["steps"],
                        line["low"],
                        line["high"],
                        color=colors[name],
                        alpha=0.2,
                        linewidth=0,
                    )
                if line["final"]:
                    ax.plot(
                        *line["final"],
                        "o",
                        color=colors[name],
                        markersize=6,
                        markerfacecolor="none" if line["style"] != "-" else None,
                    )
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(f"{title}\n{FINAL}")
    fig.tight_layout()
    save_figure(fig, path)


# (title, tag, log scale): each quantity at the end of training against the learning rate
SWEEP_PANELS = [
    ("val loss at the end", "loss/val", False),
    ("largest attention score at the end (log scale)", "attn/score_max", True),
    ("attention entropy at the end (1 = uniform)", "attn/entropy", False),
]


def plot_sweep(summary: dict, path: Path, title: str) -> None:
    """sweep.py's picture (sweep_figure) into path."""
    save_figure(sweep_figure(summary, title), path)


def sweep_figure(summary: dict, title: str):
    """sweep.py's picture, from its summary alone (sweep.json, or docs/figures.json's record of it):
    per variant, each quantity against the learning rate, the mean over seeds with its 95% interval
    as error bars, and an x at the panel's top where a run diverged; then the largest score during
    training at the highest rate, the mean over seeds with min to max as a band."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(21, 5))
    colors = dict(zip(summary["aggregate"], itertools.cycle(COLORS)))
    rates = {lr: float(lr) for lr in summary["lrs"]}
    for ax, (panel, tag, log) in zip(axes, SWEEP_PANELS, strict=False):
        # runs logged before a tag existed have none; marked: a diverged run drawn already
        plotted = marked = False
        for i, (name, by_lr) in enumerate(summary["aggregate"].items()):
            # each variant a little to the side, so that the bars do not hide each other
            apart = 1 + 0.03 * (i - (len(colors) - 1) / 2)
            points = [
                (rates[lr] * apart, by_lr[lr][tag])
                for lr in summary["lrs"]
                if tag in by_lr.get(lr, {})
            ]
            plotted = plotted or bool(points)
            x, cells = [p[0] for p in points], [p[1] for p in points]
            ax.errorbar(
                x,
                [c["mean"] for c in cells],
                yerr=[c["half_width"] or 0.0 for c in cells],
                color=colors[name],
                marker="o",
                capsize=3,
                label=name,
            )
            # at the panel's top: no value of theirs to draw
            for lr, gone in summary.get("diverged", {}).get(name, {}).items():
                where = (rates[lr] * apart, 0.97 - 0.05 * i)  # x in data, y in the panel's height
                ax.plot(
                    *where,
                    "x",
                    color=colors[name],
                    markersize=9,
                    markeredgewidth=2,
                    transform=ax.get_xaxis_transform(),
                    label=None if marked else "diverged (at the top)",
                )
                steps = ", ".join(str(g["step"]) for g in gone)
                ax.annotate(
                    f"diverged at step {steps}",
                    where,
                    xycoords=ax.get_xaxis_transform(),
                    xytext=(-6, 0),
                    textcoords="offset points",
                    ha="right",
                    va="center",
                    fontsize=8,
                )
                marked = True
        ax.set_xscale("log")
        ax.set_yscale("log" if log and plotted else "linear")
        # the rates as the sweep spells them, and no other ticks
        ax.set_xticks(list(rates.values()), list(rates))
        ax.set_xticks([], minor=True)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("learning rate")
        ax.grid(alpha=0.3)
    last = axes[len(SWEEP_PANELS)]
    for name, line in summary["over_time"].items():
        last.plot(line["steps"], line["mean"], color=colors[name], label=name)
        last.fill_between(
            line["steps"], line["low"], line["high"], color=colors[name], alpha=0.2, linewidth=0
        )
        last.set_title(
            f"largest attention score during training, lr {line['lr']} (log scale)", fontsize=10
        )
    if summary["over_time"]:
        last.set_yscale("log")
    else:  # runs that logged no probe (--train.probes=0)
        last.text(
            0.5,
            0.5,
            "no run logged the probe's largest score",
            ha="center",
            va="center",
            transform=last.transAxes,
        )
    last.set_xlabel("step")
    last.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_positions(figures: dict, path: Path, title: str) -> None:
    """The loss at each position of a window (tools/figures.py's context_figures): per variant,
    along the longest context it was scored at, the mean over seeds as a line and min to max as a
    band; the contexts' lengths marked, 1x solid."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt  # imported here: only recording the figures draws

    fig, ax = plt.subplots(figsize=(10, 5.5))
    variants = [
        name for name, entry in figures.items() if isinstance(entry, dict) and "curve" in entry
    ]
    lengths = sorted(
        {
            entry["length"]
            for name in variants
            for entry in figures[name].values()
            if isinstance(entry, dict) and "length" in entry
        }
    )
    for name, color in zip(variants, itertools.cycle(COLORS), strict=False):
        curve = figures[name]["curve"]
        # each bin drawn at its middle position
        middle = [first + (curve["bin"] - 1) / 2 for first in curve["first"]]
        ax.plot(
            middle,
            curve["mean"],
            "-o",
            markersize=3,
            color=color,
            label=f"{name} (positions {figures[name]['positions']})",
        )
        if figures[name]["seeds"] > 1:
            ax.fill_between(middle, curve["min"], curve["max"], color=color, alpha=0.2, linewidth=0)
    for length in lengths:
        trained = length == figures["block_size"]
        ax.axvline(
            length,
            color="black",
            linestyle="-" if trained else ":",
            linewidth=1.2 if trained else 0.8,
        )
        ax.annotate(
            f"{length / figures['block_size']:g}x" + (": trained" if trained else ""),
            (length, 1),
            xycoords=("data", "axes fraction"),
            xytext=(-3, -12),
            textcoords="offset points",
            ha="right",
            fontsize=9,
        )
    ax.set_xlabel("position in the window (the prediction at position p reads p + 1 tokens)")
    ax.set_ylabel("loss, nats per token")
    ax.set_xlim(0, max(lengths))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)


def plot_tradeoff(
    points: list[tuple[str, float, float, float]], path: Path, xlabel: str, ylabel: str, title: str
) -> None:
    """One point per variant, (name, x, y, the 95% half-width of y over seeds): what a variant costs
    (y, such as the val loss) against what it saves (x, such as the KV cache's bytes per token)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt  # imported here: only recording the figures draws

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, ((name, x, y, half), color) in enumerate(
        zip(points, itertools.cycle(COLORS), strict=False)
    ):
        ax.errorbar(x, y, yerr=half, fmt="o", capsize=4, color=color)
        # points at one x: either side
        side = {"xytext": (-8, 4), "ha": "right"} if i % 2 else {"xytext": (8, 4), "ha": "left"}
        ax.annotate(name, (x, y), textcoords="offset points", fontsize=9, color=color, **side)
    # from 0: a cache's size is read against none
    ax.set_xlim(0, 1.15 * max(x for _, x, _, _ in points))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
