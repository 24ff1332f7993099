"""Text in, integer tensors out: tokenizers, the corpus and its train/val split, random batches."""
