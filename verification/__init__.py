"""mi_certify.verification: bound propagation, Marabou and Z3 queries, FSM and RTL proofs,
co-simulation (cocotb + Icarus, Verilator), synthesis figures, the bundle checker.

Public names are loaded on first use (PEP 562): importing one module of the package
loads that module and its own imports only (docs/architecture.md).
"""

from importlib import import_module

_PUBLIC = {
    "CosimResult": "cocotb_sim", "run_cosim": "cocotb_sim",
    "LintResult": "verilator", "lint": "verilator",
    "CheckOptions": "bundle_check", "check_bundle": "bundle_check",
    "verify_spec": "network", "VerifyOptions": "nn_verify", "Verdict": "nn_verify",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'mi_certify.verification' has no attribute {name!r}")
    value = getattr(import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
