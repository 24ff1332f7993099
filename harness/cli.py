"""What the command-line scripts share: argument checks, and one way to turn a failure into a line
and an exit code.

A mistake in what was typed (a config key, a file, a checkpoint, a prompt) is one line starting
with "error:" and exit code 2, never a traceback; a run that cannot go on is exit code 1.
"""

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

USER_ERRORS = (
    ConfigError,
    DataError,
    CheckpointError,
    TokenizerError,
    OutputError,
    SamplingError,
)  # mistakes in what was typed: exit code 2


class OneLineParser(argparse.ArgumentParser):
    """The one command-line parser of every script: argparse, but a mistake is one line on stderr
    and exit code 2.

    A script that trains or measures a preset passes `config`, the preset it uses by default:
    then parse_with_config hands every argument the script does not declare to the config loader
    (--config NAME, --section.field=VALUE and the shorthands), and --help lists those too. Such a
    script's own flags must be spelled out whole, so that a short flag meant for the loader (--seed)
    is never taken for one of them (--seeds).
    """

    def __init__(self, description: str, config: str | None = None, **kwargs):
        if config is not None:
            kwargs |= {
                "epilog": usage(config),
                "formatter_class": argparse.RawDescriptionHelpFormatter,
                "allow_abbrev": False,
            }
        super().__init__(description=description, **kwargs)
        self.config = config

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")

    def parse_with_config(self, argv: list[str]) -> tuple[argparse.Namespace, Config]:
        """The script's own flags, and the Config that the rest of argv gives (the preset `config`
        unless --config says).

        The namespace also holds what the rest said, as the config loader reads it:
        args.config_name, and args.overrides, the (dotted key, value) pairs in order with shorthands
        resolved (--no-mask is model.causal).
        """
        args, rest = self.parse_known_args(argv)
        args.config_name, args.overrides = parse_args(rest, default=self.config)
        return args, load_config(rest, default=self.config)


def add_checkpoint_source(parser: argparse.ArgumentParser):
    """The flags that name a checkpoint of ours: --run (with --runs-dir and --best) or --checkpoint;
    returns their group.
    """
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--run", default="base", help="run folder name under --runs-dir (default: base)"
    )
    where.add_argument("--checkpoint", type=Path, help="path to a ckpt.pt (overrides --run)")
    parser.add_argument("--runs-dir", default="runs", help="where run folders live (default: runs)")
    parser.add_argument(
        "--best",
        action="store_true",
        help="use the run's best-by-val checkpoint (best.pt) instead of the latest",
    )
    return where


def checkpoint_path(args: argparse.Namespace) -> Path:
    return args.checkpoint or Path(args.runs_dir) / args.run / (
        "best.pt" if args.best else "ckpt.pt"
    )


def add_model_source(parser: argparse.ArgumentParser) -> None:
    """The flags that say which model a script reads: a run's checkpoint, a checkpoint file, or a
    GPT-2.
    """
    add_checkpoint_source(parser).add_argument(
        "--pretrained",
        metavar="NAME_OR_FOLDER",
        help="a GPT-2: gpt2, gpt2-medium, gpt2-large, gpt2-xl (from the Hugging Face hub or its cache), "
        "or a folder with config.json and model.safetensors (python export_gpt2.py writes one)",
    )


def load_model_source(
    args: argparse.Namespace, device
) -> tuple[GPT, Tokenizer, str, Path, dict | None]:
    """The model that add_model_source's flags name: (model in eval mode, tokenizer, a line that
    says what it is, the folder that the script's outputs go into by default, the checkpoint or None
    for a GPT-2). A pretrained model's files may sit in the hub's cache, which is no place for
    pictures, so its outputs go to <runs-dir>/pretrained-<name>/."""
    if args.pretrained:
        # imported on use: the hub's client is slow to import, and training needs none
        from harness.gpt2 import load_pretrained

        model, tokenizer, info = load_pretrained(args.pretrained, device)
        folder = Path(args.runs_dir) / f"pretrained-{Path(info['name']).name}"
        return (
            model,
            tokenizer,
            f"{info['name']} (pretrained GPT-2, from {info['source']})",
            folder,
            None,
        )
    path = checkpoint_path(args)
    model, tokenizer, checkpoint = load_model(path, device)
    val_loss = checkpoint.get("val_loss")
    described = f"{path} (step {checkpoint.get('step')}, val loss {float('nan') if val_loss is None else val_loss:.4f})"
    return model, tokenizer, described, path.parent, checkpoint


def device_of(name: str) -> torch.device:
    """The device that --device names (auto: CUDA, then MPS, then CPU), set up as training sets it
    up, except that freed memory goes back to the system: scoring and sampling allocate a new size
    per prefix (setup_runtime's reuse_memory)."""
    try:
        return setup_runtime(TrainConfig(device=name), reuse_memory=False).device
    except ValueError as e:
        raise ConfigError(str(e).replace("train.device", "--device")) from None


def run_command(
    command: Callable[[list[str]], object],
    argv: list[str],
    interrupted: str = NOTHING_SAVED,
) -> int:
    """Run a script's command on argv and return its exit code; every expected failure becomes one
    line.

    The command returns an int exit code, or anything else (its result, for tests) for success. A
    stop (harness/stopping.py) exits with 128 + the signal's number: quietly when the output was
    lost (141). So does a signal before the command's own handlers are in place: `interrupted` is
    its line.
    """
    try:
        return one_line_failures(command, argv, interrupted)
    # a second signal: from the command, or from its very end, past the handlers below
    except Aborted as e:
        shut_down()
        with guarded_output():
            print(e, file=sys.stderr)
        return 128 + e.signum


def one_line_failures(
    command: Callable[[list[str]], object], argv: list[str], interrupted: str
) -> int:
    """run_command's body: the command under guarded output, each expected failure turned into a
    line and an exit code.
    """
    with guarded_output():
        try:
            # inside the try: from here a signal raises KeyboardInterrupt, answered below
            interrupt_on_signal()
            code = command(argv)
            # what is still buffered, written now: if it cannot be (a full disk), that is lost
            # output too
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
        # a signal while the corpus is prepared says what it stopped, and which signal it was
        except KeyboardInterrupt as e:
            print(str(e) or interrupted, file=sys.stderr)
            return 128 + getattr(e, "signum", signal.SIGINT)
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
                raise
            # a full disk or quota
            advice = (
                "write elsewhere"
                if e.errno == errno.EROFS
                else "free some space or write elsewhere"
            )
            print(
                f"error: could not save {os.fsdecode(e.filename or 'a file')}: {e.strerror}; {advice}",
                file=sys.stderr,
            )
            return 1
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:
            if not is_out_of_memory(e):
                raise
            print(f"error: {out_of_memory_message(e)}", file=sys.stderr)
            return 1
        finally:
            shut_down()
    return code if isinstance(code, int) else 0


def is_out_of_memory(e: BaseException) -> bool:
    """torch reports a failed CPU allocation as a RuntimeError ("can't allocate memory", or C++'s
    "std::bad_alloc" from its own bookkeeping), and a failed GPU one as OutOfMemoryError."""
    return isinstance(e, torch.OutOfMemoryError | MemoryError) or any(
        s in str(e) for s in ("can't allocate memory", "std::bad_alloc")
    )


@contextlib.contextmanager
def out_of_memory_advice(advice: str):
    """Inside the block, a failed allocation's line (out_of_memory_message) gives `advice`, the
    flags that make this work smaller, in place of training's: scoring at --contexts is made smaller
    by its own flag."""
    try:
        yield
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:
        if is_out_of_memory(e):
            e.advice = advice
        raise


def out_of_memory_message(e: BaseException) -> str:
    """One line for a failed allocation: how much was asked for, and which flags make it smaller
    (out_of_memory_advice's, or training's).

    The largest tensors are the (T, T) attention weights that evaluation and inspection hold per
    head, and the (B, T, V) logits, so the context and the batch come first.
    """
    asked = re.search(r"allocate (\d+) bytes|Tried to allocate ([\d.]+ [KMGT]iB)", str(e))
    size = (
        ""
        if asked is None
        else f" ({int(asked[1]) / 2**30:.1f} GiB asked for at once)"
        if asked[1]
        else f" ({asked[2]} asked for at once)"
    )
    advice = getattr(
        e,
        "advice",
        "lower --model.block_size (attention weights grow with its square), --train.batch_size or the model's size",
    )
    return (
        f"out of memory{size}: the context, batch or model is too large for this machine; {advice}"
    )
