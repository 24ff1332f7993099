"""What a training run needs, one job per module, in the order train.py calls them.

runtime.py            where a run computes: device, backend switches, torchrun processes, the corpus
                      prepared once for all of them, clean stops
starting_weights.py   the weights a run starts from: fresh, or GPT-2's (--init-from) optim.py
how the weights move: AdamW, Muon for the blocks' matrices, the learning-rate schedule muon.py
torch's Muon with its Newton-Schulz iterations in a chosen dtype step.py               the
bookkeeping of train.py's step: micro-batches, the DDP sync, the finiteness check evaluation.py
what an evaluation looks at and reports: losses, then model/measurements.py, heatmaps, a sample
runlog.py             the run folder and where measurements go: config.json, TensorBoard,
metrics.jsonl, the console checkpoints.py        checkpoint files (atomic, data only), rebuilding a
model, resume state
"""
