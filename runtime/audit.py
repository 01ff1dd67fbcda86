"""Tamper-evident, crash-safe audit log of controller decisions (JSON Lines).

Format ``mi-certify/audit-v1`` (normative text: docs/runtime.md, "Audit log"):

- One JSON object per line, UTF-8 (ASCII only), ``\\n`` terminated, appended with
  one ``write(2)`` per record on a file opened ``O_APPEND`` (no user-space buffer,
  so a killed process loses nothing that ``append`` returned).
- Every record starts ``{"seq":N,"kind":K,`` and ends ``"prev":H}`` where N counts
  0, 1, 2 … over the whole file, K is ``open`` (a writer session starts; its
  fields describe the controller, the build and the policy), ``decision``,
  ``command`` (an operator command, docs/operator.md) or ``close``, and H is the
  SHA-256 (hex) of the previous line's bytes without its newline (64 zeros for seq 0).
- With an HMAC key, ``,"mac":M}`` replaces the final ``}``: M is HMAC-SHA256(key,
  the line up to and including the ``"prev"`` value followed by ``}``). Without
  the key nobody can produce a valid record, so an edit cannot be hidden by
  rebuilding the chain. The ``open`` record names the key by ``key_id`` =
  HMAC-SHA256(key, "mi-certify audit key id")[:16 hex], never the key itself.
- fsync policy: ``always`` (``append`` returns after ``fsync``: the record survives
  a power loss), ``every:N`` (``fsync`` after every N-th record and at close), ``never``
  (the kernel writes back; the record survives a killed process, not a power loss).
  In every policy a record is *acknowledged* when ``append`` returns.
- A crash can leave a torn last line (bytes without the final newline). The
  verifier reports it and ignores it; a writer that reopens the log cuts it off
  and records its length and SHA-256 in the new ``open`` record.

Public surface: :class:`AuditLog` (writer; ``AuditLog.append_step`` is the fast path for
the generated runtime's ``Controller.step_record``), :func:`verify_log` (checker),
:func:`read_records` (parser used by replay), :func:`load_key`, :func:`encode_decision`,
:func:`encode_step`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import numbers
import os
import re
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import orjson

from .quantize import exact_value

__all__ = ["AUDIT_FORMAT", "AuditError", "AuditLog", "AuditReport", "Finding", "Receipt", "encode_decision",
           "encode_step", "load_key", "parse_anchor", "read_records", "verify_log", "key_id"]

AUDIT_FORMAT = "mi-certify/audit-v1"
GENESIS = "0" * 64
_MAC_TAIL = re.compile(rb',"mac":"([0-9a-f]{64})"\}$')
_HEAD = re.compile(rb'^\{"seq":(0|[1-9][0-9]{0,17}),"kind":"(open|decision|command|close)",')
_PREV_TAIL = re.compile(rb',"prev":"([0-9a-f]{64})"\}$')
MIN_KEY_BYTES = 16


class AuditError(Exception):
    """The audit log or key cannot be used: missing, unreadable, foreign, or not a log.

    Attributes: ``file`` (path), ``reason`` (one sentence). ``str()`` is one line.
    """

    def __init__(self, reason: str, file: str | os.PathLike | None = None):
        self.file = None if file is None else str(file)
        self.reason = reason
        super().__init__(f"{self.file}: {reason}" if self.file else reason)


def load_key(path: str | os.PathLike) -> bytes:
    """Read an HMAC key file (raw bytes, at least 16). Raises AuditError."""
    try:
        key = Path(path).read_bytes()
    except OSError as exc:
        raise AuditError(f"cannot read the key file: {exc.strerror or exc}", path) from None
    if len(key) < MIN_KEY_BYTES:
        raise AuditError(f"key file holds {len(key)} bytes; at least {MIN_KEY_BYTES} are required", path)
    return key


def key_id(key: bytes) -> str:
    """Public identifier of a key (16 hex digits); reveals nothing usable about the key."""
    return hmac.new(key, b"mi-certify audit key id", hashlib.sha256).hexdigest()[:16]


def _num(x) -> str:
    """A number as JSON text: integers (numpy's too) exactly, floats by repr (shortest
    round trip), non-finite as strings, None as null. A real that is no binary64 value (a
    Fraction, a longdouble with more precision) is written exactly as a string ``"n/d"``,
    so a replay quantizes the value the controller quantized."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, numbers.Integral):
        return str(int(x))
    if type(x) is float:
        f = x
    else:
        exact = exact_value(x)
        try:
            f = float(x)
        except (OverflowError, TypeError, ValueError):
            f = math.nan if exact is None else math.inf if exact > 0 else -math.inf
        if exact is not None and (not math.isfinite(f) or Fraction(f) != exact):
            return f'"{exact.numerator}/{exact.denominator}"'
    if math.isfinite(f):
        return repr(f)
    return '"nan"' if math.isnan(f) else ('"inf"' if f > 0 else '"-inf"')


def _json_clean(obj):
    """Replace non-finite floats by strings so any payload is valid JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_clean(v) for v in obj]
    return obj


_INF = math.inf


def _readings(values) -> bytes:
    """JSON array of readings: floats in shortest round-trip form, None as null,
    non-finite as strings ("nan", "inf", "-inf").

    Fast path: orjson (Ryu shortest round-trip digits, about 15x faster than ``repr``
    on 17-digit floats); it writes null for NaN and inf, so any null sends the values
    to the exact slow path, which tells None and non-finite values apart.
    """
    try:
        text = orjson.dumps(values)  # no numpy option: it would print float32 values in float32 digits
    except (TypeError, orjson.JSONEncodeError):  # numpy scalars, Fractions ...: the exact slow path
        text = b"null"
    if 110 in text and b"null" in text:  # 110 = "n": a one-byte memchr first (orjson numbers have no "n")
        text = ("[" + ",".join(map(_num, values)) + "]").encode("ascii")
    return text


def _number(x) -> bytes:
    """A measured number as JSON bytes: finite floats in shortest round-trip form, None as
    null, non-finite as strings (fail closed: +inf is a violation, never a null)."""
    if x is None or (type(x) is float and -_INF < x < _INF):
        return orjson.dumps(x)
    return _num(x).encode("ascii")


_JSON_BOOL = {True: b"true", False: b"false", None: b"null"}
_dumps = orjson.dumps
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_mono_ns = time.monotonic_ns
_wall_ns = time.time_ns
# One template per case, so that no field is formatted twice: a step with a LUT
# address, and a probe fault (no address, no LUT entry).
_DECISION = (b'"t_mono_ns":%d,"t_wall_ns":%d,"readings":%s%s,"addr":%d,"probe_fault":%s,"proposal":%d,'
             b'"confident":%s,"sla_violation":%s,"before":%s,"after":%s,"token":%d,"action":"%s","reason":"%s",'
             b'"latency_ms":%s,"accuracy_loss_pct":%s')
_DECISION_FAULT = (b'"t_mono_ns":%d,"t_wall_ns":%d,"readings":%s%s,"addr":null,"probe_fault":%s,"proposal":null,'
                   b'"confident":null,"sla_violation":%s,"before":%s,"after":%s,"token":%d,"action":"%s",'
                   b'"reason":"%s","latency_ms":%s,"accuracy_loss_pct":%s')
_DECISION_ANY = _DECISION.replace(b'"addr":%d', b'"addr":%s').replace(b'"proposal":%d', b'"proposal":%s')
_VERDICT = (b',"verdict":{"action":%d,"violation":%s,"latency":%s,"accuracy":%s,"latency_ms":%s,'
            b'"accuracy_loss_pct":%s,"samples":%d}')
_ASCII: dict = {}  # action and reason names as bytes (a handful of identifiers)


def _ascii(name: str) -> bytes:
    b = _ASCII.get(name)
    if b is None:
        b = name.encode("ascii")
        if len(_ASCII) < 1024:
            _ASCII[name] = b
    return b


def _as_bytes(text: str | bytes) -> bytes:
    """A JSON text given as str or ASCII bytes, as bytes."""
    return text if type(text) is bytes else text.encode("ascii")


def _encode(readings, addr, probe_fault, proposal, confident, sla_violation, before, after, token, action, reason,
            latency_ms, accuracy_loss_pct, verdict, probes_json, extra_json, operator_json=None) -> bytes:
    """:func:`encode_decision` with positional arguments (the hot path)."""
    lat = (_dumps(latency_ms) if type(latency_ms) is float and -_INF < latency_ms < _INF
           else _number(latency_ms))
    acc = (_dumps(accuracy_loss_pct) if type(accuracy_loss_pct) is float and -_INF < accuracy_loss_pct < _INF
           else _number(accuracy_loss_pct))
    probes = (b"" if probes_json is None else
              b',"probes":' + _as_bytes(probes_json))
    if addr is not None and proposal is not None:
        text = _DECISION % (
            _mono_ns(), _wall_ns(), _readings(readings), probes, addr, b"true" if probe_fault else b"false",
            proposal, b"null" if confident is None else b"true" if confident else b"false",
            b"true" if sla_violation else b"false", _dumps(before, option=_NUMPY), _dumps(after, option=_NUMPY),
            token, _ascii(action), _ascii(reason), lat, acc)
    elif addr is None and proposal is None and confident is None:
        text = _DECISION_FAULT % (
            _mono_ns(), _wall_ns(), _readings(readings), probes,
            b"true" if probe_fault else b"false", b"true" if sla_violation else b"false",
            _dumps(before, option=_NUMPY), _dumps(after, option=_NUMPY), token, _ascii(action), _ascii(reason),
            lat, acc)
    else:  # mixed (not produced by the runtime): every field on its own
        text = _DECISION_ANY % (
            _mono_ns(), _wall_ns(), _readings(readings), probes,
            b"null" if addr is None else b"%d" % addr, b"true" if probe_fault else b"false",
            b"null" if proposal is None else b"%d" % proposal,
            b"null" if confident is None else b"true" if confident else b"false",
            b"true" if sla_violation else b"false", _dumps(before, option=_NUMPY), _dumps(after, option=_NUMPY),
            token, _ascii(action), _ascii(reason), lat, acc)
    if verdict is not None:
        text += _VERDICT % (verdict.action, _JSON_BOOL[bool(verdict.violation)], _JSON_BOOL[bool(verdict.latency)],
                            _JSON_BOOL[bool(verdict.accuracy)], _number(verdict.latency_ms),
                            _number(verdict.accuracy_loss_pct), verdict.samples)
    if extra_json is not None:
        text += b',"extra":' + _as_bytes(extra_json)
    if operator_json is not None:
        text += b',"operator":' + _as_bytes(operator_json)
    return text


def encode_decision(*, readings: Sequence, addr: int | None, probe_fault: bool, proposal: int | None,
                    confident: bool | None, sla_violation: bool, before: Sequence[int], after: Sequence[int],
                    token: int, action: str, reason: str, latency_ms=None, accuracy_loss_pct=None,
                    verdict=None, probes_json: str | None = None, extra_json: str | None = None,
                    operator_json: str | None = None) -> bytes:
    """JSON text (ASCII bytes) of the fields of one ``decision`` record, without braces,
    seq, kind and prev: the argument of :meth:`AuditLog.append_fields`.

    The hot path of the live loop: a fixed-order byte template; numbers through orjson.
    Floats are written in shortest round-trip form (they parse back to the same binary64
    value), NaN/inf as strings, None as null. ``action``/``reason`` must be ASCII
    identifiers (the spec guarantees it). ``verdict`` is a
    :class:`mi_certify.runtime.sla.SlaVerdict` or None; ``probes_json``/``extra_json``
    are JSON texts (str, or ASCII bytes) placed as the values of ``"probes"``/``"extra"``; ``operator_json`` (a build
    with sla.yaml ``operator:``) the value of ``"operator"``: the step's command and the override
    state around it (docs/operator.md). Times:
    ``time.monotonic_ns()`` and ``time.time_ns()``. :func:`encode_step` is the same
    with positional arguments taken from the generated runtime's ``step_record``.
    """
    return _encode(readings, addr, probe_fault, proposal, confident, sla_violation, before, after, token, action,
                   reason, latency_ms, accuracy_loss_pct, verdict, probes_json, extra_json, operator_json)


def encode_step(step: tuple, readings: Sequence, sla_violation: bool, action: str, reason: str, latency_ms=None,
                accuracy_loss_pct=None, verdict=None, probes_json: str | None = None,
                extra_json: str | None = None) -> bytes:
    """:func:`encode_decision` of one step of the generated runtime, positional (the fastest path).

    ``step``: the tuple ``Controller.step_record(readings, sla_violation)`` returned,
    ``(addr, probe_fault, proposal, confident, before, after, token, reason)`` (its reason
    is the index; ``action``/``reason`` are the names, ``ACTIONS[token]`` and
    ``REASONS[reason]``). ``readings``: the values that were quantized. Other arguments
    and the result as for :func:`encode_decision`; the bytes are the same.
    """
    addr, probe_fault, proposal, confident, before, after, token, _reason = step
    if (verdict is None and probes_json is None and extra_json is None and addr is not None and proposal is not None
            and type(latency_ms) is float and -_INF < latency_ms < _INF
            and type(accuracy_loss_pct) is float and -_INF < accuracy_loss_pct < _INF):
        # the common step, written out (one call less); the same template and bytes as _encode
        return _DECISION % (
            _mono_ns(), _wall_ns(), _readings(readings), b"", addr, b"true" if probe_fault else b"false", proposal,
            b"null" if confident is None else b"true" if confident else b"false",
            b"true" if sla_violation else b"false", _dumps(before, option=_NUMPY), _dumps(after, option=_NUMPY),
            token, _ascii(action), _ascii(reason), _dumps(latency_ms), _dumps(accuracy_loss_pct))
    return _encode(readings, addr, probe_fault, proposal, confident, sla_violation, before, after, token, action,
                   reason, latency_ms, accuracy_loss_pct, verdict, probes_json, extra_json)


def _parse_fsync(policy: str) -> int:
    """fsync period in records: 1 = always, 0 = never, N = every N records."""
    if policy == "always":
        return 1
    if policy == "never":
        return 0
    m = re.fullmatch(r"every:([1-9][0-9]{0,6})", policy)
    if m:
        return int(m.group(1))
    raise AuditError(f"unknown fsync policy {policy!r} (always, never, every:N)")


class Receipt(NamedTuple):
    """Acknowledgement of one appended record: its ``seq``, SHA-256 and whether it was fsynced."""

    seq: int
    sha256: str
    synced: bool


#: A whole decision line without key (append_step): the head, the record template, the prev tail.
_DECISION_LINE = b'{"seq":%d,"kind":"decision",' + _DECISION + b',"prev":"%s"}\n'
# The live loop's whole decision line without key (append_decision): the head, the record, the verdict,
# the extra fields (b"" or ',"extra":' and their JSON), the operator fields (b"" or ',"operator":' and
# theirs), the prev tail; the bytes _encode's template and append_fields' head and tail give.
_LIVE_LINE = b'{"seq":%d,"kind":"decision",' + _DECISION + _VERDICT + b'%s%s,"prev":"%s"}\n'
_new_tuple = tuple.__new__
_sha256 = hashlib.sha256


class AuditLog:
    """Append-only writer of a ``mi-certify/audit-v1`` log.

    Args:
        path: the log file; created if missing. An existing log is continued: its
            torn last line (if any) is cut off and recorded, the chain goes on from
            its last complete record.
        key: HMAC key (bytes) or None (hash chain only). A log started with a key
            must be continued with the same key, and one started without a key
            without one.
        fsync: ``always``, ``never`` or ``every:N``.
        header: JSON-serializable fields of the ``open`` record (controller, build
            hashes, policy …).
    Raises:
        AuditError if the file cannot be opened, is not an audit log, or the key
        does not match.
    """

    def __init__(self, path: str | os.PathLike, *, key: bytes | None = None, fsync: str = "always",
                 header: dict | None = None):
        self.path = Path(path)
        self._period = _parse_fsync(fsync)
        self._key = key
        self._unsynced = 0
        self.closed = False
        created = not self.path.exists()
        self.failed: str | None = None  # why a write failed (the log is then closed: no record after it)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o640)
        except OSError as exc:
            raise AuditError(f"cannot open the audit log: {exc.strerror or exc}", path) from None
        try:
            _lock(self._fd, self.path)  # one writer at a time: two chains never interleave in one file
            recovered = self._resume()
            if created and self._period:
                dfd = os.open(self.path.parent if str(self.path.parent) else ".", os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
            fields = {"format": AUDIT_FORMAT, "fsync": fsync, "pid": os.getpid(),
                      "key_id": key_id(key) if key else None, **(header or {})}
            if recovered:
                fields["recovered"] = recovered
            self.append("open", fields)
        except BaseException:
            if not self.closed:  # a failed "open" record already closed it (_commit)
                self.closed = True
                os.close(self._fd)
            raise

    # -- internals ------------------------------------------------------------------
    def _resume(self) -> dict | None:
        size = os.fstat(self._fd).st_size
        self.seq, self._prev = 0, GENESIS.encode("ascii")
        if size == 0:
            return None
        data = os.pread(self._fd, size, 0)
        end = data.rfind(b"\n") + 1
        torn = data[end:]
        if end == 0:
            raise AuditError("holds no complete record; not an audit log (or torn at its first record)", self.path)
        last = data[data.rfind(b"\n", 0, end - 1) + 1:end - 1]
        first = data[:data.find(b"\n")]
        m = _HEAD.match(last)
        try:
            head = json.loads(first)
            if not m or head.get("format") != AUDIT_FORMAT:
                raise ValueError
        except ValueError:
            raise AuditError("is not a mi-certify/audit-v1 log (run 'mi-certify audit verify')", self.path) from None
        want = key_id(self._key) if self._key else None
        if head.get("key_id") != want:
            raise AuditError("was started " + (f"with key {head.get('key_id')}" if head.get("key_id") else
                                               "without a key") + ", now " +
                             (f"key {want}" if want else "no key") + " is given; continue it with the same key",
                             self.path)
        self.seq = int(m.group(1)) + 1
        self._prev = hashlib.sha256(last).hexdigest().encode("ascii")
        if torn:
            os.truncate(self.path, end)
            return {"torn_bytes": len(torn), "torn_sha256": hashlib.sha256(torn).hexdigest()}
        return None

    def _write(self, line: bytes) -> None:
        view = memoryview(line)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    # -- public ---------------------------------------------------------------------
    def append_fields(self, kind: str, fields_json: str | bytes) -> Receipt:
        """Append one record whose fields (between ``kind`` and ``prev``) are the JSON text
        ``fields_json`` (``"a":1,"b":[2]``, may be empty; str or ASCII bytes). Returns when
        acknowledged (written, and fsynced as the policy says)."""
        if self.closed:
            raise AuditError(self.failed or "the audit log is closed", self.path)
        if type(fields_json) is str:
            fields_json = fields_json.encode("ascii")
        seq = self.seq
        if self._key is None:
            line = (b'{"seq":%d,"kind":"%s",%s,"prev":"%s"}\n' if fields_json else
                    b'{"seq":%d,"kind":"%s"%s,"prev":"%s"}\n') % (seq, _ascii(kind), fields_json, self._prev)
        else:
            body = (b'{"seq":%d,"kind":"%s",%s,"prev":"%s"' if fields_json else
                    b'{"seq":%d,"kind":"%s"%s,"prev":"%s"') % (seq, kind.encode("ascii"), fields_json, self._prev)
            mac = hmac.new(self._key, body + b"}", hashlib.sha256).hexdigest()
            line = body + b',"mac":"%s"}\n' % mac.encode("ascii")
        return self._commit(seq, line)

    def _commit(self, seq: int, line: bytes) -> Receipt:
        """Write record ``seq`` (one whole line) with one write(2), fsync as the policy says,
        advance the chain; the acknowledgement. A failed write or fsync (disk full, I/O error)
        closes the log and raises AuditError: the record is not acknowledged, a part of it written
        is a torn last line (as after a crash), and no later record follows it."""
        synced = False
        try:
            n = os.write(self._fd, line)
            if n != len(line):
                self._write(line[n:])
            if self._period:
                self._unsynced += 1
                if self._unsynced >= self._period:
                    os.fsync(self._fd)
                    self._unsynced = 0
                    synced = True
        except OSError as exc:
            self.failed = f"cannot write the audit log: {exc.strerror or exc}"
            self.closed = True
            os.close(self._fd)
            raise AuditError(self.failed, self.path) from None
        digest = _sha256(line[:-1]).hexdigest()
        self._prev = digest.encode("ascii")
        self.seq = seq + 1
        return _new_tuple(Receipt, (seq, digest, synced))  # = Receipt(seq, digest, synced), without its Python __new__

    def append_step(self, step: tuple, readings: Sequence, sla_violation: bool, action: str, reason: str,
                    latency_ms=None, accuracy_loss_pct=None, verdict=None, probes_json: str | None = None,
                    extra_json: str | None = None) -> Receipt:
        """Append the ``decision`` record of one step of the generated runtime: the same
        record as ``append_fields("decision", encode_step(step, readings, ...))`` (arguments
        as for :func:`encode_step`), in one call; the fastest path. Without a key, for a
        step with a LUT address and finite measurements and nothing else, the whole line
        is one byte template (the record template between the seq/kind head and the prev
        tail), else it takes that two-call path. Returns when acknowledged."""
        addr, probe_fault, proposal, confident, before, after, token, _reason = step
        if (self._key is not None or self.closed or verdict is not None or probes_json is not None
                or extra_json is not None or addr is None or proposal is None
                or type(latency_ms) is not float or not -_INF < latency_ms < _INF
                or type(accuracy_loss_pct) is not float or not -_INF < accuracy_loss_pct < _INF):
            return self.append_fields("decision", encode_step(step, readings, sla_violation, action, reason,
                                                              latency_ms, accuracy_loss_pct, verdict, probes_json,
                                                              extra_json))
        seq = self.seq
        line = _DECISION_LINE % (
            seq, _mono_ns(), _wall_ns(), _readings(readings), b"", addr, b"true" if probe_fault else b"false",
            proposal, b"null" if confident is None else b"true" if confident else b"false",
            b"true" if sla_violation else b"false", _dumps(before, option=_NUMPY), _dumps(after, option=_NUMPY),
            token, _ascii(action), _ascii(reason), _dumps(latency_ms), _dumps(accuracy_loss_pct), self._prev)
        return self._commit(seq, line)

    def append_decision(self, readings, addr, probe_fault, proposal, confident, sla_violation, before, after,
                        token, action, reason, latency_ms, accuracy_loss_pct, verdict, probes_json=None,
                        extra_json=None, operator_json=None) -> Receipt:
        """Append one ``decision`` record: the same bytes as ``append_fields("decision",
        encode_decision(...))`` with these arguments (positional, in :func:`encode_decision`'s order;
        ``probes_json``/``extra_json`` as ASCII bytes or str), in one call: the live loop's path
        (:meth:`~mi_certify.runtime.live.ControlLoop.complete`). Without a key, for a step with a LUT
        address and a verdict, the whole line is one byte template; any other record takes the
        two-call path. Returns when acknowledged."""
        if self._key is not None or self.closed or verdict is None or addr is None or proposal is None:
            return self.append_fields("decision", _encode(
                readings, addr, probe_fault, proposal, confident, sla_violation, before, after, token, action,
                reason, latency_ms, accuracy_loss_pct, verdict, probes_json, extra_json, operator_json))
        try:   # _readings, inlined
            text = _dumps(readings)
        except (TypeError, orjson.JSONEncodeError):
            text = b"null"
        if 110 in text and b"null" in text:
            text = ("[" + ",".join(map(_num, readings)) + "]").encode("ascii")
        lat, acc = verdict.latency_ms, verdict.accuracy_loss_pct
        seq = self.seq
        line = _LIVE_LINE % (
            seq, _mono_ns(), _wall_ns(), text,
            b"" if probes_json is None else b',"probes":' + (
                probes_json if type(probes_json) is bytes else probes_json.encode("ascii")),
            addr, b"true" if probe_fault else b"false", proposal,
            b"null" if confident is None else b"true" if confident else b"false",
            b"true" if sla_violation else b"false", _dumps(before, option=_NUMPY), _dumps(after, option=_NUMPY),
            token, _ascii(action), _ascii(reason),
            _dumps(latency_ms) if type(latency_ms) is float and -_INF < latency_ms < _INF else _number(latency_ms),
            _dumps(accuracy_loss_pct) if type(accuracy_loss_pct) is float and -_INF < accuracy_loss_pct < _INF
            else _number(accuracy_loss_pct),
            verdict.action, b"true" if verdict.violation else b"false", b"true" if verdict.latency else b"false",
            b"true" if verdict.accuracy else b"false",
            _dumps(lat) if type(lat) is float and -_INF < lat < _INF else _number(lat),
            _dumps(acc) if type(acc) is float and -_INF < acc < _INF else _number(acc), verdict.samples,
            b"" if extra_json is None else b',"extra":' + (
                extra_json if type(extra_json) is bytes else extra_json.encode("ascii")),
            b"" if operator_json is None else b',"operator":' + (
                operator_json if type(operator_json) is bytes else operator_json.encode("ascii")),
            self._prev)
        return self._commit(seq, line)

    @property
    def prev(self) -> str:
        """SHA-256 (hex) of the last record written: the ``prev`` of the next one."""
        return self._prev.decode("ascii")

    def append(self, kind: str, fields: dict) -> Receipt:
        """Append one record with arbitrary JSON fields (keys sorted; non-finite floats as strings)."""
        text = json.dumps(_json_clean(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
        return self.append_fields(kind, text[1:-1])

    def close(self, fields: dict | None = None) -> Receipt | None:
        """Append the ``close`` record, fsync (unless the policy is ``never``), close the file.
        None (nothing written) when a write failed before: the file is closed already."""
        if self.failed is not None:
            return None
        receipt = self.append("close", {"records": self.seq + 1, **(fields or {})})
        if self._period and not receipt.synced:
            os.fsync(self._fd)
        os.close(self._fd)
        self.closed = True
        return receipt

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.closed:
            self.close()


def _lock(fd: int, path: Path) -> None:
    """An exclusive flock on the log for as long as this writer holds it open (the kernel drops it when
    the process dies); AuditError when another writer holds it."""
    try:
        import fcntl
    except ImportError:  # no flock on this platform: one writer is the caller's duty
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise AuditError("is open by another writer (a log has one writer at a time; wait for it to close, "
                         "or write to another log)", path) from None


# ---------------------------------------------------------------------------------------
# Reading and verifying


@dataclass
class Line:
    """One complete line of a log: 1-based ``line`` number, raw bytes, parsed record or None."""

    line: int
    raw: bytes
    record: dict | None
    sha256: str
    seq: int | None = None
    prev: str | None = None
    mac_ok: bool | None = None  # None: no key given


@dataclass(frozen=True)
class Finding:
    """One integrity finding: ``kind`` edited / removed / inserted / reordered / unreadable / anchor,
    the record index ``seq`` (None if unknown) and the 1-based ``line`` (None for removed)."""

    kind: str
    seq: int | None
    line: int | None
    detail: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "seq": self.seq, "line": self.line, "detail": self.detail}


@dataclass
class AuditReport:
    """Result of :func:`verify_log`. ``ok``: no finding. ``torn_tail``: bytes of a torn last
    line (ignored), 0 if none. ``closed``: the last record is a ``close`` record.
    ``head``: SHA-256 of the last complete line (keep it elsewhere to protect the tail)."""

    path: str
    records: int
    findings: list[Finding] = field(default_factory=list)
    torn_tail: int = 0
    closed: bool = False
    head: str = GENESIS
    authenticated: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return {"path": self.path, "ok": self.ok, "records": self.records, "torn_tail_bytes": self.torn_tail,
                "closed": self.closed, "head_sha256": self.head, "authenticated": self.authenticated,
                "findings": [f.to_json() for f in self.findings], "notes": self.notes}


def read_records(path: str | os.PathLike, key: bytes | None = None) -> tuple[list[Line], bytes]:
    """Split a log into complete lines (parsed where possible) and the torn tail.

    Returns:
        (lines, torn) where ``torn`` holds the bytes after the last newline.
    Raises:
        AuditError if the file cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AuditError(f"cannot read the audit log: {exc.strerror or exc}", path) from None
    end = data.rfind(b"\n") + 1
    torn = data[end:]
    out = []
    for i, raw in enumerate(data[:end].split(b"\n")[:-1], 1):
        ln = Line(i, raw, None, hashlib.sha256(raw).hexdigest())
        m, p = _HEAD.match(raw), _PREV_TAIL.search(raw) or _prev_before_mac(raw)
        try:
            rec = json.loads(raw)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and m and p and rec.get("seq") == int(m.group(1)):
            ln.record, ln.seq, ln.prev = rec, int(m.group(1)), p.group(1).decode()
        if key is not None:
            mm = _MAC_TAIL.search(raw)
            if mm is None:
                ln.mac_ok = False
            else:
                body = raw[:mm.start()] + b"}"
                ln.mac_ok = hmac.compare_digest(hmac.new(key, body, hashlib.sha256).hexdigest().encode(), mm.group(1))
        out.append(ln)
    return out, torn


def _prev_before_mac(raw: bytes):
    mm = _MAC_TAIL.search(raw)
    return _PREV_TAIL.search(raw[:mm.start()] + b"}") if mm else None


def _longest_increasing(seqs: list[int]) -> set[int]:
    """Indices (into ``seqs``) of one longest strictly increasing subsequence (patience sorting)."""
    import bisect
    tails, tails_idx, parent = [], [], [-1] * len(seqs)
    for i, s in enumerate(seqs):
        j = bisect.bisect_left(tails, s)
        if j == len(tails):
            tails.append(s)
            tails_idx.append(i)
        else:
            tails[j], tails_idx[j] = s, i
        parent[i] = tails_idx[j - 1] if j else -1
    keep, i = set(), tails_idx[-1] if tails_idx else -1
    while i >= 0:
        keep.add(i)
        i = parent[i]
    return keep


def parse_anchor(text: str) -> tuple[int | None, str]:
    """``[SEQ:]SHA256`` (64 hex digits) -> (seq or None, sha). Raises AuditError."""
    m = re.fullmatch(r"(?:(0|[1-9][0-9]{0,17}):)?([0-9a-fA-F]{64})", text.strip())
    if not m:
        raise AuditError(f"anchor {text!r} is not [SEQ:]SHA256 (64 hex digits), e.g. the head sha256 that "
                         "'audit verify' or 'run' printed")
    return (None if m.group(1) is None else int(m.group(1))), m.group(2).lower()


def verify_log(path: str | os.PathLike, key: bytes | None = None, anchors: Sequence[str] = ()) -> AuditReport:
    """Check a log's hash chain (and MACs with ``key``) and locate every tampered record.

    ``anchors``: hashes kept outside the log (``[SEQ:]SHA256``, e.g. the head hash
    ``run`` prints at close, or a :class:`Receipt` sent to another system). Each must
    be the SHA-256 of one intact record of the chain (at that seq, if given);
    otherwise the finding ``anchor`` is reported. An anchor is what detects, without
    a key, a chain rebuilt after an edit before it, and records removed from the end.

    Rules (docs/runtime.md): records are identified by ``seq``. A seq that no line
    carries is *removed*; a second line with a seq already present (not the one the
    chain links) or a line with a bad MAC and a duplicate seq is *inserted*; lines out
    of seq order (outside one longest increasing run, or with neither file neighbour
    its seq neighbour: both records of a swap) are *reordered*; a record whose
    MAC fails (with ``key``), or whose successor's ``prev`` is not its hash (without
    key), is *edited*; a line that is not a record is *unreadable* (or, when it sits
    where exactly one missing seq belongs, that seq is *edited*). A torn last line is
    reported in ``torn_tail`` and is not a finding.

    Raises:
        AuditError if the file cannot be read.
    """
    wanted = [parse_anchor(a) for a in anchors]
    lines, torn = read_records(path, key)
    rep = AuditReport(str(path), records=0, torn_tail=len(torn), authenticated=key is not None)
    if torn:
        rep.notes.append(f"torn last line ({len(torn)} bytes without a newline: a write cut short by a crash); "
                         "ignored")
    if not lines:
        if not torn:
            rep.notes.append("the log is empty")
        rep.findings = [Finding("anchor", seq, None, f"anchored record {sha} is not in the log")
                        for seq, sha in wanted]
        return rep
    rep.head = lines[-1].sha256
    good = [ln for ln in lines if ln.record is not None]
    findings: list[Finding] = []
    original = _originals(good, findings)
    rep.records = len(original)
    max_seq = max(original) if original else -1
    _gap_findings(lines, original, max_seq, findings)
    in_order = _order_findings(original, findings)
    _content_findings(original, key, rep, findings)
    last = original.get(max_seq)
    rep.closed = last is not None and last.record.get("kind") == "close" and last is in_order[-1]
    if not rep.closed:
        rep.notes.append("no close record at the end: the writer stopped without closing (crash or kill), or "
                         "records at the end were removed; only an externally kept head hash protects the tail")
    if key is None and any(_MAC_TAIL.search(ln.raw) for ln in good):
        rep.notes.append("records carry MACs: verify with --key to check them (without it, a rebuilt chain "
                         "is not detected)")
    _anchor_findings(original, wanted, rep, findings)
    unique: dict[tuple, Finding] = {}
    for f in findings:
        unique.setdefault((f.kind, f.seq, f.line), f)
    rep.findings = sorted(unique.values(), key=lambda f: (f.seq if f.seq is not None else -1, f.line or 0, f.kind))
    return rep


def _originals(good: list[Line], findings: list[Finding]) -> dict[int, Line]:
    """{seq: the original line of that seq}: among lines sharing a seq, the one with a valid MAC
    that its successor links to (else the first); the others are findings *inserted*."""
    by_seq: dict[int, list[Line]] = {}
    for ln in good:
        by_seq.setdefault(ln.seq, []).append(ln)
    linked = {ln.prev for ln in good}
    original: dict[int, Line] = {}
    for s, group in by_seq.items():
        if len(group) == 1:
            original[s] = group[0]
            continue
        def rank(ln):
            return (ln.mac_ok is not False, ln.sha256 in linked, -ln.line)
        best = max(group, key=rank)
        original[s] = best
        for ln in group:
            if ln is not best:
                findings.append(Finding("inserted", s, ln.line, f"a second record with seq {s}"))
    return original


def _gap_findings(lines: list[Line], original: dict[int, Line], max_seq: int, findings: list[Finding]) -> None:
    """Unreadable lines (or, where one sits in place of exactly one missing seq, that seq *edited*),
    and seqs 0..max_seq no line carries (*removed*)."""
    missing = [s for s in range(max_seq + 1) if s not in original]
    claimed: set[int] = set()
    line_of = {s: ln.line for s, ln in original.items()}
    for ln in lines:
        if ln.record is not None:
            continue
        # an unreadable line right between seq s-1 and s+1 is record s, edited
        cand = [s for s in missing if line_of.get(s - 1, 0) == ln.line - 1 or line_of.get(s + 1) == ln.line + 1]
        if len(cand) == 1 and cand[0] not in claimed:
            claimed.add(cand[0])
            findings.append(Finding("edited", cand[0], ln.line, "the line is no longer a valid record"))
        else:
            findings.append(Finding("unreadable", None, ln.line, "not an audit record (edited or inserted)"))
    for s in missing:
        if s not in claimed:
            findings.append(Finding("removed", s, None, f"no record with seq {s}"))


def _order_findings(original: dict[int, Line], findings: list[Finding]) -> list[Line]:
    """Originals in file order must have increasing seq: every line outside one longest increasing
    run, or with neither file neighbour its seq neighbour, is *reordered*. Returns the originals in
    file order."""
    in_order = sorted(original.values(), key=lambda ln: ln.line)
    keep = _longest_increasing([ln.seq for ln in in_order])
    by_rank = sorted(original)
    rank = {s: i for i, s in enumerate(by_rank)}
    for i, ln in enumerate(in_order):
        r = rank[ln.seq]
        pred_ok = (in_order[i - 1].seq == by_rank[r - 1]) if i and r else (i == 0 and r == 0)
        succ_ok = (in_order[i + 1].seq == by_rank[r + 1]) if i + 1 < len(in_order) and r + 1 < len(by_rank) \
            else (i + 1 == len(in_order) and r + 1 == len(by_rank))
        if i not in keep or not (pred_ok or succ_ok):
            findings.append(Finding("reordered", ln.seq, ln.line, "out of seq order"))
    return in_order


def _content_findings(original: dict[int, Line], key: bytes | None, rep: AuditReport,
                      findings: list[Finding]) -> None:
    """Content: with a key, every MAC; otherwise the successor's prev link; the genesis link of
    record 0 and its kind. A key under which no record's MAC verifies is said once in the notes."""
    if key is not None and original and all(ln.mac_ok is False for ln in original.values()):
        rep.notes.insert(0, "no record's MAC verifies with this key: the wrong key, a log written without a key, "
                            "or every record rewritten")
    for s, ln in sorted(original.items()):
        if ln.mac_ok is False:
            what = "no MAC" if not _MAC_TAIL.search(ln.raw) else "MAC does not match"
            findings.append(Finding("edited", s, ln.line, what))
            continue
        succ = original.get(s + 1)
        if succ is not None and succ.prev != ln.sha256 and (key is None or succ.mac_ok):
            if key is None:
                findings.append(Finding("edited", s, ln.line,
                                        f"its SHA-256 is not the prev of seq {s + 1} (line {succ.line})"))
            elif ln.mac_ok:
                findings.append(Finding("edited", s + 1, succ.line, "chain link to the previous record broken"))
        if s == 0 and ln.prev != GENESIS:
            findings.append(Finding("edited", 0, ln.line, "the first record must link to the genesis hash"))
    first = original.get(0)
    if first is not None and (first.record.get("kind") != "open" or first.record.get("format") != AUDIT_FORMAT):
        rep.notes.append("record 0 is not an 'open' record of format mi-certify/audit-v1")


def _anchor_findings(original: dict[int, Line], wanted: list[tuple[int | None, str]], rep: AuditReport,
                     findings: list[Finding]) -> None:
    """Each anchor must be the SHA-256 of one original record (at its seq, if given): a finding
    *anchor* otherwise, a note when it matches."""
    for seq, sha in wanted:
        at = [ln for ln in original.values() if ln.sha256 == sha]
        if not at:
            findings.append(Finding("anchor", seq, None, f"no record has the anchored SHA-256 {sha}: the records "
                                    "up to it were edited, the chain rebuilt, or the record removed"))
        elif seq is not None and at[0].seq != seq:
            findings.append(Finding("anchor", seq, at[0].line, f"the anchored record is seq {at[0].seq}, not {seq}"))
        else:
            rep.notes.append(f"anchor {sha[:16]}… matches record {at[0].seq}")


def iter_decisions(lines: Iterable[Line]):
    """The ``decision`` records of parsed lines, in file order."""
    for ln in lines:
        if ln.record is not None and ln.record.get("kind") == "decision":
            yield ln
