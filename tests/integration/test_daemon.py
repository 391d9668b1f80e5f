"""ringprofd end to end: the real daemon on a temporary socket and
directories, driven through its API and the ringprof CLI."""

import json
import mmap
import os
import signal
import socket
import subprocess
import time

import pytest

from daemon_harness import (SANITIZED, Daemon, dump, finish_producer, manifest, producer_hello,
                            seq_values, start_producer)

SMALL_RING = """
[daemon]
seal_interval = 100ms
[rings]
budget = 1MiB
slot_size = 16KiB
"""


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path).start()
    yield d
    d.stop()


def wall_now_ns():
    return time.time_ns()


def assert_exact(window_events, all_events, start_ns, end_ns):
    """The window holds exactly the stream's events stamped inside it: a
    contiguous run of sequence numbers, and its neighbours lie outside."""
    inside = seq_values(window_events)
    assert inside, "no events in the window"
    values = [v for v, _ in inside]
    assert values == list(range(values[0], values[0] + len(values))), "gap or duplicate"
    assert all(start_ns <= ts <= end_ns for _, ts in inside)
    by_value = dict(seq_values(all_events))
    if values[0] - 1 in by_value:
        assert by_value[values[0] - 1] < start_ns
    if values[-1] + 1 in by_value:
        assert by_value[values[-1] + 1] > end_ns
    return values


def test_snapshot_ending_now_and_in_the_past_is_exact(daemon):
    producer = start_producer(daemon, 5000, 3)
    time.sleep(2.0)
    now_snap = daemon.ok("POST", "/v1/snapshot", {"last": "1s"})
    stats = finish_producer(producer)
    assert stats["dropped"] == 0 and stats["connected"] == 1
    # A window that ended 1.5 s ago, while the producer still ran.
    past_end = wall_now_ns() - 1_500_000_000
    past_snap = daemon.ok("POST", "/v1/snapshot", {"last": "500ms", "end": past_end})
    everything = daemon.ok("POST", "/v1/snapshot", {"last": "30s"})
    all_events = dump(everything["path"], all_events=True)
    assert [v for v, _ in seq_values(all_events)] == list(range(stats["produced"]))

    for snap in (now_snap, past_snap):
        req = snap["requested"]
        assert req["end_ns"] - req["start_ns"] == (1_000_000_000 if snap is now_snap else 500_000_000)
        assert_exact(dump(snap["path"]), all_events, req["start_ns"], req["end_ns"])
        assert snap["state"] == "complete"
    assert past_snap["requested"]["end_wall_ns"] == past_end
    # Every event in the window counts: the stream's, names, samples, host metrics.
    assert manifest(now_snap["path"])["devices"][0]["events"] == len(dump(now_snap["path"]))


def test_snapshot_exact_across_wraparound(tmp_path):
    d = Daemon(tmp_path, config=SMALL_RING).start()
    try:
        producer = start_producer(d, 200000, 3)
        time.sleep(2.5)
        snap = d.ok("POST", "/v1/snapshot", {"last": "200ms"})
        finish_producer(producer)
        ring = d.ok("GET", "/v1/status")["rings"][0]
        assert ring["horizon_s"] < 2.5, "the ring should have wrapped"
        assert ring["fill"] > 0.9
        req = snap["requested"]
        wide = d.ok("POST", "/v1/snapshot", {"last": "1s", "end": snap["requested"]["end_wall_ns"] + 300_000_000})
        values = assert_exact(dump(snap["path"]), dump(wide["path"], all_events=True),
                              req["start_ns"], req["end_ns"])
        assert len(values) > 10000
    finally:
        d.stop()


def test_window_longer_than_ring_reports_coverage(tmp_path):
    d = Daemon(tmp_path, config=SMALL_RING).start()
    try:
        finish_producer(start_producer(d, 200000, 2))
        snap = d.ok("POST", "/v1/snapshot", {"last": "5m"})
        assert snap["covered"]["start_ns"] > snap["requested"]["start_ns"]
        assert manifest(snap["path"])["complete_coverage"] is False
    finally:
        d.stop()


def test_session_three_times_the_horizon_keeps_every_event(tmp_path):
    d = Daemon(tmp_path, config=SMALL_RING).start()
    try:
        session = d.ok("POST", "/v1/sessions", {"name": "long_run"})
        assert session["state"] == "open"
        # Sanitized, the producer reaches a lower rate: the ring's horizon
        # grows, and the session must run longer to outlast three of them.
        producer = start_producer(d, 200000, 10 if SANITIZED else 5)
        time.sleep(2)
        # Sessions overlap: a snapshot while the long session is open.
        overlap = d.ok("POST", "/v1/snapshot", {"last": "500ms"})
        assert overlap["state"] == "complete"
        assert "long_run" in d.ok("GET", "/v1/status")["open_sessions"]
        stats = finish_producer(producer)
        assert seq_values(dump(overlap["path"]))
        horizon = d.ok("GET", "/v1/status")["rings"][0]["horizon_s"]
        done = d.ok("POST", "/v1/sessions/long_run/stop")
        req = done["requested"]
        length_s = (req["end_ns"] - req["start_ns"]) / 1e9
        assert length_s > 3 * horizon, (length_s, horizon)
        values = [v for v, _ in seq_values(dump(done["path"]))]
        assert stats["dropped"] == 0
        assert values == list(range(stats["produced"]))
        status, err = d.request("POST", "/v1/sessions/long_run/stop")
        assert status == 409 and "not open" in err["error"]["message"]
    finally:
        d.stop()


def test_sigkill_daemon_producers_carry_on_and_history_survives(tmp_path):
    d = Daemon(tmp_path, config="[daemon]\nseal_interval = 100ms\n").start()
    producer = start_producer(d, 2000, 7)
    time.sleep(2.0)
    d.kill(signal.SIGKILL)
    killed_at = wall_now_ns()
    time.sleep(1.5)
    d.start()
    try:
        stats = finish_producer(producer)
        # The producer never blocked on the dead daemon.
        assert stats["worst_late_ms"] < 500, stats
        assert stats["connected"] == 1, "the producer did not reconnect"
        snap = d.ok("POST", "/v1/snapshot", {"last": "20s"})
        values = sorted(v for v, _ in seq_values(dump(snap["path"])))
        before = [v for v in values if v < 2000 * 2]
        after = [v for v in values if v > 2000 * 4]
        # Sealed before the kill: up to ~seal_interval before it.
        assert len(before) > 2000 * 1.5, len(before)
        assert after, "events after the restart are missing"
        assert len(values) == len(set(values)), "duplicates"
        assert snap["requested"]["start_wall_ns"] < killed_at
    finally:
        d.stop()


def test_sigterm_seals_everything(tmp_path):
    d = Daemon(tmp_path).start()  # 1 s seal interval: SIGTERM must seal
    stats = finish_producer(start_producer(d, 5000, 1))
    d.kill(signal.SIGTERM)
    d.start()
    try:
        snap = d.ok("POST", "/v1/snapshot", {"last": "1m"})
        assert [v for v, _ in seq_values(dump(snap["path"]))] == list(range(stats["produced"]))
    finally:
        d.stop()


@pytest.mark.parametrize("body,fragment", [
    ('{"last": ', "JSON"),
    ('[1, 2]', "object"),
    ('{"lats": "1s"}', "lats"),
    ('{"last": "0s"}', "zero"),
    ('{"last": "-5s"}', "negative"),
    ('{"last": "1000h"}', "limit"),
    ('{"last": 5, "end": "2200-01-01T00:00:00Z"}', "future"),
    ('{"name": "../etc"}', "/"),
    ('{"run": "a\\u0001b"}', "\\x01"),
    ('{"name": "' + "x" * 300 + '"}', "long"),
])
def test_bad_snapshot_requests_get_clear_errors(daemon, body, fragment):
    status, data = daemon.request("POST", "/v1/snapshot", raw=body)
    assert status == 400, (status, data)
    assert fragment.lower() in data["error"]["message"].lower(), data
    assert daemon.alive()


def test_oversized_body_and_unknown_routes(daemon):
    # The daemon answers 413 as soon as it sees the length and may close
    # before the body is sent: read its answer even if sending fails.
    body = b"{" + b" " * 100000 + b"}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(daemon.socket)
        try:
            s.sendall(b"POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = s.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 413"), answer
    assert daemon.request("GET", "/v1/nope")[0] == 404
    assert daemon.request("DELETE", "/v1/status")[0] == 405
    assert daemon.request("GET", "/v1/sessions/2001_01_01_00_00_00")[0] == 404
    assert daemon.alive()


def test_full_log_directory_fails_cleanly_and_keeps_the_data(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    logdir = tmp_path / "small"
    logdir.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(logdir)], check=True)
    d = None
    try:
        d = Daemon(tmp_path, extra_args=["--logdir", str(logdir)])
        d.start()
        stats = finish_producer(start_producer(d, 50000, 1))
        status, data = d.request("POST", "/v1/snapshot", {"last": "1m"})
        assert status == 503, (status, data)
        assert "full" in data["error"]["message"].lower() or "space" in data["error"]["message"].lower()
        assert d.alive()
        # Free the space: the same history is still there.
        for root, dirs, files in os.walk(logdir):
            for f in files:
                os.unlink(os.path.join(root, f))
        subprocess.run(["mount", "-o", "remount,size=64m", str(logdir)], check=True)
        snap = d.ok("POST", "/v1/snapshot", {"last": "1m"})
        assert [v for v, _ in seq_values(dump(snap["path"]))] == list(range(stats["produced"]))
    finally:
        if d:
            d.stop()
        subprocess.run(["umount", str(logdir)])


def test_unwritable_log_directory(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    d = Daemon(tmp_path, extra_args=["--logdir", str(blocker / "logs")]).start()
    try:
        status, data = d.request("POST", "/v1/snapshot", {"last": "1s"})
        assert status in (500, 503), (status, data)
        assert str(blocker) in data["error"]["message"]
        assert d.alive()
    finally:
        d.stop()


def test_cli_drives_the_daemon(daemon):
    producer = start_producer(daemon, 2000, 2)
    r = daemon.cli("status", check=True)
    assert "host" in r.stdout
    r = daemon.cli("snapshot", "--last", "500ms", "--name", "from_cli", "--run", "cli_run", check=True)
    assert "from_cli" in r.stdout
    assert os.path.isdir(os.path.join(daemon.logdir, "cli_run", "plugins", "profile", "from_cli"))
    r = daemon.cli("start", "--name", "manual", check=True)
    assert "manual" in r.stdout
    r = daemon.cli("stop", "manual", check=True)
    r = daemon.cli("capture", "--duration", "500ms", "--name", "cap", check=True)
    finish_producer(producer)
    cap = json.loads(daemon.cli("--json", "sessions", check=True).stdout)["sessions"]
    ids = {s["id"]: s for s in cap}
    assert {"from_cli", "manual", "cap"} <= set(ids)
    assert ids["cap"]["kind"] == "capture" and ids["cap"]["state"] == "complete"
    window = ids["cap"]["requested"]
    assert window["end_ns"] - window["start_ns"] == 500_000_000
    r = daemon.cli("snapshot", "--last", "-1s")
    assert r.returncode != 0 and "negative" in r.stderr
    r = daemon.cli("snapshot", "--bogus")
    assert r.returncode == 2 and "bogus" in r.stderr
    r = daemon.cli("stop", "no_such_session")
    assert r.returncode == 1 and "no_such_session" in r.stderr


def test_config_errors_name_file_and_line(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[daemon]\npoll_interval = 10ms\nsocket_path = /tmp/x\n")
    r = subprocess.run([Daemon(tmp_path).args[0], "--foreground", "--config", str(conf)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert f"{conf}:3" in r.stderr and "socket_path" in r.stderr
    r = subprocess.run([Daemon(tmp_path).args[0], "--bogus"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "bogus" in r.stderr


def test_metrics(daemon):
    finish_producer(start_producer(daemon, 1000, 0.5))
    daemon.ok("POST", "/v1/snapshot", {"last": "1s"})
    conn_status, text = daemon.request("GET", "/metrics")
    assert conn_status == 200
    assert 'ringprof_ring_fill_ratio{device="host"}' in text
    assert 'ringprof_sessions_total{kind="snapshot"} 1' in text
    assert "ringprof_snapshot_seconds_count 1" in text


def register_device(daemon, device):
    """Play a device collector: the producer handshake of docs/api.md."""
    return producer_hello(daemon, device)


def test_device_ring_appears_when_a_collector_registers(tmp_path):
    d = Daemon(tmp_path).start()
    try:
        assert [r["device"] for r in d.ok("GET", "/v1/status")["rings"]] == ["host"]
        status, message, fd = register_device(d, "gpu0")
        assert status == 0, message
        assert fd is not None and os.fstat(fd).st_size > 0
        mmap.mmap(fd, os.fstat(fd).st_size).close()  # a shared-memory ring we can map
        os.close(fd)
        devices = {r["device"] for r in d.ok("GET", "/v1/status")["rings"]}
        assert devices == {"host", "gpu0"}
        assert os.path.exists(os.path.join(d.state_dir, "gpu0.ring"))
        status, message, fd = register_device(d, "../evil")
        assert status < 0 and "device name" in message and fd is None
        d.kill(signal.SIGTERM)
        d.start()  # the device's ring and its history come back
        devices = {r["device"] for r in d.ok("GET", "/v1/status")["rings"]}
        assert devices == {"host", "gpu0"}
        snap = d.ok("POST", "/v1/snapshot", {"last": "1s"})
        assert {dev["device"] for dev in snap["devices"]} == {"host", "gpu0"}
    finally:
        d.stop()


def test_cpu_samples_reach_snapshots(daemon):
    if os.geteuid() != 0:
        pytest.skip("the eBPF sampler needs root (or CAP_BPF and CAP_PERFMON)")
    sampler = daemon.ok("GET", "/v1/status")["collectors"][0]
    assert sampler["name"] == "cpu_sampler"
    assert sampler["state"] == "running", sampler.get("reason")
    busy = subprocess.Popen(["python3", "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"])
    busy.wait(timeout=30)
    snap = daemon.ok("POST", "/v1/snapshot", {"last": "3s"})
    events = dump(snap["path"], all_events=True)
    samples = [e for e in events if e["kind"] == "cpu_sample" and e["pid"] == busy.pid]
    # 99 Hz for 1.5 s of one busy thread: about 148.
    assert 70 <= len(samples) <= 200, len(samples)
    # The sampled thread is named (its comm), even though it has exited.
    names = {e["name"] for e in events if e["kind"] == "thread_name" and e["tid"] == busy.pid}
    assert names == {"python3"}, names


def test_sampler_can_be_turned_off(tmp_path):
    d = Daemon(tmp_path, config="[sampler]\nenabled = false\n").start()
    try:
        sampler = d.ok("GET", "/v1/status")["collectors"][0]
        assert sampler["state"] == "off" and sampler["events"] == 0
    finally:
        d.stop()
