"""One encoder and one decoder per bundle format (issue 30): LUT table bytes, lut.hex, the
cell-status runs of lut.json, and the stage records of summary.json, each round-tripped on
generated values and on the shipped reference bundle (certs/meta_controller, in the repository)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mi_certify.generator.core.lut import (PROVEN, RESOLVED, SAMPLED, decode_status_runs, encode_status_runs,
                                           split_table, status_run_counts, table_bytes)
from mi_certify.runtime.lut_file import (decode_lut_hex, encode_lut_hex, pack_entry, split_entries,
                                         unpack_entry)

from conftest import ROOT

CERTS = ROOT / "certs" / "meta_controller"


# --- one entry, a table of bytes ---------------------------------------------------------------

def test_an_entry_packs_the_token_low_and_the_confident_bit_high():
    assert pack_entry(3, True) == 0x83 and pack_entry(3, False) == 0x03 and pack_entry(127, True) == 0xFF
    assert unpack_entry(0x83) == (3, True) and unpack_entry(0x05) == (5, False)
    with pytest.raises(ValueError, match="does not fit bits 0-6"):
        pack_entry(128, False)
    with pytest.raises(ValueError, match="not a byte"):
        unpack_entry(256)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 127), st.booleans()), min_size=1, max_size=300))
def test_table_bytes_round_trip_per_entry_and_per_array(entries):
    tokens = np.array([t for t, _ in entries], dtype=np.uint8)
    conf = np.array([c for _, c in entries], dtype=bool)
    raw = table_bytes(tokens, conf)
    assert raw == bytes(pack_entry(t, c) for t, c in entries)     # the array form is the entry form
    t2, c2 = split_table(raw)
    assert np.array_equal(t2, tokens) and np.array_equal(c2, conf)
    assert split_entries(raw) == ([int(t) for t in tokens], [bool(c) for c in conf])


# --- lut.hex ------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_lut_hex_round_trips_every_table(raw):
    text = encode_lut_hex(raw)
    assert text.count("\n") == len(raw) and all(len(line) == 2 for line in text.splitlines())
    assert decode_lut_hex(text) == raw and encode_lut_hex(decode_lut_hex(text)) == text


@pytest.mark.parametrize("text, where", [("0a\nZZ\n", "line 2"), ("0A\n", "line 1"), ("0a\n1", "line 2"),
                                         ("0a\n\n", "line 2")])
def test_a_malformed_lut_hex_names_its_line(text, where):
    with pytest.raises(ValueError, match=where):
        decode_lut_hex(text)


def test_the_shipped_lut_hex_decodes_to_the_hash_lut_json_names_and_encodes_back():
    import hashlib
    text = (CERTS / "lut.hex").read_text(encoding="ascii")
    raw = decode_lut_hex(text)
    lut_json = json.loads((CERTS / "lut.json").read_text())
    assert len(raw) == 1 << 14 and hashlib.sha256(raw).hexdigest() == lut_json["sha256"]
    assert encode_lut_hex(raw) == text


# --- cell-status runs ---------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([SAMPLED, PROVEN, RESOLVED]), min_size=1, max_size=200))
def test_status_runs_round_trip_and_are_maximal(cells):
    status = np.array(cells, dtype=object)
    runs = encode_status_runs(status)
    assert np.array_equal(decode_status_runs(runs, len(cells)), status)
    assert all(a[2] != b[2] for a, b in zip(runs, runs[1:]))           # neighbours differ: maximal
    assert status_run_counts(runs) == {s: cells.count(s) for s in (PROVEN, RESOLVED, SAMPLED)}
    assert json.loads(json.dumps(runs)) == runs                          # plain JSON values


@pytest.mark.parametrize("runs, n, what", [([[0, 2, PROVEN], [3, 4, PROVEN]], 4, "run 1"),
                                           ([[0, 2, "maybe"]], 2, "run 0"),
                                           ([[0, 2, PROVEN]], 3, "not the 3 cells")])
def test_bad_status_runs_are_refused_naming_the_run(runs, n, what):
    with pytest.raises(ValueError, match=what):
        decode_status_runs(runs, n)


def test_the_shipped_status_runs_decode_to_the_counts_lut_json_states_and_encode_back():
    lut_json = json.loads((CERTS / "lut.json").read_text())
    status = decode_status_runs(lut_json["cell_status"], 1 << 14)
    assert encode_status_runs(status) == lut_json["cell_status"]
    summary = json.loads((CERTS / "summary.json").read_text())
    assert int(np.sum(status == PROVEN)) + int(np.sum(status == RESOLVED)) == 1 << 14
    assert summary["stages"]["lut"]["proven"] == int(np.sum(status == PROVEN))


# --- stage records ------------------------------------------------------------------------------

def test_every_stage_record_of_the_shipped_bundle_is_rebuilt_by_the_one_builder_per_stage():
    """The checker re-derives each summary.json stage record from the evidence files with the
    pipeline's own record builders (generator/bundle/stage_records.py): on the reference bundle
    every record comes out equal, key for key."""
    from mi_certify.generator.core.spec import load_spec
    from mi_certify.generator.frontend.onnx_import import import_onnx
    from mi_certify.verification.check.bundle_documents import expected_stages

    summary = json.loads((CERTS / "summary.json").read_text())
    manifest = json.loads((CERTS / "manifest.json").read_text())
    spec = load_spec(CERTS / "inputs" / "spec" / "sla.yaml")
    ir = import_onnx(CERTS / "inputs" / "model" / "controller.onnx")
    lut = np.frombuffer(decode_lut_hex((CERTS / "lut.hex").read_text(encoding="ascii")), dtype=np.uint8)
    again = expected_stages(CERTS, spec, ir, manifest, summary["stages"], lut)
    assert sorted(again) == sorted(summary["stages"])
    differ = [k for k in again if json.loads(json.dumps(again[k])) != summary["stages"][k]]
    assert differ == []
