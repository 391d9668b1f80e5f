"""libringprof-cupti.so in a process on a host without a CUDA driver:
loaded as the driver would (InitializeInjection) with the real libcupti of
the toolkit, it says why it records nothing in one stderr line, and the
program runs and exits normally."""
import os
import subprocess

import pytest

SO = os.environ.get("RINGPROF_CUPTI_SO")
LOADER = os.environ.get("RINGPROF_CUPTI_LOADER")
CUPTI = "/usr/local/cuda/lib64/libcupti.so.13"

pytestmark = pytest.mark.skipif(not SO or not LOADER,
                                reason="built without the CUPTI headers")


def run(env_extra):
    env = dict(os.environ)
    env.pop("RINGPROF_QUIET", None)
    env.update(env_extra)
    return subprocess.run([LOADER, SO], env=env, capture_output=True, text=True,
                          timeout=60)


def lines_of(stderr):
    return [l for l in stderr.splitlines() if l.startswith("ringprof-cupti:")]


def test_exports_only_its_entry_points():
    out = subprocess.run(["nm", "-D", "--defined-only", SO], capture_output=True,
                         text=True, check=True).stdout
    text = sorted(l.split()[-1] for l in out.splitlines() if " T " in l)
    assert text == ["InitializeInjection", "rp_cupti_start"]


@pytest.mark.skipif(not os.path.exists(CUPTI), reason="no libcupti.so.13 here")
def test_real_libcupti_without_driver():
    r = run({"RINGPROF_CUPTI_LIB": CUPTI})
    assert r.returncode == 0, r.stderr
    assert "InitializeInjection=1" in r.stdout
    assert "workload done 499999500000" in r.stdout
    said = lines_of(r.stderr)
    assert len(said) == 1, r.stderr
    assert "no CUDA driver" in said[0] or "CUPTI" in said[0]
    assert "not recorded" in said[0]


def test_missing_libcupti():
    r = run({"RINGPROF_CUPTI_LIB": "/nonexistent/libcupti.so.13"})
    assert r.returncode == 0, r.stderr
    assert "workload done" in r.stdout
    said = lines_of(r.stderr)
    assert len(said) == 1 and "libcupti not found" in said[0], r.stderr
    assert "RINGPROF_CUPTI_LIB" in said[0]


def test_quiet():
    r = run({"RINGPROF_CUPTI_LIB": "/nonexistent/libcupti.so.13", "RINGPROF_QUIET": "1"})
    assert r.returncode == 0 and "workload done" in r.stdout
    assert lines_of(r.stderr) == []
