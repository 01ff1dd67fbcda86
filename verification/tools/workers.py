"""Worker processes that Ctrl-C and a killed parent stop at once.

``concurrent.futures.ProcessPoolExecutor`` made Ctrl-C slow and noisy (every worker
raised KeyboardInterrupt, went on with queued tasks; exit waited for them; a worker that
died at start-up could leave the executor's queue feeder blocked), and multiprocessing's
spawn runs the caller's main script again in every worker: a script that calls
``main([...])`` without an ``if __name__ == "__main__"`` guard ran the whole build again
in each of them.

:func:`map_in_processes` starts plain interpreters, ``python -m
mi_certify.verification.tools.workers``, through :func:`.tools.start` (own process group,
SIGKILL when the parent dies: PR_SET_PDEATHSIG) with two pipes each (multiprocessing
``Connection`` framing: pickles), hands out one item at a time, and kills the workers on
any exception in the parent (KeyboardInterrupt included) before it propagates, and at
interpreter exit for a call still running in another thread.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import sys
import threading
import time
from typing import Callable, Sequence

from mi_certify.verification.tools.registry import die_with_parent, keep_freed_heap

__all__ = ["WorkersLost", "WorkersTimedOut", "exiting", "map_in_processes", "pickling_for_local_worker"]

_LIVE: set = set()
_LOCAL = threading.local()   # .on: this thread is in _pickled
_EXITING = False


class WorkersLost(Exception):
    """A worker process could not start or died. ``done``: item index -> result so far."""

    def __init__(self, done: dict):
        super().__init__(f"a worker process was lost ({len(done)} results so far)")
        self.done = done


class WorkersTimedOut(WorkersLost):
    """``deadline`` passed (or ``stop`` said so) before every item was done; the busy workers
    were killed. ``done``: item index -> result so far (the caller does not compute the rest)."""


def exiting() -> bool:
    """True once the interpreter exits (the workers were killed for that, not lost)."""
    return _EXITING


@atexit.register
def _kill_at_exit() -> None:
    global _EXITING
    _EXITING = True
    for p in list(_LIVE):
        _stop(p)


os.register_at_fork(after_in_child=_LIVE.clear)  # a forked child's exit must not kill our workers


def _stop(proc) -> None:
    from mi_certify.verification.tools.registry import kill_group
    kill_group(proc)
    _LIVE.discard(proc)


def _serve(conn_in, conn_out, parent_pid: int | None) -> None:
    """Worker body: the function first, then ``(index, item)`` messages until ``None``; each
    answer ``(True, result)`` or ``(False, exception)``."""
    die_with_parent(parent_pid)
    keep_freed_heap()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        try:
            fn = conn_in.recv()
        except Exception:  # noqa: BLE001 - fn not importable here (e.g. defined in __main__): the caller
            sys.exit(3)    # sees the worker end (WorkersLost) and computes itself
        while True:
            item = conn_in.recv()
            if item is None:
                return
            try:
                out = (True, fn(item[1]))
            except Exception as exc:  # noqa: BLE001 - raised again in the parent
                out = (False, exc if _survives_pickling(exc) else RuntimeError(f"{type(exc).__name__}: {exc}"))
            try:
                conn_out.send(out)
            except Exception as exc:  # noqa: BLE001 - e.g. an exception that does not pickle
                conn_out.send((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
    except (EOFError, OSError):  # the parent is gone
        return


def _survives_pickling(exc: BaseException) -> bool:
    """True when ``exc`` unpickles in the parent (an exception whose __init__ takes other
    arguments than its args does not)."""
    try:
        pickle.loads(pickle.dumps(exc))
        return True
    except Exception:  # noqa: BLE001
        return False


def _start_worker(fn):
    """One worker: ``python -m mi_certify.verification.tools.workers RFD WFD PARENT`` with two pipes.
    Its own interpreter, not multiprocessing's spawn: it never imports the caller's main
    script again (a script without an ``if __name__ == "__main__"`` guard ran again in every
    spawned worker), and starts through :func:`.tools.start` (own process group, dies with us)."""
    from multiprocessing.connection import Connection

    from mi_certify.verification.tools.registry import start

    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # the modules this process imports
    try:
        # -P: the current directory does not go first on sys.path (a numpy.py there would be imported)
        proc = start([sys.executable, "-P", "-m", "mi_certify.verification.tools.workers", str(down_r), str(up_w),
                      str(os.getpid())], env=env, pass_fds=(down_r, up_w))
    finally:
        os.close(down_r)
        os.close(up_w)
    send, recv = Connection(down_w, readable=False), Connection(up_r, writable=False)
    _LIVE.add(proc)
    return proc, send, recv


def pickling_for_local_worker() -> bool:
    """True while this thread pickles an item for a worker process of this machine (:func:`_pickled`):
    an object may then leave out what the worker can read itself, checked (a LoadedModel's bytes)."""
    return getattr(_LOCAL, "on", False)


def _pickled(obj) -> bytes:
    """``obj`` as :meth:`Connection.send` frames it (the worker's ``recv`` unpickles it), for a worker
    of this machine (:func:`pickling_for_local_worker`)."""
    from multiprocessing.reduction import ForkingPickler
    _LOCAL.on = True
    try:
        return bytes(ForkingPickler.dumps(obj))
    finally:
        _LOCAL.on = False


def _send_in_thread(send, payloads: list[bytes], errors: list):
    """Write ``payloads`` (from :func:`_pickled`) to ``send`` in a daemon thread and return it.
    A pipe write of more than its buffer (64 KiB) returns only when the worker has read it,
    that is after the worker's interpreter has started and imported numpy (0.8 s measured
    for the first items of an LP-leaf batch; more on a loaded machine): written from the
    caller's thread it held the caller past its ``deadline`` (issue 38, ``verify --timeout``).
    An OSError (the worker died) goes to ``errors``."""
    import threading

    def run():
        try:
            for buf in payloads:
                send.send_bytes(buf)
        except (OSError, ValueError) as exc:  # EPIPE: the worker is gone (killed at the deadline)
            errors.append(exc)
    t = threading.Thread(target=run, name="mi-certify-worker-send", daemon=True)
    t.start()
    return t


def map_in_processes(fn: Callable, items: Sequence, workers: int,
                     on_result: Callable[[int, int, object], None] | None = None, deadline: float | None = None,
                     stop: Callable[[object], bool] | None = None,
                     cancel: Callable[[], bool] | None = None, more: Callable[[], bool] | None = None) -> list:
    """``[fn(item) for item in items]`` computed in ``workers`` worker processes, one item
    at a time each, handed out in order; results in item order. ``fn`` and the items must
    pickle (``fn`` a module-level function of an importable module). ``on_result(index, done, result)``
    is called as each result arrives (``done`` = results so far). ``deadline``
    (``time.monotonic()``): no result is waited for after it. ``stop(result)`` True: no
    further item is needed. ``cancel()`` True (asked every 0.1 s, e.g. from another thread): as the
    deadline. ``more()`` True: ``items`` (a list) may still grow (another thread appends to it); an idle
    worker takes the next item as it comes (asked every 0.1 s), and the call ends once ``more()`` is False
    and every item is done (the caller appends the last items before ``more()`` turns False).

    Raises:
        WorkersTimedOut (a WorkersLost) when ``deadline`` passed or ``stop`` returned True
        with items left: the busy workers are killed, ``done`` holds the results so far;
        WorkersLost if a worker cannot start or dies (the caller computes the rest itself,
        unless :func:`exiting`); the exception ``fn`` raised in a worker (the workers are
        stopped first).
    """
    from multiprocessing import connection

    todo = list(range(len(items)))
    seen = len(todo)  # items known so far (``more``: the list grows in another thread)
    done: dict = {}
    procs, links, busy, threads, send_errors = [], [], {}, [], []
    finished = False
    try:
        try:
            fn_buf = _pickled(fn)
            first = [_pickled((k, items[k])) for k in todo[:min(workers, len(items))]]
        except (RuntimeError, ValueError, AttributeError, TypeError, pickle.PicklingError) as exc:
            raise WorkersLost(done) from exc   # fn does not pickle (a local function): the caller computes
        # the mask survives fork and exec: a Ctrl-C during start-up prints no traceback either
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for _ in range(workers if more is not None else len(first)):   # (more: all of them at once)
                proc, send, recv = _start_worker(fn)
                procs.append(proc)
                links.append((send, recv))
        except (OSError, RuntimeError, ValueError) as exc:   # no processes here: the caller computes
            raise WorkersLost(done) from exc
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        failed = None
        sender = {recv: send for send, recv in links}
        try:
            # the function and each worker's first item are written by a thread per worker: the
            # deadline below bounds the wait for the workers' start-up too
            idle: list = []   # workers with nothing to do while ``more()`` holds
            for i, (send, recv) in enumerate(links):
                if i < len(first):
                    k = todo.pop(0)
                    threads.append(_send_in_thread(send, [fn_buf, first[i]], send_errors))
                    busy[recv] = k
                else:   # the function only (a few hundred bytes: the pipe takes it without waiting), written
                    send.send_bytes(fn_buf)   # here so that no later item can overtake it
                    idle.append(recv)
            stopped = False
            while failed is None and not stopped:
                # more() read before the items: the caller appends its last items, then turns more() False,
                # so a False here means every item is in ``items`` already (read next)
                coming = more is not None and more()
                if not (busy or todo or len(items) > seen or coming):
                    break
                if more is not None:
                    if len(items) > seen:
                        todo += range(seen, len(items))
                        seen = len(items)
                    while idle and todo:   # (written by a thread: a worker still starting cannot hold us)
                        c = idle.pop(0)
                        k = todo.pop(0)
                        threads.append(_send_in_thread(sender[c], [_pickled((k, items[k]))], send_errors))
                        busy[c] = k
                if not busy and more is not None and not (cancel is not None and cancel()):
                    if deadline is not None and time.monotonic() >= deadline:
                        raise WorkersTimedOut(done)
                    time.sleep(0.05)
                    continue
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if cancel is not None or more is not None:
                    wait = 0.1 if wait is None else min(wait, 0.1)
                ready = connection.wait(list(busy), timeout=wait)
                if send_errors:
                    raise WorkersLost(done) from send_errors[0]
                if not ready and deadline is not None and time.monotonic() >= deadline:
                    raise WorkersTimedOut(done)
                if cancel is not None and cancel():
                    raise WorkersTimedOut(done)
                for c in ready:
                    ok, res = c.recv()
                    if not ok:
                        failed = res
                        break
                    k = busy.pop(c)
                    done[k] = res
                    if on_result:
                        on_result(k, len(done), res)
                    if stop is not None and stop(res):
                        stopped = True
                        break
                    if todo:
                        k = todo.pop(0)
                        sender[c].send((k, items[k]))
                        busy[c] = k
                    elif more is not None:
                        idle.append(c)
        except (EOFError, OSError) as exc:  # a worker died (or could not start)
            raise WorkersLost(done) from exc
        if failed is not None:
            raise failed
        if len(done) < len(items) or (more is not None and len(items) > seen):
            raise WorkersTimedOut(done)
        finished = True
        return [done[k] for k in range(len(items))]
    finally:
        if finished:   # every worker has read all it was sent and is idle: None lets it leave
            for send, _ in links:
                try:
                    send.send(None)
                except OSError:
                    pass
        for proc in procs:
            try:
                proc.wait(0.5 if finished else 0.001)   # idle workers leave at None; busy ones are killed
            except Exception:  # noqa: BLE001 - TimeoutExpired: still busy
                pass
            _stop(proc)
        for t in threads:   # a write still blocked ends with EPIPE once its worker is killed
            t.join(1.0)
        for send, recv in links:
            send.close()
            recv.close()


if __name__ == "__main__":  # a worker (see _start_worker)
    from multiprocessing.connection import Connection

    _rfd, _wfd, _ppid = (int(a) for a in sys.argv[1:4])
    _serve(Connection(_rfd, writable=False), Connection(_wfd, readable=False), _ppid)
