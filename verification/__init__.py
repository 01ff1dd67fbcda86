"""mi_certify.verification: co-simulation (cocotb + Icarus), Verilator lint, tool versions."""

from .cocotb_sim import CosimResult, run_cosim
from .verilator import LintResult, lint

__all__ = ["CosimResult", "LintResult", "lint", "run_cosim"]
