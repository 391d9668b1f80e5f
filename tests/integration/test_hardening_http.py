"""The control API against hostile clients (issue 10), as an attacker would
do it: slow TCP clients that never finish their headers (slowloris) while a
legitimate client keeps asking, bursts of status requests and snapshots,
a snapshot end that overflowed, ambiguous body framing.  Loopback only;
every loop stops by itself."""

import asyncio
import http.client
import os
import selectors
import socket
import subprocess
import sys
import threading
import time

from daemon_harness import Daemon, free_port, write_token


def tcp_status(port, token):
    """(status, seconds) of GET /v1/status with the token, from 127.0.0.1."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/v1/status", headers={"Authorization": "Bearer " + token})
        resp = conn.getresponse()
        resp.read()
        return resp.status, time.monotonic() - t0
    finally:
        conn.close()


class Slowloris:
    """Connections that send a request line and then one header line per
    second, never the blank line that ends the headers; a connection the
    daemon closes is opened again.  sources: {source address: connections}."""

    def __init__(self, port, sources):
        self.port = port
        self.sources = sources
        self.sel = selectors.DefaultSelector()
        self.lifetimes = []   # seconds from connect to the daemon closing it
        self.opened = 0

    def open(self, source):
        s = socket.socket()
        s.setblocking(False)
        s.bind((source, 0))
        try:
            s.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        self.sel.register(s, selectors.EVENT_READ,
                          {"source": source, "t0": time.monotonic(), "next": 0.0, "sent": 0})
        self.opened += 1

    def run(self, seconds):
        for source, n in self.sources.items():
            for _ in range(n):
                self.open(source)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            now = time.monotonic()
            for key in list(self.sel.get_map().values()):
                st = key.data
                if now < st["next"]:
                    continue
                line = b"GET /v1/status HTTP/1.1\r\n" if st["sent"] == 0 else b"X-Slow-%d: 1\r\n" % st["sent"]
                try:
                    key.fileobj.send(line)
                    st["sent"] += 1
                    st["next"] = now + 1.0
                except BlockingIOError:
                    pass
                except OSError:
                    self.closed(key, now)
            for key, _ in self.sel.select(timeout=0.05):
                try:
                    data = key.fileobj.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.closed(key, time.monotonic())
        for key in list(self.sel.get_map().values()):
            self.sel.unregister(key.fileobj)
            key.fileobj.close()

    def closed(self, key, now):
        self.lifetimes.append(now - key.data["t0"])
        self.sel.unregister(key.fileobj)
        key.fileobj.close()
        self.open(key.data["source"])


def test_slowloris_does_not_keep_clients_out(tmp_path):
    token, token_file = write_token(tmp_path)
    port = free_port()
    d = Daemon(tmp_path, config=(f"[api]\ntcp_listen = 127.0.0.1:{port}\ntoken_file = {token_file}\n"
                                 "max_connections = 128\nmax_connections_per_peer = 8\n"
                                 "header_timeout = 2s\n")).start()
    try:
        # 500 slow connections: 8 from each of 60 addresses (the per-peer
        # limit), 20 more from one address; the legitimate client is 127.0.0.1.
        sources = {f"127.0.1.{i}": 8 for i in range(1, 61)}
        sources["127.0.2.1"] = 20
        attack = Slowloris(port, sources)
        attacker = threading.Thread(target=attack.run, args=(12,))
        attacker.start()
        time.sleep(1)
        answers = []
        while attacker.is_alive():
            answers.append(tcp_status(port, token))
            time.sleep(0.2)
        attacker.join()
        assert len(answers) >= 8, answers
        assert all(status == 200 for status, _ in answers), answers
        # Target 1 s; 2.5 s leaves room for a loaded 2-core CI machine, and
        # one answer of the 40 or so may be slower (2.55 s once, with JAX
        # tests beside it).  A daemon that let the attack keep clients out
        # would hold most of them for its 2 s header deadline or longer.
        times = sorted(t for _, t in answers)
        assert sum(t >= 2.5 for t in times) <= 1 and times[-1] < 5, times[-5:]
        # The daemon closed slow connections (header deadline, room for
        # newcomers, per-peer limit), over and over as they came back ...
        assert len(attack.lifetimes) > 500, len(attack.lifetimes)
        assert d.alive()
        # ... and said so in a few lines, not one per connection.
        log = open(d.log).read()
        lines = [line for line in log.splitlines() if "ringprofd: api:" in line]
        assert 1 <= len(lines) <= 8, lines
    finally:
        d.stop()


def test_slow_headers_are_cut_at_the_deadline(tmp_path):
    token, token_file = write_token(tmp_path)
    port = free_port()
    d = Daemon(tmp_path, config=(f"[api]\ntcp_listen = 127.0.0.1:{port}\ntoken_file = {token_file}\n"
                                 "header_timeout = 2s\n")).start()
    try:
        # A header every second keeps the idle timeout (30 s) from ever
        # firing; only the deadline on the whole headers ends these.
        attack = Slowloris(port, {"127.0.3.1": 5})
        attack.run(6)
        assert len(attack.lifetimes) >= 5, attack.lifetimes
        # 2 s deadline; up to 1 s more for the trickle's own pace and load.
        assert max(attack.lifetimes) < 3.5, attack.lifetimes
        assert min(attack.lifetimes) > 1.5, attack.lifetimes
    finally:
        d.stop()


def burst(d, n, method, path, body=b""):
    """n clients at once, each connecting and sending its request, over the
    Unix socket: [(status, Retry-After, body) or the exception
    that ended the request]."""
    request = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body

    async def one():
        try:
            # Connect and send in one step, as curl or the CLI do: a
            # connection idle while the listener is full loses its place.
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(d.socket)
            sock.sendall(request)
            sock.setblocking(False)
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
            answer = await asyncio.wait_for(reader.read(), 60)
            writer.close()
        except OSError as e:
            return e
        head, _, text = answer.decode().partition("\r\n\r\n")
        lines = head.split("\r\n")
        if not lines[0].startswith("HTTP/1.1 "):
            return ConnectionError("no answer: " + repr(answer[:100]))
        headers = dict(line.split(": ", 1) for line in lines[1:])
        return int(lines[0].split()[1]), headers.get("Retry-After"), text

    async def all_of_them():
        return await asyncio.gather(*(one() for _ in range(n)))

    return asyncio.run(all_of_them())


def test_status_burst_gets_answers_not_resets(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        results = burst(d, 1000, "GET", "/v1/status")
        failures = [r for r in results if not isinstance(r, tuple)]
        assert not failures, (len(failures), failures[:5])
        assert {r[0] for r in results} <= {200, 503}, {r[0] for r in results}
        busy = [r for r in results if r[0] == 503]
        assert all(r[1] == "1" and "max_requests" in r[2] for r in busy), busy[:3]
        assert sum(r[0] == 200 for r in results) > 0
        assert d.ok("GET", "/v1/status")
    finally:
        d.stop()


def test_snapshot_burst_over_the_limit_is_refused_with_a_message(tmp_path):
    # One snapshot at a time, so that 200 at once are sure to go over.
    d = Daemon(tmp_path, config="[api]\nmax_snapshots = 1\n").start()
    try:
        results = burst(d, 200, "POST", "/v1/snapshot", body=b"{}")
        failures = [r for r in results if not isinstance(r, tuple)]
        assert not failures, (len(failures), failures[:5])
        assert {r[0] for r in results} <= {201, 503}, {r[0] for r in results}
        refused = [r for r in results if r[0] == 503]
        assert refused, "200 snapshots at once, none refused"
        assert all(r[1] == "1" and "max_snapshots" in r[2] for r in refused), refused[:3]
        assert any(r[0] == 201 for r in results)
        assert d.ok("GET", "/v1/status")
    finally:
        d.stop()


def test_snapshot_end_at_int64_min_is_refused(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        status, body = d.request("POST", "/v1/snapshot", raw='{"end": -9223372036854775808}')
        assert status == 400 and "1970" in body["error"]["message"], (status, body)
    finally:
        d.stop()


def raw_unix(d, data):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(d.socket)
    s.sendall(data)
    out = b""
    while chunk := s.recv(4096):
        out += chunk
    s.close()
    return out.decode(errors="replace")


def test_ambiguous_content_length_is_refused(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        head = b"POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        two = raw_unix(d, head + b"Content-Length: 2\r\nContent-Length: 30\r\n\r\n{}")
        assert two.startswith("HTTP/1.1 400") and "Content-Length" in two, two
        both = raw_unix(d, head + b"Content-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"2\r\n{}\r\n0\r\n\r\n")
        assert both.startswith("HTTP/1.1 400") and "Transfer-Encoding" in both, both
        assert d.ok("GET", "/v1/sessions")["sessions"] == []
    finally:
        d.stop()


# A producer whose range and counter names, and a snapshot whose reason,
# carry terminal controls: OSC (set the title, write the clipboard), CSI
# (clear the screen), CR (overwrite the line), a C1 CSI in UTF-8.
HOSTILE_PRODUCER = r"""
import time, ringprof
for _ in range(5):
    with ringprof.annotate("\x1b]0;pwned\x07step\rFAKE"):
        time.sleep(0.002)
    ringprof.counter("\x1b[2Jloss\u009b31m", 1.0)
time.sleep(0.3)
"""
HOSTILE_REASON = "\x1b]52;c;cm0gLXJmIH4=\x07line1\r\n* * * * * root touch /tmp/pwned\n"
CONTROLS = [chr(c) for c in range(0x20) if c != 0x0a] + ["\x7f", "\u009b"]


def test_terminal_escapes_are_printed_inert(tmp_path):
    d = Daemon(tmp_path, config="[daemon]\nhost_name = esc\n[sessions]\nexports = summary\n").start()
    try:
        # The package comes from the PYTHONPATH conftest.py sets.
        subprocess.run([sys.executable, "-c", HOSTILE_PRODUCER], env=d.env(), check=True, timeout=60)
        time.sleep(0.3)
        s = d.ok("POST", "/v1/snapshot", {"name": "esc1", "reason": HOSTILE_REASON, "last": "10s"})
        summary_txt = os.path.join(s["path"], "esc.summary.txt")
        deadline = time.monotonic() + 60
        while not os.path.exists(summary_txt) and time.monotonic() < deadline:
            time.sleep(0.1)
        outputs = {"summary.txt": open(summary_txt, encoding="utf-8").read(),
                   "ringprof summary": d.cli("summary", "esc1", check=True).stdout,
                   "ringprof session": d.cli("sessions", check=True).stdout,
                   "ringprof status": d.cli("status", check=True).stdout}
        for name, text in outputs.items():
            assert not [c for c in CONTROLS if c in text], (name, text)
        for name in ("summary.txt", "ringprof summary"):
            text = outputs[name]
            # Shown, escaped: the reader still sees what was sent.
            assert "\\x1b]52;c;cm0gLXJmIH4=\\x07line1\\x0d\\x0a* * * * * root" in text, text
            assert "\\x1b]0;pwned\\x07step\\x0dFAKE" in text, text
            assert "\\x1b[2Jloss\\xc2\\x9b31m" in text, text
    finally:
        d.stop()
