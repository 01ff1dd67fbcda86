"""Build layer: distillation into the LUT, emitters (Python, Verilog, SLA monitor), heat maps."""
