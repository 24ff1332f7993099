"""What the experiment scripts run: compare.py's variants over seeds, sweep.py's rates, their
statistics (stats.py), and bench.py's measurements."""
