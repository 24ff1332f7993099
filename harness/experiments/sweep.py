"""sweep.py's experiment: learning rates x variants x seeds. A rate too high grows the scores and
the softmax goes one-hot: --no-scale's saturation with the scale in place. Drawn as Wortsman et al.
(2023, "Small-scale proxies for large-scale Transformer training instabilities", Fig. 1) do."""

import dataclasses
from pathlib import Path

from configs import Config, ConfigError
from harness.arguments import rate_name
from harness.experiments.comparison import (
    claim_folder,
    figures,
    plan_runs,
    summing_up,
    train_argv,
    train_runs,
    write_json,
)
from harness.experiments.stats import (
    column,
    half_width,
    markdown_table,
    paired_difference,
    spread,
    to_json,
    what_figures_are,
)
from harness.pictures.curves import curve, mean_band, plot_sweep
from harness.training.runlog import evaluations, read_metrics

TAGS = (
    "loss/val",
    "loss/val_honest",
    "attn/score_max",
    "attn/entropy",
    "attn/saturated_frac",
    "attn/score_std",
    "attn/q_norm",
    "attn/k_norm",
)
DIFFERENCE_TAGS = ("loss/val", "attn/score_max", "attn/entropy")  # what the cures are about
LARGEST = "attn/score_max"
# the largest score every few steps (the probe): the sweep draws it at its highest rate
OVER_TIME = "Probe_attn/score_max"


def plan_sweep(
    cfg: Config, folder: Path, n_seeds: int, lrs: list[float], names: list[str]
) -> dict[str, dict[str, list[Config]]]:
    """{variant: {rate: its runs over the seeds}}, named as char-qk-norm-lr1.2e-1-s1337."""
    out: dict[str, dict[str, list[Config]]] = {}
    for lr in lrs:
        try:
            at = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr))
        except ValueError as e:
            raise ConfigError(
                f"--lrs {rate_name(lr)}: {e}; lower train.min_lr or leave that rate out"
            ) from None
        tag = f"-lr{rate_name(lr)}"
        for name, configs in plan_runs(at, folder, n_seeds, names, tag).items():
            out.setdefault(name.removesuffix(tag), {})[rate_name(lr)] = configs
    return out


def interval(values: list[float]) -> dict:
    """Mean, sample sd and the 95% interval's half width of a quantity over seeds."""
    s = spread(values)
    return {**dataclasses.asdict(s), "half_width": half_width(s)}


def paired(ends: dict[int, dict], others: dict[int, dict], tag: str) -> list[tuple[float, float]]:
    return [
        (end[tag], others[seed][tag])
        for seed, end in ends.items()
        if tag in end and tag in others.get(seed, {})
    ]


def summarise(
    plan: dict[str, dict[str, list[Config]]], runs: dict[str, dict], preset_lr: str | None
) -> dict:
    """Per variant and rate: the tags at the end, the largest score first and its growth, the seeds
    that diverged, the differences from base; the largest score over time at the highest rate;
    compare.py's figures at the preset's rate."""
    ends = {
        v: {lr: {c.train.seed: runs[c.run_name] for c in configs} for lr, configs in by_lr.items()}
        for v, by_lr in plan.items()
    }
    base = next(iter(plan))
    out = {key: {v: {} for v in plan} for key in ("aggregate", "first", "differences", "growth")}
    out |= {"diverged": {}, "over_time": {}}
    for v, by_lr in plan.items():
        for lr, configs in by_lr.items():
            gone = [
                {**end["diverged"], "seed": s}
                for s, end in ends[v][lr].items()
                if "diverged" in end
            ]
            if gone:
                out["diverged"].setdefault(v, {})[lr] = gone
            trained = {s: end for s, end in ends[v][lr].items() if "diverged" not in end}
            done = list(trained.values())
            out["aggregate"][v][lr] = {
                t: interval(values) for t in TAGS if (values := column(done, t))
            }
            starts = {
                c.train.seed: (evaluations(c.run_dir) or [{}])[0]
                for c in configs
                if c.train.seed in trained
            }
            if trained and len(pairs := paired(trained, starts, LARGEST)) == len(trained):
                out["first"][v][lr] = {LARGEST: interval([start for _, start in pairs])}
                growth = {"from_start": interval([end / start for end, start in pairs])}
                if preset_lr in by_lr and (pairs := paired(trained, ends[v][preset_lr], LARGEST)):
                    growth["from_preset_lr"] = interval([end / at_lr for end, at_lr in pairs])
                out["growth"][v][lr] = growth
            if v != base:
                out["differences"][v][lr] = {
                    t: to_json(paired_difference(*zip(*pairs, strict=True)))
                    for t in DIFFERENCE_TAGS
                    if (pairs := paired(trained, ends[base][lr], t))
                }
        top = list(plan[v])[-1]  # the highest rate: rates are planned smallest first
        # over the seeds that trained, or if none did, up to where they diverged
        shown = [c for c in plan[v][top] if "diverged" not in runs[c.run_name]] or plan[v][top]
        curves = [curve(read_metrics(c.run_dir), OVER_TIME) for c in shown]
        if all(steps for steps, _ in curves):
            steps, mean, low, high = mean_band(curves)
            line = {"mean": mean.tolist(), "low": low.tolist(), "high": high.tolist()}
            out["over_time"][v] = {"lr": top, "steps": steps, **line}
    if preset_lr is not None:
        out["preset"] = to_json(figures({v: by_lr[preset_lr] for v, by_lr in plan.items()}, runs))
    return out


COLUMNS = (
    ("val", "loss/val", ".3f"),
    ("largest score", "attn/score_max", ".1f"),
    ("entropy", "attn/entropy", ".3f"),
)


def diverged_cell(gone: list[dict], n_seeds: int) -> str:
    each = []
    for g in gone:
        where = f"at step {g['step']}"
        # None: the run logged no training loss before it diverged
        if g.get("last_loss") is not None:
            where += f" (last loss {g['last_loss']:.3f}, logged at step {g['last_loss_step']})"
        each.append(where if n_seeds == 1 else f"s{g['seed']} {where}")
    if n_seeds == 1 or not gone:
        return "; ".join(each)
    return f"{len(gone)} of {n_seeds} seeds: " + "; ".join(each)


def format_sweep(summary: dict, columns: tuple = COLUMNS, variants: list[str] | None = None) -> str:
    """Per rate and variant, mean ± 95% half width over the seeds that trained to the end (n/a:
    none did); a last column says where runs diverged."""
    gone = summary.get("diverged") or {}
    header = ["lr", "run", *(h for h, _, _ in columns)]
    rows = [header + ["diverged"] * bool(gone)]
    for lr in summary["lrs"]:
        for variant in variants or summary["aggregate"]:
            row = [lr, variant]
            for _, tag, fmt in columns:
                c = summary["aggregate"][variant][lr].get(tag)
                if c is None:
                    row.append("n/a")
                elif c["half_width"] is None:
                    row.append(f"{c['mean']:{fmt}}")
                else:
                    row.append(f"{c['mean']:{fmt}} ± {c['half_width']:{fmt}}")
            if gone:
                row.append(diverged_cell(gone.get(variant, {}).get(lr, []), len(summary["seeds"])))
            rows.append(row)
    return markdown_table(rows, "ll" + "r" * len(columns) + "l" * bool(gone))


def run_sweep(
    cfg: Config,
    config_name: str,
    overrides: list[tuple[str, str]],
    n_seeds: int,
    lrs: list[float],
    names: list[str],
    jobs: int = 1,
) -> dict | int:
    """Train every variant at every rate and seed, then save sweep.json and sweep.png: the summary,
    or a failed run's exit code."""
    folder = Path(cfg.train.runs_dir) / f"sweep-{cfg.name}"
    plan = plan_sweep(cfg, folder, n_seeds, lrs, names)  # first: a refused rate moves nothing
    lock = claim_folder(folder, cfg.train.resume, "sweep")
    rates = [rate_name(lr) for lr in lrs]
    seeds = [c.train.seed for c in plan[next(iter(plan))][rates[0]]]
    todo = [  # seed by seed: stopped early, the rounds done are complete
        (f"{v}, lr {lr}, seed {s}", plan[v][lr][i])
        for i, s in enumerate(seeds)
        for lr in rates
        for v in plan
    ]
    # each variant's run name and how --variants spells it
    spelled = dict(zip(list(plan)[1:], names, strict=True))
    preset = rate_name(cfg.train.lr)
    header = {"seeds": seeds, "lrs": rates, "variants": spelled, "preset_lr": preset}
    results = train_runs(
        todo,
        lambda run: train_argv(config_name, overrides, run, ("train.lr",)),
        folder / "sweep.json",
        header,
        cfg.train.resume,
        jobs,
        "sweep",
        keep_diverged=True,
    )
    if isinstance(results, int):
        return results
    with summing_up(folder, "sweep"):
        summary = {**header, **summarise(plan, results, preset if preset in rates else None)}
        write_json(folder / "sweep.json", {**summary, "runs": results})
        what = what_figures_are(n_seeds, per_point=True)
        title = f"{cfg.name}: {what}, {cfg.train.max_steps} steps, {cfg.train.optimizer}"
        plot_sweep(summary, folder / "sweep.png", title)
    lock.release()
    return {**summary, "folder": folder}
