"""One exception family for every located, user-facing error of mi-certify.

Every error carries the file it concerns, the field (sla.yaml path such as
``properties[1].when.temperature_c``) or node (ONNX node name and op type) and a
reason. The CLI prints ``str(err)`` as one line and exits with ``err.exit_code``.
"""

from __future__ import annotations


class MiCertifyError(Exception):
    """Base of all mi-certify errors.

    Attributes:
        file: path of the offending input file, or None.
        where: field path (spec) or node description (model), or None.
        reason: human-readable reason, one sentence.
        exit_code: process exit code the CLI uses (2 for bad input).
    """

    exit_code = 2

    def __init__(self, reason: str, *, file: str | None = None, where: str | None = None):
        self.file = str(file) if file is not None else None
        self.where = where
        self.reason = reason
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = []
        if self.file:
            parts.append(self.file)
        if self.where:
            parts.append(self.where)
        head = ": ".join(parts)
        return one_line(f"{head}: {self.reason}" if head else self.reason)


def first_line(exc: BaseException) -> str:
    """The first line of what ``exc`` says (its type's name when it says nothing): a library's
    multi-line message cut to its headline for a one-line error."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def one_line(text: str) -> str:
    """``text`` as one printable line: a character that is not printable (a line break, a control
    character that ``str.splitlines`` or a terminal would break at, e.g. U+001C from a fuzzed
    field name) is written as its escape (``\\n``, ``\\x1c``); the error stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class ModelImportError(MiCertifyError):
    """The ONNX model cannot be imported exactly (unsupported op, version, shape...)."""


class ModelMismatchError(ModelImportError):
    """The imported IR does not evaluate like onnxruntime within tolerance."""


class SpecError(MiCertifyError):
    """sla.yaml is malformed or inconsistent (schema, names, ranges, widths)."""


class BuildError(MiCertifyError):
    """The build cannot proceed (output directory, missing tool...)."""

    exit_code = 2


class BackendError(MiCertifyError):
    """The execution backend cannot be used: a Dask scheduler that does not answer within the
    connect timeout, a cluster without workers, a worker whose mi-certify (version, source
    hash) or numerical packages differ from this process's (``where``: the scheduler or worker
    address). Raised by :mod:`mi_certify.verification.tools.backends` before any task runs, or when
    a mismatched worker joins later."""

    exit_code = 2


class TaskLostError(MiCertifyError):
    """A task's worker was lost more often than the backend's retries allow (``where``: the
    task; ``reason`` says how often and the last worker). Nothing is merged: the run fails."""

    exit_code = 1


class ToolMissingError(BuildError):
    """An external tool is not installed, too old, or does not run or answer.

    Raised by :func:`mi_certify.verification.tools.registry.require_tool` (also known there as
    ``ToolUnavailable``). Attributes besides MiCertifyError's: tool (command name), found
    (None, or ``"<path>: <version line>"``), minimum (dotted version or None), package
    (the Debian package that installs it).
    """

    def __init__(self, reason: str, *, tool: str | None = None, found: str | None = None,
                 minimum: str | None = None, package: str | None = None, file: str | None = None,
                 where: str | None = None):
        self.tool, self.found, self.minimum, self.package = tool, found, minimum, package
        super().__init__(reason, file=file, where=where)
