"""Whole builds. Z3 proofs of the LUT-FSM (k-induction) and of the generated Verilog (Yosys + Z3); mutants must be caught."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import z3

from conftest import REFERENCE_MODEL, REFERENCE_SLA
from mi_certify.generator.core.lut import LutFsmArtefact, property_masks
from mi_certify.generator.pipeline.runner import BuildOptions, build
from mi_certify.generator.core.spec import load_spec
from mi_certify.verification.rtl.fsm_proofs import entry_alphabet
from mi_certify.verification.rtl.rtl_formal import rtl_obligations


class _Prop:
    def __init__(self, pid, kind, forbid=(), require=()):
        self.id, self.kind, self.forbid, self.require = pid, kind, list(forbid), list(require)


MUTANTS = {
    "cooldown off by one": ("COOLDOWN     = 4'd10", "COOLDOWN     = 4'd9", "rtl.equivalence"),
    "dropped reset term": ("token       <= CONSERVATIVE;", "token       <= token;", "rtl.reset"),
    "wrong reason code": ("n_reason = R_RECOVER;", "n_reason = R_FALLBACK;", "rtl.equivalence"),
    "fallback disabled": ("end else if (sla_violation && vcnt == VIOL_LAST)",
                          "end else if (sla_violation && vcnt == VIOL_LAST && 1'b0)", "rtl.equivalence"),
    "allowed-action mask dropped": ("if (!allowed[token]) begin", "if (1'b0) begin", "rtl.property.P1"),
    "hysteresis off by one": ("HYST_LAST    = 2'd2", "HYST_LAST    = 2'd1", "rtl.equivalence"),
    "one flipped LUT entry": (None, None, "rtl.lut_table"),
    "audit address not registered": ("audit_addr  <= addr;", "audit_addr  <= audit_addr;", "rtl.audit"),
    "audit valid during reset": ("audit_valid <= 1'b0;", "audit_valid <= 1'b1;", "rtl.audit"),
    # the step input (issue 34): a cycle without a step must hold every register and log nothing
    "a cycle without a step still steps": ("end else if (!step) begin", "end else if (1'b0) begin", "rtl.equivalence"),
    "the cooldown counts cycles without a step": (
        "end else if (!step) begin   // no step reached the decision: hold, no decision to log\n",
        "end else if (!step) begin   // no step reached the decision: hold, no decision to log\n"
        "            dcnt <= n_dcnt;\n", "rtl.equivalence"),
    "a cycle without a step logs a decision": (
        "no decision to log\n            audit_valid <= 1'b0;", "no decision to log\n            audit_valid <= 1'b1;",
        "rtl.audit"),
}


@pytest.fixture(scope="module")
def small_build(tmp_path_factory):
    """The reference network on a 10-bit grid (2 bits per input): a small RTL for mutants."""
    tmp = tmp_path_factory.mktemp("small")
    sla = tmp / "sla.yaml"
    text = REFERENCE_SLA.read_text()
    text = re.sub(r"bits: \d\}", "bits: 2}", text)
    text = text.replace("encoding: sliced_rom", "encoding: case")  # the mutants edit case items
    text = re.sub(r"latency: \d, ", "", text)  # the one-cycle machine: the mutants edit its lines
    assert "encoding: case" in text and "latency:" not in text.split("\nhdl:")[1].split("\n")[0]
    sla.write_text(text)
    out = tmp / "out"
    res = build(REFERENCE_MODEL, sla, out, BuildOptions(verify=False, distill=False, skip_cosim=True, skip_synth=True))
    assert res.status == "incomplete" and res.summary["rtl_proofs"] and \
        set(res.summary["rtl_proofs"].values()) == {"proved"}
    assert set(res.summary["fsm_proofs"].values()) == {"proved"}
    return load_spec(sla), out


def _rtl(spec, v_path, lut):
    machine = LutFsmArtefact.from_table(spec, lut, property_masks(spec))
    obs, _ = rtl_obligations(v_path, spec.name, machine, entry_alphabet(machine))
    return {o.id: o.verdict for o in obs}


def _case_line(src):
    line = next(ln for ln in src.splitlines() if ln.strip().startswith("10'd"))
    c = line.split("{1'b")[1][0]   # the confident bit of the entry {c, p}, flipped
    return line, line.replace(f"{{1'b{c},", f"{{1'b{1 - int(c)},")


@pytest.mark.parametrize("name", list(MUTANTS))
def test_every_rtl_mutant_is_caught_by_the_formal_checks(small_build, tmp_path, name):
    spec, out = small_build
    src = (out / f"{spec.name}.v").read_text()
    lut = bytes.fromhex((out / "lut.hex").read_text().replace("\n", ""))
    old, new, caught_by = MUTANTS[name]
    if old is None:
        old, new = _case_line(src)
    assert old in src
    mutant = tmp_path / f"{spec.name}.v"
    mutant.write_text(src.replace(old, new, 1))
    verdicts = _rtl(spec, mutant, lut)
    assert verdicts[caught_by] == "violated", verdicts
    assert _rtl(spec, out / f"{spec.name}.v", lut)[caught_by] == "proved"  # and the original passes


def test_the_reference_build_proves_the_fsm_and_the_rtl(reference_build):
    s = json.loads((reference_build / "summary.json").read_text())
    assert s["fsm_proofs"] == {k: "proved" for k in ("fsm.invariant", "fsm.cooldown", "fsm.hysteresis",
                                                     "fsm.fallback", "fsm.recovery", "fsm.property.P1",
                                                     "fsm.property.P2", "fsm.operator.lock_safe",
                                                     "fsm.operator.expiry", "fsm.operator.release")}
    assert s["rtl_proofs"] == {k: "proved" for k in ("rtl.reset", "rtl.equivalence", "rtl.invariant",
                                                     "rtl.property.P1", "rtl.property.P2", "rtl.audit",
                                                     "rtl.lut_table", "rtl.pipeline")}  # latency 2: the pipeline too
    index = json.loads((reference_build / "proofs" / "index.json").read_text())
    ids = [o["id"] for o in index["obligations"]]
    quantizer = [i for i in ids if i.startswith("quantizer.")]  # the raw-input quantizer (issue 34)
    assert quantizer == ["quantizer.compute_util", "quantizer.cache_chase_ns", "quantizer.mem_bw_avail_gbs",
                         "quantizer.free_sram_kb", "quantizer.temperature_c", "quantizer.address"]
    assert len(ids) == 18 + len(quantizer) and all((reference_build / o["evidence"]).is_file() for o in index["obligations"])
    eq = next(o for o in index["obligations"] if o["id"] == "rtl.equivalence")
    s3 = z3.Solver()
    s3.from_string((reference_build / eq["prelude"]).read_text() + (reference_build / eq["evidence"]).read_text())
    assert s3.check() == z3.unsat


def test_a_lut_of_two_entries_that_differ_in_one_bit_is_proved(tmp_path):
    """Yosys narrows ``lut_entry`` to its one varying bit (a Bool in SMT-LIB) when the entries
    share their upper bits; the proofs read the design again with the wire kept (it raised a
    Z3 sort error before)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.array([[-1.0, 1.0, 0.0, 0.0]], dtype=np.float32), "W")
    b = numpy_helper.from_array(np.array([0.5, -0.4, -5.0, -5.0], dtype=np.float32), "b")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "four.onnx"))
    (tmp_path / "four.yaml").write_text(
        "schema: mi-certify/v1\ncontroller: {name: four, decode: argmax}\n"
        "inputs:\n  - {name: x, min: 0.0, max: 1.0, bits: 1}\n"
        "actions:\n  - {name: a0, conservative: true}\n  - {name: a1}\n  - {name: a2}\n  - {name: a3}\n"
        "fsm: {hysteresis: 1, cooldown: 0, violations_to_fallback: 1, recovery: 1}\n")
    res = build(tmp_path / "four.onnx", tmp_path / "four.yaml", tmp_path / "out",
                BuildOptions(skip_cosim=True, skip_synth=True, skip_lint=True))
    assert (tmp_path / "out" / "lut.hex").read_text().split() == ["80", "81"]   # a0 and a1, both confident
    assert res.summary["rtl_proofs"] and set(res.summary["rtl_proofs"].values()) == {"proved"}
    assert "; yosys-smt2-wire lut_entry 3\n" in (tmp_path / "out" / "proofs" / "rtl" / "design.smt2").read_text()
