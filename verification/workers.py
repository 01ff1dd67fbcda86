"""Worker processes that Ctrl-C stops at once.

``concurrent.futures.ProcessPoolExecutor`` (spawn) made Ctrl-C slow and noisy: the
terminal sends SIGINT to the whole process group, so every worker raised
KeyboardInterrupt (a traceback each while still starting up) and then went on with the
queued tasks; leaving the ``with`` block and interpreter exit wait for them (up to the
Z3 budget, minutes, when the pool runs in the build's verification thread), and a
worker that died at start-up could crash the executor's manager thread (CPython's
``InvalidStateError: CANCELLED``) and leave its queue feeder blocked, so the process
never exits. Its queues hold named semaphores registered with multiprocessing's
resource tracker, which reports them as leaked when the process is killed before it
releases them.

:func:`map_in_processes` uses plain spawned processes with one pipe each (no
semaphores, no helper thread that exit waits for): the workers start with SIGINT
blocked and ignore it (the parent decides), any exception in the parent
(KeyboardInterrupt included) kills them before it propagates, and interpreter exit
kills the workers of a call still running in another thread. A worker also dies with its
parent when the parent is SIGKILLed and can clean nothing up: it asks Linux for SIGKILL
on its parent's death at start-up (PR_SET_PDEATHSIG, :func:`.tools.die_with_parent`).
"""

from __future__ import annotations

import atexit
import os
import signal
from typing import Callable, Sequence

from .tools import die_with_parent

__all__ = ["WorkersLost", "exiting", "map_in_processes"]

_LIVE: set = set()
_EXITING = False


class WorkersLost(Exception):
    """A worker process could not start or died. ``done``: item index -> result so far."""

    def __init__(self, done: dict):
        super().__init__(f"a worker process was lost ({len(done)} results so far)")
        self.done = done


def exiting() -> bool:
    """True once the interpreter exits (the workers were killed for that, not lost)."""
    return _EXITING


@atexit.register
def _kill_at_exit() -> None:
    global _EXITING
    _EXITING = True
    for p in list(_LIVE):
        p.kill()
        p.join()


def _worker(conn, fn, parent_pid: int | None = None) -> None:
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        while True:
            item = conn.recv()
            if item is None:
                return
            try:
                out = (True, fn(item[1]))
            except Exception as exc:  # noqa: BLE001 - raised again in the parent
                out = (False, exc)
            try:
                conn.send(out)
            except Exception as exc:  # noqa: BLE001 - e.g. an exception that does not pickle
                conn.send((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
    except (EOFError, OSError):  # the parent is gone
        return


def map_in_processes(fn: Callable, items: Sequence, workers: int,
                     on_result: Callable[[int, int], None] | None = None) -> list:
    """``[fn(item) for item in items]`` computed in ``workers`` spawned processes, one item
    at a time each, handed out in order; results in item order. ``fn`` and the items must
    pickle (``fn`` a module-level function). ``on_result(index, done)`` is called as each
    result arrives (``done`` = results so far).

    Raises:
        WorkersLost if a worker cannot start or dies (the caller computes the rest itself,
        unless :func:`exiting`); the exception ``fn`` raised in a worker (the workers are
        stopped first).
    """
    from multiprocessing import connection, get_context

    ctx = get_context("spawn")
    todo = list(range(len(items)))
    done: dict = {}
    procs, conns, busy = [], [], {}
    finished = False
    try:
        # the mask survives fork and exec: a Ctrl-C during start-up prints no traceback either
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for _ in range(min(workers, len(items))):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker, args=(child, fn, os.getpid()), daemon=True, name="mi-certify-worker")
                p.start()
                child.close()
                _LIVE.add(p)
                procs.append(p)
                conns.append(parent)
        except (OSError, RuntimeError, AssertionError) as exc:  # no processes here (e.g. in a daemon)
            raise WorkersLost(done) from exc
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        failed = None
        try:
            for c in conns:
                k = todo.pop(0)
                c.send((k, items[k]))
                busy[c] = k
            while busy and failed is None:
                for c in connection.wait(list(busy)):
                    ok, res = c.recv()
                    if not ok:
                        failed = res
                        break
                    k = busy.pop(c)
                    done[k] = res
                    if on_result:
                        on_result(k, len(done))
                    if todo:
                        k = todo.pop(0)
                        c.send((k, items[k]))
                        busy[c] = k
        except (EOFError, OSError) as exc:  # a worker died (or could not start)
            raise WorkersLost(done) from exc
        if failed is not None:
            raise failed
        finished = True
        return [done[k] for k in range(len(items))]
    finally:
        for c in conns:
            try:
                c.send(None)
            except OSError:
                pass
        for p in procs:
            p.join(0.5 if finished else 0)   # idle workers leave at None; busy ones are killed
            if p.is_alive():
                p.kill()
                p.join()
            _LIVE.discard(p)
        for c in conns:
            c.close()
