"""Runs docs/transformer-lens.md's Python blocks in order on runs/char-no-mask and records the
figures the page quotes in docs/figures.json."""

import contextlib
import re
import sys
from importlib.metadata import version
from pathlib import Path

from configs import ConfigError
from harness.cli import OneLineParser, run_command
from harness.lens import import_lens
from harness.lens_weights import LensError
from tools.figures import FIGURES, record

ROOT = FIGURES.parent.parent
PAGE = ROOT / "docs" / "transformer-lens.md"
KEY = "lens-char-no-mask"
RUN, TRAIN = "runs/char-no-mask", "python train.py --config char --no-mask"


def run_page(folder: Path) -> dict:
    text = PAGE.read_text(encoding="utf-8")
    code = "\n\n".join(re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL))
    namespace = {"__name__": "__page__"}
    with contextlib.chdir(folder):
        exec(compile(code, str(PAGE), "exec"), namespace)
    return namespace


def figures_of(namespace: dict) -> dict:
    name = namespace["named"]
    return {
        "scores": {name([head]): score for head, score in namespace["scores"].items()},
        "cheats": name(namespace["cheats"]),
        "others": name(namespace["others"]),
        "tokens": namespace["tokens"].shape[1],
        "transformer_lens": version("transformer-lens"),
        **{key: namespace[key] for key in ("loss", "without", "control")},
    }


def main(argv: list[str]) -> int:
    OneLineParser(__doc__).parse_args(argv)
    if not (ROOT / RUN / "ckpt.pt").is_file():  # the page names its run: no --run to give
        raise ConfigError(f"no {RUN}/ckpt.pt, which the page reads; train it: {TRAIN}")
    try:
        import_lens()
    except LensError as e:
        raise ConfigError(str(e)) from None
    record(
        KEY,
        f"python -m tools.lens_page (the page's Python on {RUN}: {TRAIN})",
        figures_of(run_page(ROOT)),
    )
    print(f"recorded {KEY} in {FIGURES}; python -m tools.docs_figures writes it into the page")
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
