"""Core: the objects every layer shares (errors, numerics, IR, spec, LUT, box tree, results, exports, source digest). Imports nothing of the layers above."""
