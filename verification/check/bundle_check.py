"""``mi-certify check BUNDLE``: re-check a certificate bundle without trusting its producer.

Every item is one line with a status and the kind of path it takes:

* ``integrity`` — sha256 of every file against manifest.json; the Ed25519 signature.
* ``independent`` — recomputed by code that shares nothing with the build's own
  procedure: the LUT re-derived from the distillation boxes, the partition counted
  cell by cell, the tables parsed back out of the Verilog and the Python runtime,
  every witness and counterexample replayed on **onnxruntime** (not our IR), every
  proven cell evaluated on onnxruntime at its centre and at seeded interior points,
  each SMT-LIB obligation re-run by **Z3** from its stored script.
* ``same code`` — re-run with mi-certify's own procedure from the stored inputs and
  compared with the stored result (network properties, CROWN bounds of every proven
  box, LUT property check, Verilator lint, co-simulation). This catches a tampered or
  stale result, not a bug the procedure shares with itself; docs/certificate.md says
  which is which.

Status: PASS, FAIL or SKIP (a re-run that was not asked for or whose tool is
missing). A check that raises is a FAIL (fail closed). The overall result is ok only
when nothing failed and nothing was skipped.

The items come in this order, one evidence group a module:

======================  ==============================================================
``check_manifest``      manifest, signature, hashes, the inputs loaded
``check_network``       verification.json: witnesses replayed, queries re-run
``check_distillation``  distillation.json: partition, proven boxes re-bounded, resolved cells
``check_tables``        lut.json, the Verilog and Python tables = lut.hex; LUT properties
``check_proofs``        FSM / RTL obligations made again; every SMT-LIB script re-run by Z3
``check_hdl``           Verilator lint, co-simulation, synthesis numbers made again
``check_documents``     generated sources, summary, obligations, records, manifest, report
======================  ==============================================================

then the ``certificate verdict``. The runner, the item and the shared evidence are in
:mod:`.common`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mi_certify.verification.check.common import (
    FAIL, PASS, SKIP, CheckItem, CheckOptions, Checker, CheckContext, require)
from mi_certify.verification.check.distillation import check_distillation
from mi_certify.verification.check.documents import check_documents
from mi_certify.verification.check.hdl import check_hdl_numbers, check_tools, start_hdl_numbers
from mi_certify.verification.check.manifest import check_hashes, check_manifest, check_signature, load_inputs
from mi_certify.verification.check.network import check_network
from mi_certify.verification.check.proofs import check_proofs
from mi_certify.verification.check.tables import check_properties, check_tables

__all__ = ["FAIL", "PASS", "SKIP", "CheckItem", "CheckOptions", "check_bundle"]

#: The evidence groups after the inputs loaded, in the order their items are reported.
GROUPS: tuple[Callable[[Checker, CheckContext], None], ...] = (
    check_network, check_distillation, check_tables, check_properties, check_proofs, check_tools,
    check_hdl_numbers, check_documents)


def check_bundle(bundle: str | Path, opts: CheckOptions | None = None,
                 emit: Callable[[CheckItem], None] | None = None) -> list[CheckItem]:
    """Re-check the bundle in ``bundle``; returns every item (also passed to ``emit`` as it is decided).

    Stops early, returning the items so far and a failed ``certificate verdict`` naming where,
    when manifest.json is unusable, a hash fails, or the inputs do not load.

    Raises:
        MiCertifyError when ``bundle`` is not a directory or the public key is unusable.
    """
    from mi_certify.generator.core.errors import MiCertifyError

    d = Path(bundle)
    if not d.is_dir():
        raise MiCertifyError("not a directory", file=str(d))
    if not (d / "manifest.json").is_file():
        raise MiCertifyError("no manifest.json: not a certificate bundle (mi-certify build writes one)", file=str(d))
    opts = opts or CheckOptions()
    pub = None
    if opts.pubkey:
        from mi_certify.generator.bundle.signing import load_public_key
        pub = load_public_key(opts.pubkey)
    c = Checker(d, opts, emit or (lambda item: None))
    if not c.run("manifest", "integrity", lambda: check_manifest(c)):
        return _stopped(c, "manifest")
    check_signature(c, pub)
    if not check_hashes(c):
        return _stopped(c, "the hashes")  # nothing else is worth reading
    ev = CheckContext()
    if not c.run("inputs: spec and model load", "same code", lambda: load_inputs(c, ev)):
        return _stopped(c, "inputs: spec and model load")
    for group in GROUPS:
        _run_group(c, ev, group)
        if group is check_network:  # the slowest re-derivation beside the groups that follow
            start_hdl_numbers(c, ev)
    c.run("certificate verdict", "integrity", lambda: _verdict(c))
    return c.items


def _stopped(c: Checker, where: str) -> list[CheckItem]:
    """The items of a check that stopped early, ended by the certificate verdict (a FAIL naming where)."""
    c.add("certificate verdict", FAIL, "integrity", f"the check stopped at {where}: nothing after it was checked")
    return c.items


def _run_group(c: Checker, ev: CheckContext, group: Callable[[Checker, CheckContext], None]) -> None:
    """Run one evidence group; a group that raises outside its items (a file it reads first that
    cannot be parsed, a value no action has) gives one FAIL item naming the group and the error,
    and the check goes on with the next group: check never raises past an item."""
    try:
        group(c, ev)
    except Exception as exc:  # noqa: BLE001 - fail closed, then go on
        name = group.__name__.removeprefix("check_").replace("_", " ")
        c.add(f"{name}: could not be evaluated", FAIL, "integrity", f"{type(exc).__name__}: {exc}")


def _verdict(c: Checker) -> str | tuple[str, str]:
    from mi_certify.generator.core.results import GOOD_VERDICTS
    failed = [i.name for i in c.items if i.status == FAIL]
    require(not failed, f"{len(failed)} check(s) failed")
    s = c.read_json("summary.json")
    ob = c.read_json("obligations.json")
    open_ = [o["id"] for o in ob["obligations"] if o["required"] and o["verdict"] not in GOOD_VERDICTS]
    require(s["status"] in ("ok", "incomplete"), f"the build is {s['status']}: " + "; ".join(
        f"{word}: {', '.join(s[key])}" for key, word in (("failed_stages", "failed"), ("skipped_stages", "skipped"))
        if s.get(key)))
    require(not open_, f"open obligations: {', '.join(open_)}")
    if s["status"] == "incomplete":  # nothing failed, stages were skipped: not a complete certificate (exit 3)
        return SKIP, (f"the build is incomplete (skipped stages: {', '.join(s.get('skipped_stages', []))}): "
                      f"not a complete certificate; no open obligation of {len(ob['obligations'])}")
    return (f"build ok, no open obligation: {len(ob['obligations'])} obligations proved or checked by test "
            "(informative ones included); assumptions of use in the report")
