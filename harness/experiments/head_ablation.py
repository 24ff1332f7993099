"""Which heads carry the --no-mask cheat (inspect_attention.py --ablate): the leak gap with them
off, against as many random other heads off, and with each head and each layer off."""

import dataclasses
import sys
import time
from collections.abc import Callable
from functools import partial

import torch
from tqdm import tqdm

from configs import validate_config
from data.corpus import load_corpus
from data.synthetic import load_synthetic
from data.tokenizer import Tokenizer
from harness.experiments.stats import spread
from harness.training.budget import duration
from harness.training.evaluation import make_eval_set
from model import GPT
from model.heads import ablate_heads, all_heads, head_means, head_name
from model.measurements import leak

Batches = list[tuple[torch.Tensor, torch.Tensor, list[int]]]
say_on_stderr = partial(print, file=sys.stderr, flush=True)


def run_batches(model: GPT, checkpoint: dict, tokenizer: Tokenizer) -> Batches:
    """The (x, y, positions) batches the run's evaluations scored honestly."""
    cfg = validate_config(checkpoint.get("config"), "the checkpoint", recorded=True)
    if cfg.data.source == "text":
        corpus = load_corpus(cfg.data, checkpoint.get("source_sha256"))
    else:
        corpus = load_synthetic(cfg.data)
    return make_eval_set(corpus, tokenizer, dataclasses.replace(cfg, model=model.cfg)).honest


def measure(
    model: GPT,
    batches: Batches,
    heads: list[tuple[int, int]],
    draws: int,
    seed: int,
    mean_ablation: bool = False,
    say: Callable[[str], None] = say_on_stderr,
) -> dict:
    """What ablation.json holds: the leak gap before and after `heads` are off, with as many random
    others off (`draws` times), and with each head and each layer off."""
    every = all_heads(model)
    others = [h for h in every if h not in heads]
    if draws and len(others) < len(heads):
        raise ValueError(
            f"{len(heads)} heads named and only {len(others)} others left to draw as many from; "
            "name fewer heads"
        )
    means = head_means(model, batches[0][0]) if mean_ablation else None
    started = time.perf_counter()
    before = leak(model, batches)["loss/leak_gap"]
    first_s = time.perf_counter() - started
    left = 1 + draws + len(every) + model.cfg.n_layer
    say(
        f"--ablate: {left} more leak gaps to measure, about {duration(left * first_s)} "
        f"(estimated: the first took {first_s:.3g} s)"
    )

    def closed(gap: float) -> float:
        return 1.0 - gap / before

    with tqdm(total=left, desc="leak gaps", leave=False, disable=None) as bar:

        def gap(off: list[tuple[int, int]]) -> float:
            bar.update()
            with ablate_heads(model, off, means):
                return leak(model, batches)["loss/leak_gap"]

        after = gap(heads)
        gen = torch.Generator().manual_seed(seed)
        random_draws = []
        for _ in range(draws):
            order = torch.randperm(len(others), generator=gen)[: len(heads)].tolist()
            picked = [others[i] for i in order]
            draw = {"heads": [head_name(*h) for h in picked], "leak_gap_after": gap(picked)}
            random_draws.append({**draw, "closed_fraction": closed(draw["leak_gap_after"])})
        each_head = {head_name(*h): closed(gap([h])) for h in every}
        each_layer = {
            f"L{layer}": closed(gap([h for h in every if h[0] == layer]))
            for layer in range(model.cfg.n_layer)
        }
    fractions = spread([d["closed_fraction"] for d in random_draws]) if random_draws else None
    return {
        "heads": [head_name(*h) for h in heads],
        "ablation": "mean" if mean_ablation else "zero",
        "leak_gap_before": before,
        "leak_gap_after": after,
        "closed_fraction": closed(after),
        "random_closed_fraction": fractions.mean if fractions else None,
        "random_closed_fraction_sd": fractions.std if fractions else None,
        "random_draws": random_draws,
        "each_head": each_head,
        "each_layer": each_layer,
    }


def report(result: dict) -> str:
    draws = result["random_draws"]
    lines = [
        f"ablating {', '.join(result['heads'])} ({result['ablation']}-ablation): leak gap "
        f"{result['leak_gap_before']:.3f} before, {result['leak_gap_after']:.3f} after: "
        f"{result['closed_fraction']:.1%} of it closed",
    ]
    if draws:
        fractions = [d["closed_fraction"] for d in draws]
        sd = result["random_closed_fraction_sd"]
        line = f"as many random other heads, {len(draws)} draws: "
        line += f"{result['random_closed_fraction']:.1%} closed on average"
        if sd is not None:
            line += f" (sd {sd:.1%}, from {min(fractions):.1%} to {max(fractions):.1%})"
        lines.append(line)
    for what, key in (("head alone", "each_head"), ("layer whole", "each_layer")):
        closes = ", ".join(f"{name} {f:.0%}" for name, f in result[key].items())
        lines.append(f"each {what} closes: {closes}")
    return "\n".join(lines)
