"""What compare.py, sweep.py and bench.py run, and their statistics."""
