"""The two ablations, defined once: remove the causal mask, or remove the 1/sqrt(D) scale.

Every place that names or builds a variant derives it from ABLATIONS: the command-line flags
(--no-mask, --no-scale), the run names (base-no-mask), the labels in picture titles
("NO MASK, scaled"), and the variants that compare.py trains and break_gpt2.py evaluates.
"""

from dataclasses import dataclass, replace

from model.config import ModelConfig


@dataclass(frozen=True)
class Ablation:
    name: str  # "no-mask": the flag is --no-mask, a run's name gets -no-mask
    switch: str  # the ModelConfig field it turns off
    label_on: str  # how a title says the switch is on
    label_off: str  # and off, in capitals so that a broken model stands out

    @property
    def flag(self) -> str:
        return f"--{self.name}"


ABLATIONS = (
    Ablation("no-mask", "causal", "causal", "NO MASK"),
    Ablation("no-scale", "scaled", "scaled", "NO SCALE"),
)


def applied(model_cfg: ModelConfig) -> list[Ablation]:
    """The ablations this model config has switched on (its switches turned off), in table order."""
    return [a for a in ABLATIONS if not getattr(model_cfg, a.switch)]


def name_suffix(model_cfg: ModelConfig) -> str:
    """What a run's name gets for its ablations: "", "-no-mask", "-no-mask-no-scale", ..."""
    return "".join(f"-{a.name}" for a in applied(model_cfg))


def flags_label(model_cfg: ModelConfig) -> str:
    """How a model's attention was built, for titles: "causal, scaled", or the ablations in capitals."""
    return ", ".join(a.label_off if not getattr(model_cfg, a.switch) else a.label_on for a in ABLATIONS)


def variants(model_cfg: ModelConfig) -> dict[str, ModelConfig]:
    """The model as it is (every switch on) and with each ablation alone, keyed by the name suffix: "", "-no-mask", ..."""
    intact = replace(model_cfg, **{a.switch: True for a in ABLATIONS})
    return {"": intact, **{f"-{a.name}": replace(intact, **{a.switch: False}) for a in ABLATIONS}}
