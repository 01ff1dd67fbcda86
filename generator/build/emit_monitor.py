"""Emitter of the SLA-monitor wrapper ``<module>_sla_monitor.v`` and the hand-written core.

The wrapper binds ``hdl/sla_monitor.v`` to the spec: latency limits in clock cycles at
``hdl.clock_mhz`` (100 MHz when the spec sets none; the header says so), accuracy limits
in 1/1000 percentage points, window and statistics. Output is a pure function of the spec.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from mi_certify.runtime.sla import ACC_SCALE, CycleMonitorConfig, SlaLimits, monitor_parameters, parameter_text
from mi_certify.templates import environment

from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.spec import DEFAULT_MONITOR_CLOCK_MHZ as DEFAULT_CLOCK_MHZ
from mi_certify.generator.core.spec import Spec


def monitor_config(spec: Spec) -> tuple[CycleMonitorConfig, float, bool]:
    """(cycle configuration, clock in MHz, clock is the default) of the spec's SLA monitor.
    Raises SpecError when a limit does not fit a 32-bit counter."""
    clock = spec.hdl.clock_mhz
    try:
        cfg = CycleMonitorConfig.from_limits([SlaLimits(a.latency_ms, a.accuracy_loss_pct) for a in spec.actions],
                                             spec.monitor, float(clock or DEFAULT_CLOCK_MHZ), spec.token_bits)
    except ValueError as exc:
        raise SpecError(f"SLA monitor in hardware: {exc}", file=spec.path, where="actions") from None
    return cfg, float(clock or DEFAULT_CLOCK_MHZ), clock is None


def module_name(spec: Spec) -> str:
    return f"{spec.module_name}_sla_monitor"


def emit_sla_monitor(spec: Spec, spec_hash: str, version: str) -> str:
    """Source text of ``<module>_sla_monitor.v``."""
    cfg, clock, default = monitor_config(spec)
    p = monitor_parameters(cfg, len(spec.actions))
    low = spec.hdl.reset_polarity == "low"
    asyn = spec.hdl.reset == "async"
    p.update(RST_ASYNC=int(asyn), RST_ACTIVE_LOW=int(low))
    rows = [{"name": a.name, "lat_ms": "-" if a.latency_ms is None else repr(float(a.latency_ms)),
             "lat_cyc": "not judged" if lat is None else str(lat),
             "acc_pct": "-" if a.accuracy_loss_pct is None else repr(float(a.accuracy_loss_pct)),
             "acc_fx": "not judged" if acc is None else str(acc)}
            for a, lat, acc in zip(spec.actions, cfg.lat_limits, cfg.acc_limits)]
    return environment().get_template("verilog/sla_monitor_top.v.j2").render(
        module=module_name(spec), spec=spec, version=version, spec_hash=spec_hash, clock_mhz=clock,
        clock_default=default, cyc_w=cfg.cyc_width, acc_w=cfg.acc_width, acc_scale=ACC_SCALE, rows=rows,
        p=p, params=parameter_text(p), rst_name="rst_n" if low else "rst",
        reset_text=f"{'asynchronous' if asyn else 'synchronous'}, active {'low' if low else 'high'}")


def copy_monitor_core(out_dir: Path) -> Path:
    """Copy hdl/sla_monitor.v into ``out_dir``; returns the copy."""
    dst = out_dir / "sla_monitor.v"
    with resources.as_file(resources.files("mi_certify.hdl") / "sla_monitor.v") as src:
        shutil.copyfile(src, dst)
    return dst
