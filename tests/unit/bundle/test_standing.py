"""The standing vocabulary, the certification line, figure texts, probe-fault causes and key
placement (issue 32)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from mi_certify.generator.bundle.report_figures import figure_text
from mi_certify.generator.bundle.signing import SignatureError, key_home, keygen, new_hmac_key
from mi_certify.generator.bundle.standing import (
    ASSUMED, CHECKED, OPEN, PROVED, RESOLVED, Standing, certification, obligation_standing, weakest)
from mi_certify.runtime.quantize import fault_causes, fault_text


def test_obligation_verdicts_map_to_words_that_never_overclaim():
    assert obligation_standing({"id": "network.P1", "verdict": "proved"}).text == PROVED
    assert obligation_standing({"id": "lut.P1", "verdict": "holds"}).word == PROVED
    assert obligation_standing({"id": "rtl.lint", "verdict": "passed"}).text == CHECKED
    for bad in ("violated", "failed", "unknown"):
        assert obligation_standing({"id": "x", "verdict": bad}).text == f"open ({bad})"
    reach = {"id": "network.reachability.keep"}
    assert obligation_standing({**reach, "verdict": "violated"}).text == "proved (reachable, replayed witness)"
    assert obligation_standing({**reach, "verdict": "proved"}).text == "proved (unreachable)"
    assert obligation_standing({**reach, "verdict": "unknown"}).word == OPEN
    assert weakest([PROVED, CHECKED]) == CHECKED and weakest([PROVED, ASSUMED, RESOLVED]) == ASSUMED
    assert weakest([]) == OPEN
    assert Standing(ASSUMED, who="the integrator").text == "assumed (ensured by: the integrator)"
    assert Standing(RESOLVED, why="2 cells").text == "resolved (why: 2 cells)"
    with pytest.raises(ValueError):
        Standing("discharged")


def test_only_a_signed_verified_passing_bundle_is_certified():
    def line(**kw):
        return certification(**{"passed": True, "skipped": False, "signed": False, "signature_checked": False, **kw})
    assert line(signed=True, signature_checked=True) == "OK: CERTIFIED (signature verified, every item passed)"
    for kw in ({}, {"signed": True}, {"passed": False, "signed": True, "signature_checked": True},
               {"skipped": True, "signed": True, "signature_checked": True}):
        assert "NOT CERTIFIED" in line(**kw) and "OK: CERTIFIED" not in line(**kw)
    assert "unsigned" in line()
    # skipped items (check --quick, a signed bundle without --pubkey): the line still says what the
    # signature shows (the "not verified" words were unreachable behind INCOMPLETE)
    assert line(skipped=True).endswith("; the bundle is unsigned)")
    assert line(skipped=True, signed=True).endswith("manifest.json.sig is present but was not verified: pass "
                                                    "--pubkey KEY.pub)")
    assert line(skipped=True, signed=True, signature_checked=True).endswith("; signature verified)")


def test_figure_texts():
    assert figure_text("count", 16384) == "16,384" and figure_text("share", 0.56662) == "56.66 %"
    assert figure_text("mhz", 127.15) == "127.15 MHz" and figure_text("mhz", 200.0) == "200 MHz"
    with pytest.raises(ValueError):
        figure_text("ratio", 1)


def test_probe_fault_causes_name_the_input_its_reading_and_the_bound():
    inputs = (("compute_util", "ratio", Fraction(0), Fraction(1), 4),
              ("cache_chase_ns", "ns", Fraction(0), Fraction(1024), 3),
              ("temperature_c", "degC", Fraction(20), Fraction(110), 3))
    assert fault_causes(inputs, [0.5, 100.0, 30.0]) == []
    causes = fault_causes(inputs, [math.nan, 2300.0, None])
    assert causes == [
        {"input": "compute_util", "unit": "ratio", "reading": "nan", "bound": None, "reason": "not a number"},
        {"input": "cache_chase_ns", "unit": "ns", "reading": 2300.0, "bound": "max 1024", "reason": "above max"},
        {"input": "temperature_c", "unit": "degC", "reading": None, "bound": None, "reason": "unavailable"}]
    assert [fault_text(c) for c in causes] == ["compute_util = nan ratio (not a number)",
                                               "cache_chase_ns = 2300 ns above max 1024", "temperature_c unavailable"]
    assert fault_text(fault_causes(inputs, [0.5, 1.0, 19.5])[0]) == "temperature_c = 19.5 degC below min 20"


def test_keys_are_never_written_inside_a_git_work_tree(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    for write in (lambda: new_hmac_key(repo / "sub" / "audit.key"),
                  lambda: keygen(repo / "signing.key", repo / "signing.pub")):
        with pytest.raises(SignatureError, match="inside the git working tree"):
            write()
    assert sorted(p.name for p in repo.rglob("*")) == [".git"]
    # a default that is itself inside the tree is not offered as the way out
    monkeypatch.setenv("MI_CERTIFY_KEY_DIR", str(repo / "keys"))
    with pytest.raises(SignatureError, match=r"is inside a work tree too: set MI_CERTIFY_KEY_DIR"):
        new_hmac_key(repo / "keys" / "audit.key")
    monkeypatch.setenv("MI_CERTIFY_KEY_DIR", str(tmp_path / "keys"))
    assert key_home() == tmp_path / "keys"
    monkeypatch.delenv("MI_CERTIFY_KEY_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert key_home() == tmp_path / "cfg" / "mi-certify" / "keys"
    new_hmac_key(key_home() / "audit.key")
    k = key_home() / "audit.key"
    assert len(k.read_bytes()) == 32 and k.stat().st_mode & 0o777 == 0o600
    with pytest.raises(SignatureError, match="refusing to overwrite"):
        new_hmac_key(k)


def test_run_summary_names_the_faulty_input_and_warns_above_the_share():
    from mi_certify.generator.cli.runtime import probe_fault_lines
    cause = {"input": "cache_chase_ns", "unit": "ns", "reading": 2300.0, "bound": "max 1024", "reason": "above max"}
    j = {"probe_faults": {"steps": 211, "by_input": {"cache_chase_ns": {"steps": 211, "first": cause}}}}
    lines = probe_fault_lines(j, 300, 0.05)
    assert lines[0] == ("probe faults: 211 of 300 steps (70.3%); cache_chase_ns: 211 steps, first "
                        "cache_chase_ns = 2300 ns above max 1024")
    assert lines[1].startswith("[yellow]warning:[/] 70.3% of the steps were probe faults (more than 5 %")
    assert probe_fault_lines(j, 300, 0.75)[1:] == []
    assert probe_fault_lines({"probe_faults": {"steps": 0, "by_input": {}}}, 300, 0.05) == ["probe faults: 0 of 300 steps"]
