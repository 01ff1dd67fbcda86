"""Checker layer: the independent re-check of a finished bundle, one module per evidence group. Never imports the pipeline."""
