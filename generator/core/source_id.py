"""The digest of mi-certify's own source: which code made a bundle, and which code a remote
worker runs (the two must be the same digest: docs/scale-out.md)."""

from __future__ import annotations

import hashlib
from importlib import resources

__all__ = ["SOURCE_PACKAGES", "SOURCE_SUFFIXES", "source_digest"]

SOURCE_PACKAGES = ("mi_certify.generator", "mi_certify.verification", "mi_certify.runtime", "mi_certify.templates")
SOURCE_SUFFIXES = (".py", ".j2")


def _package_files(pkg: str) -> list[tuple[str, bytes]]:
    out = []

    def walk(node, prefix):
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(SOURCE_SUFFIXES):
                out.append((f"{pkg}/{prefix}{child.name}", child.read_bytes()))
    walk(resources.files(pkg), "")
    return out


def source_digest() -> tuple[str, int]:
    """(sha256 hex digest, number of files) over ``<package>/<relative path>`` and the bytes of
    every ``.py`` and ``.j2`` file of SOURCE_PACKAGES, in sorted order (each name and content
    length-prefixed, so no two file sets collide by concatenation)."""
    h = hashlib.sha256()
    n = 0
    for pkg in SOURCE_PACKAGES:
        for name, data in _package_files(pkg):
            h.update(f"{len(name)}:{name}:{len(data)}:".encode())
            h.update(data)
            n += 1
    return h.hexdigest(), n
