"""The LUT over the quantized grid, and the LUT-FSM artefact every later stage reads.

:class:`Lut`: a token, a confident bit and a status per cell. :func:`sample_lut` takes the
decoded action at each cell's centre (``sampled``: nothing about the rest of the cell is
proven); the certified distillation (:mod:`.distill`) marks cells ``proven`` or
``resolved``. :class:`LutFsmArtefact`: the table with the property masks, the FSM
parameters and the widths, handed to the proofs, emitters, co-simulation and checker.

Decode: argmax or argmin over the raw outputs, ties to the lowest index (as
numpy and onnxruntime). Confidence: the softmax probability of the decoded action
(softmax of the negated outputs for argmin) compared with the threshold; without a
``confidence`` section every cell is confident.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from mi_certify.runtime.fsm import FsmConfig, MaskBox, OperatorConfig
from mi_certify.runtime.lut_file import CONFIDENT_SHIFT, TOKEN_MASK
from mi_certify.runtime.quantize import Quantizer

from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.ir import ControllerIR
from mi_certify.generator.core.numerics import exp, sum_last
from mi_certify.generator.core.spec import Spec

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


def table_bytes(tokens: np.ndarray, confident: np.ndarray) -> bytes:
    """One byte per address: token in bits 0-6, confident bit 7 (lut.hex, the runtime format):
    :func:`mi_certify.runtime.lut_file.pack_entry` over whole arrays. Raises ValueError for a
    token above 127."""
    tokens = np.asarray(tokens)
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) > TOKEN_MASK):
        raise ValueError(f"LUT tokens {int(tokens.min())}..{int(tokens.max())} do not fit bits 0-6 of an entry")
    return (tokens.astype(np.uint16) | (np.asarray(confident).astype(np.uint16) << CONFIDENT_SHIFT)
            ).astype(np.uint8).tobytes()


def split_table(table: bytes | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tokens uint8, confident bool) of lut.hex bytes: the inverse of :func:`table_bytes`
    (:func:`mi_certify.runtime.lut_file.unpack_entry` over whole arrays)."""
    a = np.frombuffer(bytes(table), dtype=np.uint8) if isinstance(table, (bytes, bytearray)) \
        else np.asarray(table, dtype=np.uint8)
    return (a & TOKEN_MASK).astype(np.uint8), (a >> CONFIDENT_SHIFT).astype(bool)


def encode_status_runs(status: np.ndarray) -> list[list]:
    """Run-length encoding ``[[start, stop, status], ...]`` of the per-cell status (lut.json
    ``cell_status``): maximal runs of equal status, ``stop`` exclusive, ascending, covering every
    cell; plain ints and strings (JSON). The inverse of :func:`decode_status_runs`."""
    status = np.asarray(status, dtype=object)
    if status.size == 0:
        return []
    starts = [0, *(np.nonzero(status[1:] != status[:-1])[0] + 1).tolist()]
    stops = [*starts[1:], int(status.size)]
    return [[a, b, str(status[a])] for a, b in zip(starts, stops)]


def _checked_runs(runs, n: int | None) -> list[tuple[int, int, str]]:
    """``runs`` as (start, stop, status) after checking they follow one another from 0 (to ``n``
    when given), each non-empty with a known status; raises ValueError naming the first bad run."""
    out, at = [], 0
    for k, run in enumerate(runs):
        a, b, s = run
        if a != at or b <= a or s not in (SAMPLED, PROVEN, RESOLVED):
            raise ValueError(f"cell_status run {k} {list(run)}: runs must follow one another from cell 0, each "
                             f"non-empty, with status {SAMPLED}, {PROVEN} or {RESOLVED}")
        out.append((int(a), int(b), str(s)))
        at = b
    if n is not None and at != n:
        raise ValueError(f"cell_status runs cover cells 0..{at}, not the {n} cells of the LUT")
    return out


def decode_status_runs(runs, n: int | None = None) -> np.ndarray:
    """lut.json's ``cell_status`` runs decoded to one status per cell: (n,) object array of
    SAMPLED / PROVEN / RESOLVED (``n`` defaults to the last run's stop). Raises ValueError when
    the runs do not cover exactly the cells 0..n-1 in order or name another status."""
    checked = _checked_runs(runs, n)
    status = np.empty(checked[-1][1] if checked else (n or 0), dtype=object)
    for a, b, s in checked:
        status[a:b] = s
    return status


def status_run_counts(runs) -> dict[str, int]:
    """Cells per status ``{"proven", "resolved", "sampled"}`` of lut.json's ``cell_status`` runs
    (without expanding them); raises ValueError as :func:`decode_status_runs`."""
    counts = {PROVEN: 0, RESOLVED: 0, SAMPLED: 0}
    for a, b, s in _checked_runs(runs, None):
        counts[s] += b - a
    return counts


@dataclass(frozen=True, eq=False)
class LutFsmArtefact:
    """The LUT-FSM as every stage after distillation sees it: the one source of truth for
    behaviour (docs/fsm.md) handed to the FSM proofs, the emitters, the RTL proofs, the
    co-simulation and the checker.

    Attributes:
        tokens: (2^address_bits,) uint8 proposed token per address (address = levels
            concatenated, input 0 most significant).
        confident: (2^address_bits,) bool confident bit per address.
        masks: allowed-action boxes of the sla.yaml properties (rule 3a).
        config: FSM parameters (actions, conservative token, H, D, W, R).
        input_bits: address bits per input, input 0 first.
        token_bits: width of a token in the RTL.
        actions: action names, by token.
        status: (2^address_bits,) PROVEN / RESOLVED / SAMPLED per cell, or None when only
            the table is known (a checker reading lut.hex).
        operator: the operator input (sla.yaml ``operator:``, docs/fsm.md "Operator
            interventions"), or None: the machine has none. The RTL proofs and the co-simulation
            take it from here unless told otherwise, so no caller can prove or simulate an RTL with
            a command port against a machine without one.
    """

    tokens: np.ndarray
    confident: np.ndarray
    masks: tuple[MaskBox, ...]
    config: FsmConfig
    input_bits: tuple[int, ...]
    token_bits: int
    actions: tuple[str, ...]
    status: np.ndarray | None = None
    operator: OperatorConfig | None = None

    def __post_init__(self):
        """Own read-only copies of the arrays (so :attr:`sha256` cannot change); raises
        ValueError when the table is not 2^address_bits entries or holds an undeclared token."""
        if any(int(b) < 1 for b in self.input_bits) or not 1 <= self.config.n_actions <= 128:
            raise ValueError(f"LUT-FSM input bits {tuple(self.input_bits)} / {self.config.n_actions} actions: each "
                             "input needs at least 1 bit, and 1 to 128 actions fit the entry format")
        if len(self.actions) != self.config.n_actions or self.token_bits < (self.config.n_actions - 1).bit_length():
            raise ValueError(f"LUT-FSM has {len(self.actions)} action names and {self.token_bits}-bit tokens for "
                             f"{self.config.n_actions} actions")
        n = 1 << sum(self.input_bits)
        tokens, confident = np.asarray(self.tokens), np.asarray(self.confident)
        if tokens.dtype.kind not in "iub" or (tokens.size and (int(tokens.min()) < 0)):
            raise ValueError(f"LUT-FSM tokens must be non-negative integers (got {tokens.dtype})")
        if confident.dtype.kind not in "iub" or (confident.size and not np.isin(confident, (0, 1)).all()):
            raise ValueError("LUT-FSM confident bits must be booleans (0 or 1)")
        arrays = {"tokens": tokens.astype(np.uint8) if tokens.size and int(tokens.max()) < 256 else tokens,
                  "confident": confident.astype(bool)}
        if self.status is not None:
            arrays["status"] = np.array(self.status, dtype=object)
            if not set(np.unique(arrays["status"]).tolist()) <= {SAMPLED, PROVEN, RESOLVED}:
                raise ValueError(f"LUT-FSM cell status must be {SAMPLED}, {PROVEN} or {RESOLVED}")
        for name, a in arrays.items():
            if a.shape != (n,):
                raise ValueError(f"LUT-FSM {name} has shape {a.shape}, not ({n},) for {sum(self.input_bits)} "
                                 "address bits")
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        if n and int(arrays["tokens"].max()) >= self.config.n_actions:
            raise ValueError(f"LUT-FSM table holds token {int(arrays['tokens'].max())}; the FSM has "
                             f"{self.config.n_actions} actions")

    @classmethod
    def from_lut(cls, spec: Spec, lut: Lut, masks) -> "LutFsmArtefact":
        """The artefact of ``spec`` with table ``lut`` (after :func:`apply_masks`) and ``masks``."""
        return cls(lut.tokens, lut.confident, tuple(masks), spec.fsm_config(), tuple(i.bits for i in spec.inputs),
                   spec.token_bits, tuple(a.name for a in spec.actions), lut.status,
                   spec.operator.config() if spec.operator else None)

    @classmethod
    def from_table(cls, spec: Spec, table: bytes | np.ndarray, masks) -> "LutFsmArtefact":
        """The artefact of ``spec`` from its lut.hex bytes (token | confident << 7 per address)."""
        tokens, confident = split_table(table)
        return cls(tokens, confident, tuple(masks), spec.fsm_config(),
                   tuple(i.bits for i in spec.inputs), spec.token_bits, tuple(x.name for x in spec.actions),
                   operator=spec.operator.config() if spec.operator else None)

    @classmethod
    def of_table(cls, config: FsmConfig, table: bytes, masks=(), input_bits: tuple[int, ...] | None = None
                 ) -> "LutFsmArtefact":
        """An artefact without a spec (tests, tools): ``table`` one byte per address, ``input_bits``
        defaulting to one input over the whole address, actions named by their token."""
        tokens, confident = split_table(table)
        bits = input_bits or (max(0, (len(tokens) - 1).bit_length()),)
        return cls(tokens, confident, tuple(masks), config, tuple(bits),
                   max(1, (config.n_actions - 1).bit_length()), tuple(str(t) for t in range(config.n_actions)))

    @property
    def address_bits(self) -> int:
        return sum(self.input_bits)

    @property
    def n_cells(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def table(self) -> bytes:
        """lut.hex content as bytes: one per address, token | confident << 7."""
        return table_bytes(self.tokens, self.confident)

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of :attr:`table` (the ``lut`` hash in generated headers and the manifest)."""
        return hashlib.sha256(self.table).hexdigest()

    @property
    def lut(self) -> Lut:
        """The table as a :class:`Lut` (status SAMPLED where unknown)."""
        status = self.status if self.status is not None else np.full(self.n_cells, SAMPLED, dtype=object)
        return Lut(self.tokens, self.confident, status)


def quantizers(spec: Spec) -> list[Quantizer]:
    return [Quantizer.from_floats(i.min, i.max, i.bits) for i in spec.inputs]


#: Half-width, in units of the level count, of the band around a cell face inside which
#: :func:`levels_of` hands a value to the exact quantizer. The float64 estimate of
#: ``(x - lo) * 2^b / (hi - lo)`` (one subtraction, an exact scaling, one subtraction and one
#: division, each rounded to nearest) is within ``3.0001 * 2^-53 * 2^b`` of the exact ratio, and
#: rounding ``t -+ FACE_BAND * 2^b`` adds at most ``2^-53 * 2^b``: with ``2^-48`` both floors agree
#: only where the exact ratio lies strictly between the same two integers (Higham, "Accuracy and
#: Stability of Numerical Algorithms", 2nd ed., section 2.2, the standard model of rounding).
FACE_BAND = 2.0 ** -48


def levels_of(qz: Quantizer, x: np.ndarray) -> np.ndarray:
    """:meth:`Quantizer.level` of every value of ``x`` (float64, any shape), vectorised: int64 of
    ``x``'s shape, the level in [0, 2^bits - 1] or -1 for a probe fault (NaN, infinite, outside the
    envelope). Exactly the runtime quantizer's answer: the envelope test compares binary64 values
    (exact), a float64 estimate decides the level where it is at least :data:`FACE_BAND` * 2^bits
    from a cell face, and every other value (on or next to a face) goes to
    :meth:`Quantizer.level` (exact rationals). An envelope whose ends are not binary64 values, or
    whose width overflows binary64, is quantized by :meth:`Quantizer.level` throughout."""
    x = np.asarray(x, dtype=np.float64)
    lo, hi, n = float(qz.lo), float(qz.hi), qz.levels
    if Fraction(lo) != qz.lo or Fraction(hi) != qz.hi or not np.isfinite(hi - lo):
        return np.array([-1 if (q := qz.level(float(v))) is None else q for v in x.ravel()],
                        dtype=np.int64).reshape(x.shape)
    with np.errstate(all="ignore"):
        inside = (x >= lo) & (x <= hi)   # False for NaN
        t = (x - lo) * float(n) / (hi - lo)
        below, above = np.floor(t - FACE_BAND * n), np.floor(t + FACE_BAND * n)
    sure = inside & (below == above)
    out = np.where(sure, np.minimum(above, n - 1), -1).astype(np.int64)
    flat, xs = out.reshape(-1), x.reshape(-1)
    for i in np.flatnonzero(inside & ~sure):
        flat[i] = qz.level(float(xs[i]))
    return out


def point_addresses(spec: Spec, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LUT addresses of ``points`` ((n, n_inputs) float64, physical units) as the runtime's
    :func:`~mi_certify.runtime.quantize.quantize` gives them, vectorised with :func:`levels_of`.
    Returns (addresses int64 (n,), 0 where a reading is a probe fault; fault bool (n,)).
    Raises ValueError when the columns do not match the spec's inputs."""
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != len(spec.inputs):
        raise ValueError(f"expected points of shape (n, {len(spec.inputs)}), got {points.shape}")
    addr = np.zeros(len(points), dtype=np.int64)
    fault = np.zeros(len(points), dtype=bool)
    for j, qz in enumerate(quantizers(spec)):
        level = levels_of(qz, points[:, j])
        fault |= level < 0
        addr = (addr << qz.bits) | np.maximum(level, 0)
    addr[fault] = 0
    return addr, fault


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
    ez = exp(z)
    prob = ez / sum_last(ez)[:, None]
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


def levels_meeting(inp, lo: float, hi: float) -> np.ndarray:
    """Boolean (2^bits,) mask of the levels whose cell meets [lo, hi] (exact rationals;
    cell q covers [min + q·step, min + (q+1)·step), the last one closed)."""
    qz = Quantizer.from_floats(inp.min, inp.max, inp.bits)
    rlo, rhi = Fraction(lo), Fraction(hi)
    out = np.zeros(qz.levels, dtype=bool)
    for q in range(qz.levels):
        a, b = qz.cell_bounds(q)
        last = q == qz.levels - 1
        out[q] = a <= rhi and (b > rlo or (last and b >= rlo))
    return out


def property_masks(spec: Spec) -> list[MaskBox]:
    """One MaskBox per ``forbid``/``require`` property: the cells that meet its region
    (a box of levels, since regions are boxes) and the actions it allows there.
    Properties whose region meets no cell are left out."""
    out = []
    n = len(spec.actions)
    for p in spec.properties:
        if p.kind not in ("forbid", "require"):
            continue
        ranges = {i: (a, b) for i, a, b in p.when}
        lo, hi = [], []
        for i, inp in enumerate(spec.inputs):
            lv = np.nonzero(levels_meeting(inp, *ranges.get(i, (inp.min, inp.max))))[0]
            lo.append(int(lv[0]) if lv.size else 1)
            hi.append(int(lv[-1]) if lv.size else 0)
        if any(a > b for a, b in zip(lo, hi)):
            continue
        allowed = [a for a in range(n) if (a not in p.forbid if p.kind == "forbid" else a in p.require)]
        out.append(MaskBox(p.id, tuple(lo), tuple(hi), tuple(i.bits for i in spec.inputs),
                           sum(1 << a for a in allowed)))
    return out


def allowed_table(spec: Spec, masks: list[MaskBox]) -> np.ndarray:
    """(2^address_bits,) int64 bitmask of the allowed actions per address."""
    full = (1 << len(spec.actions)) - 1
    table = np.full(1 << spec.address_bits, full, dtype=np.int64)
    for m in masks:
        sel = np.ones(1, dtype=bool)
        for lo, hi, b in zip(m.lo, m.hi, m.bits):
            lv = np.zeros(1 << b, dtype=bool)
            lv[lo:hi + 1] = True
            sel = (sel[:, None] & lv[None, :]).reshape(-1)
        table[sel] &= m.allowed
    return table


def apply_masks(spec: Spec, lut: Lut, masks: list[MaskBox]) -> tuple[Lut, list[dict]]:
    """Override every LUT cell whose proposal a property does not allow there: it
    proposes the conservative action (allowed everywhere: the spec checks it), confident,
    and its status becomes RESOLVED.

    Returns:
        (the LUT after override, [{"address", "was", "now", "properties"}] per overridden cell).
    """
    table = allowed_table(spec, masks)
    bad = np.nonzero(((table >> lut.tokens.astype(np.int64)) & 1) == 0)[0]
    tokens, conf = lut.tokens.copy(), lut.confident.copy()
    tokens[bad] = spec.conservative
    conf[bad] = True
    status = lut.status.copy()
    status[bad] = RESOLVED  # no longer the network's choice
    listed = []
    for a in bad:
        ids = [m.id for m in masks if m.contains(int(a)) and not (m.allowed >> int(lut.tokens[a])) & 1]
        listed.append({"address": int(a), "was": spec.actions[int(lut.tokens[a])].name,
                       "now": spec.actions[spec.conservative].name, "properties": ids})
    return Lut(tokens, conf, status), listed
