"""Integrity group of ``mi-certify check``: the manifest, the hashes, the signature, the inputs.

Re-derives from manifest.json and the files on disk: the manifest's format; the
sha256 of every hashed file; that ``not_hashed`` names only the files mi-certify
leaves unhashed and that no file outside the manifest lies in the bundle; that the
model and spec the manifest names are hashed files; the Ed25519 signature of
manifest.json (with ``--pubkey``). Then it loads the bundle's own inputs (sla.yaml,
the ONNX network, imported again and cross-checked with onnxruntime, and lut.hex)
into the :class:`.common.CheckContext` the later groups read.
"""

from __future__ import annotations

import dataclasses

from pathlib import Path

import numpy as np

from mi_certify.generator.core.digests import sha256_file
from mi_certify.runtime.lut_file import decode_lut_hex
from mi_certify.verification.check.common import FAIL, PASS, SKIP, Checker, CheckContext, require


def check_manifest(c: Checker) -> str:
    """The ``manifest`` item: manifest.json has our format and lists files; sets ``c.manifest``.
    Returns the detail; raises CheckFailed."""
    from mi_certify.generator.bundle.manifest import MANIFEST_FORMAT
    m = c.read_json("manifest.json")
    require(isinstance(m, dict) and m.get("format") == MANIFEST_FORMAT,
            f"manifest.json: format is not {MANIFEST_FORMAT}")
    require(isinstance(m.get("files"), dict) and m["files"], "manifest.json: no files listed")
    c.manifest = m
    src = m.get("mi_certify", {}).get("source", {}).get("sha256", "?")
    return f"{len(m['files'])} hashed files; built by mi-certify {m.get('mi_certify', {}).get('version')} " \
           f"(source sha256 {src[:16]}…)"


def check_signature(c: Checker, pub) -> None:
    """The ``signature`` item: verified with ``pub`` (an Ed25519 public key, or None); without
    a key, a SKIP when the bundle carries manifest.json.sig, nothing when it does not."""
    if pub is not None:
        from mi_certify.generator.bundle.signing import verify_bundle_signature
        c.run("signature", "integrity", lambda: verify_bundle_signature(c.d, pub))
    elif (c.d / "manifest.json.sig").exists():
        c.add("signature", SKIP, "integrity", "manifest.json.sig is present but was not checked: pass --pubkey KEY.pub")


def check_hashes(c: Checker) -> bool:
    """One ``hash REL`` item per hashed file, then the unhashed and unlisted files and the
    inputs' binding. Returns False when anything failed (nothing else is worth reading)."""
    from mi_certify.generator.bundle.manifest import UNHASHED
    m = c.manifest
    ok = True
    for rel, digest in sorted(m["files"].items()):
        ok &= _hash_item(c, rel, digest)
    odd = sorted(set(m.get("not_hashed", {})) - set(UNHASHED))
    c.add("not_hashed lists only the unhashed files", FAIL if odd else PASS, "integrity",
          ("not a file mi-certify leaves unhashed: " + ", ".join(odd[:5])) if odd else ", ".join(UNHASHED))
    ok &= not odd
    allowed = set(m["files"]) | {"manifest.json"} | set(UNHASHED)
    extra = sorted(p.relative_to(c.d).as_posix() for p in c.d.rglob("*") if p.is_file()
                   and p.relative_to(c.d).as_posix() not in allowed)
    c.add("no unlisted files", FAIL if extra else PASS, "integrity",
          ("not in manifest.json: " + ", ".join(extra[:5])) if extra else "")
    for role in ("model", "spec"):
        ent = m.get("inputs", {}).get(role, {})
        good = ent.get("path") in m["files"] and m["files"][ent["path"]] == ent.get("sha256")
        c.add(f"input {role} bound", PASS if good else FAIL, "integrity", ent.get("path", "missing"))
        ok &= good
    return ok and not extra


def _hash_item(c: Checker, rel: str, digest: str) -> bool:
    p = c.d / rel
    if ".." in Path(rel).parts or Path(rel).is_absolute():
        c.add(f"hash {rel}", FAIL, "integrity", "path leaves the bundle")
    elif not p.is_file():
        c.add(f"hash {rel}", FAIL, "integrity", "file missing")
    elif sha256_file(p) != digest:
        c.add(f"hash {rel}", FAIL, "integrity", f"sha256 {sha256_file(p)[:16]}… != manifest {digest[:16]}…")
    else:
        c.add(f"hash {rel}", PASS, "integrity", digest[:16] + "…")
        return True
    return False


def load_inputs(c: Checker, ev: CheckContext) -> str:
    """The ``inputs: spec and model load`` item: fills ``ev`` (model, spec, ir, summary, lut).

    Returns the detail; raises SpecError / ModelImportError from loading, CheckFailed when
    lut.hex does not have 2**address_bits entries.
    """
    from mi_certify.generator.core.lut import check_shapes
    from mi_certify.generator.frontend.model import load_model
    from mi_certify.generator.core.spec import load_spec
    m = c.manifest
    ev.model = c.d / m["inputs"]["model"]["path"]
    ev.spec = spec = load_spec(c.d / m["inputs"]["spec"]["path"])
    ev.loaded = load_model(ev.model)
    ev.ir = ir = ev.loaded.ir
    check_shapes(spec, ir, str(ev.model))
    lo, hi = np.array([i.min for i in spec.inputs]), np.array([i.max for i in spec.inputs])
    worst = ev.loaded.cross_check(lo, hi)
    ev.summary = c.read_json("summary.json")
    chosen = ev.summary.get("stages", {}).get("emit", {}).get("latency")
    if spec.hdl.latency == "auto" and isinstance(chosen, int):  # the build's measured choice, checked by rtl.read
        ev.spec = spec = dataclasses.replace(spec, hdl=spec.hdl.with_latency(chosen))
    if (c.d / "lut.hex").exists():
        lb = decode_lut_hex((c.d / "lut.hex").read_text(encoding="ascii"))
        require(len(lb) == 1 << spec.address_bits, f"lut.hex has {len(lb)} entries, not {1 << spec.address_bits}")
        ev.lut = np.frombuffer(lb, dtype=np.uint8)
    return f"{spec.name}: {len(spec.inputs)} inputs, {ir.n_relus} ReLUs; IR = onnxruntime within {worst:.2g}"
