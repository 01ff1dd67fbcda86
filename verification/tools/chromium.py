"""Headless Chromium: load a page, collect console errors and requests, save a screenshot.

Talks the Chrome DevTools Protocol over ``--remote-debugging-pipe`` (file descriptors
3 and 4, messages are JSON terminated by NUL), so it needs nothing but the Debian
``chromium`` package: no driver, no websocket library, no browser download.
Source: Chrome DevTools Protocol, domains Target, Page, Runtime, Log, Network
(chromedevtools.github.io/devtools-protocol).

Chromium runs with a fresh ``--user-data-dir`` and without background networking,
component updates, sync or first-run pages, so a page load touches nothing but the
page. "Errors" are ``console.error``/``console.assert`` calls, uncaught exceptions and
browser log entries of level error (for example a resource that fails to load).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mi_certify.verification.tools.registry import ToolUnavailable, find_tool, kill_group, require_tool, start

#: Flags for a quiet, isolated, headless browser.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--remote-debugging-pipe")


#: A page's layout problems at the window's width, as a list of strings (``load_page(evaluate=...)``):
#: a word (a run of characters between spaces, slashes and hyphens, where a line may break)
#: whose characters lie on two lines ("requi rement"); an element that clips its content
#: (overflow hidden/clip/scroll/auto and content wider than it); an element reaching past the
#: window's right edge (the page scrolls sideways). Text inside SVG, and closed <details>, are skipped.
LAYOUT_CHECK = r"""(() => {
  const out = [], vw = document.documentElement.clientWidth, range = document.createRange();
  const name = el => '<' + el.tagName.toLowerCase() + (el.id ? ' id=' + el.id : '') + '>';
  if (document.documentElement.scrollWidth > vw + 1)
    out.push('page wider than the window: ' + document.documentElement.scrollWidth + ' > ' + vw);
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  let n;
  while ((n = walker.nextNode())) {
    const el = n.parentElement;
    if (!el || el.closest('svg') || !el.getClientRects().length) continue;
    const re = /[^\s\/\-]+/g; let m;
    while ((m = re.exec(n.textContent))) {
      if (m[0].length < 2) continue;
      range.setStart(n, m.index); range.setEnd(n, m.index + m[0].length);
      const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.bottom)));
      if (tops.size > 1) out.push('word broken: "' + m[0] + '" in ' + name(el));
    }
  }
  // a word split over two text nodes by a <wbr> (a break opportunity): broken when the line
  // changes there and the text before it does not end at a separator (space, / or -)
  for (const w of document.querySelectorAll('wbr')) {
    const a = w.previousSibling, b = w.nextSibling;
    if (!a || !b || a.nodeType !== 3 || b.nodeType !== 3 || !a.textContent.length || !b.textContent.length) continue;
    if (/[\s\/\-]$/.test(a.textContent) || /^\s/.test(b.textContent)) continue;
    range.setStart(a, a.textContent.length - 1); range.setEnd(a, a.textContent.length);
    const ra = Array.from(range.getClientRects()).filter(r => r.width > 0);
    range.setStart(b, 0); range.setEnd(b, 1);
    const rb = Array.from(range.getClientRects()).filter(r => r.width > 0);
    if (ra.length && rb.length && Math.round(ra[0].bottom) !== Math.round(rb[0].bottom))
      out.push('word broken at <wbr>: "' + a.textContent.split(/[\s\/]/).pop() + b.textContent.split(/[\s\/]/)[0] + '" in ' + name(w.parentElement));
  }
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('svg') && el.tagName.toLowerCase() !== 'svg') continue;
    if (!el.getClientRects().length) continue;
    const cs = getComputedStyle(el);
    if (['hidden', 'clip', 'scroll', 'auto'].includes(cs.overflowX) && el.scrollWidth > el.clientWidth + 1)
      out.push('clipped: ' + name(el) + ' content ' + el.scrollWidth + ' px in ' + el.clientWidth + ' px');
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > vw + 1) out.push('past the right edge: ' + name(el) + ' ends at ' + Math.round(r.right) + ' > ' + vw);
  }
  return out;
})()"""


def find_chromium() -> str | None:
    """Path of the chromium executable (``MI_CERTIFY_CHROMIUM``, else ``chromium``,
    ``chromium-browser``, ``google-chrome`` on PATH: :func:`.tools.find_tool`) or None."""
    return find_tool("chromium")


@dataclass
class PageLoad:
    """Outcome of loading one page.

    loaded: the load event fired. errors / warnings: console and log messages
    (text with source line). requests: URLs other than the page itself and ``data:``
    URLs that the page asked for (a self-contained page has none).
    """

    loaded: bool
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    title: str = ""
    screenshot: Path | None = None
    values: list = field(default_factory=list)


class _Pipe:
    def __init__(self, proc: subprocess.Popen, wfd: int, rfd: int):
        self.proc, self.wfd, self.rfd = proc, wfd, rfd
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m is None:
                raise ToolUnavailable(f"chromium did not answer {method} within {timeout:g} s")
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise ToolUnavailable(f"chromium: {method}: {m['error'].get('message')}")
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def _read(self, deadline: float) -> dict | None:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def wait_event(self, method: str, deadline: float) -> bool:
        while True:
            if any(e["method"] == method for e in self.events):
                return True
            m = self._read(deadline)
            if m is None:
                return False
            if "method" in m:
                self.events.append(m)

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (m := self._read(deadline)) is not None:
            if "method" in m:
                self.events.append(m)


def _high_fd(fd: int) -> int:
    new = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return new


def load_page(page: Path, screenshot: Path | None = None, width: int = 1280, timeout_s: float = 60.0,
              evaluate: tuple[str, ...] = ()) -> PageLoad:
    """Open ``page`` (a local file) in headless Chromium and report what happened.

    Args:
        screenshot: where to save a full-page PNG (height capped at 16000 px).
        evaluate: JavaScript expressions evaluated in the loaded page at ``width`` (DevTools
            ``Runtime.evaluate``, which a page's Content-Security-Policy does not block); their
            JSON values go to ``PageLoad.values`` in order (:data:`LAYOUT_CHECK` is one).
    Raises:
        ToolUnavailable (:class:`mi_certify.generator.core.errors.ToolMissingError`) when chromium is
        not installed or does not answer; OSError when it cannot start.
    """
    exe = require_tool("chromium")
    url = Path(page).resolve().as_uri()
    to_child_r, to_child_w = (_high_fd(f) for f in os.pipe())
    from_child_r, from_child_w = (_high_fd(f) for f in os.pipe())

    def wire():  # in the child: its fd 3 reads our commands, its fd 4 writes answers
        os.dup2(to_child_r, 3)
        os.dup2(from_child_w, 4)

    with tempfile.TemporaryDirectory(prefix="mi-certify-chromium-") as profile:
        # its own process group, dying with us (.tools.start); fds 3 and 4 survive exec
        proc = start([exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, preexec_fn=wire, close_fds=False)
        os.close(to_child_r)
        os.close(from_child_w)
        pipe = _Pipe(proc, to_child_w, from_child_r)
        try:
            return _drive(pipe, url, screenshot, width, timeout_s, evaluate)
        finally:
            try:
                os.write(to_child_w, json.dumps({"id": 10**6, "method": "Browser.close"}).encode() + b"\0")
            except OSError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            finally:
                kill_group(proc)   # a browser that did not close, and any helper process left behind
            os.close(to_child_w)
            os.close(from_child_r)


def _drive(pipe: _Pipe, url: str, screenshot: Path | None, width: int, timeout_s: float,
           evaluate: tuple[str, ...] = ()) -> PageLoad:
    target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    sid = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Page", "Network"):
        pipe.send(f"{domain}.enable", session=sid)
    pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                     "mobile": False}, session=sid)
    pipe.events.clear()
    pipe.send("Page.navigate", {"url": url}, session=sid)
    loaded = pipe.wait_event("Page.loadEventFired", time.monotonic() + timeout_s)
    pipe.drain(0.3)  # late console messages
    res = PageLoad(loaded)
    for e in pipe.events:
        if e.get("sessionId") not in (None, sid):
            continue
        p = e.get("params", {})
        if e["method"] == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            if p.get("type") in ("error", "assert"):
                res.errors.append(f"console.{p['type']}: {text}")
            elif p.get("type") == "warning":
                res.warnings.append(f"console.warn: {text}")
        elif e["method"] == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            res.errors.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')} "
                              f"(line {d.get('lineNumber')})")
        elif e["method"] == "Log.entryAdded":
            entry = p.get("entry", {})
            (res.errors if entry.get("level") == "error" else res.warnings).append(
                f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
        elif e["method"] == "Network.requestWillBeSent":
            u = p.get("request", {}).get("url", "")
            if u != url and not u.startswith("data:"):
                res.requests.append(u)
    res.title = pipe.send("Runtime.evaluate", {"expression": "document.title", "returnByValue": True},
                          session=sid).get("result", {}).get("value", "")
    for expr in evaluate:
        r = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid, timeout=timeout_s)
        if "exceptionDetails" in r:
            raise ToolUnavailable(f"chromium: the expression raised: {r['exceptionDetails'].get('text')} "
                                  f"{r['exceptionDetails'].get('exception', {}).get('description', '')}"[:400])
        res.values.append(r.get("result", {}).get("value"))
    if screenshot is not None and loaded:
        m = pipe.send("Page.getLayoutMetrics", session=sid)
        height = int(min(16000, max(900, m.get("cssContentSize", m.get("contentSize", {})).get("height", 900))))
        pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=sid)
        shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=sid, timeout=timeout_s)
        Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
        res.screenshot = Path(screenshot)
    return res
