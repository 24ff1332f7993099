"""Look inside a model: python inspect_attention.py [--run NAME | --checkpoint PATH | --pretrained gpt2] --text "ROMEO: But soft"

Writes token-labelled heatmaps of the attention weights (one grid of heads per layer, and one
picture per head when the model has few heads), one interactive HTML page of every head
(attention.html: pick a head, hover a token), and prints a table of the heads ranked by entropy
that names the previous-token heads, the next-token heads (the --no-mask cheat: they read the
answer) and the first-token sinks. Works on any checkpoint, including --no-mask and --no-scale
runs, and on GPT-2.
"""

import sys
from pathlib import Path

import torch

from data.tokenizer import TokenizerError, token_labels
from harness.cli import OneLineParser, add_model_source, load_model_source, run_command, typed_text
from harness.folders import writable_folder
from harness.pictures.heatmaps import attention_page, heatmap_figure, save_layer_heatmaps
from harness.training.evaluation import PROBE_TEXT
from model.ablations import flags_label
from model.measurements import FIRST_TOKEN_THRESHOLD, NEXT_TOKEN_THRESHOLD, PREVIOUS_TOKEN_THRESHOLD, head_roles

PER_HEAD_PICTURES_UP_TO = 16  # heads in all; above it (GPT-2 has 144) only the per-layer grids and the HTML page


def main(argv: list[str]) -> Path:
    parser = OneLineParser(description="Heatmaps, an HTML page and per-head statistics of a model's attention.")
    add_model_source(parser)
    parser.add_argument("--text", type=typed_text, default=PROBE_TEXT, help="the text to look at (default: the one evaluations draw)")
    parser.add_argument("--out", type=Path, help="folder for the pictures and the page (default: <run folder>/inspect)")
    parser.add_argument("--per-head", action="store_true", help="also one PNG per head, however many heads there are")
    args = parser.parse_args(argv)
    if args.out:
        writable_folder(args.out, "--out", create=False)  # before the model loads: a wrong --out costs nothing

    model, tokenizer, described, folder, _ = load_model_source(args, "cpu")
    ids = tokenizer.encode(args.text)
    if not ids:
        raise TokenizerError("the text is empty; give some with --text")
    block_size = model.cfg.block_size
    if len(ids) > block_size:
        print(f"note: the text is {len(ids)} tokens; only its first {block_size} (block_size) are shown")
        ids = ids[:block_size]
    weights = model.attention_weights(torch.tensor([ids]))  # n_layer x (1, H, T, T)
    labels = token_labels(tokenizer, ids)
    out = writable_folder(args.out or folder / "inspect", "--out")
    flags, name = flags_label(model.cfg), folder.name
    per_head = args.per_head or model.cfg.n_layer * model.cfg.n_head <= PER_HEAD_PICTURES_UP_TO
    save_layer_heatmaps(weights, labels, out, name, flags, dpi=110)
    for layer, w in enumerate(weights if per_head else []):
        for head in range(w.shape[1]):
            fig = heatmap_figure(w[0, head : head + 1], labels, f"{name}: layer {layer}, head {head}", [f"L{layer}H{head}"])
            fig.savefig(out / f"attn_L{layer}_H{head}.png", dpi=110)
    page = attention_page([w[0] for w in weights], labels, f"{name}: attention ({flags})", model.cfg.causal, out / "attention.html")

    print(f"{described} ({flags}), {len(ids)} tokens; heatmaps in {out}/, every head on one page: {page}")
    print(
        "heads by entropy, most focused first; t-1: mean weight on the previous token (rows t >= 1), "
        "t+1: on the next one, the answer (rows t <= T-2; 0 under the mask), first: on position 0 (rows t >= 1)"
    )
    print("| layer | head | entropy | max weight | saturated | future mass | t-1 | t+1 | first | role |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    rows = head_roles(weights, model.cfg.causal)
    for row in rows:
        print(
            f"| {row['layer']} | {row['head']} | {row['entropy']:.3f} | {row['max_weight']:.3f} | {row['saturated']:.2f} | "
            f"{row['future_mass']:.3f} | {row['previous']:.3f} | {row['next']:.3f} | {row['first']:.3f} | {', '.join(row['roles'])} |"
        )
    roles = (
        ("previous-token", PREVIOUS_TOKEN_THRESHOLD),
        ("next-token", NEXT_TOKEN_THRESHOLD),
        ("first-token sink", FIRST_TOKEN_THRESHOLD),
    )
    for role, threshold in roles:
        found = [f"L{row['layer']}H{row['head']}" for row in rows if role in row["roles"]]
        print(f"{role} heads (weight above {threshold}): {', '.join(found) or 'none'}")
    return out


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
