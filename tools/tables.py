"""The Markdown tables of README.md and docs/ from docs/figures.json: a comment `table: NAME`
above a table names its function here."""

import re

from harness.experiments.stats import (
    COLUMNS,
    HEADERS,
    MINUS,
    Spread,
    format_cell,
    format_table,
    markdown_table,
)
from harness.experiments.sweep import COLUMNS as SWEEP_COLUMNS
from harness.experiments.sweep import format_sweep
from model.ablations import ABLATIONS, CHANGES, CURE, JOIN, SHIPPED, variant_changes, variant_order

COMPARISONS = ("char-3seeds", "base-3seeds")  # README's table's, in its order
SWEEPS = ("char-sweep",)  # their cures at the preset's rate join their config's tables
MORE_ROWS = ("char-3seeds-rope",)  # whose other variants README's table shows too
ORDER_TAGS = ("loss/val", "loss/val_honest", "loss/order_use", "attn/entropy", "loss/leak_gap")
ORDER_COLUMNS = [(HEADERS[tag][0], tag, ".3f") for tag in ORDER_TAGS]
NUMBER = r"\d+(?:\.\d+)?(?:e[+-]?\d+)?"  # as {:g} spells a change's value
REMOVES = {a.field: a.name for a in ABLATIONS}  # REMOVES["causal"] is no-mask


def removed(variant: str, config: str) -> tuple[str, ...]:
    """The changes a variant's name applies, in table order: ("no-scale", "softcap") for
    "char-no-scale-softcap50"."""
    rest, found = variant.removeprefix(config), []
    for change in CHANGES:  # run names spell their changes in this order (name_suffix)
        number = NUMBER if change.takes_value else ""
        if spelled := re.match(rf"-{re.escape(change.name)}{number}(?=-|$)", rest):
            found.append(change.name)
            rest = rest[spelled.end() :]
    if rest != "" or not variant.startswith(config):
        raise ValueError(f"{variant!r} is not {config!r} with changes of model/ablations.py")
    return tuple(found)


def in_table_order(names, config: str) -> list[str]:
    """Variant names (or "a − b" labels, after a) as compare.py orders them."""

    def key(label: str) -> tuple:
        variant, _, reference = label.partition(f" {MINUS} ")
        picked = removed(variant, config)
        return (variant_order(JOIN.join(picked)) if picked else (), reference)

    return sorted(names, key=key)


def comparisons(figures: dict, more: tuple = ()) -> list[tuple[str, dict]]:
    keys = COMPARISONS + more
    return [(re.fullmatch(r"(.+?)-\d+seeds(-.+)?", k)[1], figures[k]["value"]) for k in keys]


def sweep_of(figures: dict, config: str) -> dict:
    return next((figures[key]["value"] for key in SWEEPS if key.rsplit("-", 1)[0] == config), {})


def cured(figures: dict, config: str) -> dict[str, str]:
    spelled = sweep_of(figures, config).get("variants", {})
    return {
        variant: name
        for variant, name in spelled.items()
        if any(c.kind == CURE for c in variant_changes(name))
    }


def cell(d: dict, sign: str = "+") -> str:
    half = d.get("half_width") or 0.0
    low, high = d.get("low", d["mean"] - half), d.get("high", d["mean"] + half)
    return f"{d['mean']:{sign}.3f} [{low:{sign}.3f}, {high:{sign}.3f}]"


def spreads(stats: dict) -> dict[str, Spread | None]:
    return {tag: None if s is None else Spread(**s) for tag, s in stats.items()}


def readme_table(figures: dict) -> str:
    """The preset and each change alone (no wall time: it is the machine's), a cure alone from the
    sweep at the preset's rate."""
    shown = {}  # config -> variant -> the first aggregate found
    for config, value in comparisons(figures, MORE_ROWS):
        for variant, stats in value["aggregate"].items():
            if len(removed(variant, config)) <= 1:
                shown.setdefault(config, {}).setdefault(variant, stats)
        for variant, spelled in cured(figures, config).items():
            if JOIN not in spelled:
                preset = sweep_of(figures, config)["preset"]["aggregate"]
                shown[config].setdefault(variant, preset[variant])
    rows = {
        variant: spreads(variants[variant])
        for config, variants in shown.items()
        for variant in in_table_order(variants, config)
    }
    measured = [c for c in COLUMNS if c[1] != "wall_s" and any(r.get(c[1]) for r in rows.values())]
    return format_table(rows, measured)


def differences_table(figures: dict) -> str:
    tags = ("loss/val", "loss/val_honest", "attn/entropy", "attn/saturated_frac")
    lines = [["variant", "val", "val honest", "entropy", "saturated"]]
    alone = ((REMOVES["causal"],), (REMOVES["scaled"],))
    for config, value in comparisons(figures):
        rows = [
            (label, value)
            for label in in_table_order(value["differences"], config)
            if MINUS not in label and removed(label, config) in alone
        ]
        cures, preset = cured(figures, config), sweep_of(figures, config).get("preset", {})
        rows += [
            (label, preset)
            for label in in_table_order(preset.get("differences", {}), config)
            if label.partition(f" {MINUS} ")[0] in cures
        ]
        for label, source in rows:
            lines.append([label, *(cell(source["differences"][label][t]) for t in tags)])
    return markdown_table(lines)


def sweep_table(figures: dict) -> str:
    value, config = figures[SWEEPS[0]]["value"], SWEEPS[0].rsplit("-", 1)[0]
    return format_sweep(
        value,
        (*SWEEP_COLUMNS, ("saturated", "attn/saturated_frac", ".3f")),
        in_table_order(value["aggregate"], config),
    )


def order_variants(config: str) -> list[str]:
    mask, pos = REMOVES["causal"], REMOVES["positions"]
    return [config, f"{config}-{pos}", f"{config}-{mask}", f"{config}-{mask}-{pos}"]


def order_table(figures: dict) -> str:
    rows = {
        variant: spreads(value["aggregate"][variant])
        for config, value in comparisons(figures)
        for variant in order_variants(config)
    }
    return format_table(rows, ORDER_COLUMNS)


def order_differences_table(figures: dict) -> str:
    rows = [["difference", *(header for header, _, _ in ORDER_COLUMNS)]]
    for config, value in comparisons(figures):
        base, no_pos, no_mask, neither = order_variants(config)
        for label in (no_pos, f"{neither} {MINUS} {no_mask}"):
            shown = label if MINUS in label else f"{label} {MINUS} {base}"
            rows.append([shown, *(cell(value["differences"][label][t]) for t in ORDER_TAGS)])
    return markdown_table(rows)


def ablation_table(figures: dict) -> str:
    header = (
        "run | heads named (t+1 above 0.5 on the probe text) | leak gap before | after | closed "
        "| as many random heads: closed, mean ± sd of the draws | layer 0 whole"
    )
    rows = [header.split(" | ")]
    for config, _ in comparisons(figures):
        for run, r in figures[f"{config}-ablation"]["value"]["runs"].items():
            random = f"{r['random_closed_fraction']:.1%} ± {r['random_closed_fraction_sd']:.1%}"
            before, after = f"{r['leak_gap_before']:.3f}", f"{r['leak_gap_after']:.3f}"
            closed, layer0 = f"{r['closed_fraction']:.1%}", f"{r['each_layer']['L0']:.1%}"
            rows.append([run, ", ".join(r["heads"]), before, after, closed, random, layer0])
    return markdown_table(rows, "llrrrrr")


def first_steps_table(figures: dict) -> str:
    runs = figures["char-gpu-first-steps-cpu"]["value"]
    columns = {
        "nanogpt": "nanoGPT (AdamW)",
        "ours_adamw": "ours, nanoGPT's AdamW and schedule",
        "ours_muon": "ours, char-gpu (Muon)",
    }
    rows = [["step", *(f"{label}: train / val" for label in columns.values())]]
    for step in sorted(runs["nanogpt"]["val"], key=int):
        cells = (f"{runs[k]['train'][step]:.3f} / {runs[k]['val'][step]:.3f}" for k in columns)
        rows.append([step, *cells])
    return markdown_table(rows, "rrrr")


def curves(contexts: dict) -> dict[str, dict]:
    return {name: e for name, e in contexts.items() if isinstance(e, dict) and "curve" in e}


def lengths_of(variant: dict) -> dict[str, int]:
    return {k: c["length"] for k, c in variant.items() if isinstance(c, dict) and "length" in c}


def scored_variants(figures: dict, key: str) -> tuple[dict, dict[str, list[str]]]:
    value = figures[key]["value"]
    return value, {
        name: sorted(lengths_of(value[name]), key=lengths_of(value[name]).get)
        for name in in_table_order(curves(value), key.removesuffix("-contexts"))
    }


def contexts_table(figures: dict, key: str = "char-contexts") -> str:
    value, variants = scored_variants(figures, key)
    labels = max(variants.values(), key=len)
    lengths = {label: n for name in variants for label, n in lengths_of(value[name]).items()}
    rows = [["run", "positions", *(f"{label}: {lengths[label]} tokens" for label in labels)]]
    for name, scored in variants.items():
        loss = {label: cell(value[name][label]["loss"], "") for label in scored}
        cells = (loss.get(label, "no row past 1x") for label in labels)
        rows.append([name, value[name]["positions"], *cells])
    return markdown_table(rows, "ll" + "r" * len(labels))


def buckets_table(figures: dict, key: str = "char-contexts") -> str:
    value, variants = scored_variants(figures, key)
    longest = {name: (scored[-1], value[name][scored[-1]]) for name, scored in variants.items()}
    # the buckets ("0-15", ...) of the variant cut into the most
    cut = [[n for n in entry if n[0].isdigit()] for _, entry in longest.values()]
    names = sorted(max(cut, key=len), key=lambda n: int(n.split("-")[0]))
    rows = [["run, along its longest context", *(f"positions {n}" for n in names)]]
    rows += [
        [f"{name} ({label})", *(cell(entry[n], "") if n in entry else "" for n in names)]
        for name, (label, entry) in longest.items()
    ]
    return markdown_table(rows)


def shipped_key(config: str) -> str:
    return f"{config}-3seeds" + "".join(f"-{c.name}" for c in CHANGES if c.kind == SHIPPED)


def variants_table(figures: dict, config: str = "char", key: str = "") -> str:
    compared = figures[key or shipped_key(config)]["value"]
    bench = figures[f"{config}-variants-bench"]["value"]["variants"]
    weights = figures[f"{config}-variants-weights"]["value"]
    header = (
        f"run | val | − {config} [95% interval] | KV cache, bytes per token | sampling, tokens/s "
        "| training step | first-token weight / uniform share (largest head) | sink's weight"
    )
    rows = [header.split(" | ")]
    for name in in_table_order(compared["aggregate"], config):
        b, w = bench[name], weights[name]
        d = compared["differences"].get(name, {}).get("loss/val")
        val = format_cell(Spread(**compared["aggregate"][name]["loss/val"]), ".3f")
        cache = f"{b['cache_bytes_per_token']:,.0f} ({b['cache_fraction']:.0%})"
        speed, step = f"{b['sample_tokens_per_s']:,.0f}", f"{b['step_ms']:.0f} ms"
        first, sink = f"{w['ratio']['mean']:.2f} ({w['ratio_max']['mean']:.2f})", w["sink"]["mean"]
        cells = [val, cell(d) if d else "(the preset)", cache, speed, step, first, f"{sink:.3f}"]
        rows.append([name, *cells])
    return markdown_table(rows)
