"""Look inside a model: python inspect_attention.py [--run NAME | --checkpoint PATH | --pretrained
gpt2] --text "ROMEO: But soft". Heatmaps, an HTML page of every head, a table of the heads' roles;
--ablate switches heads of a no-mask model off and measures the leak gap."""

from harness.stopping import exit_on_signal

# before the slow imports: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import sys
from pathlib import Path

import torch

from configs import ConfigError
from data.tokenizer import token_labels
from harness.arguments import draw_count, seed, typed_text
from harness.cli import OneLineParser, add_model_source, load_model_source, run_command
from harness.folders import writable_folder
from harness.inspection import COLUMNS, ablate, next_token_heads, print_heads, text_ids
from harness.pictures.heatmaps import attention_page, save_layer_heatmaps
from model.ablations import flags_label
from model.heads import parse_heads
from model.roles import head_roles
from model.sampling import check_finite_logits

# heads in all; above it (GPT-2 has 144) only the per-layer grids and the HTML page
PER_HEAD_PICTURES_UP_TO = 16


def main(argv: list[str]) -> Path:
    parser = OneLineParser(
        description="Heatmaps, an HTML page and per-head statistics of a model's attention."
    )
    add_model_source(parser)
    text = "the text to look at (default: what evaluations draw, if the vocabulary holds it)"
    parser.add_argument("--text", type=typed_text, help=text)
    repeated = "look at random tokens in which a segment recurs (the default if not)"
    parser.add_argument("--repeated", action="store_true", help=repeated)
    out = "folder for the pictures and the page (default: <run folder>/inspect)"
    parser.add_argument("--out", type=Path, help=out)
    per_head = "also one PNG per head, however many heads there are"
    parser.add_argument("--per-head", action="store_true", help=per_head)
    switch = 'switch heads off and measure the leak gap: "next-token", or L0H1,L0H3 (L1: a layer)'
    parser.add_argument("--ablate", metavar="HEADS", help=switch)
    draws = "--ablate: random draws of as many other heads (default 10, 0-1000)"
    parser.add_argument("--draws", type=draw_count, default=10, help=draws)
    parser.add_argument(
        "--seed", type=seed, default=0, help="--ablate: the seed of those draws (default 0)"
    )
    mean = "--ablate: replace a head's output by its mean, not by zero"
    parser.add_argument("--mean-ablation", action="store_true", help=mean)
    args = parser.parse_args(argv)
    if args.out:  # before the model loads: a wrong --out costs nothing
        writable_folder(args.out, "--out", create=False)
    model, tokenizer, described, folder, checkpoint = load_model_source(args, "cpu")
    cfg = model.cfg
    if args.ablate and cfg.causal:
        raise ConfigError(
            "--ablate measures the leak gap of a model trained without the mask; this one is "
            "causal, so it has none to close"
        )
    if args.ablate and checkpoint is None:
        raise ConfigError(
            "--ablate measures a run of ours on its own val text; give --run or --checkpoint"
        )
    named = None  # checked before any work; next-token heads are found in the role table
    if args.ablate not in (None, "next-token"):
        try:
            named = parse_heads(args.ablate, cfg.n_layer, cfg.n_head)
        except ValueError as e:
            raise ConfigError(f"--ablate: {e}") from None
    ids = text_ids(args, tokenizer, cfg.block_size)
    if len(ids) > cfg.block_size:
        print(
            f"note: the text is {len(ids)} tokens; only its first {cfg.block_size} (block_size) "
            "are shown"
        )
        ids = ids[: cfg.block_size]
    idx = torch.tensor([ids])
    with torch.no_grad():  # a diverged checkpoint would draw pictures of nothing
        check_finite_logits(model(idx)[0])
    weights = model.attention_weights(idx)  # n_layer x (1, H, T, T)
    labels = token_labels(tokenizer, ids)
    out = writable_folder(args.out or folder / "inspect", "--out")
    flags, name = flags_label(cfg), folder.name
    per_head = args.per_head or cfg.n_layer * cfg.n_head <= PER_HEAD_PICTURES_UP_TO
    save_layer_heatmaps(weights, labels, out, name, flags, 110, cfg.causal, per_head)
    title = f"{name}: attention ({flags})"
    page = attention_page(
        [w[0] for w in weights], labels, title, cfg.causal, out / "attention.html"
    )
    where = f"heatmaps in {out}/, every head on one page: {page}"
    print(f"{described} ({flags}), {len(ids)} tokens; {where}")
    print(COLUMNS)
    rows = head_roles(weights, cfg.causal, idx, [block.attn.window for block in model.blocks])
    print_heads(rows)
    if args.ablate:
        by_place = sorted(rows, key=lambda r: (r["layer"], r["head"]))
        heads = named or next_token_heads(by_place)
        ablate(model, tokenizer, checkpoint, heads, args, out, by_place)
    return out


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
