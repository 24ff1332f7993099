"""Every key's meaning, from the fields: --help's epilog and docs/command-line.md's key tables."""

import textwrap
from pathlib import Path

from configs.loader import SHORTHANDS, presets
from configs.schema import KEYS, SECTION_MEANINGS, SECTIONS
from configs.validation import FROM_TOKENIZER

DOCS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "command-line.md"
BEGIN = (
    "<!-- every key: written by `python -m configs` from the fields' meanings; "
    "do not edit by hand -->"
)
END = "<!-- end of every key -->"


def shown_default(dotted: str) -> str:
    default = KEYS[dotted].default
    return str(default).lower() if isinstance(default, bool) else str(default)


def meaning(dotted: str) -> str:
    return KEYS[dotted].metadata["meaning"]


def settable(section: str) -> list[str]:
    return [key for key in KEYS if key.startswith(f"{section}.") and key not in FROM_TOKENIZER]


def usage(default: str = "base") -> str:
    lines = [
        f"--config NAME|PATH: one of {', '.join(presets())} (default {default}), or a .toml file",
        "",
        "shorthands:",
    ]
    for flag, (dotted, value) in SHORTHANDS.items():
        lines.append(f"  {flag:<12} {dotted}={value or 'VALUE'}")
    lines.append(
        "\nevery key, --section.field=VALUE, with its default (a preset may change it) and its "
        "meaning:"
    )
    for section in SECTIONS:
        lines.append(f"\n[{section}] {SECTION_MEANINGS[section]}")
        for dotted in settable(section):
            key = f"  --{dotted}={shown_default(dotted)}"
            wrapped = textwrap.wrap(meaning(dotted), width=76)
            lines.append(
                f"{key:<32}  {wrapped[0]}" if len(key) < 32 else f"{key}\n{'':<34}{wrapped[0]}"
            )
            lines.extend(f"{'':<34}{more}" for more in wrapped[1:])
    return "\n".join(lines)


def markdown_tables() -> str:
    parts = []
    for section in SECTIONS:
        parts.append(f"### [{section}]: {SECTION_MEANINGS[section]}")
        parts.append("| key | default | meaning |\n|---|---|---|")
        for dotted in settable(section):
            default = f"`{shown_default(dotted)}`" if shown_default(dotted) else "(empty)"
            parts[-1] += f"\n| `{dotted}` | {default} | {meaning(dotted)} |"
    return "\n\n".join(parts)


def rewrite(page: str) -> str:
    if BEGIN not in page or END not in page:
        raise ValueError(f"{DOCS_PAGE} has lost its marker lines; put back {BEGIN!r} and {END!r}")
    head, rest = page.split(BEGIN, 1)
    return head + BEGIN + "\n\n" + markdown_tables() + "\n\n" + END + rest.split(END, 1)[1]
