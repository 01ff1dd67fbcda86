"""One-way layers (docs/architecture.md): the allowed import directions, checked from the AST,
and every module importable alone in a fresh interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"generator": "mi_certify.generator", "verification": "mi_certify.verification",
            "runtime": "mi_certify.runtime", "templates": "mi_certify.templates"}

#: Layers, lowest first. A module may import modules of its own layer and of the layers below;
#: the peers of the top layers (pipeline | checker, and the CLI on top) never import each other.
LAYERS: dict[str, tuple[str, ...]] = {
    "runtime": ("mi_certify.runtime.*",),
    "core": ("generator.errors", "generator.numerics", "generator.ir", "generator.spec", "generator.spec_doc",
             "generator.lut", "generator.boxtree", "generator.results", "generator.exports", "generator.source_id",
             "mi_certify.templates"),
    "tools": ("verification.tools", "verification.workers", "verification.backends", "verification.dask_backend",
              "verification.yosys", "verification.verilator",
              "verification.chromium", "verification.marabou", "verification.bitvec", "verification.verilog_reader"),
    "import": ("generator.onnx_import", "generator.model", "generator.mlp", "generator.train"),
    "network": ("verification.bounds", "verification.campaign", "verification.properties", "verification.vnnlib",
                "verification.z3_exact", "verification.falsify", "verification.lp_relax", "verification.lp_split",
                "verification.nn_verify", "verification.network"),
    "build": ("generator.distill", "generator.emit", "generator.emit_monitor", "generator.heatmap"),
    "proofs": ("verification.fsm_proofs", "verification.lut_check", "verification.rtl_formal",
               "verification.cocotb_sim", "verification.cocotb_tb", "verification.vector_sim",
               "verification.monitor_cosim", "verification.coverage", "verification.synth",
               "verification.hdl_adapter"),
    "bundle": ("generator.bundle", "generator.report", "generator.signing", "generator.dashboard"),
    "pipeline": ("generator.pipeline", "generator.build_stages"),
    "checker": ("verification.bundle_check", "verification.bundle_documents", "verification.check_*"),
    "cli": ("generator.cli", "generator.cli_train", "generator.cli_runtime"),
}
ORDER = list(LAYERS)
#: Layers whose modules must not import each other although one is listed after the other.
PEERS = {("checker", "pipeline")}


def _module_names() -> dict[str, Path]:
    out = {}
    for folder, pkg in PACKAGES.items():
        for f in sorted((ROOT / folder).glob("*.py")):
            out[pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"] = f
    return out


def layer_of(module: str) -> str | None:
    """The layer of a module (``mi_certify.generator.ir`` → core); None for the package ``__init__``s,
    which load their public names lazily and belong to no layer."""
    short = module.removeprefix("mi_certify.")
    for name, patterns in LAYERS.items():
        for pat in patterns:
            p = pat.removeprefix("mi_certify.")
            if p.endswith("*") and short.startswith(p[:-1]) or short == p or module == pat:
                return name
    return None


def imports(module: str, source: str) -> list[tuple[str, tuple[str, ...], int]]:
    """(imported module, imported names, line) of every mi_certify import in ``source``, at any depth
    (function-level and TYPE_CHECKING imports included)."""
    pkg = module if source is None else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("mi_certify"):
                out.append((target, tuple(a.name for a in node.names), node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, (), node.lineno) for a in node.names if a.name.startswith("mi_certify")]
    return out


def _public_names(sources: dict[str, str]) -> dict[str, dict[str, str]]:
    """{package: {public name: its submodule}} from the packages' lazy ``_PUBLIC`` tables."""
    out = {}
    for pkg in PACKAGES.values():
        for node in ast.walk(ast.parse(sources.get(pkg, ""))):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_PUBLIC" for t in node.targets):
                out[pkg] = {k: f"{pkg}.{v}" for k, v in ast.literal_eval(node.value).items()}
    return out


def violations(sources: dict[str, str]) -> list[str]:
    """Every import against the layers, and every private name imported from another module."""
    modules = set(sources)
    public = _public_names(sources)
    bad = []
    for mod, src in sources.items():
        mine = layer_of(mod)
        for target, names, line in imports(mod, src):
            # `from package import submodule` imports that submodule; `from package import Name`
            # the submodule its lazy table names
            targets = [f"{target}.{n}" if f"{target}.{n}" in modules else public[target][n] for n in names
                       if f"{target}.{n}" in modules or n in public.get(target, {})] or [target]
            for t in targets:
                theirs = layer_of(t)
                if mine is None or theirs is None or t == mod:
                    continue
                if ORDER.index(theirs) > ORDER.index(mine) or (mine, theirs) in PEERS or (theirs, mine) in PEERS:
                    bad.append(f"{mod}:{line} imports {t} ({mine} → {theirs}: against the flow)")
            privates = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if privates and target != mod:
                bad.append(f"{mod}:{line} imports private {', '.join(privates)} from {target}")
    return bad


def _sources() -> dict[str, str]:
    return {m: f.read_text(encoding="utf-8") for m, f in _module_names().items()}


def test_every_module_has_a_layer():
    assert [m for m in _module_names() if layer_of(m) is None and not m.count(".") == 1
            and m != "mi_certify.templates"] == []


def test_imports_follow_the_layers_and_no_private_name_crosses_a_module():
    assert violations(_sources()) == []


@pytest.mark.parametrize("module, line", [
    ("mi_certify.verification.bounds", "from mi_certify.generator.pipeline import build"),       # proofs → pipeline
    ("mi_certify.generator.emit_monitor", "from mi_certify.verification.monitor_cosim import expected"),  # build → proofs
    ("mi_certify.generator.ir", "from .onnx_import import import_onnx"),                        # core → import
    ("mi_certify.verification.bundle_check", "from mi_certify.generator.pipeline import build"),  # checker → pipeline
    ("mi_certify.generator.report", "from .emit import _fraction"),                              # a private name
    ("mi_certify.runtime.fsm", "def f():\n    from mi_certify.generator.lut import Lut"),        # runtime → core, nested
    ("mi_certify.generator.distill", "from mi_certify.generator import build"),                 # via a public name
])
def test_an_arrow_against_the_flow_is_caught(module, line):
    sources = _sources()
    assert violations(sources) == []
    sources[module] += "\n" + line + "\n"
    found = violations(sources)
    assert len(found) == 1 and found[0].startswith(module + ":"), found


def _import_alone(module: str) -> tuple[str, int, str]:
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    return module, proc.returncode, proc.stderr.strip().splitlines()[-1:] and proc.stderr.strip().splitlines()[-1]


def test_every_module_imports_alone_in_a_fresh_interpreter():
    with ThreadPoolExecutor(4) as pool:
        failed = [(m, err) for m, rc, err in pool.map(_import_alone, sorted(_module_names())) if rc != 0]
    assert failed == []


def test_importing_the_ir_loads_no_solver_no_onnx_and_no_template_engine():
    code = ("import sys; import mi_certify.generator.ir; "
            "print(sorted(m for m in ('z3', 'onnx', 'jinja2', 'onnxruntime', 'maraboupy', 'matplotlib') "
            "if m in sys.modules)); print(sum(m.startswith('mi_certify') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and int(out[1]) == 5  # mi_certify, .generator (+ .exports), .numerics, .ir


def test_the_cli_main_runs_verify_from_python_c(tmp_path):
    """As a notebook would: main() called from ``python -c``; the Z3 confirmation of each PROVED
    (the reference network has <= 64 ReLUs) runs in spawned worker processes, which import their
    module alone (the import cycle broke them)."""
    from conftest import REFERENCE_MODEL, REFERENCE_SLA
    code = ("import sys; from mi_certify.generator.cli import main; "
            f"sys.exit(main(['verify', {str(REFERENCE_MODEL)!r}, '--sla', {str(REFERENCE_SLA)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**__import__("os").environ, "COLUMNS": "200"})
    assert "Traceback" not in proc.stderr and "circular import" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and "status: proved" in proc.stderr, proc.stdout + proc.stderr
    import re
    shown = re.findall(r"\[\d/7\] (P\d): proved in [\d.]+ s \(bounds(?:\+lp)?; confirmed by z3\)", proc.stderr)
    assert shown == ["P1", "P2", "P3"], proc.stderr  # one progress line per query, the Z3 confirmation said
    assert all(f"reach:{a}: reachable" in proc.stderr for a in ("keep", "merge_conv", "int4", "offload_cpu"))
