"""The words a report, a summary, ``mi-certify check`` and the CLI use for what a claim's
standing is: one vocabulary that never says more than was shown (issue 32).

=================  ==================================================================
word               what was shown
=================  ==================================================================
proved             a sound procedure proved it (CROWN, Marabou, Z3, exhaustive count)
checked by test    a test found no difference (co-simulation, lint, witness replay)
assumed            nothing here shows it: someone named must ensure it (the integrator,
                   the SLA monitor at run time); it is an assumption of use
resolved           a decision was made where the evidence left a choice (a LUT cell that
                   holds several actions gets the documented policy's entry): with why
open               not shown: a violated, failed or undecided obligation (fails closed)
=================  ==================================================================

A bundle is **certified** only when it is signed and ``mi-certify check`` verified the
signature and passed every item (:func:`certification`); the report, written before any
signature, never says so of itself.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ASSUMED", "CHECKED", "OPEN", "PROVED", "RESOLVED", "WORDS", "Standing", "certification",
           "obligation_standing", "weakest"]

PROVED = "proved"
CHECKED = "checked by test"
ASSUMED = "assumed"
RESOLVED = "resolved"
OPEN = "open"

#: Every word, strongest first (:func:`weakest` orders by this).
WORDS = (PROVED, CHECKED, RESOLVED, ASSUMED, OPEN)

#: Obligation verdicts (:class:`mi_certify.generator.core.results.Verdict` words) and their standing word.
_BY_VERDICT = {"proved": PROVED, "holds": PROVED, "passed": CHECKED}


@dataclass(frozen=True)
class Standing:
    """A word of :data:`WORDS` and the words after it: ``why`` (resolved: the reason),
    ``who`` (assumed: who must ensure it), ``detail`` (anything else shown in brackets)."""

    word: str
    why: str = ""
    who: str = ""
    detail: str = ""

    def __post_init__(self):
        if self.word not in WORDS:
            raise ValueError(f"{self.word!r} is not a standing word ({', '.join(WORDS)})")

    @property
    def text(self) -> str:
        """The words as printed: ``assumed (ensured by: the integrator's SLA monitor)``,
        ``resolved (why: ...)``, ``proved (unreachable)``."""
        extra = "; ".join(x for x in (self.detail, f"why: {self.why}" if self.why else "",
                                      f"ensured by: {self.who}" if self.who else "") if x)
        return f"{self.word} ({extra})" if extra else self.word

    @property
    def css(self) -> str:
        """A CSS class name of the word (``checked-by-test``)."""
        return self.word.replace(" ", "-")


def obligation_standing(o: dict) -> Standing:
    """The standing of one obligation (an obligations.json entry: ``id``, ``verdict``).

    A reachability obligation (``network.reachability.<action>``) says what it found:
    proved (reachable: a replayed witness) or proved (unreachable); undecided is open."""
    if o["id"].startswith("network.reachability."):
        found = {"violated": "reachable, replayed witness", "proved": "unreachable"}.get(o["verdict"])
        return Standing(PROVED, detail=found) if found else Standing(OPEN, detail="reachability undecided")
    word = _BY_VERDICT.get(o["verdict"], OPEN)
    return Standing(word, detail="" if word != OPEN else o["verdict"])


def weakest(words) -> str:
    """The weakest of ``words`` (the standing of a requirement that rests on all of them); OPEN
    for none."""
    words = list(words)
    return max(words, key=WORDS.index) if words else OPEN


def certification(*, passed: bool, skipped: bool, signed: bool, signature_checked: bool) -> str:
    """The one line ``mi-certify check`` ends with: CERTIFIED only for a signed bundle whose
    signature was verified and whose every item passed; otherwise a plain statement of what is
    and is not established."""
    if not passed:
        return "FAILED: NOT CERTIFIED (see the FAIL lines above)"
    if skipped:  # what the signature shows is said too (a signed bundle checked without --pubkey)
        sig = ("signature verified" if signed and signature_checked else
               "manifest.json.sig is present but was not verified: pass --pubkey KEY.pub" if signed else
               "the bundle is unsigned")
        return f"INCOMPLETE: NOT CERTIFIED (items were skipped; see the SKIP lines above; {sig})"
    if signed and signature_checked:
        return "OK: CERTIFIED (signature verified, every item passed)"
    if signed:
        return ("OK: every item passed; NOT CERTIFIED: manifest.json.sig is present but was not verified "
                "(pass --pubkey KEY.pub)")
    return "OK: every item passed; NOT CERTIFIED: the bundle is unsigned (mi-certify sign, then check --pubkey)"
