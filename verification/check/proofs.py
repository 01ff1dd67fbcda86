"""Proofs group of ``mi-certify check``: proofs/index.json's obligations made again and re-run.

Re-derives from sla.yaml, lut.hex and the Verilog: the FSM obligations (and, with
Yosys, the RTL obligations and ``proofs/rtl/design.smt2``) made again by mi-certify's
own procedure must equal the stored SMT-LIB scripts, so a script edited (and
re-hashed) to something trivially unsat is caught (same code). Then every stored
script is re-run by **Z3** and its answer compared with the recorded verdict, and the
exhaustive RTL LUT obligation is evaluated again at every address (independent).
Nothing when the build wrote no proofs/index.json.
"""

from __future__ import annotations


from mi_certify.verification.check.common import SKIP, Checker, CheckContext, require
from mi_certify.verification.tools.registry import why_unavailable

#: Z3 seconds per SMT-LIB obligation.
SMT_TIMEOUT_S = 600


def check_proofs(c: Checker, ev: CheckContext) -> None:
    """Items ``fsm proofs: ...``, ``rtl proofs: ...`` and one ``<group>.<id>: <evidence> re-run
    by z3`` per obligation of proofs/index.json."""
    from mi_certify.generator.bundle.evidence import PROOF_INDEX
    if not (c.d / PROOF_INDEX).exists():
        return
    import z3
    index = c.read_json(PROOF_INDEX)
    if ev.spec is not None and ev.lut is not None:
        _regenerate(c, ev, index)
    for o in index["obligations"]:
        name = o["id"] if o["id"].startswith(o["group"] + ".") else f"{o['group']}.{o['id']}"
        c.run(f"{name}: {o['evidence']} re-run by z3", "independent", lambda o=o: _rerun(c, ev, o, z3))


def _regenerate(c: Checker, ev: CheckContext, index: dict) -> None:
    """The FSM and RTL obligations made again and compared with the stored ones."""
    from mi_certify.verification.rtl.fsm_proofs import entry_alphabet, prove_fsm

    spec = ev.spec
    stored = {o["id"]: o for o in index["obligations"]}

    def fsm():  # the machine is built inside the items: a lut.hex it rejects is their FAIL, not a traceback
        obs = prove_fsm(ev.machine(), spec.properties, operator=spec.operator.config() if spec.operator else None)
        return f"{_same(c, stored, obs)} FSM obligations made again from sla.yaml and lut.hex equal the stored scripts"
    c.run("fsm proofs: made again and compared", "same code", fsm)

    def unmasked():  # the directed co-simulation sequences: the machine without rule 3a, proved again
        rel = "proofs/fsm/without_rule_3a.json"
        if not (c.d / rel).exists():
            return SKIP, f"no {rel} in the bundle"
        again = {o.id: o.counterexample for o in prove_fsm(ev.machine(), spec.properties, use_mask=False,
                                                           fresh=spec.operator is not None)
                 if o.counterexample}
        stored_traces = c.read_json(rel).get("traces")
        differ = sorted(k for k in set(again) | set(stored_traces or {})
                        if again.get(k) != (stored_traces or {}).get(k))
        require(isinstance(stored_traces, dict) and not differ,
                f"{rel} differs from the counterexamples made again from sla.yaml and lut.hex in: "
                f"{', '.join(differ) or 'traces'}")
        return f"{len(again)} counterexamples of the machine without rule 3a made again equal {rel}"
    c.run("fsm proofs: counterexamples without rule 3a made again and compared", "same code", unmasked)
    if any(o["group"] == "quantizer" for o in index["obligations"]):
        _regenerate_quantizer(c, ev, stored)
    if not any(o["group"] == "rtl" for o in index["obligations"]):
        return
    if why_unavailable("yosys"):
        c.add("rtl proofs: made again from the Verilog and compared", SKIP, "same code",
              f"yosys is {why_unavailable('yosys')}")
        return

    def rtl():
        from mi_certify.verification.rtl.rtl_formal import rtl_obligations
        machine = ev.machine()
        obs, prelude = rtl_obligations(c.d / f"{spec.module_name}.v", spec.module_name, machine,
                                       entry_alphabet(machine), reset_port=spec.hdl.reset_port,
                                       reset_active_low=spec.hdl.reset_polarity == "low",
                                       latency=spec.hdl.latency_cycles,
                                       operator=spec.operator.config() if spec.operator else None)
        require(prelude == (c.d / "proofs" / "rtl" / "design.smt2").read_text(encoding="utf-8"),
                "proofs/rtl/design.smt2 differs from Yosys' reading of the Verilog")
        return (f"{_same(c, stored, obs)} RTL obligations made again from {spec.module_name}.v (Yosys + Z3) equal "
                "the stored ones")
    c.run("rtl proofs: made again from the Verilog and compared", "same code", rtl)


def _regenerate_quantizer(c: Checker, ev: CheckContext, stored: dict) -> None:
    """The quantizer obligations made again from the bundle's quantizer Verilog (the Python runtime on
    every word, Yosys + Z3) and compared with the stored ones (the Verilog itself is emitted again by
    the documents group: :func:`~.bundle_documents.regenerate_sources`)."""
    spec = ev.spec

    def again():
        from mi_certify.generator.build.emit_quantizer import quantizer_module
        from mi_certify.verification.rtl.quantizer_proofs import PRELUDE, quantizer_obligations
        obs, prelude = quantizer_obligations(c.d / f"{quantizer_module(spec)}.v", spec, quantizer_module(spec))
        require(prelude == (c.d / PRELUDE).read_text(encoding="utf-8"), f"{PRELUDE} differs from Yosys' reading")
        return (f"{_same(c, stored, obs)} quantizer obligations made again from {quantizer_module(spec)}.v (the "
                "Python runtime on every word, Yosys + Z3) equal the stored ones")
    if why_unavailable("yosys"):
        c.add("quantizer proofs: made again and compared", SKIP, "same code", f"yosys is {why_unavailable('yosys')}")
        return
    c.run("quantizer proofs: made again and compared", "same code", again)


def _same(c: Checker, stored: dict, obs) -> int:
    """Every obligation made again has the stored verdict and script; returns how many."""
    for ob in obs:
        o = stored.get(ob.id)
        require(o is not None, f"{ob.id} is missing from proofs/index.json")
        require(o["verdict"] == ob.verdict, f"{ob.id}: recorded {o['verdict']}, made again {ob.verdict}")
        if o.get("kind") != "exhaustive":
            text = (c.d / o["evidence"]).read_text(encoding="utf-8")
            require(text == ob.smt2, f"{o['evidence']} differs from the obligation made again")
    return len(obs)


def _rerun(c: Checker, ev: CheckContext, o: dict, z3) -> str | tuple[str, str]:
    """One stored obligation re-run: the SMT-LIB script by Z3, or the exhaustive LUT table."""
    p = c.d / o["evidence"]
    require(o["evidence"] in c.manifest["files"], f"{o['evidence']} is not hashed in manifest.json")
    if o.get("kind") == "exhaustive":  # the RTL's LUT, evaluated again at every address
        from mi_certify.verification.rtl.rtl_formal import lut_table, yosys_smt2
        if why_unavailable("yosys"):
            return SKIP, f"yosys is {why_unavailable('yosys')}"
        spec = ev.spec
        ob = lut_table(yosys_smt2(p, spec.module_name, entry_bits=spec.token_bits + 1), spec.module_name,
                       bytes(ev.lut_hex()),
                       spec.address_bits, spec.token_bits, spec.hdl.latency_cycles)
        require(ob.verdict == o["verdict"], f"re-evaluation gives {ob.verdict}: {ob.detail}")
        return f"{ob.detail} (recorded {o['verdict']})"
    s = z3.Solver()
    s.set("timeout", SMT_TIMEOUT_S * 1000)
    text = p.read_text(encoding="utf-8")
    if o.get("prelude"):
        require(o["prelude"] in c.manifest["files"], f"{o['prelude']} is not hashed in manifest.json")
        text = (c.d / o["prelude"]).read_text(encoding="utf-8") + text
    s.from_string(text)
    ans = str(s.check())
    expect = o.get("expect", "unsat")
    if o["verdict"] == "proved":
        require(ans == expect, f"z3 answers {ans}, the obligation expects {expect}")
    elif o["verdict"] == "violated":
        require(ans in ("sat", "unsat") and ans != expect, f"recorded violated but z3 answers {ans}")
        cex = o.get("counterexample")
        require(bool(cex) and cex in c.manifest["files"], "violated without a hashed counterexample file")
    else:
        return SKIP, f"recorded {o['verdict']}; z3 answers {ans}"
    return f"z3 {z3.get_version_string()} answers {ans} ({o['verdict']}, expect {expect})"
