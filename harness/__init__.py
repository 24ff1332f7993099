"""The machinery around the model, in rooms named for who calls them: training/, experiments/,
pictures/, and the modules the scripts share (docs/layout.md lists them).
"""
