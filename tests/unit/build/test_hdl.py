"""The sla.yaml hdl options, the LUT encodings, their proofs, and the synthesis numbers (docs/hdl.md)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import shutil
import subprocess

import numpy as np
import pytest

from mi_certify.generator.core.boxtree import Leaf, build_tree, evaluate, tree_size
from mi_certify.generator.build.emit_common import SourceHashes
from mi_certify.generator.build.emit_verilog import emit_verilog
from mi_certify.generator.build.lut_sliced_rom import sliced_rom, split_select
from mi_certify.generator.build.verilog_parts import lut_entries
from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.lut import LutFsmArtefact, apply_masks, property_masks, sample_lut
from mi_certify.generator.frontend.onnx_import import import_onnx
from mi_certify.generator.core.spec import HdlOptions, load_spec
from mi_certify.verification.rtl import synth
from mi_certify.verification.check.tables import verilog_table
from mi_certify.verification.rtl.fsm_proofs import entry_alphabet
from mi_certify.verification.rtl.rtl_formal import rtl_obligations

from conftest import REFERENCE_MODEL, REFERENCE_SLA

HASHES = SourceHashes("m" * 64, "s" * 64, "l" * 64)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The reference network on a 10-bit grid (2 bits per input), without its operator input, LUT sampled
    at cell centres, and a partition of the grid into 16 boxes (input 0 x input 1 levels)."""
    tmp = tmp_path_factory.mktemp("hdl")
    sla = tmp / "sla.yaml"
    # without the reference's operator: these tests are about the LUT encodings and latencies; the command
    # port is covered by tests/unit/build/test_operator_runtime.py and tests/e2e/test_operator_build.py
    text = re.sub(r"\noperator: \{.*\}", "", REFERENCE_SLA.read_text())
    text = re.sub(r"bits: \d\}", "bits: 2}", text)
    sla.write_text(text)
    # the one-cycle machine (the reference spec sets latency 4; the latency tests set it per test)
    spec = load_spec(sla)
    spec = dataclasses.replace(spec, hdl=dataclasses.replace(spec.hdl, latency=1))
    lut, _ = apply_masks(spec, sample_lut(spec, import_onnx(REFERENCE_MODEL)), property_masks(spec))
    boxes = [([i, j, 0, 0, 0], [i, j, 3, 3, 3]) for i in range(4) for j in range(4)]
    return spec, lut, boxes


def _emit(spec, lut, boxes, out, encoding, **hdl):
    spec = dataclasses.replace(spec, hdl=dataclasses.replace(spec.hdl, **hdl))
    out.mkdir(parents=True, exist_ok=True)
    v = out / f"{spec.module_name}.v"
    machine = LutFsmArtefact.from_lut(spec, lut, property_masks(spec))
    v.write_text(emit_verilog(spec, machine, HASHES, "test", encoding=encoding, boxes=boxes))
    return spec, v


def _flip_rom_word(v, memory: str, address: int, mask: int) -> None:
    """XOR ``mask`` into the initial value of ``memory[address]`` in the Verilog ``v``."""
    text = v.read_text()
    m = re.search(rf"^(\s*{memory}\[{address}\] = (\d+)'h)([0-9a-f]+);$", text, re.M)
    assert m, f"{memory}[{address}] has no initial value in {v.name}"
    word = format(int(m.group(3), 16) ^ mask, f"0{len(m.group(3))}x")
    v.write_text(text[:m.start()] + m.group(1) + word + ";" + text[m.end():])


def _proofs(spec, v, lut):
    machine = LutFsmArtefact.from_lut(spec, lut, property_masks(spec))
    obs, _ = rtl_obligations(v, spec.module_name, machine, entry_alphabet(machine),
                             reset_port=spec.hdl.reset_port, reset_active_low=spec.hdl.reset_polarity == "low",
                             latency=spec.hdl.latency_cycles)
    return {o.id: o for o in obs}


# --- the box tree ----------------------------------------------------------------------------

def test_box_tree_is_exact_and_merges_adjacent_boxes_with_the_same_entry():
    rng = np.random.default_rng(3)
    bits = [3, 2, 2]
    grid = np.zeros((8, 4, 4), dtype=np.int64)
    grid[4:, :, :] = 1          # two halves ...
    grid[6, 1, 2] = 5           # ... and one odd cell
    boxes = [([i, 0, 0], [i, 3, 3]) for i in range(8) if i != 6]      # eight slabs of input 0, slab 6 in cells
    boxes += [([6, j, k], [6, j, k]) for j in range(4) for k in range(4)]
    root = build_tree(grid.ravel(), bits, boxes)
    levels = np.array(np.unravel_index(np.arange(grid.size), grid.shape)).T
    assert np.array_equal(evaluate(root, levels), grid.ravel())
    # the four slabs 0..3 (entry 0) merge into one leaf; 4..7 need the odd cell carved out
    assert isinstance(root.below, Leaf) and root.below.entry == 0 and (root.field, root.threshold) == (0, 4)
    # 23 boxes become 8 leaves: x<4, x<6, x<7 and y<1, y<2, z<2, z<3 isolate the odd cell (the minimum)
    assert tree_size(root) == (7, 8)
    # without a partition: still exact
    noisy = rng.integers(0, 3, size=128)
    assert np.array_equal(evaluate(build_tree(noisy, bits), levels), noisy)
    # a checkerboard inside one box: every slab has the same minimum and maximum along each input,
    # so no "entries change here" line exists; the tree must still split (found by the retrained
    # reference controller's 10-bit grid)
    xor = (np.arange(4)[:, None] ^ np.arange(4)[None, :]) & 1
    for part in (None, [([0, 0], [3, 3])]):
        tree = build_tree(xor.ravel(), [2, 2], part)
        lv = np.array(np.unravel_index(np.arange(16), (4, 4))).T
        assert np.array_equal(evaluate(tree, lv), xor.ravel()) and tree_size(tree)[1] == 16


# --- every encoding is proved equal to the table ------------------------------------------------

@pytest.mark.parametrize("encoding", ["case", "rom", "boxtree", "sliced_rom"])
def test_every_encoding_is_proved_equal_to_the_table_and_read_back_independently(small, tmp_path, encoding):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, encoding)
    obs = _proofs(spec, v, lut)
    assert {k: o.verdict for k, o in obs.items() if o.verdict != "proved"} == {}
    assert obs["rtl.lut_table"].detail == "1024 entries equal"
    table, how = verilog_table(tmp_path, spec)
    assert np.array_equal(table, lut_entries(spec, lut)), how
    title = {"case": "case statement", "rom": "flat ROM", "boxtree": "box tree", "sliced_rom": "sliced ROM"}
    assert f"LUT encoding: {title[encoding]}" in v.read_text()


def test_a_mutated_rom_word_is_caught(small, tmp_path):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "rom")
    assert list(tmp_path.iterdir()) == [v]   # the ROM's contents are in the Verilog: no file to read
    _flip_rom_word(v, "lut_rom", 77, 0b001)
    ob = _proofs(spec, v, lut)["rtl.lut_table"]
    assert ob.verdict == "violated" and ob.detail == "1 entries differ, first at address 77"
    table, _ = verilog_table(tmp_path, spec)
    assert np.nonzero(table != lut_entries(spec, lut))[0].tolist() == [77]


def test_the_sliced_rom_codes_slices_and_shares_columns():
    # 4 address bits; entries 5 (most), 9 and 12: codes 0, 1, 2 (2 bits)
    entries = np.array([5] * 4 + [5, 9, 5, 9] + [12, 12, 5, 5] + [5, 9, 5, 9], dtype=np.int64)
    sr = sliced_rom(entries, 4, low_bits=2)
    assert sr.dictionary == (5, 9, 12) and sr.code_bits == 2 and sr.high_bits == 2
    # slice 0 constant; slices 1 and 3 identical (one column for code bit 0, bit 1 constant 0);
    # slice 2: both code bits vary (bit 0 never set: constant 0; bit 1 is its own column)
    assert [[int(c) for c in col] for col in sr.columns] == [[0, 1, 0, 1], [1, 1, 0, 0]]
    assert sr.select == ((("c", 0), ("c", 0)), (("m", 0), ("c", 0)), (("c", 0), ("m", 1)), (("m", 0), ("c", 0)))
    assert np.array_equal(sr.table(), entries)
    # chosen slicing: fewest iCE40 block RAMs, then fewest slices: a 2^16 table of 3 entries whose
    # upper half is constant stores only the lower half (2 columns x 2^15 bits: 16 BRAMs, not 32)
    rng = np.random.default_rng(0)
    big = np.concatenate([rng.integers(0, 3, 1 << 13).repeat(4), np.full(1 << 15, 2)])
    sr = sliced_rom(big, 16)
    assert (sr.low_bits, len(sr.columns)) == (15, 2) and np.array_equal(sr.table(), big)


@pytest.mark.skipif(shutil.which("iverilog") is None or shutil.which("verilator") is None,
                    reason="iverilog and verilator are required (make setup)")
@pytest.mark.parametrize("encoding", ["case", "rom", "boxtree", "sliced_rom"])
def test_a_constant_lut_is_proved_read_back_and_co_simulated(small, tmp_path, encoding):
    # every cell the same entry: no ROM, no slice, no comparator; a combinational block
    # without inputs would never run in an event-driven simulator (found by a fresh-user review)
    from mi_certify.verification.cosim.cocotb_sim import run_cosim
    spec, lut, boxes = small
    const = dataclasses.replace(lut, tokens=np.zeros_like(lut.tokens), confident=np.ones_like(lut.confident))
    spec, v = _emit(spec, const, boxes, tmp_path / "rtl", encoding)
    assert {k: o.verdict for k, o in _proofs(spec, v, const).items() if o.verdict != "proved"} == {}
    table, how = verilog_table(v.parent, spec)
    assert np.array_equal(table, lut_entries(spec, const)) and set(table.tolist()) == {4}, how
    lint = subprocess.run(["verilator", "--lint-only", "-Wall", v.name], cwd=v.parent, capture_output=True, text=True)
    assert lint.returncode == 0 and not lint.stderr.strip(), lint.stderr
    res = run_cosim(v, spec.module_name, LutFsmArtefact.from_lut(spec, const, property_masks(spec)), tmp_path / "work",
                    random_cycles=1000)
    assert res.passed and res.mismatches == 0, res.to_json()


def test_a_mutated_sliced_rom_word_is_caught(small, tmp_path):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "sliced_rom")
    _flip_rom_word(v, "lut_cols", 5, 0b1)   # column 0 at ROM address 5: every slice that reads it
    ob = _proofs(spec, v, lut)["rtl.lut_table"]
    table, _ = verilog_table(tmp_path, spec)
    bad = np.nonzero(table != lut_entries(spec, lut))[0]
    low = sliced_rom(lut_entries(spec, lut), spec.address_bits).low_bits
    assert ob.verdict == "violated" and len(bad) >= 1 and {int(a) & ((1 << low) - 1) for a in bad} == {5}
    assert ob.detail == f"{len(bad)} entries differ, first at address {bad[0]}"


def test_a_mutated_box_tree_is_caught(small, tmp_path):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "boxtree")
    src = v.read_text()
    # one comparator moved by one level: the cells on that grid line fall to the other side
    line = next(ln for ln in src.splitlines() if ln.strip().startswith("if (q_"))
    t = int(line.split("'d")[1].split(")")[0])
    mutant = src.replace(line, line.replace(f"'d{t})", f"'d{t + 1})"), 1)
    assert mutant != src
    v.write_text(mutant)
    ob = _proofs(spec, v, lut)["rtl.lut_table"]
    assert ob.verdict == "violated" and ob.counterexample
    table, _ = verilog_table(tmp_path, spec)  # the independent reader sees it too
    assert not np.array_equal(table, lut_entries(spec, lut))


# --- options ----------------------------------------------------------------------------------

OPTIONS = [dict(reset=r, reset_polarity=p, prefix=x)
           for r, p, x in itertools.product(["sync", "async"], ["high", "low"], ["", "acme_"])]



@pytest.mark.skipif(shutil.which("verilator") is None or shutil.which("yosys") is None,
                    reason="verilator and yosys are required (make setup)")
def test_a_sliced_rom_of_one_stored_column_is_lint_clean_proved_and_read_back_at_every_latency(small, tmp_path):
    """Two entries at random addresses: one code bit, one stored column. The logic selects its bit
    (lut_col[0]): declared [0:0], not a scalar, which Verilator refuses to select ("Illegal bit or array
    select"), failing the build's lint stage."""
    from mi_certify.verification.tools.verilog_reader import read_lut
    spec0, _lut, _ = small
    c = spec0.conservative
    rng = np.random.default_rng(5)
    table = bytes(int(c | (0x80 if x else 0)) for x in rng.random(1 << spec0.address_bits) < 0.5)
    machine = LutFsmArtefact.from_table(spec0, table, property_masks(spec0))
    sr = sliced_rom(lut_entries(spec0, machine), spec0.address_bits)
    assert (sr.code_bits, len(sr.columns), sr.high_bits) == (1, 1, 0)
    for latency in (1, 2, 3, 4):
        spec = dataclasses.replace(spec0, hdl=dataclasses.replace(spec0.hdl, latency=latency))
        v = tmp_path / str(latency) / f"{spec.module_name}.v"
        v.parent.mkdir()
        v.write_text(emit_verilog(spec, machine, HASHES, "test", encoding="sliced_rom"))
        assert re.search(r"^    (reg|wire) +\[0:0\] +lut_col;", v.read_text(), re.M), latency
        lint = subprocess.run(["verilator", "--lint-only", "-Wall", v.name], cwd=v.parent, capture_output=True,
                              text=True)
        assert lint.returncode == 0 and not lint.stderr.strip(), (latency, lint.stderr[:400])
        obs, _ = rtl_obligations(v, spec.module_name, machine, entry_alphabet(machine), latency=latency)
        assert {o.id: o.verdict for o in obs if o.verdict != "proved"} == {}, latency
        got = read_lut(v, spec.address_bits)
        assert got.latency == latency and np.array_equal(got.entries, lut_entries(spec, machine))

@pytest.mark.skipif(shutil.which("verilator") is None or shutil.which("yosys") is None,
                    reason="verilator and yosys are required (make setup)")
@pytest.mark.parametrize("encoding", ["case", "rom", "boxtree", "sliced_rom"])
def test_every_option_combination_is_lint_clean(small, tmp_path, encoding):
    spec0, lut, boxes = small
    for k, (opt, latency) in enumerate([(o, 1) for o in OPTIONS] + [(OPTIONS[-1], 2), (OPTIONS[5], 3), (OPTIONS[2], 4)]):
        spec, v = _emit(spec0, lut, boxes, tmp_path / str(k), encoding, latency=latency, **opt)
        lint = subprocess.run(["verilator", "--lint-only", "-Wall", v.name], cwd=v.parent, capture_output=True,
                              text=True)
        assert lint.returncode == 0 and not lint.stderr.strip(), (opt, lint.stderr)
        ys = subprocess.run(["yosys", "-q", "-p", f"read_verilog {v.name}; hierarchy -check -top {spec.module_name}; "
                             "proc; check -assert; select -assert-none t:$dlatch t:$_DLATCH_*"], cwd=v.parent,
                            capture_output=True, text=True)
        assert ys.returncode == 0, (opt, ys.stderr[-400:])
        src = v.read_text()
        assert f"module {opt['prefix']}meta_controller (" in src
        port = "rst" if opt["reset_polarity"] == "high" else "rst_n"
        assert f"input  wire         {port}," in src
        edge = {"sync": "always @(posedge clk) begin",
                "async": f"always @(posedge clk or {'posedge rst' if port == 'rst' else 'negedge rst_n'}) begin"}
        assert edge[opt["reset"]] in src
        inits = [ln.strip() for ln in src.splitlines() if ln.strip().startswith("initial")]
        assert set(inits) <= {"initial begin   // ROM contents, not logic"} and bool(inits) == (encoding in ("rom", "sliced_rom"))
        assert src.count("`default_nettype none") == 1 and src.rstrip().endswith("endmodule\n`default_nettype wire")
        assert "HYST_LAST == " not in src and "'d0) begin" in src


def test_options_keep_every_proof(small, tmp_path):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "boxtree", reset="async", reset_polarity="low", prefix="acme_")
    assert {k: o.verdict for k, o in _proofs(spec, v, lut).items() if o.verdict != "proved"} == {}
    # a reset that no longer resets is caught on the new port
    v.write_text(v.read_text().replace("token       <= CONSERVATIVE;", "token       <= token;", 1))
    assert _proofs(spec, v, lut)["rtl.reset"].verdict == "violated"


TB = """
`timescale 1ns / 1ps
module tb;
    reg clk = 0, {rst} = {idle}, pf = 0, sv = 0;
    reg [9:0] addr = 0;
    wire [1:0] token, audit_token; wire [3:0] reason, audit_reason; wire audit_valid; wire [9:0] audit_addr;
    {top} dut (.clk(clk), .{rst}({rst}), .addr(addr), .probe_fault(pf), .sla_violation(sv), .token(token),
        .reason(reason), .audit_valid(audit_valid), .audit_token(audit_token), .audit_reason(audit_reason),
        .audit_addr(audit_addr));
    always #5 clk = ~clk;
    initial begin
        {rst} = {active}; #12 {rst} = {idle};           // reset (edge at 5), released between edges
        addr = 10'd5; pf = 1; #10 pf = 0;                // a probe fault at the edge at 15: PROBE_FAULT,
                                                         // then in fallback at 25: FALLBACK
        #1 $display("A %0d %0d %0d", reason, audit_valid, audit_addr);
        #4 {rst} = {active};                             // t = 27: reset asserted between edges
        #1 $display("B %0d %0d", reason, audit_valid);   // async: already reset; sync: still FALLBACK
        #10 $display("C %0d %0d", reason, audit_valid);  // after an edge: reset either way
        $finish;
    end
endmodule
"""


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="iverilog is required (make setup)")
@pytest.mark.parametrize("reset,polarity", [("sync", "high"), ("async", "high"), ("async", "low"), ("sync", "low")])
def test_reset_style_and_polarity_behave_as_documented_in_icarus(small, tmp_path, reset, polarity):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "case", reset=reset, reset_polarity=polarity)
    rst = spec.hdl.reset_port
    active, idle = ("1'b1", "1'b0") if polarity == "high" else ("1'b0", "1'b1")
    (tmp_path / "tb.v").write_text(TB.format(rst=rst, active=active, idle=idle, top=spec.module_name))
    subprocess.run(["iverilog", "-o", "sim", "tb.v", v.name], cwd=tmp_path, check=True)
    out = subprocess.run(["vvp", "-n", "sim"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    lines = dict(ln.split(" ", 1) for ln in out.splitlines() if ln[:1] in "ABC")
    assert lines["A"] == "7 1 5"  # PROBE_FAULT, audit port valid with the registered address
    assert lines["B"] == ("0 0" if reset == "async" else "5 1")
    assert lines["C"] == "0 0"


def test_spec_hdl_section_defaults_and_errors(tmp_path):
    from mi_certify.generator.core.spec import HdlTarget
    from mi_certify.runtime.quantize import FixedPoint
    raw = (FixedPoint(False, 1, 15), FixedPoint(False, 12, 4), FixedPoint(False, 8, 8), FixedPoint(False, 12, 0),
           FixedPoint(True, 9, 3))
    assert load_spec(REFERENCE_SLA).hdl == HdlOptions(encoding="sliced_rom", clock_mhz=50.0, latency=4,
                                                      target=HdlTarget("up5k", 50.0, False), input_formats=raw)
    text = "\n".join(ln for ln in REFERENCE_SLA.read_text().splitlines() if not ln.startswith("hdl:"))
    plain = tmp_path / "plain.yaml"
    plain.write_text(text)
    assert load_spec(plain).hdl == HdlOptions() and HdlOptions().encoding == "case"  # without the section: as before
    bad = tmp_path / "sla.yaml"
    bad.write_text(text + "\nhdl: {prefix: 'module-'}\n")
    with pytest.raises(SpecError) as e:
        load_spec(bad)
    assert "hdl.prefix" in str(e.value)
    bad.write_text(text.replace("name: meta_controller", "name: ctl") + "\nhdl: {prefix: 'reg_', encoding: rom}\n")
    assert load_spec(bad).module_name == "reg_ctl"
    bad.write_text(text + "\nhdl: {encoding: flash}\n")
    with pytest.raises(SpecError) as e:
        load_spec(bad)
    assert "hdl.encoding" in str(e.value)


# --- synthesis numbers ------------------------------------------------------------------------

@pytest.mark.skipif(bool(synth.tools_missing()), reason="yosys and nextpnr-ice40 are required (make setup)")
def test_place_and_route_gives_a_deterministic_fmax_on_the_registered_wrapper(small, tmp_path):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "case")
    a = synth.place_and_route(v, spec.module_name, spec.address_bits, spec.token_bits, 4, "rst", devices=("hx8k",))
    b = synth.place_and_route(v, spec.module_name, spec.address_bits, spec.token_bits, 4, "rst", devices=("hx8k",))
    strip = lambda r: {k: x for k, x in r["hx8k"].items() if k != "time_s"}  # noqa: E731
    assert strip(a) == strip(b)
    ice = synth.ice40_stats(v, spec.module_name)
    # the wrapper adds the input shift register (address + 4 bits: reset, probe_fault, sla_violation,
    # step) and the output flip-flop
    assert a["hx8k"]["dff"] == ice["dff"] + spec.address_bits + 4 + 1
    # not optimised away (nextpnr's count after the wrapper's registered inputs: 63 against Yosys' 196 here)
    assert a["hx8k"]["lut4"] > ice["lut4"] // 4 and 20 < a["hx8k"]["fmax_mhz"] < 1000


@pytest.mark.skipif(bool(synth.tools_missing()), reason="yosys and nextpnr-ice40 are required (make setup)")
def test_the_rom_maps_to_block_ram_behind_a_registered_address_and_auto_picks_the_smallest(small, tmp_path):
    from mi_certify.generator.pipeline.stages import auto_encoding
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "rom")
    assert synth.ice40_stats(v, spec.module_name)["bram"] == 0  # read combinationally: logic on its own
    w = tmp_path / "wrapper.v"
    w.write_text(synth.fmax_wrapper(spec.module_name, spec.address_bits, spec.token_bits, 4, "rst"))
    out = subprocess.run(["yosys", "-q", "-p", f"read_verilog {v.name} wrapper.v; synth_ice40 -top {synth.WRAPPER}; "
                          "tee -q -o /dev/stdout stat -json"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert synth._ice40_counts(synth._stat(out.stdout, synth.WRAPPER)["by_type"])["bram"] == 1  # 1024 x 3 bits
    enc, est = auto_encoding(spec, LutFsmArtefact.from_lut(spec, lut, property_masks(spec)), HASHES, boxes, "test")
    assert set(est) == {"case", "rom", "boxtree", "sliced_rom"} and est[enc] == min(est.values())


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="iverilog is required (make setup)")
def test_a_prefixed_active_low_rom_design_co_simulates_through_the_adapter(small, tmp_path):
    from mi_certify.verification.rtl import hdl_adapter
    from mi_certify.verification.cosim.cocotb_sim import run_cosim
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path / "rtl", "rom", reset="async", reset_polarity="low", prefix="acme_")
    machine = LutFsmArtefact.from_lut(spec, lut, property_masks(spec))
    sim_v, top = hdl_adapter.prepare(v, spec.module_name, spec.hdl.reset_port, machine, tmp_path / "work")
    assert top == hdl_adapter.ADAPTER and "acme_meta_controller dut (" in sim_v.read_text()
    res = run_cosim(sim_v, top, machine, tmp_path / "work", random_cycles=2000)
    assert res.passed and res.mismatches == 0 and res.cycles > 2000, res.to_json()


# --- fit pre-check, ROM limit, bounded LUT evaluation (issue 17) -----------------------------

def test_block_ram_need_and_the_fit_detail_follow_the_devices_capacity():
    assert synth.ice40_brams(65536, 12) == 192      # the 20-bit reference's sliced ROM: 2048 x 2 mode
    assert synth.ice40_brams(4096, 12) == 12 and synth.ice40_brams(1024, 3) == 1
    assert synth.fit_problem("hx8k", {"bram": 192, "lut4": 397}) == "does not fit: needs 192 SB_RAM40_4K, HX8K has 32"
    assert synth.fit_problem("up5k", {"bram": 192, "lut4": 397}) == "does not fit: needs 192 SB_RAM40_4K, UP5K has 30"
    assert synth.fit_problem("up5k", {"bram": 2, "lut4": 6000}) == "does not fit: needs 6,000 SB_LUT4, UP5K has 5,280"
    assert synth.fit_problem("hx8k", {"bram": 32, "lut4": 7680}) is None
    assert synth.fit_problem("hx8k", {"bram": None, "lut4": None}) is None


@pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys is required (make setup)")
def test_a_design_over_a_devices_capacity_is_recorded_without_running_nextpnr(small, tmp_path, monkeypatch):
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "rom")           # 1024 x 3 bits: one block RAM on the wrapper
    monkeypatch.setitem(synth.CAPACITY, "hx8k", {"lut4": 7680, "bram": 0})

    def no_nextpnr(*a, **k):
        raise AssertionError("nextpnr-ice40 was run for a design that cannot fit")
    monkeypatch.setattr(synth, "_nextpnr", no_nextpnr)
    rec = synth.place_and_route(v, spec.module_name, spec.address_bits, spec.token_bits, 4, "rst", devices=("hx8k",))
    hx = rec["hx8k"]
    assert hx["fits"] is False and hx["fmax_mhz"] is None and hx["meets_goal"] is False and hx["bram"] == 1
    assert hx["detail"] == "does not fit: needs 1 SB_RAM40_4K, HX8K has 0"
    assert {"lut4", "dff", "carry", "seed", "package", "goal_mhz"} <= set(hx)


def test_a_rom_above_the_yosys_limit_is_refused_before_any_tool_runs(small, tmp_path, monkeypatch):
    from mi_certify.verification.tools import yosys
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "rom")
    assert synth.rom_shapes(v) == [("lut_rom", 1024, 3)] and synth.rom_brams(v) == 1
    assert synth.rom_refusal(v) is None                          # 3 Kbit: under the default limit

    def no_tool(*a, **k):
        raise AssertionError("a tool was run on a refused design")
    monkeypatch.setattr(yosys, "cell_stats", no_tool)
    monkeypatch.setattr(synth, "_nextpnr", no_tool)
    monkeypatch.setenv(synth.MAX_ROM_ENV, "2")                   # 2 Kbit: the 3 Kbit ROM is over it
    why = synth.rom_refusal(v)
    assert why.startswith("not run: the ROM (lut_rom 1,024 x 3 bits = 3 Kbit) is above the limit of 2 Kbit")
    rec = synth.hdl_numbers(spec, v)
    assert rec["lut4"] is rec["dff"] is rec["bram"] is None and rec["generic"]["cells"] is None
    assert rec["not_measured"] == why and rec["generic"]["detail"] == why and rec["goal_met"] is False
    for dev in ("hx8k", "up5k"):
        p = rec["place_and_route"][dev]
        # one block RAM fits either device: not measured rather than "does not fit"
        assert p["fits"] is None and p["bram"] == 1 and p["synthesised"] is False and "not measured" in p["detail"]
    monkeypatch.setitem(synth.CAPACITY, "up5k", {"lut4": 5280, "bram": 0})
    p = synth.place_and_route(v, spec.module_name, spec.address_bits, spec.token_bits, 4, "rst")["up5k"]
    assert p["fits"] is False and p["detail"].startswith("does not fit: needs 1 SB_RAM40_4K, UP5K has 0 (")
    assert synth.estimate(v, spec.module_name, spec.address_bits, spec.token_bits, 4, "rst") == synth.BRAM_LUT4_COST
    monkeypatch.setenv(synth.MAX_ROM_ENV, "lots")
    with pytest.raises(ValueError, match=synth.MAX_ROM_ENV):
        synth.rom_refusal(v)


@pytest.mark.skipif(shutil.which("yosys") is None, reason="yosys is required (make setup)")
def test_the_lut_is_evaluated_in_chunks_with_the_same_result(small, tmp_path):
    import tracemalloc

    from mi_certify.verification.rtl.rtl_formal import lut_from_smt2, yosys_smt2
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "sliced_rom")
    design = yosys_smt2(v, spec.module_name, entry_bits=spec.token_bits + 1)
    want = (lut_entries(spec, lut)).astype(np.int64)
    whole = lut_from_smt2(design, spec.module_name, spec.address_bits)
    tracemalloc.start()
    parts = lut_from_smt2(design, spec.module_name, spec.address_bits, chunk=100)   # 11 chunks, the last short
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.array_equal(whole, parts) and np.array_equal(parts, want)
    assert peak < 2_000_000, peak   # the result (8 KB) and one chunk's live values, not 2^10 x definitions


# --- pipelined decision (hdl.latency) and the pyverilog reader --------------------------------

def test_the_decision_stream_delays_every_input_and_a_reset_empties_the_pipeline():
    from mi_certify.verification.cosim.cocotb_sim import decision_stream
    rows = [[1, 7, 0, 0], [0, 1, 0, 1], [0, 2, 1, 0], [0, 3, 0, 0], [1, 4, 0, 0], [0, 5, 0, 0], [0, 6, 0, 0],
            [0, 8, 0, 1]]
    assert decision_stream(rows, 1) == rows
    # latency 3: row i decides on row i-2; a reset in rows i-2 .. i makes row i a reset row
    assert decision_stream(rows, 3) == [[1, 7, 0, 0], [1, 1, 0, 0], [1, 2, 0, 0], [0, 1, 0, 1], [1, 4, 0, 0],
                                        [1, 5, 0, 0], [1, 6, 0, 0], [0, 5, 0, 0]]
    assert [r[0] for r in decision_stream(rows, 2)] == [1, 1, 0, 0, 1, 1, 0, 0]


@pytest.mark.parametrize("encoding", ["case", "rom", "boxtree", "sliced_rom"])
def test_every_latency_is_proved_with_the_delay_and_read_back(small, tmp_path, encoding):
    from mi_certify.verification.tools.verilog_reader import read_lut
    spec0, lut, boxes = small
    for latency in (2, 3, 4):
        spec, v = _emit(spec0, lut, boxes, tmp_path / str(latency), encoding, latency=latency, reset="async",
                        reset_polarity="low")
        obs = _proofs(spec, v, lut)
        assert {k: o.verdict for k, o in obs.items() if o.verdict != "proved"} == {}
        assert {"rtl.pipeline", "rtl.equivalence", "rtl.audit", "rtl.reset"} <= set(obs)
        assert obs["rtl.lut_table"].detail == f"1024 entries equal (read through {latency - 1} registers)"
        got = read_lut(v, spec.address_bits)
        assert got.latency == latency and np.array_equal(got.entries, lut_entries(spec, lut))
        assert f"// Latency: {latency} cycles (sla.yaml hdl.latency)" in v.read_text()
        # the property mask is registered (computed on the stage before the decision's address): the
        # obligations that assume it name rtl.pipeline, which proves it; a mask one stage late is caught
        assert obs["rtl.equivalence"].assumes == ["fsm.invariant", "rtl.pipeline"]
        assert obs["rtl.audit"].assumes == [] and obs["rtl.pipeline"].assumes == []
        if encoding == "case":
            src, before = v.read_text(), "addr" if latency == 2 else f"addr_q{latency - 2}"
            late = "\n".join(ln.replace(f"({before}[", f"(addr_q{latency - 1}[") if ln.startswith("    wire       in_")
                             else ln for ln in src.split("\n"))
            assert late != src
            v.write_text(late)
            assert _proofs(spec, v, lut)["rtl.pipeline"].verdict == "violated", latency


@pytest.mark.parametrize("encoding", ["rom", "sliced_rom"])
def test_the_rom_contents_are_inline_in_blocks_and_every_malformed_initial_value_is_refused(small, tmp_path, encoding):
    """The ROM's words are initial values of the .v (no file: any tool, any working directory); the
    independent reader requires exactly one constant of the memory's width per address."""
    from mi_certify.generator.build.verilog_parts import ROM_BLOCK
    from mi_certify.verification.tools.verilog_reader import VerilogReadError, read_lut
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, encoding)
    src = v.read_text()
    mem = "lut_rom" if encoding == "rom" else "lut_cols"
    words = re.findall(rf"^\s*{mem}\[(\d+)\] = (\d+)'h([0-9a-f]+);$", src, re.M)
    depth = int(re.search(rf"\b{mem}\s*\[0:(\d+)\]", src).group(1)) + 1
    assert [int(a) for a, _, _ in words] == list(range(depth)) and "$readmemh" not in src
    assert src.count("initial begin   // ROM contents, not logic") == -(-depth // ROM_BLOCK)
    width = int(words[0][1])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sim = subprocess.run(["iverilog", "-g2001", "-o", "a.vvp", str(v)], cwd=elsewhere, capture_output=True, text=True)
    assert sim.returncode == 0, sim.stderr                      # from another working directory, no file beside
    line = rf"^(\s*){mem}\[5\] = {width}'h[0-9a-f]+;\n"
    for mutant, why in [
        (re.sub(line, "", src, count=1, flags=re.M),
         rf"ROM {mem} has initial values for {depth - 1} addresses, not one for each of its {depth} words"),
        (re.sub(line, lambda m: m.group(0) + f"{m.group(1)}{mem}[5] = {width}'h0;\n", src, count=1, flags=re.M),
         rf"{mem}\[5\] is given a second initial value"),
        (re.sub(rf"^(\s*{mem}\[5\] = ){width}'h", rf"\g<1>{width - 1}'h", src, count=1, flags=re.M),
         rf"{mem}\[5\] = a {width - 1}-bit constant"),
        (src.replace("initial begin   // ROM contents, not logic", "initial begin\n        token = 2'd1;", 1),
         "the only initial blocks allowed give a ROM its contents"),
        (re.sub(rf"^(\s*{mem}\[5\] = {width}'h)[0-9a-f]+;", r"\g<1>x;", src, count=1, flags=re.M),
         rf"{re.escape(v.name)}: line \d+: an initial value of {mem}: not an integer constant: {width}'hx"),
    ]:
        assert mutant != src
        v.write_text(mutant)
        with pytest.raises(VerilogReadError, match=why):
            read_lut(v, spec.address_bits)


def test_a_pipeline_that_mixes_cycles_or_reports_the_wrong_address_is_caught(small, tmp_path):
    from mi_certify.verification.tools.verilog_reader import VerilogReadError, read_lut
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "case", latency=3)
    src = v.read_text()
    # the LUT read on the undelayed address: the decision uses the entry of another cycle's address
    v.write_text(src.replace("case (addr_q1)", "case (addr)", 1))
    assert _proofs(spec, v, lut)["rtl.lut_table"].verdict == "violated"
    with pytest.raises(VerilogReadError, match="reads the LUT entry of the address 1 cycles ago but reports"):
        read_lut(v, spec.address_bits)
    # the audit port reporting the stage-1 address instead of the decision's
    v.write_text(src.replace("audit_addr  <= addr_q2;", "audit_addr  <= addr_q1;", 1))
    assert _proofs(spec, v, lut)["rtl.audit"].verdict == "violated"
    # a stage that skips the pipeline
    v.write_text(src.replace("probe_fault_q2   <= probe_fault_q1;", "probe_fault_q2   <= probe_fault;", 1))
    assert _proofs(spec, v, lut)["rtl.pipeline"].verdict == "violated"


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="iverilog is required (make setup)")
@pytest.mark.parametrize("encoding,latency", [("sliced_rom", 3), ("case", 2)])
def test_a_pipelined_design_co_simulates_cycle_by_cycle_with_the_delay(small, tmp_path, encoding, latency):
    from mi_certify.verification.cosim.cocotb_sim import run_cosim
    from mi_certify.verification.rtl.hdl_adapter import prepare
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path / "rtl", encoding, latency=latency, reset_polarity="low")
    machine = LutFsmArtefact.from_lut(spec, lut, property_masks(spec))
    sim_v, top = prepare(v, spec.module_name, spec.hdl.reset_port, machine, tmp_path / "work")
    res = run_cosim(sim_v, top, machine, tmp_path / "work", random_cycles=1500, latency=latency)
    assert res.passed and res.mismatches == 0 and res.cycles > 1500, res.to_json()
    # compared without the delay, the same RTL mismatches
    res = run_cosim(sim_v, top, machine, tmp_path / "work1", random_cycles=300, latency=1)
    assert not res.passed and res.mismatches > 0


def test_the_split_slice_select_rebuilds_every_code_with_at_most_two_terms_per_register():
    rng = np.random.default_rng(7)
    for trial in range(20):
        n_values = int(rng.integers(2, 9))
        ab, lb = 10, int(rng.integers(5, 9))
        # runs of constant codes (so some slices are constant) mixed with random cells
        entries = rng.integers(0, n_values, 1 << ab).astype(np.int64)
        entries[: 1 << lb] = 0
        entries[-(1 << lb):] = n_values - 1
        sr = sliced_rom(entries, ab, low_bits=lb)
        sp = split_select(sr)
        codes = np.searchsorted(np.asarray(sr.dictionary), sr.table())
        addr = np.arange(1 << ab)
        slice_of = addr >> lb
        sel = np.array([[int(c) for c in reversed(w)] for _, w in sp["slice_sel"]])[slice_of]   # [addr, group]
        cols = [np.asarray(c)[addr & ((1 << lb) - 1)] for c in sr.columns]
        term = [sel[:, g] if kind == "c" else sel[:, g] & cols[x] for g, (_, kind, x, _) in enumerate(sp["groups"])]
        rebuilt = np.zeros(1 << ab, dtype=np.int64)
        for b in range(sr.code_bits):
            bit = np.zeros(1 << ab, dtype=np.int64)
            for g, (gb, _, _, _) in enumerate(sp["groups"]):
                if gb == b:
                    bit |= term[g]
            rebuilt |= bit << b
        assert np.array_equal(rebuilt, codes), trial
        assert all(1 <= len(terms) <= 2 for _, terms in sp["ors"])
        # one select per group and slice at most once per bit
        for s, word in sp["slice_sel"]:
            bits_of = [sp["groups"][g][0] for g, c in enumerate(reversed(word)) if c == "1"]
            assert len(bits_of) == len(set(bits_of))


@pytest.fixture(scope="module")
def wide():
    """The reference spec as shipped (14 address bits), LUT sampled at cell centres: its sliced
    ROM has 32 slices of 512 cells (the latency-3 split select has something to split)."""
    spec = load_spec(REFERENCE_SLA)
    lut, _ = apply_masks(spec, sample_lut(spec, import_onnx(REFERENCE_MODEL)), property_masks(spec))
    return spec, lut


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="iverilog is required (make setup)")
@pytest.mark.parametrize("latency", [3, 4])
def test_latency_3_and_4_cut_the_slice_multiplexer_and_stay_proved_read_back_and_co_simulated(wide, tmp_path,
                                                                                               latency):
    from mi_certify.verification.cosim.cocotb_sim import run_cosim
    from mi_certify.verification.rtl.hdl_adapter import prepare
    from mi_certify.verification.tools.verilog_reader import read_lut
    spec0, lut = wide
    spec, v = _emit(spec0, lut, None, tmp_path / "rtl", "sliced_rom", latency=latency)
    src = v.read_text()
    sr = sliced_rom(lut_entries(spec, lut), spec.address_bits)
    assert sr.high_bits == 5 and "lut_sel <= lut_sel_d;" in src and "lut_or  <= {" in src
    # latency 3: the decision stage decodes the partial ORs; 4: stage 3 registers the decoded entry
    assert ("lut_entry <= lut_read;" in src) == (latency == 4) and ("lut_entry <=" in src) == (latency == 4)
    obs = _proofs(spec, v, lut)
    assert {k: o.verdict for k, o in obs.items() if o.verdict != "proved"} == {}
    assert obs["rtl.lut_table"].detail == (f"{1 << spec.address_bits} entries equal "
                                           f"(read through {latency - 1} registers)")
    got = read_lut(v, spec.address_bits)
    assert got.latency == latency and np.array_equal(got.entries, lut_entries(spec, lut))
    machine = LutFsmArtefact.from_lut(spec, lut, property_masks(spec))
    sim_v, top = prepare(v, spec.module_name, spec.hdl.reset_port, machine, tmp_path / "work")
    res = run_cosim(sim_v, top, machine, tmp_path / "work", random_cycles=1000, latency=latency)
    assert res.passed and res.mismatches == 0, res.to_json()
    # the property mask is registered beside the pipeline: computed on the stage before the decision's
    # address, the decision reads the register; a mask one stage late or read unregistered is caught
    before = f"addr_q{latency - 2}"
    assert f"wire       in_0 = ({before}[2:0] >= 3'd6);" in src and "allowed <= allowed_d;" in src
    late = src.replace(f"wire       in_0 = ({before}[2:0] >= 3'd6);", f"wire       in_0 = (addr_q{latency - 1}[2:0] >= 3'd6);")
    unregistered = src.replace("if (!allowed[token]) begin", "if (!allowed_d[token]) begin")
    for mutant, caught in ((late, "rtl.pipeline"), (unregistered, "rtl.equivalence")):
        assert mutant != src
        v.write_text(mutant)
        assert _proofs(spec, v, lut)[caught].verdict == "violated", caught
    # one select bit of one slice flipped: both the Yosys table proof and the pyverilog reader see it
    line = next(ln for ln in src.splitlines() if "5'd20: lut_sel_d" in ln)
    word = line.split("'b")[1][:-1]
    flipped = line.replace(word, word[:-1] + ("0" if word[-1] == "1" else "1"))
    v.write_text(src.replace(line, flipped))
    assert _proofs(spec, v, lut)["rtl.lut_table"].verdict == "violated"
    assert not np.array_equal(read_lut(v, spec.address_bits).entries, lut_entries(spec, lut))


def test_every_generated_file_parses_with_pyverilog_and_matches_header_and_spec(small, tmp_path):
    from mi_certify.runtime.fsm import REASON_BITS, Reason
    from mi_certify.verification.tools.verilog_reader import check_all, check_controller, read_lut
    spec0, lut, boxes = small
    combos = [(enc, 1, opt) for enc in ("case", "rom", "boxtree", "sliced_rom") for opt in OPTIONS]
    combos += [(enc, lat, OPTIONS[-1]) for enc in ("case", "rom", "boxtree", "sliced_rom") for lat in (2, 3, 4)]
    for k, (enc, lat, opt) in enumerate(combos):
        spec, v = _emit(spec0, lut, boxes, tmp_path / str(k), enc, latency=lat, **opt)
        got = check_controller(v, spec, [r.name for r in Reason], REASON_BITS)
        assert got == {"module": spec.module_name, "ports": 12, "latency": lat, "localparams": 14}, (enc, lat, opt)
        assert np.array_equal(read_lut(v, spec.address_bits).entries, lut_entries(spec, lut)), (enc, lat, opt)
    # the hand-written SLA monitor shipped in every bundle parses too
    from conftest import ROOT
    assert check_all(ROOT / "hdl") == {"sla_monitor.v": ["sla_monitor", "sla_monitor_reg", "sla_monitor_window"]}


def test_a_header_or_port_that_disagrees_with_the_spec_and_a_parse_failure_are_named(small, tmp_path):
    from mi_certify.runtime.fsm import REASON_BITS, Reason
    from mi_certify.verification.tools.verilog_reader import VerilogReadError, check_controller, parse
    spec, lut, boxes = small
    spec, v = _emit(spec, lut, boxes, tmp_path, "sliced_rom", latency=2)
    names = [r.name for r in Reason]
    src = v.read_text()
    v.write_text(src.replace("output reg  [3:0]   reason,", "output reg  [4:0]   reason,", 1))
    with pytest.raises(VerilogReadError, match=r"ports differ from the spec's: reason \('output', 5\)"):
        check_controller(v, spec, names, REASON_BITS)
    v.write_text(src.replace("localparam [3:0] COOLDOWN     = 4'd10;", "localparam [3:0] COOLDOWN     = 4'd9;", 1))
    with pytest.raises(VerilogReadError, match=r"COOLDOWN = 9 \(spec 10\)"):
        check_controller(v, spec, names, REASON_BITS)
    v.write_text(src)
    three = dataclasses.replace(spec, hdl=dataclasses.replace(spec.hdl, latency=3))
    with pytest.raises(VerilogReadError, match="the data flow has latency 2, the spec's hdl.latency is 3"):
        check_controller(v, three, names, REASON_BITS)
    # what pyverilog 1.3 cannot read (a localparam in the #(...) header) is named with file, line and construct
    lines = src.splitlines()
    at = lines.index(f"module {spec.module_name} (")
    lines[at] = f"module {spec.module_name} #(localparam W = 2) ("
    v.write_text("\n".join(lines) + "\n")
    with pytest.raises(VerilogReadError) as e:
        parse(v)
    assert str(e.value) == (f'{v.name}: line {at + 1}: pyverilog 1.3.0 cannot parse the module header (syntax error '
                            f'before "localparam"): module {spec.module_name} #(localparam W = 2) (')


def test_spec_hdl_latency_defaults_to_one_and_accepts_auto(tmp_path):
    text = "\n".join(ln for ln in REFERENCE_SLA.read_text().splitlines() if not ln.startswith("hdl:"))
    sla = tmp_path / "sla.yaml"
    for value, want in (("2", 2), ("3", 3), ("4", 4), ("auto", "auto")):
        sla.write_text(text + f"\nhdl: {{latency: {value}}}\n")
        assert load_spec(sla).hdl.latency == want
    assert load_spec(sla).hdl.latency_cycles == 1 and HdlOptions().latency == 1   # auto, until the build measures
    assert load_spec(sla).hdl.with_latency(3).latency_cycles == 3 and HdlOptions().with_latency(3) == HdlOptions()
    sla.write_text(text + "\nhdl: {latency: 5}\n")
    with pytest.raises(SpecError) as e:
        load_spec(sla)
    assert "hdl.latency" in str(e.value)


def test_the_smt2_lut_evaluator_keeps_bit_vectors_wider_than_int64_exact():
    """A ROM word or concatenation wider than 63 bits (a LUT with many slice columns) is evaluated
    with exact integers: int64 lanes would wrap, and the reference LUT once crashed the build here."""
    from mi_certify.verification.rtl.rtl_formal import _eval_lut_chunk
    addrs = np.arange(16, dtype=np.int64)
    # addr shifted 66 bits up and back: wraps to 0 in int64
    shifted = [["_", "extract", "3", "0"], [["_", "extract", "69", "66"], ["concat", ["|addr|", "s"], "#b" + "0" * 66]]]
    assert _eval_lut_chunk(shifted, {}, {"|addr|"}, {}, addrs, 4).tolist() == list(range(16))
    # equality of two 68-bit values that differ only above bit 63
    eq = ["ite", ["=", ["concat", ["|addr|", "s"], "#b" + "1" * 64], ["concat", "#b0011", "#b" + "1" * 64]], "#b1", "#b0"]
    assert _eval_lut_chunk(eq, {}, {"|addr|"}, {}, addrs, 4).tolist() == [int(a == 3) for a in range(16)]
    # 70-bit bitwise and / not / unsigned comparison
    big = "#b1" + "0" * 69
    cmp = ["ite", ["bvuge", ["bvor", ["concat", ["|addr|", "s"], "#b" + "0" * 66], big], big], "#b1", "#b0"]
    assert _eval_lut_chunk(cmp, {}, {"|addr|"}, {}, addrs, 4).tolist() == [1] * 16
    # ite choosing between two wide constants, then a narrow slice of the choice
    pick = [["_", "extract", "66", "65"], ["ite", ["bvult", ["|addr|", "s"], "#b1000"], "#b10" + "0" * 65,
                                          "#b01" + "0" * 65]]
    assert _eval_lut_chunk(pick, {}, {"|addr|"}, {}, addrs, 4).tolist() == [2] * 8 + [1] * 8
