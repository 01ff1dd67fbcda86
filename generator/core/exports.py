"""Public names of a package loaded on first use (PEP 562), for the package ``__init__``s.

``mi_certify.generator`` and ``mi_certify.verification`` list what they offer in one file
(Amaranth's small public surface) without importing it: importing one module of the
package loads that module and its own imports only (docs/architecture.md).
"""

from __future__ import annotations

from importlib import import_module
from typing import Callable


def lazy_exports(package: str, names: dict[str, str], namespace: dict) -> tuple[Callable, Callable, list[str]]:
    """(``__getattr__``, ``__dir__``, ``__all__``) for ``package`` whose public name N lives in
    submodule ``names[N]``; a loaded name is cached in ``namespace`` (the package's globals).
    Unknown names raise AttributeError, so ``from package import submodule`` still works."""
    public = sorted(names)

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{names[name]}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return public
    return __getattr__, __dir__, public
