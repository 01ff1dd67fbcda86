"""Verification campaigns: many (network, VNN-LIB property) instances, one results CSV in VNN-COMP's format.

The instance list is VNN-COMP's ``instances.csv`` (``onnx,vnnlib,timeout`` per line, paths relative
to the list's folder), or, with one network given, a plain list of VNN-LIB files (one per line).
Blank lines and lines starting with ``#`` are skipped. Every entry is checked before any query runs:
a file that does not exist, a timeout that is no positive number, a line of more than three fields is
one :class:`~mi_certify.generator.core.errors.MiCertifyError` naming the list file, the line and the reason.

Prepared here (this process): each network is read, imported and checked once
(:func:`~mi_certify.generator.frontend.model.load_model`), each property parsed and the network cross-checked
with onnxruntime over its input box; that is the instance's ``prepare_time``. Decided on the backend
(:func:`~.backends.map_ordered`: this process, our own processes, a Dask cluster): one
:func:`~.nn_verify.decide` per instance with the instance's timeout; the task carries the LoadedModel
(ONNX bytes + checked IR; to our own processes the IR and the file's hash only: a worker reads the file
itself, hash-checked, if it replays a point) and the parsed Query.

The results file follows VNN-COMP's ``results.csv`` (the competition's ``run_single_instance.sh``,
stanleybak/vnncomp2021, ChristopherBrix/vnncomp2022_benchmarks; published results e.g.
ChristopherBrix/vnncomp2022_results ``nnenum/acasxu/results.csv``): no header, one line per instance
in list order, ``category,onnx,vnnlib,prepare_time,result,run_time``; the paths as the list writes
them; times in seconds (6 decimals); result ``sat`` (a replayed counterexample), ``unsat`` (proved),
``timeout`` (undecided when the time ran out), ``unknown`` (undecided before it), ``error`` (the query
raised). Apart from the two time columns the file is byte-identical on every backend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from mi_certify.generator.core.errors import MiCertifyError

from mi_certify.verification.tools.backends import map_ordered

__all__ = ["Instance", "InstanceResult", "read_instances", "results_csv", "run_campaign"]

#: VNN-COMP result words this module writes.
RESULTS = ("sat", "unsat", "timeout", "unknown", "error")


@dataclass(frozen=True)
class Instance:
    """One line of the list: its number (1-based), the paths as written and resolved, the timeout
    (seconds; None: the campaign's)."""

    line: int
    onnx: str
    vnnlib: str
    onnx_path: Path
    vnnlib_path: Path
    timeout: float | None = None


@dataclass
class InstanceResult:
    """The answer for one instance: ``result`` (one of :data:`RESULTS`), ``prepare_s`` (here),
    ``run_s`` (on the worker that decided it), ``query`` (:meth:`~.nn_verify.QueryResult.to_json`, or
    {"error": reason} for ``error``)."""

    instance: Instance
    result: str
    prepare_s: float
    run_s: float
    query: dict = field(default_factory=dict)


def read_instances(path: str | Path, model: str | Path | None = None) -> list[Instance]:
    """The instances of the list file ``path`` (see the module docstring); ``model``: the network of
    one-field lines (a plain VNN-LIB list). Raises MiCertifyError (file = the list, where = ``line N``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MiCertifyError(f"cannot read the instance list ({type(exc).__name__}: {exc.args[-1] if exc.args else exc})",
                             file=str(path)) from None
    base = path.parent
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        where = f"line {n}"
        if len(fields) > 3 or not all(fields[:2]):
            raise MiCertifyError("expected 'VNNLIB', or 'ONNX,VNNLIB[,TIMEOUT]' (VNN-COMP instances.csv)",
                                 file=str(path), where=where)
        timeout = None
        if len(fields) == 1:
            if model is None:
                raise MiCertifyError("a line with a VNN-LIB file only needs the network: mi-certify verify MODEL.onnx "
                                     "--campaign LIST", file=str(path), where=where)
            onnx, onnx_path, vnnlib = str(model), Path(model), fields[0]
        else:
            onnx, vnnlib = fields[0], fields[1]
            onnx_path = base / onnx
            if len(fields) == 3:
                try:
                    timeout = float(fields[2])
                except ValueError:
                    timeout = -1.0
                if not timeout > 0 or not np.isfinite(timeout):
                    raise MiCertifyError(f"the timeout {fields[2]!r} is not a positive number of seconds",
                                         file=str(path), where=where)
        vnnlib_path = base / vnnlib
        for kind, p in (("network", onnx_path), ("VNN-LIB file", vnnlib_path)):
            if not p.is_file():
                raise MiCertifyError(f"the {kind} {p} does not exist", file=str(path), where=where)
        out.append(Instance(n, onnx, vnnlib, onnx_path, vnnlib_path, timeout))
    if not out:
        raise MiCertifyError("the instance list names no instance", file=str(path))
    return out


def _decide_instance(args) -> tuple[str, float, dict]:
    """Task: decide one prepared instance. Returns (result word, seconds, query JSON); an exception
    of the query is the result ``error`` (it does not stop the campaign)."""
    from mi_certify.verification.nn.nn_verify import decide

    model, query, opts = args
    t0 = time.monotonic()
    try:
        res = decide(model, query, opts)
    except Exception as exc:  # noqa: BLE001 - recorded as VNN-COMP's error result
        return "error", time.monotonic() - t0, {"error": f"{type(exc).__name__}: {exc}"}
    word = res.verdict.vnnlib
    if word == "unknown" and (res.time_s >= opts.timeout or "timeout" in res.detail.lower()):
        word = "timeout"
    if res.errors and word == "unknown":
        word = "error"
    return word, time.monotonic() - t0, res.to_json()


def run_campaign(instances: list[Instance], opts, backend=None, on_result=None) -> list[InstanceResult]:
    """Prepare every instance here, decide them on ``backend`` (None: this process), in list order.

    Args:
        opts: :class:`~.nn_verify.VerifyOptions`; an instance's own timeout replaces ``opts.timeout``.
        on_result: ``on_result(result, done, total)`` with each :class:`InstanceResult` as it arrives
            (any order), so that a caller can keep the answers of an interrupted campaign.
    Raises: MiCertifyError (a network or property refused: ModelImportError, VnnlibError, naming the
    file) before any query runs; what the backend raises (TaskLostError, BackendError).
    """
    from mi_certify.generator.frontend.model import load_model

    from mi_certify.verification.nn.vnnlib import announced_boxes, parse_vnnlib, query_box

    models: dict[Path, object] = {}
    properties: dict[Path, list[Path]] = {}   # each network's properties: onnxruntime runs on all their boxes
    for inst in instances:                    # before its import (load_model's ``boxes``: a lower peak)
        properties.setdefault(inst.onnx_path.resolve(), []).append(inst.vnnlib_path)
    tasks, prep = [], []
    for inst in instances:
        t0 = time.monotonic()
        key = inst.onnx_path.resolve()
        if key not in models:
            models[key] = load_model(inst.onnx_path, announced_boxes(properties[key]))
        model = models[key]
        query = parse_vnnlib(inst.vnnlib_path, model.ir.n_inputs, model.ir.n_outputs)
        box = query_box(query, inst.vnnlib_path)
        if box is not None:
            model.cross_check(*box)
        tasks.append((model, query, replace(opts, timeout=inst.timeout) if inst.timeout else opts))
        prep.append(time.monotonic() - t0)
    def result(k: int, answer: tuple) -> InstanceResult:
        word, seconds, js = answer
        return InstanceResult(instances[k], word, prep[k], seconds, js)

    shown = (lambda k, done, answer: on_result(result(k, answer), done, len(instances))) if on_result else None
    return [result(k, answer) for k, answer in enumerate(map_ordered(_decide_instance, tasks, backend,
                                                                     on_result=shown))]


def results_csv(results: list[InstanceResult], category: str) -> str:
    """The VNN-COMP results.csv text (see the module docstring): one line per instance, no header."""
    if "," in category or "\n" in category:
        raise ValueError("the category must not contain a comma or a newline")
    return "".join(f"{category},{r.instance.onnx},{r.instance.vnnlib},{r.prepare_s:.6f},{r.result},{r.run_s:.6f}\n"
                   for r in results)
