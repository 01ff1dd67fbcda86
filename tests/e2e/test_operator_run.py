"""Issue 37, step 4: operator commands at run time (docs/operator.md). A build of the reference with
``operator:`` runs the incident trace; signed commands arrive (valid, forged, undeclared, replayed,
expired, malformed, from an unknown key, while the fallback holds); every one is in the audit log
with its outcome; ``audit verify`` and ``audit replay`` pass, replay catches an edited command, the
dashboard lists them."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import EXAMPLES, REFERENCE_MODEL, REFERENCE_SLA
from mi_certify.generator.pipeline.runner import BuildOptions, build
from mi_certify.runtime.audit import AuditLog, verify_log
from mi_certify.runtime.live import ControlLoop, load_build, replay
from mi_certify.runtime.operator import CommandFile, Intake, sign_command
from mi_certify.runtime.probes import FeatureMap, TraceProbe

INCIDENT = EXAMPLES / "workload" / "incident.csv"
WORKLOAD = EXAMPLES / "workload" / "convnet.onnx"
OPERATOR = ("operator: {lock: [int4, merge_conv], force_conservative: true, max_lock_steps: 12, "
            "keys: [ops-1, ops-2]}\n")
K1, K2, EVIL = b"1" * 16, b"2" * 32, b"e" * 16


@pytest.fixture(scope="module")
def op_build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oprun")
    text = re.sub(r"\ncosim:.*", "\n", re.sub(r"\noperator: \{.*\}", "", REFERENCE_SLA.read_text()), flags=re.S) + OPERATOR
    (tmp / "sla.yaml").write_text(text)
    out = tmp / "meta_controller"
    build(REFERENCE_MODEL, tmp / "sla.yaml", out, BuildOptions(skip_lint=True, skip_cosim=True, verify=False,
                                                               skip_rtl_proofs=True, skip_synth=True, distill=False))
    return out


def _cmd(key, n, what, action=None, why="test", kid="ops-1", **kw):
    f = sign_command(key, controller="meta_controller", key_id=kid, n=n, command=what, action=action, why=why, **kw)
    return json.dumps(f, sort_keys=True, separators=(",", ":"))


class _Clock:
    now = 1000.0

    def __call__(self):
        return self.now


def _run(build_dir, log_path, schedule, n=120, slow=()):
    """Step the loop n times on the incident trace; before step i append schedule[i] (lines) to the
    command file. The requests of the steps in ``slow`` take 100 ms (over every limit), the rest 5 ms."""
    b = load_build(build_dir)
    probe = TraceProbe(INCIDENT)
    cmds = log_path.with_suffix(".cmds")
    cmds.write_text("")
    clock = _Clock()
    intake = Intake(b.operator, b.actions, b.name, {"ops-1": K1, "ops-2": K2}, [CommandFile(cmds)], clock=clock)
    loop = ControlLoop(b, probe, FeatureMap.build(b.inputs, offered=probe.columns), intake=intake)
    steps = []
    with AuditLog(log_path, fsync="never", header=loop.audit_header()) as log:
        loop.audit = log
        for i in range(n):
            with open(cmds, "a") as fh:
                for line in schedule.get(i, ()):
                    fh.write(line + "\n")
            d = loop.decide()
            loop.complete(d, 100.0 if i in slow else 5.0, 0.0)
            steps.append(d)
    return loop, steps


def test_twenty_commands_each_logged_with_its_outcome_and_the_log_replays(op_build, tmp_path):
    b = load_build(op_build)
    assert b.operator.key_ids == ("ops-1", "ops-2") and b.operator.max_steps == 12
    sched = {
        2: [_cmd(K1, 1, "lock", "merge_conv", why="profiling the fused kernels")],   # forbidden_here (P2: idle)
        3: [_cmd(EVIL, 2, "lock", "int4", why="forged")],                             # bad_signature
        4: [_cmd(K1, 3, "lock", "offload_cpu")],                                      # undeclared
        5: [_cmd(K1, 1, "lock", "merge_conv")],                                       # replayed (n 1 again)
        6: ["{not json"],                                                             # malformed
        7: [_cmd(K1, 4, "lock", "int4", kid="ops-9")],                                # unknown_key
        8: [_cmd(K2, 1, "force", kid="ops-2", expires_unix=999.0)],                   # expired
        30: [_cmd(K2, 2, "force", kid="ops-2", why="firmware update")],               # accepted
        34: [_cmd(K2, 3, "release", kid="ops-2", why="update done")],                 # accepted
        40: [_cmd(K1, 5, "lock", "merge_conv"), _cmd(K1, 6, "release")],              # accepted, accepted (next step)
        46: [_cmd(K1, 7, "lock", "int4", why="a", kid="ops-2")],                      # bad_signature (K1 for ops-2)
        47: [_cmd(K2, 4, "lock", "keep", kid="ops-2")],                               # undeclared
        48: [json.dumps({"format": "mi-certify/operator-command-v1", "controller": "meta_controller",
                         "key_id": "ops-1", "n": 8, "command": "force", "why": "no sig"})],   # malformed
        49: [_cmd(K1, 9, "lock", "merge_conv", why="x")[:-3] + '"}'],                 # malformed (cut sig)
        60: [_cmd(K1, 10, "force", why="during the fallback")],                       # higher_priority
        95: [_cmd(K2, 5, "lock", "merge_conv", kid="ops-2")],                         # accepted
        96: [_cmd(K2, 6, "release", kid="ops-2")],                                    # accepted
        98: [_cmd(K2, 7, "lock", "int4", kid="ops-2")],
        100: [_cmd(K1, 11, "lock", "merge_conv", why="runs out by itself")],          # accepted, expires
    }
    log = tmp_path / "op.log"
    loop, steps = _run(op_build, log, sched, slow=range(50, 59))
    recs = loop.commands
    outcome = [r["outcome"] if r["outcome"] == "accepted" else r["refusal"] for r in recs]
    assert len(recs) == 20, outcome
    assert outcome[:7] == ["forbidden_here", "bad_signature", "undeclared", "replayed", "malformed", "unknown_key",
                           "expired"]
    assert outcome.count("bad_signature") == 2 and outcome.count("undeclared") == 2 and outcome.count("malformed") == 3
    assert outcome[15] == "higher_priority" and steps[60].reason == "FALLBACK"   # the SLA fallback wins
    # every command, accepted or refused, is a record in the chain, with who, what and why
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    logged = [x for x in lines if x["kind"] == "command"]
    assert len(logged) == 20 and [x["outcome"] for x in logged] == [r["outcome"] for r in recs]
    assert logged[0]["who"] == "ops-1" and logged[0]["what"] == "lock" and logged[0]["why"] == \
        "profiling the fused kernels"
    assert logged[0]["token_without"] == steps[2].token == 0 and "P2" not in logged[0]["detail"]
    # force and release are accepted while the engine idles (keep is the conservative action)
    assert outcome[7:11] == ["accepted"] * 4 and steps[30].reason == "FORCED" and steps[34].operator["cmd"] == 3
    # the accepted lock put merge_conv in force (the cell allows it) and said so; the release came a step later
    first = steps[40]
    assert first.operator["cmd"] == 1 and first.operator["after"] == [1, 1, 11] and first.reason == "LOCKED"
    assert first.token == 1 and logged[9]["token_with"] == 1 and logged[9]["changed"] is True
    assert steps[41].operator["cmd"] == 3 and steps[41].operator["after"] == [0, 0, 0]
    # a refused command changes nothing: the steps of refusals carry no command
    for i in (3, 4, 5, 6, 7, 8, 50, 51, 52):
        assert steps[i].operator["cmd"] == 0
    # the lock of step 100 expires after max_lock_steps = 12 steps: in force 100..111, never LOCKED after
    assert outcome[19] == "accepted" and steps[100].operator["after"] == [1, 1, 11]
    assert steps[111].operator["after"] == [0, 0, 0] and all(s.reason != "LOCKED" for s in steps[112:])
    assert verify_log(log).ok
    rep = replay(log, b, operator_keys={"ops-1": K1, "ops-2": K2})
    assert rep.ok and rep.decisions == 120, rep.mismatches[:5]
    assert rep.commands["accepted"] == outcome.count("accepted") and rep.signatures_checked == rep.commands["accepted"]


def test_replay_catches_an_edited_command_and_a_command_without_its_record(op_build, tmp_path):
    log = tmp_path / "e.log"
    _run(op_build, log, {42: [_cmd(K1, 1, "lock", "merge_conv")], 50: [_cmd(K1, 2, "release")]}, n=60)
    lines = log.read_text().splitlines()
    i = next(j for j, x in enumerate(lines) if '"kind":"command"' in x and '"outcome":"accepted"' in x)
    # an edited action in the accepted command: its signature no longer verifies, the tokens no longer match
    edited = lines[:i] + [lines[i].replace('"action":"merge_conv"', '"action":"int4"')] + lines[i + 1:]
    p = tmp_path / "edited.log"
    p.write_text("\n".join(edited) + "\n")
    rep = replay(p, load_build(op_build), operator_keys={"ops-1": K1})
    assert {m[1] for m in rep.mismatches} >= {"sig", "command"}
    # the command record removed: the decision carries a command nobody accepted
    p2 = tmp_path / "removed.log"
    p2.write_text("\n".join(lines[:i] + lines[i + 1:]) + "\n")
    rep2 = replay(p2, load_build(op_build))
    assert any(m[1] == "operator" and "no accepted command record" in str(m[3]) for m in rep2.mismatches)
    assert not verify_log(p2).ok


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def test_cli_command_run_replay_and_dashboard(op_build, tmp_path):
    (tmp_path / "k1").write_bytes(K1)
    (tmp_path / "evil").write_bytes(EVIL)
    cmds = tmp_path / "cmds.jsonl"
    cmds.write_text("")
    base = ["command", "--build", op_build, "--to", cmds]
    for extra in (["force", "--key-id", "ops-1", "--key", tmp_path / "k1", "--n", 1, "--why", "update"],
                  ["release", "--key-id", "ops-1", "--key", tmp_path / "evil", "--n", 2, "--why", "forged"],
                  ["release", "--key-id", "ops-1", "--key", tmp_path / "k1", "--n", 3, "--why", "done"]):
        r = _cli(*base, *extra)
        assert r.returncode == 0, r.stderr
    bad = _cli(*base, "lock", "warp", "--key-id", "ops-1", "--key", tmp_path / "k1", "--n", 4, "--why", "x")
    assert bad.returncode == 2 and "warp" in (bad.stdout + bad.stderr)
    bad = _cli(*base, "force", "--key-id", "nobody", "--key", tmp_path / "k1", "--n", 4, "--why", "x")
    assert bad.returncode == 2 and "operator.keys" in (bad.stdout + bad.stderr)
    log = tmp_path / "run.log"
    r = _cli("run", "--build", op_build, "--workload", WORKLOAD, "--probe", f"trace:{INCIDENT}", "--requests", 20,
             "--interval", 0, "--audit", log, "--fsync", "never", "--commands", cmds,
             "--operator-key", f"ops-1={tmp_path / 'k1'}", "--step", "python")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "operator commands: 3 received, 2 accepted, 1 refused (bad_signature 1)" in r.stdout + r.stderr
    # the same commands again, continuing the same log: already used, so refused as replayed
    r = _cli("run", "--build", op_build, "--workload", WORKLOAD, "--probe", f"trace:{INCIDENT}", "--requests", 5,
             "--interval", 0, "--audit", log, "--fsync", "never", "--commands", cmds,
             "--operator-key", f"ops-1={tmp_path / 'k1'}", "--step", "python")
    assert r.returncode == 0 and "operator commands: 3 received, 0 accepted, 3 refused (bad_signature 1, replayed 2)" \
        in r.stdout + r.stderr, r.stdout + r.stderr
    r = _cli("audit", "replay", log, "--build", op_build, "--operator-key", f"ops-1={tmp_path / 'k1'}")
    assert r.returncode == 0 and "signatures re-checked: 2 of 2 accepted" in r.stdout + r.stderr, r.stdout
    html = tmp_path / "run.html"
    r = _cli("audit", "report", log, "--build", op_build, "--out", html)
    assert r.returncode == 0, r.stdout
    page = html.read_text()
    assert 'id="operator-commands"' in page and "refused: bad_signature" in page and ">update<" in page
    # an operator key without a command source is bad input (exit 2)
    r = _cli("run", "--build", op_build, "--workload", WORKLOAD, "--requests", 1, "--operator-key", "ops-1=k")
    assert r.returncode == 2


def test_the_c_step_takes_the_same_commands(op_build, tmp_path):
    """The emitted C through ctypes, with the operator entry points: the same records as the Python step."""
    pytest.importorskip("mi_certify.verification.tools.c_tools")
    from mi_certify.runtime.c_step import CController, load_c_library
    from mi_certify.verification.tools.c_tools import shared_library
    b = load_build(op_build)
    so = shared_library([op_build / "meta_controller.c"], tmp_path / "lib.so")
    c = CController(load_c_library(so, b.name, operator=True), b.name, b.module)
    py = b.module.Controller()
    seq = [(0, 0), (1, 1), (0, 0), (2, 0), (0, 0), (3, 0), (1, 2), (0, 0)] * 8
    probe = TraceProbe(INCIDENT)
    fm = FeatureMap.build(b.inputs, offered=probe.columns)
    for cmd, arg in seq:
        values, _ = fm(probe.read())
        assert c.step_record(values, False, cmd, arg) == py.step_record(values, False, cmd, arg)
        assert c.operator_state == py.operator_state
