"""Run the whole experiment in one command: python compare.py [--config char] [--seeds N] [--section.field=VALUE ...]

Trains the preset as it is, with --no-mask and with --no-scale, into one folder,
runs/compare-<config>/, so that `tensorboard --logdir runs/compare-<config>` overlays them.
Then prints a comparison table and the differences from base, and draws the runs' own logged
curves into compare.png.

--seeds N (default 1) trains every variant N times, with train.seed = the preset's seed + 0..N-1:
each seed changes the initialisation and the batch order, while the evaluation batches stay the
same. One seed is the default because it keeps the demo at three runs (about 3 minutes for char
on a laptop CPU); use --seeds 3 or more before trusting a difference, since only then can the
table show the seed-to-seed spread (mean ± standard deviation) and each difference from base a
95% interval. With N > 1 the run folders carry the seed (char-s1337, char-no-mask-s1338, ...).

Ctrl-C (or SIGTERM) stops the run in progress after its step, with a checkpoint, and ends the
comparison; the same command plus --resume continues it: finished runs are kept, the stopped
one resumes, the rest start. Without --resume an earlier comparison in the folder is moved aside
whole (to compare-<config>.old-<time>), so TensorBoard never overlays two comparisons.
"""

import dataclasses
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from configs import MAX_SEED, Config, ConfigError, load_config  # noqa: E402
from data.files import write_atomically  # noqa: E402
from engine.cli import run_command  # noqa: E402
from engine.folders import claim_run_folder  # noqa: E402
from engine.runlog import read_metrics  # noqa: E402
from engine.stats import COLUMNS, Difference, Spread, aggregate, column, format_table, paired_difference  # noqa: E402

TRAIN_PY = Path(__file__).resolve().parent / "train.py"

VARIANTS = {"base": {}, "no-mask": {"causal": False}, "no-scale": {"scaled": False}}
MAX_SEEDS = 100  # three training runs each: more would run for weeks (and a huge count used to exhaust memory planning them)
DIFFERENCE_COLUMNS = ["val", "val honest", "entropy", "saturated"]  # the quantities the ablations are about
PANELS = [  # (title, [(tag, line style)])
    ("loss (solid: val, dotted: val honest)", [("loss/val", "-"), ("loss/val_honest", ":")]),
    ("training loss", [("loss/train_step", "-")]),
    ("attention entropy (1 = uniform)", [("attn/entropy", "-")]),
    ("share of saturated rows (max > 0.99)", [("attn/saturated_frac", "-")]),
    ("attention mass on the future", [("attn/future_mass", "-")]),
    ("grad norm reaching query and key", [("grad/qk_norm", "-")]),
]


def take_seeds(argv: list[str]) -> tuple[int, list[str]]:
    """Pull `--seeds N` (or `--seeds=N`) out of argv; the rest goes to the config loader."""
    rest, n_seeds, i = [], "1", 0
    while i < len(argv):
        flag, has_eq, inline = argv[i].partition("=")
        if flag != "--seeds":
            rest.append(argv[i])
        elif has_eq:
            n_seeds = inline
        elif i + 1 < len(argv):
            n_seeds, i = argv[i + 1], i + 1
        else:
            raise ConfigError("--seeds needs a value, the number of seeds per variant (1 or more)")
        i += 1
    if not n_seeds.strip().isdigit() or not 1 <= int(n_seeds) <= MAX_SEEDS:
        raise ConfigError(f"--seeds takes the number of seeds per variant, 1 to {MAX_SEEDS}, got {n_seeds!r}")
    return int(n_seeds), rest


def variant_configs(cfg: Config, runs_dir: Path, n_seeds: int) -> dict[str, list[Config]]:
    """The runs, keyed by variant name (char, char-no-mask, ...): the preset as given and with the mask
    or the scale removed, each at seeds cfg.train.seed + 0..n_seeds-1. A variant's seed-s run shares
    initialisation and batches with base's seed-s run, which is what pairs them."""
    out = {}
    for flags in VARIANTS.values():
        model = dataclasses.replace(cfg.model, **{"causal": True, "scaled": True, **flags})
        one = dataclasses.replace(cfg, model=model, train=dataclasses.replace(cfg.train, runs_dir=str(runs_dir), run_name=""))
        seeds = [cfg.train.seed + i for i in range(n_seeds)]
        out[one.run_name] = [
            one if n_seeds == 1 else dataclasses.replace(one, train=dataclasses.replace(one.train, seed=s, run_name=f"{one.run_name}-s{s}"))
            for s in seeds
        ]
    return out


SET_PER_RUN = {
    "--runs-dir",
    "--train.runs_dir",
    "--run-name",
    "--train.run_name",
    "--train.seed",
    "--train.resume",
}  # compare.py sets these


def train_argv(argv: list[str], cfg: Config) -> list[str]:
    """train.py's arguments for one run: the user's own, less what compare.py sets per run, then the run's flags."""
    kept, i = [], 0
    while i < len(argv):
        flag, has_value, _ = argv[i].partition("=")
        if flag == "--resume":  # takes no value; each run is resumed or not as its folder says
            i += 1
            continue
        if flag in SET_PER_RUN:
            i += 1 if has_value else 2  # --flag=VALUE, or --flag VALUE
            continue
        kept.append(argv[i])
        i += 1
    flags = {"model.causal": cfg.model.causal, "model.scaled": cfg.model.scaled, "train.seed": cfg.train.seed}
    run_flags = [f"--{key}={str(value).lower()}" for key, value in flags.items()]
    return [*kept, *run_flags, "--runs-dir", cfg.train.runs_dir, "--run-name", cfg.run_name, *(["--resume"] if cfg.train.resume else [])]


class Children:
    """Runs train.py processes one at a time, and passes Ctrl-C and SIGTERM on to the one running.

    The child stops after its step and saves a checkpoint; this process waits for that, instead of
    killing the child (as subprocess.run does on Ctrl-C) or leaving it running (as a plain SIGTERM
    would). A Ctrl-C in a terminal reaches both processes; the child takes the second one calmly.
    """

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.signum: int | None = None
        self.previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            self.previous = {sig: signal.signal(sig, self.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def handle(self, signum, frame) -> None:
        self.signum = signum
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self, command: list[str]) -> int:
        """Start the command and wait for it to end; its exit code (not started if a stop was asked for already)."""
        if self.signum is not None:
            return 128 + self.signum
        self.child = subprocess.Popen(command)
        if self.signum is not None:  # the signal came while the child was being started
            self.child.send_signal(self.signum)
        code = self.child.wait()
        self.child = None
        return code

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def train_run(argv: list[str], cfg: Config, children: Children) -> dict:
    """`python train.py ...` in its own process, as a user would type it; its last evaluation and the process's wall time."""
    command = [sys.executable, str(TRAIN_PY), *train_argv(argv, cfg)]
    print("$ python train.py " + " ".join(command[2:]), flush=True)
    started = time.perf_counter()
    code = children.run(command)
    if code != 0:
        return {"exit_code": code}
    return {**evaluations(cfg.run_dir)[-1], "wall_s": time.perf_counter() - started, "exit_code": 0}


def evaluations(run_dir: Path) -> list[dict]:
    """The run's logged evaluations (the metrics.jsonl rows with a val loss), in order."""
    return [row for row in read_metrics(run_dir) if "loss/val" in row]


def finished_run(cfg: Config, saved_runs: dict) -> dict | None:
    """What a run of an earlier, stopped comparison gave, if it already finished with these settings; else None.

    Finished means a checkpoint and an evaluation at max_steps. Its numbers come from the earlier
    compare.json, which also holds its wall time, or else from its metrics.jsonl.
    """
    if not (cfg.run_dir / "ckpt.pt").is_file() or not (cfg.run_dir / "metrics.jsonl").is_file():
        return None
    last = (evaluations(cfg.run_dir) or [{}])[-1]
    if last.get("step") != cfg.train.max_steps:
        return None
    try:
        recorded = json.loads((cfg.run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = {}
    wanted = cfg.to_dict()
    differs = [
        f"{section}.{key} {recorded.get(section, {}).get(key)!r} vs {value!r}"
        for section in ("model", "data", "train")
        for key, value in wanted[section].items()
        if key not in ("vocab_size", "resume", "run_name") and recorded.get(section, {}).get(key) != value
    ]
    if differs:
        raise ConfigError(
            f"{cfg.run_dir} finished with other settings ({'; '.join(differs[:3])}); "
            "resume with the comparison's own flags, or start it afresh without --resume"
        )
    saved = saved_runs.get(cfg.run_name, {})
    return saved if saved.get("step") == last["step"] and saved.get("exit_code") == 0 else {**last, "exit_code": 0}


def curve(rows: list[dict], tag: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[tag]) for r in rows if tag in r]
    return [s for s, _ in points], [v for _, v in points]


def mean_band(curves: list[tuple[list[int], list[float]]]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Steps logged by every run, and the mean, min and max over the runs at each of them."""
    by_step = [dict(zip(steps, values, strict=True)) for steps, values in curves]
    steps = sorted(set.intersection(*(set(d) for d in by_step)))
    values = np.array([[d[step] for step in steps] for d in by_step]).reshape(len(curves), len(steps))  # (runs, steps)
    return steps, values.mean(0), values.min(0), values.max(0)


def plot_runs(run_dirs: dict[str, list[Path]], path: Path, title: str) -> None:
    """One panel per quantity; per variant the mean over its seeds as a line, min to max over seeds as a band."""
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    colors = dict(zip(run_dirs, ["tab:blue", "tab:red", "tab:orange", "tab:green"], strict=False))
    metrics = {name: [read_metrics(d) for d in dirs] for name, dirs in run_dirs.items()}  # each file read once
    for ax, (panel, tags) in zip(axes.flat, PANELS, strict=True):
        for name, runs in metrics.items():
            for tag, style in tags:
                steps, mean, low, high = mean_band([curve(rows, tag) for rows in runs])
                ax.plot(steps, mean, style, color=colors[name], label=name if style == "-" else None)
                if len(runs) > 1:
                    ax.fill_between(steps, low, high, color=colors[name], alpha=0.2, linewidth=0)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def differences(by_variant: dict[str, list[dict]]) -> dict[str, dict[str, Difference | None]]:
    """Each ablation against base (the first variant), paired by seed, for the difference columns."""
    (_, base), *ablations = by_variant.items()
    out: dict[str, dict[str, Difference | None]] = {}
    for name, runs in ablations:
        out[name] = {}
        for header, tag, _ in COLUMNS:
            if header in DIFFERENCE_COLUMNS:
                ablation_values, base_values = column(runs, tag), column(base, tag)
                missing = ablation_values is None or base_values is None
                out[name][tag] = None if missing else paired_difference(ablation_values, base_values)
    return out


def format_sigmas(sigmas: float) -> str:
    return "inf sd" if sigmas == float("inf") else f"{sigmas:.1f} sd"


def format_differences(diffs: dict[str, dict[str, Difference | None]], base_name: str, n_seeds: int) -> str:
    """A line per ablation: mean difference from base, and with several seeds the 95% interval and the size in base's seed sds."""
    if n_seeds == 1:
        head = f"difference from {base_name} (one seed: intervals need --seeds >= 2)"
    else:
        head = f"difference from {base_name}, paired by seed over {n_seeds} seeds: mean [95% interval], |mean| in seed standard deviations of {base_name}"
    headers = {tag: (header, fmt) for header, tag, fmt in COLUMNS}
    width = max(map(len, diffs), default=0)
    lines = [head]
    for name, by_tag in diffs.items():
        cells = []
        for tag, d in by_tag.items():
            header, fmt = headers[tag]
            if d is None:
                cells.append(f"{header} n/a")
            elif d.half_width is None:
                cells.append(f"{header} {d.mean:+{fmt}}")
            else:
                low, high = d.mean - d.half_width, d.mean + d.half_width
                cells.append(f"{header} {d.mean:+{fmt}} [{low:+{fmt}}, {high:+{fmt}}] {format_sigmas(d.sigmas)}")
        lines.append(f"  {name + ':':<{width + 1}} " + " | ".join(cells))
    return "\n".join(lines)


def to_json(value):
    """Spreads and differences as plain dicts; an infinite sd ratio as "inf", which JSON has no number for."""
    if isinstance(value, Spread | Difference):
        return {k: to_json(v) for k, v in dataclasses.asdict(value).items()}
    return "inf" if value == float("inf") else value


def main(argv: list[str]) -> dict[str, dict] | int:
    """Train every variant at every seed, then print and save the comparison; returns each run's summary by run name.

    A run that fails or is stopped ends the comparison with its exit code. --resume continues a
    stopped comparison: finished runs are kept as they are, a stopped run resumes from its
    checkpoint, and runs not yet begun start.
    """
    n_seeds, argv = take_seeds(argv)
    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        argv = ["--config", "char", *argv]
    cfg = load_config(argv)
    if not (cfg.model.causal and cfg.model.scaled):
        raise ConfigError("compare.py runs the --no-mask and --no-scale variants itself; leave those flags out")
    if cfg.train.seed + n_seeds - 1 > MAX_SEED:
        raise ConfigError(f"--seeds {n_seeds} from train.seed {cfg.train.seed} would pass the largest seed, {MAX_SEED}; lower train.seed")
    runs_dir = Path(cfg.train.runs_dir) / f"compare-{cfg.name}"
    if cfg.train.resume and not runs_dir.is_dir():
        raise ConfigError(f"nothing to resume: no comparison at {runs_dir}; start it without --resume")
    lock, moved = claim_run_folder(runs_dir, cfg.train.resume)  # afresh: an earlier comparison moves aside as a whole
    if moved:
        print(f"the earlier comparison in {runs_dir} moved to {moved}")
    plan = variant_configs(cfg, runs_dir, n_seeds)
    saved_runs = read_saved_runs(runs_dir) if cfg.train.resume else {}
    results = {}
    with Children() as children:
        for i in range(n_seeds):  # seed by seed: stopped early, the finished rounds are still complete pairs
            for variant, configs in plan.items():
                run_cfg = configs[i]
                done = finished_run(run_cfg, saved_runs) if cfg.train.resume else None
                if done is not None:
                    print(f"\n=== {variant}, seed {run_cfg.train.seed}: {run_cfg.run_name} finished already ===", flush=True)
                    results[run_cfg.run_name] = done
                    continue
                started = cfg.train.resume and (run_cfg.run_dir / "ckpt.pt").is_file()
                run_cfg = dataclasses.replace(run_cfg, train=dataclasses.replace(run_cfg.train, resume=started))
                print(f"\n=== {variant}, seed {run_cfg.train.seed}: {run_cfg.run_name} ===", flush=True)
                results[run_cfg.run_name] = train_run(argv, run_cfg, children)
                write_json(runs_dir / "compare.json", {"seeds": [c.train.seed for c in next(iter(plan.values()))], "runs": results})
                code = results[run_cfg.run_name]["exit_code"]
                if children.signum is not None or code in (130, 143):  # stopped by Ctrl-C or SIGTERM, after saving a checkpoint
                    print("comparison stopped; continue it with the same command plus --resume", file=sys.stderr)
                    return 128 + children.signum if children.signum else code
                if code != 0:
                    return code  # train.py has said why
    by_variant = {variant: [results[c.run_name] for c in configs] for variant, configs in plan.items()}
    rows = {variant: aggregate(runs) for variant, runs in by_variant.items()}
    diffs = differences(by_variant)
    band = f"{n_seeds} seeds per variant: line the mean, band min to max" if n_seeds > 1 else "same seed"
    plot_runs(
        {v: [c.run_dir for c in configs] for v, configs in plan.items()},
        runs_dir / "compare.png",
        f"{cfg.name}: {band}, {cfg.train.max_steps} steps",
    )
    summary = {
        "seeds": [c.train.seed for c in next(iter(plan.values()))],
        "runs": results,
        "aggregate": {variant: {tag: to_json(s) for tag, s in stats.items()} for variant, stats in rows.items()},
        "differences": {variant: {tag: to_json(d) for tag, d in by_tag.items()} for variant, by_tag in diffs.items()},
    }
    write_json(runs_dir / "compare.json", summary)
    lock.release()
    print(f"\n{format_table(rows)}\n\n{format_differences(diffs, next(iter(plan)), n_seeds)}")
    print(f"\ncurves: {runs_dir / 'compare.png'}; TensorBoard: tensorboard --logdir {runs_dir}")
    return results


def write_json(path: Path, value: dict) -> None:
    write_atomically(path, json.dumps(value, indent=2).encode())


def read_saved_runs(runs_dir: Path) -> dict:
    """The runs an earlier comparison recorded in compare.json (it is rewritten after each run), by run name."""
    try:
        runs = json.loads((runs_dir / "compare.json").read_text(encoding="utf-8")).get("runs", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return runs if isinstance(runs, dict) else {}


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:], usage=__doc__))
