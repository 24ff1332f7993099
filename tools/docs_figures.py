"""Fills the figures, tables and outputs that README.md and docs/ mark (docs/tests.md) from
docs/figures.json."""

import dataclasses
import functools
import math
import re
import sys
from pathlib import Path

import torch

from configs import load_config
from data.chunks import FORCE_AFTER, FORCED_CHARS
from data.sources import CHUNK_CHARS
from harness.cli import OneLineParser, run_command
from harness.training.evaluation import HONEST_POSITIONS, SAMPLE_TOKENS
from model import GPT
from tools import tables
from tools.figures import FIGURES, read_figures, record, record_runs
from tools.outputs import OUTPUTS, ROOT, check_outputs, described, record_output, render_outputs
from tools.probe_cost import record_probe_cost
from tools.tables import COMPARISONS, REMOVES

NUMBER = r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?"  # how a figure looks in a doc
PLACEHOLDER = re.compile(r"\{([\w./-]+):([^{}\s]*)\}")
MARKER = re.compile(r"<!-- (.+?) -->")
DOCS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]


def flatten(value, name: str, out: dict[str, float]) -> None:
    # a placeholder holds no spaces: "a − b" becomes a-minus-b
    if isinstance(value, dict):
        for key, inner in value.items():
            flatten(inner, f"{name}.{key.replace(' − ', '-minus-')}", out)
    elif type(value) in (int, float):  # not bool
        out[name] = float(value)


def code_values() -> dict[str, float]:
    char, base = load_config(["--config", "char"]), load_config(["--config", "base"])
    n_char = 65  # Tiny Shakespeare's characters (tests/test_data.py)

    def millions(cfg, vocab_size: int) -> float:
        return GPT(dataclasses.replace(cfg.model, vocab_size=vocab_size)).num_params() / 1e6

    train = char.train
    values = dict(
        char_params_m=millions(char, n_char),
        base_params_m=millions(base, 50257),
        base_embedding_m=50257 * base.model.n_embd / 1e6,
        char_vocab=n_char,
        ln_char_vocab=math.log(n_char),
        char_sqrt_head_size=math.sqrt(char.model.n_embd // char.model.n_head),
        honest_positions=HONEST_POSITIONS,
        char_batch=train.batch_size,
        char_honest_batches=train.honest_batches,
        char_honest_predictions=train.honest_batches * train.batch_size * HONEST_POSITIONS,
        char_val_predictions=train.eval_batches * train.batch_size * char.model.block_size,
        sample_tokens=SAMPLE_TOKENS,
        sample_tokens_shown=SAMPLE_TOKENS + 1,  # after the one-token prompt, a newline
        task_chars=CHUNK_CHARS,
        force_after=FORCE_AFTER,
        forced_chars=FORCED_CHARS,
        whole_chars=CHUNK_CHARS + FORCE_AFTER,
    )
    return {f"code.{name}": value for name, value in values.items()}


def named_values(figures: dict) -> dict[str, float]:
    out = code_values()
    for key, entry in figures.items():
        flatten(entry["value"], key, out)
        if key.startswith("score-gradient-"):
            for when, lines in entry["value"].items():
                named = dict(zip(("score", "qk", "saturated"), lines, strict=True))
                flatten(named, f"{key}.{when}", out)
    for name in [n for n in out if n.endswith(".half_width")]:
        stem = name.removesuffix(".half_width")
        out.setdefault(f"{stem}.low", out[f"{stem}.mean"] - out[name])
        out.setdefault(f"{stem}.high", out[f"{stem}.mean"] + out[name])
    for key in COMPARISONS:
        stats = f"{key}.aggregate.{key.split('-')[0]}"
        out[f"{key}.score_spread"] = (  # the unscaled variant's score std over the preset's
            out[f"{stats}-{REMOVES['scaled']}.attn/score_std.mean"]
            / out[f"{stats}.attn/score_std.mean"]
        )
    return out


def figure(name: str, fmt: str, values: dict[str, float]) -> str:
    scale = 100 if fmt.startswith("pct") else 1
    return format(values[name] * scale, fmt.removeprefix("pct"))


def fill(sentence: str, figures: list[str]) -> str:
    parts = PLACEHOLDER.split(sentence)
    parts[1::3], parts[2::3] = figures, [""] * len(figures)
    return "".join(parts)


def pattern(sentence: str) -> re.Pattern:
    """A group wherever a figure (or its placeholder) stands; any whitespace matches any other."""
    regex = ""
    for i, part in enumerate(PLACEHOLDER.split(sentence)):
        if i % 3 == 0:
            regex += r"\s+".join(re.escape(word) for word in re.split(r"\s+", part))
        elif i % 3 == 1:
            regex += rf"({NUMBER}|\{{[\w./-]+:[^{{}}\s]*\}})"
    return re.compile(regex)


def sync_doc(doc: str, text: str, figures: dict, values: dict) -> tuple[str, list[str]]:
    problems, edits = [], []
    for marker in MARKER.finditer(text):
        template = marker.group(1)
        if template.startswith("table: "):
            make = getattr(tables, template.removeprefix("table: "), None)
            if not template.endswith("_table") or make is None:
                problems.append(f"{doc}: {marker.group(0)} names no table")
                continue
            start = text.index("\n|", marker.end()) + 1
            end = (text + "\n\n").index("\n\n", start)
            if text[start:end] != (table := make(figures)):
                problems.append(f"{doc}: {template} is stale")
                edits.append((start, end, table))
            continue
        names = PLACEHOLDER.findall(template)
        if unknown := [name for name, _ in names if name not in values]:
            problems.append(f"{doc}: no figure {unknown[0]}")
            continue
        if not names:
            continue
        wanted = [figure(name, fmt, values) for name, fmt in names]
        find = pattern(template).search
        if template.startswith("{"):  # just before its number, perhaps across a line break
            find = re.compile(r"[ \t]*\n?[ \t]*" + pattern(template).pattern).match
        found = find(text, marker.end())
        if found is None:
            problems.append(f"{doc}: no {fill(template, wanted)!r} after {marker.group(0)}")
            continue
        if list(found.groups()) != wanted:
            line = text.count("\n", 0, found.start(1)) + 1
            said = f"{found.group(0).strip()!r} should read {', '.join(wanted)}"
            problems.append(f"{doc} line {line}: {said} ({', '.join(n for n, _ in names)})")
        edits += [(found.start(k), found.end(k), value) for k, value in enumerate(wanted, 1)]
    for start, end, value in sorted(set(edits), reverse=True):
        text = text[:start] + value + text[end:]
    return text, problems


def sync(figures: dict, write: bool) -> list[str]:
    values, problems, texts = named_values(figures), [], {}
    read = {doc: (ROOT / doc).read_text(encoding="utf-8") for doc in DOCS}
    for doc, text in read.items():
        texts[doc], found = sync_doc(doc, text, figures, values)
        problems += found
    problems += render_outputs(figures, texts)
    for doc, text in texts.items():
        if write and text != read[doc]:
            (ROOT / doc).write_text(text, encoding="utf-8")
    return problems


def main(argv: list[str]) -> int:
    parser = OneLineParser(__doc__)
    add = parser.add_argument
    switch = functools.partial(add, action="store_true")
    switch("--record", help="first store the figures of the runs in --runs-dir")
    add("--runs-dir", type=Path, default=Path("runs"))
    switch("--check", help="change nothing; exit 1 if a doc differs")
    switch("--record-outputs", help="run the commands the docs show, and store their outputs")
    switch("--check-outputs", help="change nothing; exit 1 if an output changed")
    add("--outputs", type=lambda s: s.split(","), metavar="KEYS", help="only these (default: all)")
    add("--probe-cost", nargs="+", metavar=("KEY", "REPORT"), help="record bench.py reports")
    args = parser.parse_args(argv)
    keys = [o.key for o in OUTPUTS]
    if unknown := set(args.outputs or ()) - set(keys):
        parser.error(f"--outputs: no output {sorted(unknown)[0]}; choose from {', '.join(keys)}")
    args.outputs = args.outputs or keys
    torch.set_num_threads(1)
    if args.check_outputs:
        problems = check_outputs(read_figures(), args.runs_dir, args.outputs)
        print("\n".join(problems) or f"every output agrees with the runs in {args.runs_dir}/")
        return 1 if problems else 0
    if args.probe_cost:
        print(record_probe_cost(*args.probe_cost))
    if args.record:
        text = "\n".join((ROOT / doc).read_text(encoding="utf-8") for doc in DOCS)
        names = {n for marker in MARKER.findall(text) for n, _ in PLACEHOLDER.findall(marker)}
        quoted = {name.split(".")[0] for name in names} - set(COMPARISONS)
        recorded = record_runs(args.runs_dir, quoted)
        print(f"recorded {', '.join(recorded) or 'nothing'} in {FIGURES}")
    for output in OUTPUTS:
        if args.record_outputs and output.key in args.outputs:
            record(output.key, described(output), record_output(output, args.runs_dir))
            print(f"recorded {output.key}: {output.command}", flush=True)
    problems = sync(read_figures(), write=not args.check)
    print("\n".join(problems) or "the docs agree with docs/figures.json")
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
