"""What a training run needs, one job per module, in the order train.py calls them: runtime,
budget, starting_weights, optim and muon, step, evaluation, probe, runlog, checkpoints.
"""
