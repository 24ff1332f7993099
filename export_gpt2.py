"""Write a run of ours as a GPT-2: python export_gpt2.py --run NAME [--best] --out FOLDER, in the
hub's layout that transformers, --pretrained and --init-from load."""

from harness.stopping import exit_on_signal

# before the slow imports: a signal meanwhile is one line
if __name__ == "__main__":
    exit_on_signal()

import sys
from pathlib import Path

from harness.cli import OneLineParser, add_checkpoint_source, checkpoint_path, run_command
from harness.folders import export_folder
from harness.gpt2 import export_hf
from harness.training.checkpoints import load_model


def main(argv: list[str]) -> Path:
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
    args = parser.parse_args(argv)
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
