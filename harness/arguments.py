"""The checks of the scripts' own command-line values: argparse `type=` functions whose error is one line.

Each takes the text typed and returns the value, or raises argparse.ArgumentTypeError saying what is valid;
OneLineParser (harness/cli.py) prints it as "error: argument --flag: ..." with exit code 2.
"""

import argparse
import os

from configs import MAX_SEED


def whole_number(text: str, least: int) -> int:
    """A whole number of at least `least`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {'0 or more' if least == 0 else f'at least {least}'}, got {text}")
    return value


def non_negative_int(text: str) -> int:
    return whole_number(text, 0)


def positive_int(text: str) -> int:
    return whole_number(text, 1)


def typed_text(arg: str) -> str:
    """Text typed on the command line (a prompt), as UTF-8 whatever the locale.

    Under the C locale Python decodes the arguments as ASCII and keeps each other byte as a lone
    surrogate ('café' arrives as 'caf\\udcc3\\udca9'); their bytes are UTF-8, so they are decoded as such.
    """
    return os.fsencode(arg).decode("utf-8", errors="replace")


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def non_negative_float(text: str) -> float:
    value = number(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number, got {text}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def probability(text: str) -> float:
    """A probability above 0, at most 1."""
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1, got {text}")
    return value


def seed(text: str) -> int:
    """A random seed: a whole number that torch's generators take (0 to 2**63 - 1)."""
    value = non_negative_int(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SEED} (2**63 - 1), got {text}")
    return value


def context_factors(text: str) -> list[float]:
    """Contexts as multiples of a model's block_size, comma-separated ("0.5,1,2,4"): positive, finite, each once; sorted."""
    wanted = f"takes positive multiples of the model's block_size, comma-separated (0.5,1,2,4); got {text!r}"
    factors = []
    for part in text.split(","):
        try:
            factor = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(wanted) from None
        if not 0 < factor < float("inf"):
            raise argparse.ArgumentTypeError(f"{wanted}, and {part.strip()} is not above 0 and finite")
        factors.append(factor)
    if len(set(factors)) < len(factors):
        raise argparse.ArgumentTypeError(f"names a context twice in {text!r}; give each once")
    return sorted(factors)
