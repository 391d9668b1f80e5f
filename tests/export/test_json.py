"""JSON export read back with Python's json module, matched one to one
against the raw events of the window (session-dump) and against what
make-session wrote (see tests/export/make_session.c): every range,
instant, counter, CPU sample, GPU activity, API call and drop, at the
same wall-clock ns; the warmup range whose begin lies before the window
left out; the last step closed at the window's end as truncated."""

import collections
import json

import pytest
from synth_session import (BUILD, CPP_MANGLED, CPP_NAME, HAVE_CPP, T0, MS, US, WALL_OFFSET, WORKER,
                           export, make_session, run, step_start, wall)

METADATA = {"process_name", "thread_name", "mapping", "process_cmdline"}


def export_json(tmp, *make_args):
    """(parsed export, raw events of the window) of a session make-session
    writes with make_args."""
    session = make_session(tmp, *make_args)
    with open(export(session, "json", tmp / "out.json"), encoding="utf-8") as f:
        doc = json.load(f)
    raw = [json.loads(line) for line in run(BUILD / "tests" / "session-dump", session).splitlines()]
    return doc, [e for e in raw if e["kind"] not in METADATA]


@pytest.fixture(scope="module", params=[(20, 10), (33, 7)], ids=["N20K10", "N33K7"])
def synth(request, tmp_path_factory):
    n, k = request.param
    doc, raw = export_json(tmp_path_factory.mktemp("json"), "--steps", n, "--samples-per-step", k)
    return n, k, doc, raw


def of_type(doc, *types):
    return [e for e in doc["trace_events"] if e["type"] in types]


def test_header(synth):
    n, _, doc, _ = synth
    end = T0 + 2 * MS + n * 10 * MS + 3 * MS
    assert doc["host"] == "synthhost"
    assert doc["session"]["id"] == "synth"
    assert doc["clock"] == {
        "name": "CLOCK_MONOTONIC", "wall_offset_ns": WALL_OFFSET,
        "profile_start_ns": T0, "profile_end_ns": end,
        "profile_start_wall_ns": wall(T0), "profile_end_wall_ns": wall(end),
    }
    assert doc["devices"] == ["host", "gpu0"]
    assert doc["processes"] == [{
        "pid": 4242, "name": "trainer", "cmdline": "python3 train.py",
        "threads": [{"tid": 4242, "name": "main"}, {"tid": 4243, "name": "loader"}],
    }]
    assert doc["corrupt_chunks"] == 0


def test_counts_per_kind(synth):
    """Every raw event of the window has its element, and no more."""
    n, k, doc, raw = synth
    kinds = collections.Counter(e["kind"] for e in raw)
    ranges = of_type(doc, "range")
    # The warmup's end has no begin in the window; the last step's begin
    # has no end: it is closed at the window's end.
    assert kinds["range_begin"] == len(ranges) == 4 * n + 1
    assert kinds["range_end"] == len(ranges)
    assert kinds["instant"] == len(of_type(doc, "instant")) == (n + 9) // 10
    assert kinds["counter"] == len(doc["counters"]) == 1 + 3 * n
    assert kinds["cpu_sample"] == len(doc["cpu_samples"]) == n * k
    assert kinds["gpu_activity"] == len(of_type(doc, "gpu_kernel", "gpu_memcpy", "gpu_memset")) == 2 * n
    assert kinds["api_call"] == len(of_type(doc, "api_call")) == n
    assert kinds["drops"] == len(doc["drops"]) == 1
    assert len(doc["trace_events"]) == len(ranges) + kinds["instant"] + 3 * n


def test_ranges_match_raw(synth):
    n, _, doc, raw = synth
    ranges = of_type(doc, "range")
    begins = collections.Counter((e["pid"], e["tid"], e["name"], wall(e["ts"]))
                                 for e in raw if e["kind"] == "range_begin")
    assert collections.Counter((e["process_id"], e["thread_id"], e["name"], e["timestamp"])
                               for e in ranges) == begins
    # Ends: every raw end but the warmup's (T0 + 1 ms), at begin + duration.
    ends = collections.Counter((e["pid"], e["tid"], wall(e["ts"]))
                               for e in raw if e["kind"] == "range_end")
    assert ends[(4242, 4242, wall(T0 + MS))] == 1
    ends[(4242, 4242, wall(T0 + MS))] -= 1
    closed = [e for e in ranges if not e["args"]["truncated"]]
    assert collections.Counter((e["process_id"], e["thread_id"], e["timestamp"] + e["duration"])
                               for e in closed) == +ends
    assert not [e for e in ranges if e["name"] == "warmup"]
    truncated = [e for e in ranges if e["args"]["truncated"]]
    assert truncated == [{
        "name": "step", "type": "range", "timestamp": wall(step_start(n)), "duration": 3 * MS,
        "process_id": 4242, "thread_id": 4242, "device": "host", "group": "main",
        "args": {"depth": 0, "truncated": True},
    }]


def test_ranges_match_spec(synth):
    n, _, doc, _ = synth
    got = {(e["name"], e["timestamp"]): e for e in of_type(doc, "range")}
    for i in range(n):
        s = step_start(i)
        want = [("step", s, 9 * MS - (i % 3) * 100 * US, 0, 4242, "main"),
                ("forward", s + MS, 3 * MS, 1, 4242, "main"),
                ("backward", s + 4 * MS, 4 * MS, 1, 4242, "main"),
                ("load_batch", s + MS // 2, 5 * MS // 2, 0, 4243, "loader")]
        for name, begin, duration, depth, tid, group in want:
            e = got[(name, wall(begin))]
            assert (e["duration"], e["args"]["depth"], e["thread_id"], e["group"], e["device"]) == \
                (duration, depth, tid, group, "host"), e


def test_instants(synth):
    n, _, doc, raw = synth
    instants = of_type(doc, "instant")
    assert sorted((e["process_id"], e["thread_id"], e["name"], e["timestamp"]) for e in instants) == \
        sorted((e["pid"], e["tid"], e["name"], wall(e["ts"])) for e in raw if e["kind"] == "instant")
    assert sorted(e["timestamp"] for e in instants) == \
        [wall(step_start(i) + 9 * MS + MS // 2) for i in range(0, n, 10)]
    assert all(e["duration"] == 0 and e["name"] == "checkpoint" and e["group"] == "main"
               for e in instants)


def test_counters(synth):
    n, _, doc, raw = synth
    assert sorted((c["device"], c["name"], c["timestamp"], c["value"]) for c in doc["counters"]) == \
        sorted((e["device"], e["name"], wall(e["ts"]), e["value"]) for e in raw if e["kind"] == "counter")
    by_name = collections.defaultdict(list)
    for c in doc["counters"]:
        by_name[c["name"]].append((c["timestamp"], c["value"]))
    assert by_name["cpu_sampler_hz"] == [(wall(T0), 1000.0)]
    assert sorted(by_name["cpu_util"]) == [(wall(step_start(i)), 50.0 + i % 50) for i in range(n)]
    assert sorted(by_name["host_mem_used"]) == [(wall(step_start(i)), 1e9 + i * 4096)
                                                for i in range(n)]
    assert sorted(by_name["sm_active"]) == [(wall(step_start(i)), 0.8) for i in range(n)]
    assert all(isinstance(c["value"], float) for c in doc["counters"])


def test_cpu_samples(synth):
    n, k, doc, raw = synth
    samples = doc["cpu_samples"]
    assert sorted((s["pid"], s["tid"], s["timestamp"]) for s in samples) == \
        sorted((e["pid"], e["tid"], wall(e["ts"])) for e in raw if e["kind"] == "cpu_sample")
    leaf = ["synth_hot_a"] * 6 + ["synth_hot_b"] * 3 + ["synth_hot_c"]
    want = {}
    for i in range(n):
        for j in range(k):
            want[wall(step_start(i) + j * (10 * MS // k) + US)] = (i % 4, leaf[j % 10])
    for s in samples:
        cpu, hot = want.pop(s["timestamp"])
        assert (s["pid"], s["tid"], s["cpu"], s["comm"], s["kernel_frames"]) == \
            (4242, 4242, cpu, "main", 0), s
        assert s["frames"] == [hot, "synth_step", "main"], s
        assert "mangled" not in s  # C names: nothing demangled
    assert not want


@pytest.mark.skipif(not HAVE_CPP, reason="the tests were built without a C++ compiler")
def test_cpp_frames_demangled(tmp_path):
    """frames name C++ functions demangled; mangled, beside them, the
    symbols (null for a frame that was not demangled)."""
    doc, _ = export_json(tmp_path, "--steps", 4, "--samples-per-step", 10, "--worker-samples", 5)
    worker = [s for s in doc["cpu_samples"] if s["pid"] == WORKER]
    assert len(worker) == 4 * 5
    for s in worker:
        assert s["frames"] == [CPP_NAME, "main"], s
        assert s["mangled"] == [CPP_MANGLED, None], s


def test_gpu_activity_and_api_calls(synth):
    n, _, doc, raw = synth
    gpu = of_type(doc, "gpu_kernel", "gpu_memcpy", "gpu_memset", "api_call")
    assert sorted((e["process_id"], e["name"], e["timestamp"]) for e in gpu) == \
        sorted((e["pid"], e["name"], wall(e["ts"])) for e in raw
               if e["kind"] in ("gpu_activity", "api_call"))
    got = {(e["name"], e["timestamp"]): e for e in gpu}
    for i in range(n):
        s = step_start(i)
        kernel = got[("gemm_kernel", wall(s + 2 * MS))]
        assert (kernel["type"], kernel["duration"], kernel["device"], kernel["group"]) == \
            ("gpu_kernel", 3 * MS // 2, "gpu0", "stream 7")
        assert kernel["args"] == {"correlation": i + 1, "stream": 7, "device_index": 0,
                                  "grid": [128, 2, 1], "block": [256, 1, 1],
                                  "registers_per_thread": 64, "static_shared_memory": 4096,
                                  "dynamic_shared_memory": 16384}
        copy = got[("memcpy_htod", wall(s + 1200 * US))]
        assert (copy["type"], copy["duration"], copy["args"]["bytes"], copy["args"]["stream"]) == \
            ("gpu_memcpy", 400 * US, 1048576, 7)
        call = got[("cudaLaunchKernel", wall(s + 1500 * US))]
        assert (call["type"], call["duration"], call["process_id"], call["thread_id"],
                call["device"], call["group"]) == ("api_call", 20 * US, 4242, 4242, "gpu0", "main")
        # The kernel it launched has its correlation id.
        assert call["args"] == {"device_index": 0, "correlation": i + 1}


def test_drops(synth):
    _, _, doc, _ = synth
    assert doc["drops"] == [{"timestamp": wall(T0 + MS), "device": "host", "pid": 4242,
                             "tid": 4242, "count": 5}]


def test_strings_escaped(tmp_path):
    """A host name with a quote, a backslash, a tab and a non-ASCII
    letter comes back as it was."""
    host = 'we"ird\\h\tst\u00fc'
    doc, _ = export_json(tmp_path, "--host", host, "--steps", "2")
    assert doc["host"] == host
    assert len(doc["trace_events"]) == 4 * 2 + 1 + 1 + 3 * 2
