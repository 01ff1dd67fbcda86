"""The bundle's JSON documents as the pipeline writes them (:class:`Evidence`: obligations, summary
and report read what was written, never the files back) and the JSON text form they share."""

from __future__ import annotations

import json
from pathlib import Path



#: Contract of proofs/index.json (FSM and RTL proofs): obligations written by those stages.
PROOF_INDEX = "proofs/index.json"


def json_text(obj) -> str:
    """The bundle's JSON layout: two-space indent, sorted keys, one final newline."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


class Evidence:
    """The JSON evidence of one bundle directory ``d``.

    The pipeline writes each document through :meth:`write`, which keeps what the file
    now holds (the parsed text, so readers see exactly the bytes on disk); the checker
    opens a finished bundle with the same class and reads the files. Either way
    :func:`collect_obligations` and the report read the evidence through :meth:`read`.
    """

    def __init__(self, d: Path):
        self.d = Path(d)
        self._docs: dict[str, object] = {}

    def write(self, rel: str, obj) -> None:
        """Write ``obj`` as ``d/rel`` (:func:`json_text`), creating its folder."""
        text = json_text(obj)
        path = self.d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self._docs[rel] = json.loads(text)

    def has(self, rel: str) -> bool:
        """True when the bundle holds ``rel`` (JSON or any other file)."""
        return rel in self._docs or (self.d / rel).exists()

    def read(self, rel: str):
        """The parsed JSON document ``rel``; raises OSError / ValueError for a missing or bad file."""
        if rel not in self._docs:
            self._docs[rel] = json.loads((self.d / rel).read_text(encoding="utf-8"))
        return self._docs[rel]
