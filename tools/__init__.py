"""Commands that keep the docs true: the figures README and docs/ quote, and the measurements behind
them.

figures.py         docs/figures.json, the one file that holds every measured figure the docs quote,
                   each with its command, machine and date
docs_figures.py    python -m tools.docs_figures: record runs' results there, rewrite the docs from
it, or check them outputs.py         the outputs the docs show (samples, scores): each command, run
on a recorded run, kept there too probe_cost.py      what the probe costs a run: bench.py
--whole-run reports with and without it, read and recorded score_gradient.py  python -m
tools.score_gradient: what a saturated softmax passes back to the scores
"""
