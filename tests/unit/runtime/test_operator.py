"""runtime/operator.py: the operator command intake (docs/operator.md), without a build."""

from __future__ import annotations

import json
import os
import stat

import pytest

from mi_certify.runtime.operator import (CommandFile, CommandSocket, Intake, OperatorPolicy, canonical_bytes,
                                         send_to_socket, sign_command)

ACTIONS = ("keep", "merge_conv", "int4", "offload_cpu")
POLICY = OperatorPolicy(lockable=(2,), force=True, yield_fallback=True, yield_probe_fault=True, max_steps=5,
                        key_ids=("ops-a", "ops-b"))
KA = b"a" * 16


def _line(n, what="lock", action="int4", key=KA, kid="ops-a", **kw):
    return json.dumps(sign_command(key, controller="ctl", key_id=kid, n=n, command=what, action=action,
                                   why="why", **kw)).encode()


class _Src:
    name = "test"

    def __init__(self, lines):
        self.lines = list(lines)

    def poll(self):
        out, self.lines = self.lines, []
        return out

    def close(self):
        pass


def _intake(lines, keys=None, now=0.0):
    return Intake(POLICY, ACTIONS, "ctl", {"ops-a": KA} if keys is None else keys, [_Src(lines)],
                  clock=lambda: now)


def test_signature_covers_every_field_in_canonical_order():
    f = sign_command(KA, controller="ctl", key_id="ops-a", n=1, command="lock", action="int4", why="x")
    assert canonical_bytes(f) == (b'{"action":"int4","command":"lock","controller":"ctl","format":'
                                  b'"mi-certify/operator-command-v1","key_id":"ops-a","n":1,"why":"x"}')
    with pytest.raises(ValueError):
        sign_command(KA, controller="ctl", key_id="ops-a", n=0, command="lock", action="int4", why="x")
    with pytest.raises(ValueError):
        sign_command(KA, controller="ctl", key_id="ops-a", n=1, command="force", action="int4", why="x")


def test_each_refusal_at_receipt_has_its_reason_and_an_authentic_command_uses_up_its_n():
    edited = _line(5).replace(b'"why": "why"', b'"why": "WHY"')
    lines = [_line(1), b"[1, 2]", _line(2, kid="ops-z"), _line(3, kid="ops-b"), _line(4, key=b"z" * 16),
             edited, _line(1), _line(6, action="offload_cpu"), _line(7, what="release", action=None),
             json.dumps(sign_command(KA, controller="other", key_id="ops-a", n=8, command="force", why="w")).encode()]
    it = _intake(lines)
    refused = it.poll()
    assert [p.refusal for p in refused] == ["malformed", "unknown_key", "no_key", "bad_signature", "bad_signature",
                                            "replayed", "undeclared", "wrong_controller"]
    queued = [it.next(), it.next(), it.next()]
    assert [(p.cmd, p.arg) for p in queued[:2]] == [(1, 2), (3, 0)] and queued[2] is None
    assert it.last_n == {"ops-a": 7}   # n 6 (undeclared, but authentic) was used up; forged n 4, 5 were not


def test_step_checks_expiry_priority_and_the_cell():
    it = _intake([_line(1, expires_unix=10.0), _line(2), _line(3), _line(4), _line(5, what="release", action=None)],
                 now=11.0)
    assert it.poll() == []
    p = it.next()
    assert not it.at_step(p, "HOLD", True) and p.refusal == "expired"
    p = it.next()
    assert not it.at_step(p, "RECOVER", True) and p.refusal == "higher_priority"
    p = it.next()
    assert not it.at_step(p, "HOLD", False) and p.refusal == "forbidden_here"
    p = it.next()
    assert it.at_step(p, "SWITCH", True) and p.refusal is None
    p = it.next()
    assert it.at_step(p, "FALLBACK", False)   # a release is never refused at the step
    assert it.counts == {"expired": 1, "higher_priority": 1, "forbidden_here": 1, "accepted": 2}


def test_the_command_file_is_tailed_and_a_partial_line_waits(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_bytes(_line(1) + b"\n" + _line(2)[:20])
    src = CommandFile(f)
    assert src.poll() == [_line(1)]
    with open(f, "ab") as fh:
        fh.write(_line(2)[20:] + b"\n")
    assert src.poll() == [_line(2)] and src.poll() == []
    with pytest.raises(ValueError, match="no such command file"):
        CommandFile(tmp_path / "missing")


def test_the_command_socket_is_private_takes_datagrams_and_is_removed(tmp_path):
    path = tmp_path / "op.sock"
    s = CommandSocket(path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with pytest.raises(ValueError, match="exists"):
            CommandSocket(path)
        send_to_socket(path, _line(1))
        send_to_socket(path, _line(2))
        assert s.poll() == [_line(1), _line(2)] and s.poll() == []
    finally:
        s.close()
    assert not path.exists()


def test_malformed_fields_are_refused_and_a_non_ascii_sig_does_not_crash():
    good = json.loads(_line(1))
    cases = [dict(good, sig="é" * 64), dict(good, why=""), dict(good, why="x" * 501), dict(good, why="a\nb"),
             dict(good, n=2 ** 60)]
    lines = [json.dumps(c).encode() for c in cases]
    lines.append(_line(2)[:-1] + b', "command": "force"}')   # a field given twice
    it = _intake(lines)
    assert [p.refusal for p in it.poll()] == ["malformed"] * 6


def test_at_the_end_queued_commands_and_an_incomplete_line_are_refused_not_lost(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_bytes(_line(1) + b"\n" + _line(2) + b"\n" + _line(3)[:30])
    it = Intake(POLICY, ACTIONS, "ctl", {"ops-a": KA}, [CommandFile(f)])
    assert it.poll() == [] and it.next().fields["n"] == 1
    left = it.leftovers()
    assert [(p.refusal, p.fields["n"] if p.fields else None) for p in left] == [("run_ended", 2), ("malformed", None)]
