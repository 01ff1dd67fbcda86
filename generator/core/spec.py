"""sla.yaml → Spec: schema validation (jsonschema, Draft 2020-12) plus semantic checks.

Every error is a ``SpecError`` naming the file, the field path (``inputs[2].bits``)
and the reason. docs/sla-yaml.md documents each field; ``SCHEMA`` is the single
source of truth for the structure.
"""

from __future__ import annotations

import keyword
import math
import re
import sys
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from mi_certify.runtime.fsm import FsmConfig, OperatorConfig
from mi_certify.runtime.quantize import MAX_WORD_BITS, FixedPoint, Quantizer
from mi_certify.runtime.sla import STATISTIC_PATTERN, MonitorConfig, latency_counter_width, latency_limit_cycles

from mi_certify.generator.core.errors import SpecError, first_line

SCHEMA_ID = "mi-certify/v1"
MAX_ADDRESS_BITS = 24
_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
MAX_NAME_LENGTH = 64
_PREFIX = r"^([A-Za-z_][A-Za-z0-9_]{0,31})?$"
MAX_PREFIX_LENGTH = 32
_IDENT = "letters, digits, underscore; not starting with a digit"
_TEXT = {"type": "string", "maxLength": 200, "pattern": r'^[^\x00-\x1f\x7f"\\`]*$'}
_STATISTIC = STATISTIC_PATTERN
_RANGE = {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2,
          "description": "closed interval [lo, hi] in the input's physical unit"}
#: a raw word's fixed-point format (runtime.quantize.FixedPoint): int_bits + frac_bits bits, value =
#: word / 2^frac_bits, two's complement with the sign bit counted in int_bits when signed
_FIXED_POINT = {"type": "object", "additionalProperties": False, "required": ["signed", "int_bits", "frac_bits"],
                "properties": {
                    "signed": {"type": "boolean", "description": "two's complement (the sign bit is one of int_bits)"},
                    "int_bits": {"type": "integer", "minimum": 0, "maximum": MAX_WORD_BITS,
                                 "description": "integer bits (with the sign bit when signed)"},
                    "frac_bits": {"type": "integer", "minimum": 0, "maximum": MAX_WORD_BITS,
                                  "description": "fraction bits: value = word / 2^frac_bits"}}}
#: ``hdl.target.device`` values: name -> what it stands for (part, package). The synthesis layer
#: (:data:`mi_certify.verification.rtl.synth.DEVICES`) measures exactly these.
TARGET_DEVICES = {"hx8k": "iCE40 HX8K (CT256)", "up5k": "iCE40 UP5K (SG48)",
                  "ecp5-25f": "ECP5 LFE5U-25F (CABGA256)", "xo3-6900": "MachXO3LF LCMXO3LF-6900C-5 (CABGA256)"}

SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "mi-certify sla.yaml",
    "type": "object",
    "additionalProperties": False,
    "required": ["schema", "controller", "inputs", "actions", "fsm"],
    "properties": {
        "schema": {"const": SCHEMA_ID, "description": "format version; must be mi-certify/v1"},
        "controller": {
            "type": "object", "additionalProperties": False, "required": ["name", "decode"],
            "description": "how the network's outputs become an action",
            "properties": {
                "name": {"type": "string", "pattern": _NAME, "maxLength": MAX_NAME_LENGTH,
                         "description": "identifier used for generated file and module names"},
                "decode": {"enum": ["argmax", "argmin"],
                           "description": "the action is the index of the largest (argmax) or smallest (argmin) "
                                          "output; ties go to the lowest index, as numpy/onnxruntime"},
                "description": _TEXT,
            },
        },
        "confidence": {
            "type": "object", "additionalProperties": False, "required": ["kind", "threshold"],
            "description": "optional confidence gating: a LUT cell is confident when the decoded action's "
                           "softmax probability is >= threshold (softmax of -outputs for argmin)",
            "properties": {
                "kind": {"enum": ["softmax"], "description": "softmax over the raw outputs"},
                "threshold": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
                              "description": "probability in (0, 1]"},
            },
        },
        "inputs": {
            "type": "array", "minItems": 1,
            "description": "one entry per network input, in ONNX input order (flattened, concatenated)",
            "items": {
                "type": "object", "additionalProperties": False, "required": ["name", "min", "max", "bits"],
                "properties": {
                    "name": {"type": "string", "pattern": _NAME, "maxLength": MAX_NAME_LENGTH},
                    "unit": {**_TEXT, "maxLength": 32, "description": "physical unit, for reports and HDL headers"},
                    "min": {"type": "number", "description": "lower end of the operating envelope"},
                    "max": {"type": "number", "description": "upper end of the operating envelope"},
                    "bits": {"type": "integer", "minimum": 1, "maximum": 8,
                             "description": "quantization levels = 2^bits"},
                    "description": _TEXT,
                },
            },
        },
        "actions": {
            "type": "array", "minItems": 2, "maxItems": 128,
            "description": "one entry per network output; token = index = output index",
            "items": {
                "type": "object", "additionalProperties": False, "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": _NAME, "maxLength": MAX_NAME_LENGTH},
                    "conservative": {"type": "boolean",
                                     "description": "exactly one action is the conservative fallback"},
                    "sla": {
                        "type": "object", "additionalProperties": False,
                        "properties": {
                            "latency_ms": {"type": "number", "exclusiveMinimum": 0,
                                           "description": "latency limit per request, milliseconds"},
                            "accuracy_loss_pct": {"type": "number", "minimum": 0, "maximum": 100,
                                                  "description": "accuracy-loss limit, percent"},
                        },
                    },
                    "description": _TEXT,
                },
            },
        },
        "fsm": {
            "type": "object", "additionalProperties": False,
            "required": ["hysteresis", "cooldown", "violations_to_fallback", "recovery"],
            "description": "LUT-FSM parameters (docs/fsm.md)",
            "properties": {
                "hysteresis": {"type": "integer", "minimum": 1, "maximum": 65535,
                               "description": "consecutive confident proposals needed to switch"},
                "cooldown": {"type": "integer", "minimum": 0, "maximum": 65535,
                             "description": "steps after a switch or recovery during which the action is held"},
                "violations_to_fallback": {"type": "integer", "minimum": 1, "maximum": 65535,
                                           "description": "consecutive SLA violations that force the fallback"},
                "recovery": {"type": "integer", "minimum": 1, "maximum": 65535,
                             "description": "consecutive compliant steps needed to leave the fallback"},
            },
        },
        "distill": {
            "type": "object", "additionalProperties": False,
            "description": "certified distillation of the network into the LUT",
            "properties": {
                "resolve": {"enum": ["conservative", "centre", "refuse"],
                            "description": "a cell where the network decodes more than one action (or that cannot "
                                           "be decided) gets the conservative action, confident (default); the "
                                           "action at its centre, not confident; or fails the build (refuse)"},
                "min_agreement": {"type": "number", "minimum": 0, "maximum": 1,
                                  "description": "the share of test points (distillation.json's fidelity) on which "
                                                 "the LUT must decode like the network, else the build fails (default: "
                                                 "no bound; a build below 90 % agreement passes with a warning)"},
            },
        },
        "monitor": {
            "type": "object", "additionalProperties": False,
            "description": "runtime SLA monitor (docs/runtime.md): the sla_violation input of the FSM after each "
                           "request is 'window statistic > the active action's limit' for latency or accuracy loss; "
                           "the window holds the last requests of one action (a new action empties it)",
            "properties": {
                "window": {"type": "integer", "minimum": 1, "maximum": 4096,
                           "description": "requests in the sliding window (default 1: each request judged alone)"},
                "latency_statistic": {"type": "string", "pattern": _STATISTIC,
                                      "description": "max, mean or pNN (nearest-rank percentile, 1 <= NN <= 99) of "
                                                     "the window's latencies (default max)"},
                "accuracy_statistic": {"type": "string", "pattern": _STATISTIC,
                                       "description": "max, mean or pNN of the window's accuracy losses "
                                                      "(default max)"},
            },
        },
        "hdl": {
            "type": "object", "additionalProperties": False,
            "description": "options of the generated Verilog (docs/hdl.md); without this section: synchronous "
                           "active-high reset `rst`, no prefix, case-statement LUT",
            "properties": {
                "reset": {"enum": ["sync", "async"],
                          "description": "synchronous reset (sampled at the rising clock edge; default) or "
                                         "asynchronous reset (acts at once, released synchronously by the "
                                         "integrator)"},
                "reset_polarity": {"enum": ["high", "low"],
                                   "description": "reset active high (port `rst`; default) or active low "
                                                  "(port `rst_n`)"},
                "prefix": {"type": "string", "pattern": _PREFIX, "maxLength": MAX_PREFIX_LENGTH,
                           "description": "prepended to the Verilog module name (default none: the module "
                                          "is controller.name)"},
                "encoding": {"enum": ["case", "rom", "boxtree", "sliced_rom", "auto"],
                             "description": "LUT encoding: case statement (default), flat ROM with its "
                                            "contents inline (block RAM behind a registered address), compressed "
                                            "box tree of comparators on the quantized inputs, sliced ROM (entries "
                                            "dictionary-coded, constant and duplicate slice columns removed, the rest "
                                            "a ROM inline), or auto: the smallest by Yosys estimate (docs/hdl.md)"},
                "latency": {"enum": [1, 2, 3, 4, "auto"],
                            "description": "decision latency in clock cycles: 1 (default), 2, 3 or 4 register the "
                                           "LUT read and delay every input together (outputs at cycle t = the "
                                           "one-cycle machine's for the inputs of cycle t - (latency - 1)), or "
                                           "auto: the smallest that meets the declared clock (docs/hdl.md)"},
                "clock_mhz": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000,
                              "description": "target clock of the RTL in MHz: per-action latency limits (ms) "
                                             "become cycle limits at this clock, and the synthesis report "
                                             "compares Fmax with it (default none)"},
                "input_format": {**_FIXED_POINT,
                                 "description": "the raw word format of every input not named in hdl.inputs: the "
                                                "build then also writes <module>_raw.v, whose quantizer takes "
                                                "these words (docs/hdl.md, \"Raw inputs\")"},
                "inputs": {"type": "object", "additionalProperties": _FIXED_POINT,
                           "description": "input name -> its raw word format (fixed point, as an ADC or a "
                                          "driver delivers it); naming any input (or hdl.input_format) makes "
                                          "the build write <module>_raw.v (docs/hdl.md, \"Raw inputs\")"},
                "target": {
                    "type": "object", "additionalProperties": False, "required": ["device"],
                    "description": "the device and clock the integrator runs the controller at: a build whose "
                                   "measured Fmax there is below the clock fails, unless advisory (docs/hdl.md, "
                                   "\"Declared target\"); without it, hdl.clock_mhz must be met on every "
                                   "device the build measures",
                    "properties": {
                        "device": {"enum": list(TARGET_DEVICES),
                                   "description": "hx8k (iCE40 HX8K, CT256), up5k (iCE40 UP5K, SG48), ecp5-25f "
                                                  "(ECP5 LFE5U-25F, CABGA256) or xo3-6900 (MachXO3LF "
                                                  "LCMXO3LF-6900C-5, CABGA256)"},
                        "clock_mhz": {"type": "number", "exclusiveMinimum": 0, "maximum": 10000,
                                      "description": "the clock in MHz (default hdl.clock_mhz; when both are set "
                                                     "they must be equal: one clock runs the controller and the "
                                                     "SLA monitor)"},
                        "advisory": {"type": "boolean",
                                     "description": "true: a missed clock is reported (summary, report, Verilog "
                                                    "header) but does not fail the build (default false)"},
                    },
                },
            },
        },
        "properties": {
            "type": "array",
            "description": "safety properties over regions of the envelope",
            "items": {
                "type": "object", "additionalProperties": False, "required": ["id", "when"],
                "properties": {
                    "id": {"type": "string", "pattern": _NAME, "maxLength": MAX_NAME_LENGTH,
                           "description": f"names the property in reports, proof obligations (fsm.property.<id>) "
                                          f"and counterexamples: {_IDENT}; unique"},
                    "description": _TEXT,
                    "when": {"type": "object", "additionalProperties": _RANGE,
                             "description": "input name -> [lo, hi]; inputs not named span their envelope"},
                    "forbid": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                               "description": "actions that must never be chosen in the region"},
                    "require": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                "description": "the chosen action must be one of these in the region"},
                    "output": {"type": "object",
                               "additionalProperties": {
                                   "type": "object", "additionalProperties": False, "minProperties": 1,
                                   "properties": {"min": {"type": "number"}, "max": {"type": "number"}}},
                               "description": "action name -> bounds on that raw output in the region"},
                },
            },
        },
        "operator": {
            "type": "object", "additionalProperties": False, "required": ["max_lock_steps", "keys"],
            "description": "operator interventions (docs/fsm.md, \"Operator interventions\"): a per-step command "
                           "input (none, lock an action, force the conservative action, release) on every "
                           "generated runtime and RTL; without this section the controller has no operator input",
            "properties": {
                "lock": {"type": "array", "items": {"type": "string"},
                         "description": "actions an operator may lock (default none)"},
                "force_conservative": {"type": "boolean",
                                       "description": "an operator may force the conservative action (default false)"},
                "yield_to_fallback": {"type": "boolean",
                                      "description": "a lock or force yields to the SLA fallback (rules 2 and 3; "
                                                     "default true)"},
                "yield_to_probe_fault": {"type": "boolean",
                                         "description": "a lock or force yields to a probe fault (rule 1; "
                                                        "default true)"},
                "max_lock_steps": {"type": "integer", "minimum": 1, "maximum": 65535,
                                   "description": "a lock or force is in force for at most this many controller "
                                                  "steps after its command (a forgotten lock expires)"},
                "keys": {"type": "array", "minItems": 1, "maxItems": 64,
                         "items": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]{1,64}$"},
                         "description": "ids of the keys allowed to issue commands (letters, digits, _ . -; "
                                        "unique)"},
            },
        },
        "cosim": {
            "type": "object", "additionalProperties": False,
            "description": "co-simulation of the RTL against the Python reference (docs/hdl-cosim.md); "
                           "the build fails below a coverage threshold",
            "properties": {
                "cycles": {"type": "integer", "minimum": 10000, "maximum": 10000000,
                           "description": "random FSM cycles after the directed sequences (default 10000; "
                                          "--cosim-cycles overrides)"},
                "monitor_requests": {"type": "integer", "minimum": 100, "maximum": 1000000,
                                     "description": "random requests per SLA-monitor co-simulation (default 1000)"},
                "coverage": {
                    "type": "object", "additionalProperties": False,
                    "description": "minimum shares (0 ... 1); a threshold left out is reported, not enforced; "
                                   "line/toggle/branch need Verilator (code coverage of the FSM)",
                    "properties": {
                        "lut_cells": {"type": "number", "minimum": 0, "maximum": 1, "description": "share of LUT cells addressed by non-reset cycles"},
                        "reasons": {"type": "number", "minimum": 0, "maximum": 1, "description": "share of the reason codes this LUT and FSM can produce"},
                        "transitions": {"type": "number", "minimum": 0, "maximum": 1, "description": "share of possible active-action transitions taken"},
                        "line": {"type": "number", "minimum": 0, "maximum": 1, "description": "Verilator line coverage of the FSM RTL"},
                        "toggle": {"type": "number", "minimum": 0, "maximum": 1, "description": "Verilator toggle coverage of the FSM RTL"},
                        "branch": {"type": "number", "minimum": 0, "maximum": 1, "description": "Verilator branch coverage of the FSM RTL"},
                    },
                },
            },
        },
    },
}


@dataclass(frozen=True)
class CosimSettings:
    """The sla.yaml ``cosim:`` section: random FSM cycles, random monitor requests, coverage
    thresholds (name -> minimum share; names: lut_cells, reasons, transitions, line, toggle, branch)."""

    cycles: int = 10_000
    monitor_requests: int = 1000
    coverage: tuple[tuple[str, float], ...] = ()

    @property
    def code_coverage(self) -> bool:
        """True when a Verilator code-coverage threshold is set (the replay is then run)."""
        return any(k in ("line", "toggle", "branch") for k, _ in self.coverage)


@dataclass(frozen=True)
class InputSpec:
    """One network input: envelope [min, max] in ``unit``, quantized to ``bits`` bits."""

    name: str
    min: float
    max: float
    bits: int
    unit: str = ""
    description: str = ""


@dataclass(frozen=True)
class ActionSpec:
    """One action (token = index). SLA limits: latency in ms, accuracy loss in %."""

    name: str
    conservative: bool = False
    latency_ms: float | None = None
    accuracy_loss_pct: float | None = None
    description: str = ""


@dataclass(frozen=True)
class FsmParams:
    """Hysteresis H >= 1, cooldown D >= 0, violations to fall back W >= 1, recovery R >= 1."""

    hysteresis: int
    cooldown: int
    violations_to_fallback: int
    recovery: int


@dataclass(frozen=True)
class HdlOptions:
    """The sla.yaml ``hdl:`` section (docs/hdl.md). Defaults give the RTL of specs without it.

    reset: "sync" | "async"; reset_polarity: "high" (port ``rst``) | "low" (port ``rst_n``);
    prefix: prepended to the module name; encoding: "case" | "rom" | "boxtree" | "sliced_rom" | "auto";
    clock_mhz: target clock in MHz or None; latency: decision latency in clock cycles, 1 | 2 | 3 | 4, or
    "auto" (chosen by measurement before emit; docs/hdl.md, "Latency").
    """

    reset: str = "sync"
    reset_polarity: str = "high"
    prefix: str = ""
    encoding: str = "case"
    clock_mhz: float | None = None
    latency: int | str = 1
    #: ``hdl.target`` as written (None without it); :attr:`declared_target` is what the build checks
    target: "HdlTarget | None" = None
    #: with ``latency: "auto"``: the latency the build chose by measurement (the emit stage's
    #: ``latency``, read back by ``check``); None until it is chosen
    latency_resolved: int | None = None
    #: raw word format per input, in input order (``hdl.inputs`` / ``hdl.input_format``); empty: no
    #: raw-input design (docs/hdl.md, "Raw inputs")
    input_formats: tuple[FixedPoint, ...] = ()

    @property
    def latency_cycles(self) -> int:
        """The decision latency the RTL is emitted, proved and simulated with: ``latency``, or for
        "auto" the measured choice (:attr:`latency_resolved`), 1 while it is not chosen."""
        if self.latency == "auto":
            return 1 if self.latency_resolved is None else int(self.latency_resolved)
        return int(self.latency)

    def with_latency(self, latency: int) -> "HdlOptions":
        """These options with ``latency: auto`` resolved to ``latency`` (unchanged otherwise)."""
        return dataclasses.replace(self, latency_resolved=int(latency)) if self.latency == "auto" else self

    @property
    def reset_port(self) -> str:
        """Name of the reset port: ``rst`` (active high) or ``rst_n`` (active low)."""
        return "rst" if self.reset_polarity == "high" else "rst_n"

    @property
    def reset_active(self) -> str:
        """The Verilog condition "reset is asserted": ``rst`` or ``!rst_n``."""
        return "rst" if self.reset_polarity == "high" else "!rst_n"

    @property
    def declared_target(self) -> "HdlTarget | None":
        """The clock the build must meet: ``hdl.target`` (its clock is ``clock_mhz``); without it, a
        ``hdl.clock_mhz`` alone on every measured device (device None, not advisory); None without
        either (nothing declared: Fmax is reported against the goals only)."""
        if self.target is not None:
            return self.target
        return None if self.clock_mhz is None else HdlTarget(None, self.clock_mhz, False)


@dataclass(frozen=True)
class HdlTarget:
    """A declared timing target (sla.yaml ``hdl.target``, or ``hdl.clock_mhz`` alone).

    device: a key of :data:`TARGET_DEVICES`, or None (``hdl.clock_mhz`` without ``hdl.target``: every
    device the build measures); clock_mhz: MHz; advisory: a miss is reported, not a failure.
    """

    device: str | None
    clock_mhz: float
    advisory: bool = False

    @property
    def declared_by(self) -> str:
        """The sla.yaml field that declared it: ``hdl.target`` or ``hdl.clock_mhz``."""
        return "hdl.clock_mhz" if self.device is None else "hdl.target"

    def devices(self, measured) -> list[str]:
        """The devices of ``measured`` (device names) this target applies to, in that order."""
        return [d for d in measured if self.device is None or d == self.device]

    def describe(self) -> str:
        """One phrase: ``"50 MHz on iCE40 UP5K (SG48) (hdl.target, advisory)"``."""
        where = "every measured device" if self.device is None else TARGET_DEVICES[self.device]
        return f"{self.clock_mhz:g} MHz on {where} ({self.declared_by}{', advisory' if self.advisory else ''})"

    def header_lines(self, measured: dict | None = None) -> list[str]:
        """Comment lines (without ``//``) for the Verilog header: the declared target, what a miss
        means, and, with ``measured`` (a ``target`` record of the hdl stage:
        :func:`mi_certify.verification.rtl.synth.target_verdict`, e.g. from ``hdl.latency: auto``), the
        result; without it, where the result is recorded (the hdl stage runs after the Verilog is
        written)."""
        lines = [f"Declared target: {self.describe()}."]
        lines.append("Advisory: a measured Fmax below it is reported, the build does not fail." if self.advisory
                     else "A measured Fmax below it fails the build.")
        if measured is None:
            lines.append("Measured Fmax and verdict: summary.json hdl.target (stage hdl).")
        else:
            got = ", ".join(f"{d} {'does not fit' if f is None else f'{f:g} MHz'}"
                            for d, f in measured["fmax_mhz"].items())
            lines.append(f"Measured: {got}: {'met' if measured['met'] else 'MISSED'}.")
        return lines


@dataclass(frozen=True)
class PropertySpec:
    """A property over the region ``when`` (input index -> (lo, hi)).

    Exactly one of ``forbid`` / ``require`` (action tokens) or ``output``
    (token -> (min or None, max or None)) is set.
    """

    id: str
    when: tuple[tuple[int, float, float], ...]
    forbid: tuple[int, ...] = ()
    require: tuple[int, ...] = ()
    output: tuple[tuple[int, float | None, float | None], ...] = ()
    description: str = ""

    @property
    def kind(self) -> str:
        return "forbid" if self.forbid else "require" if self.require else "output"


@dataclass(frozen=True)
class OperatorSpec:
    """The sla.yaml ``operator:`` section (docs/fsm.md, "Operator interventions").

    lock: tokens an operator may lock (ascending); force_conservative: FORCE accepted;
    yield_to_fallback / yield_to_probe_fault: an override yields to the SLA fallback / to a
    probe fault; max_lock_steps: steps an override stays in force (>= 1); keys: key ids
    allowed to issue commands (for the command intake; the machine does not see them).
    """

    lock: tuple[int, ...]
    force_conservative: bool
    yield_to_fallback: bool
    yield_to_probe_fault: bool
    max_lock_steps: int
    keys: tuple[str, ...]

    def config(self) -> OperatorConfig:
        """The machine's view (:class:`~mi_certify.runtime.fsm.OperatorConfig`)."""
        return OperatorConfig(sum(1 << a for a in self.lock), self.force_conservative, self.yield_to_fallback,
                              self.yield_to_probe_fault, self.max_lock_steps)


@dataclass(frozen=True)
class Spec:
    """A validated sla.yaml."""

    path: str
    name: str
    decode: str
    inputs: tuple[InputSpec, ...]
    actions: tuple[ActionSpec, ...]
    fsm: FsmParams
    properties: tuple[PropertySpec, ...] = ()
    cosim: CosimSettings = CosimSettings()
    confidence_threshold: float | None = None
    resolve: str = "conservative"
    #: ``distill.min_agreement``: the LUT's least agreement with the network (share of test points)
    min_agreement: float | None = None
    monitor: MonitorConfig = MonitorConfig()
    hdl: HdlOptions = HdlOptions()
    #: ``operator:``; None: the controller has no operator input (every artefact as without the feature)
    operator: OperatorSpec | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    #: the sla.yaml bytes this spec was read from (hashed and copied into the bundle as read)
    source: bytes = field(default=b"", compare=False, repr=False)

    @property
    def conservative(self) -> int:
        """Token of the conservative action."""
        return next(i for i, a in enumerate(self.actions) if a.conservative)

    def fsm_config(self) -> FsmConfig:
        """The LUT-FSM parameters of this spec (docs/fsm.md)."""
        return FsmConfig(len(self.actions), self.conservative, self.fsm.hysteresis, self.fsm.cooldown,
                         self.fsm.violations_to_fallback, self.fsm.recovery)

    @property
    def address_bits(self) -> int:
        return sum(i.bits for i in self.inputs)

    @property
    def token_bits(self) -> int:
        return max(1, (len(self.actions) - 1).bit_length())

    @property
    def module_name(self) -> str:
        """Name of the Verilog module: ``hdl.prefix`` + controller name."""
        return self.hdl.prefix + self.name

    def action_index(self, name: str) -> int:
        return next(i for i, a in enumerate(self.actions) if a.name == name)


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


def _schema_message(err: jsonschema.ValidationError) -> tuple[str, str]:
    where = _path(err.absolute_path)
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        allowed = ", ".join(sorted(err.schema.get("properties", {}))) or "none"
        return (_path(list(err.absolute_path) + [extra[0]]) if extra else where,
                f"unknown field (allowed here: {allowed})")
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return _path(list(err.absolute_path) + [missing]), "required field is missing"
    if err.validator == "pattern":
        if err.schema is _TEXT or err.schema.get("pattern") == _TEXT["pattern"]:
            return where, "text may not contain control characters, quotes, backslashes or backticks"
        if err.schema.get("pattern") == _STATISTIC:
            return where, f"{_short(err.instance)} is not a statistic (max, mean, or p1 ... p99)"
        if err.schema.get("pattern") == _PREFIX:
            return where, (f"'{_short(err.instance)}' is not a valid prefix (empty, or {_IDENT}; at most "
                           f"{MAX_PREFIX_LENGTH} characters)")
        what = "property id" if err.absolute_path and err.absolute_path[-1] == "id" else "name"
        return where, f"'{_short(err.instance)}' is not a valid {what} ({_IDENT}; at most {MAX_NAME_LENGTH} characters)"
    if err.validator == "maxLength" and isinstance(err.instance, str):
        return where, f"is {len(err.instance)} characters long; at most {err.validator_value} are allowed"
    return where, _short(err.message, 300)


def _short(value, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases (no alias bombs) and duplicate mapping keys."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise SpecError("YAML aliases (*name) are not allowed", where=f"line {event.start_mark.line + 1}")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise SpecError(f"duplicate key '{key}'", where=f"line {key_node.start_mark.line + 1}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# The YAML 1.2 core schema for plain scalars (https://yaml.org/spec/1.2.2/#1032-tag-resolution):
# PyYAML implements YAML 1.1, where 1e-3 is a string, 017 is 15 (octal), 1:20 is 80 (base 60),
# 1_000 is 1000 and yes/no/on/off are booleans. A spec means what a reader of YAML 1.2 (and of
# JSON) sees; anything else stays a string and the schema names it.
_StrictLoader.yaml_implicit_resolvers = {}
for _tag, _regex, _first in (
        ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
        ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
        ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", list("-+0123456789.")),
):
    _StrictLoader.add_implicit_resolver(_tag, re.compile(_regex), _first)


def _yaml12_int(loader, node) -> int:
    text = loader.construct_scalar(node)
    return int(text[2:], 8) if text.startswith("0o") else int(text[2:], 16) if text.startswith("0x") else int(text, 10)


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _yaml12_int)


def load_spec(path: str | Path) -> Spec:
    """Read, validate and resolve sla.yaml.

    Raises:
        SpecError naming the file, field path and reason.
    """
    path = Path(path)
    f = str(path)
    if path.is_dir():
        raise SpecError("is a directory, not a file", file=f)
    if not path.is_file():
        raise SpecError("no such file", file=f)
    try:
        data = path.read_bytes()
        raw = yaml.load(data.decode("utf-8"), Loader=_StrictLoader)
    except SpecError as exc:
        raise SpecError(exc.reason, file=f, where=exc.where) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        if where is None and isinstance(getattr(exc, "position", None), int):   # a ReaderError: a bad character
            where = f"character {exc.position + 1}"
        problem = getattr(exc, "problem", None) or first_line(exc)
        raise SpecError(f"not valid YAML: {problem}", file=f, where=where) from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 text ({exc.reason})", file=f) from None
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", file=f) from None
    if not isinstance(raw, dict):
        raise SpecError("top level must be a mapping", file=f)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    errors = sorted(validator.iter_errors(raw), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        where, reason = _schema_message(best)
        raise SpecError(reason, file=f, where=where)
    return dataclasses.replace(_resolve(_integers(raw, SCHEMA), f), source=data)


def _integers(value, schema: dict):
    """``value`` with every integral float where ``schema`` says integer made an int (JSON
    Schema's "integer" accepts 20.0 and 2e1; the rest of the program wants ints)."""
    if schema.get("type") == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        return {k: _integers(v, props.get(k, extra if isinstance(extra, dict) else {})) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_integers(v, schema["items"]) for v in value]
    return value


def _unique(items, what: str, f: str, key: str = "name"):
    seen = {}
    for i, item in enumerate(items):
        if item[key] in seen:
            raise SpecError(f"duplicate {key} '{item[key]}' (also {what}[{seen[item[key]]}])", file=f,
                            where=f"{what}[{i}].{key}")
        seen[item[key]] = i


def _finite(raw, f: str, path: str = "") -> None:
    """Every number in the spec must be finite (no .nan, .inf, or overflowing literals)."""
    if isinstance(raw, dict):
        for k, v in raw.items():
            _finite(v, f, f"{path}.{k}" if path else str(k))
    elif isinstance(raw, list):
        for i, v in enumerate(raw):
            _finite(v, f, f"{path}[{i}]")
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        try:
            ok = math.isfinite(float(raw)) and abs(float(raw)) <= 1e15
        except OverflowError:
            ok = False
        if not ok:
            raise SpecError(f"{_short(raw)} is not a finite number of magnitude <= 1e15", file=f, where=path)


def _resolve(raw: dict, f: str) -> Spec:
    """The Spec of a schema-valid sla.yaml document ``raw`` (file ``f``); raises SpecError (file,
    field path, reason) for what the schema cannot say: names, ranges, one conservative action,
    property regions and actions, module names, SLA-monitor counter widths."""
    _finite(raw, f)
    name = _check_names(raw, f)
    inputs = _inputs(raw, f)
    actions = _actions(raw, f)
    props = tuple(_property(d, f"properties[{pi}]", inputs, actions, f)
                  for pi, d in enumerate(raw.get("properties", [])))
    hdl_opts = _hdl(raw, name, actions, f)
    conf = raw.get("confidence")
    fsm = raw["fsm"]
    cosim = raw.get("cosim", {})
    return Spec(path=f, name=name, decode=raw["controller"]["decode"], inputs=inputs, actions=actions,
                fsm=FsmParams(int(fsm["hysteresis"]), int(fsm["cooldown"]), int(fsm["violations_to_fallback"]),
                              int(fsm["recovery"])),
                properties=props,
                cosim=CosimSettings(cosim.get("cycles", 10_000), cosim.get("monitor_requests", 1000),
                                    tuple(sorted((k, float(v)) for k, v in cosim.get("coverage", {}).items()))),
                confidence_threshold=None if conf is None else float(conf["threshold"]),
                resolve=raw.get("distill", {}).get("resolve", "conservative"),
                min_agreement=(None if raw.get("distill", {}).get("min_agreement") is None
                               else float(raw["distill"]["min_agreement"])),
                monitor=MonitorConfig(**raw.get("monitor", {})),
                hdl=hdl_opts, operator=_operator(raw, inputs, actions, props, f), raw=raw)


def _operator(raw: dict, inputs, actions, props, f: str) -> OperatorSpec | None:
    """The operator section: known, distinct lockable actions, not forbidden everywhere by a property,
    at least one intervention, distinct key ids."""
    d = raw.get("operator")
    if d is None:
        return None
    act_idx = {a.name: i for i, a in enumerate(actions)}
    lock = []
    for j, nm in enumerate(d.get("lock", [])):
        where = f"operator.lock[{j}]"
        if nm not in act_idx:
            raise SpecError(f"unknown action '{nm}' (actions: {', '.join(act_idx)})", file=f, where=where)
        if act_idx[nm] in lock:
            raise SpecError(f"action '{nm}' is listed twice", file=f, where=where)
        for pi, p in enumerate(props):
            everywhere = all(lo <= inputs[k].min and hi >= inputs[k].max for k, lo, hi in p.when)
            banned = act_idx[nm] in p.forbid or (p.require and act_idx[nm] not in p.require)
            if everywhere and banned:
                raise SpecError(f"action '{nm}' cannot be locked: property '{p.id}' (properties[{pi}]) forbids it "
                                "in the whole envelope, so a lock of it could never be in force", file=f, where=where)
        lock.append(act_idx[nm])
    force = bool(d.get("force_conservative", False))
    if not lock and not force:
        raise SpecError("declares no intervention: list actions under lock or set force_conservative: true",
                        file=f, where="operator")
    for j, k in enumerate(d["keys"]):
        if k in d["keys"][:j]:
            raise SpecError(f"duplicate key id '{k}' (also operator.keys[{d['keys'].index(k)}])", file=f,
                            where=f"operator.keys[{j}]")
    return OperatorSpec(tuple(sorted(lock)), force, bool(d.get("yield_to_fallback", True)),
                        bool(d.get("yield_to_probe_fault", True)), int(d["max_lock_steps"]), tuple(d["keys"]))


def _check_names(raw: dict, f: str) -> str:
    """Input, action and controller names usable in Python and Verilog, unique; returns the controller name."""
    for what in ("inputs", "actions"):
        for i, item in enumerate(raw[what]):
            if not is_valid_name(item["name"]):
                raise SpecError(f"'{item['name']}' is a reserved word (Python, Verilog or SystemVerilog keyword, "
                                "or a Python standard module)", file=f, where=f"{what}[{i}].name")
    _unique(raw["inputs"], "inputs", f)
    _unique(raw["actions"], "actions", f)
    _unique(raw.get("properties", []), "properties", f, key="id")
    name = raw["controller"]["name"]
    if not is_valid_name(name) or name in sys.stdlib_module_names:
        raise SpecError(f"'{name}' is a reserved word (Python, Verilog or SystemVerilog keyword, or a Python "
                        "standard module)", file=f, where="controller.name")
    return name


def _inputs(raw: dict, f: str) -> tuple[InputSpec, ...]:
    inputs = []
    for i, d in enumerate(raw["inputs"]):
        lo, hi = float(d["min"]), float(d["max"])
        if not lo < hi:
            raise SpecError(f"empty or inverted range: min {d['min']} must be < max {d['max']}", file=f,
                            where=f"inputs[{i}].max")
        inputs.append(InputSpec(d["name"], lo, hi, int(d["bits"]), d.get("unit", ""), d.get("description", "")))
    bits = sum(i.bits for i in inputs)
    if bits > MAX_ADDRESS_BITS:
        raise SpecError(f"LUT address is {bits} bits wide; at most {MAX_ADDRESS_BITS} are allowed "
                        "(lower some inputs' bits)", file=f, where="inputs")
    return tuple(inputs)


def _actions(raw: dict, f: str) -> tuple[ActionSpec, ...]:
    actions = []
    for d in raw["actions"]:
        sla = d.get("sla", {})
        actions.append(ActionSpec(d["name"], bool(d.get("conservative", False)), sla.get("latency_ms"),
                                  sla.get("accuracy_loss_pct"), d.get("description", "")))
    cons = [i for i, a in enumerate(actions) if a.conservative]
    if len(cons) != 1:
        raise SpecError(f"exactly one action must be conservative: true (found {len(cons)})", file=f, where="actions")
    return tuple(actions)


def _property(d: dict, base: str, inputs, actions, f: str) -> PropertySpec:
    """One sla.yaml property (``base`` = its field path): region inside the envelope, known actions,
    the conservative action always allowed."""
    kinds = [k for k in ("forbid", "require", "output") if k in d]
    if len(kinds) != 1:
        raise SpecError("a property needs exactly one of forbid, require, output "
                        f"(found {', '.join(kinds) or 'none'})", file=f, where=base)
    when = sorted(_region(d["when"], base, inputs, f))
    act_idx = {a.name: i for i, a in enumerate(actions)}
    cons = next(i for i, a in enumerate(actions) if a.conservative)
    tokens: dict[str, tuple[int, ...]] = {}
    for k in ("forbid", "require"):
        if k in d:
            for j, nm in enumerate(d[k]):
                if nm not in act_idx:
                    raise SpecError(f"unknown action '{nm}' (actions: {', '.join(act_idx)})", file=f,
                                    where=f"{base}.{k}[{j}]")
            tokens[k] = tuple(sorted({act_idx[nm] for nm in d[k]}))
    if "forbid" in tokens and len(tokens["forbid"]) == len(actions):
        raise SpecError("forbids every action", file=f, where=f"{base}.forbid")
    if "forbid" in tokens and cons in tokens["forbid"]:
        raise SpecError(f"forbids the conservative action '{actions[cons].name}', which the fallback "
                        "must always be allowed to use", file=f, where=f"{base}.forbid")
    if "require" in tokens and cons not in tokens["require"]:
        raise SpecError(f"require must include the conservative action '{actions[cons].name}', which "
                        "the fallback must always be allowed to use", file=f, where=f"{base}.require")
    out = []
    for nm, b in d.get("output", {}).items():
        if nm not in act_idx:
            raise SpecError(f"unknown action '{nm}' (actions: {', '.join(act_idx)})", file=f,
                            where=f"{base}.output.{nm}")
        lo, hi = b.get("min"), b.get("max")
        if lo is not None and hi is not None and not lo <= hi:
            raise SpecError(f"empty bound: min {lo} > max {hi}", file=f, where=f"{base}.output.{nm}")
        out.append((act_idx[nm], None if lo is None else float(lo), None if hi is None else float(hi)))
    if "output" in d and not out:
        raise SpecError("output names no action", file=f, where=f"{base}.output")
    return PropertySpec(d["id"], tuple(when), tokens.get("forbid", ()), tokens.get("require", ()),
                        tuple(sorted(out)), d.get("description", ""))


def _region(when: dict, base: str, inputs, f: str) -> list[tuple[int, float, float]]:
    """(input index, lo, hi) per ``when`` entry: known inputs, ranges inside the envelope."""
    in_idx = {s.name: i for i, s in enumerate(inputs)}
    out = []
    for nm, (lo, hi) in when.items():
        w = f"{base}.when.{nm}"
        if nm not in in_idx:
            raise SpecError(f"unknown input '{nm}' (inputs: {', '.join(in_idx)})", file=f, where=w)
        s = inputs[in_idx[nm]]
        if not lo <= hi:
            raise SpecError(f"empty or inverted range [{lo}, {hi}]", file=f, where=w)
        if hi < s.min or lo > s.max:
            raise SpecError(f"range [{lo}, {hi}] does not overlap the envelope [{s.min}, {s.max}] of "
                            f"'{nm}'", file=f, where=w)
        if lo < s.min or hi > s.max:
            raise SpecError(f"range [{lo}, {hi}] reaches outside the envelope [{s.min}, {s.max}] of '{nm}'; "
                            "proofs only cover the envelope", file=f, where=w)
        out.append((in_idx[nm], float(lo), float(hi)))
    return out


def _target(hdl: dict, f: str) -> tuple[float | None, HdlTarget | None]:
    """(clock in MHz or None, :class:`HdlTarget` or None) of an ``hdl`` section: one clock runs the
    controller and its SLA monitor, so ``hdl.target.clock_mhz`` and ``hdl.clock_mhz`` name the same
    number (either may be left out; both set and different is a SpecError, as is a target with
    neither)."""
    clock = None if hdl.get("clock_mhz") is None else float(hdl["clock_mhz"])
    t = hdl.get("target")
    if t is None:
        return clock, None
    t_clock = None if t.get("clock_mhz") is None else float(t["clock_mhz"])
    if clock is not None and t_clock is not None and clock != t_clock:
        raise SpecError(f"hdl.target.clock_mhz ({t_clock:g} MHz) differs from hdl.clock_mhz ({clock:g} MHz): one "
                        "clock runs the controller and its SLA monitor; set one of them", file=f,
                        where="hdl.target.clock_mhz")
    clock = clock if clock is not None else t_clock
    if clock is None:
        raise SpecError(f"hdl.target ({t['device']}) names no clock: set hdl.target.clock_mhz (or hdl.clock_mhz)",
                        file=f, where="hdl.target.clock_mhz")
    return clock, HdlTarget(t["device"], clock, bool(t.get("advisory", False)))


def _input_formats(raw: dict, f: str) -> tuple[FixedPoint, ...]:
    """``hdl.inputs`` / ``hdl.input_format`` resolved per input (in input order), or () when neither
    is set. Raises SpecError for an unknown input name, a width outside 1 .. MAX_WORD_BITS, an input
    without a format, or a format that represents no value of the input's envelope."""
    hdl = raw.get("hdl", {})
    named, default = hdl.get("inputs", {}), hdl.get("input_format")
    if not named and default is None:
        return ()
    names = [d["name"] for d in raw["inputs"]]
    for n in named:
        if n not in names:
            raise SpecError(f"'{n}' is not an input (inputs: {', '.join(names)})", file=f, where=f"hdl.inputs.{n}")
    out = []
    for d in raw["inputs"]:
        where = f"hdl.inputs.{d['name']}" if d["name"] in named else "hdl.input_format"
        fd = named.get(d["name"], default)
        if fd is None:
            raise SpecError(f"input '{d['name']}' has no raw word format: name it in hdl.inputs or set "
                            "hdl.input_format", file=f, where="hdl.inputs")
        fmt = FixedPoint(bool(fd["signed"]), int(fd["int_bits"]), int(fd["frac_bits"]))
        if not 1 <= fmt.width <= MAX_WORD_BITS:
            raise SpecError(f"int_bits + frac_bits is {fmt.width}; a raw word has 1 .. {MAX_WORD_BITS} bits "
                            "(every word is enumerated when the quantizer is proved)", file=f, where=where)
        qz = Quantizer.from_floats(float(d["min"]), float(d["max"]), int(d["bits"]))
        lo_w = -(fmt.words >> 1) if fmt.signed else 0
        lo_v, hi_v = fmt.value(lo_w % fmt.words), fmt.value((lo_w + fmt.words - 1) % fmt.words)
        if hi_v < qz.lo or lo_v > qz.hi:
            raise SpecError(f"{fmt.describe()} spans [{float(lo_v):g}, {float(hi_v):g}], outside the envelope "
                            f"[{d['min']}, {d['max']}] of input '{d['name']}': every word would be a probe fault",
                            file=f, where=where)
        out.append(fmt)
    return tuple(out)


def _hdl(raw: dict, name: str, actions, f: str) -> HdlOptions:
    """The hdl section: a usable module name, latency limits that fit the SLA monitor's counter."""
    hdl = raw.get("hdl", {})
    module = hdl.get("prefix", "") + name
    if len(module) > MAX_NAME_LENGTH:
        raise SpecError(f"module name '{module}' (hdl.prefix + controller.name) is {len(module)} characters long; "
                        f"at most {MAX_NAME_LENGTH} are allowed", file=f, where="hdl.prefix")
    if not is_valid_name(module):
        raise SpecError(f"module name '{module}' is a reserved word", file=f, where="hdl.prefix")
    if module in RESERVED_MODULES or module.startswith("mi_certify_"):
        raise SpecError(f"module name '{module}' clashes with a module every build ships or uses "
                        f"({', '.join(sorted(RESERVED_MODULES))}, mi_certify_*); choose another name or prefix",
                        file=f, where="hdl.prefix" if hdl.get("prefix") else "controller.name")
    clock_mhz, target = _target(hdl, f)
    hdl_opts = HdlOptions(hdl.get("reset", "sync"), hdl.get("reset_polarity", "high"), hdl.get("prefix", ""),
                          hdl.get("encoding", "case"), clock_mhz,
                          "auto" if hdl.get("latency") == "auto" else int(hdl.get("latency", 1)), target,
                          input_formats=_input_formats(raw, f))
    clock = hdl_opts.clock_mhz if hdl_opts.clock_mhz is not None else DEFAULT_MONITOR_CLOCK_MHZ
    for i, a in enumerate(actions):
        if a.latency_ms is not None and latency_limit_cycles(a.latency_ms, clock) < 1:
            raise SpecError(f"the latency limit of '{a.name}' ({a.latency_ms:g} ms) is less than one clock cycle at "
                            f"{clock:g} MHz: the hardware SLA monitor would judge every request a violation",
                            file=f, where="hdl.clock_mhz" if hdl_opts.clock_mhz is not None
                            else f"actions[{i}].sla.latency_ms")
    window = MonitorConfig(**raw.get("monitor", {})).window
    limits = [(latency_limit_cycles(a.latency_ms, clock), i) for i, a in enumerate(actions) if a.latency_ms is not None]
    if limits and latency_counter_width(max(limits)[0], window) > 32:
        top, i = max(limits)
        raise SpecError(f"the hardware SLA monitor needs a {latency_counter_width(top, window)}-bit latency counter "
                        f"for '{actions[i].name}' ({actions[i].latency_ms:g} ms = {top} cycles at {clock:g} MHz, "
                        f"window {window}); at most 32 bits: lower the limit, hdl.clock_mhz or monitor.window",
                        file=f, where=f"actions[{i}].sla.latency_ms")
    return hdl_opts


#: Verilog modules every build ships (hdl/sla_monitor.v) or generates around the controller.
RESERVED_MODULES = frozenset({"sla_monitor", "sla_monitor_window", "sla_monitor_reg"})
#: Clock of the hardware SLA monitor's cycle limits when sla.yaml sets no ``hdl.clock_mhz``.
DEFAULT_MONITOR_CLOCK_MHZ = 100.0

_VERILOG_KEYWORDS = frozenset(
    "always and assign begin buf case casex casez cmos deassign default defparam disable edge else end endcase "
    "endfunction endmodule endprimitive endspecify endtable endtask event for force forever fork function "
    "highz0 highz1 if initial inout input integer join large macromodule medium module nand negedge nmos nor "
    "not notif0 notif1 or output parameter pmos posedge primitive pull0 pull1 pulldown pullup rcmos real "
    "realtime reg release repeat rnmos rpmos rtran rtranif0 rtranif1 scalared small specify specparam strong0 "
    "strong1 supply0 supply1 table task time tran tranif0 tranif1 tri tri0 tri1 triand trior trireg vectored "
    "wait wand weak0 weak1 while wire wor xnor xor generate endgenerate genvar localparam signed "
    # SystemVerilog (IEEE 1800) keywords that tools reject as identifiers
    "alias always_comb always_ff always_latch assert assume automatic before bind bins binsof bit break byte "
    "chandle class clocking const constraint context continue cover covergroup coverpoint cross dist do enum "
    "export extends extern final first_match foreach forkjoin iff ignore_bins illegal_bins import inside int "
    "interface intersect join_any join_none local logic longint matches modport new null package packed "
    "priority program property protected pure rand randc randcase randsequence ref return sequence shortint "
    "shortreal solve static string struct super tagged this throughout timeprecision timeunit type typedef "
    "union unique var virtual void wait_order wildcard with within uwire".split())


def is_valid_name(name: str) -> bool:
    """True if ``name`` can be used as a generated identifier."""
    return bool(re.match(_NAME, name)) and not keyword.iskeyword(name) and name not in _VERILOG_KEYWORDS
