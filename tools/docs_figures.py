"""Every measured figure and every output in README.md and docs/ from one place, docs/figures.json:
python -m tools.docs_figures [--record] [--record-outputs] [--runs-dir runs] [--check]
[--check-outputs] [--probe-cost KEY REPORT...]

--record stores what --runs-dir holds (compare-<config>/compare.json with its runs' metrics.jsonl,
sweep-<config>/sweep.json, single runs' metrics.jsonl by folder name) in docs/figures.json, with
this machine and today's date; then the docs are
rewritten from that file: the tables (TABLES), each quoted figure (QUOTES: a doc's sentence with
{name:format} where a figure goes), each output a page shows (tools/outputs.py). --check rewrites
nothing and exits 1 naming each quote that differs. --record-outputs runs the commands whose outputs
the pages show on the runs under --runs-dir and stores what they print; --check-outputs runs them
again and exits 1 naming each output the code no longer prints (--outputs KEYS: some). --probe-cost
KEY REPORT... stores under KEY what the probe costs a whole run (tools/probe_cost.py), from
`bench.py --whole-run --json` reports of one preset with the probe and without it
(--train.probes=0), run in turns.
"""

import dataclasses
import json
import math
import re
import shutil
import sys
from pathlib import Path

import torch

from configs import load_config
from data.chunks import FORCE_AFTER, FORCED_CHARS
from data.sources import CHUNK_CHARS
from harness.cli import OneLineParser, run_command
from harness.pictures.curves import plot_positions
from harness.training.evaluation import HONEST_POSITIONS, SAMPLE_TOKENS
from harness.training.runlog import evaluations
from model import GPT, ModelConfig
from model.ablations import variants
from tools.figures import (
    FIGURES,
    ablation_figures,
    comparison_command,
    comparison_figures,
    comparison_key,
    context_figures,
    factors_said,
    positions_title,
    read_figures,
    record,
    sweep_command,
    sweep_figures,
)
from tools.outputs import (
    OUTPUTS,
    check_outputs,
    described,
    record_output,
    render_outputs,
    runs_folder,
)
from tools.probe_cost import record_probe_cost
from tools.quotes import COMPARISONS, QUOTES
from tools.tables import TABLES

ROOT = FIGURES.parent.parent
NUMBER = r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?"  # how a figure looks in a doc
# {name:format}; format "pct.1f" is the value x 100 as .1f
PLACEHOLDER = re.compile(r"\{([\w./-]+):([^{}\s]*)\}")


def flatten(value, name: str, out: dict[str, float]) -> None:
    """Every number inside value, under its dotted path: {"a": {"b": 1.0}} under "x" gives
    out["x.a.b"] = 1.0. A name
    has no spaces: a difference's label "a − b" (harness/experiments/stats.py's MINUS) is a-minus-b
    there."""
    if isinstance(value, dict):
        for key, inner in value.items():
            flatten(inner, f"{name}.{key.replace(' − ', '-minus-')}", out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out[name] = float(value)


def code_values() -> dict[str, float]:
    """The figures the code itself gives (code.*), computed in a second: the suite checks the docs'
    quotes of them.
    """
    char, base = load_config(["--config", "char"]), load_config(["--config", "base"])
    # Tiny Shakespeare's characters, as the char tokenizer finds them (tests/test_data.py)
    n_char = 65
    sizes = {
        name: GPT(dataclasses.replace(cfg.model, vocab_size=v)).num_params()
        for name, cfg, v in (("char", char, n_char), ("base", base, 50257))
    }
    return {
        "code.char_params_m": sizes["char"] / 1e6,
        "code.base_params_m": sizes["base"] / 1e6,
        "code.base_embedding_m": 50257 * base.model.n_embd / 1e6,
        "code.char_vocab": n_char,
        "code.ln_char_vocab": math.log(n_char),
        "code.char_sqrt_head_size": math.sqrt(char.model.n_embd // char.model.n_head),
        "code.honest_positions": HONEST_POSITIONS,
        "code.char_batch": char.train.batch_size,
        "code.char_honest_batches": char.train.honest_batches,
        "code.char_honest_predictions": char.train.honest_batches
        * char.train.batch_size
        * HONEST_POSITIONS,
        "code.char_val_predictions": char.train.eval_batches
        * char.train.batch_size
        * char.model.block_size,
        "code.sample_tokens": SAMPLE_TOKENS,
        "code.sample_tokens_shown": SAMPLE_TOKENS + 1,  # after the one-token prompt, a newline
        # data/chunks.py: the characters of a preparation's task, its safe-cut search, a forced
        # piece
        "code.task_chars": CHUNK_CHARS,
        "code.force_after": FORCE_AFTER,
        "code.forced_chars": FORCED_CHARS,
        "code.whole_chars": CHUNK_CHARS + FORCE_AFTER,
    }


def named_values(figures: dict) -> dict[str, float]:
    """Every figure by its dotted name, plus what the docs derive from them: a difference's interval
    ends (.low, .high), a comparison's score_spread (the unscaled variant's score std over base's),
    the score-gradient ratios."""
    out = code_values()
    for key, entry in figures.items():
        flatten(entry["value"], key, out)
    # an entry copied from a printed table holds its ends as printed
    for name in [n for n in out if n.endswith(".half_width")]:
        stem = name.removesuffix(".half_width")
        out.setdefault(f"{stem}.low", out[f"{stem}.mean"] - out[name])
        out.setdefault(f"{stem}.high", out[f"{stem}.mean"] + out[name])
    # model/ablations.py
    unscaled = next(
        suffix for suffix, model_cfg in variants(ModelConfig()).items() if not model_cfg.scaled
    )
    for key, stats in ((key, f"{key}.aggregate.{key.split('-')[0]}") for key in COMPARISONS):
        out[f"{key}.score_spread"] = (
            out[f"{stats}{unscaled}.attn/score_std.mean"] / out[f"{stats}.attn/score_std.mean"]
        )
    for key, entry in figures.items():
        if key.startswith("score-gradient-"):
            for when, lines in entry["value"].items():
                for line, short in zip(lines, ("score", "qk", "saturated"), strict=True):
                    out.update(
                        {
                            f"{key}.{when}.{short}.{end}": line[end]
                            for end in ("mean", "low", "high")
                        }
                    )
    return out


def figure(name: str, fmt: str, values: dict[str, float]) -> str:
    """One figure as the docs print it; format "pct.1f" is the value x 100 as .1f."""
    if name not in values:
        raise KeyError(f"docs/figures.json holds no figure {name}")
    return (
        format(values[name] * 100, fmt[3:]) if fmt.startswith("pct") else format(values[name], fmt)
    )


def fill(sentence: str, figures: list[str]) -> str:
    """The sentence with its placeholders replaced by figures, in order."""
    parts = PLACEHOLDER.split(sentence)
    return "".join(
        part if i % 3 == 0 else (figures[i // 3] if i % 3 == 1 else "")
        for i, part in enumerate(parts)
    )


def pattern(sentence: str) -> re.Pattern:
    """The sentence with a group wherever a figure stands (a number, or the placeholder itself, not
    yet filled in); any run of whitespace matches any other, so a sentence may wrap anywhere in a
    doc."""
    regex = ""
    for i, part in enumerate(PLACEHOLDER.split(sentence)):  # literal, name, format, literal, ...
        if i % 3 == 0:
            regex += "".join(
                r"\s+" if piece.isspace() else re.escape(piece)
                for piece in re.split(r"(\s+)", part)
                if piece
            )
        elif i % 3 == 1:
            regex += rf"({NUMBER}|\{{[\w./-]+:[^{{}}\s]*\}})"
    return re.compile(regex)


def replace_table(text: str, table: str) -> str:
    """text with the Markdown table whose header row begins as table's does (its first two cells:
    the columns after them may have changed, as when the runs measure a new quantity) replaced by
    table."""
    start = text.index("|".join(table.split("\n", 1)[0].split("|")[:3]) + "|")
    end = text.find("\n\n", start)
    return text[:start] + table + text[end if end >= 0 else len(text) :]


def sync(figures: dict, write: bool) -> list[str]:
    """Bring each doc in line with figures (write) or list what differs (not write); returns the
    differences.
    """
    values, problems, texts = named_values(figures), [], {}
    for doc, make in TABLES:
        text = texts.setdefault(doc, (ROOT / doc).read_text(encoding="utf-8"))
        table = make(figures)
        if table not in text:
            problems.append(
                f"{doc}: its table starting {table.split(chr(10))[0]!r} differs from docs/figures.json's"
            )
            texts[doc] = replace_table(text, table)
    for doc, sentence in QUOTES:
        text = texts.setdefault(doc, (ROOT / doc).read_text(encoding="utf-8"))
        wanted = [figure(name, fmt, values) for name, fmt in PLACEHOLDER.findall(sentence)]
        # a sentence may stand several times (a sample's header line)
        matches = list(pattern(sentence).finditer(text))
        if not matches:
            problems.append(f"{doc} no longer says {fill(sentence, wanted)!r}")
            continue
        pieces, last = [], 0
        for match in matches:
            if list(match.groups()) != wanted:
                problems.append(
                    f"{doc}: says {match.group(0)!r} where docs/figures.json gives {', '.join(wanted)}"
                )
            # each figure spliced in, the doc's own line breaks kept
            for k, value in enumerate(wanted, start=1):
                pieces += [text[last : match.start(k)], value]
                last = match.end(k)
        texts[doc] = "".join(pieces) + text[last:]
    for doc in {o.doc for o in OUTPUTS if o.doc}:
        texts.setdefault(doc, (ROOT / doc).read_text(encoding="utf-8"))
    problems += render_outputs(figures, texts)
    if write:
        for doc, text in texts.items():
            if text != (ROOT / doc).read_text(encoding="utf-8"):
                (ROOT / doc).write_text(text, encoding="utf-8")
    return problems


def quoted_runs() -> set[str]:
    """The single runs whose figures the docs quote (the first part of a quoted name)."""
    return {
        name.split(".")[0] for _, sentence in QUOTES for name, _ in PLACEHOLDER.findall(sentence)
    } - set(COMPARISONS)


def record_runs(runs_dir: Path) -> list[str]:
    """Store in docs/figures.json what runs_dir holds; returns the keys recorded."""
    recorded = []
    for folder in sorted(
        p for p in runs_folder(runs_dir).iterdir() if p.is_dir() and ".old-" not in p.name
    ):
        if (folder / "compare.json").is_file() and "aggregate" in json.loads(
            (folder / "compare.json").read_text(encoding="utf-8")
        ):
            value, config = comparison_figures(folder), folder.name.removeprefix("compare-")
            key, command = comparison_key(config, value), comparison_command(config, value)
            record(key, command, value)
            if ablations := ablation_figures(folder):
                recorded.append(f"{config}-ablation")
                record(
                    recorded[-1],
                    f"python inspect_attention.py --runs-dir {folder} --run RUN --ablate next-token, "
                    f"for each --no-mask RUN of {command}",
                    ablations,
                )
            if contexts := context_figures(folder, config):
                recorded.append(f"{config}-contexts")
                record(
                    recorded[-1],
                    f"python score.py --runs-dir {folder} --run RUN --contexts FACTORS, for each RUN of {command} "
                    f"(FACTORS: {factors_said(contexts)})",
                    contexts,
                )
                plot_positions(
                    contexts,
                    ROOT / "docs" / f"contexts-{config}.png",
                    positions_title(config, contexts),
                )
        elif (folder / "sweep.json").is_file() and "aggregate" in json.loads(
            (folder / "sweep.json").read_text(encoding="utf-8")
        ):
            key, value = f"{folder.name.removeprefix('sweep-')}-sweep", sweep_figures(folder)
            record(key, sweep_command(key.removesuffix("-sweep"), value), value)
            # the picture docs/experiment.md shows
            shutil.copyfile(folder / "sweep.png", ROOT / "docs" / f"{folder.name}.png")
        elif (
            folder.name in quoted_runs()
            and (folder / "metrics.jsonl").is_file()
            and (rows := evaluations(folder))
        ):
            key = folder.name
            last = {
                tag: rows[-1][tag]
                for tag in ("step", "loss/train", "loss/val", "loss/val_honest")
                if tag in rows[-1]
            }
            record(
                key,
                f"python train.py (run {folder.name}; its config.json says how)",
                {"last": last},
            )
        else:
            continue
        recorded.append(key)
    return recorded


def main(argv: list[str]) -> int:
    parser = OneLineParser(__doc__)
    parser.add_argument(
        "--record", action="store_true", help="first store what the runs under --runs-dir hold"
    )
    parser.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where --record looks (default: runs)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="change nothing; exit 1 if a doc differs from docs/figures.json",
    )
    parser.add_argument(
        "--record-outputs",
        action="store_true",
        help="run the commands whose outputs the docs show, and store them",
    )
    parser.add_argument(
        "--check-outputs",
        action="store_true",
        help="change nothing; exit 1 if a command now prints another output",
    )
    parser.add_argument(
        "--outputs",
        type=lambda text: text.split(","),
        metavar="KEYS",
        help="only these outputs (default: all)",
    )
    parser.add_argument(
        "--probe-cost",
        nargs="+",
        metavar=("KEY", "REPORT"),
        help="record bench.py --whole-run --json reports under KEY",
    )
    args = parser.parse_args(argv)
    if unknown := set(args.outputs or ()) - {o.key for o in OUTPUTS}:
        parser.error(
            f"--outputs: no output {sorted(unknown)[0]}; choose from {', '.join(o.key for o in OUTPUTS)}"
        )
    # the commands run with one thread, which is what the machine line of each recorded output says
    torch.set_num_threads(1)
    if args.check_outputs:
        problems = check_outputs(read_figures(), args.runs_dir, args.outputs)
        print(
            "\n".join(problems)
            or f"every output the docs show is what its command prints on the runs under {args.runs_dir}/"
        )
        return 1 if problems else 0
    if args.probe_cost:
        print(record_probe_cost(*args.probe_cost))
    if args.record:
        print(f"recorded {', '.join(record_runs(args.runs_dir)) or 'nothing'} in {FIGURES}")
    for output in [
        o
        for o in OUTPUTS
        if args.record_outputs and (args.outputs is None or o.key in args.outputs)
    ]:
        record(output.key, described(output), record_output(output, args.runs_dir))
        print(f"recorded {output.key}: {output.command}", flush=True)
    problems = sync(read_figures(), write=not args.check)
    print("\n".join(problems) or "the docs agree with docs/figures.json")
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    sys.exit(run_command(main, sys.argv[1:]))
