"""README.md and docs/*.md say what is true: every relative link resolves, every command they show
names a script that exists and flags that its own parser accepts, and the commands that take seconds
on the tiny preset run.

Commands are read from the code blocks (indented or fenced) and from inline code that starts with
`python `. A flag is checked by running the script as `python script.py args` up to the point where
its command line is parsed (its argparse parser, or OneLineParser.parse_with_config for the config
flags), so the check follows the scripts as they change and never keeps a list of its own.
"""

import argparse
import ast
import importlib
import importlib.metadata
import importlib.util
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO_ROOT, skip_or_fail, write_corpus

import configs
from harness.cli import OneLineParser

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# what a code block's command may start with
PROGRAMS = ("python", "torchrun", "tensorboard", "pip", "hf")


def doc_id(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


# --- reading Markdown
# -------------------------------------------------------------------------------


def code_blocks(text: str) -> list[str]:
    """The text of every fenced block and every indented block (4 spaces after a blank line, outside
    a fence).

    A fence marked ```text holds output (a sample, a table a command prints), not code, and is left
    out."""
    blocks, lines, i = [], text.split("\n"), 0
    previous_blank = True
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            if line.strip() != "```text":
                blocks.append("\n".join(lines[i + 1 : j]))
            i, previous_blank = j + 1, False
            continue
        if previous_blank and line.startswith("    ") and line.strip():
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            blocks.append("\n".join(row[4:] for row in lines[i:j]).strip("\n"))
            i, previous_blank = j, True
            continue
        previous_blank = not line.strip()
        i += 1
    return blocks


def prose(text: str) -> str:
    """The text outside code blocks (fenced and indented), where links and inline code live."""
    kept, in_fence, previous_blank, in_indented = [], False, True, False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        if in_indented and (line.startswith("    ") or not line.strip()):
            previous_blank = not line.strip()
            continue
        in_indented = previous_blank and line.startswith("    ") and bool(line.strip())
        if not in_indented:
            kept.append(line)
        previous_blank = not line.strip()
    return "\n".join(kept)


def links(text: str) -> list[str]:
    """Targets of [text](target) and ![alt](target) in the prose."""
    return re.findall(r"\]\(([^)\s]+)\)", prose(text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = prose(path.read_text(encoding="utf-8"))
    return {anchor(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


@dataclass
class Command:
    doc: str
    argv: list[str]

    def __str__(self) -> str:
        return f"{self.doc}: {shlex.join(self.argv)}"


def block_commands(block: str) -> list[list[str]] | None:
    """The commands of a shell block (backslash continuations joined, comments dropped); None for a
    Python block.
    """
    joined = block.replace("\\\n", " ")
    commands = []
    for line in joined.split("\n"):
        argv = shlex.split(line, comments=True)
        if argv and argv[0] in PROGRAMS:
            commands.append(argv)
        elif argv:
            return None
    return commands


def inline_commands(text: str) -> list[list[str]]:
    """Inline code that is a command: `python script.py ...`, `python -m ...` or `hf ...`, possibly
    wrapped over lines.

    A "..." stands for arguments left out, and is dropped."""
    spans = [s.replace("\n", " ") for s in re.findall(r"`([^`]+)`", prose(text))]
    return [
        [a for a in shlex.split(s) if a != "..."]
        for s in spans
        if re.match(r"(python (-m \S+|\S+\.py)|hf \S+)( |$)", s)
    ]


def all_commands() -> list[Command]:
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for block in code_blocks(text):
            found += [Command(doc_id(path), argv) for argv in block_commands(block) or []]
        found += [Command(doc_id(path), argv) for argv in inline_commands(text)]
    # pip installing a package by name has nothing to check
    return [c for c in found if c.argv[0] != "pip" or "-r" in c.argv]


def python_blocks() -> list[tuple[str, str]]:
    return [
        (doc_id(p), b)
        for p in DOCS
        for b in code_blocks(p.read_text(encoding="utf-8"))
        if block_commands(b) is None
    ]


# --- links
# -----------------------------------------------------------------------------------------


def relative_links() -> list[tuple[Path, str]]:
    """(page, target) for every link that points into the project (http:, https:, mailto: are left
    out).
    """
    return [
        (p, t)
        for p in DOCS
        for t in links(p.read_text(encoding="utf-8"))
        if not re.match(r"[a-z]+:", t)
    ]


@pytest.mark.parametrize(
    "path,target", relative_links(), ids=lambda x: doc_id(x) if isinstance(x, Path) else x
)
def test_relative_link_resolves(path, target):
    file_part, _, fragment = target.partition("#")
    resolved = (path.parent / file_part).resolve() if file_part else path
    assert resolved.exists(), f"{doc_id(path)} links to {target}: there is no {resolved}"
    if fragment and resolved.suffix == ".md":
        assert fragment in anchors(resolved), (
            f"{doc_id(path)} links to {target}: {resolved.name} has no heading with that anchor"
        )


def test_every_docs_page_is_linked_from_readme():
    readme_links = {
        (REPO_ROOT / t.partition("#")[0]).resolve()
        for t in links((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    }
    unlinked = [doc_id(p) for p in DOCS[1:] if p.resolve() not in readme_links]
    assert not unlinked, f"docs pages that README does not link to: {unlinked}"


def test_anchor_follows_github():
    assert anchor("What you should see") == "what-you-should-see"
    assert anchor("GPT-2's weights in and out") == "gpt-2s-weights-in-and-out"
    assert (
        anchor("Why the presets draw queries and keys at std 1/sqrt(n_embd)")
        == "why-the-presets-draw-queries-and-keys-at-std-1sqrtn_embd"
    )


def test_readme_fits_on_a_few_screens():
    n_lines = len((REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n_lines <= 210, f"README.md has {n_lines} lines; move the detail into a page under docs/"


def test_the_glossary_explains_every_column_in_the_tables_order():
    """README says the glossary explains every column of its table; compare.py prints the same
    columns and wall s.
    """
    from harness.experiments.stats import COLUMNS

    entries = re.findall(
        r"^- \*\*([^*]+)\*\*",
        (REPO_ROOT / "docs" / "glossary.md").read_text(encoding="utf-8"),
        flags=re.MULTILINE,
    )
    headers = [header for header, _, _ in COLUMNS]
    assert [e for e in entries if e in headers] == headers, (
        f"docs/glossary.md lacks {[h for h in headers if h not in entries]} or reorders"
    )
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    table = next(line for line in readme.splitlines() if line.startswith("| run | train |"))
    assert [cell.strip() for cell in table.strip("|").split("|")][1:] == [
        h for h in headers if h != "wall s"
    ], table


def test_the_command_line_page_names_every_field_flag_and_preset():
    """docs/command-line.md promises every config field: each field of the dataclasses, each
    shorthand flag and each preset.
    """
    text = (REPO_ROOT / "docs" / "command-line.md").read_text(encoding="utf-8")
    fields = list(configs.KEYS)
    assert len(fields) > 20, fields
    missing = [f"`{f}`" for f in fields if f"`{f}`" not in text and f not in configs.FROM_TOKENIZER]
    missing += [f"`{flag}" for flag in configs.SHORTHANDS if f"`{flag}" not in text]
    missing += [
        f"`{p.stem}`" for p in configs.CONFIG_DIR.glob("*.toml") if f"`{p.stem}`" not in text
    ]
    assert not missing, f"docs/command-line.md does not name {missing}"


# --- commands
# ----------------------------------------------------------------------------------------


class Parsed(Exception):
    """Raised where a script has parsed its command line, with what it parsed: nothing runs."""


def dry_parse(script: Path, args: list[str], monkeypatch, capsys):
    """Run `python script args` until it has parsed its command line; return what it parsed, or fail
    with its error.

    A script with a config stops in OneLineParser.parse_with_config (its own flags and the
    config's), the others in argparse's parse_args.
    """
    real_with_config, real_parse = (
        OneLineParser.parse_with_config,
        argparse.ArgumentParser.parse_args,
    )

    def parse_with_config(self, argv):
        raise Parsed(real_with_config(self, argv)[1])  # the config

    def parse(self, args=None, namespace=None):
        raise Parsed(real_parse(self, args, namespace))

    monkeypatch.setattr(OneLineParser, "parse_with_config", parse_with_config)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse)
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    try:
        runpy.run_path(str(script), run_name="__main__")
    except Parsed as done:
        return done.args[0]
    except SystemExit as e:
        pytest.fail(
            f"python {script.name} {shlex.join(args)} exits with {e.code}: "
            f"{capsys.readouterr().err.strip()}"
        )
    pytest.fail(f"python {script.name} {shlex.join(args)} finished without parsing a command line")


def check_python(argv: list[str], monkeypatch, capsys) -> None:
    """`python -m MODULE ...` or `python SCRIPT.py ARGS`."""
    if argv[1] == "-m":
        assert importlib.util.find_spec(argv[2]) is not None, f"no module {argv[2]}"
        return
    script = (REPO_ROOT / argv[1]).resolve()
    assert script.is_relative_to(REPO_ROOT) and script.is_file(), (
        f"no script {argv[1]} in the repository (all a user has)"
    )
    dry_parse(script, argv[2:], monkeypatch, capsys)


def check_command(argv: list[str], monkeypatch, capsys) -> None:
    if argv[0] == "python":
        check_python(argv, monkeypatch, capsys)
    elif argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        args = get_args_parser().parse_args(argv[1:])
        check_python(
            ["python", args.training_script, *args.training_script_args], monkeypatch, capsys
        )
    elif argv[0] == "tensorboard":
        from tensorboard import program

        # its own flag parser: exits 2 on an unknown flag
        program.TensorBoard().configure(argv=[None, *argv[1:]])
    elif argv[0] == "hf":
        check_hf(argv)
    else:  # pip install -r FILE
        assert (REPO_ROOT / argv[argv.index("-r") + 1]).is_file(), f"no requirements file in {argv}"


def check_hf(argv: list[str]) -> None:
    """huggingface_hub's command line (requirements.txt) exists and parses argv with its own click
    parser; nothing runs.
    """
    scripts = [
        e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "hf"
    ]
    assert scripts, (
        "the installed huggingface_hub has no `hf` command (0.34 brought it; requirements.txt asks "
        "for it)"
    )
    app = getattr(importlib.import_module(scripts[0].module), "app", None)
    if not hasattr(app, "make_context"):
        version = importlib.metadata.version("huggingface_hub")
        pytest.skip(
            f"huggingface_hub {version} builds `hf` without click; its flags are checked with "
            "huggingface_hub 1.0 or newer"
        )
    import click

    try:
        ctx = app.make_context("hf", argv[1:])
        # click 8.2 keeps the subcommand in protected_args still, and warns on reading it
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            name, command, rest = app.resolve_command(ctx, [*ctx.protected_args, *ctx.args])
        command.make_context(name, rest, parent=ctx)
    except click.UsageError as e:
        pytest.fail(f"{shlex.join(argv)}: {e.format_message()}")


COMMANDS = all_commands()


def test_the_docs_show_commands():
    scripts = {c.argv[1] for c in COMMANDS if c.argv[0] == "python"}
    assert {"train.py", "sample.py", "compare.py", "bench.py", "inspect_attention.py"} <= scripts, (
        scripts
    )


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_command_names_a_script_and_flags_it_accepts(command, monkeypatch, capsys):
    check_command(command.argv, monkeypatch, capsys)


def test_no_command_reaches_outside_the_repository():
    """A user has the repository and nothing beside it: no command names a path above its root."""
    outside = [
        str(c)
        for c in COMMANDS
        if any(a.startswith("../") or "/../" in a or a.startswith("~") for a in c.argv)
    ]
    assert not outside, f"commands that name paths outside the repository: {outside}"
    with pytest.raises(AssertionError, match="no script ../yardstick.py in the repository"):
        check_python(["python", "../yardstick.py"], None, None)


def test_the_test_command_ends_with_its_count_and_each_skip_with_its_reason(tmp_path):
    """README's `python -m pytest`, with or without a user's own -q, ends with the count line and
    lists each skip with its reason (pyproject.toml's addopts): a -q there would make a user's -q
    hide the count."""
    (tmp_path / "test_one.py").write_text(
        "import pytest\n\ndef test_a():\n    assert 2 + 2 == 4\n\n"
        "def test_b():\n    pytest.skip('needs a thing this machine lacks')\n"
    )
    for extra in ([], ["-q"]):
        config = [
            "-c",
            str(REPO_ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
        ]
        argv = [sys.executable, "-m", "pytest", *config, *extra, str(tmp_path / "test_one.py")]
        proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        lines = proc.stdout.strip().splitlines()
        assert proc.returncode == 0 and re.search(r"\b1 passed, 1 skipped\b", lines[-1]), (
            extra,
            proc.stdout[-1000:],
        )
        assert any(
            "SKIPPED" in line and "needs a thing this machine lacks" in line for line in lines
        ), (extra, proc.stdout[-1000:])


def test_every_folder_a_doc_command_writes_into_is_ignored_by_git():
    """What the commands write (runs, exported models, downloads) never shows up as a change to
    commit.
    """
    lines = (REPO_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    ignored = {
        line.strip().strip("/") for line in lines if line.strip() and not line.startswith("#")
    }
    flags = ("--out", "--local-dir", "--runs-dir", "--train.runs_dir")
    written = {
        c.argv[i + 1].split("/")[0]: str(c)
        for c in COMMANDS
        for i, arg in enumerate(c.argv[:-1])
        if arg in flags
    }
    assert "exported" in written and "runs" in written, written
    assert not set(written) - ignored, (
        f"folders the docs' commands write that .gitignore lacks: {set(written) - ignored}"
    )


def test_dry_parse_rejects_an_unknown_flag(monkeypatch, capsys):
    """The check above can fail: a flag that no parser knows is caught, for config flags and
    argparse flags alike.
    """
    with pytest.raises(pytest.fail.Exception, match="did you mean train.lr"):
        check_command(["python", "train.py", "--train.learning_rate=3e-4"], monkeypatch, capsys)
    with pytest.raises(pytest.fail.Exception, match="unrecognized arguments: --top-q"):
        check_command(["python", "sample.py", "--top-q", "5"], monkeypatch, capsys)
    with pytest.raises(pytest.fail.Exception, match=r"No such option:? '?--local"):
        check_command(["hf", "download", "gpt2", "--local", "folder"], monkeypatch, capsys)
    cfg = dry_parse(
        REPO_ROOT / "compare.py",
        ["--config", "char", "--seeds", "3", "--model.n_layer", "6"],
        monkeypatch,
        capsys,
    )
    assert (cfg.name, cfg.model.n_layer) == ("char", 6)


@pytest.mark.parametrize(
    "doc,block",
    python_blocks(),
    ids=lambda x: x if isinstance(x, str) and x.endswith(".md") else "",
)
def test_python_block_imports_exist(doc, block):
    """A Python snippet in the docs parses and imports names that exist (from an optional package,
    when it is installed).
    """
    tree = ast.parse(block)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if importlib.util.find_spec(node.module.split(".")[0]) is None:
                skip_or_fail(
                    f"{doc} imports {node.module}, which is not installed: pip install -r "
                    "requirements-dev.txt"
                )
            module = importlib.import_module(node.module)
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            assert not missing, f"{doc}: {node.module} has no {missing}"


# --- which test runs each command, or why none can
# -------------------------------------------------


def pretrained_from_the_hub(argv: list[str]) -> bool:
    """A command that reads OpenAI's GPT-2 (gpt2, gpt2-medium, ...) by name: from the Hugging Face
    hub.
    """
    named = argv[argv.index("--pretrained") + 1] if "--pretrained" in argv else None
    # the preset starts from the hub's gpt2
    fine_tune = "gpt2-finetune" in argv and "--init-from" not in argv
    return (named is not None and named.startswith("gpt2")) or fine_tune


# (which commands, why the suite cannot run them); test_docs still parses each one's flags
NOT_RUN = [
    (
        pretrained_from_the_hub,
        "reads OpenAI's GPT-2 from the Hugging Face hub, over the network; the suite runs the same "
        "path on a small random GPT-2 it saves itself (tests/test_pretrained.py, "
        "tests/test_real_gpt2.py)",
    ),
    (lambda argv: argv[0] == "hf", "downloads from the Hugging Face hub, over the network"),
    (
        lambda argv: argv[0] == "pip",
        "installs from PyPI, over the network; .ci/run installs what README says in a fresh clone",
    ),
    (
        lambda argv: argv[0] == "torchrun",
        "needs 4 GPUs, or 2 machines of 8; tests/test_distributed.py runs train.py as 2 CPU "
        "processes that sum their gradients as these would",
    ),
    (lambda argv: argv[:3] == ["python", "-m", "pytest"], "is the suite itself"),
    (
        lambda argv: argv[0] == "tensorboard",
        "starts a server that runs until it is stopped; its flags are parsed here",
    ),
]


TEST_TEXTS = {
    p.name: p.read_text(encoding="utf-8")
    for p in (REPO_ROOT / "tests").glob("test_*.py")
    if p.name != "test_docs.py"
}


def files_running(script: str) -> list[str]:
    """The text of each test file that runs script.py: it imports the script or names it."""
    stem = script.removesuffix(".py")
    return [
        text
        for text in TEST_TEXTS.values()
        if script in text or re.search(rf"^\s*(import {stem}\b|from {stem} import)", text, re.M)
    ]


def test_every_doc_command_is_run_by_a_test_or_listed_with_the_reason_it_cannot_be():
    """A command in NOT_RUN cannot run here (the network, GPUs). Any other runs in the suite in a
    small form (the tiny preset, a small text, a small run of the test's own): some test runs its
    script, and every flag of the script's own that the command gives appears in a test that runs
    it. Config keys (--section.field) go to the config loader, which every script shares, and which
    tests/test_config.py tests key by key."""
    unrun = []
    for command in COMMANDS:
        argv = command.argv
        if any(matches(argv) for matches, _ in NOT_RUN):
            continue
        if argv[1] == "-m":  # a module's command: a test imports what it runs, or runs it
            runs = re.compile(rf"(python -m |from |import ){re.escape(argv[2])}\b")
            if not any(runs.search(text) for text in TEST_TEXTS.values()):
                unrun.append(f"{command}: no test runs {argv[2]}")
            continue
        runners = files_running(argv[1])
        flags = {
            a.split("=")[0] for a in argv[2:] if a.startswith("--") and "." not in a.split("=")[0]
        }
        missing = sorted(f for f in flags if not any(f in text for text in runners))
        if not runners or missing:
            why = "no test runs it"
            if runners:
                why = "no test that runs it gives " + ", ".join(missing)
            unrun.append(f"{command}: {why}")
    assert not unrun, (
        "run these in a test, on a small scale, or list them in NOT_RUN with the reason:\n"
        + "\n".join(unrun)
    )
    reasons = [reason for _, reason in NOT_RUN]
    # no stale entry
    assert all(any(matches(c.argv) for c in COMMANDS) for matches, _ in NOT_RUN) and all(reasons), (
        reasons
    )


# --- commands that run in seconds on the tiny preset
# -------------------------------------------------


def on_tiny(argv: list[str], root: Path, text: Path) -> list[str]:
    """A documented command made to run in seconds: the tiny preset, files under root, the CPU."""
    script, args = argv[1], list(argv[2:])
    if script == "train.py":
        if "--config" in args:
            del args[args.index("--config") : args.index("--config") + 2]
        if "--data-file" in args:
            args[args.index("--data-file") + 1] = str(text)
        else:
            args += ["--data-file", str(text)]
        args = [
            "--config",
            "tiny",
            "--data.cache_dir",
            str(root / "cache"),
            "--device",
            "cpu",
            *args,
        ]
    return [sys.executable, script, *args, "--runs-dir", str(root / "runs")]


def test_train_on_your_own_text_runs(tmp_path):
    """docs/own-text.md's block, command by command, on the tiny preset: it trains a run and samples
    from it.
    """
    (block,) = [
        b
        for b in code_blocks((REPO_ROOT / "docs" / "own-text.md").read_text(encoding="utf-8"))
        if block_commands(b)
    ]
    commands = block_commands(block)
    assert [c[1] for c in commands] == ["train.py", "sample.py"], commands
    text = write_corpus(tmp_path / "text")
    outputs = []
    for argv in commands:
        # one thread: a tiny model's ops are too small to share, as one_cpu_thread says
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(
            on_tiny(argv, tmp_path, text),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (
            f"{shlex.join(argv)} on tiny exits {proc.returncode}:\n{proc.stderr[-2000:]}"
        )
        outputs.append(proc.stdout)
    run_name = commands[0][commands[0].index("--run-name") + 1]
    assert (tmp_path / "runs" / run_name / "ckpt.pt").is_file()
    prompt = commands[1][commands[1].index("--prompt") + 1]
    assert prompt in outputs[1] and len(outputs[1]) > len(prompt) + 20, outputs[1]
