"""ringprof doctor on this machine: as root beside a running daemon, as an
unprivileged user (setpriv), with no daemon, --json, --pid, and the GPU and
Neuron checks on a host that has neither (OK, "not present")."""

import json
import os
import shutil
import subprocess
import tempfile

import pytest

from daemon_harness import BUILD, CLI, Daemon

CPU_BURN = os.environ.get("RINGPROF_CPU_BURN", os.path.join(BUILD, "tests", "cpu-burn"))
ROOTED = os.geteuid() == 0


def doctor(*args, socket, prefix=()):
    r = subprocess.run([*prefix, CLI, "doctor", "--socket", socket, *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode in (0, 1), (r.returncode, r.stderr)
    return r


def checks(socket, *args, prefix=()):
    """{check: {status, message, fix}} of doctor --json; the exit status."""
    r = doctor("--json", *args, socket=socket, prefix=prefix)
    found = {}
    for c in json.loads(r.stdout):
        assert set(c) == {"check", "status", "message", "fix"}, c
        assert c["status"] in ("OK", "WARN", "FAIL"), c
        assert c["status"] == "OK" or c["fix"], c  # every problem comes with its fix
        found.setdefault(c["check"], c)
    # Exit status 1 exactly when something FAILed.
    assert r.returncode == (1 if any(c["status"] == "FAIL" for c in found.values()) else 0), found
    return found, r.returncode


@pytest.fixture(scope="module")
def daemon():
    # A directory others may pass through (pytest's are root's own), so that
    # an unprivileged user meets the socket's own permissions.
    home = tempfile.mkdtemp(prefix="rpdoc")
    os.chmod(home, 0o755)
    d = Daemon(home).start()
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(home)


@pytest.mark.skipif(not ROOTED, reason="expects root's view")
def test_root_with_daemon(daemon):
    found, _ = checks(daemon.socket)
    assert found["daemon"]["status"] == "OK" and "ringprofd 0.1.0" in found["daemon"]["message"]
    assert found["socket"]["status"] == "OK" and found["producer-socket"]["status"] == "OK"
    assert found["bpf-privileges"]["status"] == "OK"
    assert found["disk-rings"]["status"] in ("OK", "WARN")
    assert "[sessions] max_bytes" in found["disk-sessions"]["message"]
    for name in ("sampler", "btf", "perf-paranoid", "kallsyms", "python", "clock"):
        assert name in found, found
    # The text form: one line per check, its status first.
    text = doctor(socket=daemon.socket).stdout.splitlines()
    heads = [line.split()[0] for line in text if not line.startswith(" ")]
    assert heads and set(heads) <= {"OK", "WARN", "FAIL"}, text
    assert len(heads) == len(json.loads(doctor("--json", socket=daemon.socket).stdout))


@pytest.mark.skipif(not ROOTED, reason="setpriv to another user needs root")
def test_unprivileged_user(daemon):
    """nobody: the socket FAILs with the group to join, BPF warns with the
    capabilities to give, and the exit status says something failed."""
    found, rc = checks(daemon.socket, prefix=("setpriv", "--reuid=nobody", "--regid=nogroup",
                                              "--clear-groups"))
    assert rc == 1
    sock = found["socket"]
    assert sock["status"] == "FAIL" and "closed to uid" in sock["message"], sock
    assert "usermod -aG" in sock["fix"], sock
    assert found["daemon"]["status"] == "FAIL"
    bpf = found["bpf-privileges"]
    assert bpf["status"] in ("WARN", "FAIL") and "cap_bpf" in bpf["fix"], bpf


def test_no_daemon(tmp_path):
    found, rc = checks(str(tmp_path / "none.sock"))
    assert rc == 1
    assert found["daemon"]["status"] == "FAIL", found["daemon"]
    assert "start it" in found["daemon"]["fix"] and "ringprof run" in found["daemon"]["fix"]
    assert found["sampler"]["status"] == "WARN"


def test_absent_hardware_is_ok_not_present(tmp_path):
    found, _ = checks(str(tmp_path / "none.sock"))
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert found["nvidia"]["status"] == "OK" and "not present" in found["nvidia"]["message"]
        assert "cupti" not in found  # nothing to check without a driver
    if not any(n.startswith("neuron") for n in os.listdir("/dev")):
        assert found["neuron"]["status"] == "OK" and "not present" in found["neuron"]["message"] \
            or "libnrt" in found["neuron"]["message"]


def test_pid_frame_pointers(tmp_path):
    """cpu-burn is built with frame pointers: its binary is found likely to
    have them, by the prologue count."""
    p = subprocess.Popen([CPU_BURN, "5"], stdout=subprocess.DEVNULL)
    try:
        r = doctor("--json", "--pid", str(p.pid), socket=str(tmp_path / "none.sock"))
        rows = [c for c in json.loads(r.stdout) if c["check"] == f"pid-{p.pid}"]
        burn = [c for c in rows if c["message"].startswith(os.path.realpath(CPU_BURN) + ":")]
        assert burn and "frame pointers likely" in burn[0]["message"], rows
        assert ".eh_frame present" in burn[0]["message"], burn
    finally:
        p.kill()
        p.wait()
    r = doctor("--pid", "999999999", socket=str(tmp_path / "none.sock"))
    assert r.returncode == 2 or "FAIL  pid" in r.stdout, r.stdout
