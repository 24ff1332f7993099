"""argparse `type=` functions for the scripts' own flags."""

import argparse
import math
import os

from configs import MAX_SEED
from model.ablations import CHANGES, JOIN, variant_changes, variant_order

MAX_SEEDS = 100  # an experiment's training runs per variant: more would run for weeks
MAX_DRAWS = 1000  # inspect_attention.py --ablate's random draws of heads
EVERY = ", ".join(c.name for c in CHANGES)
Invalid = argparse.ArgumentTypeError


def whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise Invalid(f"must be a whole number, got {text!r}") from None
    if value < least:
        raise Invalid(f"must be {'0 or more' if least == 0 else f'at least {least}'}, got {text}")
    return value


def non_negative_int(text: str) -> int:
    return whole_number(text, 0)


def positive_int(text: str) -> int:
    return whole_number(text, 1)


def typed_text(arg: str) -> str:
    """UTF-8 whatever the locale (the C locale's surrogates decoded)."""
    return os.fsencode(arg).decode("utf-8", errors="replace")


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise Invalid(f"must be a number, got {text!r}") from None


def non_negative_float(text: str) -> float:
    value = number(text)
    if not 0 <= value < math.inf:
        raise Invalid(f"must be 0 or a positive number, got {text}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise Invalid(f"must be above 0, got {text}")
    return value


def probability(text: str) -> float:
    value = number(text)
    if not 0 < value <= 1:
        raise Invalid(f"must be above 0 and at most 1, got {text}")
    return value


def seed(text: str) -> int:
    value = non_negative_int(text)
    if value > MAX_SEED:
        raise Invalid(f"must be at most {MAX_SEED} (2**63 - 1), got {text}")
    return value


def count(text: str, what: str, least: int, most: int) -> int:
    if not text.strip().isdigit() or not least <= int(text) <= most:
        raise Invalid(f"takes the number of {what}, {least} to {most}, got {text!r}")
    return int(text)


def seed_count(text: str) -> int:
    return count(text, "seeds per variant", 1, MAX_SEEDS)


def draw_count(text: str) -> int:
    return count(text, "random draws", 0, MAX_DRAWS)


def variant_names(text: str) -> list[str]:
    """--variants no-pos,no-mask -> ["no-mask", "no-pos"]: in model/ablations.py's order, once."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise Invalid(
            f"takes variant names, comma-separated, from {EVERY} (or several joined by +); "
            f"got {text!r}"
        )
    try:
        spelled = {JOIN.join(c.name for c in variant_changes(name)) for name in names}
    except ValueError as e:
        raise Invalid(str(e)) from None
    return sorted(spelled, key=variant_order)


def rate_name(lr: float) -> str:
    """A learning rate as run names spell it: 0.12 -> "1.2e-1", 0.004 -> "4e-3"."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def positive_numbers(text: str, wanted: str, key=float) -> list[float]:
    """Comma-separated numbers above 0 and finite, sorted; two with the same `key` are refused."""
    numbers = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not 0 < value < math.inf:
            raise Invalid(f"{wanted}; got {part.strip()!r} in {text!r}")
        if key(value) in map(key, numbers):
            raise Invalid(f"{wanted}, each once; got {key(value)} twice in {text!r}")
        numbers.append(value)
    return sorted(numbers)


def learning_rates(text: str) -> list[float]:
    wanted = "takes learning rates above 0, comma-separated (4e-3,1.2e-2)"
    return positive_numbers(text, wanted, rate_name)


def context_factors(text: str) -> list[float]:
    wanted = "takes multiples of the model's block_size above 0, comma-separated (0.5,1,2,4)"
    return positive_numbers(text, wanted)
