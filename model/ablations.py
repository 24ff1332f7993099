"""Every change to attention the project measures, defined once in CHANGES: the ablations break
(no causal mask, no 1/sqrt(D) scale, no positions), the cures mend a saturated softmax (QK-norm, a
cap on the scores), RoPE turns queries and keys by position, and four designs of shipped models
(docs/variants.md). Flags, run names, picture titles and compare.py's variants derive from it.

Without positions, attention is blind to order: with no mask either, permuting the input only
permutes the output (a bag of tokens). The causal mask alone gives order back, since position t
sees t + 1 tokens and can count them.
"""

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, replace

from model.config import ModelConfig

ABLATION, CURE, POSITIONS, SHIPPED = "ablation", "cure", "positions", "shipped"
DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelConfig)}


@dataclass(frozen=True)
class Change:
    """One change to the model: the field it sets and to what, and how flags, run names and titles
    spell it."""

    name: str  # "no-mask": the flag, the run name's part, a --variants name
    kind: str  # ABLATION, CURE, POSITIONS or SHIPPED
    field: str  # the ModelConfig field it sets
    value: bool | str | float | int  # a number is what compare.py trains; the flag takes any
    label: str  # how a title says it is applied, in capitals; a number's value follows it
    label_without: str = ""  # how a title says it is not ("causal"; "" says nothing)
    counts: str = ""  # what a whole-number flag counts ("positions"), from 1

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def takes_value(self) -> bool:
        """Whether its flag takes a value (--softcap=C) rather than setting `value` (--no-mask)."""
        return not isinstance(self.value, bool | str)

    def is_applied(self, model_cfg: ModelConfig) -> bool:
        """Whether its field holds `value` (a number: any value but the default, off)."""
        held = getattr(model_cfg, self.field)
        return held != DEFAULTS[self.field] if self.takes_value else held == self.value

    def spelled(self, model_cfg: ModelConfig) -> tuple[str, str]:
        """(run-name part, title label): ("softcap50", "SOFTCAP 50"), ("no-mask", "NO MASK")."""
        if not self.takes_value:
            return self.name, self.label
        held = f"{getattr(model_cfg, self.field):g}"
        return f"{self.name}{held}", f"{self.label} {held}"


CHANGES = (  # its order is the order of run names, labels and variants
    Change("no-mask", ABLATION, "causal", False, "NO MASK", "causal"),
    Change("no-scale", ABLATION, "scaled", False, "NO SCALE", "scaled"),
    Change("no-pos", ABLATION, "positions", "none", "NO POS"),
    Change("qk-norm", CURE, "qk_norm", True, "QK-NORM"),
    Change("softcap", CURE, "softcap", 50.0, "SOFTCAP"),  # Gemma 2's cap
    Change("rope", POSITIONS, "positions", "rope", "ROPE"),
    Change("kv-heads", SHIPPED, "kv_heads", 1, "KV-HEADS", counts="key/value heads"),
    Change("window", SHIPPED, "window", 32, "WINDOW", counts="positions"),
    Change("gate", SHIPPED, "gate", True, "GATE"),
    Change("sink", SHIPPED, "sink", True, "SINK"),
)
# what compare.py trains by default and break_gpt2.py evaluates
ABLATIONS = tuple(c for c in CHANGES if c.kind == ABLATION)
CURES = tuple(c for c in CHANGES if c.kind == CURE)


def applied(
    model_cfg: ModelConfig, kinds: Iterable[str] = (ABLATION, CURE, POSITIONS, SHIPPED)
) -> list[Change]:
    """The changes of the given kinds that this model config has, in table order."""
    return [c for c in CHANGES if c.kind in kinds and c.is_applied(model_cfg)]


def name_suffix(model_cfg: ModelConfig) -> str:
    """What a run's name gets for its changes: "", "-no-mask", "-no-scale-qk-norm", ..."""
    return "".join(f"-{c.spelled(model_cfg)[0]}" for c in applied(model_cfg))


def flags_label(model_cfg: ModelConfig) -> str:
    """How a model's attention was built, for titles, changes in capitals: "NO MASK, scaled"."""
    labels = (
        c.spelled(model_cfg)[1] if c.is_applied(model_cfg) else c.label_without for c in CHANGES
    )
    return ", ".join(label for label in labels if label)


JOIN = "+"  # several changes at once: "no-scale+qk-norm"


def variant_changes(name: str) -> list[Change]:
    """The changes one variant name spells: "no-scale+qk-norm" -> [no-scale, qk-norm]."""
    parts = [part.strip() for part in name.split(JOIN)]
    if "" in parts or len(set(parts)) != len(parts):
        raise ValueError(
            f"a variant is a change or several joined by {JOIN} (no-mask{JOIN}no-pos), each once; "
            f"got {name!r}"
        )
    unknown = [part for part in parts if part not in {c.name for c in CHANGES}]
    if unknown:
        raise ValueError(
            f"unknown variant {unknown[0]!r}; choose from {', '.join(c.name for c in CHANGES)}"
        )
    picked = [c for c in CHANGES if c.name in parts]
    for one, other in zip(picked, picked[1:], strict=False):
        if one.field == other.field:
            raise ValueError(
                f"{one.name} and {other.name} both set model.{one.field}, so {name!r} cannot have "
                "both; pick one"
            )
    return picked


def variant_order(name: str) -> tuple[int, ...]:
    """Where a variant name sorts: single changes first, in table order, then pairs, and so on."""
    picked = variant_changes(name)
    return (len(picked), *(CHANGES.index(c) for c in picked))


def undone(model_cfg: ModelConfig, changes: Iterable[Change]) -> ModelConfig:
    """model_cfg with these changes taken back: their fields at their defaults."""
    return replace(model_cfg, **{c.field: DEFAULTS[c.field] for c in changes})


def variants(model_cfg: ModelConfig, names: Iterable[str] | None = None) -> dict[str, ModelConfig]:
    """The model with nothing changed and with each variant, keyed by the name suffix: "",
    "-no-mask", "-no-scale-qk-norm", ... in table order, single changes first. names: the variants
    ("no-mask", "no-scale+qk-norm", ...); None takes every ablation, each alone."""
    intact = undone(model_cfg, CHANGES)
    chosen = (
        [[a] for a in ABLATIONS]
        if names is None
        else [variant_changes(name) for name in sorted(names, key=variant_order)]
    )
    out = {"": intact}
    for picked in chosen:
        try:
            one = replace(intact, **{c.field: c.value for c in picked})
        # a value this model cannot take: the window variant's 32 positions in a block of 16
        except ValueError as e:
            raise ValueError(f"variant {JOIN.join(c.name for c in picked)}: {e}") from None
        out[name_suffix(one)] = one
    return out
