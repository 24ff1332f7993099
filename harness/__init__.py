"""The harness around the model: everything the scripts share to run, measure, save and compare it, one job per module.

    runtime.py      where a run computes: device, backend switches, torchrun processes, clean stops
    startup.py      what a run sets up before its first step: the corpus, the run folder
    optim.py        how the weights move: AdamW, Muon for the blocks' matrices, the learning-rate schedule
    muon.py         torch's Muon with its Newton-Schulz iterations in a chosen dtype
    step.py         one optimizer step: micro-batches, forward, backward, clip, the finiteness check, the update
    evaluation.py   what an evaluation looks at and reports: losses, then model/measurements.py, heatmaps, a sample
    runlog.py       where measurements go: TensorBoard, metrics.jsonl, the console line
    heatmaps.py     pictures of attention weights with token labels, and the interactive page
    checkpoints.py  checkpoint files (atomic, data only), rebuilding a model, resume state
    folders.py      output folders: checked writable before the work, a live run's folder locked, earlier runs moved aside
    pretrained.py   OpenAI's GPT-2 weights in and out: the hub's layout, its names mapped to ours
    finetune.py     the weights a run starts from: fresh, or GPT-2's (--init-from)
    scoring.py      the loss, perplexity and bits per byte of a text, in sliding windows
    stats.py        spreads and paired differences over seeds, and the tables of variants
    comparison.py   the experiment of compare.py: the variants at each seed, one train.py process each, --resume
    curves.py       the comparison's picture: each logged quantity per variant, mean and band over seeds
    benchmark.py    what bench.py measures: the training step, sampling, each attention backend
    profiling.py    timers that wait for the device, peak memory on CPU and CUDA, the machine, a matmul peak
    cli.py          the one command-line parser, the model a script reads, one-line errors with exit codes

The lesson itself (attention, the loss, the measurements, the ablations) lives in model/.
Imports point one way: the scripts import this package, and it imports model, data and configs.
"""
