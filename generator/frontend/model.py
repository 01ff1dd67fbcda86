"""The controller model, read once: bytes, SHA-256, checked ONNX graph, IR, onnxruntime session.

Every stage that needs the model (import cross-check, network verification and its
counterexample replay, distillation, fidelity, the bundle's copy and hash) takes one
:class:`LoadedModel` instead of reopening the file: the bytes hashed into the manifest
are the bytes that were imported, verified and copied into ``inputs/model/``, even if
the file changes on disk during the build.

A LoadedModel pickles (bytes + IR) into worker processes; each process opens its own
onnxruntime session on first use.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from mi_certify.generator.core.ir import ControllerIR
from mi_certify.generator.frontend.onnx_import import (
    ORT_RTOL, OnnxruntimeReadout, compare_with_onnxruntime, feed_shapes, import_model, parse_model, read_model_file)

__all__ = ["LoadedModel", "load_model"]


class LoadedModel:
    """One ONNX controller in memory.

    Attributes:
        path: the file it was read from (names it in messages; never reopened).
        data: the file's bytes.
        sha256: hex SHA-256 of ``data``.
        ir: the exact :class:`~mi_certify.generator.core.ir.ControllerIR` (not yet cross-checked).
        feeds: (name, shape, numpy dtype) of each non-constant graph input, batch bound to 1.
    """

    def __init__(self, path: Path, data: bytes, ir: ControllerIR, feeds: list):
        self.path, self.data, self.ir, self.feeds = Path(path), data, ir, tuple(feeds)
        self.sha256 = hashlib.sha256(data).hexdigest()
        self._session = None

    @property
    def name(self) -> str:
        """File name (what the bundle stores it as under ``inputs/model/``)."""
        return self.path.name

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_session"}  # the readout: rebuilt per process

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._session = None

    def evaluate_onnxruntime(self, points: np.ndarray) -> np.ndarray:
        """onnxruntime (float32 CPU kernels, one intra-op thread) at ``points`` (n, n_inputs):
        (n, n_outputs) float64, the tensors the IR equals. When the importer stripped a monotone head
        (``ir.head``), these are its logits, read from an in-memory copy of ``data`` with the logits added
        as graph outputs (``data`` and ``sha256`` are untouched), and every call confirms that the head's
        own output orders the actions as the logits do (:class:`~.onnx_import.OnnxruntimeReadout`).
        Raises ModelImportError when onnxruntime refuses the model, ModelMismatchError when the head
        disagrees."""
        if self._session is None:
            self._session = OnnxruntimeReadout(self.data, self.ir, self.path)
        return self._session(np.atleast_2d(np.asarray(points, dtype=np.float64)))

    def cross_check(self, lo: np.ndarray, hi: np.ndarray, n_points: int = 256, seed: int = 0,
                    rtol: float = ORT_RTOL) -> float:
        """IR (float64) against onnxruntime inside the box [lo, hi] (physical units, (n_inputs,) each):
        :func:`mi_certify.generator.frontend.onnx_import.cross_check` on this model. Returns the largest scaled
        difference; raises ModelImportError / ModelMismatchError."""
        return compare_with_onnxruntime(self.ir, self.feeds, self.evaluate_onnxruntime, self.path, lo, hi,
                                        n_points=n_points, seed=seed, rtol=rtol)


def load_model(path: str | Path) -> LoadedModel:
    """Read, check and import an ONNX controller once.

    Raises:
        ModelImportError naming file, node and reason (not a file, unreadable, refused
        operator or version, onnx.checker).
    """
    path = Path(path)
    data = read_model_file(path)
    proto = parse_model(data, path)
    return LoadedModel(path, data, import_model(proto, path), feed_shapes(proto))
