"""Shared test helpers. Import them with `from conftest import assert_close` (pytest puts tests/ on
sys.path).

Tests never touch the network, data/cache or runs/: each one writes its own small corpus with
`write_corpus` (or the `corpus_file` fixture) and points the cache and run folders into tmp_path.
"""

import hashlib
import importlib
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


def assert_close(a: torch.Tensor, b: torch.Tensor, atol: float, msg: str = "") -> None:
    """Assert same shape and max |a - b| <= atol; on failure report the max and mean absolute
    difference.
    """
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert a.shape == b.shape, f"{msg} shape mismatch: {tuple(a.shape)} vs {tuple(b.shape)}"
    diff = (a.detach().double() - b.detach().double()).abs()
    max_diff, mean_diff = diff.max().item(), diff.mean().item()
    assert max_diff <= atol, (
        f"{msg} max abs diff {max_diff:.3e} > atol {atol:.1e} (mean abs diff {mean_diff:.3e})"
    )


# A small synthetic play: ASCII only, varied words, and refrains that repeat so a tiny model can
# learn.

SPEAKERS = ["KING", "QUEEN", "PRINCE", "NURSE", "FIRST CITIZEN", "SECOND CITIZEN", "GHOST", "FOOL"]
SUBJECTS = [
    "the king",
    "my lord",
    "the queen",
    "this house",
    "our father",
    "the old man",
    "a young maid",
    "the ghost",
    "thy brother",
]
VERBS = [
    "loves",
    "fears",
    "speaks of",
    "walks with",
    "remembers",
    "forgets",
    "calls for",
    "waits upon",
    "looks at",
]
OBJECTS = [
    "the crown",
    "the river",
    "a sword",
    "the night",
    "the morning light",
    "his horse",
    "her letter",
    "the castle gate",
]
TAILS = [
    "",
    " tonight",
    " in the rain",
    " before the dawn",
    " with a heavy heart",
    " and says nothing",
    " again and again",
]
REFRAINS = [
    "To be, or not to be, that is the question.",
    "All the world's a stage, and all the men and women merely players.",
    "What light through yonder window breaks?",
    "Now is the winter of our discontent.",
]


def make_corpus_text(min_chars: int = 30_000, seed: int = 0) -> str:
    """About min_chars characters of English-like dialogue, the same on every call with the same
    seed.
    """
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < min_chars:
        lines = []
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.25:
                lines.append(rng.choice(REFRAINS))
            else:
                s = (
                    f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} "
                    f"{rng.choice(OBJECTS)}{rng.choice(TAILS)}"
                )
                lines.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", ";"]))
        speech = f"{rng.choice(SPEAKERS)}:\n" + "\n".join(lines) + "\n\n"
        parts.append(speech)
        size += len(speech)
    return "".join(parts)


def write_corpus(folder: Path, name: str = "corpus.txt", text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(make_corpus_text() if text is None else text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def one_cpu_thread():
    """Run torch on one CPU thread for a module, then restore the previous count.

    The training and sampling tests run a 30k-parameter model: its ops are microseconds, and a
    second intra-op thread only adds synchronisation. On a busy 2-core machine that thread spins
    waiting for a core: a 2-step tiny run measured 13.6 s with 2 threads and 1.7 s with one.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    """A ~30 KB UTF-8 text file in tmp_path."""
    return write_corpus(tmp_path / "text")


def tiny_argv(root: Path, corpus: Path, *extra: str) -> list[str]:
    """argv for the tiny preset on `corpus`, with the cache and run folders under `root`."""
    return [
        "--config",
        "tiny",
        "--data-file",
        str(corpus),
        "--data.cache_dir",
        str(root / "cache"),
        "--runs-dir",
        str(root / "runs"),
        "--device",
        "cpu",
        *extra,
    ]


def custom_scalars_layout(run_dir: Path) -> dict[str, list[list[str]]]:
    """The custom-scalars layout a run wrote, as TensorBoard's plugin reads it back: section title
    -> each chart's tag patterns.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0}).Reload()
    proto = events.Tensors("custom_scalars__config__")[0].tensor_proto
    parsed = layout_pb2.Layout.FromString(tensor_util.make_ndarray(proto).item())
    return {
        section.title: [list(chart.multiline.tag) for chart in section.chart]
        for section in parsed.category
    }


def run_script(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run `python <script> args...` from the repository root, capturing text output."""
    return subprocess.run(
        [sys.executable, script, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The script failed as a user error: exit 2, a single 'error: ...' line on stderr, no
    traceback.
    """
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, f"exit code {proc.returncode}, stderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{proc.stderr}"
    assert lines[0].startswith("error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def error_of(command, argv: list[str], capsys) -> subprocess.CompletedProcess:
    """harness.cli.run_command on a script's main, in process, as a finished process for
    assert_one_line_error (argparse's errors exit on their own)."""
    from harness.cli import run_command

    try:
        code = run_command(command, argv)
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def save_random_gpt2(folder: Path, seed: int = 0) -> Path:
    """A small GPT-2 (2 layers of 2 heads, 32 wide, 64 positions), saved by transformers into
    folder. Every parameter is drawn at std 0.2 (LayerNorm gains around 1), so that its predictions
    differ from token to token: at transformers' init (std 0.02) every distribution is nearly
    uniform, and wrong code would score the same."""
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=50257)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "ln_" in name and name.endswith("weight") else 0.0, 0.2)
    model.save_pretrained(folder)
    return folder


GPT2_BPE_URLS = (  # the two files tiktoken's gpt2 encoding reads (tiktoken_ext/openai_public.py)
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
)


def tiktoken_cache_dir() -> Path | None:
    """The folder where tiktoken looks for downloaded files, as tiktoken.load.read_file_cached
    chooses it (None: caching off).
    """
    folder = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if folder is None:
        folder = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return Path(folder) if folder else None


# set to 1 (CI's .ci/run does): a test that lacks transformers or the BPE files fails
REQUIRE_ALL = "TINYGPT_REQUIRE_ALL_TESTS"


def skip_or_fail(reason: str):
    """Skip a test whose optional dependency is missing, or fail it where
    TINYGPT_REQUIRE_ALL_TESTS=1 says that nothing may skip.

    Works in a test and at module level (a failure there is a collection error, which fails the run
    too).
    """
    if os.environ.get(REQUIRE_ALL) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ALL}=1: this machine must run every test)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_or_skip(module: str, reason: str):
    """pytest.importorskip, through skip_or_fail."""
    try:
        return importlib.import_module(module)
    except ImportError:
        skip_or_fail(f"could not import {module}: {reason}")


def gpt2_encoding_or_skip():
    """tiktoken's gpt2 encoding, or skip when its BPE files are not in tiktoken's cache folder
    (tests never download).

    tiktoken keeps each file under the SHA-1 of its URL. When both files are there, any failure to
    load them (a corrupt file, an API change) fails the test instead of skipping it.
    """
    tiktoken = import_or_skip("tiktoken", "the gpt2 tokenizer needs it (requirements.txt)")
    folder = tiktoken_cache_dir()
    missing = [
        url.rsplit("/", 1)[1]
        for url in GPT2_BPE_URLS
        if folder is None or not (folder / hashlib.sha1(url.encode()).hexdigest()).is_file()
    ]
    if missing:
        where = f"in {folder}" if folder else "(TIKTOKEN_CACHE_DIR is empty: caching off)"
        skip_or_fail(
            f"tiktoken's gpt2 BPE files ({', '.join(missing)}) are not {where}; set "
            "TIKTOKEN_CACHE_DIR to a folder holding them"
        )
    return tiktoken.get_encoding("gpt2")


class EndedChild:
    """A train.py child that has ended already, with its exit code, as
    harness/experiments/children.py waits on one.
    """

    def __init__(self, returncode: int):
        self.returncode = returncode

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode


def train_in_process(monkeypatch) -> None:
    """compare.py's and sweep.py's children run as train.main in this process, one at a time: the
    same arguments, without a new interpreter per run (each takes seconds to import torch)."""
    import train
    from harness.experiments.children import Children

    def start(self, command, output=None):
        self.running.append(EndedChild(train.main(command[2:])))
        return self.running[-1]

    monkeypatch.setattr(Children, "start", start)
