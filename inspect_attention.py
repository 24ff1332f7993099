"""Look inside a model: python inspect_attention.py [--run NAME | --checkpoint PATH | --pretrained
gpt2] --text "ROMEO: But soft"

Writes token-labelled heatmaps of the attention weights (one grid of heads per layer, and one
picture per head when the model has few heads), one interactive HTML page of every head
(attention.html: pick a head, hover a token), and prints a table of the heads ranked by entropy that
names the previous-token heads, the next-token heads (the --no-mask cheat: they read the answer),
the first-token sinks and the induction heads (--repeated shows them best: random tokens in which a
segment recurs, docs/induction.md). Works on any checkpoint, including the ablated runs, and on
GPT-2.

--ablate next-token (or --ablate L0H1,L0H3, or L1 for a whole layer) tests the claim that the named
heads carry the cheat of a model
trained without the mask: it measures the leak gap on the run's own val batches before and after
switching those heads off, and after switching as many randomly drawn other heads off (--draws
times), prints the closed fractions, and writes them to ablation.json
(harness/experiments/head_ablation.py says what it holds).
"""

from harness.stopping import exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import json
import sys
from pathlib import Path

import torch

from configs import ConfigError
from data.files import write_atomically
from data.synthetic import PROBE_SEED, RepeatedRandom
from data.tokenizer import TokenizerError, token_labels
from harness.arguments import draw_count, seed, typed_text
from harness.cli import OneLineParser, add_model_source, load_model_source, run_command
from harness.experiments.head_ablation import measure, report, run_batches
from harness.folders import writable_folder
from harness.pictures.heatmaps import attention_page, heatmap_figure, save_layer_heatmaps
from harness.training.evaluation import PROBE_TEXT
from model.ablations import flags_label
from model.heads import head_name, parse_heads
from model.induction import SHORTEST_CONTEXT
from model.roles import MIN_ROLE_ROWS, NEXT_TOKEN_THRESHOLD, ROLES, head_roles, role_line
from model.sampling import check_finite_logits

REPEATED_TOKENS = 48  # length of the --repeated sequence (at most block_size)
# heads in all; above it (GPT-2 has 144) only the per-layer grids and the HTML page
PER_HEAD_PICTURES_UP_TO = 16


def main(argv: list[str]) -> Path:
    parser = OneLineParser(
        description="Heatmaps, an HTML page and per-head statistics of a model's attention."
    )
    add_model_source(parser)
    parser.add_argument(
        "--text",
        type=typed_text,
        help="the text to look at (default: what evaluations draw, if the vocabulary holds it)",
    )
    parser.add_argument(
        "--repeated",
        action="store_true",
        help="look at random tokens in which a segment recurs (the default if not)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="folder for the pictures and the page (default: <run folder>/inspect)",
    )
    parser.add_argument(
        "--per-head",
        action="store_true",
        help="also one PNG per head, however many heads there are",
    )
    parser.add_argument(
        "--ablate",
        metavar="HEADS",
        help='switch heads off and measure the leak gap: "next-token", or L0H1,L0H3 (L1: a layer)',
    )
    parser.add_argument(
        "--draws",
        type=draw_count,
        default=10,
        help="--ablate: random draws of as many other heads (default 10, 0-1000)",
    )
    parser.add_argument(
        "--seed", type=seed, default=0, help="--ablate: the seed of those draws (default 0)"
    )
    parser.add_argument(
        "--mean-ablation",
        action="store_true",
        help="--ablate: replace a head's output by its mean, not by zero",
    )
    args = parser.parse_args(argv)
    if args.out:
        # before the model loads: a wrong --out costs nothing
        writable_folder(args.out, "--out", create=False)

    model, tokenizer, described, folder, checkpoint = load_model_source(args, "cpu")
    if args.ablate and model.cfg.causal:
        raise ConfigError(
            "--ablate measures the leak gap of a model trained without the mask; this one is causal, so it has none to close"
        )
    if args.ablate and checkpoint is None:
        raise ConfigError(
            "--ablate measures a run of ours on its own val text; give --run or --checkpoint"
        )
    # named heads are checked before any work; next-token heads are found below, in the role table
    try:
        named = (
            parse_heads(args.ablate, model.cfg.n_layer, model.cfg.n_head)
            if args.ablate not in (None, "next-token")
            else None
        )
    except ValueError as e:
        raise ConfigError(f"--ablate: {e}") from None
    try:
        ids = (
            []
            if args.repeated
            else tokenizer.encode(args.text if args.text is not None else PROBE_TEXT)
        )
    except TokenizerError:
        if args.text is not None:
            raise
        # a vocabulary without the probe text's characters (a synthetic source's): a repeated
        # sequence instead
        ids = []
    if args.repeated or (args.text is None and not ids):
        n = min(model.cfg.block_size, REPEATED_TOKENS)
        # in 2 tokens every head read as induction, previous-token and first-token sink at once
        if n < SHORTEST_CONTEXT:
            raise ConfigError(
                f"a context of {n} token{'s' * (n > 1)} is too short to tell heads' roles from chance (it takes {SHORTEST_CONTEXT}); try --text"
            )
        ids = (
            RepeatedRandom(tokenizer.vocab_size, n // 4, n // 2)
            .sequence(n, torch.Generator().manual_seed(PROBE_SEED))
            .tolist()
        )
    if not ids:
        raise TokenizerError("the text is empty; give some with --text")
    if len(ids) > model.cfg.block_size:
        print(
            f"note: the text is {len(ids)} tokens; only its first {model.cfg.block_size} (block_size) are shown"
        )
        ids = ids[: model.cfg.block_size]
    # weights that are not finite (a diverged or damaged checkpoint) would draw pictures of nothing
    with torch.no_grad():
        # refused in sample.py's and score.py's words
        check_finite_logits(model(torch.tensor([ids]))[0])
    weights = model.attention_weights(torch.tensor([ids]))  # n_layer x (1, H, T, T)
    labels = token_labels(tokenizer, ids)
    out = writable_folder(args.out or folder / "inspect", "--out")
    flags, name = flags_label(model.cfg), folder.name
    per_head = args.per_head or model.cfg.n_layer * model.cfg.n_head <= PER_HEAD_PICTURES_UP_TO
    save_layer_heatmaps(weights, labels, out, name, flags, dpi=110, causal=model.cfg.causal)
    for layer, w in enumerate(weights if per_head else []):
        for head in range(w.shape[1]):
            title = f"{name}: layer {layer}, head {head}"
            fig = heatmap_figure(
                w[0, head : head + 1], labels, title, [head_name(layer, head)], model.cfg.causal
            )
            fig.savefig(out / f"attn_L{layer}_H{head}.png", dpi=110)
    page = attention_page(
        [w[0] for w in weights],
        labels,
        f"{name}: attention ({flags})",
        model.cfg.causal,
        out / "attention.html",
    )

    print(
        f"{described} ({flags}), {len(ids)} tokens; heatmaps in {out}/, every head on one page: {page}"
    )
    print(
        "heads by entropy, most focused first; t-1: mean weight on the previous token (rows t >= 1), "
        "t+1: on the next one, the answer (rows t <= T-2; 0 under the mask), first: on position 0 (rows t >= 1), "
        "induction: on the token after the previous occurrence of the current one (rows whose token occurred before)"
    )
    print(
        "| layer | head | entropy | max weight | saturated | future mass | t-1 | t+1 | first | induction | role |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    rows = head_roles(
        weights,
        model.cfg.causal,
        torch.tensor([ids]),
        [block.attn.window for block in model.blocks],
    )
    for row in rows:
        print(
            f"| {row['layer']} | {row['head']} | {row['entropy']:.3f} | {row['max_weight']:.3f} | {row['saturated']:.2f} | "
            f"{row['future_mass']:.3f} | {row['previous']:.3f} | {row['next']:.3f} | {row['first']:.3f} | {row['induction']:.3f} | "
            f"{', '.join(row['roles'])} |"
        )
    for role, key, threshold in ROLES:
        print(role_line(rows, role, key, threshold))
    if args.ablate:
        by_place = sorted(rows, key=lambda r: (r["layer"], r["head"]))
        ablate(
            model, tokenizer, checkpoint, named or next_token_heads(by_place), args, out, by_place
        )
    return out


def next_token_heads(rows: list[dict]) -> list[tuple[int, int]]:
    """The next-token heads of the role table's rows (given in layer, head order)."""
    heads = [(row["layer"], row["head"]) for row in rows if "next-token" in row["roles"]]
    if not heads:
        raise ConfigError(
            f"--ablate: no next-token head (none puts more than {NEXT_TOKEN_THRESHOLD} on t+1 over {MIN_ROLE_ROWS}+ rows); name heads: L0H1,L1H3"
        )
    return heads


def ablate(
    model,
    tokenizer,
    checkpoint: dict,
    heads: list[tuple[int, int]],
    args,
    out: Path,
    rows: list[dict],
) -> None:
    """--ablate: the heads named (or found), switched off, against as many random others; printed
    and written to ablation.json, with each head's weight on t+1 in the text shown (what named the
    next-token heads; rows in layer, head order)."""
    batches = run_batches(model, checkpoint, tokenizer)
    try:
        result = measure(model, batches, heads, args.draws, args.seed, args.mean_ablation)
    except ValueError as e:
        raise ConfigError(f"--ablate: {e}") from None
    result["next_token_weight"] = {
        head_name(row["layer"], row["head"]): row["next"] for row in rows
    }
    write_atomically(out / "ablation.json", json.dumps(result, indent=2).encode())
    print(f"\n{report(result)}\nablation.json: {out / 'ablation.json'}")


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
