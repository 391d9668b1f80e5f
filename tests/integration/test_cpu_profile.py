"""CPU profiles end to end: the eBPF sampler in the real ringprofd, the
process information it records (names, command lines, mappings with
build-ids), and 'ringprof summary', which symbolizes at export.

Workloads: cpu-burn (burn_a, burn_b, burn_c take 60, 30 and 10% of its
user time; burn_syscalls reads /dev/zero) and jit-burn (runs generated
code it describes in /tmp/perf-PID.map).  Needs root for the sampler and
for real addresses in /proc/kallsyms."""

import os
import subprocess
import time
import uuid

import pytest

from daemon_harness import BUILD, Daemon

CPU_BURN = os.environ.get("RINGPROF_CPU_BURN", os.path.join(BUILD, "tests", "cpu-burn"))
JIT_BURN = os.environ.get("RINGPROF_JIT_BURN", os.path.join(BUILD, "tests", "jit-burn"))

# Short chunks, so that a window of a second holds chunks that only repeat
# the metadata recorded long before; 299 Hz for enough samples in seconds.
CONFIG = """
[daemon]
seal_interval = 100ms
[sampler]
enabled = true
frequency = 299
[host_metrics]
interval = 200ms
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the eBPF sampler and /proc/kallsyms addresses need root")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("cpu"), config=CONFIG).start()
    try:
        yield d
    finally:
        d.stop()


def summary(d, last, name):
    d.cli("snapshot", "--last", last, "--name", name, check=True)
    out = d.cli("summary", name, check=True).stdout
    functions, processes, counters = {}, {}, {}
    section = None
    samples = int(out.split(" CPU samples")[0].split()[-1])
    for line in out.splitlines():
        if line.startswith("top functions"):
            section = "functions"
            continue
        if line.startswith("process "):
            section = "processes"
            continue
        if line.startswith("counter "):
            section = "counters"
            continue
        if not line.strip():
            section = None
            continue
        f = line.split()
        if section == "functions" and f[0] != "self%":
            functions[f[4]] = {"self": float(f[0]), "total": float(f[1]),
                               "module": f[5] if len(f) > 5 else ""}
        elif section == "processes":  # the name is 16 wide and may hold spaces
            f = line[16:].split()
            processes[int(f[0])] = {"name": line[:16].strip(), "samples": int(f[1]),
                                    "cpu_ms": f[2], "cmdline": " ".join(f[4:])}
        elif section == "counters":
            counters[f[0]] = {"samples": int(f[1]), "last": float(f[2])}
    return out, samples, functions, processes, counters


def run(*args):
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    return int(p.stdout.split()[-1])


def test_exited_process_named_with_shares_and_kernel_frames(daemon):
    pid = run(CPU_BURN, "3", "syscalls")
    time.sleep(2)  # exited, and forgotten by the daemon: nothing repeats it any more
    out, _, functions, processes, counters = summary(daemon, "7s", "exited")

    burns = {f: functions[f]["self"] for f in ("burn_a", "burn_b", "burn_c")}
    assert all(functions[f]["module"] == "cpu-burn" for f in burns), out
    total = sum(burns.values())
    for f, want in (("burn_a", 60), ("burn_b", 30), ("burn_c", 10)):
        assert abs(100 * burns[f] / total - want) <= 10, (f, burns, out)

    # Samples taken in read(2) carry named kernel frames above the user ones.
    kernel = {f: v for f, v in functions.items() if v["module"] == "[kernel]"}
    assert any(f in kernel for f in ("read_zero", "ksys_read", "vfs_read")), out
    assert "note: kernel frames are unnamed" not in out

    p = processes[pid]
    assert p["name"] == "cpu-burn" and p["cmdline"] == CPU_BURN + " 3 syscalls", out
    # 3 s of one busy thread at 299 Hz, as CPU time.
    assert 2000 <= float(p["cpu_ms"]) <= 3600, p
    assert abs(float(p["cpu_ms"]) - p["samples"] * 1000 / 299) < 1, p

    # Host metrics rode along.
    assert "cpu_util" in counters and "host_mem_used" in counters, out
    assert 0 <= counters["cpu_util"]["last"] <= 100


def test_window_after_the_start_still_symbolizes(daemon):
    """The process started seconds before the window; its mappings are
    found in the window's chunks, which repeat them."""
    burn = subprocess.Popen([CPU_BURN, "6"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(4)
        out, _, functions, processes, _ = summary(daemon, "1s", "late")
    finally:
        burn.communicate(timeout=60)
    assert burn.pid in processes, out
    assert functions.get("burn_a", {}).get("self", 0) > 20, out
    assert not any(f.startswith("cpu-burn+0x") for f in functions), out


def test_jit_code_named_through_perf_map(daemon):
    name = "jit_spin_" + uuid.uuid4().hex[:8]
    pid = run(JIT_BURN, "2", name)
    try:
        time.sleep(0.5)
        out, samples, functions, processes, _ = summary(daemon, "4s", "jit")
    finally:
        os.unlink("/tmp/perf-%d.map" % pid)
    assert functions[name]["module"] == "[jit]", out
    # The generated loop is where jit-burn spends its time.
    assert functions[name]["self"] >= 0.5 * 100 * processes[pid]["samples"] / samples, out
