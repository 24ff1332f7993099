"""What the command-line scripts share: argument checks, and one way to turn a failure into a line and an exit code.

A mistake in what was typed (a config key, a file, a checkpoint, a prompt) is one line starting
with "error:" and exit code 2, never a traceback; a run that cannot go on is exit code 1.
"""

import argparse
import sys
from collections.abc import Callable

from configs import ConfigError
from data.corpus import DataError
from data.tokenizer import TokenizerError
from engine.checkpoints import CheckpointError
from engine.runtime import shut_down
from engine.step import TrainingError

USER_ERRORS = (ConfigError, DataError, CheckpointError, TokenizerError)  # mistakes in what was typed: exit code 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a mistake is one line on stderr and exit code 2, without the usage block."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def run_command(command: Callable[[list[str]], object], argv: list[str], interrupted: str = "interrupted; nothing was saved") -> int:
    """Run a script's command on argv and return its exit code; every expected failure becomes one line.

    The command returns an int exit code, or anything else (its result, for tests) for success.
    """
    try:
        code = command(argv)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
    finally:
        shut_down()
    return code if isinstance(code, int) else 0
