"""The Markdown tables of README.md and docs/experiment.md, each rendered from docs/figures.json
alone.

tools/docs_figures.py writes them into the docs (a table is found by its header row) and the suite
fails when a doc's table differs from what this file renders. A variant is named by its run
name: the comparison's config, then the ablations it applies ("char-no-mask-no-pos").
"""

import re
from collections.abc import Callable

from harness.experiments.stats import COLUMNS, MINUS, Spread, format_table
from harness.experiments.sweep import COLUMNS as SWEEP_COLUMNS
from harness.experiments.sweep import format_sweep
from model.ablations import ABLATIONS, CHANGES, CURE, JOIN, SHIPPED, variant_changes, variant_order
from tools.quotes import COMPARISONS, MORE_ROWS, SWEEPS

# what positions change
ORDER_COLUMNS = ("loss/val", "loss/val_honest", "loss/order_use", "attn/entropy", "loss/leak_gap")
HEADERS = {tag: header for header, tag, _ in COLUMNS}
# a change's value as a run name spells it ({:g}: 50, 1.5, 1e+06)
NUMBER = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"
# the ablation that turns each switch off: REMOVES["causal"] is no-mask
REMOVES = {a.field: a.name for a in ABLATIONS}


def removed(variant: str, config: str) -> tuple[str, ...]:
    """The changes a variant's name applies, in table order: ("no-mask", "no-pos") for
    "char-no-mask-no-pos", ("rope",) for "char-rope", ("no-scale", "softcap") for
    "char-no-scale-softcap50" (a change that takes a number spells it after its name)."""
    rest, found = variant.removeprefix(config) if variant.startswith(config) else None, []
    # run names spell their changes in the table's order (model/ablations.py's name_suffix)
    for change in CHANGES:
        spelled = rest and re.match(
            rf"-{re.escape(change.name)}{NUMBER if change.takes_value else ''}(?=-|$)", rest
        )
        if spelled:
            found.append(change.name)
            rest = rest[spelled.end() :]
    if rest != "":
        raise ValueError(f"{variant!r} is not {config!r} with changes of model/ablations.py")
    return tuple(found)


def in_table_order(names, config: str) -> list[str]:
    """Variant names (or differences' labels) as compare.py orders them: the preset, each ablation
    alone in the table's order, then those removing several; a difference measured from another
    variant (a label with −) after its variant. docs/figures.json keeps its keys sorted, which would
    put char-no-mask-no-pos before char-no-pos."""

    def key(label: str) -> tuple:
        variant, _, reference = label.partition(f" {MINUS} ")
        picked = removed(variant, config)
        # the preset itself sorts first
        return (variant_order(JOIN.join(picked)) if picked else (), reference)

    return sorted(names, key=key)


def config_of(key: str) -> str:
    """The preset a comparison's entry measured: "char" for "char-3seeds" and for
    "char-3seeds-rope".
    """
    return re.fullmatch(r"(.+?)-\d+seeds(?:-.+)?", key)[1]


def comparisons(figures: dict) -> list[tuple[str, dict]]:
    """README's comparisons, in its order, as (config, the entry's value)."""
    return [(config_of(key), figures[key]["value"]) for key in COMPARISONS]


def sweep_of(figures: dict, config: str) -> dict:
    """This config's learning-rate sweep (SWEEPS: "char-sweep" for char), the entry's value; {} if
    it has none.
    """
    return next((figures[key]["value"] for key in SWEEPS if key.rsplit("-", 1)[0] == config), {})


def cured(figures: dict, config: str) -> dict[str, str]:
    """The sweep's variants of this config that apply a cure, each with its --variants spelling
    ({"char-qk-norm": "qk-norm"}), in the sweep's order: their rows at the preset's rate (the
    sweep's "preset": compare.json's aggregate and differences of those runs) join the config's rows
    in the tables."""
    spelled = sweep_of(figures, config).get("variants", {})
    return {
        variant: name
        for variant, name in spelled.items()
        if any(c.kind == CURE for c in variant_changes(name))
    }


def cell(difference: dict) -> str:
    low = difference.get("low", difference["mean"] - (difference.get("half_width") or 0.0))
    high = difference.get("high", difference["mean"] + (difference.get("half_width") or 0.0))
    return f"{difference['mean']:+.3f} [{low:+.3f}, {high:+.3f}]"


def readme_table(figures: dict) -> str:
    """README's table: the preset and each change alone, mean ± sd over seeds (wall time left out:
    it is the machine's). Its comparisons (COMPARISONS) give the rows first; a further comparison
    (MORE_ROWS) adds the variants they lack, and each cure alone that the sweep trained at the
    preset's rate (SWEEPS) joins too, each among its preset's rows in the table's order."""
    # config -> variant -> its aggregate, the first comparison's
    shown: dict[str, dict[str, dict]] = {}
    for config, value in comparisons(figures) + [
        (config_of(key), figures[key]["value"]) for key in MORE_ROWS
    ]:
        for variant, stats in value["aggregate"].items():
            if len(removed(variant, config)) <= 1:
                shown.setdefault(config, {}).setdefault(variant, stats)
        # each cure alone, from the sweep's runs at the preset's rate
        for variant, spelled in cured(figures, config).items():
            if JOIN not in spelled:
                shown[config].setdefault(
                    variant, sweep_of(figures, config)["preset"]["aggregate"][variant]
                )
    rows = {}
    for config, variants in shown.items():
        for variant in in_table_order(variants, config):
            rows[variant] = {
                tag: None if s is None else Spread(s["mean"], s["std"], s["n"])
                for tag, s in variants[variant].items()
            }
    # columns the runs measured
    recorded = [
        c for c in COLUMNS if c[1] != "wall_s" and any(row.get(c[1]) for row in rows.values())
    ]
    return format_table(rows, recorded)


def differences_table(figures: dict) -> str:
    """docs/experiment.md's first table: no mask and no scale, each minus base, then the cures at
    the preset's rate (from the sweep's runs; a cure beside an ablation also minus each variant with
    one change fewer), paired by seed, mean [95% interval]."""
    tags = ("loss/val", "loss/val_honest", "attn/entropy", "attn/saturated_frac")
    lines = ["| variant | val | val honest | entropy | saturated |", "|---|---:|---:|---:|---:|"]
    for config, value in comparisons(figures):
        rows = [
            (label, value)
            for label in in_table_order(value["differences"], config)
            if MINUS not in label
            and removed(label, config) in ((REMOVES["causal"],), (REMOVES["scaled"],))
        ]
        cures, preset = cured(figures, config), sweep_of(figures, config).get("preset", {})
        rows += [
            (label, preset)
            for label in in_table_order(preset.get("differences", {}), config)
            if label.partition(f" {MINUS} ")[0] in cures
        ]
        for label, source in rows:
            lines.append(
                f"| {label} | "
                + " | ".join(cell(source["differences"][label][tag]) for tag in tags)
                + " |"
            )
    return "\n".join(lines)


def sweep_table(figures: dict) -> str:
    """docs/experiment.md's sweep (SWEEPS' first, char's): per learning rate and variant, at the end
    of training, mean ± the 95% interval's half width."""
    value, config = figures[SWEEPS[0]]["value"], SWEEPS[0].rsplit("-", 1)[0]
    return format_sweep(
        value,
        (*SWEEP_COLUMNS, ("saturated", "attn/saturated_frac", ".3f")),
        in_table_order(value["aggregate"], config),
    )


def order_variants(config: str) -> list[str]:
    """The preset, without positions, without the mask, without both: the rows the order tables
    compare.
    """
    mask, pos = REMOVES["causal"], REMOVES["positions"]
    return [config, f"{config}-{pos}", f"{config}-{mask}", f"{config}-{mask}-{pos}"]


def order_table(figures: dict) -> str:
    """docs/experiment.md's order table: with and without positions, with and without the mask, mean
    ± sd over seeds.
    """
    lines = [
        "| run | " + " | ".join(HEADERS[tag] for tag in ORDER_COLUMNS) + " |",
        "|---|" + "---:|" * len(ORDER_COLUMNS),
    ]
    for config, value in comparisons(figures):
        for variant in order_variants(config):
            stats = value["aggregate"][variant]
            lines.append(
                f"| {variant} | "
                + " | ".join(
                    f"{stats[t]['mean']:.3f} ± {stats[t]['std']:.3f}" for t in ORDER_COLUMNS
                )
                + " |"
            )
    return "\n".join(lines)


def order_differences_table(figures: dict) -> str:
    """What the positions change, paired by seed: with the mask (no-pos − base) and without it
    (no-mask-no-pos − no-mask).
    """
    lines = [
        "| difference | " + " | ".join(HEADERS[tag] for tag in ORDER_COLUMNS) + " |",
        "|---|" + "---:|" * len(ORDER_COLUMNS),
    ]
    for config, value in comparisons(figures):
        base, no_pos, no_mask, neither = order_variants(config)
        for label, shown in (
            (no_pos, f"{no_pos} {MINUS} {base}"),
            (f"{neither} {MINUS} {no_mask}", f"{neither} {MINUS} {no_mask}"),
        ):
            lines.append(
                f"| {shown} | "
                + " | ".join(cell(value["differences"][label][tag]) for tag in ORDER_COLUMNS)
                + " |"
            )
    return "\n".join(lines)


def ablation_table(figures: dict) -> str:
    """docs/experiment.md's head-ablation table: per no-mask run, the heads named, the gap before
    and after, random heads, layer 0.
    """
    lines = [
        "| run | heads named (t+1 above 0.5 on the probe text) | leak gap before | after | closed | "
        "as many random heads: closed, mean ± sd of the draws | layer 0 whole |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for config, _ in comparisons(figures):
        for run, r in figures[f"{config}-ablation"]["value"]["runs"].items():
            lines.append(
                f"| {run} | {', '.join(r['heads'])} | {r['leak_gap_before']:.3f} | {r['leak_gap_after']:.3f} | {r['closed_fraction']:.1%} | "
                f"{r['random_closed_fraction']:.1%} ± {r['random_closed_fraction_sd']:.1%} | {r['each_layer']['L0']:.1%} |"
            )
    return "\n".join(lines)


def first_steps_table(figures: dict) -> str:
    """docs/performance.md's GPU section: the first CPU steps of the char-gpu preset at a reduced
    shape, beside nanoGPT's recipe at the same shape and that recipe's optimizer and schedule in our
    code; train / val loss at each evaluation."""
    runs = figures["char-gpu-first-steps-cpu"]["value"]
    columns = [
        ("nanogpt", "nanoGPT (AdamW)"),
        ("ours_adamw", "ours, nanoGPT's AdamW and schedule"),
        ("ours_muon", "ours, char-gpu (Muon)"),
    ]
    lines = [
        "| step | " + " | ".join(f"{label}: train / val" for _, label in columns) + " |",
        "|---:|" + "---:|" * len(columns),
    ]
    for step in sorted(runs["nanogpt"]["val"], key=int):
        cells = [
            f"{runs[key]['train'][step]:.3f} / {runs[key]['val'][step]:.3f}" for key, _ in columns
        ]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scored_variants(value: dict, config: str) -> dict[str, list[str]]:
    """A context_figures entry's variants in table order, each with the contexts it was scored at,
    shortest first (docs/figures.json keeps its keys sorted)."""
    names = in_table_order(
        [name for name, entry in value.items() if isinstance(entry, dict) and "curve" in entry],
        config,
    )
    return {
        name: sorted(
            (label for label, c in value[name].items() if isinstance(c, dict) and "length" in c),
            key=lambda label: value[name][label]["length"],
        )
        for name in names
    }


def bucket_names(scored: dict) -> list[str]:
    """The position buckets of one variant's context ("0-63", "64-127", ...), in order of position."""
    return sorted(
        (name for name in scored if name[0].isdigit()), key=lambda name: int(name.split("-")[0])
    )


def contexts_table(figures: dict, key: str = "char-contexts") -> str:
    """docs/experiment.md's table of contexts: each variant's loss over the val split at each
    context, mean [95% interval] over seeds; past 1x a learned table has no row to give (score.py
    refuses)."""
    value = figures[key]["value"]
    variants = scored_variants(value, key.removesuffix("-contexts"))
    labels = max(variants.values(), key=len)
    lengths = {
        label: value[name][label]["length"] for name, scored in variants.items() for label in scored
    }
    lines = [
        "| run | positions | "
        + " | ".join(f"{label}: {lengths[label]} tokens" for label in labels)
        + " |",
        "|---|---|" + "---:|" * len(labels),
    ]
    for name, scored in variants.items():
        cells = [
            interval_cell(value[name][label]["loss"]) if label in scored else "no row past 1x"
            for label in labels
        ]
        lines.append(f"| {name} | {value[name]['positions']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def buckets_table(figures: dict, key: str = "char-contexts") -> str:
    """docs/experiment.md's table of positions: each variant's loss at each bucket of positions,
    along the longest context it was scored at, mean [95% interval] over seeds."""
    value = figures[key]["value"]
    longest = {
        name: (scored[-1], value[name][scored[-1]])
        for name, scored in scored_variants(value, key.removesuffix("-contexts")).items()
    }
    names = max((bucket_names(entry) for _, entry in longest.values()), key=len)
    lines = [
        "| run, along its longest context | " + " | ".join(f"positions {n}" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for name, (label, entry) in longest.items():
        lines.append(
            f"| {name} ({label}) | "
            + " | ".join(interval_cell(entry[n]) if n in entry else "" for n in names)
            + " |"
        )
    return "\n".join(lines)


def interval_cell(s: dict) -> str:
    return f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}]"


def variants_table(figures: dict, config: str = "char", key: str = "") -> str:
    """docs/variants.md's table: the comparison of the shipped variants (val, the paired
    difference), bench.py --variants's cache, sampling speed and step time, and tools/variants.py's
    first-token weight and sink weight."""
    compared = figures[
        key or f"{config}-3seeds" + "".join(f"-{c.name}" for c in CHANGES if c.kind == SHIPPED)
    ]["value"]
    bench, weights = (
        figures[f"{config}-variants-bench"]["value"],
        figures[f"{config}-variants-weights"]["value"],
    )
    lines = [
        f"| run | val | − {config} [95% interval] | KV cache, bytes per token | sampling, tokens/s | training step "
        "| first-token weight / uniform share (largest head) | sink's weight |",
        "|---|" + "---:|" * 7,
    ]
    for name, stats in (
        (name, compared["aggregate"][name])
        for name in in_table_order(compared["aggregate"], config)
    ):
        d, b, w = (
            compared["differences"].get(name, {}).get("loss/val"),
            bench["variants"][name],
            weights[name],
        )
        delta = (
            f"{d['mean']:+.3f} [{d['mean'] - d['half_width']:+.3f}, {d['mean'] + d['half_width']:+.3f}]"
            if d
            else "(the preset)"
        )
        lines.append(
            f"| {name} | {stats['loss/val']['mean']:.3f} ± {stats['loss/val']['std']:.3f} | {delta} | "
            f"{b['cache_bytes_per_token']:,.0f} ({b['cache_fraction']:.0%}) | {b['sample_tokens_per_s']:,.0f} | "
            f"{b['step_ms']:.0f} ms | {w['ratio']['mean']:.2f} ({w['ratio_max']['mean']:.2f}) | {w['sink']['mean']:.3f} |"
        )
    return "\n".join(lines)


TABLES: list[tuple[str, Callable[[dict], str]]] = [
    ("README.md", readme_table),
    ("docs/experiment.md", differences_table),
    ("docs/experiment.md", order_table),
    ("docs/experiment.md", order_differences_table),
    ("docs/experiment.md", ablation_table),
    ("docs/experiment.md", sweep_table),
    ("docs/experiment.md", contexts_table),
    ("docs/experiment.md", buckets_table),
    ("docs/performance.md", first_steps_table),
    ("docs/variants.md", variants_table),
]
