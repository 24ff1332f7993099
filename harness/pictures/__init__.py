"""Pictures, drawn with matplotlib and imported only by what draws: heatmaps.py (attention) and
curves.py (the comparison's and the sweep's)."""
