"""What the softmax passes back to the attention scores, with and without the scale: the ratios'
means over seeds at step 0 and on compare.py's checkpoints in <runs-dir>/compare-<config>/."""

import dataclasses
import math
import statistics
import sys
from pathlib import Path

import torch

from configs import Config
from data.batches import get_batch
from data.corpus import load_corpus
from harness.arguments import positive_int
from harness.cli import OneLineParser, run_command
from harness.experiments.comparison import add_seeds, check_seed_range, plan_runs
from harness.experiments.stats import half_width, spread
from harness.training.checkpoints import load_model
from model import GPT
from model.gradients import score_gradients
from tools.figures import record_result
from tools.tables import REMOVES


def parse_seeded(doc: str, argv: list[str], flag: str, **kwargs):
    parser = OneLineParser(doc, config="char")
    add_seeds(parser, 3, "variant (an interval needs 2)")
    parser.add_argument(flag, **kwargs)
    parser.add_argument("--record", action="store_true", help="write it into docs/figures.json")
    args, cfg = parser.parse_with_config(argv)
    check_seed_range(cfg, args.seeds)
    return args, cfg


def mean_gradients(model: GPT, batches: list) -> dict[str, float]:
    # NaN: a batch with no saturated row
    rows = [score_gradients(model, x, y) for x, y in batches]
    kept = {key: [row[key] for row in rows if not math.isnan(row[key])] for key in rows[0]}
    return {key: statistics.fmean(values) if values else math.nan for key, values in kept.items()}


def lines(scaled: list[dict], unscaled: list[dict]) -> list[dict]:
    saturated = "saturated/other row's score_grad, without the scale"
    wanted = (
        ("score_grad without/with the scale", "score_grad", scaled, "score_grad"),
        ("qk_grad without/with the scale", "qk_grad", scaled, "qk_grad"),
        (saturated, "saturated_row_grad", unscaled, "other_row_grad"),
    )
    out = []
    for name, top, bottoms, bottom in wanted:
        ratios = [a[top] / b[bottom] for a, b in zip(unscaled, bottoms, strict=True)]
        line = {"ratio": name, "per_seed": ratios, "mean": math.nan, "low": None, "high": None}
        if not any(map(math.isnan, ratios)):
            line["mean"] = statistics.fmean(ratios)
            half = half_width(spread(ratios))
            if half is not None:
                line["low"], line["high"] = line["mean"] - half, line["mean"] + half
        out.append(line)
    return out


def measure(cfg: Config, n_seeds: int, n_batches: int, runs_dir: Path) -> dict:
    corpus = load_corpus(cfg.data)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=corpus.tokenizer.vocab_size)
    cfg = dataclasses.replace(cfg, model=model_cfg)
    runs = plan_runs(cfg, runs_dir / f"compare-{cfg.name}", n_seeds, [REMOVES["scaled"]]).values()
    B, T = cfg.train.batch_size, cfg.model.block_size
    found = {"init": ([], []), "end": ([], [])}  # with the scale, without
    val_gen = torch.Generator().manual_seed(0)
    val_batches = [get_batch(corpus.val, B, T, val_gen) for _ in range(n_batches)]
    for pair in zip(*runs, strict=True):
        gen = torch.Generator().manual_seed(pair[0].train.seed)
        batches = [get_batch(corpus.train, B, T, gen) for _ in range(n_batches)]
        ends = [run.run_dir / "ckpt.pt" for run in pair]
        for side, run in enumerate(pair):
            torch.manual_seed(run.train.seed)  # as train.py seeds before it builds the model
            results = {"init": mean_gradients(GPT(run.model), batches)}
            if all(path.is_file() for path in ends):
                results["end"] = mean_gradients(load_model(ends[side])[0], val_batches)
            for when, means in results.items():
                found[when][side].append(means)
    return {when: lines(*runs) for when, runs in found.items() if runs[0]}


def main(argv: list[str]) -> dict:
    args, cfg = parse_seeded(
        __doc__, argv, "--batches", type=positive_int, default=4, help="per seed and run, default 4"
    )
    result = measure(cfg, args.seeds, args.batches, Path(cfg.train.runs_dir))
    ratios = "mean of the per-seed ratios"
    shown = " [95% interval]" if args.seeds > 1 else " (one seed: no interval)"
    for when, found in result.items():
        print(f"{when}: {args.seeds} seeds x {args.batches} batches; {ratios}{shown}")
        for line in found:
            interval = "" if line["low"] is None else f" [{line['low']:.3f}, {line['high']:.3f}]"
            per_seed = ", ".join(f"{r:.3f}" for r in line["per_seed"])
            print(f"  {line['ratio']}: {line['mean']:.3f}{interval}; per seed {per_seed}")
    if args.record:
        record_result(f"score-gradient-{cfg.name}", "tools.score_gradient", argv, result)
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
