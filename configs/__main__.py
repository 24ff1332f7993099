"""python -m configs: rewrite the key tables of docs/command-line.md from the fields' meanings."""

from configs.reference import DOCS_PAGE, rewrite

old = DOCS_PAGE.read_text(encoding="utf-8")
new = rewrite(old)
if new != old:
    DOCS_PAGE.write_text(new, encoding="utf-8")
print(f"{DOCS_PAGE}: {'rewritten' if new != old else 'already current'}")
