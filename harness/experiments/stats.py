"""Spreads over seeds, paired differences with a 95% interval, and the experiments' tables. A
difference means something only next to how much the seed alone moves it."""

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# t_{0.975, df}, Student's two-sided 95% quantile, for df = 1..30 (from any statistics table)
T_975 = (
    (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160)
    + (2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056)
    + (2.052, 2.048, 2.045, 2.042)
)
Z_975 = 1.959964  # the normal quantile t approaches as df grows

COLUMNS = [  # (header, metric tag, format)
    ("train", "loss/train", ".3f"),
    ("val", "loss/val", ".3f"),
    ("val honest", "loss/val_honest", ".3f"),
    ("val forced", "loss/val_forced", ".3f"),
    ("leak gap", "loss/leak_gap", ".3f"),
    ("order use", "loss/order_use", ".3f"),
    ("val bpc", "loss/val_bpc", ".3f"),
    ("entropy", "attn/entropy", ".3f"),
    ("saturated", "attn/saturated_frac", ".3f"),
    ("future mass", "attn/future_mass", ".3f"),
    ("score std", "attn/score_std", ".2f"),
    ("wall s", "wall_s", ".0f"),
]
HEADERS = {tag: (header, fmt) for header, tag, fmt in COLUMNS}
MINUS = "−"  # in a difference's label: "char-no-mask-no-pos − char-no-mask"
DIFFERENCE_TAGS = (
    "loss/val",
    "loss/val_honest",
    "loss/leak_gap",
    "loss/order_use",
    "attn/entropy",
    "attn/saturated_frac",
)


@dataclass(frozen=True)
class Spread:
    mean: float
    std: float | None  # sample standard deviation (divisor n - 1); None for a single value
    n: int  # how many values (seeds)


@dataclass(frozen=True)
class Difference:
    mean: float  # mean over seeds of (ablation - base)
    half_width: float | None  # the 95% interval is mean ± half_width; None with a single seed
    # |mean| in seed standard deviations of base; inf if base never varied, None with a single seed
    sigmas: float | None
    n: int  # how many seed pairs


def spread(values: Sequence[float]) -> Spread:
    std = statistics.stdev(values) if len(values) > 1 else None
    return Spread(statistics.fmean(values), std, len(values))


def t_975(df: int) -> float:
    """Far above 1.96 with few seeds, whose sd is itself noisy. Past the table, the Cornish-Fisher
    expansion (equal at df = 30 to three decimals)."""
    if df < 1:
        raise ValueError(f"a t quantile needs at least one degree of freedom, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def half_width(s: Spread) -> float | None:
    return None if s.std is None else t_975(s.n - 1) * s.std / math.sqrt(s.n)


def paired_difference(ablation: Sequence[float], base: Sequence[float]) -> Difference:
    """Paired by seed: a pair shares its initialisation and batches, so their seed noise cancels and
    the interval is narrower than from two independent means."""
    d = spread([a - b for a, b in zip(ablation, base, strict=True)])
    if d.std is None:
        return Difference(d.mean, None, None, 1)
    base_std = statistics.stdev(base)
    sigmas = abs(d.mean) / base_std if base_std > 0 else (math.inf if d.mean != 0 else 0.0)
    return Difference(d.mean, half_width(d), sigmas, d.n)


def column(runs: list[dict], tag: str) -> list[float] | None:
    return [r[tag] for r in runs] if all(tag in r for r in runs) else None


def aggregate(runs: list[dict]) -> dict[str, Spread | None]:
    return {
        tag: None if (values := column(runs, tag)) is None else spread(values)
        for _, tag, _ in COLUMNS
    }


def what_figures_are(n_seeds: int, per_point: bool = False) -> str:
    if n_seeds == 1:
        return "one seed per point, no interval" if per_point else "one seed: no interval"
    if per_point:
        return f"{n_seeds} seeds per point (mean, 95% interval)"
    return f"mean ± 95% half width over {n_seeds} seeds"


def format_cell(s: Spread | None, fmt: str) -> str:
    if s is None:
        return "n/a"
    return format(s.mean, fmt) if s.std is None else f"{s.mean:{fmt}} ± {s.std:{fmt}}"


def markdown_table(rows: list[list[str]], align: str = "") -> str:
    """`align`: an l or r per column, by default l then r."""
    align = align or "l" + "r" * (len(rows[0]) - 1)
    rule = "|" + "".join("---|" if a == "l" else "---:|" for a in align)
    lines = ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join([lines[0], rule, *lines[1:]])


def format_table(
    rows: dict[str, dict[str, Spread | None]], columns: list[tuple[str, str, str]] = COLUMNS
) -> str:
    body = [[name, *(format_cell(s[t], fmt) for _, t, fmt in columns)] for name, s in rows.items()]
    return markdown_table([["run", *(h for h, _, _ in columns)], *body])


def differences(
    by_variant: dict[str, list[dict]], also: dict[str, list[str]] | None = None
) -> dict[str, dict[str, Difference | None]]:
    """Each ablation minus base (the first variant), paired by seed; then each pair `also` asks for
    ({"x-a-b": ["x-a"]}), keyed "x-a-b − x-a"."""
    base_name, *ablations = by_variant
    pairs = [(name, name, base_name) for name in ablations]
    pairs += [
        (f"{name} {MINUS} {reference}", name, reference)
        for name, references in (also or {}).items()
        for reference in references
    ]
    out = {}
    for label, name, reference in pairs:
        out[label] = {}
        for tag in DIFFERENCE_TAGS:
            values, base = column(by_variant[name], tag), column(by_variant[reference], tag)
            missing = values is None or base is None
            out[label][tag] = None if missing else paired_difference(values, base)
    return out


def format_differences(
    diffs: dict[str, dict[str, Difference | None]], base_name: str, n_seeds: int
) -> str:
    source = base_name
    if any(MINUS in label for label in diffs):
        source = f"{base_name} (or from the run after the {MINUS})"
    if n_seeds == 1:
        head = f"difference from {source} (one seed: intervals need --seeds >= 2)"
    else:
        sds_of = "the run it is measured from" if source != base_name else base_name
        head = (
            f"difference from {source}, paired by seed over {n_seeds} seeds: mean [95% interval], "
            f"|mean| in seed standard deviations of {sds_of}"
        )
    width = max(map(len, diffs), default=0)
    lines = [head]
    for name, by_tag in diffs.items():
        cells = [difference_cell(d, *HEADERS[tag]) for tag, d in by_tag.items()]
        lines.append(f"  {name + ':':<{width + 1}} " + " | ".join(cells))
    return "\n".join(lines)


def difference_cell(d: Difference | None, header: str, fmt: str) -> str:
    if d is None:
        return f"{header} n/a"
    if d.half_width is None:
        return f"{header} {d.mean:+{fmt}}"
    low, high = d.mean - d.half_width, d.mean + d.half_width
    sigmas = f"{d.sigmas:.1f} sd"
    # against a run that never varied: a finding only when the interval excludes 0
    if d.sigmas == math.inf:
        sigmas = "n/a sd (constant over seeds)" if low <= 0 <= high else "inf sd"
    return f"{header} {d.mean:+{fmt}} [{low:+{fmt}}, {high:+{fmt}}] {sigmas}"


def to_json(value):
    """Spreads and differences, also in dicts, as dicts; an infinite ratio as "inf"."""
    if isinstance(value, Spread | Difference):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return "inf" if value == math.inf else value
