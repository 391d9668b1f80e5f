"""The PSI collector (collectors/psi) in a real daemon: its counters reach
a snapshot that the CLI reads back, status and /metrics show it, and
[psi] enabled = false turns it off.  On a kernel without pressure stall
information the daemon must run on and say why."""

import time

from daemon_harness import Daemon

RESOURCES = ("cpu", "memory", "io")


def kernel_psi():
    try:
        with open("/proc/pressure/io") as f:
            return {line.split()[0]: int(line.split("total=")[1]) for line in f}
    except OSError:
        return None


def collector(d, name):
    return next(c for c in d.ok("GET", "/v1/status")["collectors"] if c["name"] == name)


def summary_counters(d, session):
    """The counter table of `ringprof summary`: name -> (samples, last, min, max)."""
    out = d.cli("summary", session, check=True).stdout
    counters, inside = {}, False
    for line in out.splitlines():
        if line.startswith("counter "):
            inside = True
        elif not line.strip():
            inside = False
        elif inside:
            name, *values = line.split()
            counters[name] = tuple(float(v) for v in values)
    return counters, out


def test_psi_counters_reach_a_snapshot(tmp_path):
    before = kernel_psi()
    d = Daemon(tmp_path, config="[psi]\ninterval = 100ms\n[sampler]\nenabled = false\n").start()
    try:
        psi = collector(d, "psi")
        if before is None:
            assert psi["state"] == "disabled" and "CONFIG_PSI=y" in psi["reason"], psi
            assert "psi: disabled: " in d.cli("status", check=True).stdout
            return
        assert psi["state"] == "running", psi
        # 12 counters a reading: wait for a few readings.
        deadline = time.monotonic() + 30
        while collector(d, "psi")["events"] < 36 and time.monotonic() < deadline:
            time.sleep(0.1)
        d.cli("snapshot", "--last", "10s", "--name", "pressure", check=True)
        after = kernel_psi()
        counters, out = summary_counters(d, "pressure")
        for r in RESOURCES:
            for family in ("psi_avg10", "psi_stall_us"):
                assert f"{family}/{r}_some" in counters, out
        for name, (samples, last, low, high) in counters.items():
            if name.startswith("psi_avg10/"):
                assert samples >= 3 and 0 <= low <= high <= 100, (name, out)
        # The stall time read back lies between the kernel's before and after
        # (the summary prints 6 significant digits).
        _, last, low, high = counters["psi_stall_us/io_some"]
        assert before["some"] * (1 - 1e-5) <= low <= high <= last <= after["some"] * (1 + 1e-5), out

        status = d.cli("status", check=True).stdout
        assert "psi: running, " in status, status
        # The daemon's own ring is not a workload's producer.
        host = next(r for r in d.ok("GET", "/v1/status")["rings"] if r["device"] == "host")
        assert host["producers"] == 0, host
        _, metrics = d.request("GET", "/metrics")
        assert 'ringprof_collector_running{collector="psi"} 1' in metrics, metrics
        assert 'ringprof_collector_lost_total{collector="psi"} 0' in metrics, metrics
    finally:
        d.stop()


def test_psi_off(tmp_path):
    d = Daemon(tmp_path, config="[psi]\nenabled = false\n[sampler]\nenabled = false\n").start()
    try:
        psi = collector(d, "psi")
        assert psi["state"] == "off" and psi["reason"] == "[psi] enabled = false", psi
        assert "psi: off: [psi] enabled = false" in d.cli("status", check=True).stdout
        time.sleep(1.5)  # host metrics keep coming; PSI must not
        d.cli("snapshot", "--last", "10s", "--name", "quiet", check=True)
        counters, out = summary_counters(d, "quiet")
        assert "host_mem_used" in counters, out
        assert not [n for n in counters if n.startswith("psi_")], out
        _, metrics = d.request("GET", "/metrics")
        assert 'ringprof_collector_running{collector="psi"} 0' in metrics, metrics
    finally:
        d.stop()
