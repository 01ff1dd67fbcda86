"""Scale-out (issue 21): distillation slices and verification campaigns on a Dask cluster give the
bytes the in-process run gives; a lost worker's task runs again; a bad scheduler, a mismatched worker
or a bad instance list is one clear error; the default path never imports dask."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ANCHORS, EXAMPLES, ROOT
from mi_certify.generator.build.distill import DistillOptions, distill
from mi_certify.generator.core.errors import BackendError, MiCertifyError, TaskLostError
from mi_certify.generator.core.lut import table_bytes
from mi_certify.generator.frontend.model import load_model
from mi_certify.generator.core.spec import load_spec
from mi_certify.verification.tools.backends import (
    BackendSpec, InlineBackend, map_ordered, open_backend, software_identity)
from mi_certify.verification.nn.campaign import read_instances, results_csv, run_campaign
from mi_certify.verification.nn.nn_verify import VerifyOptions

distributed = pytest.importorskip("distributed")
ACAS = ANCHORS / "acasxu"
#: ACAS Xu 1_1 over property 3's box, 2+1+1+1+1 address bits: 64 cells in 64 slices (proven, resolved,
#: undecided cells and witnesses: every table the distillation writes), ~2 s in one process.
ACAS_BITS = (2, 1, 1, 1, 1)
INSTANCES = """# VNN-COMP instances.csv: onnx,vnnlib,timeout
onnx/ACASXU_run2a_1_7_batch_2000.onnx,vnnlib/prop_3.vnnlib,60
onnx/ACASXU_run2a_1_1_batch_2000.onnx,vnnlib/prop_3.vnnlib,60
onnx/ACASXU_run2a_2_1_batch_2000.onnx,vnnlib/prop_2.vnnlib,60
onnx/ACASXU_run2a_1_1_batch_2000.onnx,vnnlib/prop_4.vnnlib
"""


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster of 2 worker processes (one thread each, no dashboard, loopback), a lost
    worker's task retried once (allowed-failures 1); closed after the module."""
    import dask
    from distributed import LocalCluster

    import logging
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        c = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                         host="127.0.0.1", silence_logs=logging.ERROR)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def dask_backend(cluster):
    with open_backend(BackendSpec(scheduler=cluster.scheduler_address, workers=2)) as b:
        yield b


def _acas_spec(tmp_path):
    text = (EXAMPLES / "acasxu" / "sla_prop3_box.yaml").read_text()
    for b in ACAS_BITS:
        text = text.replace("bits: 3}", f"bits: {b}}}", 1)
    p = tmp_path / "acas_small.yaml"
    p.write_text(text)
    return load_spec(p)


def _distilled_bytes(r) -> tuple[bytes, bytes, bytes, list]:
    return (r.boxes.tobytes(), r.witnesses.tobytes(), table_bytes(r.lut.tokens, r.lut.confident),
            r.lut.status.tolist())


@pytest.fixture(scope="module")
def acas_inline(tmp_path_factory):
    spec = _acas_spec(tmp_path_factory.mktemp("acas"))
    model = load_model(ACAS / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx")
    return spec, model, distill(spec, model, DistillOptions(workers=1))


def test_distillation_on_two_dask_workers_is_byte_identical_to_the_in_process_run(acas_inline, dask_backend):
    spec, model, ref = acas_inline
    c = ref.lut.counts()
    assert c["cells"] == 64 and c["proven"] >= 1 and c["resolved"] >= 1 and len(ref.witnesses) > 0
    seen = []
    got = distill(spec, model, DistillOptions(workers=1), progress=lambda done, n: seen.append(done),
                  backend=dask_backend)
    assert _distilled_bytes(got) == _distilled_bytes(ref) and got.stats == ref.stats
    assert seen == [k for k in range(1, 65)] and len(dask_backend.tasks) == 64   # one slice a cell here
    assert len({t.worker for t in dask_backend.tasks}) == 2                     # both workers took slices


def _kill_once(marker: str, fn, item):
    """Task body for the lost-worker test: the first call anywhere SIGKILLs its own worker process
    (the marker file says it happened), every later call computes ``fn(item)``."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return fn(item)
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_always(fn, item):
    os.kill(os.getpid(), signal.SIGKILL)


class _Faulty:
    """A backend that runs ``wrap(fn)`` instead of ``fn`` on another backend (fault injection)."""

    def __init__(self, inner, wrap):
        self.inner, self.wrap = inner, wrap

    def map_ordered(self, fn, items, on_result=None):
        return self.inner.map_ordered(self.wrap(fn), items, on_result)


@pytest.fixture
def by_value():
    """Pickle this test module's functions by value, so the workers need not import it."""
    import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_a_task_whose_worker_dies_runs_again_and_the_result_is_identical(acas_inline, dask_backend, tmp_path,
                                                                         by_value):
    spec, model, ref = acas_inline
    marker = tmp_path / "killed"
    faulty = _Faulty(dask_backend, lambda fn: functools.partial(_kill_once, str(marker), fn))
    got = distill(spec, model, DistillOptions(workers=1), backend=faulty)
    assert marker.is_file()                    # a worker did die mid-run ...
    assert _distilled_bytes(got) == _distilled_bytes(ref) and got.stats == ref.stats   # ... and nothing was lost
    assert len(dask_backend.tasks) == 64


def test_a_task_that_keeps_losing_its_worker_is_a_clear_error_not_a_gap(dask_backend, by_value):
    faulty = _Faulty(dask_backend, lambda fn: functools.partial(_kill_always, fn))
    t0 = time.monotonic()
    with pytest.raises(TaskLostError, match=r"task 0 of 1 .*worker was lost") as err:
        map_ordered(abs, [-1], faulty)
    assert err.value.exit_code == 1 and time.monotonic() - t0 < 60


def test_a_worker_of_another_mi_certify_is_refused_by_name(dask_backend, monkeypatch):
    import mi_certify.verification.tools.dask_backend as db
    fake = {**software_identity(), "mi_certify_source": "0" * 64}
    monkeypatch.setattr(db, "software_identity", lambda: fake)
    with pytest.raises(BackendError, match=r"worker tcp://127\.0\.0\.1:\d+: refused: mi-certify source sha256 "
                                           r"0000000000000000… here, [0-9a-f]{16}… there"):
        dask_backend.check_workers()
    with pytest.raises(BackendError, match=r"refused: worker tcp://127\.0\.0\.1:\d+: mi-certify source sha256"):
        map_ordered(abs, [-1, -2], dask_backend)   # checked again on the worker that runs the task


def test_the_identity_digest_is_the_manifests_source_digest():
    from mi_certify.generator.bundle.manifest import source_identity
    assert software_identity()["mi_certify_source"] == source_identity()["sha256"]
    assert software_identity()["packages"]["mi-certify"] != "not installed"


def test_an_unreachable_scheduler_is_one_error_naming_it_within_the_timeout():
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=r"^tcp://127\.0\.0\.1:9: the Dask scheduler does not answer within 2 s"):
        open_backend(BackendSpec(scheduler="tcp://127.0.0.1:9", connect_timeout=2))
    assert time.monotonic() - t0 < 10
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "build",
                           str(EXAMPLES / "meta_controller" / "controller.onnx"), "--sla",
                           str(EXAMPLES / "meta_controller" / "sla.yaml"), "--out", "never",
                           "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "2"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT.parent)
    assert proc.returncode == 2 and not (ROOT.parent / "never").exists()
    assert proc.stderr.strip().splitlines() == [
        "error: tcp://127.0.0.1:9: the Dask scheduler does not answer within 2 s (OSError: Timed out trying to "
        "connect to tcp://127.0.0.1:9 after 2 s)"], proc.stderr


def test_a_listener_that_never_speaks_dask_is_refused_within_the_connect_timeout():
    """distributed's own timeout does not bound a peer that accepts and stays silent."""
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    try:
        t0 = time.monotonic()
        with pytest.raises(BackendError, match=rf"^tcp://127\.0\.0\.1:{port}: no Dask scheduler answers at this "
                                               r"address within 2 s"):
            open_backend(BackendSpec(scheduler=f"tcp://127.0.0.1:{port}", connect_timeout=2))
        assert time.monotonic() - t0 < 2 + 2 + 3
    finally:
        server.close()


@pytest.mark.parametrize("address, reason", [
    ("nonsense://x", r"not a Dask scheduler address \(ValueError: unknown address scheme 'nonsense'"),
    ("tcp://127.0.0.1:notaport", r"not a Dask scheduler address"),
    ("tls://127.0.0.1:9", r"a tls:// scheduler needs distributed's TLS settings here: distributed.comm.tls.ca-file"),
])
def test_a_malformed_address_or_tls_without_certificates_is_refused_before_connecting(address, reason, monkeypatch):
    for var in [v for v in os.environ if v.startswith("DASK_DISTRIBUTED__COMM__TLS")]:
        monkeypatch.delenv(var)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=rf"^{re.escape(address)}: {reason}"):
        open_backend(BackendSpec(scheduler=address, connect_timeout=2))
    assert time.monotonic() - t0 < 2


def _campaign_dir(tmp_path) -> Path:
    d = tmp_path / "acasxu"
    d.mkdir()
    (d / "onnx").symlink_to(ACAS / "onnx")
    (d / "vnnlib").symlink_to(ACAS / "vnnlib")
    (d / "instances.csv").write_text(INSTANCES)
    return d


VNNCOMP_LINE = re.compile(r"^acasxu,onnx/ACASXU_run2a_\d_\d_batch_2000\.onnx,vnnlib/prop_\d\.vnnlib,\d+\.\d{6},"
                          r"(sat|unsat|timeout|unknown|error),\d+\.\d{6}$")


def test_a_campaign_on_two_dask_workers_writes_the_in_process_csv_apart_from_the_times(tmp_path, dask_backend):
    d = _campaign_dir(tmp_path)
    instances = read_instances(d / "instances.csv")
    assert [i.line for i in instances] == [2, 3, 4, 5] and [i.timeout for i in instances] == [60, 60, 60, None]
    opts = VerifyOptions(timeout=30)
    here = results_csv(run_campaign(instances, opts, InlineBackend()), "acasxu")
    there = results_csv(run_campaign(instances, opts, dask_backend), "acasxu")
    assert all(VNNCOMP_LINE.match(line) for line in here.splitlines() + there.splitlines()), there

    def verdicts(text):  # every column but prepare_time (4th) and run_time (6th)
        return [line.split(",")[:3] + line.split(",")[4:5] for line in text.splitlines()]
    assert verdicts(here) == verdicts(there)
    # the published VNN-COMP answers (shared/anchors/acasxu/expected_results.csv)
    assert [v[3] for v in verdicts(there)] == ["sat", "unsat", "sat", "unsat"]
    assert {w.worker for w in dask_backend.tasks} <= set(dask_backend.client.scheduler_info()["workers"])


def test_the_campaign_cli_writes_results_csv_and_refuses_a_missing_entry(tmp_path):
    d = _campaign_dir(tmp_path)
    out = tmp_path / "results.csv"
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "verify", "--campaign",
                           str(d / "instances.csv"), "--results", str(out), "--workers", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert [line.split(",")[4] for line in out.read_text().splitlines()] == ["sat", "unsat", "sat", "unsat"]
    (d / "instances.csv").write_text(INSTANCES + "onnx/ACASXU_run2a_1_1_batch_2000.onnx,vnnlib/prop_9.vnnlib\n")
    proc = subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", "verify", "--campaign",
                           str(d / "instances.csv"), "--results", str(tmp_path / "r2.csv")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and not (tmp_path / "r2.csv").exists()
    assert proc.stderr.strip() == (f"error: {d / 'instances.csv'}: line 6: the VNN-LIB file {d / 'vnnlib/prop_9.vnnlib'} "
                                   "does not exist"), proc.stderr


@pytest.mark.parametrize("line, reason", [
    ("a.onnx,b.vnnlib,1,2", r"expected 'VNNLIB', or 'ONNX,VNNLIB\[,TIMEOUT\]'"),
    ("onnx/ACASXU_run2a_1_1_batch_2000.onnx,vnnlib/prop_1.vnnlib,-3", "the timeout '-3' is not a positive number"),
    ("vnnlib/prop_1.vnnlib", "a line with a VNN-LIB file only needs the network"),
    ("onnx/none.onnx,vnnlib/prop_1.vnnlib", "the network .*none.onnx does not exist"),
])
def test_a_bad_instance_line_is_named_with_its_reason(tmp_path, line, reason):
    d = _campaign_dir(tmp_path)
    (d / "instances.csv").write_text(f"# header comment\n{line}\n")
    with pytest.raises(MiCertifyError, match=rf"instances.csv: line 2: {reason}"):
        read_instances(d / "instances.csv")


def test_the_default_backends_never_import_dask(tmp_path):
    code = ("import sys, pathlib; sys.path.insert(0, 'tests'); import conftest as td; "
            "from mi_certify.generator.build.distill import DistillOptions, distill; "
            "from mi_certify.generator.frontend.model import load_model; "
            f"p = pathlib.Path({str(tmp_path)!r}); "
            "r = distill(td.two_action_spec(p), load_model(td.two_action_model(p)), DistillOptions(workers=2)); "
            "assert r.lut.tokens.tolist() == [1, 1, 1, 1, 0, 0, 0, 0]; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'tornado')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
