"""The raw-input quantizer (``<module>_quantizer.v``) proved equal to the Python runtime on every
word of every input (docs/hdl.md, "Raw inputs").

Two halves, named for what they are:

- **Python runtime, by exhaustion**: :func:`mi_certify.runtime.quantize.word_runs` calls
  :func:`~mi_certify.runtime.quantize.word_level` (the runtime's one raw-word entry) on all
  2^width words of each input and compresses the answers into runs of consecutive word values
  with one result (level, or probe fault). Nothing is sampled: the runs are the whole table.
- **RTL, by Z3 over all words**: Yosys reads the Verilog (``write_smt2``, the script of the RTL
  proofs), and Z3 shows the negation of "the RTL's output equals the run table" unsatisfiable
  for every word (bit-vector, no enumeration on this side).

Obligations (group ``quantizer``; prelude ``proofs/quantizer/design.smt2``; expected answer unsat):

- ``quantizer.<input>``: with ``valid_<input>`` high and the other inputs in their envelopes, for
  every word: ``input_fault[i]`` = the runtime's fault, and when there is none the input's field
  of ``addr`` and of ``levels`` = the runtime's level; with ``valid_<input>`` low, ``input_fault[i]``
  is set.
- ``quantizer.address``: for every word and valid bit of every input at once: ``input_fault`` =
  the per-input faults, ``probe_fault`` = their OR, and ``addr`` = 0 in a fault cycle, else the
  levels concatenated (input 0 most significant): what
  :func:`~mi_certify.runtime.quantize.quantize_words` returns; ``levels`` = that concatenation
  whenever no input faults.

The raw top ``<module>_raw`` registers ``levels`` and ``input_fault`` and gives the controller
``probe_fault`` = their OR and ``addr`` = 0 on a fault, else ``levels`` (two lines of its own, not
part of these proofs): the bus co-simulation checks it by test, every cycle, against the Python
runtime stepped on the same raw words (docs/hdl.md, "What is proved, what is tested").
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import z3

from mi_certify.generator.core.results import Verdict
from mi_certify.generator.core.spec import Spec
from mi_certify.runtime.quantize import FixedPoint, Quantizer, word_runs

from mi_certify.verification.tools import yosys
from mi_certify.verification.rtl.fsm_proofs import Obligation, canonical_smt2

#: bundle path of the quantizer's SMT-LIB design (the prelude of every quantizer obligation)
PRELUDE = "proofs/quantizer/design.smt2"
METHOD = ("Python runtime word_level on every word (exhaustion) as runs; RTL (Yosys write_smt2) equal to the "
          "runs for every word (Z3, bit-vectors)")


def _bv(term: str, w: int) -> str:
    return f"(ite {term} #b1 #b0)" if w == 1 else term  # yosys declares 1-bit signals as Bool


def _binding(top: str, ports: dict[str, int]) -> str:
    out = [f"(declare-const q_s |{top}_s|)"]
    for name, w in ports.items():
        out.append(f"(declare-const q_{name} (_ BitVec {w}))")
        out.append(f"(assert (= q_{name} {_bv(f'(|{top}_n {name}| q_s)', w)}))")
    return "\n".join(out) + "\n"


def _table(word: z3.BitVecRef, fmt: FixedPoint, runs, level_bits: int) -> tuple[z3.BoolRef, z3.BitVecRef]:
    """(fault, level) of the run table as Z3 terms of ``word``: an ite chain over the runs' upper ends,
    compared as signed or unsigned word values like the format."""
    le = (lambda a, b: a <= b) if fmt.signed else z3.ULE
    fault, level = z3.BoolVal(runs[-1][2] is None), z3.BitVecVal(runs[-1][2] or 0, level_bits)
    for first, last, q in reversed(runs[:-1]):
        c = le(word, z3.BitVecVal(last % fmt.words, fmt.width))
        fault = z3.If(c, z3.BoolVal(q is None), fault)
        level = z3.If(c, z3.BitVecVal(q or 0, level_bits), level)
    return fault, level


def quantizer_obligations(verilog: Path, spec: Spec, module: str, timeout_s: float = 300.0
                          ) -> tuple[list[Obligation], str]:
    """Prove ``module`` (the quantizer in ``verilog``) equal to the Python runtime for ``spec``'s inputs
    and raw formats (``spec.hdl.input_formats``, not empty). Returns (obligations, the SMT-LIB prelude:
    Yosys' design and the port binding). A solver answer other than unsat/sat is UNKNOWN (fails
    closed). Raises :class:`~mi_certify.verification.tools.yosys.YosysError` when Yosys fails."""
    formats = spec.hdl.input_formats
    design = yosys.smt2(verilog, module, timeout_s)
    n = len(spec.inputs)
    ports = {}
    for inp, fmt in zip(spec.inputs, formats):
        ports[f"raw_{inp.name}"], ports[f"valid_{inp.name}"] = fmt.width, 1
    ports.update(addr=spec.address_bits, levels=spec.address_bits, probe_fault=1, input_fault=n)
    prelude = design + "\n" + _binding(module, ports)
    v = {name: z3.BitVec(f"q_{name}", w) for name, w in ports.items()}
    faults, levels, fields, msb = [], [], [], spec.address_bits - 1
    for i, (inp, fmt) in enumerate(zip(spec.inputs, formats)):
        runs = word_runs(Quantizer.from_floats(inp.min, inp.max, inp.bits), fmt)
        f, q = _table(v[f"raw_{inp.name}"], fmt, runs, inp.bits)
        faults.append(z3.Or(v[f"valid_{inp.name}"] == 0, f))
        levels.append(q)
        fields.append((msb, msb - inp.bits + 1, f, len(runs)))
        msb -= inp.bits
    bit = lambda x, i: z3.Extract(i, i, x) == 1  # noqa: E731
    obligations = []
    for i, inp in enumerate(spec.inputs):
        hi, lo, f, nruns = fields[i]
        others_ok = [z3.Not(faults[j]) for j in range(n) if j != i]
        claim_valid = z3.And(bit(v["input_fault"], i) == f,
                             z3.Or(f, z3.Extract(hi, lo, v["addr"]) == levels[i]),
                             z3.Or(f, z3.Extract(hi, lo, v["levels"]) == levels[i]))
        bad = z3.Or(z3.And(v[f"valid_{inp.name}"] == 0, z3.Not(bit(v["input_fault"], i))),
                    z3.And(v[f"valid_{inp.name}"] == 1, *others_ok, z3.Not(claim_valid)))
        fmt = formats[i]
        obligations.append(_run(
            f"quantizer.{inp.name}", "raw inputs",
            f"for each of the {fmt.words} words of {inp.name} ({fmt.describe()}), the RTL's fault and level (its "
            f"field of addr and of levels) equal the Python runtime's word_level ({nruns} runs); valid_{inp.name} "
            f"low is a fault", prelude, bad,
            timeout_s))
    any_fault = z3.Or(*faults)
    want_addr = z3.If(any_fault, z3.BitVecVal(0, spec.address_bits), z3.Concat(*levels) if n > 1 else levels[0])
    fault_bits = [z3.If(faults[i], z3.BitVecVal(1, 1), z3.BitVecVal(0, 1)) for i in reversed(range(n))]
    want_faults = z3.Concat(*fault_bits) if n > 1 else fault_bits[0]
    bad = z3.Not(z3.And(v["input_fault"] == want_faults, (v["probe_fault"] == 1) == any_fault, v["addr"] == want_addr,
                        z3.Or(any_fault, v["levels"] == want_addr)))
    obligations.append(_run(
        "quantizer.address", "raw inputs",
        "for every word and valid bit of every input: input_fault, probe_fault and addr (0 on a fault, else the "
        "levels, input 0 most significant) equal the Python runtime's quantize_words, and levels equals addr "
        "without a fault", prelude, bad, timeout_s))
    return obligations, prelude


def _run(oid: str, requirement: str, claim: str, prelude: str, bad: z3.BoolRef, timeout_s: float) -> Obligation:
    t = time.monotonic()
    s = z3.Solver()
    s.set("timeout", int(timeout_s * 1000))
    s.add(z3.parse_smt2_string(prelude))
    s.add(bad)
    ans = str(s.check())
    text = ("; mi-certify proof obligation on the raw-input quantizer. Expected answer: unsat.\n"
            f"; Not self-contained: prepend {PRELUDE} (the quantizer from Yosys write_smt2 and the constants\n"
            "; q_* bound to its ports). The run table is the Python runtime's word_level on every word.\n"
            f"(assert {canonical_smt2(bad.sexpr())})\n(check-sat)\n")
    ob = Obligation(oid, requirement, claim, method=METHOD, smt2=text)
    ob.verdict = {"unsat": Verdict.PROVED, "sat": Verdict.VIOLATED}.get(ans, Verdict.UNKNOWN)
    ob.time_s = round(time.monotonic() - t, 3)
    if ans == "sat":
        m = s.model()
        ob.counterexample = [{d.name(): str(m[d]) for d in m.decls() if d.name().startswith("q_") and d.name() != "q_s"}]
        ob.detail = "a word where the RTL differs from the Python runtime"
    elif ans != "unsat":
        ob.detail = f"z3 answered {ans}"
    return ob
