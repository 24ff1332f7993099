"""bench.py --data-mb MB: data/prepare.py against tiktoken on a generated text, each in a fresh
process (its own peak memory), in turns: a turn's ratio compares measurements moments apart."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from data.prepare import workers_to_use
from harness.experiments.profiling import load_average, machine_name
from harness.experiments.stats import markdown_table

REPO_ROOT = Path(__file__).resolve().parents[2]
BLOCK_BYTES = 1 << 20
DISTINCT_BLOCKS = 16  # the text cycles through them: writing it stays fast at any size
MIN_MB = 0.001  # a kilobyte: below a byte, the text would be empty

PREPARE = """
import json, sys, time
from pathlib import Path
from data.prepare import prepare
from data.sources import find_source
path, tokenizer, workers, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
start = time.perf_counter()
meta = prepare(find_source(Path(path), "--data-file"), tokenizer, "bench", out, workers=workers)
seconds = time.perf_counter() - start
peak = int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"seconds": seconds, "tokens": sum(meta["tokens"].values()), "peak_rss": peak}))
"""

TIKTOKEN = """
import json, re, sys, time
import tiktoken
text, threads = open(sys.argv[1], encoding="utf-8").read(), int(sys.argv[2])
# pieces of a megabyte and up to the next newline
pieces = re.findall(r"(?s).{1,1000000}[^\\n]*\\n?", text)
del text
enc = tiktoken.get_encoding("gpt2")
seconds, tokens = 0.0, 0
for i in range(0, len(pieces), 4 * threads):
    begin = time.perf_counter()
    ids = enc.encode_ordinary_batch(pieces[i : i + 4 * threads], num_threads=threads)
    seconds += time.perf_counter() - begin
    tokens += sum(map(len, ids))
print(json.dumps({"seconds": seconds, "tokens": tokens}))
"""


def write_text(path: Path, size_bytes: int) -> None:
    """English-like: Zipf-distributed made-up words, lines of 4 to 20 words."""
    rng = np.random.default_rng(0)
    freq = 1 / np.arange(1, 27)
    lengths = rng.integers(1, 10, size=20_000)
    letters = rng.choice(
        list("etaoinshrdlucmfwypvbgkjqxz"), size=lengths.sum(), p=freq / freq.sum()
    )
    words = ["".join(word) for word in np.split(letters, np.cumsum(lengths)[:-1])]
    blocks = []
    for _ in range(min(DISTINCT_BLOCKS, -(-size_bytes // BLOCK_BYTES))):
        picks = np.minimum(rng.zipf(1.2, size=BLOCK_BYTES // 4), len(words)) - 1
        lines, i = [], 0
        for n in rng.integers(4, 21, size=len(picks) // 12):
            lines.append(
                " ".join(words[j] for j in picks[i : i + n])
                + (".\n\n" if rng.random() < 0.2 else ",\n")
            )
            i += n
        blocks.append("".join(lines).capitalize()[:BLOCK_BYTES])
    with open(path, "w", encoding="utf-8") as f:
        for i in range(0, size_bytes, BLOCK_BYTES):
            f.write(blocks[(i // BLOCK_BYTES) % len(blocks)][: size_bytes - i])


def run_child(program: str, *args) -> dict:
    command = [sys.executable, "-c", program, *map(str, args)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"a benchmark process failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout)


def bench_data(size_mb: float, tokenizer: str, workers: int, turns: int = 2, log=print) -> dict:
    threads, runs = workers_to_use(workers), []
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        path = Path(tmp) / "corpus.txt"
        log(f"writing a {size_mb:g} MB text ...")
        write_text(path, int(size_mb * 1e6))
        size = path.stat().st_size
        for turn in range(turns):
            log(f"turn {turn + 1} of {turns}: preparing ...")
            ours = run_child(PREPARE, path, tokenizer, threads, Path(tmp) / f"prepared{turn}")
            log(f"turn {turn + 1} of {turns}: tiktoken's encode_ordinary_batch ...")
            theirs = run_child(TIKTOKEN, path, threads) if tokenizer == "gpt2" else None
            runs.append({"ours": ours, "tiktoken": theirs, "load_avg_1min": load_average()})
    ours = [run["ours"] for run in runs]
    best = min(ours, key=lambda run: run["seconds"])
    result = dict(machine=machine_name(torch.device("cpu")), cores=os.cpu_count(), workers=threads)
    result |= dict(tokenizer=tokenizer, size_bytes=size, turns=runs)
    result |= dict(
        prepare_mb_per_s=size / 1e6 / best["seconds"],
        prepare_tokens_per_s=best["tokens"] / best["seconds"],
        peak_rss=max(run["peak_rss"] for run in ours),
        tokens=best["tokens"],
    )
    if tokenizer == "gpt2":
        theirs = [run["tiktoken"] for run in runs]
        result["tiktoken_mb_per_s"] = size / 1e6 / min(run["seconds"] for run in theirs)
        result["ratios"] = [t["seconds"] / o["seconds"] for t, o in zip(theirs, ours, strict=True)]
        result["tiktoken_tokens"] = theirs[0]["tokens"]
    return result


def format_data_table(r: dict) -> str:
    rows = {
        f"preparing a generated {r['size_bytes'] / 1e6:,.0f} MB text": "value",
        f"throughput (best of {len(r['turns'])})": f"{r['prepare_mb_per_s']:.1f} MB/s, "
        f"{r['prepare_tokens_per_s'] / 1e6:.2f} M tokens/s",
        "peak resident memory, preparing (threads included)": f"{r['peak_rss'] / 2**20:,.0f} MiB",
        "tokens (train + val)": f"{r['tokens']:,}",
    }
    if "ratios" in r:
        rows[f"tiktoken's encode_ordinary_batch, {r['workers']} threads (best)"] = (
            f"{r['tiktoken_mb_per_s']:.1f} MB/s, {r['tiktoken_tokens']:,} tokens"
        )
        rows["ours / tiktoken's throughput, each turn (load average then)"] = ", ".join(
            f"{x:.2f} ({t['load_avg_1min']:.1f})"
            for x, t in zip(r["ratios"], r["turns"], strict=True)
        )
    machine = f"**{r['machine']}**, {r['cores']} cores, {r['workers']} encoding threads"
    return f"{machine}, tokenizer {r['tokenizer']}\n\n{markdown_table(list(rows.items()))}"
