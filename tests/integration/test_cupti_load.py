"""libringprof-cupti.so (collectors/cupti, docs/gpu.md) in a process on a
host without a GPU: with the toolkit's real libcupti and no driver it says
why it records nothing in one stderr line and the program runs normally;
with the stand-in libcupti and driver of cupti_stub/ (records built from
the real cupti_activity.h structs) its records reach the real daemon in
the ring of the physical GPU, and another CUPTI subscriber makes it stand
aside, visibly."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import CONFIG
from daemon_harness import BUILD, Daemon, dump

SO = os.path.join(BUILD, "collectors", "cupti", "libringprof-cupti.so")
LOADER = os.path.join(BUILD, "tests", "cupti-loader")
STUB = os.path.join(BUILD, "tests", "integration", "cupti_stub")
FAKE_CUPTI = os.path.join(STUB, "libfakecupti.so")
FAKE_TORCH_CUDA = os.path.join(STUB, "libtorch_cuda.so")
CUPTI = "/usr/local/cuda/lib64/libcupti.so.13"

pytestmark = pytest.mark.skipif(not os.path.exists(SO) or not os.path.exists(LOADER),
                                reason="built without the CUPTI headers")


def run(env_extra, base=None):
    env = dict(base if base is not None else os.environ)
    env.pop("RINGPROF_QUIET", None)
    env.update(env_extra)
    return subprocess.run([LOADER, SO], env=env, capture_output=True, text=True, timeout=60)


def preloading(lib):
    """LD_PRELOAD with lib after what is there (the sanitized pass's ASan
    runtime must stay first)."""
    return " ".join(filter(None, [os.environ.get("LD_PRELOAD"), lib]))


def said(stderr):
    return [l for l in stderr.splitlines() if l.startswith("ringprof-cupti:")]


def assert_ran(r):
    assert r.returncode == 0, r.stderr
    assert "InitializeInjection=1" in r.stdout
    assert "workload done 499999500000" in r.stdout


def test_exports_only_its_entry_points():
    out = subprocess.run(["nm", "-D", "--defined-only", SO], capture_output=True,
                         text=True, check=True).stdout
    text = sorted(l.split()[-1] for l in out.splitlines() if " T " in l)
    assert text == ["InitializeInjection", "rp_cupti_pause", "rp_cupti_resume", "rp_cupti_share",
                    "rp_cupti_start"]


@pytest.mark.skipif(not os.path.exists(CUPTI), reason="no libcupti.so.13 here")
def test_real_libcupti_without_driver():
    r = run({"RINGPROF_CUPTI_LIB": CUPTI})
    assert_ran(r)
    lines = said(r.stderr)
    assert len(lines) == 1, r.stderr
    assert "no CUDA driver" in lines[0] and "not recorded" in lines[0]


def test_missing_libcupti():
    r = run({"RINGPROF_CUPTI_LIB": "/nonexistent/libcupti.so.13"})
    assert_ran(r)
    lines = said(r.stderr)
    assert len(lines) == 1 and "libcupti not found" in lines[0], r.stderr
    assert "RINGPROF_CUPTI_LIB" in lines[0]


def test_quiet():
    r = run({"RINGPROF_CUPTI_LIB": "/nonexistent/libcupti.so.13", "RINGPROF_QUIET": "1"})
    assert_ran(r)
    assert said(r.stderr) == []


def stand_in(d, **extra):
    env = {"LD_LIBRARY_PATH": STUB, "RINGPROF_CUPTI_LIB": FAKE_CUPTI}
    env.update(extra)
    return run(env, base=d.env())


def snapshot(d, name):
    """The snapshot's events, as the ring held them, and its directory."""
    r = d.cli("snapshot", "--last", "60s", "--name", name, "--json", check=True)
    path = json.loads(r.stdout)["path"]
    return dump(path, all_events=True), path


def declined(tmp_path, message, **env):
    """Run the stand-in workload where the library records nothing: it ran,
    said message in one line; the events the daemon got."""
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        r = stand_in(d, **env)
        assert_ran(r)
        lines = said(r.stderr)
        assert len(lines) == 1 and message in lines[0], r.stderr
        evs, _ = snapshot(d, "declined")
    finally:
        d.stop()
    assert not [e for e in evs if e["kind"] in ("gpu_activity", "api_call")]
    return evs


def test_older_libcupti_is_refused(tmp_path):
    declined(tmp_path, "API version 120000 is older", FAKE_CUPTI_VERSION="120000")


def test_records_reach_the_physical_gpus_ring(tmp_path):
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        # The process calls its only GPU 0; it is the host's GPU 3.
        r = stand_in(d, CUDA_VISIBLE_DEVICES="3", FAKE_CUPTI_DROPPED="5")
        assert_ran(r)
        assert said(r.stderr) == []
        # Status tells the GPU's ring was written by one process.
        gpu3 = next(g for g in d.ok("GET", "/v1/status")["rings"] if g["device"] == "gpu3")
        assert gpu3["processes_seen"] == 1, gpu3
        assert "PROCESSES" in d.cli("status", check=True).stdout
        evs, path = snapshot(d, "cupti")
        d.cli("export", path, "--format", "json", "-o", str(tmp_path / "s.json"), check=True)
    finally:
        d.stop()
    gpu = [e for e in evs if e["kind"] == "gpu_activity"]
    assert {e["device"] for e in gpu} == {"gpu3"}, gpu
    # Mangled in the ring, unless the workload has a C++ runtime to
    # demangle with (the sanitized pass's preloaded ASan runtime brings
    # __cxa_demangle).
    assert sorted(e["name"] for e in gpu) in (
        ["Memcpy HtoD", "Memset", "_Z6matmulPKfS0_Pfi"],
        ["Memcpy HtoD", "Memset", "matmul(float const*, float const*, float*, int)"]), gpu
    api = [e for e in evs if e["kind"] == "api_call"]
    names = sorted(e["name"] for e in api)
    # cudaGetDevice is in the noisy table: not recorded.
    assert names == ["cudaLaunchKernel_v7000", "sync: stream synchronize"], names
    launch = next(e for e in api if e["name"] == "cudaLaunchKernel_v7000")
    kern = next(e for e in gpu if "matmul" in e["name"])
    # Host clock: the launch precedes its kernel by the 5 us the stand-in put.
    assert kern["ts"] - launch["ts"] == 5000
    # Mangled in the ring, demangled by the exporter.
    exported = json.load(open(tmp_path / "s.json"))["trace_events"]
    kernels = [e for e in exported if e["type"] == "gpu_kernel"]
    assert [(e["name"], e["device"], e["args"]["correlation"], e["args"]["stream"], e["duration"])
            for e in kernels] == [("matmul(float const*, float const*, float*, int)", "gpu3",
                                   11, 7, 20000)], kernels
    # The launch configuration travels with it, through ring and chunk.
    assert {k: kernels[0]["args"][k] for k in ("grid", "block", "registers_per_thread",
                                               "static_shared_memory", "dynamic_shared_memory")} \
        == {"grid": [64, 2, 1], "block": [128, 1, 1], "registers_per_thread": 40,
            "static_shared_memory": 1024, "dynamic_shared_memory": 8192}
    # The launch keeps the kernel's correlation id: exporters draw the flow.
    calls = [e for e in exported if e["type"] == "api_call"]
    assert {e["name"]: e["args"]["correlation"] for e in calls} == {
        "cudaLaunchKernel_v7000": 11, "sync: stream synchronize": 0}, calls
    # CUPTI's 5 dropped records and the incomplete kernel are counted.
    drops = [e for e in evs if e["kind"] == "drops"]
    assert sum(e["count"] for e in drops) == 6, drops


def test_kernel_names_demangled_with_the_workloads_runtime(tmp_path):
    """In a workload with the C++ runtime loaded (PyTorch's is), kernel
    names are demangled before the ring cuts long ones at 255 bytes."""
    libstdcxx = subprocess.run(["g++", "-print-file-name=libstdc++.so.6"], capture_output=True,
                               text=True).stdout.strip()
    if not os.path.isabs(libstdcxx):
        pytest.fail("no libstdc++.so.6 found through g++")
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        assert_ran(stand_in(d, LD_PRELOAD=preloading(libstdcxx)))
        evs, _ = snapshot(d, "demangled")
    finally:
        d.stop()
    kernels = [e["name"] for e in evs if e["kind"] == "gpu_activity" and "matmul" in e["name"]]
    assert kernels == ["matmul(float const*, float const*, float*, int)"], kernels


def test_nvtx_ranges_are_opt_in(tmp_path):
    """NVTX markers become ranges and instants on the marking thread with
    RINGPROF_NVTX=1, and are not asked of CUPTI without it."""
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        plain = stand_in(d)
        marked = stand_in(d, RINGPROF_NVTX="1")
        for r in (plain, marked):
            assert_ran(r)
            assert said(r.stderr) == []
        evs, _ = snapshot(d, "nvtx")
    finally:
        d.stop()
    nvtx = [e for e in evs if e["kind"] in ("range_begin", "range_end", "instant")
            and e.get("name") != "ringprof-cupti: stood aside, another CUPTI subscriber"]
    pids = {e["pid"] for e in nvtx}
    assert len(pids) == 1, nvtx
    launch = next(e for e in evs if e["kind"] == "api_call" and e["pid"] in pids)
    got = [(e["kind"], e.get("name"), e["tid"], e["ts"] - launch["ts"]) for e in nvtx]
    assert sorted(got, key=lambda g: g[3]) == [
        ("range_begin", "train_step", launch["tid"], -1000),
        ("instant", "checkpoint", launch["tid"], 2000),
        ("range_end", None, launch["tid"], 40000)], got
    # The other run's pid has GPU activity but no markers.
    assert len({e["pid"] for e in evs if e["kind"] == "gpu_activity"} - pids) == 1


def test_waits_for_torch_profiler_to_share(tmp_path):
    """With PyTorch in the process and nothing sharing CUPTI with
    torch.profiler, the collector records nothing and says why once."""
    evs = declined(tmp_path, "GPU activity is recorded once torch.profiler shares CUPTI",
                   LD_PRELOAD=preloading(FAKE_TORCH_CUDA))
    assert [e["name"] for e in evs if e["kind"] == "instant"] == \
        ["ringprof-cupti: waiting for torch.profiler to share CUPTI"], evs


def test_another_subscriber_makes_it_stand_aside(tmp_path):
    """Error 39: the library stands aside, says so once on stderr, and while
    the process runs `ringprof status` names it on its ring; the ring keeps
    an instant and the thread's name saying so."""
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        env = dict(d.env(), LD_LIBRARY_PATH=STUB, RINGPROF_CUPTI_LIB=FAKE_CUPTI,
                   FAKE_CUPTI_SUBSCRIBED="1", CUPTI_LOADER_HOLD="1")
        env.pop("RINGPROF_QUIET", None)
        p = subprocess.Popen([LOADER, SO], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            while "workload done" not in p.stdout.readline():
                assert p.poll() is None, p.stderr.read()
            aside = []
            for _ in range(300):  # attached within a drain pass or two
                st = json.loads(d.cli("status", "--json", check=True).stdout)
                aside = [(r["device"], a["pid"], a["thread"]) for r in st["rings"]
                         for a in r["stood_aside"]]
                if aside:
                    break
                time.sleep(0.05)
            assert aside == [("host", p.pid, "ringprof-cupti (stood aside)")], st["rings"]
            text = d.cli("status", check=True).stdout
            assert (f"host: pid {p.pid}: ringprof-cupti (stood aside): another tool records it"
                    in text), text
        finally:
            _, err = p.communicate("", timeout=60)
        assert p.returncode == 0, err
        lines = said(err)
        assert len(lines) == 1 and "another CUPTI subscriber" in lines[0], err
        # Gone with its process's rings (reaped once a second).
        for _ in range(600):
            st = json.loads(d.cli("status", "--json", check=True).stdout)
            if not any(r["stood_aside"] for r in st["rings"]):
                break
            time.sleep(0.05)
        assert not any(r["stood_aside"] for r in st["rings"]), st["rings"]
        evs, _ = snapshot(d, "aside")
    finally:
        d.stop()
    assert not [e for e in evs if e["kind"] in ("gpu_activity", "api_call")]
    marks = [e for e in evs if e["kind"] == "instant" and "stood aside" in e.get("name", "")]
    assert len(marks) == 1 and marks[0]["device"] == "host", evs
    # Its ring's thread says so too, in every export's thread list.
    assert any(e["kind"] == "thread_name" and e["name"] == "ringprof-cupti (stood aside)"
               for e in evs), evs


# A stand-in torch with just what ringprof.cupti wraps: the autograd
# profiler's _prepare_trace (Kineto takes CUPTI there) and __exit__.
FAKE_TORCH = {
    "torch/__init__.py": "from . import autograd, profiler\n",
    "torch/profiler.py": "class ProfilerActivity:\n    CPU, CUDA = 0, 1\n",
    "torch/autograd/__init__.py": "from . import profiler\n",
    "torch/autograd/profiler.py": (
        "import ctypes, os\n"
        "class profile:\n"
        "    def __init__(self, cuda=True):\n"
        "        self.kineto_activities = {0, 1} if cuda else {0}\n"
        "    def _prepare_trace(self):\n"
        "        print('kineto takes cupti', flush=True)\n"
        "    def __exit__(self, *exc):\n"
        "        print('kineto done', flush=True)\n"),
}


def fake_torch(tmp_path):
    """The stand-in torch written under tmp_path; returns its directory,
    for PYTHONPATH."""
    fake = tmp_path / "fake"
    for name, text in FAKE_TORCH.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    return fake


SHARE_SCRIPT = """
import ctypes, importlib.util, os, sys
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
print("InitializeInjection=%d" % lib.InitializeInjection(), flush=True)
spec = importlib.util.spec_from_file_location("ringprof_cupti", sys.argv[1])
share = importlib.util.module_from_spec(spec)
spec.loader.exec_module(share)
print("shared", share.share_with_torch_profiler(), flush=True)
from torch.autograd import profiler
p = profiler.profile()
p._prepare_trace()
p.__exit__(None, None, None)
cpu_only = profiler.profile(cuda=False)
cpu_only._prepare_trace()
cpu_only.__exit__(None, None, None)
"""


def test_takes_turns_with_torch_profiler(tmp_path):
    """ringprof.cupti pauses the collector (its buffers flushed back to it,
    its kinds off) before a torch.profiler session with CUDA activity takes
    CUPTI and resumes it after; a CPU-only session leaves it alone."""
    fake = fake_torch(tmp_path)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "python", "ringprof", "cupti.py")
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        # PyTorch's CUDA library in the process: the collector waits for
        # the share before it records.
        env = dict(d.env(), LD_LIBRARY_PATH=STUB, RINGPROF_CUPTI_LIB=FAKE_CUPTI,
                   CUDA_INJECTION64_PATH=SO, PYTHONPATH=str(fake),
                   LD_PRELOAD=preloading(FAKE_TORCH_CUDA))
        r = subprocess.run([sys.executable, "-c", SHARE_SCRIPT, src], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split("\n")[:3] == ["InitializeInjection=1", "shared True",
                                             "kineto takes cupti"], r.stdout
        evs, _ = snapshot(d, "shared")
    finally:
        d.stop()
    marks = [e["name"] for e in evs if e["kind"] == "instant"]
    assert marks == ["ringprof-cupti: waiting for torch.profiler to share CUPTI",
                     "ringprof-cupti: torch.profiler shares CUPTI; recording",
                     "ringprof-cupti: paused, another profiler has CUPTI",
                     "ringprof-cupti: resumed"], marks
    # The stand-in delivers one batch per flush: at the pause (our buffers
    # back to us) and at exit (armed again after the resume).
    kernels = [e for e in evs if e["kind"] == "gpu_activity" and "matmul" in e["name"]]
    assert len(kernels) == 2, evs


def ringprof_run(d, args, **extra):
    """`ringprof run ARGS` beside daemon d with the stand-in CUPTI, this
    build's collector as the injection, and none set by the caller."""
    cli = os.environ.get("RINGPROF_CLI", os.path.join(BUILD, "cli", "ringprof"))
    env = dict(d.env(), RINGPROF_CUPTI_INJECTION=SO, LD_LIBRARY_PATH=STUB,
               RINGPROF_CUPTI_LIB=FAKE_CUPTI, **extra)
    env.pop("CUDA_INJECTION64_PATH", None)
    return subprocess.run([cli, "--socket", d.socket, "run", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def exported_kernel_names(d, session, tmp_path):
    out = tmp_path / f"{session}.json"
    d.cli("export", session, "--format", "json", "-o", str(out), check=True)
    return [e["name"] for e in json.load(open(out))["trace_events"] if e["type"] == "gpu_kernel"]


def test_ringprof_run_sets_the_injection(tmp_path):
    """`ringprof run` points CUDA at the collector (RINGPROF_CUPTI_INJECTION:
    this build's), and its session holds the command's GPU activity;
    --no-cuda leaves the command's environment alone."""
    d = Daemon(tmp_path, config=CONFIG).start()
    # The loader plays the driver: it loads what CUDA_INJECTION64_PATH names.
    cmd = ["sh", "-c", 'exec "$0" "${CUDA_INJECTION64_PATH:-none}"', LOADER]
    try:
        assert_ran(ringprof_run(d, ["--name", "gpu_run", "--", *cmd]))
        off = ringprof_run(d, ["--no-cuda", "--", *cmd])
        assert off.returncode == 3 and "dlopen" in off.stderr, off.stderr
        names = exported_kernel_names(d, "gpu_run", tmp_path)
    finally:
        d.stop()
    assert names == ["matmul(float const*, float const*, float*, int)"]


HOOK_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "python", "hook")
PLAYS_TORCH = """
import ctypes, os
import torch  # the stand-in: ringprof run's hook shares CUPTI once it is imported
lib = ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"])
print("InitializeInjection=%d" % lib.InitializeInjection(), flush=True)
"""


def test_ringprof_run_shares_cupti_in_pytorch_programs(tmp_path):
    """Under `ringprof run` a PyTorch program needs no change: the start-up
    hook shares CUPTI with torch.profiler once torch is imported, so the
    collector records rather than waits."""
    fake = fake_torch(tmp_path)
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        r = ringprof_run(d, ["--name", "torch_run", "--", sys.executable, "-c", PLAYS_TORCH],
                         RINGPROF_PYTHON_HOOK_DIR=HOOK_DIR, LD_PRELOAD=preloading(FAKE_TORCH_CUDA),
                         PYTHONPATH=os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"),
                                                                  str(fake)])))
        assert r.returncode == 0, r.stderr
        assert "InitializeInjection=1" in r.stdout
        assert not said(r.stderr) and "this program imports" not in r.stderr and \
            "cannot set up" not in r.stderr, r.stderr
        names = exported_kernel_names(d, "torch_run", tmp_path)
    finally:
        d.stop()
    assert names == ["matmul(float const*, float const*, float*, int)"]
