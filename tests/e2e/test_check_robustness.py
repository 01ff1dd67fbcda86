"""`mi-certify check` never raises past an item, and says INCOMPLETE (exit 3) for a bundle with skipped
stages (issue 31; the fault-injection campaign, bench/faults.py, found both)."""

from __future__ import annotations

import re
import shutil
import sys

from conftest import ROOT
from test_build import cli

sys.path.insert(0, str(ROOT / "bench"))
import faults  # noqa: E402  (bench/faults.py: rehash, the small bundle)

SUMMARY = re.compile(r"^\d+ passed, \d+ failed, \d+ skipped: (OK|FAILED|INCOMPLETE)(: CERTIFIED \(|.*NOT CERTIFIED)")


def _items(out: str) -> dict[str, str]:
    return faults.check_items(out)


def test_a_forged_lut_token_no_action_has_fails_its_items_and_the_check_goes_on_to_the_summary(tmp_path):
    b = tmp_path / "bundle"
    shutil.copytree(faults.CERTS, b)
    lines = (b / "lut.hex").read_text().splitlines()
    lines[5] = "05"  # token 5: the controller has 4 actions
    (b / "lut.hex").write_text("\n".join(lines) + "\n")
    faults.rehash(b, "lut.hex")
    proc = cli("check", "--quick", b)
    items = _items(proc.stdout)
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.returncode == 1
    assert SUMMARY.match(proc.stdout.splitlines()[-1]) and ": FAILED: NOT CERTIFIED" in proc.stdout.splitlines()[-1]
    assert items["lut.tables: meta_controller.py table = lut.hex"] == "FAIL"
    assert items["fsm proofs: made again and compared"] == "FAIL"
    # the items after the one that could not be evaluated still ran
    assert items["report: rendered again from the evidence and compared"] in ("PASS", "FAIL")
    assert items["certificate verdict"] == "FAIL"


def test_a_group_that_raises_outside_its_items_is_one_fail_item_and_the_check_goes_on(tmp_path, monkeypatch):
    from mi_certify.verification.check import bundle_check
    from mi_certify.verification.check.common import CheckOptions

    def broken(c, ev):
        raise ValueError("boom")
    groups = list(bundle_check.GROUPS)
    groups[1] = broken
    monkeypatch.setattr(bundle_check, "GROUPS", tuple(groups))
    items = bundle_check.check_bundle(faults.CERTS, CheckOptions(rerun_network=False, rerun_tools=False))
    by = {i.name: i for i in items}
    bad = [i for i in items if "boom" in i.detail]
    assert len(bad) == 1 and bad[0].status == "FAIL" and "ValueError" in bad[0].detail
    assert by["certificate verdict"].status == "FAIL"
    assert by["report: rendered again from the evidence and compared"].status == "PASS"


def test_check_of_a_bundle_with_skipped_stages_is_incomplete_exit_3_not_failed(tmp_path):
    out = faults.build_small(tmp_path, tmp_path / "small")  # --skip-cosim --skip-synth --no-verify --sample-lut
    proc = cli("check", out)  # not --quick: every re-run the bundle allows is made
    items = _items(proc.stdout)
    assert "FAIL" not in items.values(), proc.stdout
    assert items["certificate verdict"] == "SKIP"
    assert ": INCOMPLETE: NOT CERTIFIED" in proc.stdout.splitlines()[-1]
    assert proc.returncode == 3


def test_check_json_into_a_full_disk_is_one_error_line_not_a_traceback(tmp_path):
    proc = cli("check", "--quick", faults.CERTS, "--json", "/dev/full")  # every write: ENOSPC
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 2
    errors = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: /dev/full: cannot write") and "No space left" in errors[0]
    assert ": INCOMPLETE: NOT CERTIFIED" in proc.stdout.splitlines()[-1]  # the items and the summary were printed first


def test_run_whose_audit_log_fills_the_disk_stops_with_one_error_line_and_the_log_verifies(tmp_path, monkeypatch,
                                                                                          capsys):
    import errno
    import os

    from mi_certify.generator.cli.main import main
    from mi_certify.runtime import audit

    real, calls = os.write, [0]

    def write(fd, data):  # os.write is the process's: count the audit records only (the C step's compile writes too)
        calls[0] += bytes(data).startswith(b'{"seq":')
        if calls[0] > 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(audit.os, "write", write)
    log = tmp_path / "run.log"
    rc = main(["run", "--build", str(faults.CERTS), "--workload", str(faults.WORKLOAD), "--probe",
               f"trace:{faults.TRACE}", "--requests", "20", "--interval", "0", "--audit", str(log), "--fsync", "never"])
    err = capsys.readouterr().err
    monkeypatch.undo()
    assert rc == 2
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and str(log) in errors[0] and "No space left on device" in errors[0]
    rep = audit.verify_log(log)
    assert rep.ok and rep.records == 5


def test_a_check_that_stops_early_still_gives_the_certificate_verdict_a_fail(tmp_path):
    b = tmp_path / "bundle"
    shutil.copytree(faults.CERTS, b)
    spec = b / "inputs" / "spec" / "sla.yaml"
    spec.write_text(spec.read_text() + "\nnot_a_field: 1\n")  # the inputs no longer load
    faults.rehash(b, "inputs/spec/sla.yaml")
    proc = cli("check", "--quick", b)
    items = _items(proc.stdout)
    assert "Traceback" not in proc.stderr and proc.returncode == 1
    assert items["inputs: spec and model load"] == "FAIL"
    assert items["certificate verdict"] == "FAIL"
    line = next(ln for ln in proc.stdout.splitlines() if "certificate verdict" in ln)
    assert "inputs: spec and model load" in line
    assert ": FAILED: NOT CERTIFIED" in proc.stdout.splitlines()[-1]


def test_quick_check_makes_the_counterexamples_without_rule_3a_again(tmp_path):
    import json
    b = tmp_path / "bundle"
    shutil.copytree(faults.CERTS, b)
    f = b / "proofs" / "fsm" / "without_rule_3a.json"
    doc = json.loads(f.read_text())
    trace = doc["traces"]["fsm.property.P2"]
    trace[1]["probe_fault"] = not trace[1]["probe_fault"]  # the campaign's false PASS (seed 1)
    f.write_text(json.dumps(doc, indent=2) + "\n")
    faults.rehash(b, "proofs/fsm/without_rule_3a.json")
    proc = cli("check", "--quick", b)
    items = _items(proc.stdout)
    assert proc.returncode == 1
    name = "fsm proofs: counterexamples without rule 3a made again and compared"
    assert items[name] == "FAIL"
    assert "without_rule_3a.json" in next(ln for ln in proc.stdout.splitlines() if name in ln)


def test_an_edited_peakrdl_html_file_with_its_hash_rewritten_fails_check_quick(tmp_path):
    """The fault campaign's tamper row: a line duplicated in one file of the PeakRDL register
    documentation (``<name>_regs_html/``), its hash rewritten in manifest.json, passed
    ``check --quick`` (exit 3, nothing failed): the HTML was hashed but never made again.
    Now "generated sources" remakes every file of it and names the one that differs."""
    b = tmp_path / "bundle"
    shutil.copytree(faults.CERTS, b)
    page = sorted((b / "meta_controller_regs_html" / "content").glob("*.html"))[0]
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    page.write_text("".join(lines[:5] + lines[4:5] + lines[5:]), encoding="utf-8")
    rel = page.relative_to(b).as_posix()
    faults.rehash(b, rel)
    proc = cli("check", "--quick", b)
    items = _items(proc.stdout)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    assert items["generated sources: emitted again and compared"] == "FAIL"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("FAIL  generated sources"))
    assert f"{rel} line " in line, line  # the first line that differs, as made again
