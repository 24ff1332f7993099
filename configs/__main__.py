"""python -m configs: rewrite the key tables of docs/command-line.md from the fields' meanings."""

from configs.reference import write_docs

print(write_docs())
