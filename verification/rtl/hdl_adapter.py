"""Present any generated RTL to the co-simulation test bench with the default interface.

The cocotb test bench (:mod:`mi_certify.verification.cosim.cocotb_tb`) drives ``rst`` (active
high) of module ``toplevel``. With the sla.yaml ``hdl`` options the module may be called
``<prefix><name>`` and its reset may be ``rst_n`` (active low); :func:`prepare` then
writes an adapter module ``mi_certify_cosim_top`` (the generated module plus a thin
wrapper that inverts the reset and passes every other port straight through).
"""

from __future__ import annotations

from pathlib import Path

from mi_certify.generator.core.lut import LutFsmArtefact
from mi_certify.runtime.fsm import REASON_BITS

ADAPTER = "mi_certify_cosim_top"


def prepare(verilog: Path, module: str, reset_port: str, machine: LutFsmArtefact,
            workdir: Path, operator: bool = False) -> tuple[Path, str]:
    """(Verilog file, top module) to co-simulate; ``workdir`` is run_cosim's scratch directory;
    ``machine`` gives the port widths (address and token bits).

    ``operator``: the design has the command port (sla.yaml ``operator:``), passed through too.
    """
    operator = operator or machine.operator is not None   # the machine's own command port, by default
    workdir.mkdir(parents=True, exist_ok=True)
    if reset_port == "rst":
        return verilog, module
    rst = "!rst" if reset_port == "rst_n" else "rst"
    tw, rb, ab = machine.token_bits, REASON_BITS, machine.address_bits
    op_ports = f" input wire [1:0] op_cmd, input wire [{tw - 1}:0] op_arg," if operator else ""
    op_conn = " .op_cmd(op_cmd), .op_arg(op_arg)," if operator else ""
    adapter = f"""
// co-simulation adapter (mi-certify): active-high rst for the test bench
module {ADAPTER} (
    input  wire clk, input wire rst, input wire [{ab - 1}:0] addr, input wire probe_fault, input wire sla_violation,
    input  wire step,{op_ports}
    output wire [{tw - 1}:0] token, output wire [{rb - 1}:0] reason, output wire audit_valid,
    output wire [{tw - 1}:0] audit_token, output wire [{rb - 1}:0] audit_reason, output wire [{ab - 1}:0] audit_addr
);
    {module} dut (.clk(clk), .{reset_port}({rst}), .addr(addr), .probe_fault(probe_fault),
        .sla_violation(sla_violation), .step(step),{op_conn} .token(token), .reason(reason), .audit_valid(audit_valid),
        .audit_token(audit_token), .audit_reason(audit_reason), .audit_addr(audit_addr));
endmodule
"""
    out = workdir / f"{ADAPTER}.v"
    out.write_text(verilog.read_text(encoding="utf-8") + adapter, encoding="utf-8")
    return out, ADAPTER
