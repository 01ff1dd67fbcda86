"""One-way layers (docs/architecture.md): the allowed import directions, checked from the AST,
and every module importable alone in a fresh interpreter."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = {"generator": "mi_certify.generator", "verification": "mi_certify.verification",
            "runtime": "mi_certify.runtime", "templates": "mi_certify.templates"}

#: Layers, lowest first, each the folders that hold it: a module's folder is its layer. A module may
#: import modules of its own layer and of the layers below; the peers of the top layers
#: (pipeline | checker, and the CLI on top) never import each other.
LAYERS: dict[str, tuple[str, ...]] = {
    "runtime": ("runtime",),
    "core": ("generator/core", "templates"),
    "tools": ("verification/tools",),
    "import": ("generator/frontend",),
    "network": ("verification/nn",),
    "build": ("generator/build",),
    "proofs": ("verification/rtl", "verification/cosim"),
    "bundle": ("generator/bundle",),
    "pipeline": ("generator/pipeline",),
    "checker": ("verification/check",),
    "cli": ("generator/cli",),
}
ORDER = list(LAYERS)
#: Layers whose modules must not import each other although one is listed after the other.
PEERS = {("checker", "pipeline")}


def _module_names() -> dict[str, Path]:
    """{dotted module name: its file} for every module of the four packages, subpackages included."""
    out = {}
    for folder, pkg in PACKAGES.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in f.parts or f.name == "__main__.py":
                continue
            parts = f.relative_to(ROOT / folder).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            out[".".join((pkg, *parts))] = f
    return out


def _folder_of(module: str) -> str:
    """The folder of a module's file relative to the repository (``mi_certify.generator.core.ir`` →
    ``generator/core``; a subpackage's ``__init__`` → the subpackage's folder)."""
    short = module.removeprefix("mi_certify.").split(".")
    path = ROOT.joinpath(*short)
    return "/".join(short if path.is_dir() else short[:-1])


def layer_of(module: str) -> str | None:
    """The layer of a module, read from its folder (``mi_certify.generator.core.ir`` → core); None for
    the top package ``__init__``s (mi_certify.generator, mi_certify.verification), which load their
    public names lazily and belong to no layer."""
    folder = _folder_of(module)
    for name, folders in LAYERS.items():
        if any(folder == f or folder.startswith(f + "/") for f in folders):
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
    """Every module sits in a layer's folder: only the two top package ``__init__``s have none."""
    assert sorted(m for m in _module_names() if layer_of(m) is None) == ["mi_certify.generator",
                                                                       "mi_certify.verification"]


def test_the_layer_comes_from_the_folder():
    assert layer_of("mi_certify.generator.core.ir") == "core"
    assert layer_of("mi_certify.verification.nn.bounds") == "network"
    assert layer_of("mi_certify.verification.cosim") == "proofs"     # a subpackage's __init__
    assert layer_of("mi_certify.runtime.fsm") == "runtime"
    assert layer_of("mi_certify.templates") == "core"
    assert all(layer_of(m) is not None for m in _module_names() if m.count(".") >= 3)


def test_imports_follow_the_layers_and_no_private_name_crosses_a_module():
    assert violations(_sources()) == []


@pytest.mark.parametrize("module, line", [
    ("mi_certify.verification.nn.bounds", "from mi_certify.generator.pipeline.runner import build"),       # proofs → pipeline
    ("mi_certify.generator.build.emit_monitor", "from mi_certify.verification.cosim.monitor_cosim import expected"),  # build → proofs
    ("mi_certify.generator.core.ir", "from ..frontend.onnx_import import import_onnx"),                        # core → import
    ("mi_certify.verification.check.bundle_check", "from mi_certify.generator.pipeline.runner import build"),  # checker → pipeline
    ("mi_certify.generator.bundle.report", "from ..build.lut_sliced_rom import _code"),                  # a private name
    ("mi_certify.runtime.fsm", "def f():\n    from mi_certify.generator.core.lut import Lut"),        # runtime → core, nested
    ("mi_certify.generator.build.distill", "from mi_certify.generator import BuildOptions"),          # via a public name
])
def test_an_arrow_against_the_flow_is_caught(module, line):
    sources = _sources()
    assert violations(sources) == []
    sources[module] += "\n" + line + "\n"
    found = violations(sources)
    assert len(found) == 1 and found[0].startswith(module + ":"), found


#: Run by one child interpreter: it imports the third-party packages the modules use (none of
#: mi_certify), then forks one process per module named on stdin, which imports that module alone and
#: reports ``<module> <exit code> <error>``. The same test as a fresh interpreter per module (an import
#: cycle or an order dependence among our modules fails it the same way) at a fifth of the CPU:
#: 139 interpreters took 65 CPU-s, the fork server 13 s (2026-12-07).
_IMPORT_ALONE = """
import importlib, os, sys
for m in ("numpy", "scipy.optimize", "scipy.sparse", "z3", "onnx", "onnxruntime", "jinja2", "numba", "matplotlib",
          "matplotlib.pyplot", "yaml", "rich.console", "pydantic", "jsonschema", "orjson", "threadpoolctl"):
    try:
        importlib.import_module(m)
    except Exception:
        pass
assert not any(k.startswith("mi_certify") for k in sys.modules), "a third-party package imported mi_certify"
for m in sys.stdin.read().split():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(m)
            code, msg = 0, ""
        except BaseException as e:
            code, msg = 1, f"{type(e).__name__}: {e}"
        os.write(w, msg.replace("\\n", " ").encode()[:4000])
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        msg = fh.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    print(m, os.waitstatus_to_exitcode(status), msg, flush=True)
"""


def test_every_module_imports_alone():
    names = sorted(_module_names())
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}   # no BLAS threads across the forks
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ALONE], input=" ".join(names), capture_output=True,
                          text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [ln.split(" ", 2) for ln in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == names, proc.stderr[-3000:]
    assert [(m, err) for m, rc, *err in rows if rc != "0"] == []


def test_importing_the_ir_loads_no_solver_no_onnx_and_no_template_engine():
    code = ("import sys; import mi_certify.generator.core.ir; "
            "print(sorted(m for m in ('z3', 'onnx', 'jinja2', 'onnxruntime', 'maraboupy', 'matplotlib') "
            "if m in sys.modules)); print(sum(m.startswith('mi_certify') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and int(out[1]) == 6  # mi_certify, .generator, .core (+ .exports), .numerics, .ir


def test_the_cli_main_runs_verify_from_python_c(tmp_path):
    """As a notebook would: main() called from ``python -c``; then the Z3 confirmation's spawned
    worker processes, which import their module alone (the import cycle broke them)."""
    from conftest import REFERENCE_MODEL, REFERENCE_SLA
    code = ("import sys; from mi_certify.generator.cli.main import main; "
            f"sys.exit(main(['verify', {str(REFERENCE_MODEL)!r}, '--sla', {str(REFERENCE_SLA)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={**__import__("os").environ, "COLUMNS": "200"})
    assert "Traceback" not in proc.stderr and "circular import" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and "status: proved" in proc.stderr, proc.stdout + proc.stderr
    import re
    shown = re.findall(r"\[\d/7\] (P\d): proved in [\d.]+ s \(CPU [\d.]+ s; bounds(?:\+lp)?; confirmed by exact bounds\)",
                       proc.stderr)
    assert shown == ["P1", "P2", "P3"], proc.stderr  # one progress line per query, the confirmation said
    # the reference's proofs no longer need Z3: its worker processes are started here directly
    code = ("import sys, numpy as np; from mi_certify.generator.cli.main import main; "
            "from mi_certify.generator.frontend.onnx_import import import_onnx; "
            "from mi_certify.verification.nn.z3_exact import confirm_boxes; "
            f"ir = import_onnx({str(REFERENCE_MODEL)!r}); C = np.zeros((1, ir.n_outputs)); C[0, 0] = 1.0; "
            "lo, hi = np.zeros(ir.n_inputs), np.ones(ir.n_inputs); "
            "print([r for r, _ in confirm_boxes(ir, [(C, np.array([d]), lo, hi) for d in (1e9, -1e9, 1e9)], 120, workers=2)])")
    spawned = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert "Traceback" not in spawned.stderr, spawned.stderr
    assert spawned.stdout.strip() == "['sat', 'unsat', 'sat']", spawned.stdout + spawned.stderr
    assert all(f"reach:{a}: reachable" in proc.stderr for a in ("keep", "merge_conv", "int4", "offload_cpu"))
