"""Stage records of summary.json that a reader weighs first: a LUT that agrees little with its
network is said so (issue 31), and ``distill.min_agreement`` fails the build below it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import two_action_spec
from mi_certify.generator.bundle.stage_records import LOW_AGREEMENT, lut_record
from mi_certify.generator.core.errors import SpecError

BOXES = np.zeros(3, dtype=[("method", "u1")])   # what lut_record reads of the partition: each box's method
COUNTS = {"sampled": 0, "proven": 2, "resolved": 6}


def _fidelity(agreement: float) -> dict:
    return {"points": 100_000, "agree": round(agreement * 100_000), "agreement": agreement,
            "proven_points": 40, "proven_agree": 40}


def test_a_lut_that_agrees_on_9_5_percent_passes_with_a_warning_that_says_so(tmp_path):
    spec = two_action_spec(tmp_path)
    rec = lut_record(spec, COUNTS, BOXES, _fidelity(0.095))
    assert rec["status"] == "ok" and "error" not in rec
    assert rec["warning"] == ("the LUT agrees with the network on only 9.50% of 100,000 test points (6 of 8 cells "
                              "resolved, not proven); distill.min_agreement bounds it")
    assert "warning" not in lut_record(spec, COUNTS, BOXES, _fidelity(LOW_AGREEMENT))


def test_min_agreement_fails_the_lut_stage_below_it_and_only_below_it(tmp_path):
    spec = replace(two_action_spec(tmp_path), min_agreement=0.5)
    rec = lut_record(spec, COUNTS, BOXES, _fidelity(0.4999))
    assert rec["status"] == "failed" and "warning" not in rec
    assert rec["error"] == ("the LUT agrees with the network on 49.99% of 100,000 test points, below "
                            "distill.min_agreement 50.00%")
    assert lut_record(spec, COUNTS, BOXES, _fidelity(0.5))["status"] == "ok"


def test_min_agreement_is_read_from_sla_yaml_and_a_bad_value_is_one_located_error(tmp_path):
    assert two_action_spec(tmp_path, distill_section="distill: {min_agreement: 0.75}").min_agreement == 0.75
    assert two_action_spec(tmp_path).min_agreement is None
    with pytest.raises(SpecError, match=r"distill\.min_agreement"):
        two_action_spec(tmp_path, distill_section="distill: {min_agreement: 1.5}")
