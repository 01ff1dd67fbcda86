"""Same bytes on every machine (docs/certificate.md, "Reproducibility").

The CPU decides which OpenBLAS kernel numpy's matrix products run on and which SIMD
loops numpy's ``exp``/``log`` take. Each variant below runs `train` and `build` in a child
process with that choice forced (``OPENBLAS_CORETYPE``, ``OPENBLAS_NUM_THREADS``,
``NPY_DISABLE_CPU_FEATURES``), as another machine would make it, and every hashed file
must come out byte for byte the same. The first variant is this machine as it is (its
own environment untouched).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import EXAMPLES, REFERENCE_MODEL, REFERENCE_SLA

PROFILE = EXAMPLES / "meta_controller" / "profile.csv"
SHIPPED_REPORT = EXAMPLES / "meta_controller" / "controller.train.json"

#: numpy 2.4 dispatch targets on x86-64 (``numpy._core._multiarray_umath.__cpu_dispatch__``).
_NO_AVX512 = "X86_V4 AVX512_ICL AVX512_SPR"
_BASELINE_ONLY = "X86_V3 " + _NO_AVX512

VARIANTS = {
    "this machine": {},
    "Prescott kernel, 1 thread, baseline SIMD only": {"OPENBLAS_CORETYPE": "Prescott", "OPENBLAS_NUM_THREADS": "1",
                                                      "NPY_DISABLE_CPU_FEATURES": _BASELINE_ONLY},
    "Haswell kernel, 2 threads, no AVX-512": {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "2",
                                              "NPY_DISABLE_CPU_FEATURES": _NO_AVX512},
}
# no "Zen" variant: OpenBLAS runs its Haswell kernels under OPENBLAS_CORETYPE=Zen (threadpoolctl reports
# "Haswell" for both on an AMD EPYC), so it repeated the Haswell variant at a quarter of this test's time
# the SkylakeX kernel executes AVX-512: forced on a CPU without it, OpenBLAS dies of SIGILL
if " avx512f" in Path("/proc/cpuinfo").read_text():
    VARIANTS["SkylakeX kernel, 1 thread"] = {"OPENBLAS_CORETYPE": "SkylakeX", "OPENBLAS_NUM_THREADS": "1"}


def small_spec(path: Path) -> Path:
    """The reference sla.yaml at 2 bits per input (1,024 cells): the same network, the same
    properties, a build of seconds."""
    text = REFERENCE_SLA.read_text()
    for old, new in (("bits: 4}", "bits: 2}"), ("bits: 3}", "bits: 2}")):
        text = text.replace(old, new)
    path.write_text(text)
    return path


def _cli(env_over: dict, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(env_over)
    return subprocess.run([sys.executable, "-m", "mi_certify.generator.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=900, env=env)


def _variant(name: str, env_over: dict, root: Path, spec: Path) -> dict:
    d = root / name.split(",")[0].replace(" ", "_")
    d.mkdir()
    train = _cli(env_over, "train", PROFILE, "--sla", REFERENCE_SLA, "--out", d / "controller.onnx", "--alpha", "2",
                 "--seed", "1")
    assert train.returncode == 0, f"{name}: {train.stderr}"
    # the verdicts must not depend on the machine's load: two variants at once beside another test
    # worker once took P2's Z3 confirmation past the default 60 s on a 2-core CI machine
    build = _cli(env_over, "build", REFERENCE_MODEL, "--sla", spec, "--out", d / "build", "--skip-cosim",
                 "--skip-lint", "--skip-rtl-proofs", "--skip-synth", "--verify-timeout", "300")
    assert build.returncode == 0, f"{name}: {build.stderr}"
    manifest = json.loads((d / "build" / "manifest.json").read_text())
    return {"onnx": (d / "controller.onnx").read_bytes(), "train_report": (d / "controller.train.json").read_bytes(),
            "train_stderr": train.stderr,
            "files": manifest["files"], "manifest": (d / "build" / "manifest.json").read_bytes(),
            "dir": d / "build"}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels")
    spec = small_spec(root / "sla_small.yaml")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_variant, name, env, root, spec) for name, env in VARIANTS.items()}
        return {name: f.result() for name, f in futures.items()}


def test_the_variants_really_change_the_blas_kernel():
    """The forced kernels are in effect (else the comparison below would prove nothing)."""
    code = ("from threadpoolctl import threadpool_info; import numpy; "
            "print([i['architecture'] for i in threadpool_info() if i['internal_api'] == 'openblas'][0])")
    seen = set()
    for name, env_over in VARIANTS.items():
        env = dict(os.environ)
        env.update(env_over)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        seen.add(out.stdout.strip())
    assert len(seen) >= 2, seen  # e.g. Haswell and Katmai on an AVX-512-less EPYC


def test_every_hashed_file_is_the_same_under_every_kernel_and_simd_set(variants):
    ref = variants["this machine"]
    assert len(ref["files"]) > 20
    for name, got in variants.items():
        differ = sorted(f for f in set(ref["files"]) | set(got["files"]) if ref["files"].get(f) != got["files"].get(f))
        assert not differ, f"{name}: hashed files differ from this machine's: {differ}"
        assert got["manifest"] == ref["manifest"], name


def test_retraining_gives_the_same_network_under_every_kernel_and_simd_set(variants):
    ref = variants["this machine"]
    for name, got in variants.items():
        assert got["onnx"] == ref["onnx"], f"{name}: the trained controller.onnx differs"
        assert got["train_report"] == ref["train_report"], f"{name}: controller.train.json differs"
    # and it is the shipped controller (examples/meta_controller/README.md)
    assert ref["onnx"] == REFERENCE_MODEL.read_bytes()


def test_shipped_controller_is_the_one_trained_from_the_shipped_profile(variants):
    """examples/meta_controller/README.md: one command retrains controller.onnx byte for byte (this
    machine's variant above: ``train PROFILE --sla sla.yaml --alpha 2 --seed 1``), and says what it verified."""
    ref = variants["this machine"]
    err = ref["train_stderr"]
    assert ref["onnx"] == REFERENCE_MODEL.read_bytes()
    shipped = json.loads(SHIPPED_REPORT.read_text())
    assert json.loads(ref["train_report"]) == shipped
    # it verifies the properties as build does, and says so in one line
    assert "properties, verified as build verifies them (" in err
    assert "s): P1 proved; P2 proved; P3 proved\n" in err, err
    # what build will report of its LUT, and the LUT-FSM's cost of disagreement on the held-out rows
    assert "build will report: 7578 of 16384 LUT cells proven (46.2%)" in err
    assert shipped["lut_fsm_held_out"]["cost_of_disagreement"]["rows_they_differ"] == 41
    assert "the LUT-FSM on the 100 held-out rows (steady state): decides as the network on 59 (59.0%)" in err
    side = json.loads(PROFILE.with_suffix(".json").read_text())
    assert side["samples"] == shipped["profile"]["rows_used"] + sum(shipped["profile"]["rows_dropped"].values())
    assert side["command"].startswith("mi-certify profile --workload examples/workload/convgemm.onnx")
