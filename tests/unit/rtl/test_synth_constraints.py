"""nextpnr reads the constraint files the build emits (issue 35; docs/hdl.md, "Constraint files"): for
each measured family the family's own file (PCF / LPF) and the SDC set the clock that nextpnr's
timing report states; and the hdl stage's runs use the family file (:func:`synth.place_and_route`)."""

from __future__ import annotations

import json

import pytest

from mi_certify.generator.build.emit_constraints import render_constraint
from mi_certify.verification.rtl import synth
from mi_certify.verification.tools import yosys
from mi_certify.verification.tools.registry import require_tool, run

needs_tools = pytest.mark.skipif(bool(synth.tools_missing()), reason="the YoWASP synthesis tools are required "
                                                                      "(make setup)")

COUNTER = """module top (input wire clk, input wire din, output reg dout);
    reg [7:0] c;
    always @(posedge clk) begin
        c <= c + {7'd0, din};
        dout <= ^c;
    end
endmodule
"""


@needs_tools
@pytest.mark.parametrize("device", list(synth.DEVICES))
def test_nextpnr_reads_the_family_file_and_the_sdc_at_their_clock(tmp_path, device):
    d = synth.DEVICES[device]
    fam = synth.FAMILIES[d.family]
    (tmp_path / "top.v").write_text(COUNTER)
    yosys.cell_stats(["top.v"], "top", tmp_path, 300, target=d.family, json_out="top.json", tool=synth.SYNTH_YOSYS,
                     stat_file="stat.json")
    exe = require_tool(fam.nextpnr)
    got = {}
    for fmt, flag, mhz in ((fam.constraint, fam.constraint_flag, 77.0), ("sdc", "--sdc", 40.0)):
        (tmp_path / f"clock.{fmt}").write_text(render_constraint(fmt, mhz, "clk"))
        proc = run([exe, *d.args, "--json", "top.json", "--seed", "1", flag, f"clock.{fmt}", fam.unconstrained,
                    "--timing-allow-fail", "--report", f"report_{fmt}.json"], cwd=tmp_path, capture=True, text=True,
                   timeout=300)
        assert proc.returncode == 0, proc.stderr[-600:]
        clocks = json.loads((tmp_path / f"report_{fmt}.json").read_text())["fmax"]
        assert len(clocks) == 1, clocks
        got[fmt] = next(iter(clocks.values()))["constraint"]
    # the files' clocks (without a file nextpnr-ice40 states its default, 12 MHz)
    assert got[fam.constraint] == pytest.approx(77.0, abs=0.01) and got["sdc"] == pytest.approx(40.0, abs=0.01)
    assert fam.constraint == ("pcf" if d.family == "ice40" else "lpf")
