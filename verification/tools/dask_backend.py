"""The Dask distributed backend of :func:`mi_certify.verification.tools.backends.map_ordered`.

A :class:`DaskBackend` holds one ``distributed.Client``: to a scheduler at an address (``tcp://``,
``tls://``; docs/scale-out.md starts one with ``dask scheduler`` and workers with ``dask worker
ADDRESS``), or to a ``LocalCluster`` it starts itself (``scheduler="local"``: ``workers`` processes,
one thread each, bound to 127.0.0.1, Dask's HTTP status service on a free port). Only this
module imports dask; the default backends never load it.

What travels: each task is ``(fn, identity, item)`` pickled by distributed (``fn`` by reference: a
module-level function of mi-certify; the item: typed objects such as the Spec, the LoadedModel with
its ONNX bytes and checked IR, a box of levels; never a path the worker would open). Results come
back pickled and are merged **in item order**, so the bytes a caller writes do not depend on the
number of workers, their speed or the order tasks finish in.

Checks: on connection every worker's :func:`~.backends.software_identity` (mi-certify version, the
sha256 of its source files, Python, numpy/numba/onnxruntime/… versions) must equal this process's,
else :class:`~mi_certify.generator.core.errors.BackendError` names the worker and the first difference;
every task checks it again on the worker that runs it (a worker that joins later is refused the same
way). A worker lost while it runs a task (killed, out of memory, machine gone): the scheduler runs the
task again elsewhere, at most ``allowed-failures`` times (LocalCluster: ``BackendSpec.retries``), then
:class:`~mi_certify.generator.core.errors.TaskLostError` names the task; no result is ever dropped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Callable, Sequence

from mi_certify.generator.core.errors import BackendError, TaskLostError

from mi_certify.verification.tools.backends import BackendSpec, TaskRecord, identity_difference, software_identity

__all__ = ["DaskBackend", "WorkerMismatch", "LOCAL_CONFIG"]

#: Dask settings of the LocalCluster ``scheduler="local"`` starts (docs/scale-out.md gives the same for
#: ``dask worker``): no MALLOC_TRIM_THRESHOLD_ in the workers' environment (Dask sets 65536, which
#: disables glibc's dynamic threshold; the distillation's many short-lived arrays then cost ~50 % more,
#: in system time: measured 9.4 -> 13.8 s on one process), one BLAS/OpenMP thread per worker (kept).
LOCAL_CONFIG = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


class WorkerMismatch(Exception):
    """Raised on a worker whose software identity differs from the client's (message: worker, field)."""


def _identity_here() -> dict:
    """Run on every worker by :meth:`DaskBackend.check_workers`."""
    return software_identity()


def _run_task(fn: Callable, expected: dict, item):
    """The task body on a worker: refuse a mismatched worker, then ``fn(item)``.
    Returns (result, seconds (wall clock on the worker), worker address, CPU seconds of its process)."""
    try:
        from distributed import get_worker
        where = get_worker().address
    except ValueError:  # not in a worker (a test calling it directly)
        where = "this process"
    diff = identity_difference(expected, software_identity())
    if diff:
        raise WorkerMismatch(f"worker {where}: {diff}")
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(item)
    return out, time.perf_counter() - t0, where, time.process_time() - c0


class DaskBackend:
    """A live connection to a Dask cluster (see the module docstring). ``tasks``: a
    :class:`~.backends.TaskRecord` per item of the last :meth:`map_ordered` (worker-side seconds).

    Raises (constructor): BackendError naming the address when the scheduler does not answer within
    ``spec.connect_timeout`` seconds, has no worker within as long, or a worker's identity differs.
    """

    name = "dask"

    def __init__(self, spec: BackendSpec):
        import dask
        from distributed import Client, LocalCluster

        self.spec = spec
        self.tasks: list[TaskRecord] = []
        self._cluster = None
        self.client = None
        self.address = spec.scheduler
        if spec.scheduler == "local":
            environ = dict(os.environ)  # the nannies write their workers' variables into this process's
            try:
                with dask.config.set(LOCAL_CONFIG | {"distributed.scheduler.allowed-failures": spec.retries}):
                    self._cluster = LocalCluster(n_workers=spec.workers, threads_per_worker=1, processes=True,
                                                 dashboard_address=None, host="127.0.0.1", silence_logs=logging.ERROR)
            finally:
                os.environ.clear()
                os.environ.update(environ)
            self.address = self._cluster.scheduler_address
        try:  # a malformed address fails here, before a Client is half made
            from distributed.comm.addressing import parse_address, parse_host_port
            from distributed.comm.registry import get_backend
            scheme, loc = parse_address(str(self.address))
            get_backend(scheme)
            if scheme in ("tcp", "tls"):
                parse_host_port(loc)
        except Exception as exc:  # noqa: BLE001 - ValueError, TypeError: the address is what is wrong
            self.close()
            raise BackendError(f"not a Dask scheduler address ({type(exc).__name__}: {exc}); e.g. tcp://10.0.0.5:8786 "
                               "or local", where=str(spec.scheduler)) from None
        if str(self.address).startswith("tls://"):
            from distributed.security import Security
            sec = Security()   # distributed's configuration: the settings docs/scale-out.md shows
            if not (sec.tls_ca_file and sec.tls_client_cert):
                raise BackendError("a tls:// scheduler needs distributed's TLS settings here: "
                                   "distributed.comm.tls.ca-file and .client.cert/.client.key (or "
                                   "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, ...; docs/scale-out.md, Security)",
                                   where=str(spec.scheduler))
        # distributed's own timeout does not bound a peer that accepts and never speaks Dask (an
        # HTTP server, a proxy): the connection is made in a thread that gets the same time, plus 2 s
        got: dict = {}

        def connect():
            try:
                got["client"] = Client(self.address, timeout=spec.connect_timeout, set_as_default=False)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                got["error"] = exc
        thread = threading.Thread(target=connect, name="dask-connect", daemon=True)
        thread.start()
        thread.join(spec.connect_timeout + 2.0)
        if thread.is_alive():
            self.close()
            raise BackendError(f"no Dask scheduler answers at this address within {spec.connect_timeout:g} s "
                               "(something else may listen there)", where=str(spec.scheduler))
        try:
            if "error" in got:
                raise got["error"]
            self.client = got["client"]
        except (OSError, TimeoutError) as exc:  # unreachable, refused, TLS handshake refused
            self.close()
            raise BackendError(f"the Dask scheduler does not answer within {spec.connect_timeout:g} s "
                               f"({type(exc).__name__}: {exc})", where=str(spec.scheduler)) from None
        except Exception as exc:  # noqa: BLE001 - ValueError/TypeError: a malformed address or TLS setting
            self.close()
            raise BackendError(f"cannot connect to this Dask scheduler ({type(exc).__name__}: {exc})",
                               where=str(spec.scheduler)) from None
        try:
            self.client.wait_for_workers(1, timeout=spec.connect_timeout)
        except Exception:  # noqa: BLE001 - TimeoutError (distributed raises its own subclass)
            self.close()
            raise BackendError(f"the Dask scheduler has no worker after {spec.connect_timeout:g} s "
                               "(start one: dask worker ADDRESS)", where=str(spec.scheduler)) from None
        try:
            self.check_workers()
        except BaseException:
            self.close()
            raise

    @property
    def workers(self) -> int:
        """Workers connected now."""
        return len(self.client.scheduler_info(n_workers=-1)["workers"]) if self.client else 0

    def check_workers(self) -> dict:
        """Every connected worker's software identity against ours: {worker address: identity}.
        Raises BackendError naming the first worker that differs and how."""
        mine = software_identity()
        try:
            theirs = self.client.run(_identity_here)
        except Exception as exc:  # noqa: BLE001 - e.g. mi-certify not importable on a worker
            raise BackendError(f"a worker cannot report its mi-certify identity ({type(exc).__name__}: {exc}); "
                               "install the same mi-certify on every worker", where=str(self.address)) from None
        for worker in sorted(theirs):
            diff = identity_difference(mine, theirs[worker])
            if diff:
                raise BackendError(f"refused: {diff}; install the same mi-certify (and its pinned packages: "
                                   "constraints.txt) on every worker", where=f"worker {worker}")
        return theirs

    def map_ordered(self, fn: Callable, items: Sequence, on_result: Callable[[int, int, object], None] | None = None) -> list:
        """``[fn(item) for item in items]`` on the cluster, results in item order (see
        :func:`~.backends.map_ordered`). Raises what ``fn`` raised; TaskLostError (a task's worker
        lost more often than allowed); BackendError (a mismatched worker). The tasks left are
        cancelled on any exception, Ctrl-C included."""
        from distributed import as_completed
        from distributed.scheduler import KilledWorker

        expected = software_identity()
        run = uuid.uuid4().hex[:12]
        name = getattr(fn, "__name__", "task").strip("_")
        futures = [self.client.submit(_run_task, fn, expected, item, key=f"mi-certify-{name}-{run}-{k:06d}",
                                      pure=False, retries=0)
                   for k, item in enumerate(items)]
        index = {f.key: k for k, f in enumerate(futures)}
        results: dict[int, object] = {}
        records: dict[int, TaskRecord] = {}
        try:
            for fut in as_completed(futures, loop=self.client.loop):
                k = index[fut.key]
                try:
                    value, seconds, worker, cpu = fut.result()
                except KilledWorker as exc:
                    raise TaskLostError(f"its worker was lost more often than the scheduler's allowed-failures "
                                        f"({exc}); nothing was merged", where=f"task {k} of {len(items)} ({name})") from None
                except WorkerMismatch as exc:
                    raise BackendError(f"refused: {exc}; install the same mi-certify on every worker",
                                       where=str(self.address)) from None
                except ImportError as exc:  # a worker without mi-certify (or one of its packages)
                    raise BackendError(f"a worker cannot run the task ({type(exc).__name__}: {exc}); install the "
                                       "same mi-certify and constraints.txt on every worker",
                                       where=str(self.address)) from None
                results[k] = value
                records[k] = TaskRecord(k, seconds, worker, cpu)
                if on_result:
                    on_result(k, len(results), value)
        finally:
            if len(results) < len(futures):
                try:
                    self.client.cancel(futures)
                except Exception:  # noqa: BLE001 - the client may be closing already
                    pass
        self.tasks = [records[k] for k in range(len(items))]
        return [results[k] for k in range(len(items))]

    def describe(self) -> str:
        where = "a LocalCluster" if self._cluster is not None else f"the Dask scheduler {self.address}"
        return f"{where} ({self.workers} workers)"

    def close(self) -> None:
        """Close the client and, for ``local``, the cluster it started (idempotent)."""
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001
                pass
            self.client = None
        if self._cluster is not None:
            try:
                self._cluster.close()
            except Exception:  # noqa: BLE001
                pass
            self._cluster = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
