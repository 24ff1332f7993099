"""Commands that keep the docs true: docs/figures.json, the figures, tables and outputs the docs
show from it, and the measurements behind them (docs/layout.md says what each module holds)."""
