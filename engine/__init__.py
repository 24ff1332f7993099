"""The run machinery that the scripts share, one job per module.

    runtime.py      where a run computes: device, backend switches, torchrun processes, clean stops
    optim.py        how the weights move: AdamW and the learning-rate schedule
    step.py         one training step: micro-batches, forward, backward, clip
    evaluation.py   what an evaluation measures: losses, honest loss, attention statistics, heatmaps, a sample
    diagnostics.py  the measurements behind it: honest loss, per-head statistics, gradient norms, bits per byte
    runlog.py       where measurements go: TensorBoard, metrics.jsonl, the console line
    heatmaps.py     pictures of attention weights with token labels
    checkpoints.py  checkpoint files (atomic, data only), rebuilding a model, resume state
    folders.py      output folders: checked writable before the work, a live run's folder locked, earlier runs moved aside
    pretrained.py   OpenAI's GPT-2 weights in and out: the hub's layout, its names mapped to ours
    stats.py        spreads and paired differences over seeds
    cli.py          argument checks and one-line errors with exit codes

Imports point one way: the scripts import engine, engine imports model, data and configs.
"""
