"""The report tells the whole truth on its first screen, in words that never overclaim (issue 32):
every figure it prints equals the evidence field it names, no assumption of use is called proved,
an unsigned bundle is never called certified, and report.html reads at a normal width."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from mi_certify.generator.bundle.report_figures import compare_figures, parse_figures_table


@pytest.fixture
def bundle_copy(reference_build, tmp_path):
    out = tmp_path / "bundle"
    shutil.copytree(reference_build, out)
    return out


def _matrix(md: str) -> dict[str, str]:
    matrix = md.split("## Traceability matrix")[1].split("## Proof obligations")[0]
    return {ln.split("|")[1].strip(" `"): ln for ln in matrix.splitlines() if ln.startswith("| `")}


def test_every_figure_of_the_report_equals_its_evidence_file(reference_build):
    n, bad = compare_figures(reference_build)
    assert bad == [] and n >= 25
    rows = {r["id"]: r for r in parse_figures_table((reference_build / "report.md").read_text())}
    cov = json.loads((reference_build / "coverage.json").read_text())
    cosim = json.loads((reference_build / "cosim.json").read_text())
    # one place for the reason counts: the report's are coverage.json's, and cosim.json counts the same cycles
    assert cosim["reasons_seen"] == cov["functional"]["reasons"]["counts"]
    assert rows["reasons.HOLD"]["text"] == f"{cov['functional']['reasons']['counts']['HOLD']:,}"
    summary = json.loads((reference_build / "summary.json").read_text())
    md = (reference_build / "report.md").read_text()
    glance = md.split("## At a glance")[1].split("## Traceability matrix")[0]
    share = summary["lut"]["proven"] / summary["lut"]["cells"]
    assert f"proved {summary['lut']['proven']:,} of {summary['lut']['cells']:,} ({100 * share:.2f} %)" in glance


@pytest.mark.parametrize("where", ["report.md", "report.html", "evidence"])
def test_a_figure_that_differs_from_its_evidence_is_found(bundle_copy, where):
    counts = json.loads((bundle_copy / "coverage.json").read_text())["functional"]["reasons"]["counts"]
    hold = f"{counts['HOLD']:,}"
    if where == "evidence":
        doc = json.loads((bundle_copy / "coverage.json").read_text())
        doc["functional"]["reasons"]["counts"]["HOLD"] += 106
        (bundle_copy / "coverage.json").write_text(json.dumps(doc))
    elif where == "report.md":
        p = bundle_copy / "report.md"
        p.write_text(p.read_text().replace(f"| {hold} | `coverage.json`", f"| {counts['HOLD'] + 106:,} | `coverage.json`"))
    else:
        p = bundle_copy / "report.html"
        text = p.read_text()
        fid = 'data-fig="lut.proven">'
        assert fid in text
        proven = json.loads((bundle_copy / "summary.json").read_text())["lut"]["proven"]
        p.write_text(text.replace(f"{fid}{proven:,}<", f"{fid}{proven + 1:,}<"))
    _, bad = compare_figures(bundle_copy)
    assert len(bad) == (2 if where == "evidence" else 1), bad   # the evidence: both reports differ from it
    assert all(("reasons.HOLD" if where != "report.html" else "lut.proven") in b for b in bad), bad


def test_no_assumption_is_labelled_proved_and_resolved_cells_say_why(reference_build):
    md = (reference_build / "report.md").read_text()
    rows = _matrix(md)
    sla_rows = [r for k, r in rows.items() if k.endswith(".sla")]
    assert len(sla_rows) == 4
    for r in sla_rows:   # the latency limits are watched by the monitor, not proved
        standing = r.rstrip(" |").rsplit("|", 1)[1].strip()
        assert standing.startswith("assumed (ensured by: the integrator") and "proved" not in standing.split("(")[0]
    resolved = rows["distill.resolve"].rstrip(" |").rsplit("|", 1)[1].strip()
    summary = json.loads((reference_build / "summary.json").read_text())
    assert resolved.startswith(f"resolved (why: {summary['lut']['resolved']:,} cells hold several actions")
    assert "discharged" not in md and "reachable (witness)" not in md
    for a in ("keep", "merge_conv", "int4", "offload_cpu"):
        assert f"`network.reachability.{a}` (proved (reachable, replayed witness)) [informative]" in rows[f"actions.{a}"]
    glance = md.split("## At a glance")[1].split("## Traceability matrix")[0]
    assert "**Assumptions of use (not proved)**: service levels (keep latency <= 50 ms" in glance


def test_an_unsigned_bundle_is_never_called_certified(reference_build):
    for name in ("report.md", "report.html"):
        text = (reference_build / name).read_text()
        assert not re.search(r"(?<!NOT )CERTIFIED(?! YET)", text.replace("ends with CERTIFIED", "")), name
    assert not (reference_build / "manifest.json.sig").exists()


def test_report_first_screen_reads_at_a_normal_width_in_headless_chromium(reference_build, tmp_path):
    """1280 px: no word broken inside, nothing clipped or past the right edge; the first screen holds the
    proven share, the agreement, the open and assumed items and the signature status."""
    from mi_certify.verification.tools.chromium import LAYOUT_CHECK, find_chromium, load_page
    assert find_chromium(), "chromium is required (make setup installs it)"
    glance = ("Object.fromEntries([...document.querySelectorAll('#glance td[id]')].map(e => [e.id, e.innerText, "
              "e.getBoundingClientRect().bottom]).map(([k, t, b]) => [k, [t, b]]))")
    res = load_page(reference_build / "report.html", width=1280, evaluate=(LAYOUT_CHECK, glance))
    assert res.loaded and res.errors == []
    problems, cells = res.values
    assert problems == []
    summary = json.loads((reference_build / "summary.json").read_text())
    fid = json.loads((reference_build / "distillation.json").read_text())["fidelity"]
    assert f"proved: {summary['lut']['proven']:,} of {summary['lut']['cells']:,}" in cells["glance-cells"][0]
    assert f"resolved: {summary['lut']['resolved']:,}" in cells["glance-cells"][0]
    assert f"{100 * fid['agree'] / fid['points']:.2f} % of {fid['points']:,} random points" in cells["glance-agreement"][0]
    assert cells["glance-open"][0].startswith("none:")
    assert "assumed" in cells["glance-assumed"][0] and "written before signing" in cells["glance-signature"][0]
    target = summary["hdl"]["target"]   # the reference's UP5K target binds and is met (latency 4)
    assert target["advisory"] is False and target["met"] is True
    assert cells["glance-target"][0].startswith("met:") and "50 MHz is met on UP5K" in cells["glance-target"][0]
    assert "ECP5-25F 200 MHz: not met" in cells["glance-goals"][0]
    # all of it on the first screens (900 px high; two at most)
    assert max(b for _, b in cells.values()) < 1800


def test_layout_check_finds_a_broken_word_and_a_clipped_cell(tmp_path):
    from mi_certify.verification.tools.chromium import LAYOUT_CHECK, load_page
    page = tmp_path / "bad.html"
    page.write_text("<!doctype html><title>x</title><table style='width:60px'><tr><td style='overflow-wrap:anywhere'>"
                    "requirement</td></tr></table><div style='width:50px;overflow:hidden;white-space:nowrap'>"
                    "a long label that does not fit</div>")
    res = load_page(page, width=800, evaluate=(LAYOUT_CHECK,))
    problems = res.values[0]
    assert any(p.startswith('word broken: "requirement"') for p in problems), problems
    assert any(p.startswith("clipped: <div>") for p in problems), problems
