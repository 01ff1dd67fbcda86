"""Tools layer: the one place external tools and worker processes are started (registry, Yosys, Verilator, Chromium, Marabou, workers, backends, Dask), and the readers of their outputs."""
