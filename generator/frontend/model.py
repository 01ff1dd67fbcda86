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
from mi_certify.generator.frontend.onnx_import import (
    ORT_RTOL, OnnxruntimeReadout, compare_with_onnxruntime, onnxruntime_session, read_and_import, read_model_again,
    session_from_file)

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

    def bytes(self) -> bytes:
        return self.data

    def session(self):
        """An onnxruntime session of the bytes hashed (from the file, confirmed unchanged after, or from
        the bytes this process was sent)."""
        if self._data is not None:
            return onnxruntime_session(self._data, self.path)
        return session_from_file(self._source, self.sha256)

    def __getstate__(self) -> dict:
        from mi_certify.verification.tools.workers import pickling_for_local_worker

        state = {k: v for k, v in self.__dict__.items() if k != "_session"}  # the readout: rebuilt per process
        if self._data is None and pickling_for_local_worker():
            state["_file"] = self._source.absolute()   # read there, hash-checked, if ever needed
        else:
            state["_data"] = self.data
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_file", None)
        self._session = None

    def evaluate_onnxruntime(self, points: np.ndarray) -> np.ndarray:
        """onnxruntime (float32 CPU kernels, one intra-op thread) at ``points`` (n, n_inputs):
        (n, n_outputs) float64, the tensors the IR equals. When the importer stripped a monotone head
        (``ir.head``), these are its logits, read from an in-memory copy of ``data`` with the logits added
        as graph outputs (``data`` and ``sha256`` are untouched), and every call confirms that the head's
        own output orders the actions as the logits do (:class:`~.onnx_import.OnnxruntimeReadout`).
        Raises ModelImportError when onnxruntime refuses the model or the file changed since it was
        read, ModelMismatchError when the head disagrees."""
        if self._session is None:
            self._session = OnnxruntimeReadout(self, self.ir, self.path, self.outputs, self.feeds)
        return self._session(np.atleast_2d(np.asarray(points, dtype=np.float64)))

    def cross_check(self, lo: np.ndarray, hi: np.ndarray, n_points: int = 256, seed: int = 0,
                    rtol: float = ORT_RTOL) -> float:
        """IR (float64) against onnxruntime inside the box [lo, hi] (physical units, (n_inputs,) each):
        :func:`mi_certify.generator.frontend.onnx_import.cross_check` on this model. Returns the largest scaled
        difference; raises ModelImportError / ModelMismatchError."""
        return compare_with_onnxruntime(self.ir, self.feeds, self.evaluate_onnxruntime, self.path, lo, hi,
                                        n_points=n_points, seed=seed, rtol=rtol)


def load_model(path: str | Path) -> LoadedModel:
    """Read, check and import an ONNX controller once (:func:`~.onnx_import.read_and_import`).

    Raises:
        ModelImportError naming file, node and reason (not a file, unreadable, refused
        operator or version, onnx.checker).
    """
    path = Path(path)
    sha256, ir, feeds, outputs = read_and_import(path)
    return LoadedModel(path, sha256, ir, feeds, outputs)
