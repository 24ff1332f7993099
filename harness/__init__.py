"""The machinery around the model, in rooms named for who calls them: training/ (what train.py
runs), experiments/ (what compare.py, sweep.py and bench.py run), pictures/ (heatmaps and curves),
and the modules the scripts share (docs/layout.md lists them). The lesson itself lives in model/.
"""
