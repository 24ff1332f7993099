"""The command-line parser, the model a script reads, and each failure as one line: exit code 2
for a mistake in what was typed, 1 for a run that cannot go on."""

import argparse
import contextlib
import errno
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from configs import Config, ConfigError, TrainConfig, load_config, parse_args, usage
from data.corpus import DataError
from data.tokenizer import Tokenizer, TokenizerError
from harness.folders import OutputError
from harness.output import guarded_output
from harness.stopping import LOST_OUTPUT, NOTHING_SAVED, Aborted, Stopped, interrupt_on_signal
from harness.training.checkpoints import CheckpointError, load_model
from harness.training.runtime import setup_runtime, shut_down
from harness.training.step import TrainingError
from model import GPT
from model.sampling import SamplingError

USER_ERRORS = (ConfigError, DataError, CheckpointError, TokenizerError, OutputError, SamplingError)
MEMORY_ERRORS = (torch.OutOfMemoryError, MemoryError, RuntimeError)
Command = Callable[[list[str]], object]  # returns an exit code, or anything else for 0


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line mistakes; with a default preset `config`, the flags it does not
    declare go to the config loader, so its own must be spelled whole."""

    def __init__(self, description: str, config: str | None = None, **kwargs):
        if config is not None:
            raw = argparse.RawDescriptionHelpFormatter
            kwargs |= dict(epilog=usage(config), formatter_class=raw, allow_abbrev=False)
        super().__init__(description=description, **kwargs)
        self.config = config

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")

    def parse_with_config(self, argv: list[str]) -> tuple[argparse.Namespace, Config]:
        args, rest = self.parse_known_args(argv)
        args.config_name, args.overrides = parse_args(rest, default=self.config)
        return args, load_config(rest, default=self.config)


def add_checkpoint_source(parser: argparse.ArgumentParser):
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--run", default="base", help="a run folder in --runs-dir (default: base)")
    where.add_argument("--checkpoint", type=Path, help="path to a ckpt.pt")
    parser.add_argument("--runs-dir", default="runs", help="where run folders live (default: runs)")
    parser.add_argument("--best", action="store_true", help="the run's best.pt (lowest val loss)")
    return where


def checkpoint_path(args: argparse.Namespace) -> Path:
    name = "best.pt" if args.best else "ckpt.pt"
    return args.checkpoint or Path(args.runs_dir) / args.run / name


def add_model_source(parser: argparse.ArgumentParser) -> None:
    add_checkpoint_source(parser).add_argument(
        "--pretrained",
        metavar="NAME_OR_FOLDER",
        help="a GPT-2: gpt2, gpt2-medium, gpt2-large, gpt2-xl (from the Hugging Face hub), or a "
        "folder export_gpt2.py wrote",
    )


def load_model_source(
    args: argparse.Namespace, device
) -> tuple[GPT, Tokenizer, str, Path, dict | None]:
    """(model in eval mode, tokenizer, what it is, its output folder, checkpoint or None)."""
    if args.pretrained:
        from harness.gpt2 import load_pretrained  # the hub's client is slow to import

        model, tokenizer, info = load_pretrained(args.pretrained, device)
        described = f"{info['name']} (pretrained GPT-2, from {info['source']})"
        folder = Path(args.runs_dir) / f"pretrained-{Path(info['name']).name}"
        return model, tokenizer, described, folder, None
    path = checkpoint_path(args)
    model, tokenizer, checkpoint = load_model(path, device)
    val_loss = checkpoint.get("val_loss")
    if val_loss is None:
        val_loss = float("nan")
    described = f"{path} (step {checkpoint.get('step')}, val loss {val_loss:.4f})"
    return model, tokenizer, described, path.parent, checkpoint


def device_of(name: str) -> torch.device:
    try:
        return setup_runtime(TrainConfig(device=name), reuse_memory=False).device
    except ValueError as e:
        raise ConfigError(str(e).replace("train.device", "--device")) from None


def run_command(command: Command, argv: list[str], interrupted: str = NOTHING_SAVED) -> int:
    """The command's exit code; each expected failure is one line, a stop `interrupted`."""
    try:
        with guarded_output():
            return one_line_failures(command, argv, interrupted)
    except Aborted as e:
        shut_down()
        with guarded_output():
            print(e, file=sys.stderr)
        return 128 + e.signum


def one_line_failures(command: Command, argv: list[str], interrupted: str) -> int:
    try:
        interrupt_on_signal()
        code = command(argv)
        sys.stdout.flush()
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Stopped as e:
        if e.signum != LOST_OUTPUT:
            print(interrupted, file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt as e:
        print(str(e) or interrupted, file=sys.stderr)
        return 128 + getattr(e, "signum", signal.SIGINT)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        advice = "free some space or write elsewhere"
        if e.errno == errno.EROFS:
            advice = "write elsewhere"
        name = os.fsdecode(e.filename or "a file")
        print(f"error: could not save {name}: {e.strerror}; {advice}", file=sys.stderr)
        return 1
    except MEMORY_ERRORS as e:
        if not is_out_of_memory(e):
            raise
        print(f"error: {out_of_memory_message(e)}", file=sys.stderr)
        return 1
    finally:
        shut_down()
    return code if isinstance(code, int) else 0


def is_out_of_memory(e: BaseException) -> bool:
    # torch reports a failed CPU allocation as a RuntimeError
    return isinstance(e, torch.OutOfMemoryError | MemoryError) or any(
        s in str(e) for s in ("can't allocate memory", "std::bad_alloc")
    )


@contextlib.contextmanager
def out_of_memory_advice(advice: str):
    """A failed allocation in the block advises `advice` in place of training's."""
    try:
        yield
    except MEMORY_ERRORS as e:
        if is_out_of_memory(e):
            e.advice = advice
        raise


def out_of_memory_message(e: BaseException) -> str:
    asked = re.search(r"allocate (\d+) bytes|Tried to allocate ([\d.]+ [KMGT]iB)", str(e))
    size = ""
    if asked and asked[1]:
        size = f" ({int(asked[1]) / 2**30:.1f} GiB asked for at once)"
    elif asked:
        size = f" ({asked[2]} asked for at once)"
    default = (
        "lower --model.block_size (attention grows with its square), --train.batch_size or the "
        "model's size"
    )
    return f"out of memory{size}; {getattr(e, 'advice', default)}"
