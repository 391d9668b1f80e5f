"""GPU PM sampling (collectors/pmsample) in a real daemon.  On this host,
which has no NVIDIA driver, it is disabled with the reason and the fix and
the daemon runs on; against the stand-in libcuda/libcupti
(tests/integration/fakegpu) its counters reach a snapshot in the ring
named by nvidia-smi's index, a bad metric stops it with its name, and the
privilege, MIG and busy refusals show in status as they should."""

import ctypes
import json
import os
import time

import pytest

from daemon_harness import Daemon
from test_psi import collector, summary_counters

FAKEGPU = os.environ.get("RINGPROF_FAKEGPU_DIR",
                         os.path.join(os.path.dirname(__file__), "..", "..", "build", "tests",
                                      "integration", "fakegpu"))
QUIET = "[sampler]\nenabled = false\n[psi]\nenabled = false\n"


def has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(has_driver(), reason="this host has an NVIDIA driver")
def test_no_driver_disabled_with_reason(tmp_path):
    d = Daemon(tmp_path, config=QUIET).start()
    try:
        pm = collector(d, "gpu_pm")
        assert pm["state"] == "disabled", pm
        assert "no NVIDIA driver/GPU" in pm["reason"], pm
        assert "[gpu_pm] enabled = false" in pm["reason"], pm
        status = d.cli("status", check=True).stdout
        assert "gpu_pm: disabled: no NVIDIA driver/GPU" in status, status
        assert d.alive()
    finally:
        d.stop()


def test_off(tmp_path):
    d = Daemon(tmp_path, config=QUIET + "[gpu_pm]\nenabled = false\n").start()
    try:
        pm = collector(d, "gpu_pm")
        assert pm["state"] == "off" and pm["reason"] == "[gpu_pm] enabled = false", pm
    finally:
        d.stop()


def wait_for(d, cond, timeout=30):
    """The gpu_pm collector's status once cond holds (asserted)."""
    deadline = time.monotonic() + timeout
    while not cond(pm := collector(d, "gpu_pm")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cond(pm), pm
    return pm


@pytest.fixture
def fake_gpu(monkeypatch):
    assert os.path.exists(os.path.join(FAKEGPU, "libcupti.so.13")), \
        f"no stand-in libcupti in {FAKEGPU}: ninja -C build builds it"
    monkeypatch.setenv("LD_LIBRARY_PATH", FAKEGPU)
    return monkeypatch


def test_counters_reach_gpu_ring(tmp_path, fake_gpu):
    # Two GPUs whose CUDA order is the reverse of their PCI order: CUDA's
    # device 0 is nvidia-smi's gpu1.
    fake_gpu.setenv("FAKE_GPU_COUNT", "2")
    d = Daemon(tmp_path, config=QUIET + "[gpu_pm]\ninterval = 1ms\n").start()
    try:
        pm = collector(d, "gpu_pm")
        assert pm["state"] == "running", pm
        deadline = time.monotonic() + 30
        while collector(d, "gpu_pm")["events"] < 2 * 13 * 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        pm = collector(d, "gpu_pm")
        assert pm["gpus"] == 2 and pm["busy"] == 0 and pm["lost"] == 0, pm
        rings = {r["device"] for r in d.ok("GET", "/v1/status")["rings"]}
        assert {"gpu0", "gpu1"} <= rings, rings
        snap = json.loads(d.cli("snapshot", "--last", "10s", "--name", "pm", "--json",
                                check=True).stdout)
        export = tmp_path / "pm.json"
        d.cli("export", snap["path"], "--format", "json", "-o", str(export), check=True)
        by_ring = {}
        for c in json.load(open(export))["counters"]:
            by_ring.setdefault((c["device"], c["name"]), set()).add(c["value"])
        # The fake evaluates metric i of GH100's default set on CUDA device d
        # to 1000 * d + 10 * (i + 1): CUDA's device 1 is nvidia-smi's gpu0.
        assert by_ring[("gpu0", "gpu_pm/gr_active_cycles")] == {1010}, by_ring
        assert by_ring[("gpu1", "gpu_pm/gr_active_cycles")] == {10}, by_ring
        assert by_ring[("gpu1", "gpu_pm/sm_active_pct")] == {30}, by_ring
        counters, out = summary_counters(d, "pm")
        for name in ("tensor_active_pct", "warps_active_pct", "dram_throughput_pct",
                     "dram_read_bytes", "pcie_write_bytes", "nvlink_tx_bytes",
                     "sm_throughput_pct"):
            assert counters["gpu_pm/" + name][0] >= 20, (name, out)
    finally:
        d.stop()


def test_snapshot_holds_the_samples_up_to_its_end(tmp_path, fake_gpu):
    # The GPU's buffer is decoded once a second, and at once when a
    # snapshot seals the rings: each snapshot's newest PM sample is from
    # its last moments, not up to a second before (without the flush,
    # three snapshots in a row would all be that fresh once in 64).
    d = Daemon(tmp_path, config=QUIET + "[gpu_pm]\ninterval = 1ms\n").start()
    try:
        wait_for(d, lambda pm: pm["events"] > 0)
        for i in range(3):
            time.sleep(0.3)
            snap = json.loads(d.cli("snapshot", "--last", "2s", "--name", f"fresh{i}", "--json",
                                    check=True).stdout)
            export = tmp_path / f"fresh{i}.json"
            d.cli("export", snap["path"], "--format", "json", "-o", str(export), check=True)
            newest = max(c["timestamp"] for c in json.load(open(export))["counters"]
                         if c["device"] == "gpu0")
            behind_ms = (snap["covered"]["end_wall_ns"] - newest) / 1e6
            assert behind_ms < 250, (i, behind_ms)
    finally:
        d.stop()


def test_default_set_without_nvlink(tmp_path, fake_gpu):
    # An H100 whose NVLink counters are not offered (links off, or behind a
    # hypervisor, as on the lent GPU machine): the default set samples the
    # rest and status says what was left out.
    fake_gpu.setenv("FAKE_GPU_NO_NVLINK", "1")
    d = Daemon(tmp_path, config=QUIET + "[gpu_pm]\ninterval = 1ms\n").start()
    try:
        pm = wait_for(d, lambda pm: pm["events"] >= 11 * 5)
        assert pm["state"] == "running", pm
        assert "gpu0: nvlink_rx_bytes, nvlink_tx_bytes not available on this GPU" in \
            pm["detail"], pm
        snap = json.loads(d.cli("snapshot", "--last", "10s", "--name", "pm", "--json",
                                check=True).stdout)
        counters, out = summary_counters(d, "pm")
        assert "gpu_pm/sm_active_pct" in counters and "gpu_pm/pcie_read_bytes" in counters, out
        assert not any(name.startswith("gpu_pm/nvlink") for name in counters), out
        assert snap["path"]
    finally:
        d.stop()


def test_bad_metric_named(tmp_path, fake_gpu):
    d = Daemon(tmp_path, config=QUIET +
               "[gpu_pm]\nmetrics = sm__cycles_active.avg, sm__bogus.sum\n").start()
    try:
        pm = collector(d, "gpu_pm")
        assert pm["state"] == "disabled", pm
        assert "metric 'sm__bogus.sum' is not a PM sampling metric of GH100" in pm["reason"], pm
        assert "sm__bogus.sum" in d.cli("status", check=True).stdout
    finally:
        d.stop()


@pytest.mark.parametrize("result,state,words", [
    (35, "disabled", "NVreg_RestrictProfilingToAdminUsers=0"),
    (43, "disabled", "MIG"),
    (26, "running", "dcgmi profile --pause"),
])
def test_refusals(tmp_path, fake_gpu, result, state, words):
    fake_gpu.setenv("FAKE_PM_ENABLE_RESULT", str(result))
    d = Daemon(tmp_path, config=QUIET).start()
    try:
        pm = wait_for(d, lambda pm: pm["state"] != "running" or pm["busy"] == 1)
        assert pm["state"] == state, pm
        if state == "disabled":
            assert words in pm["reason"], pm
        else:
            # Held by another profiler: running, counted busy, retried, said in the log.
            assert pm["busy"] == 1 and pm["events"] == 0, pm
            assert words in open(d.log).read()
    finally:
        d.stop()


def test_pause_resume(tmp_path, fake_gpu):
    """POST /v1/collectors/gpu_pm/pause releases the GPUs' sessions for
    another profiler (Nsight Compute) and stops the counters; /resume
    brings them back."""
    d = Daemon(tmp_path, config=QUIET).start()
    try:
        deadline = time.monotonic() + 30
        while collector(d, "gpu_pm")["events"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert d.ok("POST", "/v1/collectors/gpu_pm/pause") == {"collector": "gpu_pm",
                                                                "paused": True}
        # Status shows the stats of the ingest thread's last round.
        pm = wait_for(d, lambda pm: pm["paused"] == 1)
        assert pm["state"] == "running", pm
        # The pause returned once no session was left: nothing comes after
        # what the ingest thread had not counted yet.
        time.sleep(0.3)
        before = collector(d, "gpu_pm")["events"]
        time.sleep(0.5)
        assert collector(d, "gpu_pm")["events"] == before
        assert d.ok("POST", "/v1/collectors/gpu_pm/resume")["paused"] is False
        pm = wait_for(d, lambda pm: pm["events"] > before and pm["paused"] == 0)
        assert "GPU PM sampling paused through the API" in open(d.log).read()
        # Only a running collector with a pause; others say so.
        status, body = d.request("POST", "/v1/collectors/nope/pause")
        assert status == 404 and "no collector nope" in body["error"]["message"], body
        status, body = d.request("POST", "/v1/collectors/host_metrics/pause")
        assert status == 400 and "cannot be paused" in body["error"]["message"], body
        status, body = d.request("POST", "/v1/collectors/gpu_pm/stop")
        assert status == 404, body
    finally:
        d.stop()
