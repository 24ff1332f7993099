"""Generate text: python sample.py [--run NAME | --checkpoint PATH | --pretrained gpt2] [--prompt
TEXT | --prompt-file PATH]. The model is rebuilt from the checkpoint's own config, never a TOML."""

from harness.stopping import StopFlag, exit_on_signal

# before the slow imports: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import sys
from itertools import chain, islice
from pathlib import Path

import torch

from data.sources import read_text
from data.tokenizer import TokenizerError, decode_stream, degenerate
from harness.arguments import (
    non_negative_float,
    non_negative_int,
    positive_int,
    probability,
    seed,
    typed_text,
)
from harness.cli import OneLineParser, add_model_source, device_of, load_model_source, run_command
from harness.training.budget import check_sampling

NO_CACHE = (
    "note: this model was trained without the causal mask, so every new token changes what earlier "
    "positions see; sampling recomputes the whole context for each token (no KV cache)"
)
NO_MASK_WHY = (
    "expected of a model trained without the causal mask: it learned to read the next token from "
    "its input, which generation does not give it; its honest loss (loss/val_honest) measures what "
    "it predicts from the past alone"
)
MASK_WHY = (
    "from a model with the causal mask, a sign that it has learned little yet (its val loss says "
    "how much)"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(
        description="Generate text from a trained checkpoint or a pretrained GPT-2."
    )
    add_model_source(parser)
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument(
        "--prompt", type=typed_text, default="\n", help="text to continue (default: a newline)"
    )
    prompt.add_argument(
        "--prompt-file",
        type=Path,
        metavar="PATH",
        help="continue the text of this UTF-8 file, exactly as it is",
    )
    many = "samples drawn side by side (one streams as it is drawn)"
    parser.add_argument("--num-samples", type=positive_int, default=1, help=many)
    parser.add_argument("--max-new-tokens", type=non_negative_int, default=500)
    cool = "below 1 is more conservative; 0 is greedy"
    parser.add_argument("--temperature", type=non_negative_float, default=0.8, help=cool)
    top_k = "sample only among the k likeliest tokens"
    parser.add_argument("--top-k", type=positive_int, default=200, help=top_k)
    top_p = "sample only from the nucleus: the likeliest tokens holding probability P"
    parser.add_argument("--top-p", type=probability, help=top_p)
    parser.add_argument("--seed", type=seed, default=1337)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    return parser.parse_args(argv)


def main(argv: list[str]) -> list[str]:
    args = parse_args(argv)
    device = device_of(args.device)
    model, tokenizer, described, _, _ = load_model_source(args, device)
    if not model.can_cache:
        print(NO_CACHE, file=sys.stderr)
    prompt = read_text(args.prompt_file, flag="--prompt-file") if args.prompt_file else args.prompt
    prompt_ids = tokenizer.encode(prompt)
    if not prompt_ids:
        raise TokenizerError("the prompt is empty; give at least one character with --prompt")
    check_sampling(model.cfg, args.num_samples, len(prompt_ids), args.max_new_tokens, device)
    idx = torch.tensor([prompt_ids], dtype=torch.long, device=device).repeat(args.num_samples, 1)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    with StopFlag() as stop:  # Ctrl-C, SIGTERM, SIGHUP or a closed pipe: stop before the next token
        tokens = model.stream(idx, args.max_new_tokens, **sampling, generator=generator)
        samples = print_samples(tokenizer, described, device, idx, stop.polled(tokens))
    start = len(tokenizer.decode(prompt_ids))
    if note := degenerate_note([text[start:] for text in samples], model.cfg.causal):
        print(note, file=sys.stderr)
    return samples


def degenerate_note(continuations: list[str], causal: bool) -> str | None:
    found = [(i, v) for i, text in enumerate(continuations, 1) if (v := degenerate(text))]
    if not found:
        return None
    if len(continuations) == 1:
        what = f"the sample is {found[0][1][0]} ({found[0][1][1]})"
    else:
        each = "; ".join(f"{i}: {v[0]}, {v[1]}" for i, v in found)
        what = f"{len(found)} of {len(continuations)} samples are degenerate ({each})"
    return f"note: {what}: {MASK_WHY if causal else NO_MASK_WHY}"


def print_samples(tokenizer, described: str, device, idx: torch.Tensor, tokens) -> list[str]:
    """Print the samples that `tokens` (each (B, 1)) continue idx (B, T0) with; one streams."""
    # drawn before anything is printed, so NaN logits fail as one line alone
    first = list(islice(tokens, 1))
    print(f"# {described} on {device}", flush=True)
    if len(idx) == 1:
        pieces = []
        ids = chain(idx[0].tolist(), (int(t) for t in chain(first, tokens)))
        try:
            for piece in decode_stream(tokenizer, ids):
                print(piece, end="", flush=True)
                pieces.append(piece)
        finally:
            print()  # also after Ctrl-C: the text printed so far stays, on lines of its own
        return ["".join(pieces)]
    samples = [tokenizer.decode(row.tolist()) for row in torch.cat([idx, *first, *tokens], dim=1)]
    for i, text in enumerate(samples):
        print(text if i == 0 else "-" * 40 + "\n" + text)
    return samples


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:], interrupted="interrupted"))
