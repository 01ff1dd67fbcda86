"""The figures report.md and report.html print, each derived from one field of one evidence
file (issue 32: "every number shown is derived, not copied").

A :class:`Figure` names its file and field (a dotted path into the JSON document; ``of``:
the field it is a share of; ``complement``: one minus that share). The report prints a
figure only through its ``text`` and lists every figure with its source in the table
"Figures and their sources"; :func:`compare_figures` reads that table back out of
report.md and re-reads each source (``mi-certify check`` item "report: every figure equals
its evidence file", and the tests).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["Figure", "compare_figures", "figure_text", "parse_figures_table", "report_figures"]

#: How a figure of each kind is printed.
KINDS = ("count", "share", "mhz")


def figure_text(kind: str, value) -> str:
    """``count`` 16384 → "16,384"; ``share`` 0.56662 → "56.66 %"; ``mhz`` 127.15 → "127.15 MHz".
    Raises ValueError for another kind."""
    if kind == "count":
        return f"{int(value):,}"
    if kind == "share":
        return f"{100 * float(value):.2f} %"
    if kind == "mhz":
        return f"{float(value):g} MHz"
    raise ValueError(f"unknown figure kind {kind!r} ({', '.join(KINDS)})")


@dataclass(frozen=True)
class Figure:
    """One printed figure: ``id`` (stable, e.g. ``lut.proven``), ``label``, ``kind``
    (:data:`KINDS`), ``file`` and ``field`` (dotted path), ``of`` (denominator field in the
    same file, or ""), ``complement`` (1 - share), ``value`` (as derived) and ``text``."""

    id: str
    label: str
    kind: str
    file: str
    field: str
    value: float | int
    of: str = ""
    complement: bool = False

    @property
    def text(self) -> str:
        return figure_text(self.kind, self.value)

    @property
    def source(self) -> str:
        """The derivation as printed in the table: ``fidelity.agreement``, ``lut.proven / lut.cells``,
        ``1 - fidelity.agree / fidelity.points``."""
        s = f"{self.field} / {self.of}" if self.of else self.field
        return f"1 - {s}" if self.complement else s


def _get(doc, path: str):
    for part in path.split("."):
        doc = doc[part]
    return doc


def derive(read: Callable[[str], dict], file: str, field: str, of: str = "", complement: bool = False):
    """The value of a figure from ``read(file)`` (a JSON document): ``field``, divided by ``of``,
    subtracted from 1 (``complement``). Raises KeyError when a field is missing."""
    doc = read(file)
    v = _get(doc, field)
    if of:
        v = v / _get(doc, of)
    return 1 - v if complement else v


def report_figures(read: Callable[[str], dict], has: Callable[[str], bool]) -> dict[str, Figure]:
    """Every figure the report prints, derived through ``read(rel)`` (a bundle JSON document)
    for the documents ``has(rel)`` says exist. Returns {id: Figure}, in print order."""
    out: dict[str, Figure] = {}

    def add(fid, label, kind, file, field, of="", complement=False):
        if has(file):
            try:
                value = derive(read, file, field, of, complement)
            except (KeyError, TypeError, ZeroDivisionError):
                return
            if value is not None:
                out[fid] = Figure(fid, label, kind, file, field, value, of, complement)

    add("lut.cells", "LUT cells", "count", "summary.json", "lut.cells")
    add("lut.proven", "proven cells", "count", "summary.json", "lut.proven")
    add("lut.proven_share", "proven share of the cells", "share", "summary.json", "lut.proven", "lut.cells")
    add("lut.resolved", "resolved cells", "count", "summary.json", "lut.resolved")
    add("lut.resolved_share", "resolved share of the cells", "share", "summary.json", "lut.resolved", "lut.cells")
    add("lut.sampled", "sampled (unproven) cells", "count", "summary.json", "lut.sampled")
    add("fidelity.points", "random points compared with the network", "count", "distillation.json",
        "fidelity.points")
    add("fidelity.agreement", "agreement with the network", "share", "distillation.json", "fidelity.agree",
        "fidelity.points")
    add("fidelity.disagreement", "points where the LUT runs another action than the network", "share",
        "distillation.json", "fidelity.agree", "fidelity.points", complement=True)
    add("fidelity.proven_points", "points in proven cells", "count", "distillation.json", "fidelity.proven_points")
    add("fidelity.proven_agree", "of them agreeing with the network", "count", "distillation.json",
        "fidelity.proven_agree")
    add("cosim.cycles", "co-simulation cycles", "count", "cosim.json", "cycles")
    add("cosim.directed_cycles", "directed cycles", "count", "cosim.json", "directed_cycles")
    add("cosim.mismatches", "mismatching cycles", "count", "cosim.json", "mismatches")
    add("coverage.lut_cells", "LUT cells addressed in co-simulation", "share", "coverage.json",
        "functional.lut_cells.share")
    if has("coverage.json"):
        counts = (read("coverage.json").get("functional") or {}).get("reasons", {}).get("counts", {})
        for reason in sorted(counts):
            add(f"reasons.{reason}", f"cycles out of reset with reason {reason}", "count", "coverage.json",
                f"functional.reasons.counts.{reason}")
    if has("summary.json"):
        pnr = read("summary.json").get("stages", {}).get("hdl", {}).get("place_and_route", {})
        for dev in sorted(pnr):
            if pnr[dev].get("fits") and pnr[dev].get("fmax_mhz") is not None:
                add(f"fmax.{dev}", f"Fmax on {dev.upper()}", "mhz", "summary.json",
                    f"stages.hdl.place_and_route.{dev}.fmax_mhz")
            if pnr[dev].get("goal_mhz") is not None:
                add(f"goal.{dev}", f"mi-certify's goal on {dev.upper()}", "mhz", "summary.json",
                    f"stages.hdl.place_and_route.{dev}.goal_mhz")
        axil = read("summary.json").get("stages", {}).get("hdl", {}).get("axil", {}).get("place_and_route", {})
        for dev in sorted(axil):
            if axil[dev].get("fits") and axil[dev].get("fmax_mhz") is not None:
                add(f"fmax_axil.{dev}", f"Fmax of the AXI4-Lite-wrapped core on {dev.upper()}", "mhz", "summary.json",
                    f"stages.hdl.axil.place_and_route.{dev}.fmax_mhz")
    return out


#: A row of report.md's figure table: | `id` | label | text | `file` | `source` |
_ROW = re.compile(r"^\| `(?P<id>[^`]+)` \| (?P<label>[^|]*) \| (?P<text>[^|]*) \| `(?P<file>[^`]+)` \| "
                  r"`(?P<source>[^`]+)` \|$")


def parse_figures_table(md: str) -> list[dict]:
    """The rows of report.md's section "Figures and their sources": dicts id, label, text,
    file, source (the derivation: ``FIELD``, ``FIELD / OF``, ``1 - ...``)."""
    head = md.find("## Figures and their sources")
    if head < 0:
        return []
    rows = []
    for line in md[head:].splitlines()[1:]:
        if line.startswith("## "):
            break
        m = _ROW.match(line.strip())
        if m:
            rows.append({k: v.strip() for k, v in m.groupdict().items()})
    return rows


def _kind_of(text: str) -> str:
    return "share" if text.endswith(" %") else "mhz" if text.endswith(" MHz") else "count"


def compare_figures(d: Path, md: str | None = None, html: str | None = None) -> tuple[int, list[str]]:
    """Compare every figure report.md lists (and report.html, which must print the same text
    in an element ``id="fig-<id>"``) with its evidence file in the bundle ``d``.

    Returns (figures compared, differences as one line each). A row naming a file outside
    the bundle or a field that is not there is a difference."""
    import json

    d = Path(d)
    md = md if md is not None else (d / "report.md").read_text(encoding="utf-8")
    html = html if html is not None else ((d / "report.html").read_text(encoding="utf-8")
                                          if (d / "report.html").exists() else None)
    rows = parse_figures_table(md)
    bad: list[str] = []
    if not rows:
        return 0, ["report.md has no table 'Figures and their sources'"]
    cache: dict[str, dict] = {}

    def read(rel):
        if rel not in cache:
            p = (d / rel).resolve()
            if d.resolve() not in p.parents:
                raise KeyError(rel)
            cache[rel] = json.loads(p.read_text(encoding="utf-8"))
        return cache[rel]

    for r in rows:
        src, complement = r["source"], r["source"].startswith("1 - ")
        src = src.removeprefix("1 - ")
        field, _, of = (x.strip() for x in src.partition(" / "))
        try:
            value = derive(read, r["file"], field, of, complement)
        except (KeyError, OSError, ValueError, TypeError, ZeroDivisionError) as exc:
            bad.append(f"figure {r['id']}: {r['file']} {src}: cannot be read ({type(exc).__name__})")
            continue
        want = figure_text(_kind_of(r["text"]), value)
        if want != r["text"]:
            bad.append(f"figure {r['id']} ({r['label']}): report.md says {r['text']}, {r['file']} {r['source']} "
                       f"gives {want}")
        if html is not None:
            m = re.search(rf'id="fig-{re.escape(r["id"])}"[^>]*>([^<]*)<', html)
            if m is None or m.group(1).strip() != want:
                bad.append(f"figure {r['id']}: report.html says {m.group(1).strip() if m else 'nothing'}, "
                           f"{r['file']} gives {want}")
            for shown in re.findall(rf'data-fig="{re.escape(r["id"])}"[^>]*>([^<]*)<', html):
                if shown.strip() != want:
                    bad.append(f"figure {r['id']}: report.html shows {shown.strip()} on its first screen, "
                               f"{r['file']} gives {want}")
    return len(rows), bad
