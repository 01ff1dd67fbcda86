"""mi_certify.runtime: the reference LUT-FSM, exact quantization, and the run-time parts
that sit around a generated controller: probes, SLA monitor, audit log, control loop and
replay (docs/runtime.md). The onnxruntime live loop is in ``mi_certify.runtime.engine``
(imported on demand: it needs numpy and onnxruntime)."""

from .audit import AuditError, AuditLog, AuditReport, Finding, load_key, verify_log
from .fsm import FsmConfig, FsmState, LutFsm, Reason, StepResult, reset_state, transition
from .live import BuildLoadError, ControlLoop, LoadedBuild, ReplayReport, load_build, replay
from .probes import FeatureMap, HardwareProbe, LinuxProbe, ProbeSample, Reading, TraceProbe
from .quantize import Quantizer, address, quantize, split_address
from .sla import MonitorConfig, SlaLimits, SlaMonitor, SlaVerdict

__all__ = ["AuditError", "AuditLog", "AuditReport", "BuildLoadError", "ControlLoop", "FeatureMap", "Finding",
           "FsmConfig", "FsmState", "HardwareProbe", "LinuxProbe", "LoadedBuild", "LutFsm", "MonitorConfig",
           "ProbeSample", "Quantizer", "Reading", "Reason", "ReplayReport", "SlaLimits", "SlaMonitor", "SlaVerdict",
           "StepResult", "TraceProbe", "address", "load_build", "load_key", "quantize", "replay", "reset_state",
           "split_address", "transition", "verify_log"]
