"""distillation.json and the partition's binary tables (NumPy .npy records: 2n + 12 bytes a box):
the one writer (:func:`write_distillation`) and the one reader (:func:`read_distillation`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mi_certify.generator.bundle.evidence import json_text




#: Format marker of distillation.json written by :func:`write_distillation`.
DISTILLATION_FORMAT = "mi-certify/distillation-v3"

#: The partition's tables beside distillation.json (NumPy .npy, format 1.0: a documented
#: header naming the little-endian record layout, then the records; np.load reads them).
DISTILLATION_TABLES = {"boxes": "distillation_boxes.npy", "witnesses": "distillation_witnesses.npy"}


def _npy_bytes(arr) -> bytes:
    import io

    import numpy as np
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(arr), version=(1, 0), allow_pickle=False)
    return buf.getvalue()


def write_distillation(d: Path, boxes, witnesses, policy: str, fidelity: dict) -> None:
    """Write distillation.json (policy, fidelity, the codes and the SHA-256 of each table) and
    the tables ``distillation_boxes.npy`` (one record per final box:
    :func:`~.distill.box_dtype`) and ``distillation_witnesses.npy`` (one record per replayed
    witness of a resolved cell: :func:`~.distill.witness_dtype`): 2n + 12 bytes a box, the
    reference bundle's 3 MB of JSON lines → ~0.5 MB."""
    from mi_certify.generator.build.distill import METHODS, UNDECIDED, VERDICTS

    d = Path(d)
    tables = {"boxes": _npy_bytes(boxes), "witnesses": _npy_bytes(witnesses)}
    head = {"format": DISTILLATION_FORMAT, "policy": policy, "fidelity": fidelity,
            "tables": {k: {"file": DISTILLATION_TABLES[k], "records": int(len(a)),
                           "sha256": hashlib.sha256(tables[k]).hexdigest()}
                       for k, a in (("boxes", boxes), ("witnesses", witnesses))},
            "codes": {"verdict": list(VERDICTS), "method": list(METHODS), "undecided_method": UNDECIDED},
            "note": "boxes: inclusive level ranges per input (input 0 first), action token, verdict and method "
                    "codes, confident bit, and for method 'bounds' the CROWN margin lower bound > 0 over the "
                    "closed box (NaN otherwise); witnesses: address, action token, point; a resolved cell holds "
                    "the actions of its witnesses"}
    for k, data in tables.items():
        (d / DISTILLATION_TABLES[k]).write_bytes(data)
    (d / "distillation.json").write_text(json_text(head), encoding="utf-8")


def read_distillation(d: Path, spec=None) -> dict:
    """Read distillation.json and its tables into {"boxes", "witnesses" (structured arrays),
    "policy", "fidelity"} and, given the spec, "resolved_cells" (:func:`~.distill.resolved_cells`).

    Raises:
        ValueError if a file is missing, not the distillation-v3 format, or a table's SHA-256
        or record layout differs from what distillation.json states.
    """
    import io

    import numpy as np
    d = Path(d)
    try:
        raw = json.loads((d / "distillation.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"distillation.json: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != DISTILLATION_FORMAT:
        raise ValueError(f"distillation.json: not a {DISTILLATION_FORMAT} file")
    out = {"policy": raw["policy"], "fidelity": raw["fidelity"]}
    for k, meta in raw["tables"].items():
        try:
            data = (d / meta["file"]).read_bytes()
        except OSError as exc:
            raise ValueError(f"{meta['file']}: {exc.strerror}") from exc
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise ValueError(f"{meta['file']}: SHA-256 differs from distillation.json")
        arr = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
        if arr.dtype.names is None or len(arr) != meta["records"]:
            raise ValueError(f"{meta['file']}: not {meta['records']} records")
        out[k] = arr
    if spec is not None:
        from mi_certify.generator.build.distill import box_dtype, resolved_cells, witness_dtype
        n = len(spec.inputs)
        if out["boxes"].dtype != box_dtype(n) or out["witnesses"].dtype != witness_dtype(n):
            raise ValueError(f"distillation tables: record layout is not that of {n} inputs")
        out["resolved_cells"] = resolved_cells(spec, out["boxes"], out["witnesses"], out["policy"])
    return out
