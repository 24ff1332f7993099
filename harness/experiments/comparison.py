"""The experiment of compare.py: the preset as it is and with each ablation, at one or more seeds, each run a
`python train.py ...` process, one at a time, with Ctrl-C and SIGTERM passed on and --resume continuing a stopped one."""

import dataclasses
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from configs import SECTIONS, Config, ConfigError
from configs.schema import config_differences
from data.files import write_atomically
from harness.experiments.stats import aggregate, differences, to_json
from harness.folders import claim_run_folder
from harness.pictures.curves import plot_runs
from harness.training.runlog import read_metrics
from model.ablations import ABLATIONS, variants

TRAIN_PY = Path(__file__).resolve().parents[2] / "train.py"
SET_PER_RUN = {"train.runs_dir", "train.run_name", "train.seed", "train.resume", *(f"model.{a.switch}" for a in ABLATIONS)}


def plan_runs(cfg: Config, runs_dir: Path, n_seeds: int, names: list[str] | None = None) -> dict[str, list[Config]]:
    """The runs, keyed by variant name (char, char-no-mask, ...): the preset as given and with the mask, the
    scale or the positions removed (model/ablations.py; `names` picks some, None takes all), each at seeds
    cfg.train.seed + 0..n_seeds-1. A variant's seed-s run shares initialisation and batches with base's
    seed-s run, which is what pairs them."""
    out = {}
    for model_cfg in variants(cfg.model, names).values():
        one = dataclasses.replace(cfg, model=model_cfg, train=dataclasses.replace(cfg.train, runs_dir=str(runs_dir), run_name=""))
        seeds = [cfg.train.seed + i for i in range(n_seeds)]
        out[one.run_name] = [
            one if n_seeds == 1 else dataclasses.replace(one, train=dataclasses.replace(one.train, seed=s, run_name=f"{one.run_name}-s{s}"))
            for s in seeds
        ]
    return out


def train_argv(config_name: str, overrides: list[tuple[str, str]], cfg: Config) -> list[str]:
    """train.py's arguments for one run: the user's preset and overrides (as the config loader read them, dotted),
    less the keys compare.py sets per run, then the run's own."""
    kept = [f"--{key}={value}" for key, value in overrides if key not in SET_PER_RUN]
    own = {
        **{f"model.{a.switch}": getattr(cfg.model, a.switch) for a in ABLATIONS},
        "train.seed": cfg.train.seed,
        "train.runs_dir": cfg.train.runs_dir,
        "train.run_name": cfg.run_name,
        **({"train.resume": True} if cfg.train.resume else {}),
    }
    return [
        "--config",
        config_name,
        *kept,
        *(f"--{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in own.items()),
    ]


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


def train_run(train_args: list[str], children: Children, cfg: Config) -> dict:
    """`python train.py ...` in its own process, as a user would type it; its last evaluation and the process's wall time."""
    command = [sys.executable, str(TRAIN_PY), *train_args]
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
    wanted = {section: cfg.to_dict()[section] for section in SECTIONS}
    differs = config_differences(recorded, wanted, ignore=("vocab_size", "resume", "run_name"))
    if differs:
        raise ConfigError(
            f"{cfg.run_dir} finished with other settings ({'; '.join(differs[:3])}); "
            "resume with the comparison's own flags, or start it afresh without --resume"
        )
    saved = saved_runs.get(cfg.run_name, {})
    return saved if saved.get("step") == last["step"] and saved.get("exit_code") == 0 else {**last, "exit_code": 0}


def write_json(path: Path, value: dict) -> None:
    write_atomically(path, json.dumps(value, indent=2).encode())


def read_saved_runs(runs_dir: Path) -> dict:
    """The runs an earlier comparison recorded in compare.json (it is rewritten after each run), by run name."""
    try:
        runs = json.loads((runs_dir / "compare.json").read_text(encoding="utf-8")).get("runs", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return runs if isinstance(runs, dict) else {}


def run_comparison(
    cfg: Config, config_name: str, overrides: list[tuple[str, str]], n_seeds: int, names: list[str] | None = None
) -> dict | int:
    """Train every variant (those `names` picks, or all) at every seed, one train.py process each, then save compare.json and compare.png.

    Returns the comparison (its runs by name, and per variant the aggregates and differences from base), or
    the exit code of a run that failed or was stopped, which ends the comparison. cfg.train.resume continues a
    stopped comparison: finished runs are kept as they are, a stopped run resumes, runs not yet begun start.
    """
    runs_dir = Path(cfg.train.runs_dir) / f"compare-{cfg.name}"
    if cfg.train.resume and not runs_dir.is_dir():
        raise ConfigError(f"nothing to resume: no comparison at {runs_dir}; start it without --resume")
    lock, moved = claim_run_folder(runs_dir, cfg.train.resume)  # afresh: an earlier comparison moves aside as a whole
    if moved:
        print(f"the earlier comparison in {runs_dir} moved to {moved}")
    plan = plan_runs(cfg, runs_dir, n_seeds, names)
    seeds = [c.train.seed for c in next(iter(plan.values()))]
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
                results[run_cfg.run_name] = train_run(train_argv(config_name, overrides, run_cfg), children, run_cfg)
                write_json(runs_dir / "compare.json", {"seeds": seeds, "runs": results})
                code = results[run_cfg.run_name]["exit_code"]
                if children.signum is not None or code in (130, 143):  # stopped by Ctrl-C or SIGTERM, after saving a checkpoint
                    print("comparison stopped; continue it with the same command plus --resume", file=sys.stderr)
                    return 128 + children.signum if children.signum else code
                if code != 0:
                    return code  # train.py has said why
    by_variant = {variant: [results[c.run_name] for c in configs] for variant, configs in plan.items()}
    band = f"{n_seeds} seeds per variant: line the mean, band min to max" if n_seeds > 1 else "same seed"
    plot_runs({v: [c.run_dir for c in configs] for v, configs in plan.items()}, runs_dir / "compare.png",
              f"{cfg.name}: {band}, {cfg.train.max_steps} steps")  # fmt: skip
    comparison = {
        "seeds": seeds,
        "runs": results,
        "aggregate": {variant: aggregate(runs) for variant, runs in by_variant.items()},
        "differences": differences(by_variant),
    }
    write_json(runs_dir / "compare.json", {**comparison, **{key: to_json(comparison[key]) for key in ("aggregate", "differences")}})
    lock.release()
    return {**comparison, "folder": runs_dir}
