"""mi_certify.verification: bound propagation, Marabou and Z3 queries, FSM and RTL proofs,
co-simulation (cocotb + Icarus, Verilator), synthesis figures, the bundle checker.

Public names are loaded on first use (PEP 562): importing one module of the package
loads that module and its own imports only (docs/architecture.md).
"""

from mi_certify.generator.core.exports import lazy_exports

_PUBLIC = {
    "CosimResult": "cosim.cocotb_sim", "run_cosim": "cosim.cocotb_sim",
    "LintResult": "tools.verilator", "lint": "tools.verilator",
    "CheckOptions": "check.bundle_check", "check_bundle": "check.bundle_check",
    "verify_spec": "nn.network", "VerifyOptions": "nn.nn_verify", "Verdict": "nn.nn_verify",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _PUBLIC, globals())
