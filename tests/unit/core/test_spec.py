"""sla.yaml validation: every error names the file, the field and the reason."""

from __future__ import annotations

import textwrap

import pytest
import yaml

from conftest import EXAMPLES
from mi_certify.generator.core.errors import SpecError
from mi_certify.generator.core.spec import load_spec
from mi_certify.runtime.fsm import OperatorConfig

BASE = textwrap.dedent("""\
    schema: mi-certify/v1
    controller: {name: ctl, decode: argmax}
    confidence: {kind: softmax, threshold: 0.6}
    inputs:
      - {name: temperature_c, unit: degC, min: 20, max: 110, bits: 3}
      - {name: compute_util, unit: ratio, min: 0, max: 1, bits: 4}
    actions:
      - {name: keep, conservative: true, sla: {latency_ms: 50, accuracy_loss_pct: 0.0}}
      - {name: int4, sla: {latency_ms: 20, accuracy_loss_pct: 1.5}}
    fsm: {hysteresis: 3, cooldown: 10, violations_to_fallback: 3, recovery: 8}
    properties:
      - {id: P1, when: {temperature_c: [95, 110]}, forbid: [int4]}
      - {id: P2, when: {compute_util: [0, 0.1]}, require: [keep]}
      - {id: P3, when: {}, output: {keep: {max: 3.99}}}
    """)


def write(tmp_path, text: str, mutate=None):
    data = yaml.safe_load(text)
    if mutate:
        mutate(data)
    p = tmp_path / "sla.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_valid_spec_resolves_names_to_indices(tmp_path):
    s = load_spec(write(tmp_path, BASE))
    assert (s.name, s.decode, s.address_bits, s.conservative, s.token_bits) == ("ctl", "argmax", 7, 0, 1)
    assert s.properties[0].when == ((0, 95.0, 110.0),) and s.properties[0].forbid == (1,)
    assert s.properties[1].require == (0,) and s.properties[2].output == ((0, None, 3.99),)
    assert s.confidence_threshold == 0.6 and s.fsm.cooldown == 10


def test_integral_floats_where_integers_are_required_become_integers(tmp_path):
    # JSON Schema accepts 20.0 and 2e1 as integers; they once crashed the monitor and the co-simulation
    text = BASE.replace("cooldown: 10", "cooldown: 1e1").replace("bits: 4}", "bits: 4.0}") + \
        "monitor: {window: 2e1, latency_statistic: p90}\ncosim: {cycles: 1e4, monitor_requests: 1e3}\n"
    p = tmp_path / "sla.yaml"
    p.write_text(text)
    s = load_spec(p)
    got = (s.fsm.cooldown, s.inputs[1].bits, s.monitor.window, s.cosim.cycles, s.cosim.monitor_requests)
    assert got == (10, 4, 20, 10_000, 1_000) and all(type(x) is int for x in got)
    p.write_text(BASE + "monitor: {window: 20.5}\n")
    with pytest.raises(SpecError) as exc:
        load_spec(p)
    assert "monitor.window" in str(exc.value) and "not of type 'integer'" in str(exc.value)


def test_exponent_floats_are_numbers_as_in_yaml_1_2(tmp_path):
    # PyYAML (YAML 1.1) alone reads 5e1 and 1.5e+2 as strings; the spec loader reads numbers
    text = BASE.replace("latency_ms: 50,", "latency_ms: 5e1,").replace("max: 110,", "max: 1.1e+2,") + \
        "hdl: {clock_mhz: 1.25e2}\n"
    assert yaml.safe_load(text)["hdl"]["clock_mhz"] == "1.25e2"
    p = tmp_path / "sla.yaml"
    p.write_text(text)
    s = load_spec(p)
    assert (s.actions[0].latency_ms, s.inputs[0].max, s.hdl.clock_mhz) == (50.0, 110.0, 125.0)


@pytest.mark.parametrize("edit,where,reason", [
    (("cooldown: 10", "cooldown: 1:20"), "fsm.cooldown", "'1:20' is not of type 'integer'"),   # 1.1: 80
    (("recovery: 8", "recovery: 010"), None, None),                                           # 1.1: 8 (octal)
    (("bits: 4}", "bits: 1_0}"), "inputs[1].bits", "'1_0' is not of type 'integer'"),          # 1.1: 10
    (("conservative: true", "conservative: yes"), "actions[0].conservative", "'yes' is not of type 'boolean'"),
])
def test_plain_scalars_follow_the_yaml_1_2_core_schema(tmp_path, edit, where, reason):
    p = tmp_path / "sla.yaml"
    p.write_text(BASE.replace(*edit))
    if where is None:
        assert load_spec(p).fsm.recovery == 10   # decimal, not octal 8
        return
    with pytest.raises(SpecError) as exc:
        load_spec(p)
    assert str(exc.value).startswith(f"{p}: {where}: ") and reason in str(exc.value), str(exc.value)


@pytest.mark.parametrize("mutate,where,reason", [
    (lambda d: d.update(extra=1), "extra", "unknown field"),
    (lambda d: d["actions"][1]["sla"].update(latency_ms=1e9), "actions[1].sla.latency_ms",
     "the hardware SLA monitor needs a 48-bit latency counter for 'int4'"),
    (lambda d: d["inputs"][1].update(bits=9), "inputs[1].bits", "9 is greater than the maximum of 8"),
    (lambda d: d["inputs"][1].update(bits=0), "inputs[1].bits", "0 is less than the minimum of 1"),
    (lambda d: d["inputs"][0].update(min=110), "inputs[0].max", "empty or inverted range"),
    (lambda d: d["actions"][1].update(conservative=True), "actions", "exactly one action must be conservative"),
    (lambda d: d["actions"][0].pop("conservative"), "actions", "exactly one action must be conservative"),
    (lambda d: d["properties"][0].update(forbid=["int8"]), "properties[0].forbid[0]", "unknown action 'int8'"),
    (lambda d: d["properties"][0]["when"].update(fan_rpm=[0, 1]), "properties[0].when.fan_rpm", "unknown input"),
    (lambda d: d["properties"][0]["when"].update(temperature_c=[100, 95]), "properties[0].when.temperature_c",
     "empty or inverted range"),
    (lambda d: d["properties"][0]["when"].update(temperature_c=[120, 130]), "properties[0].when.temperature_c",
     "does not overlap the envelope"),
    (lambda d: d["properties"][1].update(forbid=["int4"]), "properties[1]", "exactly one of forbid, require, output"),
    (lambda d: d["properties"][2]["output"].update(keep={"min": 2, "max": 1}), "properties[2].output.keep",
     "empty bound"),
    (lambda d: d["properties"][1].update(id="P1"), "properties[1].id", "duplicate id 'P1'"),
    (lambda d: d["actions"][1].update(name="keep"), "actions[1].name", "duplicate name 'keep'"),
    (lambda d: d["controller"].update(decode="softmax"), "controller.decode", "is not one of"),
    (lambda d: d["controller"].update(name="module"), "controller.name", "keyword"),
    (lambda d: d["controller"].update(name="9lives"), "controller.name", "not a valid name"),
    (lambda d: d["fsm"].pop("recovery"), "fsm.recovery", "required field is missing"),
    (lambda d: d["fsm"].update(hysteresis=0), "fsm.hysteresis", "less than the minimum of 1"),
    (lambda d: d.update(schema="mi-certify/v2"), "schema", "'mi-certify/v1' was expected"),
    (lambda d: d["inputs"].extend({"name": f"x{i}", "min": 0, "max": 1, "bits": 8} for i in range(3)), "inputs",
     "31 bits wide; at most 24"),
    # module names the build ships (hdl/sla_monitor.v) or uses around the controller
    (lambda d: d["controller"].update(name="sla_monitor"), "controller.name", "clashes with a module"),
    (lambda d: (d["controller"].update(name="monitor_window"), d.update(hdl={"prefix": "sla_"})), "hdl.prefix",
     "'sla_monitor_window' clashes"),
    (lambda d: d.update(hdl={"prefix": "mi_certify_"}), "hdl.prefix", "clashes with a module"),
    # a latency limit below one clock cycle: the hardware monitor would flag every request
    (lambda d: d.update(hdl={"clock_mhz": 0.00001}), "hdl.clock_mhz", "less than one clock cycle at 1e-05 MHz"),
])
def test_bad_spec_is_refused_naming_file_and_field(tmp_path, mutate, where, reason):
    path = write(tmp_path, BASE, mutate)
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: {where}: "), msg
    assert reason in msg, msg


def test_yaml_syntax_error_names_line_and_column(tmp_path):
    p = tmp_path / "sla.yaml"
    p.write_text("schema: mi-certify/v1\ninputs: [\n")
    with pytest.raises(SpecError, match=r"sla.yaml: line 3, column 1: not valid YAML"):
        load_spec(p)


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(SpecError, match="nope.yaml: no such file"):
        load_spec(tmp_path / "nope.yaml")


@pytest.mark.parametrize("name", ["meta_controller", "acasxu", "cartpole"])
def test_shipped_example_specs_are_valid(name):
    s = load_spec(EXAMPLES / name / "sla.yaml")
    assert len(s.actions) >= 2 and s.actions[s.conservative].conservative


def test_sla_yaml_reference_is_generated_from_the_schema():
    from conftest import ROOT
    from mi_certify.generator.core.spec_doc import render
    assert (ROOT / "docs" / "sla-yaml.md").read_text() == render(), \
        "regenerate: python -m mi_certify.generator.core.spec_doc > docs/sla-yaml.md"


def _check_spec(path):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "check-spec", str(path)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("bad_id", ["1.a-b", "P-1", "p.1", "9lives", ""])
def test_property_id_is_an_identifier_as_its_error_says(tmp_path, bad_id):
    # the schema once accepted 1.a-b while its message said "letters, digits, underscore; not starting with a digit"
    path = write(tmp_path, BASE, lambda d: d["properties"][0].update(id=bad_id))
    p = _check_spec(path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"error: {path}: properties[0].id: '{bad_id}' is not a valid property id (letters, digits, underscore; "
        "not starting with a digit; at most 64 characters)"], p.stderr
    assert p.stdout == ""


def test_property_ids_that_are_identifiers_are_accepted(tmp_path):
    ok = ["_p", "P" * 64, "acas_prop1"]
    path = write(tmp_path, BASE, lambda d: [d["properties"][k].update(id=v) for k, v in enumerate(ok)])
    p = _check_spec(path)
    assert p.returncode == 0, p.stderr
    assert [q.id for q in load_spec(path).properties] == ok


@pytest.mark.parametrize("mutate,where,length,limit", [
    (lambda d: d["properties"][0].update(id="P" * 65), "properties[0].id", 65, 64),
    (lambda d: d["controller"].update(name="c" * 65), "controller.name", 65, 64),
    (lambda d: d["inputs"][1].update(name="x" * 65), "inputs[1].name", 65, 64),
    (lambda d: d["actions"][1].update(name="a" * 65), "actions[1].name", 65, 64),
    (lambda d: d["inputs"][0].update(unit="u" * 33), "inputs[0].unit", 33, 32),
    (lambda d: d.update(hdl={"prefix": "p" * 33}), "hdl.prefix", 33, 32),
    (lambda d: d["actions"][0].update(description="d" * 201), "actions[0].description", 201, 200),
    (lambda d: d["properties"][2].update(description="d" * 201), "properties[2].description", 201, 200),
    # each part within its limit, together too long for one Verilog module name
    (lambda d: (d["controller"].update(name="c" * 40), d.update(hdl={"prefix": "p" * 30})), "hdl.prefix", 70, 64),
])
def test_text_longer_than_its_limit_is_refused_saying_the_limit(tmp_path, mutate, where, length, limit):
    path = write(tmp_path, BASE, mutate)
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}: {where}: ") and msg.endswith(
        f"is {length} characters long; at most {limit} are allowed"), msg


def test_sla_yaml_reference_states_the_length_limits():
    from conftest import ROOT
    doc = (ROOT / "docs" / "sla-yaml.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in doc.splitlines() if line.startswith("| `")}
    for field, limit in [("`controller.name`", 64), ("`inputs[].name`", 64), ("`actions[].name`", 64),
                         ("`properties[].id`", 64), ("`inputs[].unit`", 32), ("`hdl.prefix`", 32),
                         ("`controller.description`", 200), ("`inputs[].description`", 200),
                         ("`actions[].description`", 200), ("`properties[].description`", 200)]:
        assert f"at most {limit} characters" in rows[field], rows[field]
    assert "legal identifier of at most\n  64 characters" in doc


# --- operator: (docs/fsm.md, "Operator interventions") ----------------------------------

OPERATOR = {"lock": ["int4"], "force_conservative": True, "max_lock_steps": 600, "keys": ["ops-1", "ops.2"]}


def _with(**edit):
    def mutate(d):
        d["operator"] = {**OPERATOR, **edit}
        for k in [k for k, v in d["operator"].items() if v is None]:
            del d["operator"][k]
    return mutate


def test_without_operator_there_is_no_operator_input(tmp_path):
    assert load_spec(write(tmp_path, BASE)).operator is None


def test_operator_section_resolves_to_tokens_and_defaults(tmp_path):
    s = load_spec(write(tmp_path, BASE, _with()))
    op = s.operator
    assert (op.lock, op.force_conservative, op.yield_to_fallback, op.yield_to_probe_fault) == ((1,), True, True, True)
    assert (op.max_lock_steps, op.keys) == (600, ("ops-1", "ops.2"))
    assert op.config() == OperatorConfig(lockable=0b10, force=True, yield_fallback=True, yield_probe=True,
                                         max_steps=600)
    s = load_spec(write(tmp_path, BASE, _with(lock=None, yield_to_fallback=False, yield_to_probe_fault=False)))
    assert s.operator.config() == OperatorConfig(0, True, False, False, 600)


@pytest.mark.parametrize("edit,where,reason", [
    ({"lock": ["int8"]}, "operator.lock[0]", "unknown action 'int8'"),
    ({"lock": ["int4", "int4"]}, "operator.lock[1]", "listed twice"),
    ({"max_lock_steps": 0}, "operator.max_lock_steps", "0 is less than the minimum of 1"),
    ({"lock": [], "force_conservative": False}, "operator", "declares no intervention"),
    ({"keys": ["a", "b", "a"]}, "operator.keys[2]", "duplicate key id 'a'"),
    ({"keys": []}, "operator.keys", ""),
    ({"keys": ["bad key"]}, "operator.keys[0]", ""),
    ({"max_lock_steps": None}, "operator.max_lock_steps", "required field is missing"),
])
def test_operator_contradictions_are_refused_naming_file_and_field(tmp_path, edit, where, reason):
    p = write(tmp_path, BASE, _with(**edit))
    with pytest.raises(SpecError) as exc:
        load_spec(p)
    assert exc.value.file == str(p) and exc.value.where == where, str(exc.value)
    assert reason in exc.value.reason


def test_locking_an_action_a_property_forbids_everywhere_is_refused(tmp_path):
    def mutate(d):
        d["properties"].append({"id": "P9", "when": {}, "forbid": ["int4"]})
        d["operator"] = dict(OPERATOR)
    p = write(tmp_path, BASE, mutate)
    with pytest.raises(SpecError) as exc:
        load_spec(p)
    assert exc.value.where == "operator.lock[0]"
    assert "property 'P9' (properties[3]) forbids it in the whole envelope" in exc.value.reason
    # a property forbidding it in part of the envelope (P1, temperature >= 95) is no contradiction
    assert load_spec(write(tmp_path, BASE, _with())).operator.lock == (1,)
