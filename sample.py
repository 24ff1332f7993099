"""Generate text: python sample.py [--run NAME | --checkpoint PATH | --pretrained gpt2] [--prompt TEXT]

The model and tokenizer are rebuilt from what the checkpoint stores (its model config and
vocabulary), never from a TOML file, so an old checkpoint still loads after defaults change.
Checkpoints are read with torch.load(weights_only=True): plain tensors and data, never code.
--pretrained continues the prompt with OpenAI's GPT-2 (or a folder in its layout), read from safetensors.
"""

import argparse
import sys

import torch

from configs import ConfigError, TrainConfig
from data.tokenizer import TokenizerError
from engine.cli import OneLineParser, add_model_source, load_model_source, non_negative_int, positive_float, positive_int, run_command, seed
from engine.runtime import setup_runtime


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(description="Generate text from a trained checkpoint or a pretrained GPT-2.")
    add_model_source(parser)
    parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    parser.add_argument("--num-samples", type=positive_int, default=1)
    parser.add_argument("--max-new-tokens", type=non_negative_int, default=500)
    parser.add_argument("--temperature", type=positive_float, default=0.8, help="below 1 is more conservative")
    parser.add_argument("--top-k", type=positive_int, default=200, help="sample only among the k likeliest tokens")
    parser.add_argument("--seed", type=seed, default=1337)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    return parser.parse_args(argv)


def main(argv: list[str]) -> list[str]:
    args = parse_args(argv)
    try:
        runtime = setup_runtime(TrainConfig(device=args.device))
    except ValueError as e:
        raise ConfigError(str(e).replace("train.device", "--device")) from None
    model, tokenizer, described, _ = load_model_source(args, runtime.device)
    if not model.can_cache:
        print(
            "note: this model was trained without the causal mask, so every new token changes what earlier "
            "positions see; sampling recomputes the whole context for each token (no KV cache)",
            file=sys.stderr,
        )
    prompt_ids = tokenizer.encode(args.prompt)
    if not prompt_ids:
        raise TokenizerError("the prompt is empty; give at least one character with --prompt")
    idx = torch.tensor([prompt_ids] * args.num_samples, dtype=torch.long, device=runtime.device)
    generator = torch.Generator(device=runtime.device).manual_seed(args.seed)
    out = model.generate(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, generator=generator)
    samples = [tokenizer.decode(row.tolist()) for row in out]
    print(f"# {described} on {runtime.device}")
    for i, text in enumerate(samples):
        print(text if i == 0 else "-" * 40 + "\n" + text)
    return samples


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
