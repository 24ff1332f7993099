"""Write a run of ours as a GPT-2: python export_gpt2.py --run NAME [--best] --out FOLDER

The folder gets config.json and model.safetensors, the hub's layout: transformers'
GPT2LMHeadModel.from_pretrained(FOLDER) loads it, and so do --pretrained and --init-from.
"""

from harness.stopping import exit_on_signal

# first, before the imports below take their second: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import argparse
import sys
from pathlib import Path

from harness.cli import OneLineParser, add_checkpoint_source, checkpoint_path, run_command
from harness.folders import export_folder
from harness.gpt2 import export_hf
from harness.training.checkpoints import load_model


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(
        description="Export a trained run to GPT-2's layout (config.json + model.safetensors)."
    )
    add_checkpoint_source(parser)
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the folder to write (created if missing; new or empty)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier export in --out (never a run's own folder)",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> Path:
    args = parse_args(argv)
    export_folder(args.out, args.overwrite)  # before the model loads: a wrong --out costs nothing
    path = checkpoint_path(args)
    model, tokenizer, checkpoint = load_model(path, "cpu")
    folder = export_hf(model, tokenizer.name, args.out)
    print(
        f"{path} (step {checkpoint.get('step')}) written as a GPT-2 to {folder}/: "
        "config.json, model.safetensors"
    )
    print(f"read it back with: python sample.py --pretrained {folder}")
    return folder


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
