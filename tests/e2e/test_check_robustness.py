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

SUMMARY = re.compile(r"^\d+ passed, \d+ failed, \d+ skipped: (OK|FAILED|INCOMPLETE)$")


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
    assert SUMMARY.match(proc.stdout.splitlines()[-1]) and proc.stdout.splitlines()[-1].endswith("FAILED")
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
    assert proc.stdout.splitlines()[-1].endswith(": INCOMPLETE")
    assert proc.returncode == 3
