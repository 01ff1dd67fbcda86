"""Where independent tasks run: this process, our own worker processes, or a Dask cluster.

One small interface, :func:`map_ordered` ``(fn, items, backend)``: ``[fn(item) for item in
items]``, results **in item order** whatever the number of workers and the order they finish
in, so a caller that merges by item order (distillation slices, campaign instances) writes the
same bytes on any backend. Backends:

* :class:`InlineBackend` — this process, one item after the other (``--workers 1``);
* :class:`ProcessBackend` — ``workers`` interpreters of our own
  (:func:`mi_certify.verification.tools.workers.map_in_processes`, the default: 2); when they cannot
  start or one dies, the items left are computed here (none is dropped);
* ``DaskBackend`` (:mod:`mi_certify.verification.tools.dask_backend`) — a Dask distributed cluster: a
  scheduler address (``tcp://host:8786``, ``tls://…``) or ``local`` (a LocalCluster of
  ``workers`` processes on this machine). Imported only when asked for: the other backends never
  import dask.

:func:`open_backend` turns a :class:`BackendSpec` (the command line's ``--scheduler`` and
``--workers``) into a live backend; use it as a context manager (``close`` ends what it started).
:func:`software_identity` is what a Dask worker must match before it gets a task.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from typing import Callable, Sequence

from mi_certify.generator.core.source_id import source_digest

__all__ = ["BackendSpec", "InlineBackend", "ProcessBackend", "TaskRecord", "map_ordered", "open_backend",
           "software_identity"]

#: Distributions whose versions a worker must share with the client: mi-certify and what its numbers
#: depend on (a different numpy, numba or onnxruntime could change a bound, a witness replay, a verdict).
IDENTITY_PACKAGES = ("mi-certify", "numpy", "numba", "llvmlite", "scipy", "highspy", "onnx", "onnxruntime",
                     "z3-solver", "maraboupy")


@dataclass(frozen=True)
class BackendSpec:
    """What the command line asked for.

    scheduler: None (no Dask: our own processes, or this process when ``workers`` is 1), ``"local"``
    (a Dask LocalCluster of ``workers`` processes, one thread each, no dashboard, on 127.0.0.1) or a
    Dask scheduler address (``tcp://10.0.0.5:8786``, ``tls://…``; ``workers`` is then the cluster's).
    connect_timeout: seconds to reach the scheduler and to see its first worker (BackendError after).
    retries: how often a task whose worker was lost is run again (LocalCluster: the scheduler's
    ``allowed-failures``; a remote scheduler keeps its own setting, default 3), then TaskLostError.
    """

    scheduler: str | None = None
    workers: int = 2
    connect_timeout: float = 10.0
    retries: int = 2

    def __post_init__(self):
        if self.workers < 1:
            raise ValueError("workers must be >= 1")


@dataclass(frozen=True)
class TaskRecord:
    """One finished task: item index, seconds it ran on its worker (wall clock there), the worker,
    and the CPU seconds of the worker's process meanwhile (``time.process_time``: what the task cost
    when the machine is shared and the wall clock is not)."""

    index: int
    seconds: float
    worker: str
    cpu_seconds: float = 0.0


class InlineBackend:
    """Every item in this process, in order. ``tasks``: a :class:`TaskRecord` per item of the last map."""

    name = "inline"
    workers = 1

    def __init__(self):
        self.tasks: list[TaskRecord] = []

    def map_ordered(self, fn: Callable, items: Sequence, on_result: Callable[[int, int, object], None] | None = None) -> list:
        self.tasks = []
        out = []
        for k, item in enumerate(items):
            t0, c0 = time.perf_counter(), time.process_time()
            out.append(fn(item))
            self.tasks.append(TaskRecord(k, time.perf_counter() - t0, "inline", time.process_time() - c0))
            if on_result:
                on_result(k, k + 1, out[-1])
        return out

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        return "this process"


class ProcessBackend(InlineBackend):
    """``workers`` interpreters of our own (:func:`~.workers.map_in_processes`: one item at a time
    each, killed with us). When they cannot start (no processes here, ``fn`` not importable) or one
    dies, the items without a result are computed in this process: a result is never dropped.
    Exceptions ``fn`` raises propagate. ``tasks`` stays empty (the pool does not time its items)."""

    name = "processes"

    def __init__(self, workers: int = 2):
        super().__init__()
        self.workers = workers

    def map_ordered(self, fn: Callable, items: Sequence, on_result: Callable[[int, int, object], None] | None = None) -> list:
        from mi_certify.verification.tools.workers import WorkersLost, exiting, map_in_processes

        self.tasks = []
        try:
            return map_in_processes(fn, items, self.workers, on_result=on_result)
        except WorkersLost as lost:
            if exiting():
                raise
            done = dict(lost.done)
        for k, item in enumerate(items):
            if k not in done:
                done[k] = fn(item)
                if on_result:
                    on_result(k, len(done), done[k])
        return [done[k] for k in range(len(items))]

    def describe(self) -> str:
        return f"{self.workers} worker processes"


def open_backend(spec: BackendSpec | None = None):
    """The live backend for ``spec`` (None: the default, 2 own processes). For a Dask scheduler this
    connects (or starts the LocalCluster) and checks every worker's :func:`software_identity` now.

    Raises:
        BackendError (exit 2) naming the address: unreachable within ``connect_timeout``, no worker,
        a worker of another mi-certify, dask not installed (``pip install 'mi-certify[dask]'``).
    """
    spec = spec or BackendSpec()
    if spec.scheduler is None:
        return InlineBackend() if spec.workers == 1 else ProcessBackend(spec.workers)
    try:
        from mi_certify.verification.tools.dask_backend import DaskBackend
    except ImportError as exc:
        from mi_certify.generator.core.errors import BackendError
        raise BackendError(f"Dask is not installed here ({exc}); install mi-certify with the dask extra: "
                           "pip install -c constraints.txt -e '.[dask]'", where=f"--scheduler {spec.scheduler}") from exc
    return DaskBackend(spec)


def map_ordered(fn: Callable, items: Sequence, backend=None,
                on_result: Callable[[int, int, object], None] | None = None) -> list:
    """``[fn(item) for item in items]`` on ``backend`` (None: this process), in item order.

    ``fn`` must be a module-level function of an importable module and ``fn``, the items and the
    results must pickle (a worker elsewhere receives them as pickles: the typed objects, never a path
    it would open). ``on_result(index, done, result)`` is called as each result arrives (``done``: results so far).

    Raises: what ``fn`` raised (the first in arrival order); TaskLostError when a task lost its
    worker more often than the backend retries; BackendError for a worker of another mi-certify.
    """
    return (InlineBackend() if backend is None else backend).map_ordered(fn, items, on_result)


@lru_cache(maxsize=1)
def software_identity() -> dict:
    """What runs the tasks in this process: {"mi_certify_source": sha256 over every .py and .j2 file
    of the four packages (the same digest as the manifest's ``mi_certify.source.sha256``:
    :func:`mi_certify.generator.bundle.manifest.source_identity`), "python": version, "packages": {distribution:
    version} of :data:`IDENTITY_PACKAGES`}. A Dask worker whose identity differs is refused."""
    digest, _ = source_digest()
    pkgs = {}
    for dist in IDENTITY_PACKAGES:
        try:
            pkgs[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pkgs[dist] = "not installed"
    return {"mi_certify_source": digest, "python": platform.python_version(), "packages": pkgs}


def identity_difference(mine: dict, theirs: dict) -> str | None:
    """The first field where two :func:`software_identity` records differ, as
    ``"numpy 2.4.6 here, 2.3.0 there"``; None when they are equal."""
    if mine.get("packages", {}).get("mi-certify") != theirs.get("packages", {}).get("mi-certify"):
        return (f"mi-certify {mine['packages'].get('mi-certify')} here, "
                f"{theirs.get('packages', {}).get('mi-certify')} there")
    if mine.get("mi_certify_source") != theirs.get("mi_certify_source"):
        return (f"mi-certify source sha256 {str(mine.get('mi_certify_source'))[:16]}… here, "
                f"{str(theirs.get('mi_certify_source'))[:16]}… there (another checkout or local changes)")
    if mine.get("python") != theirs.get("python"):
        return f"Python {mine.get('python')} here, {theirs.get('python')} there"
    for dist, v in mine.get("packages", {}).items():
        w = theirs.get("packages", {}).get(dist)
        if v != w:
            return f"{dist} {v} here, {w} there"
    return None
