"""The machinery around the model, in rooms named for who calls them.

    training/       what train.py runs: the device and clean stops, the optimizers, one step,
                    evaluation, the run log, checkpoints and the weights a run starts from
    experiments/    what compare.py and bench.py run: the comparison over variants and seeds,
                    its statistics, the benchmark and its timers
    pictures/       attention heatmaps and the comparison's curves (matplotlib) gpt2.py
    OpenAI's GPT-2 weights in and out: the hub's layout, its names mapped to ours scoring.py
    the loss, perplexity and bits per byte of a text, in sliding windows (score.py) lens.py
    a run opened in TransformerLens: its config and tensors mapped onto a HookedTransformer's
    folders.py      output folders: checked writable before the work, a live run's folder locked,
    earlier runs moved aside cli.py          the one command-line parser, the model a script reads,
    one-line errors with exit codes

The lesson itself (attention, the loss, the measurements, the ablations) lives in model/.
Imports point one way: the scripts import this package, and it imports model, data and configs.
"""
