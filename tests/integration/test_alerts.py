"""Triggers against the real daemon: Alertmanager's webhook
(POST /v1/alertmanager), the built-in rules, and Prometheus plus
Alertmanager wired to ringprofd end to end."""

import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import pytest

from daemon_harness import (Daemon, dump, finish_producer, free_port, seq_values, start_producer,
                            write_token)

NS = 1_000_000_000

ALERTS = """
[daemon]
seal_interval = 100ms
[alertmanager]
before = 2s
after = 1s
max_per_hour = 4
"""


def rfc3339(wall_ns):
    secs, ns = divmod(wall_ns, NS)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{ns:09d}Z"


def alert(fingerprint, starts_at_ns, status="firing", **labels):
    return {"status": status, "labels": {"alertname": "StepSlow", **labels},
            "annotations": {"summary": "steps are slow", "runbook": "https://example/rb"},
            "startsAt": rfc3339(starts_at_ns), "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus:9090/graph?g0.expr=x", "fingerprint": fingerprint}


def notification(*alerts):
    """Alertmanager's webhook body (version 4), with a field a later
    version might add."""
    return {"version": "4", "groupKey": "{}:{alertname=\"StepSlow\"}", "truncatedAlerts": 0,
            "status": "firing", "receiver": "ringprofd", "groupLabels": {"alertname": "StepSlow"},
            "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am:9093",
            "addedInSomeLaterVersion": {"x": 1}, "alerts": list(alerts)}


def manifest_path(session):
    """<host>.manifest.json: hosts sharing a log directory each write their own."""
    [path] = glob.glob(os.path.join(session["path"], "*manifest.json"))
    return path


def metric(text, line_start):
    """The value of the sample whose line starts with line_start."""
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no {line_start} in the metrics")


def check_metrics(d, expected):
    """The daemon's metrics have these values; returns the text."""
    _, text = d.request("GET", "/metrics")
    for line, value in expected.items():
        assert metric(text, line) == value, line
    return text


def wait_sessions(d, source, timeout):
    """The sessions triggered by `source`, as soon as there is one; [] if
    none came within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [s for s in d.ok("GET", "/v1/sessions")["sessions"]
                 if s["trigger"]["source"] == source]
        if found:
            return found
        time.sleep(0.1)
    return []


def test_alertmanager_webhook(tmp_path):
    d = Daemon(tmp_path, config=ALERTS).start()
    try:
        producer = start_producer(d, 2000, 6)
        time.sleep(4.5)
        starts = time.time_ns() - 2 * NS
        status, resp = d.request("POST", "/v1/alertmanager", notification(
            alert("fp1", starts, job="train-7/b", instance="h1:9100")))
        assert status == 200, resp
        assert resp["skipped"] == []
        [s] = resp["snapshots"]
        # The window is anchored at startsAt: [startsAt - before, startsAt + after].
        assert s["requested"]["start_wall_ns"] == starts - 2 * NS
        assert s["requested"]["end_wall_ns"] == starts + 1 * NS
        assert s["state"] == "complete" and s["kind"] == "snapshot"
        assert s["run"] == "train-7_b"  # the job label, sanitised
        manifest = json.load(open(manifest_path(s)))
        trig = manifest["trigger"]
        assert trig["source"] == "alertmanager"
        assert trig["reason"] == "StepSlow: steps are slow"
        assert trig["labels"] == {"alertname": "StepSlow", "job": "train-7/b", "instance": "h1:9100"}
        assert trig["annotations"]["runbook"] == "https://example/rb"
        assert trig["fingerprint"] == "fp1"
        assert trig["starts_at"] == rfc3339(starts)
        assert trig["generator_url"] == "http://prometheus:9090/graph?g0.expr=x"
        assert trig["window"]["end"] == "starts_at+after"
        # The producer's events in it lie in the window, with no gap.
        req = s["requested"]
        inside = seq_values(dump(s["path"]))
        assert len(inside) > 1000
        assert all(req["start_ns"] <= ts <= req["end_ns"] for _, ts in inside)
        values = [v for v, _ in inside]
        assert values == list(range(values[0], values[0] + len(values)))

        # Alertmanager repeats the notification: the same alert is cooling down.
        status, resp = d.request("POST", "/v1/alertmanager", notification(
            alert("fp1", starts, job="train-7/b")))
        assert status == 200 and resp == {"snapshots": [], "skipped": [
            {"fingerprint": "fp1", "reason": "cool-down"}]}

        # Resolved: ignored.  A start so recent that startsAt + after has
        # not come: the window ends at receipt.  No job label: default run.
        t_recv = time.time_ns()
        status, resp = d.request("POST", "/v1/alertmanager", notification(
            alert("fp0", starts, status="resolved"), alert("fp2", t_recv - NS // 5)))
        assert status == 200, resp
        assert resp["skipped"] == [{"fingerprint": "fp0", "reason": "resolved"}]
        [s2] = resp["snapshots"]
        assert s2["run"] == "default"
        assert s2["trigger"]["window"]["end"] == "receipt"
        assert s2["requested"]["start_wall_ns"] == t_recv - NS // 5 - 2 * NS
        assert t_recv <= s2["requested"]["end_wall_ns"] < t_recv + NS
        finish_producer(producer)

        # An alert storm: 4 snapshots an hour, the rest skipped and counted.
        status, resp = d.request("POST", "/v1/alertmanager", notification(
            *[alert(f"storm{i}", time.time_ns() - NS, job="storm") for i in range(5)]))
        assert status == 200, resp
        assert len(resp["snapshots"]) == 2
        assert resp["skipped"] == [{"fingerprint": f"storm{i}", "reason": "rate limit"}
                                   for i in (2, 3, 4)]

        # Malformed payloads: 400 naming the problem; nothing taken.
        for body, words in [
                ({"alerts": [{"status": "firing", "labels": {}}]}, "alerts[0].startsAt is missing"),
                ({"version": "3", "alerts": []}, "version \"4\""),
                ({"receiver": "x"}, "no 'alerts' array"),
                ({"alerts": [{"status": "firing", "startsAt": "soon"}]}, "alerts[0].startsAt")]:
            status, resp = d.request("POST", "/v1/alertmanager", body)
            assert status == 400 and words in resp["error"]["message"], (body, resp)

        check_metrics(d, {
            'ringprof_triggers_total{source="alertmanager"}': 4,
            'ringprof_triggers_skipped_total{source="alertmanager",reason="cool-down"}': 1,
            'ringprof_triggers_skipped_total{source="alertmanager",reason="rate limit"}': 3,
            'ringprof_triggers_skipped_total{source="alertmanager",reason="resolved"}': 1,
            "ringprof_trigger_latency_seconds_count": 4})
        assert len(wait_sessions(d, "alertmanager", 0.1)) == 4
    finally:
        d.stop()


def tcp_post(port, path, body, token=None, timeout=30):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_alertmanager_over_tcp_needs_the_token(tmp_path):
    token, token_file = write_token(tmp_path)
    port = free_port()
    d = Daemon(tmp_path, config=f"[api]\ntcp_listen = 127.0.0.1:{port}\ntoken_file = {token_file}\n").start()
    try:
        body = notification(alert("tcp1", time.time_ns() - NS))
        status, resp = tcp_post(port, "/v1/alertmanager", body)
        assert status == 401, resp
        status, resp = tcp_post(port, "/v1/alertmanager", body, token="0" * 32)
        assert status == 401, resp
        status, resp = tcp_post(port, "/v1/alertmanager", body, token=token)
        assert status == 200 and len(resp["snapshots"]) == 1, resp
    finally:
        d.stop()


# Steps of ~20 ms, one of 200 ms, then ~20 ms again; each step holds a
# nested range, and a second thread runs ranges of another name.
SLOW_STEP_PRODUCER = textwrap.dedent("""
    import threading, time, ringprof
    deadline = time.monotonic() + 10
    while not ringprof.connected() and time.monotonic() < deadline:
        with ringprof.annotate("warmup"):
            time.sleep(0.01)
    assert ringprof.connected(), "no daemon"
    def other():
        for _ in range(40):
            with ringprof.annotate("loader"):
                time.sleep(0.005)
    t = threading.Thread(target=other)
    t.start()
    for i in range(41):
        with ringprof.annotate("train_step"):
            with ringprof.annotate("forward"):
                time.sleep(0.2 if i == 30 else 0.02)
    t.join()
    print(ringprof.dropped())
""")

RULES = """
[daemon]
seal_interval = 100ms
[rule.slow_steps]
type = slow_range
range = train_step
window = 20
factor = 3
before = 3s
after = 1s
"""


def test_slow_range_rule(tmp_path):
    d = Daemon(tmp_path, config=RULES).start()
    try:
        script = tmp_path / "steps.py"
        script.write_text(SLOW_STEP_PRODUCER)
        env = d.env()  # PYTHONPATH: the built package (pypackage.py)
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "0"  # nothing dropped
        fired = wait_sessions(d, "rule", 30)
        assert len(fired) == 1, "the rule did not fire"
        s = fired[0]
        trig = s["trigger"]
        assert re.fullmatch(r"train_step took 2\d\d ms, \d+\.\dx its rolling median of 2\d ms",
                            trig["reason"]), trig["reason"]
        assert trig["rule"] == "slow_steps" and trig["type"] == "slow_range"
        assert 200e6 <= trig["duration_ns"] < 400e6
        req = s["requested"]
        assert req["end_ns"] - req["start_ns"] == 4 * NS
        assert req["end_ns"] - trig["window"]["anchor_ns"] == NS
        # The slow step is in the session, ending at the anchor.
        assert any(e["kind"] == "range_end" and e["ts"] == trig["window"]["anchor_ns"]
                   for e in dump(s["path"]))

        # Every step, nested range and loader range timed, per name.
        text = check_metrics(d, {
            'ringprof_triggers_total{source="rule"}': 1,
            'ringprof_range_duration_seconds_count{name="train_step"}': 41,
            'ringprof_range_duration_seconds_count{name="forward"}': 41,
            'ringprof_range_duration_seconds_count{name="loader"}': 40,
            'ringprof_range_duration_seconds_bucket{name="train_step",le="0.1"}': 40})
        # The rule's snapshot waited for the `after` of its window.
        assert metric(text, "ringprof_trigger_latency_seconds_sum") >= 1.0
    finally:
        d.stop()


PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def wait_http(url, proc, log, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited: " + open(log).read()[-3000:])
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout} s: " + open(log).read()[-3000:])


@pytest.mark.skipif(not PROMETHEUS or not ALERTMANAGER,
                    reason="prometheus and prometheus-alertmanager are not installed "
                           "(scripts/install-deps.sh installs them)")
def test_prometheus_alertmanager_end_to_end(tmp_path):
    """Prometheus scrapes ringprofd over TCP with the token, an alert rule
    on a metric ringprofd exports fires, Alertmanager posts it to
    /v1/alertmanager with the token, and a session covering the alert's
    start appears."""
    token, token_file = write_token(tmp_path)
    rp_port, prom_port, am_port = free_port(), free_port(), free_port()
    d = Daemon(tmp_path, config=textwrap.dedent(f"""
        [daemon]
        seal_interval = 100ms
        [api]
        tcp_listen = 127.0.0.1:{rp_port}
        token_file = {token_file}
        [alertmanager]
        before = 20s
        after = 2s
        """)).start()
    (tmp_path / "rules.yml").write_text(textwrap.dedent("""
        groups:
        - name: ringprof
          interval: 1s
          rules:
          - alert: HostRingHasEvents
            expr: ringprof_ring_events{device="host"} > 0
            labels: {severity: test}
            annotations: {summary: the host ring holds events}
        """))
    (tmp_path / "prometheus.yml").write_text(textwrap.dedent(f"""
        global: {{scrape_interval: 1s, evaluation_interval: 1s}}
        rule_files: [{tmp_path / "rules.yml"}]
        alerting:
          alertmanagers:
          - static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]
        scrape_configs:
        - job_name: ringprofd
          authorization: {{credentials_file: {token_file}}}
          static_configs: [{{targets: ['127.0.0.1:{rp_port}']}}]
        """))
    (tmp_path / "alertmanager.yml").write_text(textwrap.dedent(f"""
        route: {{receiver: ringprofd, group_wait: 1s, group_interval: 1s, repeat_interval: 1h}}
        receivers:
        - name: ringprofd
          webhook_configs:
          - url: http://127.0.0.1:{rp_port}/v1/alertmanager
            send_resolved: false
            http_config:
              authorization: {{credentials_file: {token_file}}}
        """))
    procs = []
    try:
        producer = start_producer(d, 1000, 60)
        procs.append(producer)
        am_log = str(tmp_path / "alertmanager.log")
        procs.append(subprocess.Popen(
            [ALERTMANAGER, f"--config.file={tmp_path / 'alertmanager.yml'}",
             f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address="],
            stdout=subprocess.DEVNULL, stderr=open(am_log, "w")))
        wait_http(f"http://127.0.0.1:{am_port}/-/ready", procs[-1], am_log)
        prom_log = str(tmp_path / "prometheus.log")
        procs.append(subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'prom-data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--rules.alert.resend-delay=1s"],
            stdout=subprocess.DEVNULL, stderr=open(prom_log, "w")))
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready", procs[-1], prom_log)

        # Bounded: the first notification can be lost while Prometheus
        # discovers Alertmanager; the resend brings it.
        found = wait_sessions(d, "alertmanager", 90)
        assert found, ("no alert session in 90 s\nprometheus: " + open(prom_log).read()[-2000:] +
                       "\nalertmanager: " + open(am_log).read()[-2000:])
        s = found[0]
        trig = s["trigger"]
        assert trig["labels"]["alertname"] == "HostRingHasEvents"
        assert trig["labels"]["device"] == "host"
        assert s["run"] == "ringprofd"  # the scrape job, the default run_label
        assert trig["reason"] == "HostRingHasEvents: the host ring holds events"
        assert trig["generator_url"].startswith("http://")
        from_starts = trig["window"]["anchor_wall_ns"]
        req = s["requested"]
        assert req["start_wall_ns"] <= from_starts <= req["end_wall_ns"]
        assert from_starts - req["start_wall_ns"] == 20 * NS
        assert s["devices"][0]["events"] > 0

        # Trigger-to-session latency, as measured from outside (the alert's
        # startsAt until the manifest is on disk) and by the daemon
        # (notification received until the session is complete).
        mtime_ns = os.stat(manifest_path(s)).st_mtime_ns
        _, text = d.request("GET", "/metrics")
        daemon_s = metric(text, "ringprof_trigger_latency_seconds_sum") / \
            metric(text, "ringprof_trigger_latency_seconds_count")
        print(f"\ntrigger-to-session latency: alert startsAt -> session on disk "
              f"{(mtime_ns - from_starts) / 1e9:.2f} s; notification received -> session "
              f"complete {daemon_s * 1e3:.1f} ms (daemon)")
        assert 0 < mtime_ns - from_starts < 90 * NS
        # Scrapes went through the token too: Prometheus sees ringprofd up.
        with urllib.request.urlopen(f"http://127.0.0.1:{prom_port}/api/v1/query?query=up", timeout=5) as r:
            up = json.load(r)["data"]["result"]
        assert [x["value"][1] for x in up if x["metric"]["job"] == "ringprofd"] == ["1"]
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        d.stop()
