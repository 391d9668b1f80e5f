"""Looking at one job at session time: `ringprof snapshot/start/stop
--pid/--cgroup`.  The daemon records the job's processes in the session's
manifest ("filter"), and every export and summary of the session keeps
only their events.  Two cpu-burn processes run side by side, one in a
cgroup of its own made for the test under the cgroup2 mount; the summary
of each filtered session must hold only the processes asked for.  Needs
root (the sampler, making a cgroup)."""

import json
import os
import subprocess
import time
import uuid

import pytest

from daemon_harness import Daemon, manifest
from test_cpu_profile import CONFIG, CPU_BURN, read_summary

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the eBPF sampler and making a cgroup need root")


def cgroup2_mount():
    for line in open("/proc/self/mountinfo"):
        left, _, right = line.partition(" - ")
        if right.startswith("cgroup2 "):
            return left.split()[4]
    return None


@pytest.fixture
def cgroup():
    """A new cgroup (its path as /proc/PID/cgroup shows it, its directory)."""
    root = cgroup2_mount()
    if not root or not os.access(root, os.W_OK):
        pytest.skip("no writable cgroup v2 hierarchy on this host")
    name = "/ringprof-test-" + uuid.uuid4().hex[:8]
    path = root + name
    try:
        os.mkdir(path)
    except OSError as e:
        pytest.skip(f"cannot make a cgroup here: {e}")
    try:
        yield name, path
    finally:
        for _ in range(50):  # its processes are gone once reaped
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.1)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("job"), config=CONFIG).start()
    try:
        yield d
    finally:
        d.stop()


def burn(seconds, cgroup_dir=None):
    """cpu-burn, born in cgroup_dir when given."""
    def join():
        with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    return subprocess.Popen([CPU_BURN, str(seconds)], stdout=subprocess.DEVNULL,
                            preexec_fn=join if cgroup_dir else None)


def snapshot(d, name, *args):
    r = d.cli("--json", "snapshot", "--last", "2s", "--name", name, *args, check=True)
    return json.loads(r.stdout)["path"]


def sampled(d, name):
    out, _, _, processes, _ = read_summary(d, name)
    return out, {pid for pid, p in processes.items() if p["samples"] > 0}


def test_snapshot_of_one_cgroup_and_one_pid(daemon, cgroup):
    name, path = cgroup
    inside, outside = burn(4, path), burn(4)
    try:
        time.sleep(2.5)
        job = snapshot(daemon, "job-cgroup", "--cgroup", name)
        other = snapshot(daemon, "job-pid", "--pid", str(outside.pid))
        everything = snapshot(daemon, "job-all")
    finally:
        inside.wait(timeout=30)
        outside.wait(timeout=30)
    m = manifest(job)
    assert m["filter"] == {"pids": [inside.pid], "cgroup": name}, m.get("filter")
    out, pids = sampled(daemon, "job-cgroup")
    assert pids == {inside.pid}, out
    assert f"only the events of process {inside.pid}" in out, out

    assert manifest(other)["filter"] == {"pids": [outside.pid]}
    out, pids = sampled(daemon, "job-pid")
    assert pids == {outside.pid}, out

    assert "filter" not in manifest(everything) or not manifest(everything)["filter"]
    out, pids = sampled(daemon, "job-all")
    assert {inside.pid, outside.pid} <= pids, out


def test_session_follows_its_cgroup_from_start_to_stop(daemon, cgroup):
    """The cgroup is read at the start (a process that exits before the
    stop still counts) and again at the stop (one that joined since
    counts too); the stop may add pids."""
    name, path = cgroup
    early = burn(1, path)
    time.sleep(0.3)
    sid = daemon.cli("start", "--cgroup", name, "--name", "job-session", check=True).stdout.strip()
    assert sid == "job-session"
    early.wait(timeout=30)  # gone before the stop
    late, extra, bystander = burn(3, path), burn(3), burn(3)
    try:
        time.sleep(1.5)
        r = daemon.cli("--json", "stop", sid, "--pid", str(extra.pid), check=True)
    finally:
        for p in (late, extra, bystander):
            p.wait(timeout=30)
    m = manifest(json.loads(r.stdout)["path"])
    assert m["filter"]["cgroup"] == name
    assert sorted(m["filter"]["pids"]) == sorted([early.pid, late.pid, extra.pid]), m["filter"]
    out, pids = sampled(daemon, "job-session")
    assert bystander.pid not in pids and late.pid in pids and extra.pid in pids, out


def test_bad_job_requests_are_refused_with_the_fix(daemon, cgroup):
    name, _ = cgroup
    for args, words in ((["--cgroup", name + "-missing"], "no cgroup"),
                        (["--cgroup", name + "/../etc"], "'..'"),
                        (["--pid", "0"], "not a process id")):
        r = daemon.cli("snapshot", "--last", "1s", *args)
        assert r.returncode != 0 and words in r.stderr, (args, r.stderr)
    status, data = daemon.request("POST", "/v1/snapshot", {"cgroup": 7})
    assert status == 400 and "cgroup must be a path" in data["error"]["message"], data
    status, data = daemon.request("POST", "/v1/snapshot", {"pids": list(range(1, 66))})
    assert status == 400 and "name the job's cgroup" in data["error"]["message"], data
    sid = daemon.cli("start", "--cgroup", name, check=True).stdout.strip()
    r = daemon.cli("stop", sid, "--cgroup", "/another")
    assert r.returncode != 0 and "one cgroup per session" in r.stderr, r.stderr
    daemon.cli("stop", sid, check=True)


def test_python_package_names_the_job(daemon, monkeypatch):
    import ringprof
    monkeypatch.setenv("RINGPROF_SOCKET", daemon.socket)
    s = ringprof.snapshot(last=1, name="job-python", pids=[os.getpid()])
    assert manifest(s["path"])["filter"] == {"pids": [os.getpid()]}
    sid = ringprof.start_session(name="job-python-session", pids=[os.getpid()])
    s = ringprof.stop_session(sid, pids=[1])
    assert sorted(manifest(s["path"])["filter"]["pids"]) == sorted([1, os.getpid()])
    with pytest.raises(TypeError):
        ringprof.snapshot(last=1, pids=["4242"])
    with pytest.raises(ringprof.RingprofError) as e:
        ringprof.snapshot(last=1, cgroup="/../etc")
    assert e.value.status == 400
