"""The controller model, read once: SHA-256, checked ONNX graph, IR, onnxruntime session.

Every stage that needs the model (import cross-check, network verification and its
counterexample replay, distillation, fidelity, the bundle's copy and hash) takes one
:class:`LoadedModel` instead of reopening the file unchecked: the bytes hashed into the manifest
are the bytes that were imported, verified and copied into ``inputs/model/``. The bytes are not
held in memory (257 MB at tllverifybench N = 64): where they are needed again (the bundle's copy,
onnxruntime) the file is read again and checked against the hash of the first read, and a file
changed on disk in between is refused (ModelImportError).

A LoadedModel pickles (bytes, read again and checked, + IR) into worker processes, which may have
no access to the file (a Dask cluster); each process opens its own onnxruntime session on first use.
Pickled for a worker process of this machine (:func:`~mi_certify.verification.tools.workers.map_in_processes`,
whose item is pickled once per item: a campaign's instance, a distillation's slice) it carries no bytes:
the worker reads the file itself, checked against the same hash, only if it needs them (an
onnxruntime session), instead of the parent reading and hashing the file again for every item.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mi_certify.generator.core.ir import ControllerIR
from mi_certify.generator.core.digests import sha256_file
from mi_certify.generator.frontend.onnx_import import (
    ORT_RTOL, OnnxruntimeReadout, file_identity, compare_with_onnxruntime, cross_check_points, onnxruntime_session,
    read_and_import, read_model_again, run_session_outputs, session_from_file)

__all__ = ["LoadedModel", "load_model"]


class LoadedModel:
    """One ONNX controller in memory.

    Attributes:
        path: the file it was read from (names it in messages; read again only with its hash checked).
        sha256: hex SHA-256 of the bytes read.
        ir: the exact :class:`~mi_certify.generator.core.ir.ControllerIR` (not yet cross-checked).
        feeds: (name, shape, numpy dtype) of each non-constant graph input, batch bound to 1.
        outputs: the graph's output names.
    """

    def __init__(self, path: Path, sha256: str, ir: ControllerIR, feeds: list, outputs=(), data: bytes | None = None):
        self.path, self.sha256, self.ir, self.feeds = Path(path), sha256, ir, tuple(feeds)
        self.outputs = tuple(outputs)
        self._data = data   # held only where the model came pickled (a worker process)
        self._file = None   # where a worker of this machine reads the file (absolute: the parent's folder)
        self._early: _EarlyReadout | None = None   # onnxruntime's outputs made before the import (load_model)
        self._session = None

    @property
    def _source(self) -> Path:
        return self._file if self._file is not None else self.path

    @property
    def name(self) -> str:
        """File name (what the bundle stores it as under ``inputs/model/``)."""
        return self.path.name

    @property
    def data(self) -> bytes:
        """The model's bytes: those hashed (:func:`~.onnx_import.read_model_again`: the file read again
        and checked, unless this process was sent them). Raises ModelImportError when the file is gone
        or changed since it was read."""
        return self._data if self._data is not None else read_model_again(self._source, self.sha256)

    def session(self):
        """An onnxruntime session of the bytes hashed (from the file, confirmed unchanged after, or from
        the bytes this process was sent)."""
        if self._data is not None:
            return onnxruntime_session(self._data, self.path)
        return session_from_file(self._source, self.sha256)

    def __getstate__(self) -> dict:
        from mi_certify.verification.tools.workers import pickling_for_local_worker

        state = {k: v for k, v in self.__dict__.items() if k not in ("_session", "_early")}  # rebuilt per process
        if self._data is None and pickling_for_local_worker():
            state["_file"] = self._source.absolute()   # read there, hash-checked, if ever needed
        else:
            state["_data"] = self.data
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_file", None)
        self._early = None
        self._session = None

    def evaluate_onnxruntime(self, points: np.ndarray) -> np.ndarray:
        """onnxruntime (float32 CPU kernels, one intra-op thread) at ``points`` (n, n_inputs):
        (n, n_outputs) float64, the tensors the IR equals. When the importer stripped a monotone head
        (``ir.head``), these are its logits, read from an in-memory copy of ``data`` with the logits added
        as graph outputs (``data`` and ``sha256`` are untouched), and every call confirms that the head's
        own output orders the actions as the logits do (:class:`~.onnx_import.OnnxruntimeReadout`).
        Raises ModelImportError when onnxruntime refuses the model or the file changed since it was
        read, ModelMismatchError when the head disagrees."""
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        if self._session is None and self._early is not None:
            got = self._early.take(self, points)
            if got is not None:
                return got
        if self._session is None:
            self._session = OnnxruntimeReadout(self, self.ir, self.path, self.outputs, self.feeds)
        return self._session(points)

    def cross_check(self, lo: np.ndarray, hi: np.ndarray, n_points: int = 256, seed: int = 0,
                    rtol: float = ORT_RTOL) -> float:
        """IR (float64) against onnxruntime inside the box [lo, hi] (physical units, (n_inputs,) each):
        :func:`mi_certify.generator.frontend.onnx_import.cross_check` on this model. Returns the largest scaled
        difference; raises ModelImportError / ModelMismatchError."""
        return compare_with_onnxruntime(self.ir, self.feeds, self.evaluate_onnxruntime, self.path, lo, hi,
                                        n_points=n_points, seed=seed, rtol=rtol)


#: numpy dtypes of the onnxruntime input types an early readout feeds (others: no early readout).
_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}


class _EarlyReadout:
    """onnxruntime's outputs at the cross-check's points of the boxes a caller announced to
    :func:`load_model`, computed from the file before the import (:func:`_early_readout`). Used by
    :meth:`LoadedModel.evaluate_onnxruntime` only where they are exactly what its session would give:
    the same file (SHA-256), the same feeds (:func:`~.onnx_import.feed_shapes`), the IR reading the
    graph's outputs in order with no stripped head (the readout then runs the file unchanged), and the
    same points (every bit); each run once. Anything else makes the session as before."""

    def __init__(self, sha256: str, feeds: list, names: list[str], runs: list):
        self.sha256, self.feeds, self.names, self.runs = sha256, feeds, names, runs

    def take(self, model: LoadedModel, points: np.ndarray) -> np.ndarray | None:
        ir = model.ir
        if not (self.names and self.sha256 == model.sha256 and self.feeds == list(model.feeds) and ir.head is None
                and self.names == list(ir.output_names) == list(model.outputs)):
            return None
        for k, (pts, out) in enumerate(self.runs):
            if pts.shape == points.shape and pts.tobytes() == points.tobytes():
                del self.runs[k]
                return out
        return None


def _early_readout(path: Path, boxes) -> _EarlyReadout | None:
    """onnxruntime run on the cross-check points (:func:`~.onnx_import.cross_check_points`, default
    count and seed) of each box ``boxes(n_inputs, n_outputs)`` gives (sizes from onnxruntime's view of
    the graph), the session made from the file and dropped before the import, its memory given back
    (tllverifybench N = 64: its peak, 445 MB, no longer on top of the IR's 342 MB). The file's SHA-256
    is taken after, its identity unchanged throughout. None whenever anything fails (a refused model,
    a box ``boxes`` refuses, an unknown feed type): the import and the cross-check then run as without
    it and raise what they raise, in their order."""
    from mi_certify.verification.tools.registry import release_freed_heap

    try:
        before = file_identity(path)
        sess = onnxruntime_session(path, path)
        feeds = []
        for i in sess.get_inputs():
            if i.type not in _ORT_TYPES:
                return None
            feeds.append((i.name, tuple(d if isinstance(d, int) and d > 0 else 1 for d in i.shape),
                          np.dtype(_ORT_TYPES[i.type])))
        names = [o.name for o in sess.get_outputs()]
        n_in = sum(int(np.prod(shape, dtype=np.int64)) for _, shape, _ in feeds)
        n_out = sum(int(np.prod([d if isinstance(d, int) and d > 0 else 1 for d in o.shape], dtype=np.int64))
                    for o in sess.get_outputs())
        runs = []
        for lo, hi in boxes(n_in, n_out):
            pts = cross_check_points(n_in, feeds, path, lo, hi)
            runs.append((pts, np.concatenate(run_session_outputs(sess, feeds, pts, names), axis=1)))
        del sess
        sha256 = sha256_file(path)
        if file_identity(path) != before:
            return None
    except Exception:  # noqa: BLE001 - the import and the cross-check report it, in their order
        return None
    finally:
        release_freed_heap()
    return _EarlyReadout(sha256, feeds, names, runs)


def load_model(path: str | Path, boxes=None) -> LoadedModel:
    """Read, check and import an ONNX controller once (:func:`~.onnx_import.read_and_import`).

    ``boxes``: optional ``boxes(n_inputs, n_outputs) -> [(lo, hi), ...]``, the input boxes the caller
    will cross-check (:meth:`LoadedModel.cross_check` with its default points and seed): onnxruntime is
    then run on them first, with nothing else in memory, its session dropped before the import
    (:func:`_early_readout`; the peak of import + cross-check at tllverifybench N = 64: 985 -> 710 MB, one run).
    The cross-check gives the same result and raises the same errors; where it cannot use those outputs
    it makes its session as before. ``boxes`` may raise: it is asked again by nobody, and the caller's
    own parse after the import reports the error as before.

    Raises:
        ModelImportError naming file, node and reason (not a file, unreadable, refused
        operator or version, onnx.checker).
    """
    path = Path(path)
    early = _early_readout(path, boxes) if boxes is not None else None
    sha256, ir, feeds, outputs = read_and_import(path)
    model = LoadedModel(path, sha256, ir, feeds, outputs)
    model._early = early
    return model
