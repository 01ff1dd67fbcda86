"""Coverage of the FSM co-simulation: functional (sampled in the bench) and code (Verilator).

Functional coverage (:func:`mi_certify.verification.cosim.cocotb_sim.functional_coverage`): share of
LUT cells addressed, of reason codes produced, of possible active-action transitions taken,
sampled from the RTL outputs by the Icarus bench. Code coverage: line, toggle and branch
points of the FSM under Verilator ``--coverage`` replaying the same vectors (the replay is
also a second, independent comparison with the reference). Thresholds come from sla.yaml
``cosim.coverage``; a share below its threshold, or a threshold that could not be measured,
fails the build (fail closed).
"""

from __future__ import annotations

from pathlib import Path

from mi_certify.generator.core.lut import LutFsmArtefact

from mi_certify.verification.cosim.cocotb_sim import expected_trace, fsm_job, functional_coverage, make_stimulus
from mi_certify.verification.cosim.vector_sim import SimReport, run_verilator_coverage

CODE_KINDS = ("line", "toggle", "branch")
FUNCTIONAL_KINDS = ("lut_cells", "reasons", "transitions")


def verilator_replay(verilog: Path, toplevel: str, machine: LutFsmArtefact, workdir: Path,
                     traces: tuple, random_cycles: int, seed: int, latency: int = 1,
                     operator=None) -> tuple[SimReport, dict]:
    """The co-simulation vectors of :func:`~.cocotb_sim.run_cosim` (same machine, seed, stimulus
    and decision latency; ``operator``: sla.yaml ``operator:``'s
    :class:`~mi_certify.runtime.fsm.OperatorConfig`, the commands too), replayed under Verilator
    with code coverage; returns (report, coverage)."""
    from mi_certify.verification.cosim.cocotb_sim import decision_stream, with_commands
    cfg, lut, masks = machine.config, machine.table, tuple(machine.masks)
    stimulus, directed = make_stimulus(cfg, lut, random_cycles, seed, masks, traces)
    if operator is not None:
        stimulus, directed = with_commands(cfg, operator, lut, stimulus, directed, seed, masks)
    decisions = decision_stream(stimulus, latency)
    expected, _ = expected_trace(cfg, lut, decisions, None, masks, operator)
    return run_verilator_coverage(fsm_job(verilog, toplevel, stimulus, expected, cfg, decisions), workdir)


def assess(machine: LutFsmArtefact, icarus: SimReport | None, code: tuple[SimReport, dict] | None,
           thresholds: dict[str, float]) -> dict:
    """Coverage record (coverage.json) of a co-simulation of ``machine``: functional and code
    coverage, thresholds, errors.

    Returns {"functional", "code", "thresholds", "errors", "passed", "summary"}; ``summary`` is
    summary.json's ``coverage``: one share per kind (None = not measured), thresholds, passed."""
    errors: list[str] = []
    functional = functional_coverage(machine.config, machine.table, icarus, tuple(machine.masks), machine.operator) if icarus is not None and icarus.cycles else None
    code_cov = None
    replay = None
    if code is not None:
        rep, code_cov = code
        replay = {"cycles": rep.cycles, "mismatches": rep.mismatches, "first_mismatch": rep.first_mismatch,
                  "error": rep.error}
        if not rep.ok:
            errors.append(f"Verilator replay of the co-simulation vectors: {rep.error}")
    shares: dict[str, float | None] = {k: None for k in FUNCTIONAL_KINDS + CODE_KINDS}
    if functional is not None:
        shares.update({k: functional[k]["share"] for k in FUNCTIONAL_KINDS})
    if code_cov:
        shares.update({k: code_cov[k]["share"] for k in CODE_KINDS})
    for kind, minimum in sorted(thresholds.items()):
        got = shares.get(kind)
        if got is None:
            errors.append(f"{kind} coverage was not measured but sla.yaml cosim.coverage.{kind} requires "
                          f">= {minimum:g}")
        elif got < minimum:
            errors.append(f"{kind} coverage {got:.4f} is below the threshold {minimum:g} "
                          f"(sla.yaml cosim.coverage.{kind})")
    passed = not errors
    return {"functional": functional, "code": code_cov, "verilator_replay": replay, "thresholds": thresholds,
            "errors": errors, "passed": passed,
            "summary": {**shares, "thresholds": thresholds, "passed": passed}}
