"""Jinja templates of mi-certify, grouped by target (edalize's ``templates/<tool>/`` habit):
python/ (the runtime), c/ (the C99 runtime and its co-simulation harness), verilog/ (RTL, test benches),
report/ (report.md, report.html),
yosys/ (Yosys scripts), verilator/ (the C++ main of the coverage bench).

:func:`environment` is the one Jinja environment that renders them all, names relative
to this package (``"yosys/smt2.ys.j2"``, ``"report/report.html.j2"``).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2
    import markupsafe

__all__ = ["FILTERS", "environment"]


def _fraction(x: float) -> str:
    f = Fraction(x)
    return f"Fraction({f.numerator}, {f.denominator})"


def _path_breaks(text: object) -> "markupsafe.Markup":
    """HTML for a file path (or a list of them) that may wrap after each ``/`` (never inside a
    file name): the text escaped, then ``<wbr>`` (a line-break opportunity, no hyphen) after each
    separator, so a report column of long evidence paths does not widen the table past the window."""
    import markupsafe

    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(escaped.replace("/", "/<wbr>"))


#: Filters for every template: Python literals for the emitted runtime (fraction, float_repr,
#: pytuple, pyrepr, opt_float), number formats for the report (fmt, xs) and path wrapping in
#: report.html (path_breaks: after each ``/``).
FILTERS = {
    "fraction": _fraction,                      # exact rational of a float: "Fraction(1, 3)"
    "float_repr": repr,
    "pytuple": lambda items: repr(tuple(items)),
    "pyrepr": repr,
    "opt_float": lambda x: "None" if x is None else repr(float(x)),
    "fmt": lambda v, f="{:.6g}": f.format(v) if isinstance(v, (int, float)) else str(v),
    "xs": lambda xs: "[" + ", ".join(f"{v:.6g}" for v in xs) + "]",
    "path_breaks": _path_breaks,
}


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    """The shared Jinja environment (cached: one per process) over this package's files.

    Options: StrictUndefined (a missing variable is an error, not an empty string);
    trim_blocks and lstrip_blocks (a ``{% %}`` line leaves no blank line or indent);
    keep_trailing_newline (a file ends as its template does); autoescape for ``*.html.j2``
    only (HTML escaping in report.html, none in Python, Verilog, Yosys or C++ output, none
    for ``from_string`` templates); the :data:`FILTERS`. Every caller names a template by its
    target folder (``verilog/fsm.v.j2``, ``report/report.md.j2``, ``yosys/smt2.ys.j2``).
    Raises nothing itself; ``get_template`` raises ``jinja2.TemplateNotFound``.
    """
    import jinja2
    from importlib import resources

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(resources.files(__name__))),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True,
                             autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2",),
                                                                 disabled_extensions=(), default_for_string=False,
                                                                 default=False))
    env.filters.update(FILTERS)
    return env
