"""Verdicts and stage results: one vocabulary for every stage, the CLI, the report and the checker.

Verdicts are values, not prints (STYLE.md): a stage returns a :class:`StageResult`
(its status, the record that goes into ``summary.json``, the bundle files it wrote and
the proof obligations it produced); the pipeline lists the results, the CLI renders
them, the bundle stores them. Both enums are ``StrEnum``s whose values are the words
written in the bundle files, so ``Verdict.PROVED == "proved"`` and JSON holds the word.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["GOOD_VERDICTS", "StageResult", "Status", "Verdict"]


class Verdict(StrEnum):
    """The verdict of one claim.

    PROVED: a sound procedure proved it (VNN-LIB ``unsat``). VIOLATED: a counterexample
    exists and was replayed (``sat``). UNKNOWN: undecided (timeout, solver error,
    unconfirmed) — fails closed. HOLDS: an exhaustive check over every LUT cell found no
    offending cell. PASSED / FAILED: a test (co-simulation, lint, witness replay) found
    no difference / a difference. NOT_APPLICABLE: the claim's region meets no cell.
    """

    PROVED = "proved"
    VIOLATED = "violated"
    UNKNOWN = "unknown"
    HOLDS = "holds"
    PASSED = "passed"
    FAILED = "failed"
    NOT_APPLICABLE = "not_applicable"

    @property
    def discharges(self) -> bool:
        """True when this verdict discharges a required obligation."""
        return self in (Verdict.PROVED, Verdict.HOLDS, Verdict.PASSED)

    @property
    def vnnlib(self) -> str:
        """The VNN-COMP result word: unsat (proved), sat (violated), unknown."""
        return {"proved": "unsat", "violated": "sat"}.get(self.value, "unknown")


#: Verdict words that discharge an obligation (obligations.json, summary.json).
GOOD_VERDICTS = tuple(v.value for v in Verdict if v.discharges)


class Status(StrEnum):
    """The status of one build stage (summary.json ``stages.<name>.status``)."""

    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"
    RUNNING = "running"


@dataclass
class StageResult:
    """What one build stage returns.

    Attributes:
        name: the stage (summary.json key: spec, import, verify, lut, lut_properties,
            fsm_proofs, emit, lint, rtl_proofs, cosim, hdl).
        record: its summary.json record; ``record["status"]`` is a :class:`Status` word.
        evidence: bundle files (relative paths) the stage wrote.
        proofs: its proofs/index.json entries (FSM and RTL proofs).
    """

    name: str
    record: dict
    evidence: tuple[str, ...] = ()
    proofs: list[dict] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return Status(self.record["status"])

    @property
    def failed(self) -> bool:
        return self.status is Status.FAILED

    @classmethod
    def skipped(cls, name: str, reason: str) -> "StageResult":
        return cls(name, {"status": Status.SKIPPED.value, "reason": reason})
