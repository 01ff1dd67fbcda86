"""The fault-injection campaign's fast mode (bench/faults.py, docs/reliability.md; issue 31): every
case caught as its fault kind requires; no traceback, no false PASS, no orphaned process, no record
lost, no hang. One test per fault kind, the campaign run once for the module."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import faults  # noqa: E402

#: Defects the campaign finds that are not fixed yet (outside the checker and the audit log): the kind's
#: test is an expected failure, strict, so it fails again once the defect is fixed and this entry is stale.
KNOWN: dict[str, str] = {}   # none open: fuzz_onnx and disk_full were, until their fixes


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    work = tmp_path_factory.mktemp("faults")
    return dict(zip(faults.KINDS, faults.campaign(fast=True, seed=1, work=work, log=lambda s: None)))


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.xfail(reason=KNOWN[k], strict=True))
                                  if k in KNOWN else k for k in faults.KINDS])
def test_every_injected_fault_is_caught_cleanly(rows, kind):
    r = rows[kind]
    if not r.done and any("mount -t tmpfs failed" in n for n in r.notes):
        # a machine (a container without CAP_SYS_ADMIN) where no small file system can be mounted:
        # the disk-full cases cannot be made here; said, never passed
        pytest.skip(f"{kind}: " + "; ".join(r.notes))
    assert r.done, r.notes
    assert r.tried > 0
    assert (r.tracebacks, r.false_pass, r.orphans, r.records_lost, r.hangs) == (0, 0, 0, 0, 0), r.notes
    assert r.caught == r.tried, r.notes
