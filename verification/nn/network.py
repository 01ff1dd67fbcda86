"""Network-level verification of a spec: properties and the output domain.

``verify_spec`` decides every sla.yaml property over its ``when`` region and, over
the whole envelope, which actions the decoder can produce (reachable with a replayed
witness, or proved unreachable) and sound bounds on every raw output (CROWN; the
largest and smallest values seen on 4096 seeded random points show how tight they are).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from mi_certify.generator.core.spec import Spec

from mi_certify.verification.nn.bounds import output_bounds
from mi_certify.verification.nn.nn_verify import REPLAY_CLAIM, QueryResult, Verdict, VerifyOptions, decide
from mi_certify.verification.nn.properties import envelope, reachability_queries, spec_queries

if TYPE_CHECKING:
    from mi_certify.generator.frontend.model import LoadedModel


@dataclass
class SpecVerification:
    """Results: ``properties`` and ``reachability`` (QueryResult lists), ``output_bounds``."""

    properties: list[QueryResult]
    reachability: list[QueryResult]
    output_bounds: list[dict]

    @property
    def status(self) -> str:
        """"proved" if every property is PROVED, "violated" if one is VIOLATED, else "unknown"."""
        verdicts = {r.verdict for r in self.properties}
        if Verdict.VIOLATED in verdicts:
            return "violated"
        if Verdict.UNKNOWN in verdicts:
            return "unknown"
        return "proved"

    @property
    def unknown_reachability(self) -> list[str]:
        """The actions whose reachability was decided neither way (their query is UNKNOWN)."""
        return [r.id.split(":", 1)[1] for r in self.reachability if r.verdict == Verdict.UNKNOWN]

    @property
    def run_status(self) -> str:
        """The whole run's word: :attr:`status`, but "unknown" when the properties are proved and an
        action's reachability is unknown (``verify``'s exit code and last line; a build's stage
        status reads :attr:`status` and lists the unknown actions beside it)."""
        return "unknown" if self.status == "proved" and self.unknown_reachability else self.status

    def deterministic_json(self) -> dict:
        """Verdicts and witnesses only, for the hashed bundle: no times, and no onnxruntime
        outputs (its float32 kernels differ by CPU; they are in :meth:`full_json`)."""
        def strip(r: QueryResult) -> dict:
            return {"id": r.id, "verdict": r.verdict.value, "witness": _machine_independent(r.witness)}
        return {"status": self.status, "properties": [strip(r) for r in self.properties],
                "output_domain": {"actions": [{"action": r.id.split(":", 1)[1],
                                               "reachable": {"violated": "yes", "proved": "no"}.get(r.verdict.value,
                                                                                                   "unknown"),
                                               "witness": _machine_independent(r.witness)}
                                              for r in self.reachability],
                                  "output_bounds": self.output_bounds}}

    def full_json(self) -> dict:
        """Everything, times and onnxruntime outputs included (verification_log.json, not hashed)."""
        return {"properties": [r.to_json() for r in self.properties],
                "reachability": [r.to_json() for r in self.reachability]}


def _machine_independent(witness: dict | None) -> dict | None:
    """A replayed witness without its onnxruntime figures: x, its float32 rounding, the IR's
    outputs (fixed-order float64) and what the replay checked."""
    if witness is None:
        return None
    out = {k: v for k, v in witness.items() if k not in ("y_onnxruntime", "max_row_slack_onnxruntime")}
    out["replayed"] = REPLAY_CLAIM
    return out


#: Seconds of a query's wall time outside its search and confirmation deadlines (the replay of a
#: counterexample, the result's bookkeeping), kept back from ``total_timeout`` for each query.
QUERY_SLACK_S = 1.0


def within_total(opts: VerifyOptions, left: float) -> VerifyOptions | None:
    """``opts`` for a query that must end within ``left`` seconds from now: ``opts.end`` set to now
    + ``left`` less :data:`QUERY_SLACK_S` (the search takes its share of that, the confirmation
    what the search left: :class:`~.nn_verify.VerifyOptions`); None when nothing is left."""
    left -= QUERY_SLACK_S
    if left <= 0:
        return None
    end = time.monotonic() + left
    return replace(opts, end=end if opts.end is None else min(end, opts.end))


def verify_spec(model: LoadedModel, spec: Spec, opts: VerifyOptions | None = None,
                progress=None, on_result=None, total_timeout: float | None = None) -> SpecVerification:
    """Decide all properties and the output domain of ``spec`` on ``model`` (its IR; onnxruntime
    replays each counterexample).

    There are ``len(properties) + len(actions)`` queries; each takes at most ``opts.timeout``
    seconds of search plus ``opts.confirm_timeout`` of exact confirmation (and a fixed slack).

    Args:
        progress: optional callable(done, total).
        on_result: optional callable(QueryResult, done, total), after each query.
        total_timeout: seconds for the whole run (``verify --total-timeout``): a query gets what is
            left of it (:func:`within_total`); a query for which nothing is left is not started
            and is UNKNOWN, saying so.
    """
    opts = opts or VerifyOptions()
    props = spec_queries(spec)
    reach = reachability_queries(spec)
    total = len(props) + len(reach)
    done = 0
    out_p, out_r = [], []
    end = None if total_timeout is None else time.monotonic() + total_timeout
    for q in props + reach:
        q_opts = opts if end is None else within_total(opts, end - time.monotonic())
        if q_opts is None:
            res = QueryResult(q.id, Verdict.UNKNOWN, 0.0, "not started",
                              detail=f"not started: the total timeout ({total_timeout:g} s) ran out")
        else:
            res = decide(model, q, q_opts)
        (out_p if len(out_p) < len(props) else out_r).append(res)
        done += 1
        if progress:
            progress(done, total)
        if on_result:
            on_result(res, done, total)
    ir = model.ir
    lo, hi = envelope(spec)
    low, up = output_bounds(ir, lo, hi)
    pts = lo + (hi - lo) * np.random.default_rng(0).random((4096, lo.size))
    ys = ir.evaluate(pts)
    ob = [{"action": a.name, "lower": float(low[i]), "upper": float(up[i]), "sampled_min": float(ys[:, i].min()),
           "sampled_max": float(ys[:, i].max())} for i, a in enumerate(spec.actions)]
    return SpecVerification(out_p, out_r, ob)
