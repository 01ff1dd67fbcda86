"""The LUT over the quantized grid.

In this version every cell takes the decoded action at its centre (``sampled``):
nothing about the rest of the cell is proven. The proven distillation replaces
:func:`sample_lut` and marks cells ``proven`` or ``resolved``.

Decode: argmax or argmin over the raw outputs, ties to the lowest index (as
numpy and onnxruntime). Confidence: the softmax probability of the decoded action
(softmax of the negated outputs for argmin) compared with the threshold; without a
``confidence`` section every cell is confident.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mi_certify.runtime.quantize import Quantizer

from .errors import SpecError
from .ir import ControllerIR
from .spec import Spec

#: Cell status values, as written in lut.json and summary.json.
SAMPLED, PROVEN, RESOLVED = "sampled", "proven", "resolved"


@dataclass(frozen=True)
class Lut:
    """A LUT: ``tokens`` (n_cells,) uint8, ``confident`` (n_cells,) bool, ``status`` per cell."""

    tokens: np.ndarray
    confident: np.ndarray
    status: np.ndarray  # (n_cells,) of SAMPLED / PROVEN / RESOLVED (object dtype)

    @property
    def n_cells(self) -> int:
        return int(self.tokens.shape[0])

    def counts(self) -> dict[str, int]:
        return {"cells": self.n_cells, **{s: int(np.sum(self.status == s)) for s in (SAMPLED, PROVEN, RESOLVED)}}


def quantizers(spec: Spec) -> list[Quantizer]:
    return [Quantizer.from_floats(i.min, i.max, i.bits) for i in spec.inputs]


def cell_centres(spec: Spec, start: int, stop: int) -> np.ndarray:
    """Centres (float64, physical units) of cells [start, stop): (stop - start, n_inputs)."""
    addr = np.arange(start, stop, dtype=np.int64)
    cols = []
    shift = spec.address_bits
    for qz, inp in zip(quantizers(spec), spec.inputs):
        shift -= inp.bits
        level = (addr >> shift) & ((1 << inp.bits) - 1)
        centres = np.array([qz.centre(q) for q in range(qz.levels)])
        cols.append(centres[level])
    return np.stack(cols, axis=1)


def decode(spec: Spec, outputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode raw outputs (n, n_actions) into (tokens uint8, confident bool)."""
    scores = outputs if spec.decode == "argmax" else -outputs
    tokens = np.argmax(scores, axis=1).astype(np.uint8)
    if spec.confidence_threshold is None:
        return tokens, np.ones(len(tokens), dtype=bool)
    z = scores - scores.max(axis=1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    top = prob[np.arange(len(tokens)), tokens]
    return tokens, top >= spec.confidence_threshold


def check_shapes(spec: Spec, ir: ControllerIR, model_path: str) -> None:
    """The spec's inputs and actions must match the network; raises SpecError."""
    if ir.n_inputs != len(spec.inputs):
        raise SpecError(f"declares {len(spec.inputs)} inputs but {model_path} has {ir.n_inputs} "
                        "(flattened) inputs", file=spec.path, where="inputs")
    if ir.n_outputs != len(spec.actions):
        raise SpecError(f"declares {len(spec.actions)} actions but {model_path} has {ir.n_outputs} "
                        "(flattened) outputs", file=spec.path, where="actions")


def sample_lut(spec: Spec, ir: ControllerIR, chunk: int = 1 << 16, progress=None) -> Lut:
    """Build the LUT from cell centres (every cell ``sampled``).

    Args:
        progress: optional callable(done_cells, total_cells).
    """
    n = 1 << spec.address_bits
    tokens = np.empty(n, dtype=np.uint8)
    conf = np.empty(n, dtype=bool)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        t, c = decode(spec, ir.evaluate(cell_centres(spec, start, stop)))
        tokens[start:stop] = t
        conf[start:stop] = c
        if progress:
            progress(stop, n)
    status = np.full(n, SAMPLED, dtype=object)
    return Lut(tokens, conf, status)
