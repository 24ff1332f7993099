"""Pictures, built with matplotlib's object API (no pyplot state), imported only by what draws.

heatmaps.py     token-labelled heatmaps of attention weights, one panel per head, and the
interactive page curves.py       the comparison's picture: each logged quantity per variant, mean
and band over seeds
"""
