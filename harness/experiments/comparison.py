"""The experiment of compare.py: the preset as it is and with each ablation, at one or more seeds,
each run a `python train.py ...` process (harness/experiments/children.py), with Ctrl-C, SIGTERM and
SIGHUP passed on and --resume continuing a stopped one. train_runs, the loop that trains a list of
runs that way, serves sweep.py's experiment too."""

import contextlib
import dataclasses
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from configs import MAX_SEED, Config, ConfigError
from data.files import write_atomically
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
SET_PER_RUN = {
    "train.runs_dir",
    "train.run_name",
    "train.seed",
    "train.resume",
    *(f"model.{c.field}" for c in CHANGES),
}


def plan_runs(
    cfg: Config, runs_dir: Path, n_seeds: int, names: list[str] | None = None, tag: str = ""
) -> dict[str, list[Config]]:
    """The runs, keyed by variant name (char, char-no-mask, ...): the preset as given and with the
    mask, the scale or the positions removed, or a cure or rope added (model/ablations.py; `names`
    picks some, "no-mask+no-pos" removes both, None takes each ablation alone), each at seeds
    cfg.train.seed + 0..n_seeds-1. A variant's seed-s run shares base's seed-s init and batches.
    `tag` follows the variant's name in its key and run names (sweep.py's learning rate:
    char-qk-norm-lr1.2e-1-s1337)."""
    try:
        planned = variants(cfg.model, names)
    except ValueError as e:
        raise ConfigError(
            f"{e}; leave it out of --variants, or change the model so that it fits"
        ) from None
    out = {}
    for model_cfg in planned.values():
        one = dataclasses.replace(
            cfg,
            model=model_cfg,
            train=dataclasses.replace(cfg.train, runs_dir=str(runs_dir), run_name=""),
        )
        name = one.run_name + tag
        seeds = [cfg.train.seed + i for i in range(n_seeds)]
        out[name] = [
            dataclasses.replace(
                one,
                train=dataclasses.replace(
                    one.train, seed=s, run_name=name if n_seeds == 1 else f"{name}-s{s}"
                ),
            )
            for s in seeds
        ]
    return out


def measured_from(plan: dict[str, list[Config]]) -> dict[str, list[str]]:
    """For each variant that changes several things, the variants in the plan that change one fewer:
    what it is measured from besides base (char-no-mask-no-pos from char-no-mask and char-no-pos,
    when they are trained)."""
    out = {}
    for name, configs in plan.items():
        changed = applied(configs[0].model)
        if len(changed) > 1:
            fewer = {name_suffix(undone(configs[0].model, [c])) for c in changed}
            # in the plan's order
            out[name] = [
                other for other, theirs in plan.items() if name_suffix(theirs[0].model) in fewer
            ]
    return out


def train_argv(
    config_name: str, overrides: list[tuple[str, str]], cfg: Config, also: tuple[str, ...] = ()
) -> list[str]:
    """train.py's arguments for one run: the user's preset and overrides (as the config loader read
    them, dotted), less the keys compare.py sets per run (and `also`, dotted keys an experiment sets
    per run too: "train.lr"), then the run's own."""
    kept = [f"--{key}={value}" for key, value in overrides if key not in SET_PER_RUN | set(also)]
    own = {
        **{f"model.{c.field}": getattr(cfg.model, c.field) for c in CHANGES},
        **{key: getattr(getattr(cfg, key.split(".")[0]), key.split(".")[1]) for key in also},
        "train.seed": cfg.train.seed,
        "train.runs_dir": cfg.train.runs_dir,
        "train.run_name": cfg.run_name,
        **({"train.resume": True} if cfg.train.resume else {}),
    }
    return [
        "--config",
        config_name,
        *kept,
        *(
            f"--{key}={str(value).lower() if isinstance(value, bool) else value}"
            for key, value in own.items()
        ),
    ]


def write_json(path: Path, value: dict) -> None:
    write_atomically(path, json.dumps(value, indent=2).encode())


def kept(results: dict, runs_dir: Path) -> str:
    """What a second Ctrl-C leaves of the experiment, for its abort line: the runs that finished
    (those under way say for themselves what they kept)."""
    finished = [name for name, result in results.items() if result.get("exit_code") == 0]
    done = (
        f"finished and kept in {runs_dir}: {', '.join(finished)}"
        if finished
        else "no run had finished"
    )
    return f"{done}; continue with the same command plus --resume"


def check_experiment(cfg: Config, n_seeds: int, script: str) -> None:
    """Refuse, in one line, what an experiment's command line cannot mean: a change it trains
    itself, too many seeds.
    """
    if applied(cfg.model):
        flags = ", ".join(c.flag for c in applied(cfg.model))
        raise ConfigError(
            f"{script} trains the changed variants itself ({flags} given); leave those flags out, and pick with --variants"
        )
    check_seed_range(cfg, n_seeds)


def check_seed_range(cfg: Config, n_seeds: int) -> None:
    """Refuse seeds train.seed .. train.seed + n_seeds - 1 that pass the largest seed torch takes,
    in one line.
    """
    if cfg.train.seed + n_seeds - 1 > MAX_SEED:
        raise ConfigError(
            f"--seeds {n_seeds} from train.seed {cfg.train.seed} would pass the largest seed, {MAX_SEED}; lower train.seed"
        )


def claim_folder(folder: Path, resume: bool, what: str) -> FolderLock:
    """An experiment's folder, locked: to resume, one that exists; afresh, an earlier one there
    moved aside as a whole.
    """
    if resume and not folder.is_dir():
        raise ConfigError(f"nothing to resume: no {what} at {folder}; start it without --resume")
    # the folder is named for the preset: --runs-dir moves it
    lock, moved = claim_run_folder(folder, resume, choose="--runs-dir")
    if moved:
        print(f"the earlier {what} in {folder} moved to {moved}")
    return lock


@contextlib.contextmanager
def summing_up(folder: Path, what: str) -> Iterator[None]:
    """The summary, table and picture of an experiment whose every run is saved: a signal meanwhile
    (run_command's KeyboardInterrupt, with its number) says so in its line, where run_command would
    say that nothing was saved."""
    try:
        yield
    except KeyboardInterrupt as e:
        interrupted = KeyboardInterrupt(
            f"interrupted while summarising the {what}; every run is saved in {folder}, and the same command plus --resume summarises it"
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
    """Train each (label, run config) of `todo` in its own `python train.py <train_args(config)>`
    process, as a user would type it, `jobs` at a time, in todo's order; returns each run's last
    evaluation and wall time by run name.

    After each run, `saved` (the folder's compare.json or sweep.json) holds `header` and the runs so
    far. With resume, a run that finished with these settings is kept as it is, a stopped one
    resumes, the rest start. A run that fails
    or is stopped ends it: no run starts after it, those under way finish (or stop, given the signal
    too), and its exit code is returned; a run ended from outside by a signal (SIGKILL) is one line
    naming it, and exit code 1. With keep_diverged (sweep.py) a run whose loss or gradient stopped
    being finite is a result, not a failure: recorded as diverged (outcomes.diverged_run), the runs
    after it go on, and resume keeps it. With jobs > 1 each run writes its terminal output to <run
    name>.log beside its folder. `what` names the experiment in its lines.
    """
    folder, results, active, failed, died = saved.parent, {}, {}, 0, None
    saved_runs = read_saved_runs(saved) if resume else {}
    queue = list(enumerate(todo, start=1))
    with Children() as children:
        children.flag.saved = kept(results, folder)
        while queue or active:
            while queue and len(active) < jobs and not failed and children.signum is None:
                number, (label, run_cfg) = queue.pop(0)
                # the experiment's progress
                line = f"run {number} of {len(todo)}: {label}: {run_cfg.run_name}"
                if (
                    done := earlier_outcome(run_cfg, saved_runs, keep_diverged) if resume else None
                ) is not None:
                    how = (
                        f"diverged at step {done['diverged']['step']}"
                        if "diverged" in done
                        else "finished"
                    )
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
                log = None if jobs == 1 else (folder / f"{run_cfg.run_name}.log").open("ab")
                child = children.start([sys.executable, str(TRAIN_PY), *argv], log)
                if child is None:
                    break
                active[child] = (run_cfg, time.perf_counter(), log)
            if not active:
                break
            child, code = children.wait()
            run_cfg, started, log = active.pop(child)
            if log is not None:
                log.close()
                print(
                    f"{run_cfg.run_name} ended (exit code {code}); its output is in {log.name}",
                    flush=True,
                )
            diverged = diverged_run(run_cfg.run_dir) if keep_diverged and code == 1 else None
            if code == 0:
                results[run_cfg.run_name] = {
                    **evaluations(run_cfg.run_dir)[-1],
                    "wall_s": time.perf_counter() - started,
                    "exit_code": 0,
                }
            else:
                results[run_cfg.run_name] = diverged or {"exit_code": code}
            if diverged is not None:
                print(
                    f"{run_cfg.run_name} diverged at step {diverged['diverged']['step']}; the {what} goes on",
                    flush=True,
                )
            elif children.signum is None and died is None:
                died = killed_from_outside(code, run_cfg.run_name, what)
            children.flag.saved = kept(results, folder)
            write_json(
                saved,
                {
                    **header,
                    "runs": {
                        c.run_name: results[c.run_name] for _, c in todo if c.run_name in results
                    },
                },
            )
            failed = failed or (0 if diverged else 1 if code < 0 else code)
    # stopped by a signal or lost output, after saving a checkpoint
    if children.signum is not None or failed in STOPPED_CODES:
        print(f"{what} stopped; continue it with the same command plus --resume", file=sys.stderr)
        return 128 + children.signum if children.signum else failed
    # the run could say nothing: after its progress bar on the terminal, or alone when it wrote to
    # its log
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
    """Train every variant (those `names` picks, or all) at every seed, one train.py process each,
    then save compare.json and compare.png.

    Returns the comparison (its runs by name, and per variant the aggregates and differences from
    base), or the exit code of a run that failed or was stopped, which ends the comparison.
    cfg.train.resume continues a
    stopped comparison: finished runs are kept as they are, a stopped run resumes, runs not yet
    begun start.
    """
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
    by_variant = {
        variant: [results[c.run_name] for c in configs] for variant, configs in plan.items()
    }
    band = (
        f"{n_seeds} seeds per variant: line the mean, band min to max"
        if n_seeds > 1
        else "same seed"
    )
    with summing_up(runs_dir, "comparison"):
        plot_runs(
            {v: [c.run_dir for c in configs] for v, configs in plan.items()},
            runs_dir / "compare.png",
            f"{cfg.name}: {band}, {cfg.train.max_steps} steps",
        )
        comparison = {
            "seeds": seeds,
            "runs": results,
            "aggregate": {variant: aggregate(runs) for variant, runs in by_variant.items()},
            "differences": differences(by_variant, measured_from(plan)),
        }
        write_json(
            runs_dir / "compare.json",
            {
                **comparison,
                **{key: to_json(comparison[key]) for key in ("aggregate", "differences")},
            },
        )
    lock.release()
    return {**comparison, "folder": runs_dir}
