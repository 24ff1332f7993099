"""What the experiment scripts run: compare.py's variants over seeds, sweep.py's rates, and
bench.py's measurements.

comparison.py   the variants at each seed, one train.py process each, --resume children.py     those
train.py processes, one or several at a time, with every stop signal passed on outcomes.py     what
each run came to, read from its folder: finished, diverged, or ended by a signal sweep.py
sweep.py's learning rates x variants x seeds, and what each rate does at the end of training
stats.py        spreads and paired differences over seeds, and the tables of variants benchmark.py
what bench.py measures: the training step, sampling, each attention backend bench_cost.py   what
bench.py will cost, said first: train.py's refusals before any model is built, then the seconds
data_bench.py   what bench.py --data-mb measures: the corpus's preparation against tiktoken's batch
encoding profiling.py    train.py's step as bench.py times it, timers that wait for the device, peak
memory on CPU and CUDA, the machine, a matmul peak whole_run.py    bench.py --whole-run: one whole
train.py run, its wall and CPU time split phase by phase
"""
