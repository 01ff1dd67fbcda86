"""The audit log under the faults of the campaign (issue 31, bench/faults.py): two writers on one
log, and a write that fails (disk full)."""

from __future__ import annotations

import errno
import os

import pytest

from mi_certify.runtime import audit
from mi_certify.runtime.audit import AuditError, AuditLog, verify_log


def test_a_second_writer_on_a_log_in_use_is_refused_and_the_chain_stays_whole(tmp_path):
    p = tmp_path / "run.log"
    a = AuditLog(p, fsync="never")
    with pytest.raises(AuditError, match="another writer"):
        AuditLog(p, fsync="never")
    for i in range(3):
        a.append("decision", {"i": i})
    a.close()
    with AuditLog(p, fsync="never") as b:  # the first writer closed: the log is free again
        b.append("decision", {"i": 3})
    rep = verify_log(p)
    assert rep.ok and rep.records == 1 + 3 + 1 + 1 + 1 + 1 and rep.findings == []


def _failing_write(after: int, partial: bool):
    real, calls = os.write, [0]

    def write(fd, data):
        calls[0] += 1
        if calls[0] > after:
            if partial and calls[0] == after + 1:
                real(fd, bytes(data)[:len(data) // 2])  # a torn line, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    return write


@pytest.mark.parametrize("partial", [False, True])
def test_a_full_disk_is_one_audit_error_the_log_is_closed_and_intact_up_to_its_last_record(tmp_path, monkeypatch,
                                                                                        partial):
    p = tmp_path / "run.log"
    log = AuditLog(p, key=b"k" * 32, fsync="never")
    monkeypatch.setattr(audit.os, "write", _failing_write(3, partial))
    for i in range(3):
        log.append("decision", {"i": i})
    with pytest.raises(AuditError, match="No space left on device"):
        log.append("decision", {"i": 3})
    with pytest.raises(AuditError, match="No space left on device"):  # no record after a failed one
        log.append_step((1, False, 0, True, (0,) * 7, (0,) * 7, 0, 0), [0.5], False, "keep", "HOLD", 1.0, 0.0)
    assert log.close() is None and log.closed  # closing a failed log raises nothing
    monkeypatch.undo()
    rep = verify_log(p, b"k" * 32)
    assert rep.ok and rep.records == 4 and rep.torn_tail == (len(p.read_bytes()) - p.read_bytes().rfind(b"\n") - 1)
    assert (rep.torn_tail > 0) == partial
    with AuditLog(p, key=b"k" * 32, fsync="never") as again:  # a restarted writer continues the chain
        again.append("decision", {"i": "after"})
    assert verify_log(p, b"k" * 32).ok and verify_log(p, b"k" * 32).records == 4 + 3


def test_a_full_disk_on_the_open_record_is_one_audit_error_not_a_double_close(tmp_path, monkeypatch):
    """The "open" record itself fails: _commit closes the descriptor, and the constructor's
    clean-up must not close it again (it raised EBADF "Bad file descriptor" in place of the
    AuditError, and `run` printed a traceback)."""
    p = tmp_path / "run.log"
    monkeypatch.setattr(audit.os, "write", _failing_write(0, False))
    with pytest.raises(AuditError, match="No space left on device"):
        AuditLog(p, fsync="never")
    monkeypatch.undo()
    assert p.read_bytes() == b""  # nothing written, so nothing that looks like a record
    with AuditLog(p, fsync="never") as again:  # the lock was released with the descriptor
        again.append("decision", {"i": 0})
    assert verify_log(p).ok and verify_log(p).records == 3
