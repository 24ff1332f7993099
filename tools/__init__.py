"""Commands that keep the docs true: docs/figures.json and what the docs show from it."""
