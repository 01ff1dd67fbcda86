"""Fault-injection campaign (issue 31): faults injected into builds, bundles, audit logs and inputs,
and what mi-certify did about each, counted and printed as one table.

    python bench/faults.py [--fast] [--seed N] [--work DIR] [--kinds tamper,kill,...]

Fault kinds (docs/reliability.md says what each does and what "caught" means):

- ``tamper``: seeded single-byte and structural edits of every file manifest.json hashes in a
  reference bundle, the manifest hash rewritten to match; ``check --quick`` must FAIL (exit 1),
  print the summary line and the certificate verdict, never PASS, never a traceback.
- ``kill``: SIGKILL of a build after a stage line (and at seeded times): nothing published in
  ``--out``, no process left; the next build into the same ``--out`` succeeds and its hashed files
  are byte-identical to the reference build's.
- ``disk_full``: a build, a check (``--json``) and a live run (``--audit``) writing into a small
  tmpfs: one clear error, no traceback, nothing published that looks valid, the audit log intact
  up to its last complete record.
- ``power_loss``: an audit log truncated at every byte offset of its last records: ``audit verify``
  names the torn tail, the chain verifies, a restarted writer continues the chain.
- ``fuzz_sla`` / ``fuzz_onnx``: hypothesis-generated sla.yaml documents (``check-spec``) and
  mutated ONNX protobufs of the shipped model (``inspect --sla``), run through the CLI's ``main``:
  no traceback, no hang over 10 s, every refusal one line naming the file.
- ``concurrency``: two ``run``s appending to one audit log, two builds into one ``--out``,
  ``check`` while a build writes: refused or serialised, never interleaved.

The fast mode (``--fast``; tests/e2e/test_faults.py runs it) uses a small bundle (the shipped
meta controller with 9 address bits, ``--no-verify --sample-lut --skip-cosim --skip-synth``) and
fewer cases; the long mode sweeps the checked-in reference bundle certs/meta_controller too.
Every subprocess runs with a timeout, in its own session, and carries a marker in its
environment: a process still alive with that marker after its case is an orphan (counted, then
killed by its pid).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
REF_MODEL = EXAMPLES / "meta_controller" / "controller.onnx"
REF_SLA = EXAMPLES / "meta_controller" / "sla.yaml"
CERTS = ROOT / "certs" / "meta_controller"
WORKLOAD = EXAMPLES / "workload" / "convnet.onnx"
TRACE = EXAMPLES / "workload" / "incident.csv"
MARK = "MI_CERTIFY_FAULT_CASE"
TRACEBACK = "Traceback (most recent call last)"
#: the last line of ``check`` (generator/bundle/standing.py ``certification``)
SUMMARY = re.compile(r"^\d+ passed, \d+ failed, \d+ skipped: (OK|FAILED|INCOMPLETE)(: CERTIFIED \(|.*NOT CERTIFIED)")
#: the small bundle's build options (fast: no network verification, the LUT sampled)
SMALL_OPTS = ("--no-verify", "--sample-lut", "--skip-cosim", "--skip-synth", "--seed", "1")


@dataclass
class Row:
    """One fault kind's counts. ``caught``: cases that ended as the kind requires."""

    kind: str
    tried: int = 0
    caught: int = 0
    tracebacks: int = 0
    false_pass: int = 0
    orphans: int = 0
    records_lost: int = 0
    hangs: int = 0
    #: refusals whose message runs over more than one line (a defect counted apart: caught, not clean)
    multiline: int = 0
    notes: list[str] = field(default_factory=list)
    done: bool = True

    def note(self, text: str, limit: int = 6) -> None:
        if len(self.notes) < limit:
            self.notes.append(text)


# --- processes ---------------------------------------------------------------------------------

@dataclass
class Result:
    rc: int | None
    out: str
    err: str
    hung: bool
    orphans: int
    seconds: float

    @property
    def traceback(self) -> bool:
        return TRACEBACK in self.out or TRACEBACK in self.err


def _marked(token: str) -> list[int]:
    """Live (not zombie) processes whose environment holds MARK=token."""
    want = f"{MARK}={token}".encode() + b"\0"
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as fh:
                if want not in fh.read() + b"\0":
                    continue
            with open(f"/proc/{d}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
        except OSError:
            continue
        pids.append(int(d))
    return pids


def reap(token: str, grace: float = 3.0) -> int:
    """Processes left with this case's marker after ``grace`` seconds: counted, then killed by pid."""
    deadline = time.monotonic() + grace
    while (left := _marked(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(left)


def cli_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "mi_certify.generator.cli", *map(str, args)]


def start(cmd: list[str], token: str, cwd=None) -> subprocess.Popen:
    env = {**os.environ, MARK: token, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)


def finish(p: subprocess.Popen, token: str, timeout: float, t0: float | None = None) -> Result:
    """Wait for ``p`` at most ``timeout`` s (killing its session on expiry), then count its orphans."""
    t0 = time.monotonic() if t0 is None else t0
    hung = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    return Result(p.returncode, out, err, hung, reap(token), time.monotonic() - t0)


def run(cmd: list[str], timeout: float, cwd=None) -> Result:
    token = uuid.uuid4().hex
    t0 = time.monotonic()
    return finish(start(cmd, token, cwd), token, timeout, t0)


# --- bundles -----------------------------------------------------------------------------------

def small_spec(dst: Path) -> Path:
    """The shipped meta controller's sla.yaml with 9 address bits (2+2+2+1+2), a case-statement LUT
    and 10,000 co-simulation cycles: a bundle of every file kind that builds in seconds."""
    text = REF_SLA.read_text(encoding="utf-8")
    for old, new in (("max: 1,    bits: 4}", "max: 1,    bits: 2}"), ("max: 1024, bits: 3}", "max: 1024, bits: 2}"),
                     ("max: 64,   bits: 3}", "max: 64,   bits: 2}"), ("max: 110,  bits: 3}", "max: 110,  bits: 2}"),
                     ("encoding: sliced_rom", "encoding: case"), ("cycles: 100000", "cycles: 10000")):
        assert old in text, old
        text = text.replace(old, new)
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "sla.yaml").write_text(text, encoding="utf-8")
    return dst / "sla.yaml"


def build_cmd(sla: Path, out: Path) -> list[str]:
    return cli_cmd("build", REF_MODEL, "--sla", sla, "--out", out, *SMALL_OPTS)


def build_small(work: Path, out: Path) -> Path:
    """Build the small bundle into ``out`` (raises RuntimeError when the build fails)."""
    res = run(build_cmd(small_spec(work / "spec"), out), timeout=600)
    if res.rc != 0:
        raise RuntimeError(f"the small reference build failed (exit {res.rc}): {res.err[-2000:]}")
    return out


def hashed(bundle: Path) -> dict[str, str]:
    return json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))["files"]


def same_hashed(a: Path, b: Path) -> list[str]:
    """Hashed files (and manifest.json) of bundle ``b`` that differ from ``a``'s; [] when byte-identical."""
    fa = hashed(a)
    differ = [] if (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes() else ["manifest.json"]
    return differ + [rel for rel in fa if not (b / rel).is_file() or (a / rel).read_bytes() != (b / rel).read_bytes()]


def rehash(bundle: Path, rel: str) -> None:
    """Rewrite manifest.json's hash of ``rel`` (and the input's, for the model and the spec) to match the file."""
    m = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    digest = hashlib.sha256((bundle / rel).read_bytes()).hexdigest()
    m["files"][rel] = digest
    for ent in m.get("inputs", {}).values():
        if isinstance(ent, dict) and ent.get("path") == rel:
            ent["sha256"] = digest
    (bundle / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def check_items(out: str) -> dict[str, str]:
    """{item name: status} of ``check``'s stdout."""
    items = {}
    for ln in out.splitlines():
        if ln[:4] in ("PASS", "FAIL", "SKIP"):
            parts = ln.split("  ")
            if len(parts) > 1:
                items[parts[1]] = ln[:4]
    return items


# --- tamper ------------------------------------------------------------------------------------

def _json_leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_leaves(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _json_leaves(v, path + (i,))
    else:
        yield path, obj


def structural_edit(rel: str, data: bytes, rng: random.Random, n_actions: int) -> tuple[bytes, str]:
    """A change of the file's structure rather than of one byte; returns (new bytes, what was done)."""
    if rel == "lut.hex":  # a token no action has: what a forger who does not know the format writes
        lines = data.decode().splitlines()
        i = rng.randrange(len(lines))
        tok = rng.randrange(n_actions, 0x80)
        lines[i] = f"{(int(lines[i], 16) & 0x80) | tok:02x}"
        return ("\n".join(lines) + "\n").encode(), f"entry {i} := token {tok} (no such action)"
    if rel.endswith(".json"):
        doc = json.loads(data)
        leaves = [(p, v) for p, v in _json_leaves(doc) if p]
        if leaves:
            path, v = rng.choice(leaves)
            new = (not v if isinstance(v, bool) else v + 1 if isinstance(v, int) else v * 1.5 + 1
                   if isinstance(v, float) else (v + "x" if v else "x") if isinstance(v, str) else 0)
            tgt = doc
            for k in path[:-1]:
                tgt = tgt[k]
            tgt[path[-1]] = new
            return json.dumps(doc, indent=2).encode() + b"\n", f"field {'.'.join(map(str, path))} := {new!r:.40}"
    if rel.endswith((".v", ".py", ".md", ".smt2", ".yaml", ".html", ".hex")):
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        if rng.random() < 0.5 or len(lines) < 3:
            lines.insert(i, lines[i])
            return b"\n".join(lines), f"line {i + 1} duplicated"
        del lines[i]
        return b"\n".join(lines), f"line {i + 1} deleted"
    cut = rng.randrange(len(data) // 2, len(data)) if len(data) > 1 else 0
    return data[:cut], f"truncated to {cut} of {len(data)} bytes"


def byte_edit(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    i = rng.randrange(len(data))
    x = rng.randrange(1, 256)
    return data[:i] + bytes([data[i] ^ x]) + data[i + 1:], f"byte {i} ^= 0x{x:02x}"


def tamper(ref: Path, work: Path, edits: int, seed: int, files: int | None = None, jobs: int = 2,
           label: str = "tamper") -> Row:
    """``edits`` seeded edits (alternately byte and structural) of each of ``files`` hashed files (all
    when None) of bundle ``ref``, each in a fresh copy with the hash rewritten; ``check --quick`` on each."""
    row = Row(label)
    rng = random.Random(seed)
    rels = sorted(hashed(ref))
    if files is not None:
        keep = {"lut.hex"} | set(rng.sample(rels, min(files, len(rels))))
        rels = [r for r in rels if r in keep][:max(files, 1)] if files < len(rels) else rels
        if "lut.hex" not in rels:
            rels[-1] = "lut.hex"
    n_actions = 4
    clean = run(cli_cmd("check", "--quick", ref), timeout=600)
    clean_items = set(check_items(clean.out))
    cases = []
    for rel in rels:
        data = (ref / rel).read_bytes()
        for k in range(edits):
            r = random.Random(f"{seed}:{rel}:{k}")
            new, what = (structural_edit(rel, data, r, n_actions) if k % 2 == 0 or rel == "lut.hex"
                         else byte_edit(data, r)) if data else (b"x", "empty file given a byte")
            if new == data:
                new, what = byte_edit(data, r)
            cases.append((rel, k, new, what))

    def one(case):
        rel, k, new, what = case
        d = work / f"t{abs(hash((rel, k))) % 10**8}-{k}"
        shutil.copytree(ref, d)
        (d / rel).write_bytes(new)
        rehash(d, rel)
        res = run(cli_cmd("check", "--quick", d), timeout=600)
        shutil.rmtree(d, ignore_errors=True)
        return rel, what, res

    with ThreadPoolExecutor(jobs) as pool:
        for rel, what, res in pool.map(one, cases):
            row.tried += 1
            row.tracebacks += res.traceback
            row.hangs += res.hung
            row.orphans += res.orphans
            items = check_items(res.out)
            last = res.out.strip().splitlines()[-1] if res.out.strip() else ""
            if res.rc in (0, 3):
                row.false_pass += 1
                row.note(f"false PASS (exit {res.rc}): {rel} {what}", limit=99)
            fails = [ln for ln in res.out.splitlines() if ln.startswith("FAIL")]
            named = any(rel in ln or Path(rel).name in ln for ln in fails)
            if res.rc == 1 and SUMMARY.match(last) and not res.traceback and "certificate verdict" in items:
                row.caught += 1
                if not named:
                    row.note(f"FAIL not naming {rel} ({what})")
                missing = clean_items - set(items)
                if missing and not (items.get("inputs: spec and model load") == "FAIL"):
                    row.note(f"{rel} ({what}): {len(missing)} items of the clean check not printed")
            else:
                row.note(limit=99, text=f"not caught: {rel} {what}: exit {res.rc}, last line {last[:60]!r}"
                         + (f", traceback {res.err.strip().splitlines()[-1][:100]}" if res.traceback else ""))
    return row


# --- kill -9 -----------------------------------------------------------------------------------

STAGE_LINE = re.compile(r"^[✓✗] ")


def kill_build(ref: Path, work: Path, kills: int, seed: int) -> Row:
    """``kills`` builds into one --out, each SIGKILLed (the whole session: what a power cut or the OOM
    killer does to the build and its tools) after a seeded stage line or at a seeded time; after each,
    nothing may be published and no process left, and a build into the same --out must succeed with
    hashed files byte-identical to ``ref``."""
    row = Row("kill -9 build")
    rng = random.Random(seed)
    sla = small_spec(work / "spec")
    out = work / "kill" / "out"
    out.parent.mkdir(parents=True, exist_ok=True)
    for i in range(kills):
        after = rng.randrange(0, 8)  # stage lines seen before the kill (the small build prints 11)
        delay = rng.uniform(0.0, 1.0)
        token = uuid.uuid4().hex
        p = start(build_cmd(sla, out), token)
        seen, lines = 0, []
        t0 = time.monotonic()

        def pump(stream):
            for ln in stream:
                lines.append(ln)
        ths = [threading.Thread(target=pump, args=(st,), daemon=True) for st in (p.stdout, p.stderr)]
        for th in ths:
            th.start()
        while p.poll() is None and time.monotonic() - t0 < 300:
            seen = sum(1 for ln in lines if STAGE_LINE.match(ln))
            if seen >= after:
                break
            time.sleep(0.05)
        time.sleep(delay)
        finished_first = p.poll() is not None
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        for th in ths:
            th.join(timeout=10)
        orphans = reap(token)
        row.orphans += orphans
        row.tried += 1
        published = out.exists()
        ok = not published or finished_first
        if published and not finished_first:
            row.false_pass += 1
            row.note(f"kill {i}: --out published after a kill after {seen} stage lines")
        rebuild = run(build_cmd(sla, out), timeout=600)
        row.tracebacks += rebuild.traceback
        row.orphans += rebuild.orphans
        differ = same_hashed(ref, out) if rebuild.rc == 0 else ["(build failed)"]
        if rebuild.rc != 0 or differ:
            ok = False
            row.note(f"kill {i}: rebuild exit {rebuild.rc}, differs in {differ[:3]}")
        if orphans:
            ok = False
            row.note(f"kill {i}: {orphans} process(es) left after the kill")
        row.caught += ok
        row.note(f"kill {i}: after {seen} stage lines + {delay:.2f} s" + (" (build had finished)" if finished_first
                                                                         else ""), limit=20)
        shutil.rmtree(out, ignore_errors=True)
    leftovers = [p.name for p in out.parent.iterdir() if p.name != "out"]
    if leftovers:
        row.note(f"left in the parent of --out: {leftovers[:3]}")
    return row


# --- disk full ---------------------------------------------------------------------------------

@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs of ``size`` at ``path`` (root only); yields False when it cannot be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                         timeout=30)
    try:
        yield res.returncode == 0
    finally:
        if res.returncode == 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def one_error_line(err: str) -> bool:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    return len(lines) == 1


def disk_full(ref: Path, work: Path, sizes: list[str]) -> Row:
    row = Row("disk full (tmpfs)")
    sla = small_spec(work / "spec")
    key = work / "audit.key"
    key.write_bytes(b"k" * 32)
    for n, size in enumerate(sizes):
        mnt = work / f"tmpfs{n}"
        with tmpfs(mnt, size) as ok:
            if not ok:
                row.done = False
                row.note("mount -t tmpfs failed (not root?): not done")
                return row
            # a build
            res = run(build_cmd(sla, mnt / "out"), timeout=600)
            row.tried += 1
            row.tracebacks += res.traceback
            row.orphans += res.orphans
            valid = (mnt / "out" / "manifest.json").exists()
            if res.rc == 0:
                row.note(f"build into {size}: fitted (exit 0)")
                row.caught += valid
            elif valid:
                row.false_pass += 1
                row.note(f"build into {size}: exit {res.rc} but --out holds a manifest")
            elif not res.traceback and one_error_line(res.err):
                row.caught += 1
            else:
                row.note(f"build into {size}: exit {res.rc}: {res.err.strip().splitlines()[-1:]}")
            for p in mnt.iterdir():
                if p.name != "out":
                    row.note(f"build into {size}: left {p.name}")
            shutil.rmtree(mnt / "out", ignore_errors=True)
            for p in mnt.iterdir():
                shutil.rmtree(p, ignore_errors=True)
            # a check writing its --json into the full file system
            filler = mnt / "filler"
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, timeout=60)
            res = run(cli_cmd("check", "--quick", ref, "--json", mnt / "check.json"), timeout=600)
            row.tried += 1
            row.tracebacks += res.traceback
            row.orphans += res.orphans
            if res.rc in (0, 3):
                row.false_pass += 1
                row.note(f"check --json into a full {size}: exit {res.rc} though check.json could not be written")
            elif res.rc == 2 and one_error_line(res.err) and not res.traceback:
                row.caught += 1
            else:
                row.note(f"check --json into a full {size}: exit {res.rc}: "
                         f"{(res.err.strip().splitlines() or [''])[-1][:120]}")
            filler.unlink()
            # a live run with its audit log on the small file system
            log = mnt / "run.log"
            res = run(cli_cmd("run", "--build", CERTS, "--workload", WORKLOAD, "--probe", f"trace:{TRACE}",
                              "--requests", "100000", "--interval", "0", "--audit", log, "--key", key,
                              "--fsync", "never"), timeout=300)
            row.tried += 1
            row.tracebacks += res.traceback
            row.orphans += res.orphans
            row.hangs += res.hung
            rep = audit_verify(log, key)
            good = rep is not None and rep.ok
            if res.rc == 0:
                row.note(f"run into {size}: exit 0 (all requests fitted?)")
            if res.rc != 0 and good and not res.traceback and one_error_line(res.err):
                row.caught += 1
            else:
                row.note(f"run into {size}: exit {res.rc}, log ok {good}: "
                         f"{(res.err.strip().splitlines() or [''])[-1][:120]}")
            if rep is not None and not rep.ok:
                row.records_lost += len(rep.findings)
    return row


def audit_verify(log: Path, key_file: Path | None):
    from mi_certify.runtime.audit import AuditError, load_key, verify_log
    try:
        return verify_log(log, load_key(key_file) if key_file else None)
    except AuditError:
        return None


# --- power loss in the audit log -----------------------------------------------------------------

def power_loss(work: Path, records: int, tail_records: int, stride: int = 1, cli_every: int = 0) -> Row:
    """A keyed log of ``records`` decisions, truncated at every ``stride``-th byte offset of its last
    ``tail_records`` records. At each cut: ``verify_log`` must find nothing but a torn tail of exactly
    the bytes after the last newline and count the complete records; a writer reopened on it must cut
    the tail, record it, continue the chain (verify ok, records = complete + 2 new), and lose no complete
    record. Every ``cli_every``-th cut also through ``mi-certify audit verify`` (exit 0, the torn tail named)."""
    from mi_certify.runtime.audit import AuditLog, verify_log
    row = Row("power loss (audit log)")
    key = b"power-loss-key-0123456789abcdef"
    src = work / "power" / "full.log"
    src.parent.mkdir(parents=True, exist_ok=True)
    with AuditLog(src, key=key, fsync="never", header={"controller": "faults"}) as log:
        for i in range(records):
            log.append("decision", {"i": i, "token": i % 4, "readings": [0.5, 1.0 * i]})
    data = src.read_bytes()
    ends = [m.end() for m in re.finditer(b"\n", data)]
    start_at = ends[-tail_records - 1]
    keyfile = work / "power" / "key"
    keyfile.write_bytes(key)
    cut_log = work / "power" / "cut.log"
    for n, off in enumerate(range(start_at, len(data) + 1, stride)):
        cut_log.write_bytes(data[:off])
        complete = data[:off].count(b"\n")
        torn = off - (data[:off].rfind(b"\n") + 1)
        row.tried += 1
        ok = True
        try:
            rep = verify_log(cut_log, key)
            if not rep.ok or rep.torn_tail != torn or rep.records != complete:
                ok = False
                row.note(f"offset {off}: verify ok={rep.ok} torn={rep.torn_tail} (want {torn}) "
                         f"records={rep.records} (want {complete})")
            with AuditLog(cut_log, key=key, fsync="never", header={"controller": "faults"}) as log:
                log.append("decision", {"i": "after restart"})
            rep2 = verify_log(cut_log, key)
            after = cut_log.read_bytes()
            lost = complete - sum(1 for a, b in zip(after.split(b"\n"), data[:off].split(b"\n")[:complete]) if a == b)
            row.records_lost += lost
            opened = json.loads(after.split(b"\n")[complete])
            if not rep2.ok or rep2.records != complete + 3 or lost or rep2.torn_tail:  # + open, decision, close
                ok = False
                row.note(f"offset {off}: after restart ok={rep2.ok} records={rep2.records} lost={lost}")
            if torn and opened.get("recovered", {}).get("torn_bytes") != torn:
                ok = False
                row.note(f"offset {off}: the restart's open record does not name the {torn} torn bytes")
            if cli_every and n % cli_every == 0:
                cut_log.write_bytes(data[:off])
                res = run(cli_cmd("audit", "verify", cut_log, "--key", keyfile), timeout=120)
                row.tracebacks += res.traceback
                row.orphans += res.orphans
                says_torn = re.search(rf"\b{torn}\b", res.out + res.err) is not None if torn else True
                if res.rc != 0 or not says_torn:
                    ok = False
                    row.note(f"offset {off}: audit verify exit {res.rc}, torn {torn} named: {says_torn}")
        except Exception as exc:  # noqa: BLE001 - counted
            ok = False
            row.tracebacks += 1
            row.note(f"offset {off}: {type(exc).__name__}: {exc}")
        row.caught += ok
    return row


# --- fuzzed inputs -----------------------------------------------------------------------------

class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def cli_in_process(argv: list[str], limit: float = 10.0) -> tuple[int | None, str, str, bool, str | None]:
    """``mi-certify argv`` through ``main`` in this process: (exit code, stdout, stderr, hung, traceback)."""
    from mi_certify.generator.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv)
        return rc, out.getvalue(), err.getvalue(), False, None
    except Hang:
        return None, out.getvalue(), err.getvalue(), True, None
    except BaseException as exc:  # noqa: BLE001 - a traceback is what is counted
        import traceback
        return None, out.getvalue(), err.getvalue(), False, "".join(traceback.format_exception(exc))[-600:]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _refusal_ok(err: str, path: Path) -> bool:
    """The refusal starts with one ``error:`` line naming the file (more lines are counted apart)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return bool(lines) and lines[0].startswith("error:") and str(path) in lines[0] \
        and sum(ln.startswith("error:") for ln in lines) == 1


def fuzz_sla(work: Path, n: int, seed: int) -> Row:
    """``n`` sla.yaml documents: the small spec with hypothesis-chosen edits (a value replaced by any
    JSON value, a key deleted, an unknown key added, at any depth) and, for one in five, a corrupted
    YAML text; ``check-spec`` on each."""
    import yaml
    from hypothesis import HealthCheck, given, settings, strategies as st
    from hypothesis import seed as hseed

    row = Row("fuzz sla.yaml (hypothesis)")
    base = yaml.safe_load(small_spec(work / "spec").read_text(encoding="utf-8"))
    d = work / "fuzz_sla"
    d.mkdir(parents=True, exist_ok=True)
    values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70)
                          | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
                          lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                          max_leaves=8)
    counter = [0]

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
    @hseed(seed)
    @given(data=st.data())
    def case(data):
        doc = json.loads(json.dumps(base))
        for _ in range(data.draw(st.integers(1, 3))):
            paths = [p for p, _ in _all_paths(doc)]
            path = data.draw(st.sampled_from(paths))
            what = data.draw(st.sampled_from(["replace", "delete", "add"]))
            parent = doc
            for k in path[:-1]:
                parent = parent[k]
            if not path:
                continue
            k = path[-1]
            if what == "replace":
                parent[k] = data.draw(values)
            elif what == "delete" and isinstance(parent, dict):
                del parent[k]
            elif what == "delete" and isinstance(parent, list) and len(parent) > 0:
                parent.pop(k)
            elif isinstance(parent, dict):
                parent[data.draw(st.text(min_size=1, max_size=8))] = data.draw(values)
        text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
        if data.draw(st.integers(0, 4)) == 0:
            b = bytearray(text.encode())
            for _ in range(data.draw(st.integers(1, 4))):
                b[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
            raw = bytes(b)
        else:
            raw = text.encode()
        counter[0] += 1
        p = d / f"sla_{counter[0] % 8}.yaml"
        p.write_bytes(raw)
        _judge(row, cli_in_process(["check-spec", str(p)]), p, raw)

    case()
    return row


def _all_paths(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _all_paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _all_paths(v, path + (i,))


def _judge(row: Row, res, path: Path, raw: bytes) -> None:
    rc, out, err, hung, tb = res
    row.tried += 1
    row.hangs += hung
    if tb:
        row.tracebacks += 1
        sample = path.parent / f"traceback_{row.tracebacks}{path.suffix}"
        sample.write_bytes(raw)
        row.note(f"traceback ({sample.name}): {tb.strip().splitlines()[-1][:160]}")
    elif hung:
        row.note(f"hang over 10 s: {path.name}")
    elif rc == 0 or (rc == 2 and _refusal_ok(err, path)):
        row.caught += 1
        if rc == 2 and len([ln for ln in err.splitlines() if ln.strip()]) > 1:
            row.multiline += 1
            row.note(f"refusal over {len(err.strip().splitlines())} lines: {err.strip()[:140]!r}", limit=3)
    else:
        row.note(f"exit {rc}, refusal not one line naming the file: {err.strip()[:160]!r}")


def onnx_mutants(n: int, seed: int, d: Path) -> list[Path]:
    """``n`` mutated copies of the shipped controller.onnx: protobuf-level edits (op type, attribute,
    dims, initializer data type or size, node inputs, a node removed, opset, output dropped) and
    byte-level ones (a byte flipped, truncated)."""
    import onnx
    base = REF_MODEL.read_bytes()
    m0 = onnx.load_from_string(base)
    rng = random.Random(seed)
    d.mkdir(parents=True, exist_ok=True)
    ops = ["Relu", "Gemm", "MatMul", "Add", "Softmax", "Sigmoid", "Conv", "Identity", "Foo", ""]
    paths = []
    for i in range(n):
        kind = rng.randrange(10)
        m = onnx.ModelProto()
        m.CopyFrom(m0)
        g = m.graph
        if kind == 0 and g.node:
            rng.choice(g.node).op_type = rng.choice(ops)
        elif kind == 1 and g.initializer:
            t = rng.choice(g.initializer)
            if t.dims:
                t.dims[rng.randrange(len(t.dims))] = rng.choice([0, 1, 3, 7, 1 << 20, -1])
        elif kind == 2 and g.initializer:
            t = rng.choice(g.initializer)
            if t.raw_data:
                raw = bytearray(t.raw_data)
                j = rng.randrange(len(raw))
                raw[j] ^= rng.randrange(1, 256)
                t.raw_data = bytes(raw) if rng.random() < 0.7 else bytes(raw[:rng.randrange(len(raw))])
            t.data_type = rng.choice([t.data_type, 10, 11, 6, 7, 0])
        elif kind == 3 and g.node:
            nd = rng.choice(g.node)
            if nd.input:
                nd.input[rng.randrange(len(nd.input))] = rng.choice([x.name for x in g.initializer] + ["nope", ""])
        elif kind == 4 and g.node:
            del g.node[rng.randrange(len(g.node))]
        elif kind == 5:
            m.opset_import[0].version = rng.choice([1, 5, 7, 9, 11, 99, 0])
        elif kind == 6 and g.node:
            nd = rng.choice(g.node)
            for a in nd.attribute:
                if a.type == onnx.AttributeProto.INT:
                    a.i = rng.choice([-1, 0, 1, 2, 1 << 40])
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = rng.choice([0.0, -1.0, float("nan"), 1e30])
        elif kind == 7:
            vi = rng.choice(list(g.input) + list(g.output))
            dims = vi.type.tensor_type.shape.dim
            if dims:
                dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 2, 4, 1 << 30])
        elif kind == 8 and len(g.output):
            if rng.random() < 0.5:
                del g.output[0]
            else:
                g.output[0].type.tensor_type.elem_type = rng.choice([7, 10, 11, 0])
        raw = m.SerializeToString() if kind <= 8 else base
        if kind == 9 or rng.random() < 0.2:
            raw = bytearray(raw)
            if rng.random() < 0.5:
                j = rng.randrange(len(raw))
                raw[j] ^= rng.randrange(1, 256)
            else:
                raw = raw[:rng.randrange(len(raw))]
            raw = bytes(raw)
        p = d / f"m{i:05d}.onnx"
        p.write_bytes(raw)
        paths.append(p)
    return paths


def fuzz_onnx(work: Path, n: int, seed: int) -> Row:
    """``n`` mutated models, ``inspect MODEL --sla SPEC`` on each in a worker interpreter that writes
    one result line per model as it goes (a crash of the worker, e.g. a segfault in onnxruntime,
    counts as a traceback for that model and the worker is started again after it)."""
    row = Row("fuzz ONNX (mutated protobufs)")
    d = work / "fuzz_onnx"
    paths = onnx_mutants(n, seed, d)
    spec = small_spec(work / "spec")
    done: dict[int, dict] = {}
    results = d / "results.jsonl"
    nxt = 0
    while nxt < len(paths):
        results.write_text("")
        token = uuid.uuid4().hex
        p = start([sys.executable, __file__, "--onnx-worker", str(d), str(spec), str(nxt), str(len(paths)),
                   str(results)], token)
        res = finish(p, token, timeout=60 + 12 * (len(paths) - nxt))
        row.orphans += res.orphans
        got = [json.loads(ln) for ln in results.read_text().splitlines() if ln.strip()]
        for g in got:
            done[g["i"]] = g
        last = max([g["i"] for g in got], default=nxt - 1)
        if res.rc != 0 and last + 1 < len(paths):  # the worker died on model last + 1
            done[last + 1] = {"i": last + 1, "rc": None, "err": "", "hung": res.hung,
                              "tb": f"worker died (exit {res.rc}) on this model"}
            nxt = last + 2
        else:
            nxt = last + 1
            if res.rc != 0:
                break
    for i, p in enumerate(paths):
        g = done.get(i, {"rc": None, "err": "", "hung": False, "tb": "no result"})
        _judge(row, (g["rc"], "", g["err"], g["hung"], g["tb"]), p, p.read_bytes())
    return row


def _onnx_worker(d: str, spec: str, first: int, end: int, results: str) -> None:
    paths = sorted(Path(d).glob("m*.onnx"))[first:end]
    with open(results, "a") as fh:
        for k, p in enumerate(paths, first):
            rc, out, err, hung, tb = cli_in_process(["inspect", str(p), "--sla", spec])
            fh.write(json.dumps({"i": k, "rc": rc, "err": err, "hung": hung, "tb": tb}) + "\n")
            fh.flush()


# --- concurrency -------------------------------------------------------------------------------

def concurrency(ref: Path, work: Path, requests: int, checks: int) -> Row:
    row = Row("concurrency")
    key = work / "conc.key"
    key.write_bytes(b"c" * 32)
    # two runs appending to one audit log
    shutil.rmtree(work / "conc", ignore_errors=True)
    log = work / "conc" / "shared.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = cli_cmd("run", "--build", CERTS, "--workload", WORKLOAD, "--probe", f"trace:{TRACE}", "--requests",
                  requests, "--interval", "0", "--audit", log, "--key", key, "--fsync", "never")
    toks = [uuid.uuid4().hex for _ in range(2)]
    procs = [start(cmd, t) for t in toks]
    rs = [finish(p, t, timeout=300) for p, t in zip(procs, toks)]
    row.tried += 1
    rep = audit_verify(log, key)
    for r in rs:
        row.tracebacks += r.traceback
        row.orphans += r.orphans
        row.hangs += r.hung
    refused = [r for r in rs if r.rc == 2 and one_error_line(r.err)]
    served = [r for r in rs if r.rc == 0]
    decisions = 0
    if rep is not None:
        from mi_certify.runtime.audit import read_records
        decisions = sum(1 for ln in read_records(log)[0] if ln.record and ln.record.get("kind") == "decision")
    ok = rep is not None and rep.ok and len(served) + len(refused) == 2 and decisions == requests * len(served)
    if rep is not None and not rep.ok:
        row.records_lost += len(rep.findings)
    row.caught += ok
    if rep is not None and not rep.ok:
        row.note("two runs, one log: findings " + "; ".join(f"{f.kind} {f.seq}" for f in rep.findings[:4]))
    row.note(f"two runs, one log: exits {[r.rc for r in rs]}, log ok {rep.ok if rep else None}, "
             f"findings {len(rep.findings) if rep else '?'}, {decisions} decisions for {len(served)} served run(s)")
    # two builds into one --out
    sla = small_spec(work / "spec")
    out = work / "conc" / "out"
    toks = [uuid.uuid4().hex for _ in range(2)]
    procs = [start(build_cmd(sla, out), t) for t in toks]
    rs = [finish(p, t, timeout=600) for p, t in zip(procs, toks)]
    row.tried += 1
    for r in rs:
        row.tracebacks += r.traceback
        row.orphans += r.orphans
    differ = same_hashed(ref, out) if out.exists() else ["(no --out)"]
    ok = all(r.rc in (0, 2) for r in rs) and any(r.rc == 0 for r in rs) and not differ
    row.caught += ok
    row.note(f"two builds, one --out: exits {[r.rc for r in rs]}, differs from the reference in {differ[:3]}")
    # check while a build writes into the same --out (a previous build is there)
    token = uuid.uuid4().hex
    p = start(build_cmd(sla, out), token)
    seen = []
    while p.poll() is None or len(seen) < 1:
        res = run(cli_cmd("check", "--quick", out), timeout=600)
        row.tried += 1
        row.tracebacks += res.traceback
        row.orphans += res.orphans
        seen.append(res.rc)
        if res.rc in (2, 3) and not res.traceback:  # 2: between the two renames of publish; 3: incomplete build
            row.caught += 1
        else:
            row.note(f"check during a build: exit {res.rc}: {res.out.strip().splitlines()[-1:]} "
                     f"{[ln for ln in res.out.splitlines() if ln.startswith('FAIL')][:2]}")
        if len(seen) >= checks and p.poll() is not None:
            break
    r = finish(p, token, timeout=600)
    row.orphans += r.orphans
    row.note(f"check during a build: exits {seen}; the build exited {r.rc}")
    return row


# --- the campaign ------------------------------------------------------------------------------

KINDS = ("tamper", "kill", "disk_full", "power_loss", "fuzz_sla", "fuzz_onnx", "concurrency")


def campaign(fast: bool, seed: int, work: Path, kinds=KINDS, log=print) -> list[Row]:
    """Run the campaign; returns one Row per fault kind (and the reference sweep in the long mode)."""
    work.mkdir(parents=True, exist_ok=True)
    ref = work / "ref"
    if not (ref / "manifest.json").exists():
        build_small(work, ref)
    rows = []
    plan = {
        "tamper": lambda: tamper(ref, work / "tamper", edits=1 if fast else 2, seed=seed, files=5 if fast else None),
        "kill": lambda: kill_build(ref, work, kills=2 if fast else 8, seed=seed),
        "disk_full": lambda: disk_full(ref, work, ["256k"] if fast else ["64k", "256k", "512k"]),
        "power_loss": lambda: power_loss(work, records=40, tail_records=2 if fast else 6, stride=3 if fast else 1,
                                         cli_every=0 if fast else 97),
        "fuzz_sla": lambda: fuzz_sla(work, 150 if fast else 1000, seed),
        "fuzz_onnx": lambda: fuzz_onnx(work, 100 if fast else 1000, seed),
        "concurrency": lambda: concurrency(ref, work, requests=150 if fast else 400, checks=2 if fast else 6),
    }
    for k in kinds:
        t0 = time.monotonic()
        row = plan[k]()
        row.note(f"{time.monotonic() - t0:.0f} s", limit=99)
        log(f"{row.kind}: {row.tried} tried, {row.caught} caught ({time.monotonic() - t0:.0f} s)")
        rows.append(row)
        if k == "tamper" and not fast:
            t0 = time.monotonic()
            r2 = tamper(CERTS, work / "tamper_certs", edits=1, seed=seed, label="tamper (certs/meta_controller)")
            r2.note(f"{time.monotonic() - t0:.0f} s", limit=99)
            log(f"{r2.kind}: {r2.tried} tried, {r2.caught} caught")
            rows.append(r2)
    return rows


def table(rows: list[Row]) -> str:
    head = ("fault kind", "tried", "caught", "tracebacks", "false PASS", "orphans", "records lost", "hangs > 10 s")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = (r.kind, r.tried, r.caught, r.tracebacks, r.false_pass, r.orphans, r.records_lost, r.hangs) \
            if r.done else (r.kind, "not done", "", "", "", "", "", "")
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fast", action="store_true", help="the CI mode (a few minutes on 2 cores)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work", type=Path, help="working directory (default: a temporary one, removed)")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    ap.add_argument("--onnx-worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.onnx_worker:
        d, spec, first, end, results = args.onnx_worker
        _onnx_worker(d, spec, int(first), int(end), results)
        return 0
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mi-faults-")))
        rows = campaign(args.fast, args.seed, work, [k for k in args.kinds.split(",") if k],
                        log=lambda s: print(s, file=sys.stderr, flush=True))
    print(table(rows))
    for r in rows:
        for n in r.notes:
            print(f"  {r.kind}: {n}")
    for r in rows:
        if r.multiline:
            print(f"  {r.kind}: {r.multiline} refusal(s) printed over more than one line")
    print(f"{'fast' if args.fast else 'long'} mode, seed {args.seed}, nproc {os.cpu_count()}, "
          f"wall {time.monotonic() - t0:.0f} s")
    bad = any(r.tracebacks or r.false_pass or r.orphans or r.records_lost or r.hangs or r.caught != r.tried
              for r in rows if r.done)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
