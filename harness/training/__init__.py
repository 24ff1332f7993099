"""What a training run needs, one job per module."""
