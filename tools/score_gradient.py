"""What the softmax passes back to the attention scores, with and without the scale, over seeds:
python -m tools.score_gradient [--config char] [--seeds 3] [--batches 4] [--runs-dir runs]
[--record]

For each seed it builds the preset's model as train.py does at step 0 (torch.manual_seed(seed), then
GPT), with the scale and without it, and measures model.gradients.score_gradients on the same
training batches: the gradient at the softmax's input (score_grad) and on the query and key weights
(qk_grad). Where `python compare.py --seeds N` has left its runs in <runs-dir>/compare-<config>/, it
measures their last checkpoints too, on fixed val batches. Each seed pairs the two variants (same
initialisation, same batches); the line gives the ratio without/with the scale, its mean over seeds
and a 95% interval (Student's t). --record writes the result into docs/figures.json, with the
machine and the date, for the docs to quote (python -m tools.docs_figures).
"""

import dataclasses
import math
import statistics
import sys
from pathlib import Path

import torch

from configs import Config
from data.batches import get_batch
from data.corpus import load_corpus
from harness.arguments import positive_int, seed_count
from harness.cli import OneLineParser, run_command
from harness.experiments.comparison import check_seed_range, plan_runs
from harness.experiments.stats import half_width, spread
from harness.training.checkpoints import load_model
from model import GPT
from model.ablations import ABLATIONS
from model.gradients import score_gradients
from tools.figures import record_result

QUANTITIES = ("score_grad", "qk_grad", "saturated_row_grad", "other_row_grad")


def mean_gradients(
    model: GPT, batches: list[tuple[torch.Tensor, torch.Tensor]]
) -> dict[str, float]:
    """score_gradients averaged over batches; a batch without saturated rows (NaN there) adds
    nothing to saturated_row_grad.
    """
    rows = [score_gradients(model, x, y) for x, y in batches]
    means = {}
    for key in rows[0]:
        values = [row[key] for row in rows if not math.isnan(row[key])]
        means[key] = statistics.fmean(values) if values else math.nan
    return means


def ratio_line(name: str, numerators: list[float], denominators: list[float]) -> dict:
    """Per seed numerator / denominator; their mean and 95% interval (Student's t; None with one
    seed, NaN and None
    when a seed has no value: a model without saturated rows)."""
    # NaN where a model had no saturated row
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True)]
    mean = statistics.fmean(ratios) if not any(map(math.isnan, ratios)) else math.nan
    half = half_width(spread(ratios)) if mean == mean else None
    return {
        "ratio": name,
        "per_seed": ratios,
        "mean": mean,
        "low": None if half is None else mean - half,
        "high": None if half is None else mean + half,
    }


def lines(found: dict[str, tuple[list[float], list[float]]]) -> list[dict]:
    """The ratios the docs quote, from each quantity's values (with the scale, without it) per seed."""
    return [
        ratio_line(
            "score_grad without/with the scale", found["score_grad"][1], found["score_grad"][0]
        ),
        ratio_line("qk_grad without/with the scale", found["qk_grad"][1], found["qk_grad"][0]),
        ratio_line(
            "saturated/other row's score_grad, without the scale",
            found["saturated_row_grad"][1],
            found["other_row_grad"][1],
        ),
    ]


def measure(cfg: Config, n_seeds: int, n_batches: int, runs_dir: Path) -> dict:
    """{when: ratio lines} at initialisation ("init"), and at the end of training ("end") where
    compare.py's checkpoints exist.
    """
    corpus = load_corpus(cfg.data)
    cfg = dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, vocab_size=corpus.tokenizer.vocab_size)
    )
    no_scale = next(a.name for a in ABLATIONS if a.field == "scaled")
    scaled_runs, unscaled_runs = plan_runs(
        cfg, runs_dir / f"compare-{cfg.name}", n_seeds, [no_scale]
    ).values()  # as it is, without the scale
    B, T = cfg.train.batch_size, cfg.model.block_size
    # per quantity: (with the scale, without)
    found = {when: {q: ([], []) for q in QUANTITIES} for when in ("init", "end")}
    val_gen = torch.Generator().manual_seed(0)
    # the same for every run
    val_batches = [get_batch(corpus.val, B, T, val_gen) for _ in range(n_batches)]
    for pair in zip(scaled_runs, unscaled_runs, strict=True):
        gen = torch.Generator().manual_seed(pair[0].train.seed)
        # this seed's first training batches
        batches = [get_batch(corpus.train, B, T, gen) for _ in range(n_batches)]
        ends = [run.run_dir / "ckpt.pt" for run in pair]
        for side, run in enumerate(pair):
            torch.manual_seed(run.train.seed)  # as train.py seeds before it builds the model
            results = {"init": mean_gradients(GPT(run.model), batches)}
            if all(path.is_file() for path in ends):
                results["end"] = mean_gradients(load_model(ends[side])[0], val_batches)
            for when, values in results.items():
                for q in QUANTITIES:
                    found[when][q][side].append(values[q])
    return {when: lines(found[when]) for when in found if found[when]["qk_grad"][0]}


def main(argv: list[str]) -> dict:
    parser = OneLineParser(__doc__, config="char")
    parser.add_argument(
        "--seeds", type=seed_count, default=3, help="seeds train.seed + 0..N-1 (default 3)"
    )
    parser.add_argument(
        "--batches", type=positive_int, default=4, help="batches per seed and variant (default 4)"
    )
    parser.add_argument(
        "--record", action="store_true", help="write the result into docs/figures.json"
    )
    args, cfg = parser.parse_with_config(argv)
    check_seed_range(cfg, args.seeds)
    result = measure(cfg, args.seeds, args.batches, Path(cfg.train.runs_dir))
    for when, lines in result.items():
        interval_of = " [95% interval]" if args.seeds > 1 else " (one seed: no interval)"
        print(
            f"{when}: {args.seeds} seeds x {args.batches} batches; mean of the per-seed ratios{interval_of}"
        )
        for line in lines:
            interval = "" if line["low"] is None else f" [{line['low']:.3f}, {line['high']:.3f}]"
            print(
                f"  {line['ratio']}: {line['mean']:.3f}{interval}; per seed {', '.join(f'{r:.3f}' for r in line['per_seed'])}"
            )
    if args.record:
        record_result(f"score-gradient-{cfg.name}", "tools.score_gradient", argv, result)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
