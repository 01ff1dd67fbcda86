"""The build's defaults that the command line shows before any stage runs: the co-simulation's
random cycles and seed, and mi-certify's version. Standard library only, so that ``mi-certify
--help``, ``check`` and the run-time commands do not import the pipeline (about 1.5 s of imports:
scipy, numba, cocotb; measured with ``python -X importtime``, 2026-12-07)."""

from __future__ import annotations

from importlib import metadata

#: Random co-simulation cycles (directed sequences come on top).
COSIM_RANDOM_CYCLES = 10_000
COSIM_SEED = 1


def version() -> str:
    """mi-certify's installed version ("0+unknown" when running from a source tree without metadata)."""
    try:
        return metadata.version("mi-certify")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"
