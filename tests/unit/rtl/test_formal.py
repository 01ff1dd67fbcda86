"""Z3 proofs of the LUT-FSM (k-induction) and of the generated Verilog (Yosys + Z3); mutants must be caught."""

from __future__ import annotations


import numpy as np
import pytest
import z3

from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.runtime.fsm import FsmConfig, LutFsm, MaskBox, Reason, allowed_at
from mi_certify.verification.rtl.fsm_proofs import prove_fsm

# 4 addresses (one input, 2 bits): keep, int4, int4 (not confident), merge; a property forbids int4 at 2
TOKENS = np.array([0, 2, 2, 1])
CONF = np.array([1, 1, 0, 1], dtype=bool)

class _Prop:
    def __init__(self, pid, kind, forbid=(), require=()):
        self.id, self.kind, self.forbid, self.require = pid, kind, list(forbid), list(require)


MASKS = [MaskBox("P", (2,), (2,), (2,), 0b1011)]
PROPS = [_Prop("P", "forbid", forbid=[2])]



def _machine(cfg: FsmConfig) -> LutFsmArtefact:
    return LutFsmArtefact(TOKENS.astype(np.uint8), CONF, tuple(MASKS), cfg, (2,), 2, ("0", "1", "2", "3"))


@pytest.mark.parametrize("h,d,w,r", [(1, 0, 1, 1), (3, 10, 3, 8), (2, 1, 4, 2)])
def test_every_fsm_obligation_is_proved_by_k_induction(h, d, w, r):
    cfg = FsmConfig(4, 0, h, d, w, r)
    obs = prove_fsm(_machine(cfg), PROPS)
    assert [(o.id, o.verdict) for o in obs] == [
        ("fsm.invariant", "proved"), ("fsm.cooldown", "proved"), ("fsm.hysteresis", "proved"),
        ("fsm.fallback", "proved"), ("fsm.recovery", "proved"), ("fsm.property.P", "proved")]
    for o in obs:  # the evidence is a self-contained SMT-LIB script that z3 answers unsat
        s = z3.Solver()
        s.from_string(o.smt2)
        assert s.check() == z3.unsat, o.id


def test_without_the_mask_cooldown_keeps_a_forbidden_action_and_the_trace_replays():
    cfg = FsmConfig(4, 0, 1, 5, 2, 2)
    obs = {o.id: o for o in prove_fsm(_machine(cfg), PROPS, use_mask=False)}
    ob = obs["fsm.property.P"]
    assert ob.verdict == "violated" and obs["fsm.cooldown"].verdict == "proved"
    trace = ob.counterexample
    last = trace[-1]
    assert last["addr"] == 2 and last["token"] == 2 and not last["probe_fault"]  # int4 active where forbidden
    ref = LutFsm(cfg, TOKENS.tolist(), CONF.tolist())  # the machine without rule 3a
    for row in trace:
        res = ref.step(row["addr"], row["probe_fault"], row["sla_violation"])
        assert (res.token, res.reason.name) == (row["token"], row["reason"])
        assert {"t": res.after.t, "k": res.after.k, "h": res.after.h, "d": res.after.d, "v": res.after.v,
                "f": res.after.f, "r": res.after.r} == row["state"]
    masked = LutFsm(cfg, TOKENS.tolist(), CONF.tolist(), MASKS)  # with it, the same inputs end in MASKED
    for row in trace:
        res = masked.step(row["addr"], row["probe_fault"], row["sla_violation"])
    assert res.reason == Reason.MASKED and res.token == 0 and (allowed_at(MASKS, 2) >> res.token) & 1


def test_a_latch_in_the_rtl_stops_the_formal_flow(tmp_path):
    """Yosys ``check -assert`` does not catch latches (DESIGN.md): the SMT-LIB script asserts
    that none was inferred, so an incomplete combinational assignment fails the RTL proofs."""
    from mi_certify.verification.tools import yosys
    v = tmp_path / "latchy.v"
    v.write_text("module latchy(input wire [1:0] addr, output reg [1:0] token);\n"
                 "always @(*) if (addr[0]) token = addr;\nendmodule\n")
    with pytest.raises(yosys.YosysError, match=r"\$dlatch"):
        yosys.smt2(v, "latchy")
