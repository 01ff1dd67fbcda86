"""Shared fixtures: paths to the real inputs in ../shared and tiny ONNX builders; the test tiers.

Tiers (markers set here from a test's folder): ``unit`` (tests/unit/, mirroring the packages:
one module or a few, no whole build) and ``e2e`` (tests/e2e/: whole builds, the CLI, fresh
clones). A test that reads ``../shared`` (the public networks and bug-derived cases) is marked
``shared`` (found from its source: :func:`_reads_shared`); when ../shared is missing it is
skipped with a message naming the folder, or fails with that message when
``MI_CERTIFY_REQUIRE_SHARED=1`` (``make test`` sets it, so CI never passes by skipping).
``MI_CERTIFY_SHARED`` points at another copy of the folder.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MI_CERTIFY_SHARED") or ROOT.parent / "shared")
CASES = SHARED / "cases"
ANCHORS = SHARED / "anchors"
EXAMPLES = ROOT / "examples"
REFERENCE_MODEL = EXAMPLES / "meta_controller" / "controller.onnx"
REFERENCE_SLA = EXAMPLES / "meta_controller" / "sla.yaml"
ACAS_1_1 = ANCHORS / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx"
CARTPOLE = ANCHORS / "rl_cartpole" / "onnx" / "cartpole.onnx"


# no build of the suite takes report.html's screenshot (unhashed, read by no test; about 2 s and 1.5 CPU-s
# a build with Chromium installed): set here, so the builds' child processes inherit it. The report is
# still loaded in Chromium by the tests that check it renders (test_certificate, test_dashboard).
os.environ.setdefault("MI_CERTIFY_SCREENSHOT", "0")

#: Names a test module uses for paths under ../shared (see :func:`_reads_shared`).
SHARED_NAMES = frozenset({"SHARED", "ANCHORS", "CASES", "ACAS_1_1", "CARTPOLE"})


def pytest_configure(config):
    for name, text in (("unit", "a unit test (tests/unit/): one module or a few, no whole build"),
                       ("e2e", "an end-to-end test (tests/e2e/): whole builds, the CLI, fresh clones"),
                       ("shared", "reads ../shared (public networks, bug-derived cases)")):
        config.addinivalue_line("markers", f"{name}: {text}")


@functools.lru_cache(maxsize=None)
def _shared_functions(path: str) -> frozenset[str]:
    """Module-level names of the test module at ``path`` that reach ../shared: names assigned from
    an expression that names one of :data:`SHARED_NAMES` (or an earlier such name), and
    functions (tests, fixtures, helpers) whose body or decorators name one, transitively."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    reach = set(SHARED_NAMES)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    assigns = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))]
    changed = True
    while changed:
        changed = False
        for node in [*assigns, *defs.values()]:
            names = {x.id for x in ast.walk(node) if isinstance(x, ast.Name)}
            names |= {a.name for x in ast.walk(node) if isinstance(x, ast.ImportFrom) for a in x.names}
            if names & reach:
                targets = ([node.name] if hasattr(node, "name") else
                           [x.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                            for x in ast.walk(t) if isinstance(x, ast.Name)])
                # a fixture is reached by the name the test asks for
                for dec in getattr(node, "decorator_list", []):
                    for kw in getattr(dec, "keywords", []):
                        if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                            targets.append(kw.value.value)
                new = set(targets) - reach
                if new:
                    reach |= new
                    changed = True
    return frozenset(reach - SHARED_NAMES)


def _reads_shared(item) -> bool:
    """True when the test function, or a module-level fixture or helper it reaches, names a path
    under ../shared (:func:`_shared_functions`)."""
    fn = getattr(item, "function", None)
    if fn is None:
        return False
    reach = _shared_functions(str(item.path))
    if fn.__name__ in reach or any(f in reach for f in getattr(item, "fixturenames", ())):
        return True
    conftest_reach = _shared_functions(__file__)
    return any(f in conftest_reach for f in getattr(item, "fixturenames", ()))


#: The files whose tests take minutes (``--durations``: the kernel variants' builds, hypothesis
#: builds, the reference bundle's checks), started first: with two workers and ``--dist loadfile``
#: a long file started last ran alone for minutes at the end of the run.
#: The two files that need the reference bundle come after three that do not: the bundle is built in
#: the background meanwhile (:func:`pytest_xdist_node_collection_finished`). test_faults.py last started
#: last and ran alone for minutes (2026-12-06).
HEAVY_FIRST = ("e2e/test_faults.py", "e2e/test_reproducibility.py", "e2e/test_space.py", "e2e/test_certificate.py",
               "e2e/test_build.py")


def pytest_collection_modifyitems(config, items):
    def heavy(item) -> int:
        rel = item.path.relative_to(ROOT / "tests").as_posix()
        return HEAVY_FIRST.index(rel) if rel in HEAVY_FIRST else len(HEAVY_FIRST)
    first: dict = {}
    for i, item in enumerate(items):
        first.setdefault(item.path, i)
    # stable: the files stay whole and in their order among the others; within a file the tests that
    # do not need the reference bundle come first (it is being built meanwhile)
    items.sort(key=lambda item: (heavy(item), first[item.path], "reference_build" in item.fixturenames))
    for item in items:
        parts = item.path.relative_to(ROOT / "tests").parts
        if parts[0] in ("unit", "e2e"):
            item.add_marker(parts[0])
        if _reads_shared(item):
            item.add_marker("shared")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``MI_CERTIFY_TEST_CPU=<file>``: one line per test appended to it, ``nodeid<TAB>CPU s<TAB>wall s``,
    the CPU of this process and of the children it waited for, fixtures included (where the suite's
    time goes: the suite is CPU-bound on two cores, so its wall time is about its CPU time over two)."""
    path = os.environ.get("MI_CERTIFY_TEST_CPU")
    if not path:
        yield
        return
    import resource
    import time

    def cpu() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))
    c0, t0 = cpu(), time.monotonic()
    yield
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{item.nodeid}\t{cpu() - c0:.2f}\t{time.monotonic() - t0:.2f}\n")


def pytest_runtest_setup(item):
    if item.get_closest_marker("shared") and not SHARED.is_dir():
        msg = (f"the shared inputs are missing: {SHARED} (this test reads the public networks or cases that "
               "sit next to the repository; see README.md)")
        if os.environ.get("MI_CERTIFY_REQUIRE_SHARED") == "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


def save_model(tmp_path: Path, name: str, nodes, inputs, outputs, inits=(), opset: int = 13) -> Path:
    """Write a small ONNX model (IR 8) built with onnx.helper and return its path."""
    graph = helper.make_graph(nodes, name, inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v, dtype=np.float32), k) for k, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def tensor(name: str, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


#: Builds the reference bundle unless another process has (argv: lock file, done file, the build
#: command): under an exclusive flock, so every caller waits for one build and reads its result.
_REFERENCE_BUILDER = """
import fcntl, os, subprocess, sys
from pathlib import Path
lock, done, cmd = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
with open(lock, "w") as fh:
    fcntl.flock(fh, fcntl.LOCK_EX)
    if not done.exists():
        # the reference bundle is built as `make certs` builds it, its screenshot included
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                              env={**os.environ, "MI_CERTIFY_SCREENSHOT": "1"})
        done.write_text(f"{proc.returncode}\\n{proc.stderr}")
"""


def _reference_builder(common: Path) -> tuple[list[str], Path, Path]:
    """(the builder's command line, the bundle, its done file) under the run's common base directory."""
    out = common / "reference" / "meta_controller"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = out.parent / "built"
    build = [sys.executable, "-m", "mi_certify.generator.cli", "build", str(REFERENCE_MODEL), "--sla", str(REFERENCE_SLA),
             "--out", str(out)]
    return [sys.executable, "-c", _REFERENCE_BUILDER, str(common / "reference.lock"), str(done), *build], out, done


#: Test files that ask for the reference bundle (read from their source, like :func:`_reads_shared`).
_NEEDS_REFERENCE = frozenset(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")
                             if "reference_build" in p.read_text(encoding="utf-8"))
_EARLY: list = []   # the controller's background builder (xdist): [Popen]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """On the xdist controller, once the first worker has collected: when a collected test needs the
    reference bundle, start its build in the background, so the workers run other tests beside it
    instead of waiting for it (measured: one worker waited ~3 minutes with a core idle)."""
    if _EARLY or not any(i.split("::", 1)[0] in _NEEDS_REFERENCE for i in ids):
        return
    cmd, _, _ = _reference_builder(node.config._tmp_path_factory.getbasetemp())
    _EARLY.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True))


def pytest_sessionfinish(session):
    """The controller's builder, if it still runs when every worker is done (an interrupted or
    ``-x`` run), is killed with its build."""
    for proc in _EARLY:
        if proc.poll() is None:
            import signal
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


@pytest.fixture(scope="session")
def reference_build(tmp_path_factory):
    """The reference controller built once per test run with the CLI (the same command as `make certs`).

    Under pytest-xdist every worker is a session of its own: the first to ask builds into the
    run's common base directory while holding an flock, the others wait for it and read the same
    bundle (a whole build is minutes of two cores: once, not once per worker); the controller has
    usually started that build in the background already (:func:`pytest_xdist_node_collection_finished`).
    Tests copy the bundle before they edit it (``bundle_copy``)."""
    base = tmp_path_factory.getbasetemp()
    common = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    cmd, out, done = _reference_builder(common)
    subprocess.run(cmd, check=True, timeout=2000)
    rc, _, stderr = done.read_text().partition("\n")
    assert rc == "0", stderr
    return out


def children(pid: int) -> list[int]:
    """Child processes of ``pid`` (started by any of its threads)."""
    import os
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def spawned_workers(pid: int) -> list[int]:
    """Worker processes of ``pid`` (verification/tools/workers.py; multiprocessing spawn's too)."""
    out = []
    for c in children(pid):
        try:
            with open(f"/proc/{c}/cmdline") as fh:
                cmd = fh.read()
                if "spawn_main" in cmd or "mi_certify.verification.tools.workers" in cmd:
                    out.append(c)
        except OSError:
            pass
    return out


def running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# --- the distillation tests' network (tests/unit/build, tests/e2e) -----------------------------

TWO_ACTION_SPEC = """schema: mi-certify/v1
controller: {{name: ctl, decode: argmax}}
{confidence}
inputs:
  - {{name: x, min: -1, max: 1, bits: 2}}
  - {{name: z, min: 0, max: 1, bits: 1}}
actions:
  - {{name: a0, conservative: true}}
  - {{name: a1}}
fsm: {{hysteresis: 1, cooldown: 0, violations_to_fallback: 1, recovery: 1}}
{distill}
"""


def two_action_model(tmp_path):
    """A one-Gemm network of two inputs and two actions (the distillation tests' network)."""
    # y0 = 4 (x - 0.1), y1 = -4 (x - 0.1): a1 wins for x < 0.1, a0 for x > 0.1; z is ignored
    nodes = [helper.make_node("Gemm", ["in", "W", "b"], ["y"], transB=1)]
    return save_model(tmp_path, "lin", nodes, [tensor("in", [1, 2])], [tensor("y", [1, 2])],
                      inits=[("W", [[4.0, 0.0], [-4.0, 0.0]]), ("b", [-0.4, 0.4])])


def two_action_spec(tmp_path, confidence="", distill_section=""):
    """sla.yaml for :func:`two_action_model` (x 2 bits, z 1 bit), with optional confidence and distill sections."""
    from mi_certify.generator.core.spec import load_spec
    p = tmp_path / "sla.yaml"
    p.write_text(TWO_ACTION_SPEC.format(confidence=confidence, distill=distill_section))
    return load_spec(p)
