"""What every evidence group of ``mi-certify check`` shares: the item, the runner, the evidence.

:class:`Checker` runs one check at a time and records it as a :class:`CheckItem`
(a check that raises is a FAIL: fail closed); :class:`CheckContext` carries what the
groups read from the bundle once and hand on (the spec, the re-imported network,
lut.hex, the cell status the distillation boxes give). The groups themselves live
in ``check_*.py``; :mod:`.bundle_check` runs them in order.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class CheckItem:
    """One line of the check: ``status`` PASS/FAIL/SKIP, ``kind`` integrity, independent
    or same code, ``detail`` says what was compared."""

    name: str
    status: str
    kind: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.status:4s}  {self.name}  [{self.kind}]" + (f"  {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class CheckOptions:
    """rerun_network: re-run the network queries (tens of seconds); rerun_tools: re-run
    lint and co-simulation; pubkey: PEM public key the signature must verify with."""

    rerun_network: bool = True
    rerun_tools: bool = True
    pubkey: str | None = None


class CheckFailed(Exception):
    """A check found the bundle wrong; the message is the item's detail."""


def require(cond: bool, msg: str) -> None:
    """Raise :class:`CheckFailed` with ``msg`` unless ``cond``."""
    if not cond:
        raise CheckFailed(msg)


def command_option(command: list[str], flag: str, default: str) -> str:
    """The value after ``flag`` in manifest.json's ``command`` (the build's command line), or ``default``."""
    return command[command.index(flag) + 1] if flag in command else default


class Checker:
    """Runs the checks of one bundle and records their items.

    ``d``: the bundle directory; ``opts``: :class:`CheckOptions`; ``emit`` is called with
    every item as it is decided; ``items`` holds them in order; ``manifest`` is
    manifest.json once the manifest item passed (empty before).
    """

    def __init__(self, bundle: Path, opts: CheckOptions, emit: Callable[[CheckItem], None]):
        self.d = bundle
        self.opts = opts
        self.items: list[CheckItem] = []
        self.emit = emit
        self.manifest: dict = {}

    def add(self, name: str, status: str, kind: str, detail: str = "") -> CheckItem:
        """Record (and emit) an item decided without running a check."""
        item = CheckItem(name, status, kind, detail)
        self.items.append(item)
        self.emit(item)
        return item

    def run(self, name: str, kind: str, fn: Callable[[], str | tuple[str, str]]) -> bool:
        """Run one check; fn returns a detail (PASS) or (status, detail); raises on failure.
        Returns False when the item is a FAIL."""
        try:
            res = fn()
        except CheckFailed as exc:
            self.add(name, FAIL, kind, str(exc))
            return False
        except Exception as exc:  # noqa: BLE001 - any failure of a check is a FAIL, never a PASS
            self.add(name, FAIL, kind, f"{type(exc).__name__}: {exc}")
            return False
        status, detail = res if isinstance(res, tuple) else (PASS, res)
        self.add(name, status, kind, detail)
        return status != FAIL

    def read_json(self, rel: str) -> Any:
        """The bundle file ``rel`` parsed as JSON; raises OSError or ValueError."""
        return json.loads((self.d / rel).read_text(encoding="utf-8"))


@dataclass
class CheckContext:
    """What the groups share, filled as the check goes.

    ``model``: path of inputs/model/*.onnx; ``spec``: the loaded sla.yaml (Spec); ``ir``:
    the network imported again (ControllerIR); ``summary``: summary.json as stored;
    ``lut``: lut.hex, (2**address_bits,) uint8 ``confident << 7 | token``, None without
    lut.hex (all set by :func:`.manifest.load_inputs`); ``box_status``: (n,) object
    array, each cell's status as the distillation boxes and the overridden cells give it,
    None until the distillation group derived it.
    """

    model: Path | None = None
    #: the model read once (mi_certify.generator.frontend.model.LoadedModel): bytes, hash, IR, onnxruntime session
    loaded: Any = None
    spec: Any = None
    ir: Any = None
    summary: dict | None = None
    lut: np.ndarray | None = None
    box_status: np.ndarray | None = None
    #: the hdl stage being made again in the background (:func:`.hdl.start_hdl_numbers`), None otherwise
    hdl_job: Any = None

    def machine(self):
        """The bundle's LUT-FSM (:class:`~mi_certify.generator.core.lut.LutFsmArtefact`) from sla.yaml and
        lut.hex, with the property masks derived again from sla.yaml; KeyError('lut') without lut.hex."""
        from mi_certify.generator.core.lut import LutFsmArtefact, property_masks
        return LutFsmArtefact.from_table(self.spec, self.lut_hex(), property_masks(self.spec))

    def lut_hex(self) -> np.ndarray:
        """``lut`` for a check that cannot go on without it; raises KeyError('lut') when the
        bundle has no lut.hex (the item's detail then reads ``KeyError: 'lut'``)."""
        if self.lut is None:
            raise KeyError("lut")
        return self.lut
