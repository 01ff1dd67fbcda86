"""`mi-certify verify` and the build's progress, as a user meets them: exit codes and status lines
that never drop an unknown, a bound on the whole run, campaign answers kept on Ctrl-C, plain
progress lines without a terminal (issue 31's defects, each a test that failed before its fix)."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console
from rich.progress import Progress

from conftest import two_action_model, two_action_spec
from mi_certify.generator.cli.main import _progress_events, _verify_detail, main
from mi_certify.generator.core.results import Verdict
from mi_certify.verification.nn import campaign, network
from mi_certify.verification.nn.nn_verify import QueryResult, VerifyOptions

VNNLIB = """(declare-const X_0 Real)
(declare-const X_1 Real)
(declare-const Y_0 Real)
(declare-const Y_1 Real)
(assert (>= X_0 -1))
(assert (<= X_0 1))
(assert (>= X_1 0))
(assert (<= X_1 1))
(assert (>= Y_0 Y_1))
"""


def _inputs(tmp_path):
    model = two_action_model(tmp_path)
    spec = two_action_spec(tmp_path)
    return model, spec


def test_verify_sla_says_unknown_and_exits_3_when_only_reachability_is_unknown(tmp_path, monkeypatch, capsys):
    """Properties proved (there are none) but a1's reachability unknown: the run is unknown, exit 3, and
    the status line names the action (it said "status: proved" and exited 0)."""
    model, spec = _inputs(tmp_path)
    real = network.decide

    def decide(m, q, opts=None):
        r = real(m, q, opts)
        return replace(r, verdict=Verdict.UNKNOWN, witness=None, detail="timeout") if q.id == "reach:a1" else r
    monkeypatch.setattr(network, "decide", decide)
    code = main(["verify", str(model), "--sla", spec.path, "--timeout", "5", "--confirm-timeout", "5", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "status: unknown (the reachability of a1 is unknown)" in " ".join(err.split())


def test_within_total_ends_the_query_before_what_is_left_less_the_slack(monkeypatch):
    monkeypatch.setattr(network.time, "monotonic", lambda: 100.0)
    opts = VerifyOptions(timeout=60.0, confirm_timeout=300.0)
    assert network.within_total(opts, 38.0).end == 100.0 + 38.0 - network.QUERY_SLACK_S
    assert network.within_total(replace(opts, end=120.0), 38.0).end == 120.0   # an earlier end stays
    assert network.within_total(opts, network.QUERY_SLACK_S) is None           # nothing left: not started


def test_verify_spec_within_a_total_timeout_starts_no_query_it_cannot_finish(tmp_path, monkeypatch):
    """A clock that the fake queries advance: each query is given an end within what is left of the
    total (less the slack), and a query with nothing left is not started and is UNKNOWN."""
    model, spec = _inputs(tmp_path)
    from mi_certify.generator.frontend.model import load_model
    loaded = load_model(model)
    now = [100.0]
    granted = []
    use = [1.0]   # the share of its time a query uses

    def decide(m, q, opts=None):
        granted.append((now[0], opts.end))
        now[0] += use[0] * (opts.end - now[0]) + (network.QUERY_SLACK_S if use[0] == 1.0 else 0.0)
        return QueryResult(q.id, Verdict.VIOLATED, 0.0, "fake")
    monkeypatch.setattr(network, "decide", decide)
    monkeypatch.setattr(network.time, "monotonic", lambda: now[0])
    opts = VerifyOptions(timeout=3.0, confirm_timeout=3.0)
    res = network.verify_spec(loaded, spec, opts, total_timeout=10.0)
    assert granted == [(100.0, 109.0)]          # the first query used all of it, its slack included
    assert [r.verdict for r in res.reachability] == [Verdict.VIOLATED, Verdict.UNKNOWN]
    assert res.reachability[1].detail == "not started: the total timeout (10 s) ran out"
    assert res.run_status == "unknown" and res.unknown_reachability == ["a1"]
    now[0], granted[:], use[0] = 100.0, [], 0.5
    res = network.verify_spec(loaded, spec, opts, total_timeout=10.0)
    assert granted == [(100.0, 109.0), (104.5, 109.0)]   # what the first left goes to the second
    assert res.run_status == "proved"


def test_total_timeout_is_refused_with_a_campaign(tmp_path, capsys):
    (tmp_path / "list.txt").write_text("p.vnnlib\n")
    assert main(["verify", "--campaign", str(tmp_path / "list.txt"), "--total-timeout", "10"]) == 2
    assert "--total-timeout: not with --campaign" in capsys.readouterr().err


def _campaign(tmp_path):
    model = two_action_model(tmp_path)
    for k in (1, 2):
        (tmp_path / f"p{k}.vnnlib").write_text(VNNLIB)
    (tmp_path / "list.txt").write_text("p1.vnnlib\np2.vnnlib\n")
    return model, tmp_path / "list.txt"


def test_a_campaign_interrupted_keeps_the_answers_that_arrived(tmp_path, monkeypatch, capsys):
    """Ctrl-C while the second instance runs: exit 130, the first answer is in results.csv.partial,
    results.csv (which would look complete) is not written (nothing was kept before)."""
    model, listing = _campaign(tmp_path)
    calls = []

    def decide_instance(args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return "unsat", 0.25, {}
    monkeypatch.setattr(campaign, "_decide_instance", decide_instance)
    results = tmp_path / "results.csv"
    code = main(["verify", str(model), "--campaign", str(listing), "--results", str(results), "--workers", "1"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 130
    assert not results.exists()
    partial = (tmp_path / "results.csv.partial").read_text().splitlines()
    assert len(partial) == 1 and partial[0].split(",")[2:] == ["p1.vnnlib", partial[0].split(",")[3], "unsat", "0.250000"]
    assert "interrupted: 1 of 2 instances answered" in err


def test_a_finished_campaign_writes_results_in_list_order_and_removes_the_partial_file(tmp_path, monkeypatch):
    model, listing = _campaign(tmp_path)
    monkeypatch.setattr(campaign, "_decide_instance", lambda args: ("sat", 0.5, {}))
    results = tmp_path / "results.csv"
    assert main(["verify", str(model), "--campaign", str(listing), "--results", str(results), "--workers", "1"]) == 0
    assert [ln.split(",")[2] for ln in results.read_text().splitlines()] == ["p1.vnnlib", "p2.vnnlib"]
    assert not (tmp_path / "results.csv.partial").exists()


def test_without_a_terminal_progress_is_a_plain_line_at_every_tenth():
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    progress = Progress(console=console, disable=True)
    on_event = _progress_events(progress, console)
    on_event("start", "lut", None)
    for done in (500, 1500, 3500, 3600, 10000):
        on_event("detail", "lut", f"{done:,} / 10,000 cells decided")
        on_event("progress", "lut", done / 10000)
    on_event("done", "lut:ok", 1.5)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["  distill the network into the LUT: 10% (1,500 / 10,000 cells decided)",
                         "  distill the network into the LUT: 30% (3,500 / 10,000 cells decided)"]
    assert len(lines) == 3 and lines[2].endswith("1.50 s")


def test_the_build_line_of_verify_lists_every_action_reachable_unreachable_or_unknown():
    st = {"properties": {"P1": "proved"}, "reachable_actions": ["a0"], "unreachable_actions": ["a2"],
          "unknown_reachability": ["a1"]}
    assert _verify_detail(st) == "P1 proved; reachable: a0; proved unreachable: a2; reachability unknown: a1"
