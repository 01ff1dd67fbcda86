"""manifest.json: its format, the unhashed files, the source identity (sha256 over the installed
source) and commit (unhashed), the canonical command line that rebuilds the bundle from its own
``inputs/``, and the manifest's figures (docs/certificate.md)."""

from __future__ import annotations

import subprocess
from importlib import metadata, resources
from pathlib import Path

from mi_certify.generator.core.results import Status
from mi_certify.generator.core.source_id import SOURCE_PACKAGES, source_digest
from mi_certify.generator.bundle.obligations import obligations_status


#: Format marker of manifest.json.
MANIFEST_FORMAT = "mi-certify/build-v1"

#: Files whose content depends on timing, the machine or the signer; listed in the manifest but not hashed.
UNHASHED = ("build.log", "verification_log.json", "timings.json", "provenance.json", "report.png",
            "diagnostics.json", "manifest.json.sig")


def source_identity() -> dict:
    """{"sha256": digest over every source file, "files": count}.

    The digest covers ``<package>/<relative path>`` and the bytes of every ``.py`` and
    ``.j2`` file of the four mi-certify packages, in sorted order (each name and content
    length-prefixed, so no two file sets collide by concatenation).
    """
    digest, n = source_digest()
    return {"sha256": digest, "files": n,
            "covers": "every .py and .j2 file of " + ", ".join(SOURCE_PACKAGES)}


def source_commit() -> dict:
    """Git commit of the source checkout mi-certify runs from, and whether it has local
    changes; ``{"commit": None, ...}`` when it is not a git checkout (installed wheel)."""
    root = Path(str(resources.files("mi_certify.generator"))).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return {"commit": None, "dirty": None, "reason": "not a git checkout"}
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": None, "dirty": None, "reason": f"git unavailable: {exc}"}


def package_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def canonical_command(model_name: str, spec_name: str, opts) -> list[str]:
    """The build command, relative to the bundle (``inputs/``), with every option that
    changes the outputs written out (defaults included); ``OUT`` stands for the output
    directory, which does not change any hashed byte."""
    cmd = ["mi-certify", "build", f"inputs/model/{model_name}", "--sla", f"inputs/spec/{spec_name}", "--out", "OUT",
           "--cosim-cycles", str(opts.cosim_cycles), "--seed", str(opts.cosim_seed),
           "--verify-timeout", f"{opts.verify_timeout:g}"]
    if opts.skip_cosim:
        cmd.append("--skip-cosim")
    if opts.skip_lint:
        cmd.append("--skip-lint")
    if opts.skip_rtl_proofs:
        cmd.append("--skip-rtl-proofs")
    if getattr(opts, "skip_synth", False):
        cmd.append("--skip-synth")
    if not opts.verify:
        cmd.append("--no-verify")
    if not opts.distill:
        cmd.append("--sample-lut")
    if opts.heatmap:
        cmd += ["--heatmap", ",".join(opts.heatmap)]
    return cmd


def manifest_figures(summary: dict, obligations: list[dict]) -> dict:
    """The manifest's status and figures, from summary.json and obligations.json."""
    lut = summary["lut"]
    return {"status": summary["status"],
            "obligations": {"file": "obligations.json", "count": len(obligations),
                            "status": obligations_status(obligations)},
            "proofs": {"network_properties": "proved" if summary["stages"]["verify"]["status"] == Status.OK else "not proved",
                       "lut": f"{lut['proven']} cells proven, {lut['resolved']} resolved, {lut['sampled']} "
                              "sampled (not proven)"}}
