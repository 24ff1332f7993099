"""The experiment of compare.py: the preset as it is and with each ablation, at one or more seeds, each run a
`python train.py ...` process, one at a time, with Ctrl-C, SIGTERM and SIGHUP passed on and --resume continuing a stopped one."""

import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from configs import SECTIONS, Config, ConfigError
from configs.schema import config_differences
from data.files import write_atomically
from harness.experiments.stats import aggregate, differences, to_json
from harness.folders import claim_run_folder, read_json
from harness.pictures.curves import plot_runs
from harness.stopping import LOST_OUTPUT, Aborted, StopFlag
from harness.training.runlog import evaluations
from model import ModelConfig
from model.ablations import CHANGES, applied, name_suffix, undone, variants

TRAIN_PY = Path(__file__).resolve().parents[2] / "train.py"
STOPPED_CODES = {128 + sig for sig in (*StopFlag.SIGNALS, LOST_OUTPUT)}  # train.py's exit codes after a stop (129, 130, 141, 143)
SET_PER_RUN = {"train.runs_dir", "train.run_name", "train.seed", "train.resume", *(f"model.{c.field}" for c in CHANGES)}


def plan_runs(cfg: Config, runs_dir: Path, n_seeds: int, names: list[str] | None = None) -> dict[str, list[Config]]:
    """The runs, keyed by variant name (char, char-no-mask, ...): the preset as given and with the mask, the scale or the
    positions removed, or a cure or rope added (model/ablations.py; `names` picks some, "no-mask+no-pos" removes both, None takes
    each ablation alone), each at seeds cfg.train.seed + 0..n_seeds-1. A variant's seed-s run shares base's seed-s init and batches."""
    out = {}
    for model_cfg in variants(cfg.model, names).values():
        one = dataclasses.replace(cfg, model=model_cfg, train=dataclasses.replace(cfg.train, runs_dir=str(runs_dir), run_name=""))
        seeds = [cfg.train.seed + i for i in range(n_seeds)]
        out[one.run_name] = [
            one if n_seeds == 1 else dataclasses.replace(one, train=dataclasses.replace(one.train, seed=s, run_name=f"{one.run_name}-s{s}"))
            for s in seeds
        ]
    return out


def measured_from(plan: dict[str, list[Config]]) -> dict[str, list[str]]:
    """For each variant that changes several things, the variants in the plan that change one fewer: what it is measured
    from besides base (char-no-mask-no-pos from char-no-mask and char-no-pos, when they are trained)."""
    out = {}
    for name, configs in plan.items():
        changed = applied(configs[0].model)
        if len(changed) > 1:
            fewer = {name_suffix(undone(configs[0].model, [c])) for c in changed}
            out[name] = [other for other, theirs in plan.items() if name_suffix(theirs[0].model) in fewer]  # in the plan's order
    return out


def train_argv(config_name: str, overrides: list[tuple[str, str]], cfg: Config) -> list[str]:
    """train.py's arguments for one run: the user's preset and overrides (as the config loader read them, dotted),
    less the keys compare.py sets per run, then the run's own."""
    kept = [f"--{key}={value}" for key, value in overrides if key not in SET_PER_RUN]
    own = {
        **{f"model.{c.field}": getattr(cfg.model, c.field) for c in CHANGES},
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


@contextlib.contextmanager
def blocked(signum: int):
    """The signal held pending (not lost) in this thread for the block, and in the processes it starts meanwhile."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class Children:
    """Runs train.py processes one at a time, and passes every stop signal (Ctrl-C, SIGTERM, SIGHUP) on to the one running.

    Each child runs in a process group of its own, so a terminal's Ctrl-C reaches it once, through this
    process (harness/stopping.py's StopFlag, as in train.py): the child stops at its next safe point and
    saves a checkpoint, and this process waits for that. A second Ctrl-C reaches the child too, which
    aborts at once; so does this process, once the child has ended.
    """

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.told = False  # whether the running child was passed a signal
        self.flag = StopFlag(on_signal=self.pass_on)

    @property
    def signum(self) -> int | None:
        return self.flag.signum if self.flag.signum != LOST_OUTPUT else None  # lost output: the child sees it in its own writes

    def __enter__(self):
        self.flag.__enter__()
        return self

    def pass_on(self, signum: int) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)
            self.told = True

    def run(self, command: list[str]) -> int:
        """Start the command and wait for it to end; its exit code (not started if a stop was asked for already).

        The child starts with SIGINT blocked (it inherits this process's mask): a Ctrl-C passed on while its interpreter
        starts then waits until train.py can answer it in one line (harness/stopping.py's exit_on_signal unblocks it),
        where Python would stop with "Fatal Python error: init_import_site". Only SIGINT: the one Python turns into an
        exception while it starts; SIGTERM and SIGHUP end a starting child quietly, and a child of another kind keeps them.
        """
        self.told = False
        try:
            with blocked(signal.SIGINT):  # here too: a Ctrl-C meanwhile is handled once the child exists, and passed on
                if self.signum is not None:
                    return 128 + self.signum
                self.child = subprocess.Popen(command, process_group=0)
            if self.signum is not None and not self.told:  # SIGTERM or SIGHUP while the child was being started
                self.child.send_signal(self.signum)
            code = self.child.wait()
        except Aborted:  # a second signal: the child got it too and aborts; wait for it, briefly
            if self.child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.child.wait(timeout=5)
                self.child.kill()
            raise
        self.child = None
        return code

    def __exit__(self, *exc) -> None:
        self.flag.__exit__(*exc)


def train_run(train_args: list[str], children: Children, cfg: Config) -> dict:
    """`python train.py ...` in its own process, as a user would type it; its last evaluation and the process's wall time."""
    command = [sys.executable, str(TRAIN_PY), *train_args]
    print("$ python train.py " + " ".join(command[2:]), flush=True)
    started = time.perf_counter()
    code = children.run(command)
    if code != 0:
        return {"exit_code": code}
    return {**evaluations(cfg.run_dir)[-1], "wall_s": time.perf_counter() - started, "exit_code": 0}


def finished_run(cfg: Config, saved_runs: dict) -> dict | None:
    """What a run of an earlier, stopped comparison gave, if it already finished with these settings (a checkpoint and an
    evaluation at max_steps); else None. Its numbers come from compare.json (with its wall time), or else its metrics.jsonl."""
    if not (cfg.run_dir / "ckpt.pt").is_file() or not (cfg.run_dir / "metrics.jsonl").is_file():
        return None
    last = (evaluations(cfg.run_dir) or [{}])[-1]
    if last.get("step") != cfg.train.max_steps:
        return None
    recorded = read_json(cfg.run_dir / "config.json")  # None, or anything else than a dict, fails below: no record
    try:  # read as a checkpoint's model config is: older records (positions true/false) upgraded
        recorded["model"] = dataclasses.asdict(ModelConfig(**recorded["model"]))
    except (ValueError, TypeError, KeyError):
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
    saved = read_json(runs_dir / "compare.json")
    runs = saved.get("runs") if isinstance(saved, dict) else None
    return runs if isinstance(runs, dict) else {}


def kept(results: dict, runs_dir: Path) -> str:
    """What a second Ctrl-C leaves, for its abort line: the runs that finished (the one under way says what it kept)."""
    finished = [name for name, result in results.items() if result.get("exit_code") == 0]
    done = f"finished and kept in {runs_dir}: {', '.join(finished)}" if finished else "no run had finished"
    return f"{done}; continue with the same command plus --resume"


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
        children.flag.saved = kept(results, runs_dir)
        for i in range(n_seeds):  # seed by seed: stopped early, the finished rounds are still complete pairs
            for variant, configs in plan.items():
                run_cfg, number = configs[i], f"run {len(results) + 1} of {n_seeds * len(plan)}"  # the comparison's progress
                done = finished_run(run_cfg, saved_runs) if cfg.train.resume else None
                if done is not None:
                    print(f"\n=== {number}: {variant}, seed {run_cfg.train.seed}: {run_cfg.run_name} finished already ===", flush=True)
                    results[run_cfg.run_name] = done
                    children.flag.saved = kept(results, runs_dir)
                    continue
                started = cfg.train.resume and (run_cfg.run_dir / "ckpt.pt").is_file()
                run_cfg = dataclasses.replace(run_cfg, train=dataclasses.replace(run_cfg.train, resume=started))
                print(f"\n=== {number}: {variant}, seed {run_cfg.train.seed}: {run_cfg.run_name} ===", flush=True)
                results[run_cfg.run_name] = train_run(train_argv(config_name, overrides, run_cfg), children, run_cfg)
                children.flag.saved = kept(results, runs_dir)
                write_json(runs_dir / "compare.json", {"seeds": seeds, "runs": results})
                code = results[run_cfg.run_name]["exit_code"]
                if children.signum is not None or code in STOPPED_CODES:  # stopped by a signal or lost output, after saving a checkpoint
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
        "differences": differences(by_variant, measured_from(plan)),
    }
    write_json(runs_dir / "compare.json", {**comparison, **{key: to_json(comparison[key]) for key in ("aggregate", "differences")}})
    lock.release()
    return {**comparison, "folder": runs_dir}
