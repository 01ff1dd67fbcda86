"""Operator commands at run time: signed, checked, applied to one controller step, audited.

The machine's side of an intervention (lock an action, force the conservative action,
release) is the LUT-FSM's operator input (docs/fsm.md, "Operator interventions"), proved
with the build. This module is the **command intake** in front of it (docs/operator.md,
normative): who may issue a command, how it is authenticated, when it is refused, and the
``command`` record each one leaves in the audit log.

Command format ``mi-certify/operator-command-v1``: one JSON object (one line of a command
file, or one datagram on the command socket)::

    {"format": "mi-certify/operator-command-v1", "controller": NAME, "key_id": ID, "n": N,
     "command": "lock" | "force" | "release", "action": ACTION (lock only), "why": TEXT,
     "expires_unix": SECONDS (optional), "sig": HEX}

``sig`` = HMAC-SHA256(key, canonical bytes), the canonical bytes being the object without
``sig`` as JSON with sorted keys, no spaces, ASCII only (RFC 2104 HMAC, FIPS 180-4 SHA-256).
``key_id`` must be one of sla.yaml ``operator.keys`` (carried into the generated runtime as
``OPERATOR_KEYS``) and ``run`` must hold its key (``--operator-key ID=FILE``); ``n`` must grow
per key (a captured command cannot be replayed: ``run`` continuing an audit log takes each key's
last ``n`` from its command records; ``expires_unix`` bounds it across logs). Refusal reasons, in the order they are checked: ``malformed``, ``wrong_controller``,
``unknown_key``, ``no_key``, ``bad_signature``, ``replayed``, ``undeclared`` (a lock of an
action not in ``operator.lock``, a force without ``force_conservative``), then at the step it
would apply to: ``expired``, ``higher_priority`` (a lock or force while a probe fault, the SLA
fallback or its recovery holds and the override is declared to yield to it) and
``forbidden_here`` (a lock of an action a property forbids in the current cell). A refused
command changes nothing; an authenticated one (refused or not) uses up its ``n``.

At most one command applies per step (the machine has one command input): an accepted
command waits in order for the next step. Standard library only: it ships beside a
generated controller.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["COMMAND_FORMAT", "CommandFile", "CommandSocket", "Intake", "OperatorPolicy", "Pending",
           "canonical_bytes", "command_names", "load_operator_keys", "sign_command", "CMD_CODES"]

COMMAND_FORMAT = "mi-certify/operator-command-v1"
#: Command words and the machine's ``cmd`` codes (runtime/fsm.py ``Command``).
CMD_CODES = {"lock": 1, "force": 2, "release": 3}
#: Longest command line or datagram read (bytes); a longer one is refused as malformed.
MAX_COMMAND_BYTES = 4096
#: Longest ``why`` (characters).
MAX_WHY = 500
#: Refusals decided before a command's signature was verified: their ``n`` was not used up.
_UNAUTHENTICATED = ("malformed", "wrong_controller", "unknown_key", "no_key", "bad_signature", "replayed")
_FIELDS = {"format", "controller", "key_id", "n", "command", "action", "why", "expires_unix", "sig"}


def _no_duplicates(pairs):
    """json object hook: a key given twice is malformed (which one counts would be the parser's choice)."""
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"field {dup[0]!r} given twice")
    return dict(pairs)


def command_names() -> tuple[str, ...]:
    return tuple(CMD_CODES)


def canonical_bytes(fields: dict) -> bytes:
    """The bytes a command's ``sig`` is computed over: ``fields`` without ``sig``, JSON with sorted
    keys, separators ``,`` ``:``, ASCII escapes."""
    return json.dumps({k: v for k, v in fields.items() if k != "sig"}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False).encode("ascii")


def sign_command(key: bytes, *, controller: str, key_id: str, n: int, command: str, action: str | None = None,
                 why: str, expires_unix: float | None = None) -> dict:
    """A signed command object (the module docstring's format). Raises ValueError for a command word
    that is not lock/force/release, a lock without an action, an ``n`` below 1 or an empty ``why``."""
    if command not in CMD_CODES:
        raise ValueError(f"command {command!r}: expected one of {', '.join(CMD_CODES)}")
    if (command == "lock") != (action is not None):
        raise ValueError("a lock names one action; force and release name none")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n {n!r}: expected an integer >= 1 that grows with every command of this key")
    if not why.strip() or len(why) > MAX_WHY:
        raise ValueError(f"why: give the reason in 1 to {MAX_WHY} characters")
    fields = {"format": COMMAND_FORMAT, "controller": controller, "key_id": key_id, "n": n, "command": command,
              "why": why}
    if action is not None:
        fields["action"] = action
    if expires_unix is not None:
        fields["expires_unix"] = expires_unix
    fields["sig"] = hmac.new(key, canonical_bytes(fields), hashlib.sha256).hexdigest()
    return fields


def load_operator_keys(items) -> dict[str, bytes]:
    """``ID=FILE`` texts → {key id: key bytes}; each file holds at least 16 bytes. Raises ValueError
    (naming the item) for a malformed item, a repeated id, an unreadable or short file."""
    keys: dict[str, bytes] = {}
    for text in items:
        kid, sep, path = text.partition("=")
        if not sep or not kid or not path:
            raise ValueError(f"--operator-key {text!r}: expected ID=KEYFILE")
        if kid in keys:
            raise ValueError(f"--operator-key {text!r}: key id {kid!r} given twice")
        try:
            key = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the operator key file: {exc.strerror or exc}") from None
        if len(key) < 16:
            raise ValueError(f"{path}: operator key file holds {len(key)} bytes; at least 16 are required")
        keys[kid] = key
    return keys


@dataclass(frozen=True)
class OperatorPolicy:
    """The sla.yaml ``operator:`` section as the generated runtime carries it.

    lockable: tokens a lock may name; force: FORCE declared; yield_fallback / yield_probe_fault:
    an override yields to the SLA fallback (and its recovery) / to a probe fault; max_steps: steps an
    override stays in force; key_ids: who may issue commands.
    """

    lockable: tuple[int, ...]
    force: bool
    yield_fallback: bool
    yield_probe_fault: bool
    max_steps: int
    key_ids: tuple[str, ...]

    @classmethod
    def from_module(cls, m) -> "OperatorPolicy | None":
        """The policy of a generated runtime module, or None when it has no operator input."""
        if not hasattr(m, "OPERATOR_MAX_STEPS"):
            return None
        mask = int(m.OPERATOR_LOCKABLE)
        return cls(tuple(a for a in range(len(m.ACTIONS)) if (mask >> a) & 1), bool(m.OPERATOR_FORCE),
                   bool(m.OPERATOR_YIELD_FALLBACK), bool(m.OPERATOR_YIELD_PROBE_FAULT), int(m.OPERATOR_MAX_STEPS),
                   tuple(getattr(m, "OPERATOR_KEYS", ())))


@dataclass
class Pending:
    """One command as received: its text, the parsed object (None when unreadable), where it came
    from, when (``received_ns``, wall clock), and once checked its ``cmd``/``arg`` codes or the refusal."""

    raw: bytes
    source: str
    received_ns: int
    fields: dict | None = None
    cmd: int = 0
    arg: int = 0
    refusal: str | None = None
    detail: str = ""

    def record(self, actions, outcome: str, **decision) -> dict:
        """The fields of the ``command`` audit record (docs/operator.md, "Audit records")."""
        rec = {"source": self.source, "received_wall_ns": self.received_ns, "outcome": outcome,
               "refusal": self.refusal, "detail": self.detail or None}
        if self.fields is not None:
            rec["command"] = self.fields
            rec["who"] = self.fields.get("key_id")
            rec["what"] = self.fields.get("command")
            rec["why"] = self.fields.get("why")
            if outcome == "accepted":   # the machine's command input of the step it applied to
                rec["cmd"] = self.cmd
                rec["arg"] = self.arg
        else:
            rec["raw"] = self.raw[:MAX_COMMAND_BYTES].decode("ascii", "backslashreplace")
        rec.update(decision)
        return rec


class CommandFile:
    """Commands appended to a file while ``run`` runs: each complete line is one command (a line
    without its newline waits for the rest). The file must exist when the run starts; lines already
    in it are read too (a command in it applies once: ``n`` grows)."""

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"{self.path}: no such command file (create it, e.g. touch {self.path})")
        self.offset, self.rest, self.name = 0, b"", f"file:{self.path.name}"

    def poll(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(1 << 20)
        except OSError:
            return []
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        if len(self.rest) > MAX_COMMAND_BYTES:   # no newline in sight: refuse it as one malformed command
            lines.append(self.rest)
            self.rest = b""
        return [ln for ln in lines if ln.strip()]

    def close(self) -> None:
        pass


class CommandSocket:
    """A Unix datagram socket at ``path`` (mode 0600; created by ``run``, removed at close): each
    datagram is one command. A path that exists is refused (another run may own it)."""

    def __init__(self, path):
        self.path = Path(path)
        self.name = f"socket:{self.path.name}"
        if self.path.exists() or self.path.is_symlink():
            raise ValueError(f"{self.path}: exists; remove it or name another --command-socket path")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            old = os.umask(0o177)
            try:
                self.sock.bind(str(self.path))
            finally:
                os.umask(old)
            self.sock.setblocking(False)
        except OSError as exc:
            self.sock.close()
            raise ValueError(f"{self.path}: cannot create the command socket: {exc.strerror or exc}") from None

    def poll(self) -> list[bytes]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(MAX_COMMAND_BYTES + 1))
            except BlockingIOError:
                return out
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    return out
                raise

    def close(self) -> None:
        self.sock.close()
        try:
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        except OSError:
            pass


def send_to_socket(path, line: bytes) -> None:
    """Send one command datagram to a running ``run``'s command socket. Raises OSError."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(line, str(path))


@dataclass
class Intake:
    """Receives commands, authenticates them and hands the machine at most one per step.

    Args:
        policy: the build's :class:`OperatorPolicy`.
        actions: the build's action names (token order).
        controller: the build's controller name (a command names it).
        keys: {key id: key bytes} held by this run.
        sources: :class:`CommandFile` / :class:`CommandSocket` objects.
        clock: wall time in seconds (``expires_unix`` is compared with it).
    """

    policy: OperatorPolicy
    actions: tuple[str, ...]
    controller: str
    keys: dict
    sources: list
    clock: object = time.time
    last_n: dict = field(default_factory=dict)
    queue: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)

    def poll(self) -> list[Pending]:
        """Read every source; return the commands refused at once (to be logged now); queue the rest."""
        refused = []
        for src in self.sources:
            for raw in src.poll():
                p = Pending(raw, src.name, time.time_ns())
                self._check(p)
                (refused if p.refusal else self.queue).append(p)
        return refused

    def seed_from_log(self, lines) -> int:
        """Carry on a continued audit log: every key's last authenticated ``n`` from its ``command``
        records (``lines``: :func:`~mi_certify.runtime.audit.read_records` of the log), so that a command
        already received in an earlier run is refused as replayed. Records of this controller only; refusals
        before authentication (malformed … bad_signature) do not count. Returns how many were read."""
        n_read = 0
        for ln in lines:
            r = ln.record
            if not r or r.get("kind") != "command" or r.get("refusal") in _UNAUTHENTICATED:
                continue
            c = r.get("command")
            if not isinstance(c, dict) or c.get("controller") != self.controller:
                continue
            kid, n = c.get("key_id"), c.get("n")
            if isinstance(kid, str) and isinstance(n, int) and not isinstance(n, bool):
                self.last_n[kid] = max(self.last_n.get(kid, 0), n)
                n_read += 1
        return n_read

    def next(self) -> Pending | None:
        """The oldest queued command (for this step), or None."""
        return self.queue.pop(0) if self.queue else None

    def refuse(self, p: Pending, reason: str, detail: str) -> Pending:
        p.refusal, p.detail = reason, detail
        return p

    def _check(self, p: Pending) -> None:
        """Authenticity and declaration (the step-independent checks, in the module docstring's order)."""
        try:
            if len(p.raw) > MAX_COMMAND_BYTES:
                raise ValueError(f"longer than {MAX_COMMAND_BYTES} bytes")
            obj = json.loads(p.raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            extra = sorted(set(obj) - _FIELDS)
            if extra:
                raise ValueError(f"unknown field {extra[0]!r}")
            if obj.get("format") != COMMAND_FORMAT:
                raise ValueError(f"format is {obj.get('format')!r}, expected {COMMAND_FORMAT!r}")
            for k, typ in (("controller", str), ("key_id", str), ("command", str), ("why", str), ("sig", str)):
                if not isinstance(obj.get(k), typ):
                    raise ValueError(f"field {k!r} missing or not a string")
            if not re.fullmatch(r"[0-9a-f]{64}", obj["sig"]):
                raise ValueError("field 'sig' is not 64 lower-case hex digits")
            if not 1 <= len(obj["why"]) <= MAX_WHY or any(ord(ch) < 32 or ord(ch) == 127 for ch in obj["why"]):
                raise ValueError(f"field 'why' must be 1 to {MAX_WHY} characters without control characters")
            n = obj.get("n")
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < 2 ** 53:
                raise ValueError("field 'n' missing or not an integer in 1 .. 2^53 - 1")
            if obj["command"] not in CMD_CODES:
                raise ValueError(f"command {obj['command']!r}: expected one of {', '.join(CMD_CODES)}")
            if (obj["command"] == "lock") != ("action" in obj):
                raise ValueError("a lock names one action (field 'action'); force and release name none")
            exp = obj.get("expires_unix")
            if exp is not None and (isinstance(exp, bool) or not isinstance(exp, (int, float))):
                raise ValueError("field 'expires_unix' is not a number")
            canonical_bytes(obj)
        except (ValueError, UnicodeDecodeError) as exc:
            self.refuse(p, "malformed", str(exc)[:200])
            return self._count(p)
        p.fields = obj
        kid = obj["key_id"]
        if obj["controller"] != self.controller:
            self.refuse(p, "wrong_controller", f"signed for controller {obj['controller']!r}, this is "
                                               f"{self.controller!r}")
        elif kid not in self.policy.key_ids:
            self.refuse(p, "unknown_key", f"key id {kid!r} is not in sla.yaml operator.keys")
        elif kid not in self.keys:
            self.refuse(p, "no_key", f"this run holds no key for {kid!r} (--operator-key {kid}=FILE)")
        elif not hmac.compare_digest(hmac.new(self.keys[kid], canonical_bytes(obj), hashlib.sha256).hexdigest(),
                                     obj["sig"]):
            self.refuse(p, "bad_signature", f"sig does not verify under key {kid!r}")
        elif obj["n"] <= self.last_n.get(kid, 0):
            self.refuse(p, "replayed", f"n {obj['n']} is not above {self.last_n[kid]}, the last of key {kid!r}")
        else:
            self.last_n[kid] = obj["n"]   # authenticated: the n is used up whatever follows
            p.cmd = CMD_CODES[obj["command"]]
            if p.cmd == 1:
                name = obj["action"]
                if name not in self.actions:
                    self.refuse(p, "undeclared", f"action {name!r} is not an action of this controller")
                elif self.actions.index(name) not in self.policy.lockable:
                    allowed = ", ".join(self.actions[a] for a in self.policy.lockable) or "none"
                    self.refuse(p, "undeclared", f"action {name!r} is not in operator.lock (lockable: {allowed})")
                else:
                    p.arg = self.actions.index(name)
            elif p.cmd == 2 and not self.policy.force:
                self.refuse(p, "undeclared", "force is not declared (operator.force_conservative is false)")
        self._count(p)

    def _count(self, p: Pending) -> None:
        if p.refusal:
            self.counts[p.refusal] = self.counts.get(p.refusal, 0) + 1

    def at_step(self, p: Pending, base_reason: str, allowed_here: bool) -> bool:
        """The step-dependent checks of command ``p`` against the step it would apply to: ``base_reason``
        is the reason the step takes without the command, ``allowed_here`` whether the cell allows the
        locked action. Returns True when it applies; otherwise ``p.refusal`` says why."""
        exp = p.fields.get("expires_unix")
        now = self.clock()
        if exp is not None and now > exp:
            self.refuse(p, "expired", f"expires_unix {exp} is before the step's time {now:.3f}")
        elif p.cmd in (1, 2) and self.policy.yield_probe_fault and base_reason == "PROBE_FAULT":
            self.refuse(p, "higher_priority", "a probe fault holds and the override yields to it "
                                              "(operator.yield_to_probe_fault)")
        elif p.cmd in (1, 2) and self.policy.yield_fallback and base_reason in ("FALLBACK", "RECOVER"):
            self.refuse(p, "higher_priority", f"the SLA fallback holds (reason {base_reason}) and the override "
                                              "yields to it (operator.yield_to_fallback)")
        elif p.cmd == 1 and not allowed_here:
            self.refuse(p, "forbidden_here", f"a property forbids {self.actions[p.arg]} in the current cell")
        if p.refusal:
            self.counts[p.refusal] = self.counts.get(p.refusal, 0) + 1
            return False
        self.counts["accepted"] = self.counts.get("accepted", 0) + 1
        return True

    def leftovers(self) -> list[Pending]:
        """At the end of a run: the commands that never reached a step (refused ``run_ended``; an
        authenticated one has used up its ``n``) and a last line without its newline (``malformed``)."""
        out = []
        for p in self.queue:
            out.append(self.refuse(p, "run_ended", "the run ended before the step it would have applied to"))
        self.queue = []
        for src in self.sources:
            rest = getattr(src, "rest", b"")
            if rest.strip():
                p = Pending(rest, src.name, time.time_ns())
                out.append(self.refuse(p, "malformed", "no newline at the end of the command file when the run "
                                                       "ended (an incomplete line)"))
                src.rest = b""
        for p in out:
            self.counts[p.refusal] = self.counts.get(p.refusal, 0) + 1
        return out

    def close(self) -> None:
        for s in self.sources:
            s.close()
