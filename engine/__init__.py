"""Run machinery shared by the scripts: runtime, checkpoints, evaluation, logging, pictures, pretrained weights."""
