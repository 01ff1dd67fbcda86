"""The control loop around a generated controller, and the replay of its audit log.

Only the build's own artefacts are used: the generated runtime ``<name>.py`` (which
carries the LUT, the FSM parameters and the SLA limits), ``lut.hex`` and
``manifest.json``; the reference interpreter :mod:`mi_certify.runtime.fsm`
re-checks every replayed step. Nothing here imports the generator or the
verification packages: an integrator deploys ``mi_certify.runtime`` and the
generated module.

Per request (docs/runtime.md, "Live loop"):

1. ``decide()``: read the probe, map it to the controller inputs, quantize, step
   the controller with the SLA monitor's current verdict as ``sla_violation``.
2. the caller runs the request under the returned action and measures it.
3. ``complete()``: feed latency and accuracy loss to the SLA monitor, append one
   ``decision`` record to the audit log.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import importlib.util
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import orjson

from .audit import AuditLog, read_records
from .frozen import maker
from .fsm import FsmConfig, LutFsm, MaskBox, OperatorConfig, Reason
from .lut_file import decode_lut_hex
from .operator import CMD_CODES, Intake, OperatorPolicy, canonical_bytes
from .probes import FeatureMap, HardwareProbe, ProbeSample
from .quantize import fault_causes
from .sla import MonitorConfig, SlaLimits, SlaMonitor, SlaVerdict

__all__ = ["BuildLoadError", "ControlLoop", "Decision", "LoadedBuild", "ReplayReport", "load_build", "replay"]


class BuildLoadError(Exception):
    """A build directory or log cannot be used (missing, modified, foreign). ``file``, ``reason``."""

    def __init__(self, reason: str, file=None):
        self.file = None if file is None else str(file)
        self.reason = reason
        super().__init__(f"{self.file}: {reason}" if self.file else reason)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class LoadedBuild:
    """A build directory whose files match its manifest, with its runtime module imported."""

    dir: Path
    name: str
    module: object
    manifest_sha256: str
    runtime_sha256: str
    lut_sha256: str
    lut: bytes
    fsm: FsmConfig
    limits: tuple[SlaLimits, ...]
    monitor: MonitorConfig
    masks: tuple[MaskBox, ...] = ()

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(self.module.ACTIONS)

    @property
    def operator(self) -> OperatorPolicy | None:
        """The operator policy of the generated runtime (sla.yaml ``operator:``), or None."""
        return OperatorPolicy.from_module(self.module)

    def operator_config(self) -> OperatorConfig | None:
        """The same for the reference FSM (:class:`~mi_certify.runtime.fsm.OperatorConfig`)."""
        p = self.operator
        if p is None:
            return None
        return OperatorConfig(sum(1 << a for a in p.lockable), p.force, p.yield_fallback, p.yield_probe_fault,
                              p.max_steps)

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(i[0] for i in self.module.INPUTS)

    def identity(self) -> dict:
        """Fields that tie an audit log to this build."""
        return {"controller": self.name, "manifest_sha256": self.manifest_sha256,
                "runtime_sha256": self.runtime_sha256, "lut_sha256": self.lut_sha256}


def load_build(directory) -> LoadedBuild:
    """Check a build directory against its manifest and import its generated runtime.

    Raises:
        BuildLoadError: no manifest, a file that does not match its hash, no runtime,
        or a runtime without the SLA constants (built by an older mi-certify).
    """
    d = Path(directory)
    mpath = d / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        files = manifest["files"]
        name = manifest["controller"]
    except (OSError, ValueError, KeyError, TypeError):
        raise BuildLoadError("not a mi-certify build directory (no readable manifest.json)", d) from None
    for rel, digest in files.items():
        p = d / rel
        if not p.is_file() or _sha256(p) != digest:
            raise BuildLoadError(f"{rel} is missing or does not match manifest.json: the build was modified", d)
    py = d / f"{name}.py"
    if f"{name}.py" not in files or "lut.hex" not in files:
        raise BuildLoadError(f"manifest.json lists no {name}.py or lut.hex", d)
    spec = importlib.util.spec_from_file_location(f"_mi_certify_build_{name}_{files[name + '.py'][:12]}", py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "SLA_LIMITS") or not hasattr(module, "lut_entry"):
        raise BuildLoadError(f"{name}.py has no SLA_LIMITS/lut_entry: rebuild it with this mi-certify", d)
    try:
        lut = decode_lut_hex((d / "lut.hex").read_text(encoding="ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BuildLoadError(f"lut.hex: {exc}", d) from None
    if lut != module._LUT:
        raise BuildLoadError(f"lut.hex and the LUT inside {name}.py differ", d)
    m = module
    fsm = FsmConfig(len(m.ACTIONS), m.CONSERVATIVE, m.HYSTERESIS, m.COOLDOWN, m.VIOLATIONS_TO_FALLBACK, m.RECOVERY)
    bits = tuple(i[4] for i in m.INPUTS)
    masks = tuple(MaskBox(mid, tuple(lo), tuple(hi), bits, allowed) for mid, lo, hi, allowed in getattr(m, "_MASKS", ()))
    return LoadedBuild(d, name, module, _sha256(mpath), files[f"{name}.py"], hashlib.sha256(lut).hexdigest(), lut,
                       fsm, tuple(SlaLimits(*lim) for lim in m.SLA_LIMITS), MonitorConfig(**m.SLA_MONITOR), masks)


@dataclass(frozen=True)
class Decision:
    """One controller step: what was read, what the LUT proposed, what the FSM decided."""

    sample: ProbeSample
    readings: tuple
    input_errors: tuple
    addr: int | None
    probe_fault: bool
    proposal: int | None
    confident: bool | None
    sla_violation: bool
    before: tuple
    after: tuple
    token: int
    reason: str
    #: builds with sla.yaml ``operator:``: {"cmd", "arg", "before": [o, a, e], "after": [o, a, e]}
    operator: dict | None = None


_decision = maker(Decision)   # Decision(...) on the hot path (runtime/frozen.py)


class ControlLoop:
    """Probe → controller → (caller runs the request) → SLA monitor → audit log.

    Args:
        build: the loaded build.
        probe: any :class:`HardwareProbe`.
        features: how probe quantities become the controller's inputs.
        audit: an open :class:`AuditLog`, or None.
        controller: the step (default: the build's generated Python ``Controller``); any object with its
            ``step_record`` and ``state``, e.g. :class:`~mi_certify.runtime.c_step.CController` (the
            emitted C through ctypes): the records are the same values either way.
        intake: operator commands (:class:`~mi_certify.runtime.operator.Intake`), for a build whose
            sla.yaml declares ``operator:``; each one leaves a ``command`` record (docs/operator.md).
    """

    def __init__(self, build: LoadedBuild, probe: HardwareProbe, features: FeatureMap, audit: AuditLog | None = None,
                 controller=None, intake: Intake | None = None):
        self.build, self.probe, self.features, self.audit = build, probe, features, audit
        # the step: the generated Python Controller, or one with its interface (runtime/c_step.py, the C step)
        self.ctl = controller if controller is not None else build.module.Controller()
        self.monitor = SlaMonitor(build.limits, build.monitor)
        self.policy = build.operator
        if intake is not None and self.policy is None:
            raise ValueError(f"{build.name}: its sla.yaml declares no operator: this controller takes no commands")
        self.intake = intake
        #: the command records of this loop (also when there is no audit log), in order
        self.commands: list[dict] = []
        # what a sample's readings give (feature values and errors; the record's probes JSON), kept for the
        # last readings mapping of a probe that shares its mappings (HardwareProbe.shares_readings: a
        # SampledProbe returns the same read-only mapping until a new sample or a stale reading), so
        # between samples a request derives nothing twice (keyed by identity; the mapping is held, so its
        # id is not reused); from any other probe nothing is kept
        self._shared = bool(getattr(probe, "shares_readings", False))
        self._actions, self._reasons = build.actions, build.module.REASONS
        self._features_of: tuple = (None, None, None, None)
        self._probes_of: tuple = (None, None)

    def audit_header(self) -> dict:
        """Fields of the ``open`` record for this loop."""
        m = self.build.module
        return {**self.build.identity(), "inputs": list(self.build.inputs), "actions": list(self.build.actions),
                "fsm": {"hysteresis": m.HYSTERESIS, "cooldown": m.COOLDOWN,
                        "violations_to_fallback": m.VIOLATIONS_TO_FALLBACK, "recovery": m.RECOVERY},
                "sla_limits": [[lim.latency_ms, lim.accuracy_loss_pct] for lim in self.build.limits],
                "monitor": self.build.monitor.to_json(), "features": dict(zip(self.features.inputs,
                                                                              self.features.sources)),
                "probe": type(self.probe).__name__}

    def decide(self) -> Decision:
        """Read the probe and step the controller (never raises for sensor trouble); with an operator
        intake, the oldest pending command goes into this step or is refused (a ``command`` record)."""
        sample = self.probe.read()
        cached = self._features_of
        if sample.readings is cached[0]:
            values, readings, errors = cached[1], cached[2], cached[3]
        else:
            values, errors = self.features(sample)
            readings, errors = tuple(values), tuple(errors)
            if self._shared:   # a mapping that never changes (HardwareProbe.shares_readings: SampledProbe's)
                self._features_of = (sample.readings, values, readings, errors)
        sla = self.monitor.violation
        if self.policy is not None:
            return self._decide_operator(sample, values, readings, errors, sla)
        if hasattr(self.ctl, "step_record"):  # one call: quantize, LUT entry, states around the step
            addr, fault, proposal, confident, before, after, token, reason = self.ctl.step_record(values, sla)
            return _decision(sample, readings, errors, addr, fault, proposal, confident, sla, before,
                             after, token, self._reasons[reason])
        m = self.build.module
        addr, fault = m.quantize(values)  # a runtime generated before step_record existed
        proposal = confident = None
        if not fault:
            proposal, c = m.lut_entry(addr)
            confident = bool(c)
        before = self.ctl.state
        token, reason = self.ctl.step_addr(addr, fault, sla)
        return Decision(sample, tuple(values), tuple(errors), None if fault else addr, fault, proposal, confident,
                        sla, before, self.ctl.state, token, m.REASONS[reason])

    def _decide_operator(self, sample, values, readings, errors, sla) -> Decision:
        """:meth:`decide` of a build with ``operator:`` (docs/operator.md, "At the step")."""
        m, ctl = self.build.module, self.ctl
        cmd = arg = 0
        pending = None
        if self.intake is not None:
            for p in self.intake.poll():
                self._command_record(p, "refused")
            pending = self.intake.next()
        if pending is not None:
            # what the step would do without the command: the checks that depend on the step, and the record
            base = copy.copy(ctl).step_record(values, sla)
            addr, fault = base[0], base[1]
            allowed = True if fault or pending.cmd != CMD_CODES["lock"] else bool((m.allowed(addr) >> pending.arg) & 1)
            if self.intake.at_step(pending, m.REASONS[base[7]], allowed):
                cmd, arg = pending.cmd, pending.arg
            else:
                self._command_record(pending, "refused", token_without=base[6])
                pending = None
        op_before = list(ctl.operator_state)
        addr, fault, proposal, confident, before, after, token, reason = ctl.step_record(values, sla, cmd, arg)
        op = {"cmd": cmd, "arg": arg, "before": op_before, "after": list(ctl.operator_state)}
        if pending is not None:
            self._command_record(pending, "accepted", token_without=base[6], token_with=token,
                                 changed=token != base[6], reason=m.REASONS[reason], operator_after=op["after"])
        return _decision(sample, readings, errors, addr, fault, proposal, confident, sla, before,
                         after, token, m.REASONS[reason], op)

    def end_commands(self) -> None:
        """At the end of a run: a ``command`` record for every command that never reached a step
        (:meth:`~mi_certify.runtime.operator.Intake.leftovers`), so that every command received is logged."""
        if self.intake is not None:
            for p in self.intake.poll() + self.intake.leftovers():
                self._command_record(p, "refused")

    def _command_record(self, p, outcome: str, **decision) -> None:
        """One ``command`` record (docs/operator.md, "Audit records"), written at once."""
        rec = p.record(self.build.actions, outcome, **decision)
        self.commands.append(rec)
        if self.audit is not None:
            self.audit.append("command", rec)

    def fault_causes(self, d: Decision) -> list[dict]:
        """Why ``d`` is a probe fault: per faulty input its reading and the bound it broke
        (:func:`mi_certify.runtime.quantize.fault_causes`); [] when it is none."""
        return fault_causes(self.build.module.INPUTS, d.readings) if d.probe_fault else []

    def complete(self, d: Decision, latency_ms, accuracy_loss_pct, extra: dict | None = None) -> SlaVerdict:
        """Feed one request's measurement to the SLA monitor and log the decision (the one place a
        ``decision`` record is composed: on a probe fault ``probes._probe_fault`` names each
        faulty input, its reading and the bound it broke)."""
        verdict = self.monitor.observe(d.token, latency_ms, accuracy_loss_pct)
        audit = self.audit
        if audit is not None:   # the record: AuditLog.append_decision, the bytes of append_fields(encode_decision)
            audit.append_decision(
                d.readings, d.addr, d.probe_fault, d.proposal, d.confident, d.sla_violation, d.before, d.after,
                d.token, self._actions[d.token], d.reason, latency_ms, accuracy_loss_pct, verdict,
                self._probes_json(d), None if extra is None else _extra_json(extra),
                None if d.operator is None else _operator_json(d.operator))
        return verdict

    def _probes_json(self, d: Decision) -> bytes:
        """The record's ``probes`` field: the sample's readings, with ``_input_errors`` (inputs the feature
        map could not compute) and ``_probe_fault`` (each faulty input, its reading and the bound it broke)
        when there are any. A function of the readings alone (the errors and the fault follow from them), so
        it is made once per readings mapping (:meth:`decide`)."""
        readings = d.sample.readings
        if readings is self._probes_of[0]:
            return self._probes_of[1]
        probes = d.sample.to_json()
        if any(d.input_errors):
            probes["_input_errors"] = {n: e for n, e in zip(self.features.inputs, d.input_errors) if e}
        if d.probe_fault:
            probes["_probe_fault"] = self.fault_causes(d)
        text = json.dumps(probes, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("ascii")
        if self._shared:
            self._probes_of = (readings, text)
        return text


#: ``json.dumps(x, sort_keys=True, separators=(",", ":"))`` with its encoder made once (the same text:
#: dumps makes this encoder per call)
_orjson_dumps = orjson.dumps
_EXTRA_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
#: a str that json.dumps writes as it is (ensure_ascii): printable ASCII other than '"' and '\\'
_PLAIN = re.compile(r'[ !#-\[\]-~]*').fullmatch
_ORJSON_SORTED = orjson.OPT_SORT_KEYS
_PLAIN_SEEN: dict = {}   # strings found plain (the keys and phase names a loop repeats), at most 1024


def _plain(text: str) -> bool:
    if text in _PLAIN_SEEN:
        return True
    if _PLAIN(text) is None:
        return False
    if len(_PLAIN_SEEN) < 1024:
        _PLAIN_SEEN[text] = True
    return True


def _extra_json(extra) -> bytes:
    """:data:`_EXTRA_JSON` of a record's ``extra`` fields, as ASCII bytes. A dict whose keys are plain
    strings (:data:`_PLAIN`) and whose values are ints, plain strings, booleans or None (what the live
    loop passes: the request number, its phase) is written by orjson with sorted keys: the same text (the
    same key order, no escapes, the same integer digits); an int beyond 64 bits (orjson refuses it), a
    float, a list, anything else goes to the encoder."""
    if type(extra) is dict:
        for k, v in extra.items():
            if type(k) is not str or (k not in _PLAIN_SEEN and not _plain(k)):
                break
            t = type(v)
            if t is str:
                if v not in _PLAIN_SEEN and not _plain(v):
                    break
            elif t is not int and t is not bool and v is not None:
                break
        else:
            try:
                return _orjson_dumps(extra, option=_ORJSON_SORTED)
            except orjson.JSONEncodeError:
                pass
    return _EXTRA_JSON(extra).encode("ascii")


_OPERATOR_JSON = json.JSONEncoder(separators=(",", ":")).encode
_OPERATOR = '{"cmd":%d,"arg":%d,"before":[%d,%d,%d],"after":[%d,%d,%d]}'


def _operator_json(op: dict) -> str:
    """``json.dumps(op, separators=(",", ":"))`` of a decision's operator fields (:class:`Decision`),
    by one template when they are what the step gives (ints), else by the encoder."""
    b, a = op["before"], op["after"]
    if len(op) == 4 and len(b) == 3 and len(a) == 3:
        cmd, arg, (b0, b1, b2), (a0, a1, a2) = op["cmd"], op["arg"], b, a
        if (type(cmd) is int and type(arg) is int and type(b0) is int and type(b1) is int and type(b2) is int
                and type(a0) is int and type(a1) is int and type(a2) is int):   # no generator: the hot path
            return _OPERATOR % (cmd, arg, b0, b1, b2, a0, a1, a2)
    return _OPERATOR_JSON(op)


# ---------------------------------------------------------------------------------------
# Replay


@dataclass
class ReplayReport:
    """What a replay confirmed. ``mismatches``: (seq, field, logged, replayed) tuples."""

    decisions: int = 0
    sessions: int = 0
    mismatches: list = field(default_factory=list)
    per_action: dict = field(default_factory=dict)
    switches: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    fallbacks: int = 0
    recoveries: int = 0
    probe_faults: int = 0
    #: operator command records by outcome ("accepted", or the refusal reason)
    commands: Counter = field(default_factory=Counter)
    #: accepted commands whose ``sig`` was re-checked with an operator key given to the replay
    signatures_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.decisions > 0

    def to_json(self) -> dict:
        return {"ok": self.ok, "decisions": self.decisions, "sessions": self.sessions,
                "mismatches": [list(m) for m in self.mismatches[:100]], "mismatch_count": len(self.mismatches),
                "per_action": self.per_action, "switches": dict(sorted(self.switches.items())),
                "switch_count": sum(self.switches.values()), "reasons": dict(sorted(self.reasons.items())),
                "fallbacks": self.fallbacks, "recoveries": self.recoveries, "probe_faults": self.probe_faults,
                "commands": dict(sorted(self.commands.items())), "signatures_checked": self.signatures_checked}


def _logged_number(x):
    """A logged number back: null, a JSON number, "nan"/"inf"/"-inf", or an exact "n/d"
    (a reading that was no binary64 value; runtime/audit.py)."""
    if x is None:
        return None
    if isinstance(x, str):
        if re.fullmatch(r"-?[0-9]+/[0-9]+", x):
            return Fraction(x)
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(x)
    return x


def _met(value, limit) -> bool:
    v = _logged_number(value)
    return limit is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                             and v <= limit)


def replay(log_path, build: LoadedBuild, key: bytes | None = None, operator_keys: dict | None = None) -> ReplayReport:
    """Re-run every logged decision through the build's generated runtime and the reference
    FSM, and every logged measurement through the SLA monitor; compare all logged fields.

    Checked per ``decision`` record: the address and probe fault re-quantized from the
    logged readings; the LUT proposal and confident bit; the state before; token, reason
    and state after (generated runtime and :class:`LutFsm` both); the ``sla_violation``
    input equals the replayed monitor's verdict; the logged verdict. An ``open`` record
    starts a fresh controller and monitor (reset state) and must name this build.

    A build with sla.yaml ``operator:`` (docs/operator.md, "Replay"): a decision carries its command
    and the override state around it (one without them had no command), which the replay steps and
    compares (a lock in force shows in the active token the replay compares); a command other
    than none needs the ``command`` record accepted just before it (its key id declared, its command
    declared, its ``token_without`` / ``token_with`` equal to the replay's step without and with it),
    a refused command must have changed nothing; with ``operator_keys`` ({key id: key}) every accepted
    command's ``sig`` is re-checked.

    Raises:
        BuildLoadError if the log was written for another build or holds no records.
        AuditError if it cannot be read.
    """
    lines, _torn = read_records(log_path, key)
    records = sorted((ln for ln in lines if ln.record is not None), key=lambda ln: ln.seq)
    if not records:
        raise BuildLoadError("holds no readable record", log_path)
    rp = _Replayer(build, log_path, operator_keys or {})
    for ln in records:
        kind = ln.record.get("kind")
        if kind == "open":
            rp.open(ln)
        elif kind == "decision":
            rp.decision(ln)
        elif kind == "command":
            rp.command(ln)
    for st in rp.stats.values():
        n = st["requests"]
        st["attainment"] = round(st["met_both"] / n, 6) if n else None
    rp.rep.per_action = rp.stats
    return rp.rep


class _Replayer:
    """:func:`replay`'s state: the build's generated controller, the reference :class:`LutFsm`
    and the SLA monitor, stepped record by record; the report and per-action statistics."""

    def __init__(self, build: LoadedBuild, log_path, operator_keys: dict):
        self.build, self.m, self.log_path = build, build.module, log_path
        self.ident = build.identity()
        self.rep = ReplayReport()
        n = len(build.lut)
        self.policy, self.operator_keys = build.operator, operator_keys
        self.ref = LutFsm(build.fsm, [self.m.lut_entry(a)[0] for a in range(n)],
                          [self.m.lut_entry(a)[1] for a in range(n)], build.masks, build.operator_config())
        self.accepted = None    # the accepted command record that the next decision must carry
        self.last_n: dict = {}   # key id -> n of its last accepted command in this log
        self.refused_token = None    # a command refused at its step: the step's token without it
        self.ctl = self.m.Controller()
        self.mon = SlaMonitor(build.limits, build.monitor)
        self.stats = {a: {"requests": 0, "met_latency": 0, "met_accuracy": 0, "met_both": 0, "verdict_compliant": 0}
                      for a in build.actions}
        self.started = False

    def bad(self, seq, what, logged, got) -> None:
        self.rep.mismatches.append((seq, what, logged, got))

    def open(self, ln) -> None:
        """An ``open`` record: it must name this build; the controller, reference and monitor reset."""
        r, s = ln.record, ln.seq
        for k, v in self.ident.items():
            if r.get(k) != v:
                raise BuildLoadError(f"record {s} (line {ln.line}) was written by another build: {k} is "
                                     f"{r.get(k)!r}, this build has {v!r}", self.log_path)
        self.ctl.reset()
        self.ref.reset()
        self.mon.reset()
        self.rep.sessions += 1
        self.started = True
        if self.accepted is not None:
            self.bad(self.accepted[0], "command", "accepted", "no decision carried it before the next session")
        self.accepted = self.refused_token = None

    def command(self, ln) -> None:
        """A ``command`` record: an accepted one must be declared (key id, command, action) and, with
        its key, carry a valid ``sig``; the next decision must carry it. A refused one changes nothing."""
        r, s = ln.record, ln.seq
        if self.policy is None:
            self.bad(s, "command", r.get("outcome"), "this build takes no operator commands")
            return
        outcome = r.get("outcome")
        self.rep.commands[outcome if outcome == "accepted" else str(r.get("refusal"))] += 1
        if outcome != "accepted":
            if r.get("token_without") is not None:
                self.refused_token = (s, r.get("token_without"))
            return
        c = r.get("command") or {}
        kid, word = c.get("key_id"), c.get("command")
        want = (CMD_CODES.get(word), self.build.actions.index(c["action"]) if c.get("action") in self.build.actions
                else 0)
        if kid not in self.policy.key_ids:
            self.bad(s, "command", kid, f"key id not in operator.keys {list(self.policy.key_ids)}")
        elif [r.get("cmd"), r.get("arg")] != list(want) or want[0] is None:
            self.bad(s, "command", [r.get("cmd"), r.get("arg")], list(want))
        elif want[0] == 1 and want[1] not in self.policy.lockable:
            self.bad(s, "command", c.get("action"), "not in operator.lock")
        elif want[0] == 2 and not self.policy.force:
            self.bad(s, "command", "force", "operator.force_conservative is false")
        if kid in self.operator_keys:
            mac = hmac.new(self.operator_keys[kid], canonical_bytes(c), hashlib.sha256).hexdigest()
            if not hmac.compare_digest(mac, str(c.get("sig"))):
                self.bad(s, "sig", c.get("sig"), f"does not verify under key {kid!r}")
            else:
                self.rep.signatures_checked += 1
        n = c.get("n")
        if not isinstance(n, int) or n <= self.last_n.get(kid, 0):
            self.bad(s, "command.n", n, f"an accepted command's n must be above {self.last_n.get(kid, 0)}, the last "
                                        f"n of key {kid!r} in this log")
        else:
            self.last_n[kid] = n
        if self.accepted is not None:
            self.bad(s, "command", "accepted", f"record {self.accepted[0]} was accepted and not yet applied")
        self.accepted = (s, r)

    def _operator_step(self, s, r, addr, fault, sla_in):
        """The step of a build with ``operator:``: the logged command, checked against the command
        records, and the override state; returns (token, reason) of the generated runtime."""
        ctl, op = self.ctl, r.get("operator")
        if op is None:   # written without it (AuditLog.append_step from the integrator's loop): no command
            op = {"cmd": 0, "arg": 0}
        elif not isinstance(op, dict):
            self.bad(s, "operator", op, "not an object with the step's command and override state")
            op = {"cmd": 0, "arg": 0}
        cmd, arg = op.get("cmd", 0), op.get("arg", 0)
        acc, self.accepted = self.accepted, None
        if cmd and (acc is None or [acc[1].get("cmd"), acc[1].get("arg")] != [cmd, arg]):
            self.bad(s, "operator", [cmd, arg], "a command with no accepted command record before it")
        if acc is not None and not cmd:
            self.bad(acc[0], "command", "accepted", f"decision {s} does not carry it")
        if op.get("before") is not None and list(ctl.operator_state) != op.get("before"):
            self.bad(s, "operator.before", op.get("before"), list(ctl.operator_state))
        without = copy.copy(ctl).step_addr(addr, fault, sla_in)[0]
        token, reason = ctl.step_addr(addr, fault, sla_in, cmd, arg)
        res = self.ref.step_op(addr, fault, sla_in, cmd, arg)
        if (res.token, int(res.reason)) != (token, reason):
            self.bad(s, "reference", [token, self.m.REASONS[reason]], [res.token, res.reason.name])
        if op.get("after") is not None and list(ctl.operator_state) != op.get("after"):
            self.bad(s, "operator.after", op.get("after"), list(ctl.operator_state))
        if acc is not None and [acc[1].get("token_without"), acc[1].get("token_with")] != [without, token]:
            self.bad(acc[0], "command.tokens", [acc[1].get("token_without"), acc[1].get("token_with")],
                     [without, token])
        ref, self.refused_token = self.refused_token, None
        if ref is not None and ref[1] != without:
            self.bad(ref[0], "command.token_without", ref[1], without)
        return token, reason

    def decision(self, ln) -> None:
        """A ``decision`` record: re-quantize, step both machines and the monitor, compare every
        logged field (:func:`replay`), then count it."""
        r, s, m, ctl = ln.record, ln.seq, self.m, self.ctl
        if not self.started:
            raise BuildLoadError(f"decision record {s} comes before any open record", self.log_path)
        self.rep.decisions += 1
        readings = [_logged_number(x) for x in r.get("readings", [])]
        try:
            addr, fault = m.quantize(readings)
        except ValueError as exc:
            self.bad(s, "readings", r.get("readings"), str(exc))
            return
        if fault != r.get("probe_fault") or (not fault and addr != r.get("addr")):
            self.bad(s, "addr", [r.get("addr"), r.get("probe_fault")], [None if fault else addr, fault])
        prop = conf = None
        if not fault:
            prop, c = m.lut_entry(addr)
            conf = bool(c)
        if [prop, conf] != [r.get("proposal"), r.get("confident")]:
            self.bad(s, "lut", [r.get("proposal"), r.get("confident")], [prop, conf])
        if list(ctl.state) != r.get("before"):
            self.bad(s, "before", r.get("before"), list(ctl.state))
        sla_in = r.get("sla_violation")
        if sla_in != self.mon.violation:
            self.bad(s, "sla_violation", sla_in, self.mon.violation)
        f_before, t_before = ctl.f, ctl.t
        if self.policy is not None:
            token, reason = self._operator_step(s, r, addr, fault, bool(sla_in))
        else:
            token, reason = ctl.step_addr(addr, fault, bool(sla_in))
            res = self.ref.step(addr, fault, bool(sla_in))
            if (res.token, res.reason.value) != (token, reason):
                self.bad(s, "reference", [token, m.REASONS[reason]], [res.token, res.reason.name])
        if [r.get("token"), r.get("reason")] != [token, m.REASONS[reason]]:
            self.bad(s, "decision", [r.get("token"), r.get("reason")], [token, m.REASONS[reason]])
        if list(ctl.state) != r.get("after"):
            self.bad(s, "after", r.get("after"), list(ctl.state))
        if r.get("action") != self.build.actions[token]:
            self.bad(s, "action", r.get("action"), self.build.actions[token])
        lat, acc = _logged_number(r.get("latency_ms")), _logged_number(r.get("accuracy_loss_pct"))
        v = self.mon.observe(token, lat, acc)
        logged_v = r.get("verdict")
        if logged_v is not None and logged_v.get("violation") != v.violation:
            self.bad(s, "verdict", logged_v.get("violation"), v.violation)
        self.count(token, reason, lat, acc, v.violation, f_before, t_before)

    def count(self, token: int, reason: int, lat, acc, violation: bool, f_before, t_before) -> None:
        """Per-action requests and SLA attainment, reasons, switches, fallbacks, recoveries, probe faults."""
        rep, build = self.rep, self.build
        name = build.actions[token]
        st = self.stats[name]
        lim = build.limits[token]
        ok_l, ok_a = _met(lat, lim.latency_ms), _met(acc, lim.accuracy_loss_pct)
        st["requests"] += 1
        st["met_latency"] += ok_l
        st["met_accuracy"] += ok_a
        st["met_both"] += ok_l and ok_a
        st["verdict_compliant"] += not violation
        rep.reasons[self.m.REASONS[reason]] += 1
        if reason == Reason.SWITCH:
            rep.switches[f"{build.actions[t_before]}->{name}"] += 1
        if reason == Reason.FALLBACK and not f_before:
            rep.fallbacks += 1
        if reason == Reason.RECOVER:
            rep.recoveries += 1
        if reason == Reason.PROBE_FAULT:
            rep.probe_faults += 1

