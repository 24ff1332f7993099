"""What every key means, written out from the schema: `--help` of each config-driven script, and the
key tables of docs/command-line.md.

Each field's meaning lives once, in its `setting(default, meaning)`; this module only prints it. The
tables in docs/command-line.md sit between two marker lines and are rewritten by

    python -m configs

tests/test_config.py fails when they are stale (a field added, a default or a meaning changed).
"""

import dataclasses
import textwrap
from pathlib import Path

from configs.loader import SHORTHANDS, presets
from configs.schema import KEYS, SECTION_MEANINGS, SECTIONS
from configs.validation import FROM_TOKENIZER

DOCS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "command-line.md"
BEGIN = "<!-- every key: written by `python -m configs` from the fields' meanings; do not edit by hand -->"
END = "<!-- end of every key -->"


def shown_default(dotted: str) -> str:
    """A field's default as it is typed on the command line: true/false, the number, the text (''
    shown as empty).
    """
    default = KEYS[dotted].default
    if isinstance(default, bool):
        return str(default).lower()
    return "" if default == "" else str(default)


def meaning(dotted: str) -> str:
    return KEYS[dotted].metadata["meaning"]


def settable(section: str) -> list[str]:
    return [
        f"{section}.{f.name}"
        for f in dataclasses.fields(SECTIONS[section])
        if f"{section}.{f.name}" not in FROM_TOKENIZER
    ]


def usage(default: str = "base", width: int = 110) -> str:
    """The epilog of --help: the presets, the shorthands, then every key by section with its default
    and meaning.
    """
    lines = [
        f"--config NAME|PATH: one of {', '.join(presets())} (default {default}), or a .toml file",
        "",
        "shorthands:",
    ]
    for flag, (dotted, value) in SHORTHANDS.items():
        lines.append(f"  {flag:<12} {dotted}={'VALUE' if value is None else value}")
    lines.append(
        "\nevery key, --section.field=VALUE, with its default (a preset may change it) and its meaning:"
    )
    for section in SECTIONS:
        lines.append(f"\n[{section}] {SECTION_MEANINGS[section]}")
        for dotted in settable(section):
            key = f"  --{dotted}={shown_default(dotted)}"
            wrapped = textwrap.wrap(meaning(dotted), width=max(40, width - 34))
            lines.append(
                f"{key:<32}  {wrapped[0]}" if len(key) < 32 else f"{key}\n{'':<34}{wrapped[0]}"
            )
            lines.extend(f"{'':<34}{more}" for more in wrapped[1:])
    return "\n".join(lines)


def markdown_tables() -> str:
    """One table per section: key, default, meaning (what docs/command-line.md holds between its
    markers).
    """
    parts = []
    for section in SECTIONS:
        rows = [
            f"| `{dotted}` | {'`' + shown_default(dotted) + '`' if shown_default(dotted) else '(empty)'} | {meaning(dotted)} |"
            for dotted in settable(section)
        ]
        parts.append(
            f"### [{section}]: {SECTION_MEANINGS[section]}\n\n| key | default | meaning |\n|---|---|---|\n"
            + "\n".join(rows)
        )
    return "\n\n".join(parts)


def rewrite(page: str) -> str:
    """The page with the text between its markers replaced by today's tables."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"{DOCS_PAGE} has lost its marker lines; put back {BEGIN!r} and {END!r}")
    head, rest = page.split(BEGIN, 1)
    return head + BEGIN + "\n\n" + markdown_tables() + "\n\n" + END + rest.split(END, 1)[1]


def write_docs() -> str:
    """Rewrite docs/command-line.md's key tables if they are stale; say which."""
    text = DOCS_PAGE.read_text(encoding="utf-8")
    new = rewrite(text)
    if new != text:
        DOCS_PAGE.write_text(new, encoding="utf-8")
    return f"{DOCS_PAGE}: {'rewritten' if new != text else 'already current'}"
