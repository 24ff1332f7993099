"""Score a text: python score.py [--run NAME | --checkpoint PATH | --pretrained NAME_OR_FOLDER] [--file PATH]

Prints how well the model predicts the text: the tokens scored, the mean loss in nats per token,
the perplexity and the bits per byte. Without --file it scores the val split of the run's corpus
(of Tiny Shakespeare for a pretrained GPT-2). A text longer than the model's context is read in
sliding windows with a stride; harness/scoring.py says how, and why each token is scored once.
"""

from harness.stopping import StopFlag, exit_on_signal

if __name__ == "__main__":  # first, before the imports below take their second: a signal meanwhile is one line
    exit_on_signal()

import argparse
import json
import sys
from pathlib import Path

from harness.arguments import positive_int
from harness.cli import OneLineParser, add_model_source, device_of, load_model_source, run_command
from harness.scoring import score_ids, surprises, text_ids


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(description="How well a model predicts a text: loss per token, perplexity and bits per byte.")
    add_model_source(parser)
    parser.add_argument("--file", type=Path, metavar="PATH", help="a UTF-8 text file (default: the val split of the run's corpus)")
    parser.add_argument("--stride", type=positive_int, help="tokens between window starts, at most the context (default: half of it)")
    parser.add_argument("--top", type=positive_int, metavar="N", help="also list the N tokens that surprised the model most")
    parser.add_argument("--json", action="store_true", help="print one JSON object: tokens, loss, perplexity, bits_per_byte (and top)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    return parser.parse_args(argv)


def main(argv: list[str]) -> dict:
    args = parse_args(argv)
    device = device_of(args.device)
    model, tokenizer, described, _, checkpoint = load_model_source(args, device)
    ids, what = text_ids(tokenizer, args.file, checkpoint)
    stride = args.stride or max(1, model.cfg.block_size // 2)
    if not model.cfg.causal:
        print(
            "note: this model was trained without the causal mask; read whole, each position would see the token it must "
            "predict, so each token is scored from the tokens before it alone (one pass per token: slower)",
            file=sys.stderr,
        )
    with StopFlag() as stop:  # Ctrl-C stops at the next pass: exit code 130, nothing printed as if whole
        score = score_ids(model, tokenizer, ids, stride, stop.poll)
    result = score.summary()
    if args.top:
        result["top"] = surprises(tokenizer, ids, score.losses, args.top)
    if args.json:
        print(json.dumps(result))
        return result
    print(f"# {described} on {device}")
    print(f"# {what}: windows of {model.cfg.block_size} tokens, stride {stride}")
    print(f"tokens scored   {score.tokens:,}")
    print(f"loss            {score.loss:.4f} nats per token")
    print(f"perplexity      {score.perplexity:.3f}")
    print(f"bits per byte   {score.bits_per_byte:.4f}")
    if args.top:
        print(f"the {len(result['top'])} tokens that surprised the model most (loss, line, the text before, the token):")
    for row in result.get("top", []):
        print(f"{row['loss']:7.3f} nats  line {row['line']:<6} {row['context']!r} -> {row['token']!r}")
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:], interrupted="interrupted"))
