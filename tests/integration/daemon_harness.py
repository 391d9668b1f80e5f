"""Start a real ringprofd on a temporary socket and directories, talk to it
over HTTP on its Unix socket, and read its sessions back."""

import array
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import threading
import time

BUILD = os.environ.get("RINGPROF_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
RINGPROFD = os.environ.get("RINGPROFD", os.path.join(BUILD, "daemon", "ringprofd"))
CLI = os.environ.get("RINGPROF_CLI", os.path.join(BUILD, "cli", "ringprof"))
SESSION_DUMP = os.environ.get("RINGPROF_SESSION_DUMP", os.path.join(BUILD, "tests", "session-dump"))
SEQ_PRODUCER = os.environ.get("RINGPROF_SEQ_PRODUCER", os.path.join(BUILD, "tests", "seq-producer"))
# Set by scripts/test.sh for its ASan+UBSan pass: producers and the daemon
# run several times slower, so tests that need a rate to fill a ring run longer.
SANITIZED = os.environ.get("RINGPROF_SANITIZED") == "1"


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=60):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_token(tmp_path):
    """A bearer token in a file, as [api] token_file wants it: (token, path)."""
    token = os.urandom(16).hex()
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    return token, str(path)


class Daemon:
    """prefix: a command that runs ringprofd (e.g. setpriv as another user)."""

    def __init__(self, tmp, config=None, extra_args=(), prefix=()):
        self.tmp = str(tmp)
        self.socket = os.path.join(self.tmp, "ctl.sock")
        self.state_dir = os.path.join(self.tmp, "state")
        self.logdir = os.path.join(self.tmp, "logs")
        self.args = [*prefix, RINGPROFD, "--foreground", "--socket", self.socket,
                     "--state-dir", self.state_dir, "--logdir", self.logdir, *extra_args]
        if config is not None:
            path = os.path.join(self.tmp, "ringprofd.conf")
            with open(path, "w") as f:
                f.write(config)
            self.args += ["--config", path]
        self.proc = None
        self.log = os.path.join(self.tmp, "ringprofd.log")

    def env(self):
        return dict(os.environ, RINGPROF_SOCKET=self.socket)

    def producers_listening(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            try:
                s.connect(self.socket + ".producers")
                return True
            except OSError:
                return False

    def start(self, timeout=10):
        self.proc = subprocess.Popen(self.args, stderr=open(self.log, "a"), stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ringprofd exited: " + open(self.log).read())
            try:
                status, _ = self.request("GET", "/v1/status")
                # The producer socket comes up just after the API; after a
                # kill the old daemon's socket file is still there, so
                # connect to it rather than look for it.
                if status == 200 and self.producers_listening():
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("ringprofd did not answer in time: " + open(self.log).read())

    def request(self, method, path, body=None, raw=None, headers=None):
        conn = UnixHTTPConnection(self.socket)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        try:
            return resp.status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return resp.status, text

    def ok(self, method, path, body=None):
        status, data = self.request(method, path, body)
        assert 200 <= status < 300, (status, data)
        return data

    def kill(self, sig=signal.SIGKILL):
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.kill(signal.SIGTERM)

    def alive(self):
        return self.proc.poll() is None

    def cli(self, *args, check=False):
        r = subprocess.run([CLI, "--socket", self.socket, *args], capture_output=True, text=True,
                           timeout=120)
        if check:
            assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        return r


def manifests(session_path):
    """Every host's manifest of a session directory (<host>.manifest.json), by host."""
    names = sorted(n for n in os.listdir(session_path) if n.endswith(".manifest.json"))
    return [json.load(open(os.path.join(session_path, n))) for n in names]


def manifest(session_path):
    """The manifest of a session one host wrote."""
    found = manifests(session_path)
    assert len(found) == 1, found
    return found[0]


def dump(session_path, all_events=False):
    args = [SESSION_DUMP, session_path] + (["--all"] if all_events else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    return [json.loads(line) for line in out.splitlines()]


def seq_values(events, name="seq"):
    return [(int(e["value"]), e["ts"]) for e in events if e["kind"] == "counter" and e.get("name") == name]


def start_producer(daemon, rate, seconds, name="seq"):
    return subprocess.Popen([SEQ_PRODUCER, str(rate), str(seconds), name], env=daemon.env(),
                            stdout=subprocess.PIPE, text=True)


def finish_producer(proc):
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return json.loads(out)


def producer_hello(daemon, device="host", ring_size=0, pid=None, tid=None, thread=b"collector",
                   timeout=10, uid=b""):
    """Play a producer: the handshake of docs/api.md, by hand, so that a test
    can also ask for what libringprof never would.  Returns (status,
    message, the ring's fd or None)."""
    hello = struct.pack("<8sIIII64s56sIIq64s", b"RPHELLO1", 2, pid or os.getpid(),
                        tid or threading.get_native_id(), ring_size, device.encode(), thread,
                        0, 0, 0, uid)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(timeout)
        s.connect(daemon.socket + ".producers")
        s.send(hello)
        fds = array.array("i")
        msg, anc, _, _ = s.recvmsg(264, socket.CMSG_SPACE(fds.itemsize))
    magic, status = struct.unpack_from("<8si", msg)
    assert magic == b"RPREPLY1"
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:fds.itemsize])
    return status, msg[16:].split(b"\0")[0].decode(), (fds[0] if fds else None)
