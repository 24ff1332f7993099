"""What the experiment scripts run: compare.py's variants over seeds (comparison.py, with
children.py's processes and outcomes.py's results), sweep.py's rates (sweep.py), their statistics
(stats.py), and bench.py's measurements (benchmark.py, bench_cost.py, profiling.py, data_bench.py,
variant_bench.py, whole_run.py)."""
