"""Generate text from a trained checkpoint: python sample.py [--run NAME | --checkpoint PATH] [--prompt TEXT]

The model and tokenizer are rebuilt from what the checkpoint stores (its model config and
vocabulary), never from a TOML file, so an old checkpoint still loads after defaults change.
Checkpoints are read with torch.load(weights_only=True): plain tensors and data, never code.
"""

import argparse
import sys
from pathlib import Path

import torch

from configs import ConfigError, TrainConfig
from data.tokenizer import Tokenizer, TokenizerError, tokenizer_from_state
from model import GPT, ModelConfig
from model.checkpoint import CheckpointError, read_checkpoint
from train import setup_runtime


def load_model(path: Path, device: str | torch.device = "cpu") -> tuple[GPT, Tokenizer, dict]:
    """Rebuild the model and tokenizer stored in a checkpoint; returns (model in eval mode, tokenizer, checkpoint)."""
    path = Path(path)
    checkpoint = read_checkpoint(path)
    try:
        model_cfg = ModelConfig(**checkpoint["config"]["model"])
        tokenizer = tokenizer_from_state(checkpoint["tokenizer"])
    except (TypeError, KeyError, ValueError) as e:
        raise CheckpointError(f"{path} holds an invalid config or tokenizer: {e}") from None
    if tokenizer.vocab_size != model_cfg.vocab_size:
        raise CheckpointError(f"{path} is inconsistent: tokenizer has {tokenizer.vocab_size} tokens, model {model_cfg.vocab_size}")
    model = GPT(model_cfg)
    try:
        model.load_state_dict(checkpoint["model"])
    except (RuntimeError, TypeError, AttributeError) as e:
        detail = str(e).strip().splitlines()[0]
        raise CheckpointError(f"{path}: its weights do not fit its model config ({detail[:200]})") from None
    return model.to(device).eval(), tokenizer, checkpoint


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a mistake is one line on stderr and exit code 2, without the usage block."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(description="Generate text from a trained checkpoint.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--run", default="base", help="run folder name under --runs-dir (default: base)")
    where.add_argument("--checkpoint", type=Path, help="path to a ckpt.pt (overrides --run)")
    parser.add_argument("--runs-dir", default="runs", help="where run folders live (default: runs)")
    parser.add_argument("--best", action="store_true", help="use the run's best-by-val checkpoint (best.pt) instead of the latest")
    parser.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    parser.add_argument("--num-samples", type=positive_int, default=1)
    parser.add_argument("--max-new-tokens", type=non_negative_int, default=500)
    parser.add_argument("--temperature", type=positive_float, default=0.8, help="below 1 is more conservative")
    parser.add_argument("--top-k", type=positive_int, default=200, help="sample only among the k likeliest tokens")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or mps")
    return parser.parse_args(argv)


def main(argv: list[str]) -> list[str]:
    args = parse_args(argv)
    try:
        runtime = setup_runtime(TrainConfig(device=args.device))
    except ValueError as e:
        raise ConfigError(str(e).replace("train.device", "--device")) from None
    path = args.checkpoint or Path(args.runs_dir) / args.run / ("best.pt" if args.best else "ckpt.pt")
    model, tokenizer, checkpoint = load_model(path, runtime.device)
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
    print(f"# {path} (step {checkpoint.get('step')}, val loss {checkpoint.get('val_loss', float('nan')):.4f}) on {runtime.device}")
    for i, text in enumerate(samples):
        print(text if i == 0 else "-" * 40 + "\n" + text)
    return samples


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (CheckpointError, TokenizerError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
