"""Run under the lowest torch that requirements.txt allows: import every module, then train a few
Muon steps.

.ci/run calls it with a venv holding that torch (and the system's other packages). It fails loudly
on an import that needs a newer torch, or on a training step that does.
"""

import contextlib
import importlib
import io
import pathlib
import sys
import tempfile

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

modules = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for package in ("model", "data", "configs", "harness")
    for p in (ROOT / package).rglob("*.py")
    if p.name != "__main__.py"
)
for name in modules:
    importlib.import_module(name)
import train  # noqa: E402  (after the path is set)

with tempfile.TemporaryDirectory() as tmp:
    text = pathlib.Path(tmp) / "text.txt"
    text.write_text("To be, or not to be, that is the question.\n" * 200)
    flags = [
        "--data-file",
        str(text),
        "--runs-dir",
        tmp,
        "--device",
        "cpu",
        "--train.max_steps=3",
        "--train.eval_interval=3",
        "--train.eval_batches=1",
        "--train.honest_batches=1",
        "--model.n_layer=1",
        "--model.n_embd=32",
        "--model.n_head=2",
        "--model.block_size=16",
        "--train.batch_size=4",
    ]
    # Muon beside AdamW, char and GPT-2 tokens: what the presets train with
    for preset in ("char", "base"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = train.main(["--config", preset, *flags, "--run-name", preset])
        assert code == 0 and "done in" in out.getvalue(), (
            f"{preset}: exit {code}\n{out.getvalue()[-2000:]}"
        )
print(
    f"torch {torch.__version__}: {len(modules)} modules import, the char and base presets train 3 "
    "Muon steps each"
)
