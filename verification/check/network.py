"""Network group of ``mi-certify check``: verification.json against the network itself.

Re-derives from verification.json, sla.yaml and inputs/model/*.onnx: that every
property of the spec has a result; that every counterexample and every reachability
witness, replayed on **onnxruntime** (not our IR), does what verification.json says
(independent); and, unless ``--quick``, the same verdicts and reachability from every
query run again by mi-certify's own verifier (same code).

The onnxruntime replay helpers (:func:`onnxruntime_outputs`, :func:`decoded`,
:func:`decode_margin`) also serve the distillation group's witnesses.
"""

from __future__ import annotations

import numpy as np

from mi_certify.verification.check.common import SKIP, CheckFailed, Checker, CheckContext, command_option, require

#: Replay tolerance (as the verifier's): a witness decoding differently on onnxruntime
#: is accepted only when the two outputs differ by at most this much.
TOLERANCE = 1e-4


def onnxruntime_outputs(ev: CheckContext, xs) -> np.ndarray:
    """onnxruntime outputs (n, n_actions) float64 of the bundle's model at points ``xs``
    (n, n_inputs), rounded to float32 first as the network reads them. These are the tensors the IR
    equals: the logits before a stripped output head (LoadedModel.evaluate_onnxruntime reads them
    from an in-memory copy of the model with the logits as extra outputs, and confirms the head's
    own output orders the actions the same way)."""
    return ev.loaded.evaluate_onnxruntime(np.asarray(xs, dtype=np.float32).astype(np.float64))


def decoded(spec, y: np.ndarray) -> np.ndarray:
    """The action index the spec's decode rule (argmax / argmin) picks from outputs ``y`` (..., n_actions)."""
    return np.argmax(y, axis=-1) if spec.decode == "argmax" else np.argmin(y, axis=-1)


def decode_margin(spec, y: np.ndarray, a: int) -> float:
    """How far action a is from being decoded at outputs y (n_actions,) (<= 0: it is decoded; ties to it count)."""
    s = y if spec.decode == "argmax" else -y
    return float(np.max(s) - s[a])


def _in_region(spec, prop, x) -> bool:
    lo = [i.min for i in spec.inputs]
    hi = [i.max for i in spec.inputs]
    for i, a, b in prop.when:
        lo[i], hi[i] = a, b
    return all(lo[i] <= x[i] <= hi[i] for i in range(len(x)))


def _replay_property(spec, prop, x, y) -> str:
    """Independent replay of a property counterexample: returns a detail or raises CheckFailed."""
    require(_in_region(spec, prop, x), f"witness {x} lies outside the property region")
    names = [a.name for a in spec.actions]
    if prop.kind in ("forbid", "require"):
        bad = prop.forbid if prop.kind == "forbid" else [a for a in range(len(names)) if a not in prop.require]
        best = min(bad, key=lambda a: decode_margin(spec, y, a))
        m = decode_margin(spec, y, best)
        require(m <= TOLERANCE, f"onnxruntime decodes {names[int(decoded(spec, y))]} at the witness, "
                                f"which the property allows (margin {m:.3g})")
        return f"onnxruntime decodes {names[best]} at the witness" + (f" (tie within {m:.2g})" if m > 0 else "")
    for a, mn, mx in prop.output:
        if mx is not None and y[a] >= mx - TOLERANCE:
            return f"{names[a]} output {y[a]:.6g} >= {mx:g} on onnxruntime"
        if mn is not None and y[a] <= mn + TOLERANCE:
            return f"{names[a]} output {y[a]:.6g} <= {mn:g} on onnxruntime"
    raise CheckFailed(f"no output bound is broken at the witness on onnxruntime: {y.tolist()}")


def check_network(c: Checker, ev: CheckContext) -> None:
    """Items ``network: ...`` and ``network.<id>: ...``; a SKIP when the build did not verify
    the network, the re-run a SKIP with ``--quick``."""
    if not (c.d / "verification.json").exists():
        c.add("network verification", SKIP, "same code", "the build did not verify the network (--no-verify)")
        return
    ver = c.read_json("verification.json")
    props = {p.id: p for p in ev.spec.properties}
    ids = [r["id"] for r in ver["properties"]]
    c.run("network: every property has a result", "integrity",
          lambda: require(sorted(ids) == sorted(props), f"results for {ids}, spec has "
                                                        f"{sorted(props)}") or f"{len(props)} properties")
    _replay_witnesses(c, ev, ver, props)
    if not c.opts.rerun_network:
        c.add("network: re-run every query from inputs/", SKIP, "same code", "--quick")
        return
    c.run("network: re-run every query from inputs/ (same verdicts)", "same code", lambda: _rerun(c, ev, ver))


def _replay_witnesses(c: Checker, ev: CheckContext, ver: dict, props: dict) -> None:
    spec = ev.spec
    for r in ver["properties"]:
        if r["witness"]:
            def replay(r=r):
                x = np.array(r["witness"]["x_float32"])
                return _replay_property(spec, props[r["id"]], x, onnxruntime_outputs(ev, x[None])[0])
            c.run(f"network.{r['id']}: counterexample replays on onnxruntime", "independent", replay)
    names = [a.name for a in spec.actions]
    for a in ver["output_domain"]["actions"]:
        if a["witness"]:
            def reach(a=a):
                x = np.array(a["witness"]["x_float32"])
                require(all(i.min <= v <= i.max for i, v in zip(spec.inputs, x)), "witness outside the envelope")
                y = onnxruntime_outputs(ev, x[None])[0]
                m = decode_margin(spec, y, names.index(a["action"]))
                require(m <= TOLERANCE, f"onnxruntime decodes {names[int(decoded(spec, y))]} at the witness")
                return f"onnxruntime decodes {a['action']} at x={np.round(x, 6).tolist()}"
            c.run(f"network.reachability.{a['action']}: reachability witness replays on onnxruntime", "independent",
                  reach)


def _rerun(c: Checker, ev: CheckContext, ver: dict) -> str:
    from mi_certify.verification.nn.network import verify_spec
    from mi_certify.verification.nn.nn_verify import VerifyOptions
    timeout = float(command_option(c.manifest.get("command", []), "--verify-timeout", "60"))
    res = verify_spec(ev.loaded, ev.spec, VerifyOptions(timeout=timeout, confirm_timeout=timeout)).deterministic_json()
    stored = {r["id"]: r["verdict"] for r in ver["properties"]}
    again = {r["id"]: r["verdict"] for r in res["properties"]}
    require(stored == again, f"re-run verdicts {again} differ from verification.json {stored}")
    reach_s = {a["action"]: a["reachable"] for a in ver["output_domain"]["actions"]}
    reach_a = {a["action"]: a["reachable"] for a in res["output_domain"]["actions"]}
    require(reach_s == reach_a, f"re-run reachability {reach_a} differs from verification.json {reach_s}")
    return ", ".join(f"{k} {v}" for k, v in again.items()) + "; reachable: " + \
        ", ".join(k for k, v in reach_a.items() if v == "yes")
