"""summary.json from the stage records (each built by :mod:`.stage_records`) and the final LUT's counts."""

from __future__ import annotations


from mi_certify.generator.core.results import Status


#: Fields of the ``hdl`` stage copied into summary.json ``hdl`` (when the stage measured them: ok,
#: or failed on a missed target).
HDL_SUMMARY_KEYS = ("fmax_mhz_hx8k", "fmax_mhz_up5k", "fmax_mhz_ecp5_25f", "fmax_mhz_xo3_6900", "lut4", "dff", "bram",
                    "goal_met", "devices", "target")


def summarize(spec, stages: dict, lut_counts: dict, version: str) -> dict:
    """summary.json from the stage records and the final LUT's cell counts (lut.json
    ``status``, after the property masks): status, failed and skipped stages, the
    headline figures. A pure function, so ``mi-certify check`` recomputes it."""
    failed = [k for k, v in stages.items() if v["status"] == Status.FAILED]
    skipped = [k for k, v in stages.items() if v["status"] == Status.SKIPPED]
    lut = stages["lut"]
    cosim = stages["cosim"]
    hdl = stages["hdl"]
    return {"status": Status.FAILED.value if failed else "incomplete" if skipped else Status.OK.value, "failed_stages": failed,
            "skipped_stages": skipped, "stages": stages,
            "lut": {"cells": sum(lut_counts.values()), **{k: lut_counts[k] for k in ("sampled", "proven", "resolved")},
                    **({"proven_share": lut["proven_share"], "fidelity": lut["fidelity"]} if "fidelity" in lut else {})},
            "cosim": ({"cycles": cosim["cycles"], "mismatches": cosim["mismatches"]} if "cycles" in cosim
                      else {"cycles": 0, "mismatches": None}),
            **({"coverage": cosim["coverage"]} if "coverage" in cosim else {}),
            "fsm_proofs": stages["fsm_proofs"]["obligations"],
            "rtl_proofs": stages["rtl_proofs"].get("obligations", {}),
            "hdl": {"encoding": stages["emit"]["encoding"], "module": spec.module_name,
                    **({k: hdl.get(k) for k in HDL_SUMMARY_KEYS} if "place_and_route" in hdl else {})},
            "artifacts": {"python_runtime": stages["emit"]["python_runtime"], "verilog": stages["emit"]["verilog"]},
            "controller": spec.name, "mi_certify": version}
