"""The operator's dashboard: ``mi-certify audit report`` (generator/bundle/dashboard.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import EXAMPLES, REFERENCE_MODEL, REFERENCE_SLA
from mi_certify.generator.bundle import dashboard
from mi_certify.generator.pipeline.runner import BuildOptions, build
from mi_certify.runtime.audit import AuditLog
from mi_certify.runtime.engine import run_live
from mi_certify.runtime.live import ControlLoop, load_build
from mi_certify.runtime.probes import FeatureMap, TraceProbe

INCIDENT = EXAMPLES / "workload" / "incident.csv"
KEY = b"d" * 32


class _FakeWorkload:
    """Deterministic stand-in for onnxruntime: merge_conv is slow (100 ms > 40 ms), the rest fast."""

    def run(self, token, i):
        return (100.0 if token == 1 else 5.0), 0.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A quick build and a 300-request incident log written with an HMAC key: (build dir, log, key file)."""
    d = tmp_path_factory.mktemp("dash")
    out = d / "meta_controller"
    build(REFERENCE_MODEL, REFERENCE_SLA, out, BuildOptions(skip_lint=True, skip_cosim=True, verify=False,
                                                            skip_rtl_proofs=True, skip_synth=True, distill=False))
    b = load_build(out)
    probe = TraceProbe(INCIDENT)
    loop = ControlLoop(b, probe, FeatureMap.build(b.inputs, offered=probe.columns))
    log, key = d / "run.log", d / "audit.key"
    key.write_bytes(KEY)
    with AuditLog(log, key=KEY, fsync="never", header=loop.audit_header()) as a:
        loop.audit = a
        run_live(loop, _FakeWorkload(), 300)
    return out, log, key


def cli(*args):
    return subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def _decisions(log):
    return [r for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "decision"]


def _cell(html, ident):
    m = re.search(rf'id="{ident}">([^<]*)<', html)
    assert m, ident
    return m.group(1)


@pytest.fixture(scope="module")
def page(run, tmp_path_factory):
    """The dashboard of the run written by the CLI: (completed process, path of run.html)."""
    b, log, key = run
    out = tmp_path_factory.mktemp("page") / "run.html"
    return cli("audit", "report", log, "--build", b, "--key", key, "--out", out), out


def test_report_shows_the_logs_counts_and_confirms_every_decision(run, page):
    b, log, key = run
    p, out = page
    assert p.returncode == 0, p.stderr
    assert "302 records, chain intact" in p.stderr and "300 decisions confirmed" in p.stderr, p.stderr
    html = out.read_text()
    recs = _decisions(log)
    reasons = [r["reason"] for r in recs]
    fallback_entries = sum(r["reason"] == "FALLBACK" and not r["before"][5] for r in recs)  # (t,k,h,d,v,f,r)
    assert _cell(html, "records") == "302" and _cell(html, "decisions") == str(len(recs)) == "300"
    assert _cell(html, "chain") == "intact" and _cell(html, "replay") == "confirmed"
    assert _cell(html, "findings") == "0" and _cell(html, "mismatches") == "0"
    assert _cell(html, "switches") == str(reasons.count("SWITCH")) and reasons.count("SWITCH") >= 2
    assert _cell(html, "probe-faults") == str(reasons.count("PROBE_FAULT")) == "3"
    assert _cell(html, "fallbacks") == str(fallback_entries) and fallback_entries >= 2
    assert _cell(html, "recoveries") == str(reasons.count("RECOVER"))
    assert "Log intact; all 300 decisions confirmed." in html and "HMACs" in html
    # SLA attainment per action: keep always meets its limits, merge_conv (100 ms > 40 ms) never
    rows = {m.group(1): m.group(2) for m in re.finditer(r'<tr><td class="l">(\w+)</td>((?:<td>[^<]*</td>){8})</tr>',
                                                        html.split('id="attainment"')[1].split("</table>")[0])}
    keep = re.findall(r"<td>([^<]*)</td>", rows["keep"])
    merge = re.findall(r"<td>([^<]*)</td>", rows["merge_conv"])
    assert keep[0] == str(sum(r["action"] == "keep" for r in recs)) and keep[6] == "100.0%"
    assert merge[0] == str(sum(r["action"] == "merge_conv" for r in recs)) and merge[6] == "0.0%"
    # the plots: inline SVG (latency over time, timeline, probe trends, attainment, one per heat map of the build)
    assert html.count("<svg") == 4 + 4 and "heatmap_" not in html
    # the cell edges of compute_util (4 bits on [0, 1]) are listed and drawn
    assert dashboard.cell_edges(0, 1, 4) == [q / 16 for q in range(1, 16)]
    assert "0.0625, 0.125, 0.1875" in html
    # the visited addresses: their counts sum to the decisions without a probe fault
    visited = html.split('id="visited"')[1].split("</table>")[0]
    counts = [int(c) for c in re.findall(r"<tr><td>\d+</td><td>(\d+)</td>", visited)]
    assert sum(counts) == sum(not r["probe_fault"] for r in recs) == 297


def test_report_is_offline_and_byte_identical_when_rendered_again(run, page, tmp_path):
    b, log, key = run
    one = page[1].read_bytes()
    text = one.decode("utf-8")
    assert "http://" not in text and "https://" not in text and "<script" not in text
    assert not re.search(r'(src|href)="(?!#)', text)   # only in-page references (SVG ids), no data: raster
    out = tmp_path / "a.html"
    dashboard.write_dashboard(log, load_build(b), out, KEY)   # another process, another output path
    assert out.read_bytes() == one and [p.name for p in tmp_path.iterdir()] == ["a.html"]


def test_a_tampered_log_is_exit_1_and_the_page_says_so(run, tmp_path):
    b, log, key = run
    bad = tmp_path / "bad.log"
    lines = log.read_bytes().split(b"\n")
    assert b'"latency_ms":5.0,' in lines[30]
    lines[30] = lines[30].replace(b'"latency_ms":5.0,', b'"latency_ms":6.0,', 1)   # one byte of record 30
    bad.write_bytes(b"\n".join(lines))
    out = tmp_path / "bad.html"
    p = cli("audit", "report", bad, "--build", b, "--key", key, "--out", out)
    assert p.returncode == 1, p.stderr
    assert "TAMPERED" in p.stderr
    html = out.read_text()
    assert _cell(html, "chain") == "tampered" and _cell(html, "findings") == "1"
    assert 'class="banner bad"' in html and "the log is TAMPERED (1 finding(s))" in html
    assert "MAC does not match" in html


def test_a_forged_decision_is_a_mismatch_on_the_page(run, tmp_path):
    b, log, _key = run
    forged = tmp_path / "forged.log"
    lines = log.read_bytes().split(b"\n")
    i = next(j for j, ln in enumerate(lines) if b'"reason":"HOLD"' in ln and j > 50)
    lines[i] = lines[i].replace(b'"reason":"HOLD"', b'"reason":"SWITCH"')
    forged.write_bytes(b"\n".join(lines))
    dash = dashboard.render_dashboard(forged, load_build(b))   # without the key: the chain still breaks
    assert not dash.intact and not dash.confirmed and not dash.ok
    assert _cell(dash.html, "replay") == "mismatch" and int(_cell(dash.html, "mismatches")) >= 1
    assert f'<tr class="mis"><td>{i}</td>' in dash.html and "replay MISMATCH" in dash.html


@pytest.mark.parametrize("what", ["build", "log", "outdir", "key"])
def test_bad_input_is_one_error_line_exit_2_and_writes_nothing(run, tmp_path, what):
    b, log, key = run
    out = tmp_path / "run.html"
    args = {"build": b, "log": log, "out": out, "key": key}
    if what == "build":
        args["build"] = tmp_path / "nowhere"
        message = "nowhere: not a mi-certify build directory"
    elif what == "log":
        args["log"] = tmp_path / "missing.log"
        message = "missing.log: no such file"
    elif what == "outdir":
        args["out"] = out = tmp_path / "no" / "run.html"
        message = "does not exist"
    else:
        (tmp_path / "short.key").write_bytes(b"abcd")
        args["key"] = tmp_path / "short.key"
        message = "at least 16 are required"
    p = cli("audit", "report", args["log"], "--build", args["build"], "--key", args["key"], "--out", args["out"])
    assert p.returncode == 2, p.stderr
    err = [x for x in p.stderr.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and message in err[0], p.stderr
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def test_without_a_heat_map_the_visited_addresses_are_a_table(run, monkeypatch):
    b, log, _key = run
    monkeypatch.setattr(dashboard, "_heatmap_pairs", lambda build: [])
    html = dashboard.render_dashboard(log, load_build(b)).html
    assert html.count("<svg") == 4 and "The build has no heat map; the visited addresses:" in html
    assert _cell(html, "chain") == "intact"   # no key: the chain is checked, the MACs are not


def test_dashboard_loads_in_headless_chromium_without_console_errors(page, tmp_path):
    from mi_certify.verification.tools.chromium import find_chromium, load_page
    if not find_chromium():
        pytest.skip("chromium is not installed")
    res = load_page(page[1], screenshot=tmp_path / "shot.png")
    assert res.loaded and res.errors == [] and res.requests == []
    assert res.title == "Audit dashboard: meta_controller"
    png = (tmp_path / "shot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_garbage_in_a_tampered_record_is_shown_not_a_crash(run, tmp_path, monkeypatch):
    b, log, _key = run
    monkeypatch.setattr(dashboard, "_heatmap_pairs", lambda build: [("compute_util", "cache_chase_ns")])
    bad = tmp_path / "garbage.log"
    lines = log.read_bytes().split(b"\n")
    lines[5] = re.sub(rb'"addr":\d+', b'"addr":99999999', lines[5])
    lines[5] = re.sub(rb'"token":\d+', b'"token":"x"', lines[5])
    lines[6] = lines[6].replace(b'"readings":[', b'"readings":["nan",', 1)
    bad.write_bytes(b"\n".join(lines))
    dash = dashboard.render_dashboard(bad, load_build(b))
    assert not dash.intact and not dash.confirmed
    assert _cell(dash.html, "findings") == "2" and '<tr class="mis"><td>5</td>' in dash.html


def test_the_banner_names_sla_violations_fallbacks_probe_faults_and_masks(run, page):
    """What went wrong comes first: the banner counts the requests over their limit, the fallback
    entries and the probe faults with the input, its reading and the bound it broke (issue 32)."""
    b, log, _key = run
    html = page[1].read_text()
    recs = _decisions(log)
    banner = html.split('id="verdict"')[1].split("</div>\n</div>")[0]
    assert 'class="banner warn"' in html and "Log intact; all 300 decisions confirmed." in banner
    over = sum(r["action"] == "merge_conv" for r in recs)   # the fake workload: merge_conv 100 ms > 40 ms
    assert over > 0 and _cell(html, "alert-over-limit") == str(over)
    assert f"merge_conv: {over}" in banner
    assert _cell(html, "alert-violations") == str(sum(r["verdict"]["violation"] for r in recs))
    entries = sum(r["reason"] == "FALLBACK" and not r["before"][5] for r in recs)
    assert entries >= 2 and _cell(html, "alert-fallback-count") == str(entries)
    faults = [r for r in recs if r["probe_fault"]]
    assert _cell(html, "alert-probe-fault-count") == str(len(faults)) == "3"
    causes = faults[0]["probes"]["_probe_fault"]   # the record names the input, its reading and the bound
    assert causes and all(set(c) == {"input", "unit", "reading", "bound", "reason"} for c in causes)
    from mi_certify.runtime.quantize import fault_text
    assert fault_text(causes[0]) in banner and f"{causes[0]['input']} in 3 step(s)" in banner
    masked = sum(r["reason"] == "MASKED" for r in recs)
    assert ('id="alert-masked-count">%d<' % masked in banner) if masked else "alert-masked" not in banner
    # latency over wall-clock time against each action's limit
    assert "Latency of each request against the active action&#39;s limit" in html or \
        "Latency of each request against the active action's limit" in html
    assert "merge_conv limit 40 ms" in html and "wall-clock time since the first decision [s]" in html


def test_the_banner_of_an_old_log_without_fault_fields_derives_the_causes(run, tmp_path):
    """A log written before records carried probes._probe_fault: the dashboard derives each cause
    from the logged readings and the build's envelope (the same words)."""
    b, log, _key = run
    recs = _decisions(log)
    first = next(r for r in recs if r["probe_fault"])
    old = tmp_path / "old.log"
    old.write_bytes(log.read_bytes().replace(b',"_probe_fault":', b',"_pf_was":'))
    dash = dashboard.render_dashboard(old, load_build(b))   # no key: the chain breaks (edited), causes still shown
    from mi_certify.runtime.quantize import fault_text
    assert fault_text(first["probes"]["_probe_fault"][0]) in dash.html


def test_dashboard_reads_at_a_normal_width_and_the_banner_says_what_went_wrong(run, page):
    """Headless Chromium at 1280 px: no word broken inside, nothing clipped or past the right edge (the
    decision records opened too); the banner, as the operator sees it, names the violations, the fallback
    entries and the probe faults with their input."""
    from mi_certify.verification.tools.chromium import LAYOUT_CHECK, find_chromium, load_page
    assert find_chromium(), "chromium is required (make setup installs it)"
    b, log, _key = run
    opened = "document.querySelectorAll('details').forEach(d => d.open = true), 0"
    banner = "document.getElementById('verdict').innerText"
    res = load_page(page[1], width=1280, evaluate=(banner, opened, LAYOUT_CHECK))
    assert res.loaded and res.errors == []
    text, _, problems = res.values
    assert problems == []
    recs = _decisions(log)
    faults = [r for r in recs if r["probe_fault"]]
    name = faults[0]["probes"]["_probe_fault"][0]["input"]
    lines = text.splitlines()
    assert lines[0] == "Log intact; all 300 decisions confirmed."
    assert any(ln.startswith("SLA: ") and "request(s) over the active action's limit" in ln for ln in lines)
    assert any(ln.startswith("Fallback: entered ") for ln in lines)
    assert any(ln.startswith(f"Probe faults: 3 of 300 steps") and f"{name} in 3 step(s), first" in ln for ln in lines)
