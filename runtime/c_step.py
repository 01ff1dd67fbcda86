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


class _OpState(ctypes.Structure):
    _fields_ = [("o", ctypes.c_uint8), ("a", ctypes.c_uint8), ("e", ctypes.c_uint16)]


def load_c_library(path, name: str, operator: bool = False) -> ctypes.CDLL:
    """The shared library at ``path`` with the argument types of ``<name>_reset``, ``_step``,
    ``_step_addr``, ``_quantize``, ``_address`` set (and, with ``operator``, of ``_op_reset``,
    ``_step_op``, ``_step_addr_op``: a build whose sla.yaml declares ``operator:``). Raises OSError
    when it cannot be loaded, AttributeError when a function is missing."""
    lib = ctypes.CDLL(str(Path(path).resolve()))
    sp, rp, op = ctypes.POINTER(_State), ctypes.POINTER(_Record), ctypes.POINTER(_OpState)
    u8 = ctypes.c_uint8
    fns = [("reset", [sp], None),
           ("step", [sp, ctypes.POINTER(ctypes.c_double), ctypes.c_bool, rp], None),
           ("step_addr", [sp, ctypes.c_uint32, ctypes.c_bool, ctypes.c_bool, rp], None),
           ("quantize", [ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_uint32)], ctypes.c_bool),
           ("address", [ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint32)], ctypes.c_bool)]
    if operator:
        fns += [("op_reset", [op], None),
                ("step_op", [sp, op, ctypes.POINTER(ctypes.c_double), ctypes.c_bool, u8, u8, rp], None),
                ("step_addr_op", [sp, op, ctypes.c_uint32, ctypes.c_bool, ctypes.c_bool, u8, u8, rp], None)]
    for fn, args, res in fns:
        f = getattr(lib, f"{name}_{fn}")
        f.argtypes, f.restype = args, res
    return lib


def _u8(x) -> int:
    """A command or argument as the C's uint8_t: a value outside 0..255 is no command (0) rather
    than wrapped to another (the Python runtime ignores it the same way)."""
    return int(x) if isinstance(x, int) and 0 <= x < 256 else 0


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
        self.operator = hasattr(module, "OPERATOR_MAX_STEPS")   # sla.yaml operator: the _op entry points
        self._op = _OpState()
        self._pop = ctypes.byref(self._op)
        if self.operator:
            self._step_op = getattr(lib, f"{name}_step_op")
            self._step_addr_op = getattr(lib, f"{name}_step_addr_op")
            self._op_reset = getattr(lib, f"{name}_op_reset")
        self.reset()

    def reset(self) -> None:
        """The reset state (conservative action, counters 0; no override)."""
        self._reset(self._pst)
        if self.operator:
            self._op_reset(self._pop)

    def __copy__(self) -> "CController":
        """An independent controller in the same state (the live loop steps a copy to see what a step
        would do without an operator command)."""
        c = object.__new__(CController)
        c.__dict__.update(self.__dict__)
        c._st, c._rec, c._op = _State.from_buffer_copy(self._st), _Record(), _OpState.from_buffer_copy(self._op)
        c._pst, c._prec, c._pop = ctypes.byref(c._st), ctypes.byref(c._rec), ctypes.byref(c._op)
        return c

    @property
    def operator_state(self) -> tuple:
        """(o, a, e): override mode, its action, steps it stays in force."""
        return (self._op.o, self._op.a, self._op.e)

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

    def _run(self, values, sla_violation, cmd=0, arg=0) -> None:
        if (type(values) is list or type(values) is tuple) and len(values) == self.n \
                and all(type(x) is float for x in values):
            if self.operator:
                self._step_op(self._pst, self._pop, self._doubles(*values), bool(sla_violation), cmd, arg, self._prec)
            else:
                self._step(self._pst, self._doubles(*values), bool(sla_violation), self._prec)
        else:
            addr, fault = self.module.quantize(values)   # raises ValueError for a wrong count
            self._run_addr(addr, fault, sla_violation, cmd, arg)

    def _run_addr(self, addr, fault, sla_violation, cmd, arg) -> None:
        if self.operator:
            self._step_addr_op(self._pst, self._pop, addr, bool(fault), bool(sla_violation), _u8(cmd), _u8(arg),
                               self._prec)
        else:
            self._step_addr(self._pst, addr, bool(fault), bool(sla_violation), self._prec)

    def step(self, values, sla_violation=False, cmd=0, arg=0):
        """Quantize and step (``cmd``/``arg``: the operator command, builds with ``operator:`` only);
        (token, reason)."""
        self._run(values, sla_violation, _u8(cmd), _u8(arg))
        return self._rec.token, self._rec.reason

    def step_addr(self, addr, probe_fault=False, sla_violation=False, cmd=0, arg=0):
        """Step from an address; (token, reason). Raises ValueError for an address outside the
        LUT (the Python runtime's check; the C would take it as a probe fault)."""
        if not probe_fault and (isinstance(addr, bool) or not isinstance(addr, int) or not 0 <= addr < self._cells):
            raise ValueError(f"address {addr!r} outside 0..{self._cells - 1}")
        self._run_addr(0 if probe_fault else addr, probe_fault, sla_violation, cmd, arg)
        return self._rec.token, self._rec.reason

    def step_record(self, values, sla_violation=False, cmd=0, arg=0):
        """The Python runtime's ``step_record``: (addr, probe_fault, proposal, confident, before,
        after, token, reason); addr, proposal and confident None on a probe fault."""
        self._run(values, sla_violation, _u8(cmd), _u8(arg))
        r = self._rec
        before, after = _state(r.before), _state(r.after)
        if r.probe_fault:
            return None, True, None, None, before, after, r.token, r.reason
        return r.addr, False, r.proposal, r.confident, before, after, r.token, r.reason
