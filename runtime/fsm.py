"""Reference LUT-FSM interpreter: the oracle every emitted artefact is checked against.

Semantics (docs/fsm.md is the normative text; this code implements it line by line).
Per step, inputs ``addr``, ``probe_fault``, ``sla_violation``; LUT[addr] = (p, c).
State (t, k, h, d, v, f, r); reset state (C, C, 0, 0, 0, 0, 0), C = conservative.

1. probe_fault: t=C, k=C, h=d=v=r=0, f=1                        -> PROBE_FAULT
2. f=1: t=C; r = r+1 if not sla_violation else 0;
   r == R: f=0, r=0, d=D, h=0, k=C                              -> RECOVER
   else                                                          -> FALLBACK
3. v = v+1 if sla_violation else 0; v == W: t=C, k=C, f=1, v=h=d=r=0 -> FALLBACK
3a. t not allowed at addr (sla.yaml forbid/require): t=C, k=C, h=0, d=D -> MASKED
4. d > 0: d -= 1                                                 -> COOLDOWN
5. not c: h=0 -> LOW_CONFIDENCE;  p == t: h=0                    -> HOLD
6. p == k: h += 1; h == H: t=p, d=D, h=0 -> SWITCH; else         -> PENDING
7. else k=p, h=1; H == 1: t=p, d=D, h=0 -> SWITCH; else          -> PENDING

Counter ranges after every step: h in [0, H-1], d in [0, D], v in [0, W-1],
r in [0, R-1]. Source: shared/DESIGN.md "LUT-FSM semantics".

Operator interventions (only when sla.yaml declares ``operator:``; docs/fsm.md,
"Operator interventions"): :func:`operator_transition` wraps :func:`transition` with a
per-step command (none / lock(a) / force_conservative / release) and the override
state (o, a, e); without ``operator:`` nothing here is used and every output is as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Sequence


class Reason(IntEnum):
    """Why the active token is what it is after a step (4-bit code in the RTL)."""

    HOLD = 0
    PENDING = 1
    SWITCH = 2
    COOLDOWN = 3
    LOW_CONFIDENCE = 4
    FALLBACK = 5
    RECOVER = 6
    PROBE_FAULT = 7
    MASKED = 8


#: Width of the reason code in the RTL and in traces.
REASON_BITS = 4


class OperatorReason(IntEnum):
    """Reason codes of a step an operator override decided (only with sla.yaml ``operator:``;
    kept out of :class:`Reason` so controllers without an operator list the same nine codes)."""

    LOCKED = 9
    FORCED = 10


class Command(IntEnum):
    """Operator command of one step (the ``cmd`` input; ``arg`` names the action of LOCK)."""

    NONE = 0
    LOCK = 1
    FORCE = 2
    RELEASE = 3


#: Override modes (the ``o`` state of docs/fsm.md, "Operator interventions").
MODE_NONE, MODE_LOCK, MODE_FORCE = 0, 1, 2


def reason_name(code: int) -> str:
    """Name of reason code ``code`` (0-10); raises ValueError for another code."""
    return Reason(code).name if code < len(Reason) else OperatorReason(code).name


@dataclass(frozen=True)
class FsmConfig:
    """Parameters: hysteresis H >= 1, cooldown D >= 0, violations W >= 1, recovery R >= 1."""

    n_actions: int
    conservative: int
    hysteresis: int
    cooldown: int
    violations_to_fallback: int
    recovery: int

    def __post_init__(self):
        if not (0 <= self.conservative < self.n_actions):
            raise ValueError("conservative token out of range")
        if self.hysteresis < 1 or self.cooldown < 0 or self.violations_to_fallback < 1 or self.recovery < 1:
            raise ValueError("FSM parameters out of range")


@dataclass(frozen=True)
class OperatorConfig:
    """The sla.yaml ``operator:`` section as the machine sees it.

    lockable: bitmask of the actions a LOCK may name (bit a = token a); force: FORCE is
    accepted; yield_fallback / yield_probe: an override yields to rules 2-3 / rule 1;
    max_steps L >= 1: an override is in force for at most L steps from its command.
    """

    lockable: int
    force: bool
    yield_fallback: bool = True
    yield_probe: bool = True
    max_steps: int = 1

    def __post_init__(self):
        if self.max_steps < 1 or self.lockable < 0:
            raise ValueError("operator parameters out of range")


@dataclass(frozen=True)
class OperatorState:
    """o override mode (MODE_NONE / MODE_LOCK / MODE_FORCE), a action it puts in force
    (C when none), e steps it stays in force (0 when none; 1 .. L-1 otherwise)."""

    o: int
    a: int
    e: int = 0


def operator_reset(cfg: FsmConfig) -> OperatorState:
    return OperatorState(MODE_NONE, cfg.conservative, 0)


def apply_command(cfg: FsmConfig, op: OperatorConfig, st: OperatorState, cmd: int, arg: int) -> OperatorState:
    """The override state in force during a step after command ``cmd`` (``arg``: LOCK's action).
    A LOCK of an action not in ``op.lockable`` and a FORCE when ``op.force`` is false are ignored."""
    if cmd == Command.LOCK and 0 <= arg < cfg.n_actions and (op.lockable >> arg) & 1:
        return OperatorState(MODE_LOCK, arg, op.max_steps)
    if cmd == Command.FORCE and op.force:
        return OperatorState(MODE_FORCE, cfg.conservative, op.max_steps)
    if cmd == Command.RELEASE:
        return operator_reset(cfg)
    return st


def operator_transition(cfg: FsmConfig, op: OperatorConfig, s: FsmState, st: OperatorState, cmd: int, arg: int,
                        p: int, c: bool, probe_fault: bool, sla_violation: bool, allowed: int = -1
                        ) -> tuple[FsmState, OperatorState, int]:
    """One step with an operator command (docs/fsm.md, "Operator interventions").

    The base step (:func:`transition`, rules 1-7) runs first. When an override is in force
    (after the command), it does not yield to the base step's reason (PROBE_FAULT when
    ``yield_probe``; FALLBACK, RECOVER when ``yield_fallback``) and its action is allowed at
    the address (``allowed``, -1 on a probe fault), the active token becomes that action and
    the reason LOCKED / FORCED; every other state variable is the base step's. Then the
    override's step count e goes down; at 0 the override ends (expiry).
    Returns: (next state, next override state, reason code 0-10).
    """
    st = apply_command(cfg, op, st, cmd, arg)
    s2, why = transition(cfg, s, p, c, probe_fault, sla_violation, allowed)
    code = int(why)
    if st.o != MODE_NONE:
        yields = (op.yield_probe and why == Reason.PROBE_FAULT) or \
            (op.yield_fallback and why in (Reason.FALLBACK, Reason.RECOVER))
        if not yields and (allowed >> st.a) & 1:
            s2 = replace(s2, t=st.a)
            code = int(OperatorReason.LOCKED if st.o == MODE_LOCK else OperatorReason.FORCED)
        st = OperatorState(st.o, st.a, st.e - 1) if st.e > 1 else operator_reset(cfg)
    return s2, st, code


@dataclass(frozen=True)
class FsmState:
    """t active token, k candidate, h hysteresis count, d cooldown, v violations,
    f fallback flag, r recovery count."""

    t: int
    k: int
    h: int = 0
    d: int = 0
    v: int = 0
    f: bool = False
    r: int = 0


def reset_state(cfg: FsmConfig) -> FsmState:
    return FsmState(t=cfg.conservative, k=cfg.conservative)


def transition(cfg: FsmConfig, s: FsmState, p: int, c: bool, probe_fault: bool,
               sla_violation: bool, allowed: int = -1) -> tuple[FsmState, Reason]:
    """One step of the LUT-FSM given the LUT entry (p, c) at the current address.

    Args:
        allowed: bitmask of the actions the sla.yaml properties allow at the current
            address (bit a set = action a allowed; -1 = all).
    Returns:
        (next state, reason); the active token after the step is ``next.t``.
    """
    C = cfg.conservative
    if probe_fault:
        return FsmState(t=C, k=C, f=True), Reason.PROBE_FAULT
    if s.f:
        r = 0 if sla_violation else s.r + 1
        if r >= cfg.recovery:
            return FsmState(t=C, k=C, d=cfg.cooldown), Reason.RECOVER
        return FsmState(t=C, k=C, f=True, r=r), Reason.FALLBACK
    v = s.v + 1 if sla_violation else 0
    if v >= cfg.violations_to_fallback:
        return FsmState(t=C, k=C, f=True), Reason.FALLBACK
    s = replace(s, v=v)
    if not (allowed >> s.t) & 1:
        return FsmState(t=C, k=C, d=cfg.cooldown, v=v), Reason.MASKED
    if s.d > 0:
        return replace(s, d=s.d - 1), Reason.COOLDOWN
    if not c:
        return replace(s, h=0), Reason.LOW_CONFIDENCE
    if p == s.t:
        return replace(s, h=0), Reason.HOLD
    if p == s.k:
        h = s.h + 1
    else:
        s = replace(s, k=p)
        h = 1
    if h >= cfg.hysteresis:
        return replace(s, t=p, d=cfg.cooldown, h=0), Reason.SWITCH
    return replace(s, h=h), Reason.PENDING


@dataclass(frozen=True)
class MaskBox:
    """Actions allowed in a box of LUT cells (from one sla.yaml forbid/require property).

    ``lo``/``hi``: per input, the first and last level of the cells that meet the
    property's region (inclusive); ``bits``: address bits per input (input 0 most
    significant); ``allowed``: bitmask of the allowed tokens; ``id``: the property id.
    """

    id: str
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    bits: tuple[int, ...]
    allowed: int

    def contains(self, addr: int) -> bool:
        shift = sum(self.bits)
        for lo, hi, b in zip(self.lo, self.hi, self.bits):
            shift -= b
            q = (addr >> shift) & ((1 << b) - 1)
            if not lo <= q <= hi:
                return False
        return True


def allowed_at(masks: Sequence[MaskBox], addr: int) -> int:
    """Bitmask of the actions allowed at ``addr``: the intersection over the boxes containing it (-1 = all)."""
    allowed = -1
    for m in masks:
        if m.contains(addr):
            allowed &= m.allowed
    return allowed


@dataclass(frozen=True)
class StepResult:
    """What one step decided: active token and reason, with the LUT entry used."""

    token: int
    reason: Reason
    proposal: int
    confident: bool
    before: FsmState
    after: FsmState


class LutFsm:
    """The reference LUT-FSM.

    Args:
        cfg: FSM parameters.
        tokens: LUT proposals, one per address (length 2^address_bits).
        confident: LUT confident bits, same length.
    """

    def __init__(self, cfg: FsmConfig, tokens: Sequence[int], confident: Sequence[bool],
                 masks: Sequence[MaskBox] = (), operator: OperatorConfig | None = None):
        if len(tokens) != len(confident):
            raise ValueError("tokens and confident bits differ in length")
        if any(not 0 <= t < cfg.n_actions for t in tokens):
            raise ValueError("LUT holds a token that is not a declared action")
        self.cfg = cfg
        self.tokens = bytes(tokens)
        self.confident = bytes(int(bool(c)) for c in confident)
        self.masks = tuple(masks)
        self.operator = operator
        self.state = reset_state(cfg)
        self.op_state = operator_reset(cfg)

    def reset(self) -> None:
        self.state = reset_state(self.cfg)
        self.op_state = operator_reset(self.cfg)

    def step(self, addr: int, probe_fault: bool = False, sla_violation: bool = False) -> StepResult:
        """Advance one step. ``addr`` is ignored when ``probe_fault`` is set."""
        if not probe_fault and not 0 <= addr < len(self.tokens):
            raise ValueError(f"address {addr} outside the LUT")
        p = self.tokens[addr] if not probe_fault else self.cfg.conservative
        c = bool(self.confident[addr]) if not probe_fault else False
        before = self.state
        allowed = -1 if probe_fault else allowed_at(self.masks, addr)
        self.state, reason = transition(self.cfg, before, p, c, bool(probe_fault), bool(sla_violation), allowed)
        return StepResult(self.state.t, reason, p, c, before, self.state)

    def step_op(self, addr: int, probe_fault: bool = False, sla_violation: bool = False,
                cmd: int = Command.NONE, arg: int = 0) -> StepResult:
        """:meth:`step` with an operator command (``cmd``: :class:`Command`, ``arg``: LOCK's token);
        needs ``operator``. The reason is a :class:`Reason` or an :class:`OperatorReason`."""
        if self.operator is None:
            raise ValueError("this machine has no operator input (sla.yaml declares no operator:)")
        if not probe_fault and not 0 <= addr < len(self.tokens):
            raise ValueError(f"address {addr} outside the LUT")
        p = self.tokens[addr] if not probe_fault else self.cfg.conservative
        c = bool(self.confident[addr]) if not probe_fault else False
        before = self.state
        allowed = -1 if probe_fault else allowed_at(self.masks, addr)
        self.state, self.op_state, code = operator_transition(
            self.cfg, self.operator, before, self.op_state, int(cmd), int(arg), p, c, bool(probe_fault),
            bool(sla_violation), allowed)
        reason = Reason(code) if code < len(Reason) else OperatorReason(code)
        return StepResult(self.state.t, reason, p, c, before, self.state)
