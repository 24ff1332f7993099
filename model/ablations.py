"""The three ablations, defined once: remove the causal mask, the 1/sqrt(D) scale, or the position embedding.

Every place that names or builds a variant derives it from ABLATIONS: the command-line flags
(--no-mask, --no-scale, --no-pos), the run names (base-no-mask), the labels in picture titles
("NO MASK, scaled"), and the variants that compare.py trains and break_gpt2.py evaluates.

Without positions, attention is blind to order: with no mask either, permuting the input only
permutes the output (a bag of tokens). The causal mask alone gives order back, since position t
sees t + 1 tokens and can count them.
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace

from model.config import ModelConfig


@dataclass(frozen=True)
class Ablation:
    name: str  # "no-mask": the flag is --no-mask, a run's name gets -no-mask
    switch: str  # the ModelConfig field it turns off
    label_on: str  # how a title says the switch is on ("" says nothing: titles name positions only when they are gone)
    label_off: str  # and off, in capitals so that a broken model stands out

    @property
    def flag(self) -> str:
        return f"--{self.name}"


ABLATIONS = (
    Ablation("no-mask", "causal", "causal", "NO MASK"),
    Ablation("no-scale", "scaled", "scaled", "NO SCALE"),
    Ablation("no-pos", "positions", "", "NO POS"),
)


def applied(model_cfg: ModelConfig) -> list[Ablation]:
    """The ablations this model config has switched on (its switches turned off), in table order."""
    return [a for a in ABLATIONS if not getattr(model_cfg, a.switch)]


def name_suffix(model_cfg: ModelConfig) -> str:
    """What a run's name gets for its ablations: "", "-no-mask", "-no-mask-no-scale", ..."""
    return "".join(f"-{a.name}" for a in applied(model_cfg))


def flags_label(model_cfg: ModelConfig) -> str:
    """How a model's attention was built, for titles: "causal, scaled", or the ablations in capitals ("causal, scaled, NO POS")."""
    labels = (a.label_off if not getattr(model_cfg, a.switch) else a.label_on for a in ABLATIONS)
    return ", ".join(label for label in labels if label)


def by_name(names: Iterable[str]) -> list[Ablation]:
    """The ablations that `names` ("no-mask", ...) spell, in table order, or a ValueError that lists the valid ones."""
    names = list(names)
    unknown = [name for name in names if name not in {a.name for a in ABLATIONS}]
    if unknown:
        raise ValueError(f"unknown ablation {unknown[0]!r}; choose from {', '.join(a.name for a in ABLATIONS)}")
    return [a for a in ABLATIONS if a.name in names]


JOIN = "+"  # a variant with several ablations at once: "no-mask+no-pos"


def variant_ablations(name: str) -> list[Ablation]:
    """The ablations one variant name spells: "no-pos" -> [no-pos], "no-mask+no-pos" -> [no-mask, no-pos]."""
    parts = [part.strip() for part in name.split(JOIN)]
    if "" in parts or len(set(parts)) != len(parts):
        raise ValueError(f"a variant is an ablation or several joined by {JOIN} (no-mask{JOIN}no-pos), each once; got {name!r}")
    return by_name(parts)


def variant_order(name: str) -> tuple[int, ...]:
    """Where a variant name sorts: single ablations first, in table order, then pairs, and so on."""
    picked = variant_ablations(name)
    return (len(picked), *(ABLATIONS.index(a) for a in picked))


def variants(model_cfg: ModelConfig, names: Iterable[str] | None = None) -> dict[str, ModelConfig]:
    """The model as it is (every switch on) and with each ablation alone, keyed by the name suffix: "", "-no-mask", ...

    names picks the variants: an ablation ("no-mask", "no-pos", ...) or several joined by + ("no-mask+no-pos",
    keyed "-no-mask-no-pos"); None takes every ablation in the table, each alone. Keys follow the table's order, single
    ablations first, whatever the order of names.
    """
    intact = replace(model_cfg, **{a.switch: True for a in ABLATIONS})
    chosen = [[a] for a in ABLATIONS] if names is None else [variant_ablations(name) for name in sorted(names, key=variant_order)]
    out = {"": intact}
    for picked in chosen:
        one = replace(intact, **{a.switch: False for a in picked})
        out[name_suffix(one)] = one
    return out
