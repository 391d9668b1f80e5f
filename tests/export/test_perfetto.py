"""Perfetto export read back with Perfetto's own trace schema.

make-session writes a session whose content is known exactly (see
make_session.c); `ringprof export --format perfetto --group G` turns it
into a .pftrace, once per grouping.  Every packet is decoded with the
perfetto package's perfetto_trace_pb2 and the sequence is replayed the way
Perfetto's trace processor reads it: sequence ids and flags, interned ids
defined before use, tracks described before use, the clocks, slices
balanced and nested per track, then the content: the tree of tracks the
grouping makes, names, counts and times to the ns, counters, GPU work and
its annotations, CPU samples and their stacks.  When a
trace_processor_shell binary is at hand (it cannot be downloaded here),
the trace is also loaded into it and queried."""

import collections
import glob
import os
import shutil
import sys

import pytest
from synth_session import (BUILD, CPP_NAME, HAVE_CPP, T0, MS, US, WALL_OFFSET, WORKER, export,
                           run, step_start, worker_session)

try:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Profiling, Trace, TrackEvent
except ImportError:
    pytest.skip("the perfetto package is not installed: the export is decoded with its trace "
                "schema (pip install perfetto)", allow_module_level=True)

N, K = 20, 10
WINDOW_END = T0 + 2 * MS + N * 10 * MS + 3 * MS
REALTIME, MONOTONIC, BOOTTIME = 1, 3, 6
CLEARED, NEEDS = 1, 2
BEGIN, END = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END
INSTANT, COUNTER = TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER
GROUPINGS = ("process", "device", "thread")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return run(BUILD / "tests" / "make-session", tmp_path_factory.mktemp("perfetto")).strip()


@pytest.fixture(scope="module", params=GROUPINGS)
def grouping(request):
    return request.param


@pytest.fixture(scope="module")
def exported(session, grouping, tmp_path_factory):
    path = tmp_path_factory.mktemp(grouping) / "synthhost.pftrace"
    run(BUILD / "cli" / "ringprof", "export", session, "--format", "perfetto", "--group",
        grouping, "-o", path)
    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    assert len(trace.packet) > 0
    return path, list(trace.packet)


@pytest.fixture(scope="module")
def packets(exported):
    return exported[1]


def uses_iids(p):
    if p.HasField("track_event"):
        e = p.track_event
        return (e.HasField("name_iid") or len(e.category_iids) > 0 or
                any(a.HasField("name_iid") for a in e.debug_annotations))
    return p.HasField("perf_sample") and p.perf_sample.HasField("callstack_iid")


INTERNED_FIELDS = ["event_categories", "event_names", "debug_annotation_names",
                   "function_names", "mapping_paths", "mappings", "frames", "callstacks"]


class Replay:
    """The trace read in order, as trace processor reads one sequence:
    interned data and track descriptors take effect where they appear;
    events are then ordered by time (ties in file order)."""

    def __init__(self, packets):
        self.interned = {f: {} for f in INTERNED_FIELDS}
        self.tracks = {}          # uuid -> TrackDescriptor
        self.events = []          # (ts, index, TrackEvent)
        self.samples = []         # (ts, PerfSample, [function names, root first], [modules])
        self.default_clock = None
        for i, p in enumerate(packets):
            self.packet(i, p)

    def packet(self, i, p):
        if p.HasField("trace_packet_defaults"):
            assert p.sequence_flags & CLEARED, f"packet {i}: defaults outside a cleared packet"
            self.default_clock = p.trace_packet_defaults.timestamp_clock_id
        for field in INTERNED_FIELDS:
            for entry in getattr(p.interned_data, field):
                table = self.interned[field]
                assert entry.iid >= 1, f"packet {i}: {field} iid {entry.iid}"
                assert entry.iid not in table, f"packet {i}: {field} iid {entry.iid} defined twice"
                table[entry.iid] = entry
        self.check_interned_refs(i, p)
        if p.HasField("timestamp"):
            clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else self.default_clock
            assert clock == MONOTONIC, f"packet {i} is timed in clock {clock}"
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            assert td.uuid not in self.tracks, f"packet {i}: track {td.uuid} described twice"
            assert not td.HasField("parent_uuid") or td.parent_uuid in self.tracks, \
                f"packet {i}: track {td.uuid}'s parent {td.parent_uuid} is not described yet"
            self.tracks[td.uuid] = td
        if p.HasField("track_event"):
            assert p.track_event.track_uuid in self.tracks, \
                f"packet {i}: track {p.track_event.track_uuid} used before it is described"
            self.events.append((p.timestamp, i, p.track_event))
        if p.HasField("perf_sample"):
            frames = [self.interned["frames"][f]
                      for f in self.interned["callstacks"][p.perf_sample.callstack_iid].frame_ids]
            names = [self.interned["function_names"][f.function_name_id].str.decode()
                     for f in frames]
            modules = [self.interned["mapping_paths"][
                self.interned["mappings"][f.mapping_id].path_string_ids[0]].str.decode()
                for f in frames]
            self.samples.append((p.timestamp, p.perf_sample, names, modules))

    def check_interned_refs(self, i, p):
        t = self.interned
        if p.HasField("track_event"):
            e = p.track_event
            assert not e.HasField("name_iid") or e.name_iid in t["event_names"], f"packet {i}"
            assert all(c in t["event_categories"] for c in e.category_iids), f"packet {i}"
            assert all(a.name_iid in t["debug_annotation_names"] for a in e.debug_annotations
                       if a.HasField("name_iid")), f"packet {i}"
        if p.HasField("perf_sample") and p.perf_sample.HasField("callstack_iid"):
            assert p.perf_sample.callstack_iid in t["callstacks"], f"packet {i}"
        for c in p.interned_data.callstacks:
            assert all(f in t["frames"] for f in c.frame_ids), f"packet {i}: callstack {c.iid}"
        for f in p.interned_data.frames:
            assert f.function_name_id in t["function_names"], f"packet {i}: frame {f.iid}"
            assert f.mapping_id in t["mappings"], f"packet {i}: frame {f.iid} has no mapping"
        for m in p.interned_data.mappings:
            assert m.path_string_ids and all(s in t["mapping_paths"] for s in m.path_string_ids)

    def name(self, event):
        return self.interned["event_names"][event.name_iid].name

    def args(self, event):
        return {self.interned["debug_annotation_names"][a.name_iid].name:
                getattr(a, a.WhichOneof("value"))
                for a in event.debug_annotations}

    def track_name(self, uuid):
        td = self.tracks[uuid]
        if td.HasField("thread"):
            return td.thread.thread_name
        return td.name

    def path(self, uuid):
        """The names of the track's ancestors, the root first, and its own
        (a process track's "process PID")."""
        td = self.tracks[uuid]
        name = self.track_name(uuid) or f"process {td.process.pid}"
        return (self.path(td.parent_uuid) if td.HasField("parent_uuid") else ()) + (name,)

    def slices(self):
        """Per track, by time (ties in file order), BEGIN pushes and END
        pops: (track, name, begin, end, parent name, begin args, end args)."""
        stacks = collections.defaultdict(list)
        out = []
        for ts, i, e in sorted(self.events, key=lambda x: (x[0], x[1])):
            if e.type == BEGIN:
                stack = stacks[e.track_uuid]
                stack.append((ts, e, stack[-1][1] if stack else None))
            elif e.type == END:
                assert stacks[e.track_uuid], f"packet {i}: END on track {e.track_uuid} with " \
                                             f"no slice open"
                begin, b, parent = stacks[e.track_uuid].pop()
                assert ts >= begin
                out.append((e.track_uuid, self.name(b), begin, ts,
                            parent and self.name(parent), self.args(b), self.args(e)))
        assert not any(stacks.values()), f"slices never ended: {dict(stacks)}"
        return out


@pytest.fixture(scope="module")
def replay(packets):
    return Replay(packets)


def test_one_sequence_and_its_flags(packets):
    stateful = [p for p in packets
                if p.HasField("track_event") or p.HasField("perf_sample") or
                p.HasField("interned_data")]
    assert stateful and all(p.HasField("trusted_packet_sequence_id") for p in stateful)
    assert len({p.trusted_packet_sequence_id for p in packets}) == 1
    interning = [i for i, p in enumerate(packets) if p.HasField("interned_data")]
    cleared = [i for i, p in enumerate(packets) if p.sequence_flags & CLEARED]
    # The first packet that interns clears the sequence's state, once.
    assert cleared == [interning[0]]
    assert packets[interning[0]].sequence_flags == CLEARED | NEEDS
    for i, p in enumerate(packets):
        if uses_iids(p) or p.HasField("interned_data"):
            assert p.sequence_flags & NEEDS, f"packet {i} uses interned ids without NEEDS"
            assert i >= interning[0]


def test_interned_ids_and_tracks_defined_before_use(replay):
    # Replay asserts it packet by packet; here what it found.
    assert replay.interned["event_names"] and replay.interned["callstacks"]
    for table in replay.interned.values():
        assert sorted(table) == list(range(1, len(table) + 1))
    # Each distinct string is interned once.
    names = [e.name for e in replay.interned["event_names"].values()]
    assert len(names) == len(set(names))
    funcs = [s.str for s in replay.interned["function_names"].values()]
    assert len(funcs) == len(set(funcs))
    # Three stacks: main > synth_step > synth_hot_{a,b,c}.
    assert len(replay.interned["callstacks"]) == 3


def test_clock(packets, replay):
    assert packets[0].HasField("clock_snapshot")
    snap = packets[0].clock_snapshot
    clocks = {c.clock_id: c.timestamp for c in snap.clocks}
    assert set(clocks) == {REALTIME, MONOTONIC, BOOTTIME}
    assert clocks[BOOTTIME] == clocks[MONOTONIC]
    assert clocks[REALTIME] - clocks[MONOTONIC] == WALL_OFFSET
    assert replay.default_clock == MONOTONIC
    first = min(ts for ts, _, e in replay.events
                if e.type == BEGIN and replay.name(e) == "step")
    assert first == T0 + 2 * MS
    assert first + clocks[REALTIME] - clocks[MONOTONIC] == T0 + 2 * MS + WALL_OFFSET


def thread_track(grouping, name, tid):
    """The name of the track of thread tid's own events: the name in its
    ThreadDescriptor by process, named after it and its ids otherwise."""
    return name if grouping == "process" else f"{name} 4242/{tid}"


# Every track's path from its root, per grouping: make-session records
# threads 4242 and 4243 of process 4242 on the host ring, and 4242's API
# calls, stream 7 and sm_active on gpu0.
TREES = {
    "process": {
        ("process 4242",), ("process 4242", "main"), ("process 4242", "loader"),
        ("process 4242", "main", "main runtime API"),
        ("GPU 0",), ("GPU 0", "Stream 7"), ("GPU 0", "sm_active"),
        ("cpu_util",), ("host_mem_used",), ("cpu_sampler_hz",),
    },
    "device": {
        ("synthhost",), ("synthhost", "trainer 4242"),
        ("synthhost", "trainer 4242", "main 4242/4242"),
        ("synthhost", "trainer 4242", "loader 4242/4243"),
        ("synthhost", "cpu_util"), ("synthhost", "host_mem_used"),
        ("synthhost", "cpu_sampler_hz"),
        ("GPU 0",), ("GPU 0", "trainer 4242"), ("GPU 0", "trainer 4242", "main 4242/4242"),
        ("GPU 0", "trainer 4242", "main 4242/4242", "main runtime API"),
        ("GPU 0", "Stream 7"), ("GPU 0", "sm_active"),
    },
    "thread": {
        ("main 4242/4242",), ("loader 4242/4243",), ("main 4242/4242", "main runtime API"),
        ("GPU 0",), ("GPU 0", "Stream 7"), ("GPU 0", "sm_active"),
        ("cpu_util",), ("host_mem_used",), ("cpu_sampler_hz",),
    },
}


def test_tracks(replay, grouping):
    paths = [replay.path(uuid) for uuid in replay.tracks]
    assert len(paths) == len(set(paths)), sorted(paths)
    assert set(paths) == TREES[grouping], sorted(paths)
    by_path = {replay.path(uuid): td for uuid, td in replay.tracks.items()}
    for name in ("cpu_util", "host_mem_used", "cpu_sampler_hz", "sm_active"):
        assert [td.HasField("counter") for p, td in by_path.items() if p[-1] == name] == [True]
    described = [td for td in replay.tracks.values()
                 if td.HasField("process") or td.HasField("thread")]
    if grouping != "process":
        # Perfetto would keep a described process or thread in its
        # process's group, whatever the parent: they are named instead.
        assert described == []
        return
    proc = by_path[("process 4242",)].process
    assert (proc.pid, proc.process_name, list(proc.cmdline)) == \
        (4242, "trainer", ["python3 train.py"])
    for name, tid in (("main", 4242), ("loader", 4243)):
        thread = by_path[("process 4242", name)].thread
        assert (thread.pid, thread.tid) == (4242, tid)
    assert len(described) == 3


def test_slices(replay, grouping):
    slices = replay.slices()
    count = collections.Counter(s[1] for s in slices)
    assert count == {"step": N + 1, "forward": N, "backward": N, "load_batch": N,
                     "gemm_kernel": N, "memcpy_htod": N, "cudaLaunchKernel": N}, count
    by = collections.defaultdict(list)
    for s in sorted(slices, key=lambda s: s[2]):
        by[s[1]].append(s)

    def nth(name, i):
        """The i-th slice named name: its track, times from step i's start,
        parent slice, and the arguments of its begin and its end."""
        track, _, begin, end, parent, args, end_args = by[name][i]
        s = step_start(i)
        return replay.track_name(track), begin - s, end - s, parent, args, end_args

    main, loader = thread_track(grouping, "main", 4242), thread_track(grouping, "loader", 4243)
    for i in range(N):
        assert nth("step", i) == (main, 0, 9 * MS - (i % 3) * 100 * US, None, {}, {})
        assert nth("forward", i) == (main, MS, 4 * MS, "step", {}, {})
        assert nth("backward", i) == (main, 4 * MS, 8 * MS, "step", {}, {})
        assert nth("load_batch", i) == (loader, MS // 2, 3 * MS, None, {}, {})
        assert nth("gemm_kernel", i) == ("Stream 7", 2 * MS, 3500 * US, None,
                                         {"device": 0, "stream": 7, "correlation": i + 1,
                                          "grid": "128,2,1", "block": "256,1,1",
                                          "registers_per_thread": 64,
                                          "static_shared_memory": 4096,
                                          "dynamic_shared_memory": 16384}, {})
        assert nth("memcpy_htod", i) == ("Stream 7", 1200 * US, 1600 * US, None,
                                         {"device": 0, "stream": 7, "bytes": 1 << 20}, {})
        assert nth("cudaLaunchKernel", i) == ("main runtime API", 1500 * US, 1520 * US, None,
                                              {"device": 0, "correlation": i + 1}, {})
    # The last step never ends: closed at the window's end, marked so.
    assert nth("step", N) == (main, 0, WINDOW_END - step_start(N), None, {},
                              {"truncated": True})


def test_launch_flows(replay):
    """Each cudaLaunchKernel begins a flow (flow_ids) that its kernel, the
    GPU work of the same correlation id, terminates (terminating_flow_ids):
    Perfetto draws the arrow."""
    ends = collections.defaultdict(list)
    for ts, _, e in replay.events:
        assert not (e.flow_ids or e.terminating_flow_ids) or e.type == BEGIN
        for f in e.flow_ids:
            ends[f].append(("out", replay.name(e), ts))
        for f in e.terminating_flow_ids:
            ends[f].append(("in", replay.name(e), ts))
    assert sorted(sorted(v) for v in ends.values()) == [
        [("in", "gemm_kernel", step_start(i) + 2 * MS),
         ("out", "cudaLaunchKernel", step_start(i) + 1500 * US)] for i in range(N)]


def test_instants_and_drops(replay, grouping):
    main = thread_track(grouping, "main", 4242)
    instants = [(ts, replay.name(e), replay.track_name(e.track_uuid), replay.args(e))
                for ts, _, e in replay.events if e.type == INSTANT]
    assert sorted(instants) == sorted(
        [(T0 + MS, "dropped events", main, {"count": 5})] +
        [(step_start(i) + 9 * MS + MS // 2, "checkpoint", main, {}) for i in range(0, N, 10)])


def test_counters(replay):
    values = collections.defaultdict(list)
    for ts, _, e in sorted(replay.events, key=lambda x: (x[0], x[1])):
        if e.type == COUNTER:
            assert e.HasField("double_counter_value")
            values[replay.track_name(e.track_uuid)].append((ts, e.double_counter_value))
    assert values == {
        "cpu_sampler_hz": [(T0, 1000.0)],
        "cpu_util": [(step_start(i), 50.0 + i % 50) for i in range(N)],
        "host_mem_used": [(step_start(i), 1e9 + i * 4096) for i in range(N)],
        "sm_active": [(step_start(i), 0.8) for i in range(N)],
    }


def test_cpu_samples(replay):
    samples = replay.samples
    assert len(samples) == N * K
    leaves = collections.Counter()
    for ts, s, names, modules in samples:
        i, rest = divmod(ts - T0 - 2 * MS, 10 * MS)
        j, off = divmod(rest, 10 * MS // K)
        assert off == 1000 and 0 <= i < N, ts
        assert (s.pid, s.tid, s.cpu, s.cpu_mode) == (4242, 4242, i % 4, Profiling.MODE_USER)
        leaf = "synth_hot_" + "abc"[0 if j % 10 < 6 else 1 if j % 10 < 9 else 2]
        # Root first: main calls synth_step, which calls the leaf.
        assert names == ["main", "synth_step", leaf], names
        assert set(modules) == {"make-session"}
        leaves[leaf] += 1
    assert leaves == {"synth_hot_a": N * K * 6 // 10, "synth_hot_b": N * K * 3 // 10,
                      "synth_hot_c": N * K // 10}


@pytest.mark.skipif(not HAVE_CPP, reason="the tests were built without a C++ compiler")
def test_cpp_frames_demangled(tmp_path):
    """A frame has one name in Perfetto: the demangled one."""
    path = export(worker_session(tmp_path, steps=4, k=10, w=5), "perfetto", tmp_path / "t.pftrace")
    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    worker = [names for _, s, names, _ in Replay(list(trace.packet)).samples if s.pid == WORKER]
    assert worker == [["main", CPP_NAME]] * 4 * 5


PROBE = """import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)  # "wrote ..."
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def export_peak_rss(tmp, steps):
    """Peak RSS in KiB of exporting a session of steps steps."""
    session = run(BUILD / "tests" / "make-session", tmp, "--steps", steps).strip()
    return int(run(sys.executable, "-c", PROBE, BUILD / "cli" / "ringprof", "export", session,
                   "--format", "perfetto", "-o", tmp / "out.pftrace"))


def test_export_streams(tmp_path):
    """Packets go out as they are made: four times the session (a million
    events) takes about the same memory.  Speed is bench/export's."""
    small = export_peak_rss(tmp_path / "small", 10000)
    big = export_peak_rss(tmp_path / "big", 40000)
    assert big < 1.25 * small + 4096, f"peak RSS {small} KiB at 10000 steps, {big} KiB at 40000"


def trace_processor_binary():
    """A trace_processor_shell here: $RINGPROF_TRACE_PROCESSOR, on PATH, or
    the one the perfetto package downloaded earlier."""
    env = os.environ.get("RINGPROF_TRACE_PROCESSOR")
    if env:
        return env
    found = shutil.which("trace_processor_shell") or shutil.which("trace_processor")
    if found:
        return found
    cached = sorted(glob.glob(os.path.expanduser(
        "~/.local/share/perfetto/prebuilts/trace_processor_shell*")))
    return next((c for c in cached if not c.endswith(".tmp")), None)


def test_trace_processor(exported, grouping):
    binary = trace_processor_binary()
    if not binary:
        pytest.skip("no trace_processor_shell binary: the perfetto package downloads it on first "
                    "use, which needs the network (set RINGPROF_TRACE_PROCESSOR to a binary)")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    path, _ = exported
    tp = TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=binary))
    try:
        def rows(sql):
            return [tuple(getattr(r, c) for c in r.__dict__ if not c.startswith("_"))
                    for r in tp.query(sql)]

        slices = dict(rows("select name, count(*) from slice group by name"))
        assert slices == {"step": N + 1, "forward": N, "backward": N, "load_batch": N,
                          "gemm_kernel": N, "memcpy_htod": N, "cudaLaunchKernel": N,
                          "checkpoint": N // 10, "dropped events": 1}, slices
        assert rows("select min(ts) from slice where name = 'step'") == [(T0 + 2 * MS,)]
        assert rows("select max(ts + dur) from slice where name = 'step'") == [(WINDOW_END,)]
        if grouping == "process":  # the others describe no thread or process
            threads = set(rows("select tid, name from thread where tid in (4242, 4243)"))
            assert threads == {(4242, "main"), (4243, "loader")}
            assert rows("select name from process where pid = 4242") == [("trainer",)]
        assert rows("select so.name, si.name, count(*) from flow f "
                    "join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id "
                    "group by 1, 2") == [("cudaLaunchKernel", "gemm_kernel", N)]
        assert rows("select count(*) from perf_sample") == [(N * K,)]
        leaves = dict(rows(
            "select f.name, count(*) from perf_sample s "
            "join stack_profile_callsite c on s.callsite_id = c.id "
            "join stack_profile_frame f on c.frame_id = f.id group by f.name"))
        assert leaves == {"synth_hot_a": N * K * 6 // 10, "synth_hot_b": N * K * 3 // 10,
                          "synth_hot_c": N * K // 10}
        errors = rows("select name, idx, value from stats "
                      "where severity in ('error', 'data_loss') and value > 0")
        assert errors == [], errors
    finally:
        tp.close()
