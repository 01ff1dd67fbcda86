"""Audit log: chain and MACs, exact location of every tampering, torn tails, SIGKILL safety."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from mi_certify.runtime.audit import AuditError, AuditLog, key_id, load_key, read_records, verify_log

KEY = b"0123456789abcdef0123456789abcdef"


def make_log(path, n=20, key=None, fsync="never"):
    with AuditLog(path, key=key, fsync=fsync, header={"controller": "t"}) as log:
        for i in range(n):
            log.append("decision", {"i": i, "x": i * 0.5})
    return path  # records: open (0), decisions 1..n, close (n + 1)


def lines_of(path):
    return path.read_bytes().split(b"\n")[:-1]


def write_lines(path, lines, tail=b""):
    path.write_bytes(b"\n".join(lines) + b"\n" + tail)


def findings(path, key=None, anchors=()):
    return [(f.kind, f.seq) for f in verify_log(path, key, anchors).findings]


@pytest.mark.parametrize("key", [None, KEY])
def test_intact_log_verifies_and_counts_records(tmp_path, key):
    p = make_log(tmp_path / "a.log", 20, key)
    rep = verify_log(p, key)
    assert rep.ok and rep.records == 22 and rep.closed and rep.torn_tail == 0
    lines, torn = read_records(p)
    assert [ln.seq for ln in lines] == list(range(22)) and torn == b""
    assert lines[0].record["kind"] == "open" and lines[-1].record == {**lines[-1].record, "kind": "close", "records": 22}
    assert lines[0].record["key_id"] == (key_id(key) if key else None)


@pytest.mark.parametrize("key", [None, KEY])
def test_every_kind_of_tampering_is_located_by_record_index(tmp_path, key):
    p = make_log(tmp_path / "a.log", 30, key)
    orig = lines_of(p)

    edited = list(orig)
    edited[7] = edited[7].replace(b'"i":6', b'"i":66')
    write_lines(p, edited)
    assert findings(p, key) == [("edited", 7)]

    removed = orig[:5] + orig[6:]
    write_lines(p, removed)
    assert findings(p, key) == [("removed", 5)]

    swapped = list(orig)
    swapped[10], swapped[11] = swapped[11], swapped[10]
    write_lines(p, swapped)
    assert findings(p, key) == [("reordered", 10), ("reordered", 11)]

    moved = orig[:4] + orig[9:] + orig[4:9]  # a block of five records moved to the end
    write_lines(p, moved)
    assert findings(p, key) == [("reordered", s) for s in range(4, 9)]

    inserted = orig[:15] + [orig[12]] + orig[15:]  # a replayed copy of a genuine record
    write_lines(p, inserted)
    assert findings(p, key) == [("inserted", 12)]
    assert verify_log(p, key).findings[0].line == 16

    garbage = orig[:20] + [b'{"hello": "world"}'] + orig[20:]
    write_lines(p, garbage)
    assert findings(p, key) == [("unreadable", None)]

    several = list(orig)
    several[3] = several[3].replace(b'"x":1.0', b'"x":1.5')
    several[25], several[26] = several[26], several[25]
    del several[18]
    write_lines(p, several)
    assert findings(p, key) == [("edited", 3), ("removed", 18), ("reordered", 25), ("reordered", 26)]


def test_rebuilt_chain_passes_without_key_but_fails_with_it(tmp_path):
    """Without a key an editor can recompute every hash; the HMAC stops that."""
    import hashlib
    import hmac
    import json
    p = make_log(tmp_path / "a.log", 10, KEY)
    forged, prev = [], "0" * 64
    for raw in lines_of(p):
        rec = json.loads(raw)
        rec.pop("mac")
        if rec.get("i") == 4:
            rec["i"] = 44
        rec["prev"] = prev
        fields = {k: v for k, v in rec.items() if k not in ("seq", "kind", "prev")}
        body = (f'{{"seq":{rec["seq"]},"kind":"{rec["kind"]}",'
                + json.dumps(fields, sort_keys=True, separators=(",", ":"))[1:-1]
                + f',"prev":"{prev}"}}')
        mac = hmac.new(b"wrong key, 16+ bytes", body.encode(), hashlib.sha256).hexdigest()
        line = f'{body[:-1]},"mac":"{mac}"}}'.encode()
        forged.append(line)
        prev = hashlib.sha256(line).hexdigest()
    write_lines(p, forged)
    assert verify_log(p).ok  # a consistent chain: nothing to see without the key
    assert findings(p, KEY) == [("edited", s) for s in range(12)]


def test_stripped_macs_fail_with_the_key(tmp_path):
    p = make_log(tmp_path / "a.log", 3, KEY)
    import re
    write_lines(p, [re.sub(rb',"mac":"[0-9a-f]{64}"', b"", ln) for ln in lines_of(p)])
    assert ("edited", 0) in findings(p, KEY)


def test_torn_last_line_is_reported_not_failed_and_cut_on_reopen(tmp_path):
    p = make_log(tmp_path / "a.log", 5, KEY)
    data = p.read_bytes()
    p.write_bytes(data + b'{"seq":7,"kind":"decision","t_mo')
    rep = verify_log(p, KEY)
    assert rep.ok and rep.torn_tail == 32 and rep.records == 7
    assert any("torn last line" in n for n in rep.notes)
    with AuditLog(p, key=KEY, fsync="always", header={"controller": "t"}) as log:
        log.append("decision", {"i": 99})
    lines, torn = read_records(p)
    assert torn == b"" and [ln.seq for ln in lines] == list(range(10))
    assert lines[7].record["kind"] == "open" and lines[7].record["recovered"]["torn_bytes"] == 32
    assert verify_log(p, KEY).ok


def test_continuing_a_log_needs_the_same_key(tmp_path):
    p = make_log(tmp_path / "a.log", 2, KEY)
    with pytest.raises(AuditError, match="was started with key .* now no key is given"):
        AuditLog(p, header={})
    with pytest.raises(AuditError, match="now key"):
        AuditLog(p, key=b"another key of 16+ bytes", header={})
    (tmp_path / "b.log").write_text("hello\n")
    with pytest.raises(AuditError, match="not a mi-certify/audit-v1 log"):
        AuditLog(tmp_path / "b.log")


def test_bad_key_files_and_policies_are_refused(tmp_path):
    (tmp_path / "short.key").write_bytes(b"short")
    with pytest.raises(AuditError, match="holds 5 bytes; at least 16"):
        load_key(tmp_path / "short.key")
    with pytest.raises(AuditError, match="cannot read the key file"):
        load_key(tmp_path / "missing.key")
    with pytest.raises(AuditError, match="unknown fsync policy 'sometimes'"):
        AuditLog(tmp_path / "c.log", fsync="sometimes")


_WRITER = r"""
import sys
from mi_certify.runtime.audit import AuditLog
path, policy, key = sys.argv[1], sys.argv[2], (sys.argv[3].encode() if len(sys.argv) > 3 else None)
log = AuditLog(path, key=key, fsync=policy, header={"controller": "crash"})
out = sys.stdout
i = 0
while True:
    if i % 2:  # the generated runtime's path: a step_record tuple (one template; with a key, two calls)
        r = log.append_step((i % 4096, False, i % 4, bool(i % 3), (0, 0, 0, 0, 0, 0, 0), (i % 4, 0, i % 3, 0, 0, 0, 0),
                             i % 4, 0), [0.5, i * 0.25, 1e22], bool(i % 5 == 0), "keep", "HOLD", i / 7, 0.0)
    else:
        r = log.append("decision", {"i": i, "pad": "x" * (i % 300)})
    out.write(f"{r.seq}\n")
    out.flush()
    i += 1
"""


def test_sigkill_at_random_points_loses_no_acknowledged_record(tmp_path):
    """100 SIGKILLs at random moments of a logging loop (policies always / every:8 / never,
    with and without a key, fresh logs and logs continued after a kill): every
    acknowledged record is in the file and every log verifies."""
    rng = random.Random(7)
    policies = ["always", "every:8", "never"]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    kills, logs = 0, set()
    for i in range(100):
        policy = policies[i % 3]
        key = "k" * 32 if i % 2 else None
        path = tmp_path / f"crash_{i % 25}_{policy}_{bool(key)}.log"  # some logs are killed several times
        logs.add((path, key))
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), policy] + ([key] if key else []),
                                stdout=subprocess.PIPE, env=env)
        # wait until the writer runs (first ack), then kill it at a random moment
        first = proc.stdout.readline()
        assert first, "writer did not start"
        time.sleep(rng.uniform(0, 0.03))
        proc.send_signal(signal.SIGKILL)
        rest = proc.stdout.read()
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        kills += 1
        acked = [int(x) for x in (first + rest).split()]
        lines, torn = read_records(path)
        present = {ln.seq for ln in lines if ln.record is not None}
        assert set(acked) <= present, f"kill {i}: acknowledged records lost: {sorted(set(acked) - present)[:5]}"
        rep = verify_log(path, key.encode() if key else None)
        assert rep.ok, (i, [f.to_json() for f in rep.findings])
    assert kills == 100
    for path, key in logs:  # reopening cuts torn tails; the continued logs verify too
        AuditLog(path, key=key.encode() if key else None, fsync="never", header={}).close()
        rep = verify_log(path, key.encode() if key else None)
        assert rep.ok and rep.closed and rep.torn_tail == 0


def test_a_wrong_key_is_named_once(tmp_path):
    from mi_certify.runtime.audit import AuditLog, verify_log
    p = tmp_path / "k.jsonl"
    log = AuditLog(p, key=b"the right key, 16+ bytes", header={})
    for i in range(5):
        log.append("decision", {"i": i})
    log.close()
    rep = verify_log(p, key=b"the wrong key, 16+ bytes")
    assert not rep.ok and rep.notes[0].startswith("no record's MAC verifies with this key")
    assert verify_log(p, key=b"the right key, 16+ bytes").ok


def test_decision_records_keep_every_value_exactly(tmp_path):
    """The fast encoder (orjson) must write each reading so that it parses back to the same
    binary64 value, tell None (unavailable) from NaN/inf (strings), and stay valid JSON."""
    import json

    import numpy as np

    from mi_certify.runtime.audit import encode_decision
    from mi_certify.runtime.sla import SlaVerdict

    tricky = [0.1 + 0.2, 1e-05, 1e22, -0.0, 5e-324, 2.0 ** 60 + 1.0]
    cases = [tricky[:5], [None, float("nan"), float("inf"), -float("inf"), 0.5], [np.float32(0.1), np.float64(0.3), 7]]
    path = tmp_path / "exact.log"
    with AuditLog(path, fsync="never", header={}) as log:
        for readings in cases:
            log.append_fields("decision", encode_decision(
                readings=readings, addr=None if None in readings else 3, probe_fault=None in readings, proposal=1,
                confident=True, sla_violation=False, before=(0, 0, 0, 0, 0, 0, 0),
                after=np.array([1, 1, 0, 10, 0, 0, 0]), token=1, action="merge_conv", reason="SWITCH",
                latency_ms=float("nan"), accuracy_loss_pct=0.1 + 0.7,
                verdict=SlaVerdict(1, True, True, False, float("inf"), 0.0, 3)))
    assert verify_log(path).ok
    recs = [json.loads(line) for line in lines_of(path)][1:-1]
    assert recs[0]["readings"] == tricky[:5] and str(recs[0]["readings"][3]) == "-0.0"
    assert recs[1]["readings"] == [None, "nan", "inf", "-inf", 0.5] and recs[1]["addr"] is None
    assert recs[2]["readings"] == [float(np.float32(0.1)), 0.3, 7]  # float32 kept as its exact binary64 value
    assert recs[0]["after"] == [1, 1, 0, 10, 0, 0, 0] and recs[0]["latency_ms"] == "nan"
    assert recs[0]["accuracy_loss_pct"] == 0.1 + 0.7
    assert recs[0]["verdict"] == {"action": 1, "violation": True, "latency": True, "accuracy": False,
                                  "latency_ms": "inf", "accuracy_loss_pct": 0.0, "samples": 3}


def test_an_external_anchor_catches_a_rebuilt_chain_and_a_cut_tail_without_a_key(tmp_path):
    """The head hash kept elsewhere (what `run` prints) must be in the intact chain."""
    import hashlib
    import json
    p = make_log(tmp_path / "a.log", 10)
    lines = lines_of(p)
    head = hashlib.sha256(lines[-1]).hexdigest()
    mid = hashlib.sha256(lines[5]).hexdigest()
    assert verify_log(p, anchors=[f"11:{head}", mid]).ok
    assert findings(p, anchors=[f"3:{mid}"]) == [("anchor", 3)]  # right hash, wrong seq
    # an editor without a key rebuilds the chain after changing record 4: consistent, but the anchor is gone
    forged, prev = [], "0" * 64
    for raw in lines:
        rec = json.loads(raw)
        if rec.get("i") == 3:
            rec["x"] = 99.0
        fields = {k: v for k, v in rec.items() if k not in ("seq", "kind", "prev")}
        line = (f'{{"seq":{rec["seq"]},"kind":"{rec["kind"]}",'
                + json.dumps(fields, sort_keys=True, separators=(",", ":"))[1:-1] + f',"prev":"{prev}"}}').encode()
        forged.append(line)
        prev = hashlib.sha256(line).hexdigest()
    write_lines(p, forged)
    assert verify_log(p).ok
    assert findings(p, anchors=[head]) == [("anchor", None)]
    # the tail cut off (close record and two decisions): a crash looks the same, the anchor tells
    write_lines(p, lines[:-3])
    rep = verify_log(p)
    assert rep.ok and not rep.closed
    assert findings(p, anchors=[f"11:{head}"]) == [("anchor", 11)]
    with pytest.raises(AuditError, match="not \\[SEQ:\\]SHA256"):
        verify_log(p, anchors=["11:abc"])


def test_encode_step_writes_the_bytes_of_encode_decision(monkeypatch):
    """The positional fast path (a step_record tuple) and the keyword API give the same
    bytes, for a step with a LUT entry, a probe fault and mixed values; and they are the
    bytes of the previous release's encoder (one template with every field formatted)."""
    import itertools
    import json
    import math

    import numpy as np

    from mi_certify.runtime import audit
    from mi_certify.runtime.sla import SlaVerdict

    monkeypatch.setattr(audit, "_mono_ns", lambda: 123)
    monkeypatch.setattr(audit, "_wall_ns", lambda: 1700000000000000000)
    old = (b'"t_mono_ns":%d,"t_wall_ns":%d,"readings":%s%s,"addr":%s,"probe_fault":%s,"proposal":%s,'
           b'"confident":%s,"sla_violation":%s,"before":%s,"after":%s,"token":%d,"action":"%s","reason":"%s",'
           b'"latency_ms":%s,"accuracy_loss_pct":%s')
    js = {None: b"null", True: b"true", False: b"false"}
    n = 0
    for readings, (addr, fault, prop, conf), sla, lat, verdict, extra, probes in itertools.product(
            ([0.1 + 0.2, 1e-05, 1e22, -0.0, 5e-324], [None, math.nan, math.inf, 0.5, 7]),
            ((1234, False, 2, True), (0, False, 0, False), (None, True, None, None), (None, True, 3, None),
             (7, False, None, 1)),
            (False, True), (5.0, math.nan, None, 3), (None, SlaVerdict(1, True, False, True, 5.0, math.inf, 3)),
            (None, '{"request":1}'), (None, '{"p":[1,"u"]}')):
        before, after = (0, 0, 0, 0, 0, 0, 0), (1, 1, 0, 10, 0, 0, 0)
        kw = dict(readings=readings, addr=addr, probe_fault=fault, proposal=prop, confident=conf,
                  sla_violation=sla, before=before, after=after, token=1, action="merge_conv", reason="SWITCH",
                  latency_ms=lat, accuracy_loss_pct=0.25, verdict=verdict, probes_json=probes, extra_json=extra)
        text = audit.encode_decision(**kw)
        assert audit.encode_step((addr, fault, prop, conf, before, after, 1, 2), readings, sla, "merge_conv",
                                 "SWITCH", lat, 0.25, verdict, probes, extra) == text
        want = old % (123, 1700000000000000000, audit._readings(readings),
                      b"" if probes is None else b',"probes":' + probes.encode(),
                      js[None] if addr is None else b"%d" % addr, js[fault],
                      js[None] if prop is None else b"%d" % prop, js[None if conf is None else bool(conf)],
                      js[sla], b"[0,0,0,0,0,0,0]", b"[1,1,0,10,0,0,0]", 1, b"merge_conv", b"SWITCH",
                      audit._number(lat), b"0.25")
        assert text.startswith(want)
        rec = json.loads(b"{" + text + b"}")
        assert rec["addr"] == addr and rec["proposal"] == prop and rec["confident"] == (None if conf is None
                                                                                        else bool(conf))
        n += 1
    assert n == 2 * 5 * 2 * 4 * 2 * 2 * 2
    assert audit.encode_step((5, False, 1, True, np.array([0, 1, 2, 3, 4, 5, 6]), (0,) * 7, 1, 2), [0.5], False,
                             "a", "b").count(b'"before":[0,1,2,3,4,5,6]') == 1


@pytest.mark.parametrize("key", [None, KEY])
def test_append_decision_writes_the_bytes_of_append_fields_of_encode_decision(tmp_path, monkeypatch, key):
    """The live loop's one-call record (AuditLog.append_decision: one template for the whole line) and
    the two-call path it replaced (append_fields("decision", encode_decision(...))) write the same log,
    byte for byte and chain for chain: steps and probe faults, verdicts with finite, infinite and integer
    statistics, measurements of every kind, probes and extra fields (str and bytes) or none, operator
    fields, with and without a key."""
    import itertools
    import math

    import numpy as np

    from mi_certify.runtime import audit
    from mi_certify.runtime.audit import encode_decision
    from mi_certify.runtime.sla import SlaVerdict

    monkeypatch.setattr(audit, "_wall_ns", lambda: 1700000000000000000)
    monkeypatch.setattr(os, "getpid", lambda: 4242)
    cases = list(itertools.product(
        ([0.1 + 0.2, 1e-05, 1e22, -0.0, 5e-324], [None, math.nan, math.inf, 0.5, 7], [np.float32(0.1), 3, 0.5]),
        ((1234, False, 2, True), (0, False, 0, False), (None, True, None, None), (None, True, 3, None),
         (7, False, None, 1)),
        (False, True), (5.0, math.nan, None, 3, -0.0, math.inf), (0.25, None, 1e300),
        (None, SlaVerdict(1, True, False, True, 5.0, math.inf, 3), SlaVerdict(2, False, False, False, 4, -0.0, 20),
         SlaVerdict(0, True, True, True, math.inf, math.nan, 1)),
        (None, '{"p":[1,"u"]}', b'{"q":null}'), (None, '{"request":1}', b'{"request":2,"phase":"quiet"}'),
        (None, '{"cmd":0,"arg":0,"before":[0,0,0],"after":[0,0,0]}')))
    logs = []
    for how in ("two calls", "append_decision"):
        clock = itertools.count(1000, 7)
        monkeypatch.setattr(audit, "_mono_ns", lambda: next(clock))
        path = tmp_path / f"{how.replace(' ', '_')}.log"
        with AuditLog(path, key=key, fsync="never", header={"controller": "t"}) as log:
            for readings, (addr, fault, prop, conf), sla, lat, acc, verdict, probes, extra, op in cases:
                args = (readings, addr, fault, prop, conf, sla, (0, 0, 0, 0, 0, 0, 0), np.array([1, 1, 0, 10, 0, 0, 0]),
                        1, "merge_conv", "SWITCH", lat, acc, verdict, probes, extra, op)
                if how == "two calls":
                    names = ("readings", "addr", "probe_fault", "proposal", "confident", "sla_violation", "before",
                             "after", "token", "action", "reason", "latency_ms", "accuracy_loss_pct", "verdict",
                             "probes_json", "extra_json", "operator_json")
                    receipt = log.append_fields("decision", encode_decision(**dict(zip(names, args))))
                else:
                    receipt = log.append_decision(*args)
                assert receipt.seq == log.seq - 1 and receipt.sha256 == log.prev
        logs.append(path.read_bytes())
    assert logs[0] == logs[1] and logs[0].count(b'"kind":"decision"') == len(cases) == 3 * 5 * 2 * 6 * 3 * 4 * 3 * 3 * 2
    assert verify_log(tmp_path / "append_decision.log", key).ok
    with pytest.raises(AuditError, match="closed"):
        log.append_decision(*args)


@pytest.mark.parametrize("key, fsync", [(None, "never"), (None, "every:3"), (KEY, "always")])
def test_append_step_writes_the_records_of_append_fields_and_encode_step(tmp_path, monkeypatch, key, fsync):
    """append_step (one template for the whole line) against the two-call path, record by
    record: steps with a LUT entry, probe faults, non-finite and missing measurements,
    verdicts, probes and extra fields; the files are byte-identical and verify."""
    import math

    from mi_certify.runtime import audit
    from mi_certify.runtime.sla import SlaVerdict

    monkeypatch.setattr(audit, "_mono_ns", lambda: 42)
    monkeypatch.setattr(audit, "_wall_ns", lambda: 1700000000123456789)
    st0, st1 = (0, 0, 0, 0, 0, 0, 0), (1, 1, 0, 10, 0, 0, 0)
    cases = [((1234, False, 1, True, st0, st1, 1, 2), [0.1 + 0.2, 1e-05, 60.0], False, 5.25, 0.0, {}),
             ((7, False, 0, False, st1, st1, 1, 3), [0.5, 0.5, 0.5], True, 0.1 + 0.7, 2.5, {}),
             ((None, True, None, None, st1, st0, 0, 7), [None, math.nan, 0.5], False, 5.0, 0.0, {}),
             ((3, False, 2, True, st0, st0, 0, 0), [0.5], False, math.inf, None, {}),
             ((3, False, 2, True, st0, st0, 0, 0), [0.5], False, 4, 0.0, {}),
             ((3, False, 2, True, st0, st0, 0, 0), [0.5], False, 5.0, 0.0,
              {"verdict": SlaVerdict(0, False, False, False, 5.0, 0.0, 1)}),
             ((3, False, 2, True, st0, st0, 0, 0), [0.5], False, 5.0, 0.0, {"probes_json": '{"a":[1,"u"]}'}),
             ((3, False, 2, True, st0, st0, 0, 0), [0.5], False, 5.0, 0.0, {"extra_json": '{"request":3}'})]
    paths = [tmp_path / "fields.log", tmp_path / "step.log"]
    receipts = [[], []]
    for which, path in enumerate(paths):
        with AuditLog(path, key=key, fsync=fsync, header={"controller": "t"}) as log:
            for step, readings, sla, lat, acc, kw in cases * 2:
                if which == 0:
                    r = log.append_fields("decision", audit.encode_step(step, readings, sla, "int4", "SWITCH", lat,
                                                                        acc, **kw))
                else:
                    r = log.append_step(step, readings, sla, "int4", "SWITCH", lat, acc, **kw)
                receipts[which].append(r)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert receipts[0] == receipts[1] and [r.seq for r in receipts[1]] == list(range(1, 17))
    # every:3 counts the open record (seq 0) too
    assert all(r.synced == (fsync == "always" or (fsync == "every:3" and (r.seq + 1) % 3 == 0)) for r in receipts[1])
    assert verify_log(paths[1], key).ok and len(lines_of(paths[1])) == 18
