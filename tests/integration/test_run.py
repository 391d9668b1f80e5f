"""ringprof run -- CMD: a session from the command's start to its exit, as a
user runs it: beside a running daemon and with none (a private one), the
command's exit status passed through, Ctrl-C passed on, and only the
command's process tree in the session.  Also ringprofd's pidfile and
ringprof shutdown, the supported way to stop a daemon."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from daemon_harness import BUILD, CLI, Daemon, dump, manifest, write_token, free_port, UnixHTTPConnection

CPU_BURN = os.environ.get("RINGPROF_CPU_BURN", os.path.join(BUILD, "tests", "cpu-burn"))
ROOTED = os.geteuid() == 0

CONFIG = """
[daemon]
seal_interval = 100ms
[sampler]
enabled = auto
frequency = 199
"""

# The workload: an annotated CPU burn in a function of its own; writes its
# pid to PIDFILE, then exits with EXIT (or, with EXIT "wait", loops until
# interrupted, after writing PIDFILE).
SCRIPT = """
import os, sys, time
import ringprof
pidfile, code = sys.argv[1], sys.argv[2]

def run_burn(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1
    return x

with ringprof.annotate("run-work"):
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    if code == "wait":
        while True:
            run_burn(0.1)
    run_burn(1.5)
sys.exit(int(code))
"""


def env_for(tmp_path, **extra):
    """A user's environment: the Python package on the PYTHONPATH that
    conftest.py sets; TMPDIR a short directory of the test's own (a socket
    path has ~100 bytes)."""
    env = dict(os.environ, TMPDIR=tempfile.mkdtemp(prefix="rprun"))
    env.update(extra)
    return env


def processes_naming(text):
    """Pids whose command line holds text (pgrep -f, read here: the
    sanitized test pass preloads ASan into every program it starts)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    pids.append(int(entry))
        except (OSError, ValueError):
            pass
    return pids


def write_script(tmp_path):
    path = tmp_path / "work.py"
    path.write_text(SCRIPT)
    return str(path)


def session_path(stderr):
    line = next(line for line in stderr.splitlines() if line.startswith("ringprof run: session "))
    return line.split(": ", 2)[2].strip()


def summary_processes(stdout):
    """pid -> samples of a summary's process table."""
    procs, section = {}, False
    for line in stdout.splitlines():
        if line.startswith("process "):
            section = True
            continue
        if section and not line.strip():
            break
        if section:
            f = line[16:].split()
            procs[int(f[0])] = int(f[1])
    return procs


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("run"), config=CONFIG).start()
    try:
        yield d
    finally:
        d.stop()


def test_run_beside_daemon_keeps_only_the_command(daemon, tmp_path):
    """The session holds the script's annotation and, when the sampler runs,
    only its CPU samples: a busy process beside it is in the rings but not in
    the session's summary; the exit status comes back."""
    script = write_script(tmp_path)
    pidfile = tmp_path / "pid"
    burner = subprocess.Popen([CPU_BURN, "6"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        r = subprocess.run([CLI, "--socket", daemon.socket, "run", "--name", "beside", "--",
                            "python3", script, str(pidfile), "3"],
                           capture_output=True, text=True, timeout=120, env=env_for(tmp_path))
    finally:
        burner.wait(timeout=60)
    assert r.returncode == 3, (r.stdout, r.stderr)
    pid = int(pidfile.read_text())
    path = session_path(r.stderr)
    m = manifest(path)
    assert m["state"] == "complete", m
    assert pid in m["filter"]["pids"] and burner.pid not in m["filter"]["pids"], m
    assert "run-work" in r.stderr  # the summary printed at the end

    events = dump(path)
    ranges = [e for e in events if e["kind"] == "range_begin" and e.get("name") == "run-work"]
    assert [e["pid"] for e in ranges] == [pid], ranges
    status = daemon.ok("GET", "/v1/status")
    sampler = next(c for c in status["collectors"] if c["name"] == "cpu_sampler")
    if sampler["state"] != "running":
        pytest.skip("the sampler does not run here: " + sampler.get("reason", ""))
    # The rings (and the raw chunks) hold the burner's samples; the session's
    # views do not.
    raw = {e["pid"] for e in events if e["kind"] == "cpu_sample"}
    assert burner.pid in raw and pid in raw, raw
    out = daemon.cli("summary", "beside", check=True).stdout
    procs = summary_processes(out)
    assert pid in procs and procs[pid] > 50, out
    assert set(procs) <= set(m["filter"]["pids"]), out
    # A filter given on the command line replaces the session's own.
    other = daemon.cli("summary", "beside", "--pid", str(burner.pid), check=True).stdout
    assert burner.pid in summary_processes(other), other
    # The exports the daemon writes at close apply the session's filter too.
    exported = os.path.join(path, m["host"] + ".json")
    deadline = time.monotonic() + 60
    while not os.path.exists(exported):
        assert time.monotonic() < deadline, os.listdir(path)
        time.sleep(0.1)
    samples = json.load(open(exported))["cpu_samples"]
    assert samples and {s["pid"] for s in samples} <= set(m["filter"]["pids"]), samples[:3]


def test_stop_pids_checked(daemon):
    """The stop request's pids: an array of at most 64 positive integers."""
    for i, (bad, why) in enumerate((("4242", "an array"), ([0], "not a process id"),
                                    (["x"], "not a process id"),
                                    (list(range(1, 66)), "over the limit of 64"))):
        name = f"pids-check-{i}"
        daemon.ok("POST", "/v1/sessions", {"name": name})
        status, body = daemon.request("POST", f"/v1/sessions/{name}/stop", {"pids": bad})
        assert status == 400 and why in body["error"]["message"], (bad, body)
        done = daemon.ok("POST", f"/v1/sessions/{name}/stop", {"pids": [1, 2]})
        assert done["filter"] == {"pids": [1, 2]}


def test_run_without_daemon_starts_a_private_one(tmp_path):
    """No daemon on the socket: a private one runs for the command, writes
    the session to ./ringprof-sessions, and is gone afterwards with its
    temporary directory."""
    script = write_script(tmp_path)
    pidfile = tmp_path / "pid"
    work = tmp_path / "cwd"
    work.mkdir()
    env = env_for(tmp_path, RINGPROF_SOCKET=str(tmp_path / "nobody-here.sock"))
    tmpdir = env["TMPDIR"]
    r = subprocess.run([CLI, "run", "--sample-hz", "199", "--", "python3", script, str(pidfile), "0"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=work)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "started a private one" in r.stderr, r.stderr
    path = session_path(r.stderr)
    assert path.startswith(str(work / "ringprof-sessions") + "/"), path
    pid = int(pidfile.read_text())
    events = dump(path)
    assert [e["pid"] for e in events if e["kind"] == "range_begin" and e.get("name") == "run-work"] == [pid]
    assert pid in manifest(path)["filter"]["pids"]
    if ROOTED:  # the private daemon's sampler runs with root's privileges
        assert any(e["kind"] == "cpu_sample" and e["pid"] == pid for e in events)
        assert pid in summary_processes(r.stderr), r.stderr
    # The private daemon is gone, and so is its temporary directory.
    assert os.listdir(tmpdir) == []
    assert not processes_naming(tmpdir + "/")
    os.rmdir(tmpdir)


def test_run_ctrl_c_stops_the_session(daemon, tmp_path):
    """SIGINT to ringprof run reaches the command (KeyboardInterrupt), the
    session is stopped and on disk, and the exit status is 130."""
    script = write_script(tmp_path)
    pidfile = tmp_path / "pid"
    p = subprocess.Popen([CLI, "--socket", daemon.socket, "run", "--name", "interrupted", "--",
                          "python3", script, str(pidfile), "wait"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env_for(tmp_path))
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.05)
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (out, err)
    assert "KeyboardInterrupt" in err
    path = session_path(err)
    m = manifest(path)
    assert m["state"] == "complete" and m["id"] == "interrupted", m
    pid = int(pidfile.read_text())
    ends = [e for e in dump(path) if e["kind"] == "range_end" and e["pid"] == pid]
    assert ends, "the annotation closed by the KeyboardInterrupt is in the session"
    assert daemon.ok("GET", "/v1/status")["open_sessions"] == []


def test_run_asks_onednn_to_name_its_kernels(daemon, tmp_path):
    """oneDNN's generated kernels are named through the perf map it writes
    when ONEDNN_JIT_PROFILE=2: run sets it, keeps a value the command has,
    and --no-onednn-perf leaves it out."""
    out = tmp_path / "env"
    show = ["sh", "-c", f'echo "${{ONEDNN_JIT_PROFILE-unset}}" >> {out}']
    for extra, env_value in (([], None), ([], "1"), (["--no-onednn-perf"], None)):
        env = env_for(tmp_path)
        env.pop("ONEDNN_JIT_PROFILE", None)
        if env_value:
            env["ONEDNN_JIT_PROFILE"] = env_value
        r = subprocess.run([CLI, "--socket", daemon.socket, "run", *extra, "--"] + show,
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0, r.stderr
    assert out.read_text().split() == ["2", "1", "unset"]


def test_run_usage_errors(tmp_path):
    r = subprocess.run([CLI, "run"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "give the command" in r.stderr
    r = subprocess.run([CLI, "run", "--name", "../x", "--", "true"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--name" in r.stderr
    r = subprocess.run([CLI, "run", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--no-python-perf" in r.stdout


# ---- the pidfile and ringprof shutdown ----

def test_pidfile_and_shutdown(tmp_path):
    """ringprofd writes <state_dir>/ringprofd.pid (replacing a planted link,
    never writing through it); ringprof shutdown stops it and waits; the
    pidfile goes with it."""
    d = Daemon(tmp_path)
    os.makedirs(d.state_dir, mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    os.symlink(victim, os.path.join(d.state_dir, "ringprofd.pid"))
    d.start()
    pidfile = os.path.join(d.state_dir, "ringprofd.pid")
    deadline = time.monotonic() + 5  # written just after the producer socket
    while os.path.islink(pidfile) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.islink(pidfile)
    assert int(open(pidfile).read()) == d.proc.pid
    assert victim.read_text() == "keep me\n"
    r = d.cli("shutdown")
    assert r.returncode == 0, r.stderr
    assert f"pid {d.proc.pid}" in r.stdout
    assert d.proc.poll() == 0  # shutdown waited for the exit
    assert not os.path.exists(pidfile) and not os.path.exists(d.socket)
    # Nothing to stop now: the usual "is the daemon running?" error.
    r = d.cli("shutdown")
    assert r.returncode == 1 and "is the daemon running" in r.stderr


def test_shutdown_refused_over_tcp_and_to_other_users(tmp_path):
    """Over TCP, even with the token, and from a user who may use the socket
    but does not own the daemon, POST /v1/shutdown is refused (403) and the
    daemon keeps running."""
    token, token_file = write_token(tmp_path)
    port = free_port()
    # A directory others may pass through (pytest's are root's own).
    home = tempfile.mkdtemp(prefix="rpshut")
    os.chmod(home, 0o755)
    d = Daemon(home, config=f"[api]\ntcp_listen = 127.0.0.1:{port}\ntoken_file = {token_file}\n")
    d.start()
    try:
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v1/shutdown", headers={"Authorization": "Bearer " + token})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 403 and "TCP" in body["error"]["message"], body
        if ROOTED:
            # The socket opened to everyone, as a group would open it to its members.
            os.chmod(d.socket, 0o666)
            r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                CLI, "--socket", d.socket, "shutdown"],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 1 and "may not stop this ringprofd" in r.stderr, r.stderr
        time.sleep(0.5)
        assert d.alive()
        assert d.ok("GET", "/v1/status")["pid"] == d.proc.pid
    finally:
        d.stop()
        shutil.rmtree(home)
