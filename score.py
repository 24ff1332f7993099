"""Score a text: python score.py [--run NAME | --checkpoint PATH | --pretrained NAME_OR_FOLDER]
[--file PATH]: loss, perplexity and bits per byte in sliding windows, or per context (--contexts).
"""

from harness.stopping import StopFlag, exit_on_signal

# before the slow imports: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import json
import sys
from pathlib import Path

from data.files import write_atomically
from harness.arguments import context_factors, positive_int
from harness.cli import (
    OneLineParser,
    add_model_source,
    device_of,
    load_model_source,
    out_of_memory_advice,
    run_command,
)
from harness.folders import writable_folder
from harness.lengths import (
    check_contexts,
    context_lengths,
    contexts_cost,
    contexts_table,
    score_contexts,
)
from harness.scoring import score_ids, surprises, text_ids
from harness.training.budget import duration


def main(argv: list[str]) -> dict:
    parser = OneLineParser(
        description="How well a model predicts a text: "
        "loss per token, perplexity and bits per byte."
    )
    add_model_source(parser)
    parser.add_argument(
        "--file",
        type=Path,
        metavar="PATH",
        help="a UTF-8 text file (default: the val split of the run's corpus)",
    )
    parser.add_argument(
        "--stride",
        type=positive_int,
        help="tokens between window starts, at most the context (default: half of it)",
    )
    parser.add_argument(
        "--top",
        type=positive_int,
        metavar="N",
        help="also list the N tokens that surprised the model most",
    )
    parser.add_argument(
        "--contexts",
        type=context_factors,
        metavar="FACTORS",
        help="score at these multiples of the model's block_size instead, comma-separated "
        "(0.5,1,2,4): the loss per context and per position bucket, also written to "
        "contexts.json beside the checkpoint",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: tokens, loss, perplexity, bits_per_byte (and top)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    args = parser.parse_args(argv)
    if args.contexts and (args.stride or args.top):
        parser.error(
            "--contexts reads each context in separate windows of its own length; "
            "leave out --stride and --top"
        )
    device = device_of(args.device)
    model, tokenizer, described, folder, checkpoint = load_model_source(args, device)
    ids, what = text_ids(tokenizer, args.file, checkpoint)
    if args.contexts:
        return score_at_contexts(
            args, model, ids, device, folder, f"# {described} on {device}", what
        )
    stride = args.stride or max(1, model.cfg.block_size // 2)
    if not model.cfg.causal:
        print(
            "note: this model was trained without the causal mask; read whole, each position "
            "would see the token it must predict, so each token is scored from the tokens before "
            "it alone (one pass per token: slower)",
            file=sys.stderr,
        )
    with StopFlag() as stop:
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
        print(
            f"the {len(result['top'])} tokens that surprised the model most "
            "(loss, line, the text before, the token):"
        )
        for row in result["top"]:
            line = f"line {row['line']:<6} {row['context']!r} -> {row['token']!r}"
            print(f"{row['loss']:7.3f} nats  {line}")
    return result


def score_at_contexts(
    args: argparse.Namespace, model, ids: list[int], device, folder: Path, described: str, what: str
) -> dict:
    """Refusals and the estimate first, then the losses, printed, then kept by the checkpoint."""
    lengths = context_lengths(args.contexts, model.cfg, len(ids))
    seconds = check_contexts(
        model.cfg, lengths, len(ids), device, contexts_cost(model, lengths, len(ids))
    )
    # before the work: a folder that cannot take the result costs nothing
    out = writable_folder(folder, "the model's folder")
    kept = out / ("contexts.json" if args.file is None else f"contexts-{args.file.stem}.json")
    print(
        f"scoring {len(args.contexts)} contexts: about {duration(seconds)} (estimated)",
        file=sys.stderr,
    )
    with (
        StopFlag() as stop,
        out_of_memory_advice(
            "give shorter --contexts (each pass holds its windows' whole context)"
        ),
    ):
        result = score_contexts(model, ids, args.contexts, stop.poll)
    result["text"] = what if args.file is None else str(args.file.resolve())
    if args.json:
        # printed before the file is written: a full disk loses the file, not the result
        print(json.dumps(result), flush=True)
    else:
        print(contexts_table(result, lengths, f"{described}\n# {what}", model.cfg), flush=True)
    write_atomically(kept, json.dumps(result).encode())
    if not args.json:
        print(f"{kept.name}: {kept}")
    return result


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:], interrupted="interrupted"))
