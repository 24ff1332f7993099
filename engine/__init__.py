"""The run machinery that several scripts share."""
