"""The emitted C runtime (``<name>.c``, docs/c-runtime.md) as a step for the live loop, through ctypes.

:class:`CController` has the methods of the generated Python ``Controller`` that
:class:`~mi_certify.runtime.live.ControlLoop` calls (``reset``, ``state``, ``step``,
``step_addr``, ``step_record``) and returns the same values, of the same Python types, so an
audit record is byte-identical whichever step ran. Readings that are a list or tuple of Python
floats go to ``<name>_step`` (the C float entry); anything else (None, ints, Fractions, numpy
scalars) is quantized by the generated Python module's exact ``quantize`` and stepped by
``<name>_step_addr``, as the Python runtime's general path does.

Standard library only (ctypes): it ships beside a generated controller. The shared library is
built by the caller (``mi-certify run`` compiles the bundle's ``<name>.c``).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

__all__ = ["CController", "load_c_library"]


class _State(ctypes.Structure):
    _fields_ = [("t", ctypes.c_uint8), ("k", ctypes.c_uint8), ("h", ctypes.c_uint16), ("d", ctypes.c_uint16),
                ("v", ctypes.c_uint16), ("f", ctypes.c_bool), ("r", ctypes.c_uint16)]


class _Record(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint32), ("probe_fault", ctypes.c_bool), ("proposal", ctypes.c_uint8),
                ("confident", ctypes.c_bool), ("sla_violation", ctypes.c_bool), ("before", _State),
                ("after", _State), ("token", ctypes.c_uint8), ("reason", ctypes.c_uint8)]


def load_c_library(path, name: str) -> ctypes.CDLL:
    """The shared library at ``path`` with the argument types of ``<name>_reset``, ``_step``,
    ``_step_addr``, ``_quantize``, ``_address`` set. Raises OSError when it cannot be loaded,
    AttributeError when a function is missing."""
    lib = ctypes.CDLL(str(Path(path).resolve()))
    sp, rp = ctypes.POINTER(_State), ctypes.POINTER(_Record)
    for fn, args, res in (("reset", [sp], None),
                          ("step", [sp, ctypes.POINTER(ctypes.c_double), ctypes.c_bool, rp], None),
                          ("step_addr", [sp, ctypes.c_uint32, ctypes.c_bool, ctypes.c_bool, rp], None),
                          ("quantize", [ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_uint32)],
                           ctypes.c_bool),
                          ("address", [ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint32)],
                           ctypes.c_bool)):
        f = getattr(lib, f"{name}_{fn}")
        f.argtypes, f.restype = args, res
    return lib


def _state(s: _State) -> tuple:
    return (s.t, s.k, s.h, s.d, s.v, int(s.f), s.r)


class CController:
    """The C step with the generated ``Controller``'s interface.

    Args:
        lib: :func:`load_c_library` of the build's ``<name>.c``.
        name: the controller's name (the C prefix).
        module: the build's generated Python module (``INPUTS``, ``quantize`` for readings that
            are not all floats).
    """

    def __init__(self, lib: ctypes.CDLL, name: str, module):
        self.lib, self.module = lib, module
        self.n = len(module.INPUTS)
        self._doubles = ctypes.c_double * self.n
        self._st, self._rec = _State(), _Record()
        self._pst, self._prec = ctypes.byref(self._st), ctypes.byref(self._rec)
        self._step = getattr(lib, f"{name}_step")
        self._step_addr = getattr(lib, f"{name}_step_addr")
        self._reset = getattr(lib, f"{name}_reset")
        self._cells = 1 << sum(int(i[4]) for i in module.INPUTS)
        self.reset()

    def reset(self) -> None:
        """The reset state (conservative action, counters 0)."""
        self._reset(self._pst)

    @property
    def state(self) -> tuple:
        """(t, k, h, d, v, f, r), f as 0/1 like the Python runtime's."""
        return _state(self._st)

    def __getattr__(self, name):
        if name in ("t", "k", "h", "d", "v", "r"):
            return getattr(self._st, name)
        if name == "f":
            return int(self._st.f)
        raise AttributeError(name)

    def _run(self, values, sla_violation) -> None:
        if (type(values) is list or type(values) is tuple) and len(values) == self.n \
                and all(type(x) is float for x in values):
            self._step(self._pst, self._doubles(*values), bool(sla_violation), self._prec)
        else:
            addr, fault = self.module.quantize(values)   # raises ValueError for a wrong count
            self._step_addr(self._pst, addr, bool(fault), bool(sla_violation), self._prec)

    def step(self, values, sla_violation=False):
        """Quantize and step; (token, reason)."""
        self._run(values, sla_violation)
        return self._rec.token, self._rec.reason

    def step_addr(self, addr, probe_fault=False, sla_violation=False):
        """Step from an address; (token, reason). Raises ValueError for an address outside the
        LUT (the Python runtime's check; the C would take it as a probe fault)."""
        if not probe_fault and (isinstance(addr, bool) or not isinstance(addr, int) or not 0 <= addr < self._cells):
            raise ValueError(f"address {addr!r} outside 0..{self._cells - 1}")
        self._step_addr(self._pst, 0 if probe_fault else addr, bool(probe_fault), bool(sla_violation), self._prec)
        return self._rec.token, self._rec.reason

    def step_record(self, values, sla_violation=False):
        """The Python runtime's ``step_record``: (addr, probe_fault, proposal, confident, before,
        after, token, reason); addr, proposal and confident None on a probe fault."""
        self._run(values, sla_violation)
        r = self._rec
        before, after = _state(r.before), _state(r.after)
        if r.probe_fault:
            return None, True, None, None, before, after, r.token, r.reason
        return r.addr, False, r.proposal, r.confident, before, after, r.token, r.reason
