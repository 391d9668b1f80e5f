"""What deploy/ringprofd.service relies on, checked without systemd as
PID 1: the sd_notify protocol (READY, STATUS, WATCHDOG, STOPPING) spoken
to a listener on NOTIFY_SOCKET as systemd would set it up, and the group
of the sockets under the unit's Group=."""

import ctypes
import grp
import os
import re
import signal
import socket
import stat
import struct
import subprocess
import time

import pytest

from daemon_harness import Daemon, finish_producer, start_producer

STATUS_RE = re.compile(r"Recording: (\d+) rings?, (\d+) events held, (\d+) dropped, (\d+) open sessions?"
                       r"((?:; \w+ \w+)*)")


class Listener:
    """systemd's end of NOTIFY_SOCKET: a datagram socket that receives
    KEY=VALUE lines with the sender's credentials."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.messages = []  # (monotonic time, sender pid, {key: value})

    def receive(self, until, timeout):
        """Reads messages until until(messages) holds or timeout passes;
        returns whether it held."""
        deadline = time.monotonic() + timeout
        while not until(self.messages):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                return False
            pid = next((struct.unpack("3i", d[:12])[0] for level, kind, d in anc
                        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS), None)
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            self.messages.append((time.monotonic(), pid, fields))
        return True

    def with_key(self, key):
        return [m for m in self.messages if key in m[2]]

    def close(self):
        self.sock.close()


def status_counts(fields):
    m = STATUS_RE.fullmatch(fields["STATUS"])
    assert m, fields["STATUS"]
    counts = dict(zip(("rings", "events", "dropped", "open"), map(int, m.groups()[:4])))
    counts["collectors"] = [tuple(c.split()) for c in m.group(5).split("; ") if c]
    return counts


@pytest.fixture
def listener(tmp_path, monkeypatch):
    lst = Listener(str(tmp_path / "notify.sock"))
    monkeypatch.setenv("NOTIFY_SOCKET", lst.path)
    yield lst
    lst.close()


def watched_daemon(tmp_path, monkeypatch, watchdog_pid=None, config=None):
    """A daemon with a 2 s watchdog, as WatchdogSec=2s would start it;
    WATCHDOG_PID is the daemon's own pid unless given (systemd sets the
    main pid, known only once forked: a shell sets it, then execs)."""
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")
    d = Daemon(tmp_path, config=config)
    if watchdog_pid is None:
        d.args = ["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" "$@"', *d.args]
    else:
        monkeypatch.setenv("WATCHDOG_PID", str(watchdog_pid))
    return d


def test_ready_status_watchdog_stopping(tmp_path, monkeypatch, listener):
    d = watched_daemon(tmp_path, monkeypatch).start()
    try:
        assert listener.receive(lambda ms: ms, 10), "no READY=1 from ringprofd"
        _, pid, first = listener.messages[0]
        assert pid == d.proc.pid
        assert first.get("READY") == "1", first
        collectors = [(c["name"], c["state"]) for c in d.ok("GET", "/v1/status")["collectors"]]
        assert status_counts(first) == {"rings": 1, "events": 0, "dropped": 0, "open": 0,
                                        "collectors": collectors}

        produced = finish_producer(start_producer(d, 5000, 1))["produced"]
        d.ok("POST", "/v1/sessions", {"name": "watched"})
        # Pings at half the 2 s timeout; STATUS follows each one.
        def settled(ms):
            statuses = [m[2] for m in ms if "STATUS" in m[2]]
            return (sum("WATCHDOG" in m[2] for m in ms) >= 4
                    and status_counts(statuses[-1])["open"] == 1)
        assert listener.receive(settled, 10), listener.messages
        pings = [t for t, _, f in listener.with_key("WATCHDOG")]
        assert all(f["WATCHDOG"] == "1" for _, _, f in listener.with_key("WATCHDOG"))
        gaps = [b - a for a, b in zip([listener.messages[0][0]] + pings, pings)]
        # Never near the 2 s at which systemd would kill it.
        assert max(gaps) < 1.8, gaps
        last = status_counts(listener.with_key("STATUS")[-1][2])
        assert last["events"] >= produced and last["open"] == 1, last
        assert all(m[1] == d.proc.pid for m in listener.messages)

        d.kill(signal.SIGTERM)
        assert d.proc.returncode == 0
        assert listener.receive(lambda ms: "STOPPING" in ms[-1][2], 5), listener.messages[-3:]
        assert listener.messages[-1][2]["STATUS"].startswith("Stopping")
    finally:
        d.stop()


def test_watchdog_only_for_its_pid(tmp_path, monkeypatch, listener):
    """WATCHDOG_PID names another process (a helper started with the
    unit's environment): that process must not ping for the unit."""
    d = watched_daemon(tmp_path, monkeypatch, watchdog_pid=1).start()
    try:
        assert listener.receive(lambda ms: ms, 10)
        assert listener.messages[0][2].get("READY") == "1"
        assert not listener.receive(lambda ms: listener.with_key("WATCHDOG"), 2.5)
    finally:
        d.stop()


# ptrace(2) requests, to stop one thread of the daemon and not the others.
PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000


def busiest_thread(pid):
    """The ingest thread: it wakes every poll_interval (1 ms here), far
    more often than any other thread of the daemon."""
    def switches():
        out = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:  # threads come and go: one per API connection
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    out[int(tid)] = int(re.search(r"voluntary_ctxt_switches:\s+(\d+)", f.read()).group(1))
            except FileNotFoundError:
                pass
        return out
    before = switches()
    time.sleep(0.5)
    after = switches()
    deltas = sorted(((after[t] - before.get(t, 0), t) for t in after), reverse=True)
    assert deltas[0][0] > 3 * deltas[1][0], deltas  # one thread stands out
    return deltas[0][1]


def threads_named(pid, name):
    """The daemon names the threads the watchdog checks (and MHD its own)."""
    tids = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() == name:
                    tids.append(int(tid))
        except FileNotFoundError:
            pass
    assert tids, f"no thread {name} in ringprofd"
    return tids


def assert_pings_stop_while_stopped(d, listener, find_threads, stuck_s=3):
    """Stops threads of the daemon (ptrace), as if they hung: the pings
    stop; once they go on, they come back.  Returns the messages sent
    while they were stopped."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    assert listener.receive(lambda ms: len(listener.with_key("WATCHDOG")) >= 1, 5)
    tids = find_threads(d.proc.pid)
    for tid in tids:
        if libc.ptrace(PTRACE_SEIZE, tid, None, None) < 0:
            pytest.skip(f"cannot ptrace ringprofd: {os.strerror(ctypes.get_errno())} "
                        "(needs root or kernel.yama.ptrace_scope <= 1)")
        assert libc.ptrace(PTRACE_INTERRUPT, tid, None, None) == 0
        os.waitpid(tid, WALL)
    # A ping already on its way when the thread stopped may still come.
    listener.receive(lambda ms: False, 0.3)
    stuck = len(listener.messages)
    try:
        # Three ping intervals or more with the thread stopped: no ping.
        assert not listener.receive(lambda ms: any("WATCHDOG" in m[2] for m in ms[stuck:]), stuck_s)
    finally:
        for tid in tids:
            assert libc.ptrace(PTRACE_DETACH, tid, None, None) == 0
    during = [m[2] for m in listener.messages[stuck:]]
    assert listener.receive(lambda ms: any("WATCHDOG" in m[2] for m in ms[stuck:]), 3)
    assert d.alive()
    return during


def test_watchdog_stops_when_ingest_is_stuck(tmp_path, monkeypatch, listener):
    d = watched_daemon(tmp_path, monkeypatch, config="[daemon]\npoll_interval = 1ms\n").start()
    try:
        assert_pings_stop_while_stopped(d, listener, lambda pid: [busiest_thread(pid)])
    finally:
        d.stop()


@pytest.mark.parametrize("thread, says", [
    # The thread that copies open sessions, closes captures and hands
    # sessions to the exporter.
    ("rp-sessions", "watchdog: stuck: session thread: no pass"),
    # libmicrohttpd's threads (a pool per listener): no request is answered.
    ("MHD-worker", "watchdog: stuck: control API:"),
])
def test_watchdog_stops_when_sessions_or_api_are_stuck(tmp_path, monkeypatch, listener,
                                                      thread, says):
    """Before, only the ingest thread was checked: a session thread or an
    API that hung (a FIFO opened under the sessions lock) went on being
    pinged for.  The ingest thread runs on meanwhile."""
    d = watched_daemon(tmp_path, monkeypatch).start()
    try:
        if thread == "rp-sessions":
            d.ok("POST", "/v1/sessions", {"name": "copying"})
        # Long enough for two ticks: each waits for the checks' timeouts.
        during = assert_pings_stop_while_stopped(d, listener, lambda pid: threads_named(pid, thread),
                                                 stuck_s=5)
        # STATUS says why (that of the tick under way at the stop may not).
        statuses = [m["STATUS"] for m in during if "STATUS" in m]
        assert len(statuses) >= 2 and says in statuses[-1], statuses
    finally:
        d.stop()


def test_bad_notify_socket_fails_start(tmp_path, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "missing" / "notify.sock"))
    d = Daemon(tmp_path)
    # READY=1 goes out once the API and the producer socket serve: the
    # daemon may answer for a moment before it gives up and exits.
    d.proc = subprocess.Popen(d.args, stderr=open(d.log, "a"), stdout=subprocess.DEVNULL)
    assert d.proc.wait(timeout=60) != 0
    assert re.search("cannot send READY=1 to NOTIFY_SOCKET=.*unset NOTIFY_SOCKET", open(d.log).read())


def unused_gid():
    taken = {g.gr_gid for g in grp.getgrall()}
    return next(g for g in range(42000, 43000) if g not in taken)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the daemon with another group")
def test_sockets_get_the_process_group(tmp_path):
    """The unit runs ringprofd as root with Group=ringprof, and no code
    chowns the sockets: bind(2) gives the new socket file the process's
    effective gid (its directory is not set-group-ID here), so ringprof
    members can connect."""
    gid = unused_gid()
    d = Daemon(tmp_path)
    d.args = ["setpriv", f"--regid={gid}", "--clear-groups", *d.args]
    d.start()
    try:
        assert os.stat(tmp_path).st_mode & stat.S_ISGID == 0
        for path in (d.socket, d.socket + ".producers"):
            st = os.stat(path)
            assert stat.S_ISSOCK(st.st_mode), path
            assert (st.st_uid, st.st_gid) == (0, gid), path
            assert stat.S_IMODE(st.st_mode) == 0o660, (path, oct(st.st_mode))
    finally:
        d.stop()
