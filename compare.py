"""Run the whole experiment in one command: python compare.py [--config char] [--section.field=VALUE ...]

Trains the preset three times with the same seed (as it is, --no-mask, --no-scale) into one
folder, runs/compare-<config>/, so that `tensorboard --logdir runs/compare-<config>` overlays
them. Then prints a comparison table and draws the runs' own logged curves into compare.png.
"""

import dataclasses
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from configs import Config, ConfigError, load_config  # noqa: E402

VARIANTS = {"base": {}, "no-mask": {"causal": False}, "no-scale": {"scaled": False}}
COLUMNS = [  # (header, metric tag, format)
    ("train", "loss/train", ".3f"),
    ("val", "loss/val", ".3f"),
    ("val honest", "loss/val_honest", ".3f"),
    ("leak gap", "loss/leak_gap", ".3f"),
    ("val bpc", "loss/val_bpc", ".3f"),
    ("entropy", "attn/entropy", ".3f"),
    ("saturated", "attn/saturated_frac", ".3f"),
    ("future mass", "attn/future_mass", ".3f"),
    ("score std", "attn/score_std", ".2f"),
    ("wall s", "wall_s", ".0f"),
]
PANELS = [  # (title, [(tag, line style)])
    ("loss (solid: val, dotted: val honest)", [("loss/val", "-"), ("loss/val_honest", ":")]),
    ("training loss", [("loss/train_step", "-")]),
    ("attention entropy (1 = uniform)", [("attn/entropy", "-")]),
    ("share of saturated rows (max > 0.99)", [("attn/saturated_frac", "-")]),
    ("attention mass on the future", [("attn/future_mass", "-")]),
    ("grad norm reaching query and key", [("grad/qk_norm", "-")]),
]


def variant_configs(cfg: Config, runs_dir: Path) -> dict[str, Config]:
    """The three runs: the preset as given, and with the mask or the scale removed; same seed, same steps."""
    out = {}
    for variant, flags in VARIANTS.items():
        model = dataclasses.replace(cfg.model, **{"causal": True, "scaled": True, **flags})
        train = dataclasses.replace(cfg.train, runs_dir=str(runs_dir), run_name="")
        out[variant] = dataclasses.replace(cfg, model=model, train=train)
    return out


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def curve(rows: list[dict], tag: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[tag]) for r in rows if tag in r]
    return [s for s, _ in points], [v for _, v in points]


def plot_runs(run_dirs: dict[str, Path], path: Path, title: str) -> None:
    """Overlay the logged curves of several runs, one panel per quantity."""
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    colors = dict(zip(run_dirs, ["tab:blue", "tab:red", "tab:orange", "tab:green"], strict=False))
    metrics = {name: read_metrics(run_dir) for name, run_dir in run_dirs.items()}  # each file read once
    for ax, (panel, tags) in zip(axes.flat, PANELS, strict=True):
        for name, rows in metrics.items():
            for tag, style in tags:
                steps, values = curve(rows, tag)
                ax.plot(steps, values, style, color=colors[name], label=f"{name}" if style == "-" else None)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def format_table(results: dict[str, dict]) -> str:
    lines = ["| run | " + " | ".join(h for h, _, _ in COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for name, summary in results.items():
        lines.append(f"| {name} | " + " | ".join(format(summary[tag], fmt) for _, tag, fmt in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> dict[str, dict]:
    from train import main as train_main

    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        argv = ["--config", "char", *argv]
    cfg = load_config(argv)
    if not (cfg.model.causal and cfg.model.scaled):
        raise ConfigError("compare.py runs the --no-mask and --no-scale variants itself; leave those flags out")
    runs_dir = Path(cfg.train.runs_dir) / f"compare-{cfg.name}"
    configs = variant_configs(cfg, runs_dir)
    results = {}
    for variant, variant_cfg in configs.items():
        print(f"\n=== {variant}: {variant_cfg.run_name} ===")
        results[variant_cfg.run_name] = train_main(variant_cfg)
        if results[variant_cfg.run_name]["signal"]:
            print(f"comparison stopped; resume this run with: python train.py --config {cfg.name} --runs-dir {runs_dir} --resume ...")
            raise SystemExit(128 + results[variant_cfg.run_name]["signal"])
    run_dirs = {c.run_name: c.run_dir for c in configs.values()}
    table = format_table(results)
    plot_runs(run_dirs, runs_dir / "compare.png", f"{cfg.name}: same seed, {cfg.train.max_steps} steps")
    summary = {name: {k: v for k, v in r.items() if k != "sample"} for name, r in results.items()}
    (runs_dir / "compare.json").write_text(json.dumps(summary, indent=2))
    print(f"\n{table}\n\ncurves: {runs_dir / 'compare.png'}; TensorBoard: tensorboard --logdir {runs_dir}")
    for name, r in results.items():
        print(f"\n--- sample from {name} ---\n{r['sample'][:300]}")
    return results


if __name__ == "__main__":
    from train import USER_ERRORS, TrainingError

    try:
        main(sys.argv[1:])
    except (*USER_ERRORS, TrainingError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1 if isinstance(e, TrainingError) else 2)
