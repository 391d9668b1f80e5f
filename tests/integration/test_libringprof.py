"""libringprof from C (tests/integration/probe.c) against the real daemon:
events arrive complete and attributed, from threads and forked children,
and the session calls work and fail with the daemon's words."""

import errno
import json
import os
import subprocess
import sys

from conftest import events, ranges, run_probe
from daemon_harness import BUILD

import ringprof
from ringprof._api import request


def test_c_annotations_arrive_complete(ringprofd, probe):
    n = 200000
    out = run_probe(probe, "bench", n)
    print(f"{out['ns_per_call']} ns per C annotation with a daemon")
    assert out["connected"] == 1
    # Each thread's ring (16 MiB in the test config) holds the whole burst.
    assert out["dropped"] == 0
    s = ringprof.snapshot(last="5s")
    pids = {e["pid"] for e in events(s) if e.get("name") == "probe.bench"}
    assert len(pids) == 1
    done, unmatched = ranges(events(s, pid=pids.pop()))
    assert done["probe.bench"] == n and unmatched == 0


def test_c_threads_get_rings_of_their_own(ringprofd, probe):
    run_probe(probe, "threads", 4, 10000)
    s = ringprof.snapshot(last="5s")
    evs = [e for e in events(s) if e.get("name") == "probe.thread"]
    per_tid = {}
    for e in evs:
        per_tid[e["tid"]] = per_tid.get(e["tid"], 0) + 1
    assert len({e["pid"] for e in evs}) == 1
    assert sorted(per_tid.values()) == [10000] * 4


def test_c_fork_child_reconnects(ringprofd, probe):
    out = run_probe(probe, "fork")
    assert out["parent_connected"] == 1 and out["child_connected"] == 1
    s = ringprof.snapshot(last="5s")
    child, _ = ranges(events(s, pid=out["child"]))
    assert child["probe.child"] == 10 and child["probe.parent"] == 0


def test_c_session_calls(ringprofd, probe):
    out = run_probe(probe, "session", "c-session")
    assert out == {"rc": 0, "id": "c-session"}
    s = request("GET", "/v1/sessions/c-session")
    assert s["state"] == "complete" and s["trigger"]["source"] == "library"
    done, _ = ranges(events(s))
    assert done["probe.session"] == 100

    out = run_probe(probe, "snapshot", 2 * 10**9)
    assert out["rc"] == 0
    s = request("GET", f"/v1/sessions/{out['id']}")
    assert s["kind"] == "snapshot"
    assert s["requested"]["end_ns"] - s["requested"]["start_ns"] == 2 * 10**9

    out = run_probe(probe, "stop", "c-session")
    assert out["rc"] == -errno.EEXIST  # 409: not open any more
    assert "c-session" in out["error"]


def test_c_session_calls_without_a_daemon(probe):
    env = {**os.environ, "RINGPROF_SOCKET": "/nonexistent/ringprofd.sock"}
    out = run_probe(probe, "snapshot", 10**9, env=env)
    assert out["rc"] < 0
    assert "cannot reach ringprofd at /nonexistent/ringprofd.sock" in out["error"]


# libringprof.so loaded with dlopen (ctypes), not at start: its
# thread-local state (TLS descriptors, lib/meson.build) works either way.
DLOPEN = r"""
import ctypes, json, os, sys, threading
lib = ctypes.CDLL(sys.argv[1])
lib.ringprof_range_begin.argtypes = [ctypes.c_char_p]
lib.ringprof_dropped.restype = ctypes.c_uint64
seen = {}
def work():
    for _ in range(1000):
        lib.ringprof_range_begin(b"dlopen.range")
        lib.ringprof_range_end()
    seen[threading.get_native_id()] = (lib.ringprof_connected(), lib.ringprof_dropped())
t = threading.Thread(target=work)
t.start()
t.join()
work()
print(json.dumps({"pid": os.getpid(), "threads": list(seen.values())}))
"""


def test_c_library_loaded_with_dlopen(ringprofd):
    lib = os.path.join(BUILD, "lib", "libringprof.so.0")
    out = subprocess.run([sys.executable, "-c", DLOPEN, lib], capture_output=True, text=True,
                         timeout=60, check=True)
    got = json.loads(out.stdout)
    assert got["threads"] == [[1, 0], [1, 0]]
    s = ringprof.snapshot(last="5s")
    evs = events(s, pid=got["pid"])
    done, unmatched = ranges(evs)
    assert done["dlopen.range"] == 2000 and unmatched == 0
    assert len({e["tid"] for e in evs if e.get("name") == "dlopen.range"}) == 2
