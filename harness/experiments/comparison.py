"""compare.py's experiment: the preset as it is and with each ablation, over seeds, each run a
train.py process. train_runs, the loop that trains them, serves sweep.py too."""

import contextlib
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from operator import attrgetter
from pathlib import Path

from configs import MAX_SEED, Config, ConfigError
from data.files import write_atomically
from harness.arguments import EVERY, seed_count, variant_names
from harness.experiments.children import STOPPED_CODES, Children
from harness.experiments.outcomes import (
    diverged_run,
    earlier_outcome,
    killed_from_outside,
    read_saved_runs,
)
from harness.experiments.stats import aggregate, differences, to_json
from harness.folders import FolderLock, claim_run_folder
from harness.pictures.curves import plot_runs
from harness.training.runlog import evaluations
from model.ablations import CHANGES, applied, name_suffix, undone, variants

TRAIN_PY = Path(__file__).resolve().parents[2] / "train.py"


def plan_runs(
    cfg: Config, runs_dir: Path, n_seeds: int, names: list[str] | None = None, tag: str = ""
) -> dict[str, list[Config]]:
    """The runs by variant name (char, char-no-mask, ...), at seeds train.seed + 0..n_seeds-1;
    `names` picks the variants (None: each ablation alone); `tag` ends the name (a rate)."""
    try:
        planned = variants(cfg.model, names)
    except ValueError as e:
        raise ConfigError(
            f"{e}; leave it out of --variants, or change the model so that it fits"
        ) from None
    train = dataclasses.replace(cfg.train, runs_dir=str(runs_dir), run_name="")
    out = {}
    for model_cfg in planned.values():
        name = dataclasses.replace(cfg, model=model_cfg, train=train).run_name + tag
        out[name] = []
        for s in range(cfg.train.seed, cfg.train.seed + n_seeds):
            run_name = name if n_seeds == 1 else f"{name}-s{s}"
            seeded = dataclasses.replace(train, seed=s, run_name=run_name)
            out[name].append(dataclasses.replace(cfg, model=model_cfg, train=seeded))
    return out


def measured_from(plan: dict[str, list[Config]]) -> dict[str, list[str]]:
    """For each variant that changes several things, the planned ones that change one fewer."""
    out = {}
    for name, configs in plan.items():
        changed = applied(configs[0].model)
        if len(changed) > 1:
            fewer = {name_suffix(undone(configs[0].model, [c])) for c in changed}
            out[name] = [other for other, cs in plan.items() if name_suffix(cs[0].model) in fewer]
    return out


def figures(plan: dict[str, list[Config]], runs: dict[str, dict]) -> dict:
    """Each variant's aggregate over its seeds, and the differences paired by seed."""
    by_variant = {v: [runs[c.run_name] for c in configs] for v, configs in plan.items()}
    aggregates = {v: aggregate(r) for v, r in by_variant.items()}
    return {"aggregate": aggregates, "differences": differences(by_variant, measured_from(plan))}


def train_argv(
    config_name: str, overrides: list[tuple[str, str]], cfg: Config, also: tuple[str, ...] = ()
) -> list[str]:
    """train.py's arguments for one run: the user's overrides less those the run sets itself (and
    `also`, such as "train.lr"), then the run's own."""
    keys = [*(f"model.{c.field}" for c in CHANGES), *also, "train.seed", "train.runs_dir"]
    own = {key: attrgetter(key)(cfg) for key in keys} | {"train.run_name": cfg.run_name}
    if cfg.train.resume:
        own["train.resume"] = True
    set_per_run = {*own, "train.resume"}
    kept = [f"--{key}={value}" for key, value in overrides if key not in set_per_run]
    for key, value in own.items():
        kept.append(f"--{key}={str(value).lower() if isinstance(value, bool) else value}")
    return ["--config", config_name, *kept]


def add_seeds(parser, default: int, per: str) -> None:
    parser.add_argument(
        "--seeds",
        type=seed_count,
        default=default,
        help=f"runs per {per}, at seeds train.seed + 0..N-1 (default {default})",
    )


def add_variants(parser, what: str, default: str | None = None) -> None:
    """--variants for compare.py, sweep.py and bench.py (argparse parses a str default)."""
    parser.add_argument(
        "--variants",
        type=variant_names,
        default=default,
        metavar="NAMES",
        help=f"{what}, comma-separated, from {EVERY}; several at once joined by +",
    )


def write_json(path: Path, value: dict) -> None:
    write_atomically(path, json.dumps(value, indent=2).encode())


def kept(results: dict, runs_dir: Path) -> str:
    """A second Ctrl-C's abort line: the runs that finished."""
    done = ", ".join(name for name, result in results.items() if result.get("exit_code") == 0)
    done = f"finished and kept in {runs_dir}: {done}" if done else "no run had finished"
    return f"{done}; continue with the same command plus --resume"


def check_experiment(cfg: Config, n_seeds: int, script: str) -> None:
    """Refuse a change the experiment trains itself, and too many seeds."""
    if changed := applied(cfg.model):
        raise ConfigError(
            f"{script} trains the changed variants itself ({', '.join(c.flag for c in changed)}"
            " given); leave those flags out, and pick with --variants"
        )
    check_seed_range(cfg, n_seeds)


def check_seed_range(cfg: Config, n_seeds: int) -> None:
    if cfg.train.seed + n_seeds - 1 > MAX_SEED:
        raise ConfigError(
            f"--seeds {n_seeds} from train.seed {cfg.train.seed} would pass the largest seed, "
            f"{MAX_SEED}; lower train.seed"
        )


def claim_folder(folder: Path, resume: bool, what: str) -> FolderLock:
    """The folder, locked: to resume, one that exists; afresh, an earlier one moved."""
    if resume and not folder.is_dir():
        raise ConfigError(f"nothing to resume: no {what} at {folder}; start it without --resume")
    lock, moved = claim_run_folder(folder, resume, choose="--runs-dir")
    if moved:
        print(f"the earlier {what} in {folder} moved to {moved}")
    return lock


@contextlib.contextmanager
def summing_up(folder: Path, what: str) -> Iterator[None]:
    """A signal while summing up says every run is saved (run_command would not)."""
    try:
        yield
    except KeyboardInterrupt as e:
        interrupted = KeyboardInterrupt(
            f"interrupted while summarising the {what}; every run is saved in {folder}, "
            "and the same command plus --resume summarises it"
        )
        interrupted.signum = getattr(e, "signum", signal.SIGINT)
        raise interrupted from None


def train_runs(
    todo: list[tuple[str, Config]],
    train_args: Callable[[Config], list[str]],
    saved: Path,
    header: dict,
    resume: bool,
    jobs: int = 1,
    what: str = "comparison",
    keep_diverged: bool = False,
) -> dict | int:
    """Train each (label, config) of `todo`, `jobs` at a time (each then writing to <run name>.log):
    each run's last evaluation and wall time, or the exit code of the first that failed or stopped.
    After each run `saved` holds `header` and the runs so far."""
    folder, results, active, failed, died = saved.parent, {}, {}, 0, None
    saved_runs = read_saved_runs(saved) if resume else {}
    queue = list(enumerate(todo, start=1))
    with Children() as children:
        children.flag.saved = kept(results, folder)
        while queue or active:
            while queue and len(active) < jobs and not failed and children.signum is None:
                number, (label, run_cfg) = queue.pop(0)
                line = f"run {number} of {len(todo)}: {label}: {run_cfg.run_name}"
                done = earlier_outcome(run_cfg, saved_runs, keep_diverged) if resume else None
                if done is not None:
                    how = "finished"
                    if "diverged" in done:
                        how = f"diverged at step {done['diverged']['step']}"
                    print(f"\n=== {line} {how} already ===", flush=True)
                    results[run_cfg.run_name] = done
                    children.flag.saved = kept(results, folder)
                    continue
                started = resume and (run_cfg.run_dir / "ckpt.pt").is_file()
                run_cfg = dataclasses.replace(
                    run_cfg, train=dataclasses.replace(run_cfg.train, resume=started)
                )
                argv = train_args(run_cfg)
                print(f"\n=== {line} ===\n$ python train.py {' '.join(argv)}", flush=True)
                log = (folder / f"{run_cfg.run_name}.log").open("ab") if jobs > 1 else None
                child = children.start([sys.executable, str(TRAIN_PY), *argv], log)
                if child is None:
                    break
                active[child] = (run_cfg, time.perf_counter(), log)
            if not active:
                break
            child, code = children.wait()
            run_cfg, started, log = active.pop(child)
            name = run_cfg.run_name
            if log is not None:
                log.close()
                print(f"{name} ended (exit code {code}); its output is in {log.name}", flush=True)
            diverged = diverged_run(run_cfg.run_dir) if keep_diverged and code == 1 else None
            if code == 0:
                wall_s = time.perf_counter() - started
                last = evaluations(run_cfg.run_dir)[-1]
                results[name] = {**last, "wall_s": wall_s, "exit_code": 0}
            elif diverged is not None:
                results[name] = diverged
                step = diverged["diverged"]["step"]
                print(f"{name} diverged at step {step}; the {what} goes on", flush=True)
            else:
                results[name] = {"exit_code": code}
                if children.signum is None and died is None:
                    died = killed_from_outside(code, name, what)
                failed = failed or (1 if code < 0 else code)
            children.flag.saved = kept(results, folder)
            so_far = {c.run_name: results[c.run_name] for _, c in todo if c.run_name in results}
            write_json(saved, {**header, "runs": so_far})
    if children.signum is not None or failed in STOPPED_CODES:
        print(f"{what} stopped; continue it with the same command plus --resume", file=sys.stderr)
        return 128 + children.signum if children.signum else failed
    # the run could say nothing: after its progress bar, or alone when it wrote to its log
    if died is not None:
        print(f"\n{died}" if jobs == 1 else died, file=sys.stderr)
    # a failed run's train.py has said why
    return failed or {c.run_name: results[c.run_name] for _, c in todo}


def run_comparison(
    cfg: Config,
    config_name: str,
    overrides: list[tuple[str, str]],
    n_seeds: int,
    names: list[str] | None = None,
) -> dict | int:
    """Train every variant at every seed, then save compare.json and compare.png: the runs,
    aggregates and differences, or a failed run's exit code."""
    runs_dir = Path(cfg.train.runs_dir) / f"compare-{cfg.name}"
    # first: a variant the model cannot take leaves an earlier comparison in place
    plan = plan_runs(cfg, runs_dir, n_seeds, names)
    lock = claim_folder(runs_dir, cfg.train.resume, "comparison")
    seeds = [c.train.seed for c in next(iter(plan.values()))]
    # seed by seed: stopped early, the finished rounds are still complete pairs
    todo = [
        (f"{variant}, seed {seed}", configs[i])
        for i, seed in enumerate(seeds)
        for variant, configs in plan.items()
    ]
    results = train_runs(
        todo,
        lambda run: train_argv(config_name, overrides, run),
        runs_dir / "compare.json",
        {"seeds": seeds},
        cfg.train.resume,
    )
    if isinstance(results, int):
        return results
    band = "same seed"
    if n_seeds > 1:
        band = f"{n_seeds} seeds per variant: line the mean, band min to max"
    with summing_up(runs_dir, "comparison"):
        plot_runs(
            {v: [c.run_dir for c in configs] for v, configs in plan.items()},
            runs_dir / "compare.png",
            f"{cfg.name}: {band}, {cfg.train.max_steps} steps",
        )
        found = figures(plan, results)
        comparison = {"seeds": seeds, "runs": results, **found}
        write_json(runs_dir / "compare.json", {**comparison, **to_json(found)})
    lock.release()
    return {**comparison, "folder": runs_dir}
