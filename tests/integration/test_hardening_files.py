"""Issue 10, the log directory's files, as its attacker would go at them:
the log directory is 2770 root:<group> and a member of the group (nobody
in nogroup, through setpriv) plants links, FIFOs, huge files and
leftovers.  The root daemon never writes outside the log tree, never
blocks on what it reads back, and cleans its own leftovers at start."""

import grp
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from daemon_harness import Daemon, UnixHTTPConnection

NOBODY = 65534
SETPRIV = shutil.which("setpriv")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not SETPRIV,
                                reason="needs root and setpriv (util-linux) for the group member")

HOST = "vm"
CONFIG = f"""
[daemon]
host_name = {HOST}
seal_interval = 100ms
[sessions]
exports = summary,json
"""
EXPORT_SUFFIXES = (".xplane.pb", ".pftrace", ".cpu.pb.gz", ".json", ".summary.txt")
# "Answers within 1 s", allowed 3 s on a loaded 2-core test machine: a
# daemon blocked on a FIFO never answers at all.
ANSWER_S = 3


def group():
    return grp.getgrnam("nogroup").gr_gid


@pytest.fixture
def box():
    """base/logs (2770 root:nogroup, the log directory), base/secret
    (root's alone: what the attacker aims at), and a daemon on them."""
    base = tempfile.mkdtemp(prefix="ringprof-files-")
    os.chmod(base, 0o755)
    logs = os.path.join(base, "logs")
    os.mkdir(logs)
    os.chown(logs, 0, group())
    os.chmod(logs, 0o2770)
    secret = os.path.join(base, "secret")
    os.mkdir(secret, 0o700)
    os.mkdir(os.path.join(secret, "dir"), 0o700)
    d = Daemon(base, config=CONFIG)
    yield d, logs, secret
    d.stop()
    shutil.rmtree(base, ignore_errors=True)


def as_member(script):
    """Runs python code as nobody:nogroup, a member of the log directory's group."""
    r = subprocess.run([SETPRIV, f"--reuid={NOBODY}", f"--regid={group()}", "--clear-groups",
                        sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def tree(path):
    """Every file and directory under path: content and mtime."""
    seen = {}
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            data = open(p, "rb").read() if os.path.isfile(p) else None
            seen[p] = (data, st.st_mtime_ns, st.st_mode)
    return seen


def timed(d, method, path, body=None):
    """(status, data, seconds) of one request, failing past ANSWER_S."""
    t = time.monotonic()
    conn = UnixHTTPConnection(d.socket, timeout=ANSWER_S)
    conn.request(method, path, body=json.dumps(body) if body is not None else None)
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    return resp.status, json.loads(text) if text else None, time.monotonic() - t


def wait_for(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_planted_links_are_never_followed(box):
    d, logs, secret = box
    d.start()
    pid = d.ok("GET", "/v1/status")["pid"]
    # The temporary names the daemon used to write (<file>.tmp<PID>,
    # <host>.manifest.json.tmp) in one session, every final name in
    # another: each a link to a root-only file.
    temps = [f"{HOST}.manifest.json.tmp"] + [f"{HOST}{s}.tmp{pid}" for s in EXPORT_SUFFIXES]
    finals = [f"{HOST}.manifest.json", f"{HOST}.open", f"{HOST}.host.chunks",
              f"{HOST}.cpu.chunks"] + [f"{HOST}{s}" for s in EXPORT_SUFFIXES]
    plants = [("evil", n) for n in temps] + [("evil2", n) for n in finals]
    for i in range(len(plants)):
        with open(os.path.join(secret, f"target{i}"), "w") as f:
            f.write("precious\n")
    # A real session in a run of root's, then the attacker swaps the run
    # for a link.
    d.ok("POST", "/v1/snapshot", {"last": "1s", "run": "goodrun", "name": "first"})
    as_member(f"""
import os
profile = {logs!r} + "/evilrun/plugins/profile"
for i, (sid, n) in enumerate({plants!r}):
    os.makedirs(profile + "/" + sid, exist_ok=True)
    os.symlink({secret!r} + f"/target{{i}}", profile + "/" + sid + "/" + n)
os.symlink({secret!r} + "/dir", {logs!r} + "/linkrun")
os.symlink({secret!r} + "/dir", profile + "/linked")
os.rename({logs!r} + "/goodrun", {logs!r} + "/goodrun.moved")
os.symlink({secret!r} + "/dir", {logs!r} + "/goodrun")
""")
    before = tree(secret)
    reason = "line1\n* * * * * root touch /tmp/pwned\n"
    refusals = {
        ("evilrun", "evil"): "owned by neither uid 0",
        ("evilrun", "evil2"): "owned by neither uid 0",
        ("evilrun", "linked"): "owned by neither uid 0",
        ("linkrun", "x"): "linkrun is a symbolic link",
        ("goodrun", "second"): "goodrun is a symbolic link",
    }
    answers = {}
    for run, name in refusals:
        answers[run, name] = d.request("POST", "/v1/snapshot",
                                       {"last": "1s", "run": run, "name": name, "reason": reason})
        time.sleep(0.5)  # exports of a session that landed would be written now
    # A session in a run of its own still lands, with its exports.
    snap = d.ok("POST", "/v1/snapshot", {"last": "1s", "name": "safe", "reason": reason})
    wait_for(os.path.join(snap["path"], f"{HOST}.summary.txt"))
    assert tree(secret) == before
    assert os.listdir(os.path.join(secret, "dir")) == []
    for (run, name), why in refusals.items():
        status, data = answers[run, name]
        assert 400 <= status < 600, (run, name, status, data)
        assert why in str(data), (run, name, data)
        assert "remove" in str(data), data  # and says what fixes it
    assert d.alive()


def test_fifo_and_huge_manifest_never_block(box):
    d, logs, secret = box
    d.start()
    snap = d.ok("POST", "/v1/snapshot", {"last": "1s", "name": "real"})
    # In a session of the attacker's own run, and (as if it got there) in
    # the daemon's own session.
    as_member(f"""
import os
s = {logs!r} + "/evilrun/plugins/profile/s1"
os.makedirs(s)
os.mkfifo(s + "/x.manifest.json")
with open(s + "/big.manifest.json", "wb") as f:
    f.truncate(200 << 20)
os.mkfifo(s + "/KEEP")
""")
    os.mkfifo(os.path.join(snap["path"], "x.manifest.json"))
    with open(os.path.join(snap["path"], "y.manifest.json"), "wb") as f:
        f.truncate(200 << 20)

    stamps = []  # the snapshots taken meanwhile, each listed

    def answers():
        status, data, took = timed(d, "GET", "/v1/sessions")
        assert status == 200 and took < ANSWER_S, (status, took)
        assert [s["id"] for s in data["sessions"]] == ["real"] + stamps, data  # as made
        status, _, took = timed(d, "GET", "/v1/status")
        assert status == 200 and took < ANSWER_S, (status, took)
        status, _, took = timed(d, "GET", "/v1/sessions/s1")
        assert status == 404 and took < ANSWER_S, (status, took)
        status, _, took = timed(d, "GET", "/v1/sessions/real")
        assert status == 200 and took < ANSWER_S, (status, took)
        status, _, took = timed(d, "POST", "/v1/sessions/real/stop")
        assert status == 409 and took < ANSWER_S, (status, took)
        status, data, took = timed(d, "POST", "/v1/snapshot", {"last": "1s"})
        assert status == 201 and took < ANSWER_S, (status, data, took)
        stamps.append(data["id"])

    answers()
    # Retention's pass at start reads every manifest too.
    d.stop()
    d.proc.wait(timeout=30)
    d.start(timeout=ANSWER_S + 10)
    answers()


def test_leftovers_cleaned_at_start(box):
    d, logs, secret = box
    d.start()
    snap = d.ok("POST", "/v1/snapshot", {"last": "1s", "name": "done"})
    done = snap["path"]
    wait_for(os.path.join(done, f"{HOST}.summary.txt"))
    d.stop()
    d.proc.wait(timeout=30)
    profile = os.path.dirname(done)

    def put(path, data=b"x" * 100):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    # Partial exports of the daemon that died (the older and the new
    # temporary names), and another host's export in progress.
    gone = [os.path.join(done, f"{HOST}.summary.txt.tmp12345"),
            os.path.join(done, f".{HOST}.json.tmp-0123456789abcdef"),
            os.path.join(done, f"{HOST}.manifest.json.tmp")]
    kept = [os.path.join(done, "other.json.tmp999")]
    # Sessions it was writing: a stale marker and chunks, no manifest; one
    # whose chunks file stayed empty when the disk filled.
    for sid, chunk in (("crashed", b"x" * 4096), ("enospc", b"")):
        put(os.path.join(profile, sid, f"{HOST}.open"), b"")
        put(os.path.join(profile, sid, f"{HOST}.host.chunks"), chunk)
    # A session shared with another host that is still writing its part,
    # and one of a host whose name starts with this one's.
    shared = os.path.join(profile, "shared")
    put(os.path.join(shared, f"{HOST}.open"), b"")
    put(os.path.join(shared, f"{HOST}.host.chunks"))
    gone += [os.path.join(shared, f"{HOST}.open"), os.path.join(shared, f"{HOST}.host.chunks")]
    kept += [os.path.join(shared, "other.open"), os.path.join(shared, "other.host.chunks"),
             os.path.join(profile, "longer", f"{HOST}.b.open"),
             os.path.join(profile, "longer", f"{HOST}.b.host.chunks")]
    for p in gone + kept:
        if not os.path.exists(p):
            put(p)

    d.start()
    for p in gone:
        assert not os.path.exists(p), p
    for p in kept:
        assert os.path.exists(p), p
    assert not os.path.exists(os.path.join(profile, "crashed"))
    assert not os.path.exists(os.path.join(profile, "enospc"))
    assert os.path.exists(os.path.join(done, f"{HOST}.manifest.json"))
    assert os.path.exists(os.path.join(done, f"{HOST}.summary.txt"))
    log = open(d.log).read()
    assert "left by a daemon of this host that stopped while writing it" in log, log
    ids = [s["id"] for s in d.ok("GET", "/v1/sessions")["sessions"]]
    assert ids == ["done"], ids
    out = d.cli("sessions", check=True).stdout
    for sid in ("crashed", "enospc", "shared", "longer"):
        assert sid not in out, out
