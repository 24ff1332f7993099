"""docs/transformer-lens.md's Python, run as the page shows it, and what it finds recorded in
docs/figures.json:
python -m tools.lens_page

The page's Python blocks run in order, in one namespace, from the repository root: on
runs/char-no-mask, which `python train.py --config char --no-mask` trains. What they print is
printed, and the figures the page quotes are recorded under lens-char-no-mask: each head's weight on
t+1 (scores), the next-token heads they name (cheats), and the loss with every head, without the
next-token heads and without as many others. Then `python -m tools.docs_figures` writes them into
the page. tests/test_lens.py runs the same blocks on a small run.
"""

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
# the run the page's Python reads, and what trains it
RUN, TRAIN = "runs/char-no-mask", "python train.py --config char --no-mask"
COMMAND = f"python -m tools.lens_page (the page's Python on {RUN}: {TRAIN})"


def page_code(page: Path = PAGE) -> str:
    """The page's ```python blocks, joined in order."""
    return "\n\n".join(
        re.findall(
            r"^```python\n(.*?)^```",
            page.read_text(encoding="utf-8"),
            flags=re.MULTILINE | re.DOTALL,
        )
    )


def run_page(folder: Path, page: Path = PAGE) -> dict:
    """Run the page's Python from folder (where its runs/ is); returns the namespace it leaves."""
    namespace = {"__name__": "__page__"}
    with contextlib.chdir(folder):
        exec(compile(page_code(page), str(page), "exec"), namespace)
    return namespace


def figures_of(namespace: dict) -> dict:
    """What the page quotes, from the namespace its code left."""
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
    if not (ROOT / RUN / "ckpt.pt").is_file():  # the page names its run itself: no --run to give
        raise ConfigError(
            f"no checkpoint at {RUN}/ckpt.pt, the run the page's Python reads; train it first: {TRAIN}"
        )
    try:
        import_lens()
    except LensError as e:
        raise ConfigError(str(e)) from None
    record(KEY, COMMAND, figures_of(run_page(ROOT)))
    print(
        f"recorded {KEY} in {FIGURES}; python -m tools.docs_figures writes it into {PAGE.relative_to(ROOT)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
