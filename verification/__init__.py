"""mi_certify.verification: bound propagation, Marabou and Z3 queries, FSM and RTL proofs,
co-simulation (cocotb + Icarus, Verilator), synthesis figures, the bundle checker.

Public names are loaded on first use (PEP 562): importing one module of the package
loads that module and its own imports only (docs/architecture.md).
"""

from mi_certify.generator.exports import lazy_exports

_PUBLIC = {
    "CosimResult": "cocotb_sim", "run_cosim": "cocotb_sim",
    "LintResult": "verilator", "lint": "verilator",
    "CheckOptions": "bundle_check", "check_bundle": "bundle_check",
    "verify_spec": "network", "VerifyOptions": "nn_verify", "Verdict": "nn_verify",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _PUBLIC, globals())
