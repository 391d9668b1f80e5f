"""Many hosts and retention, end to end: several real daemons, each its own
"host" ([daemon] host_name) on a loopback TCP port, writing into one shared
log directory; `ringprof snapshot --hosts` fanning out to them; the log
directory quota enforced by the daemon."""

import json
import os
import re
import socket
import subprocess
import time

import pytest

from daemon_harness import CLI, RINGPROFD, Daemon, manifest, manifests

TOKEN = "0123456789abcdef0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_token(tmp):
    path = os.path.join(str(tmp), "token")
    with open(path, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(path, 0o600)
    return path


def host_config(name, port, token_file, extra=""):
    return f"""
[daemon]
host_name = {name}
seal_interval = 100ms
[api]
tcp_listen = 127.0.0.1:{port}
token_file = {token_file}
[sampler]
enabled = false
{extra}"""


@pytest.fixture
def cluster(tmp_path):
    """Three hosts sharing tmp/shared as their log directory."""
    shared = tmp_path / "shared"
    token = write_token(tmp_path)
    hosts = []
    try:
        for name in ("node-a", "node-b", "node-c"):
            port = free_port()
            home = tmp_path / name
            home.mkdir()
            d = Daemon(home, config=host_config(name, port, token),
                       extra_args=("--logdir", str(shared))).start()
            hosts.append((name, f"127.0.0.1:{port}", d))
        yield shared, token, hosts
    finally:
        for _, _, d in hosts:
            d.stop()


def cli(*args, env=None):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120, env=env)


def rows(stdout):
    """The HOST/RESULT table: {host: result}."""
    lines = stdout.splitlines()
    assert re.match(r"^HOST +RESULT$", lines[0]), stdout
    return dict(re.match(r"^(\S+) +(.*)$", line).groups() for line in lines[1:])


def test_snapshot_fans_out_to_one_shared_session(cluster):
    shared, token, hosts = cluster
    end_ns = time.time_ns() - 300_000_000
    end = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(end_ns // 10**9)) + \
        f".{end_ns % 10**9:09d}Z"
    r = cli("snapshot", "--hosts", ",".join(addr for _, addr, _ in hosts), "--token-file", token,
            "--last", "2s", "--end", end, "--name", "job42", "--run", "train")
    assert r.returncode == 0, (r.stdout, r.stderr)
    session = os.path.join(str(shared), "train", "plugins", "profile", "job42")
    assert rows(r.stdout) == {addr: session for _, addr, _ in hosts}

    names = sorted(os.listdir(session))
    for name, _, _ in hosts:
        assert f"{name}.manifest.json" in names and f"{name}.host.chunks" in names, names
    assert not [n for n in names if n.endswith(".open")], names
    found = manifests(session)
    assert [m["host"] for m in found] == ["node-a", "node-b", "node-c"]
    for m in found:
        assert m["state"] == "complete", m
        assert abs(m["requested"]["end_wall_ns"] - end_ns) <= 1_000_000, (m["requested"], end_ns)
        assert m["requested"]["end_ns"] - m["requested"]["start_ns"] == 2_000_000_000

    # The same name again: every host has its part there already.
    again = cli("snapshot", "--hosts", hosts[0][1], "--token-file", token, "--name", "job42",
                "--run", "train")
    assert again.returncode == 1
    assert "already exists in run 'train'" in again.stdout and "node-a" in again.stdout

    # Any daemon shows every host's part.
    _, _, b = hosts[1]
    got = b.ok("GET", "/v1/sessions/job42")
    assert got["host"] == "node-b" and got["hosts"] == ["node-a", "node-b", "node-c"]
    listed = [s for s in b.ok("GET", "/v1/sessions")["sessions"] if s["id"] == "job42"]
    assert [s["host"] for s in listed] == ["node-a", "node-b", "node-c"]
    table = b.cli("sessions", check=True).stdout
    assert len(re.findall(r"^\S+ +job42 +train +node-[abc] +snapshot +complete ", table, re.M)) == 3
    summary = b.cli("summary", "job42", check=True).stdout
    assert re.findall(r"^host +(\S+)$", summary, re.M) == ["node-a", "node-b", "node-c"]

    # Each daemon exported its own part when it closed: one XProf session,
    # a file per host.
    want = [f"{name}.xplane.pb" for name, _, _ in hosts]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not set(want) <= set(os.listdir(session)):
        time.sleep(0.1)
    assert sorted(n for n in os.listdir(session) if n.endswith(".xplane.pb")) == want


def test_end_defaults_to_one_now_for_every_host(cluster):
    _, token, hosts = cluster
    before = time.time_ns()
    r = cli("--json", "snapshot", "--hosts", ",".join(addr for _, addr, _ in hosts),
            "--last", "1s", env=dict(os.environ, RINGPROF_TOKEN=TOKEN))
    assert r.returncode == 0, (r.stdout, r.stderr)
    results = json.loads(r.stdout)["hosts"]
    ends = {h["session"]["requested"]["end_wall_ns"] for h in results}
    assert len(ends) == 1 and before <= ends.pop() <= time.time_ns()
    assert len({h["session"]["path"] for h in results}) == 1
    assert len(manifests(results[0]["session"]["path"])) == 3


def test_wait_waits_for_each_hosts_exports(cluster):
    """--wait with --hosts: each host's exports, asked of that host, are
    written when the command returns, and printed."""
    shared, token, hosts = cluster
    r = cli("snapshot", "--hosts", ",".join(addr for _, addr, _ in hosts), "--token-file", token,
            "--last", "1s", "--name", "waited", "--wait")
    assert r.returncode == 0, (r.stdout, r.stderr)
    session = os.path.join(str(shared), "default", "plugins", "profile", "waited")
    for m in manifests(session):
        for fmt, st in m["exports"].items():
            assert st["state"] == "written", (m["host"], fmt, st)
        xplane = os.path.join(session, m["host"] + ".xplane.pb")
        assert os.path.getsize(xplane) == m["exports"]["xplane"]["bytes"] > 0
        assert f"wrote {xplane} (" in r.stdout, r.stdout


def test_a_host_down_is_reported_and_the_rest_succeed(cluster):
    shared, token, hosts = cluster
    down = f"127.0.0.1:{free_port()}"
    addrs = [hosts[0][1], down, hosts[1][1], hosts[2][1]]
    r = cli("snapshot", "--hosts", ",".join(addrs), "--token-file", token, "--last", "1s",
            "--name", "partial")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "1 of 4 hosts failed" in r.stderr
    table = rows(r.stdout)
    session = os.path.join(str(shared), "default", "plugins", "profile", "partial")
    assert table[down].startswith(f"cannot reach ringprofd at http://{down}: ")
    assert all(table[a] == session for a in addrs if a != down)
    assert len(manifests(session)) == 3


def metric(daemon, name):
    status, text = daemon.request("GET", "/metrics")
    assert status == 200
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def session_ids(logdir):
    profile = os.path.join(logdir, "default", "plugins", "profile")
    return sorted(n for n in os.listdir(profile) if not n.startswith("."))


def wait_for_value(daemon, get, want, timeout=10):
    """Waits until get() == want; on timeout says what it was last, and
    the daemon's log, so that a rare failure can be read from CI."""
    deadline = time.monotonic() + timeout
    while (got := get()) != want:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: wanted {want!r}, last {got!r}; daemon log:\n"
                                 + open(daemon.log).read())
        time.sleep(0.05)


def test_retention_deletes_the_oldest_and_keeps_kept(tmp_path):
    config = "[sampler]\nenabled = false\n[sessions]\nmax_count = 3\n"
    d = Daemon(tmp_path, config=config).start()
    try:
        for name in ("s1", "s2", "s3"):
            d.ok("POST", "/v1/snapshot", {"last": "1s", "name": name})
        kept = d.cli("keep", "s2", check=True).stdout
        assert "kept s2" in kept
        assert os.path.exists(os.path.join(d.logdir, "default", "plugins", "profile", "s2", "KEEP"))
        assert d.ok("GET", "/v1/sessions/s2")["keep"] is True
        d.ok("POST", "/v1/snapshot", {"last": "1s", "name": "s4"})
        wait_for_value(d, lambda: session_ids(d.logdir), ["s2", "s3", "s4"])
        d.ok("POST", "/v1/snapshot", {"last": "1s", "name": "s5"})
        wait_for_value(d, lambda: session_ids(d.logdir), ["s2", "s4", "s5"])
        wait_for_value(d, lambda: metric(d, "ringprof_retention_deleted_total"), 2)
        assert metric(d, "ringprof_logdir_sessions") == 3
        assert metric(d, "ringprof_logdir_bytes") > 0
        log = open(d.log).read()
        assert re.search(r"retention: deleted session \S+/default/plugins/profile/s1 \(", log), log
        assert "/s3 (" in log and "/s2 (" not in log
        assert [s["id"] for s in d.ok("GET", "/v1/sessions")["sessions"]] == ["s2", "s4", "s5"]
    finally:
        d.stop()

    # At start: a smaller quota applies at once, and a quota the disk
    # cannot hold is a warning, not a failure.
    config = "[sampler]\nenabled = false\n[sessions]\nmax_count = 1\nmax_bytes = 1048576TiB\n"
    d = Daemon(tmp_path, config=config).start()
    try:
        assert session_ids(d.logdir) == ["s2", "s5"]
        assert metric(d, "ringprof_retention_deleted_total") == 1
        log = open(d.log).read()
        assert "ring budgets (64.0 MiB) + session quota (1.0 EiB) exceed the " in log, log
        assert "lower [rings] budget or [sessions] max_bytes" in log
        assert "none left may be deleted" in log
        assert manifest(os.path.join(d.logdir, "default", "plugins", "profile", "s5"))["id"] == "s5"
    finally:
        d.stop()


DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")


def slurm_script(name, env):
    r = subprocess.run(["bash", os.path.join(DEPLOY, "slurm", name)], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, RINGPROF=CLI, **env))
    assert r.returncode == 0, (r.stdout, r.stderr)


def test_slurm_prolog_and_epilog(cluster, tmp_path):
    shared, token, hosts = cluster
    _, addr, d = hosts[0]
    node = {"RINGPROF_SOCKET": d.socket, "SLURM_JOB_ID": "77"}
    slurm_script("prolog.sh", node)
    assert d.ok("GET", "/v1/sessions/job77")["state"] == "open"
    slurm_script("epilog.sh", node)
    job = d.ok("GET", "/v1/sessions/job77")
    assert job["state"] == "complete" and job["run"] == "slurm"

    # On the controller: a failed job's nodes, at once, named after it.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho 127.0.0.1\n")
    (bin_dir / "scontrol").chmod(0o755)
    controller = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_NODELIST": "node[1]",
                  "RINGPROF_SLURM_MODE": "failure", "RINGPROF_PORT": addr.split(":")[1],
                  "RINGPROF_TOKEN_FILE": token, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    slurm_script("epilog.sh", dict(controller, SLURM_JOB_ID="78", SLURM_JOB_EXIT_CODE="0"))
    status, _ = d.request("GET", "/v1/sessions/job78")
    assert status == 404
    slurm_script("epilog.sh", dict(controller, SLURM_JOB_ID="79", SLURM_JOB_EXIT_CODE="256"))
    failed = d.ok("GET", "/v1/sessions/job79")
    assert failed["state"] == "complete" and "job 79 failed" in failed["trigger"]["reason"]


def test_daemonset_configuration_is_valid(tmp_path):
    """The ringprofd.conf the Kubernetes manifest ships loads as is."""
    text = open(os.path.join(DEPLOY, "k8s", "ringprofd-daemonset.yaml")).read()
    block = re.search(r"^  ringprofd\.conf: \|\n((?:    .*\n|\n)+)", text, re.M).group(1)
    conf = tmp_path / "ringprofd.conf"
    conf.write_text("\n".join(line[4:] for line in block.splitlines()) + "\n")
    r = subprocess.run([RINGPROFD, "--config", str(conf), "--print-config"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "tcp_listen = 0.0.0.0:7070" in r.stdout and "logdir = /shared/ringprof" in r.stdout
    assert "max_bytes = 500GiB" in r.stdout


def test_daemonset_confines_the_file_system_like_the_unit():
    """The DaemonSet's container writes only where the systemd unit lets
    ringprofd write (ProtectSystem=strict, ReadWritePaths): its state, its
    sockets and the session volume; everything else is read-only."""
    text = open(os.path.join(DEPLOY, "k8s", "ringprofd-daemonset.yaml")).read()
    assert re.search(r"^\s+readOnlyRootFilesystem: true$", text, re.M)
    assert re.search(r"^\s+allowPrivilegeEscalation: false$", text, re.M)
    mounts = re.findall(r"^\s+- \{name: (\w+), mountPath: ([^,}]+)(.*)\}$", text, re.M)
    writable = {name: path for name, path, rest in mounts if "readOnly: true" not in rest}
    assert writable == {"state": "/var/lib/ringprof", "sockets": "/run/ringprof",
                        "sessions": "/shared/ringprof"}, writable
