"""XSpace export read back by real readers: protoc with our schema, XProf's
own XSpace parser (xprof.profile_data) and XProf's trace viewer converter
(raw_to_tool_data, the JSON that XProf's Profile tab draws), against what
make-session wrote (see tests/export/make_session.c).

The trace viewer shows times in microseconds since the profile start (the
lines' timestamps are the start): the first step at 2000 us."""

import collections
import json
import shutil

import pytest
from xprof.convert import raw_to_tool_data
from xprof.profile_data import ProfileData
from synth_session import (CPP_MANGLED, CPP_NAME, HAVE_CPP, PROTO_DIR, T0, MS, WALL_OFFSET,
                           WORKER, export, make_session, message_class, run, worker_session)

SAMPLE_PERIOD = MS  # make-session samples at 1000 Hz


@pytest.fixture(scope="module", params=[(20, 10), (33, 7)], ids=["N20K10", "N33K7"])
def synth(request, tmp_path_factory):
    """(steps, samples per step, path of the exported XSpace)."""
    n, k = request.param
    tmp = tmp_path_factory.mktemp("xplane")
    session = make_session(tmp, "--steps", n, "--samples-per-step", k)
    return n, k, export(session, "xplane", session / "synthhost.xplane.pb")


@pytest.fixture(scope="module")
def xspace_class(tmp_path_factory):
    """XSpace from storage/proto/xplane.proto."""
    return message_class(tmp_path_factory.mktemp("desc"), "xplane.proto",
                         "tensorflow.profiler.XSpace")


def step_start(i):
    return 2 * MS + i * 10 * MS  # since the profile start


def us(ns):
    return ns / 1000


def viewer(path, tool, options, tmp_path_factory):
    """XProf's trace viewer JSON for the file, converted in a fresh session
    directory (XProf writes its caches there)."""
    d = tmp_path_factory.mktemp("xprof") / "plugins" / "profile" / "synth"
    d.mkdir(parents=True)
    shutil.copy(path, d)
    params = {"use_saved_result": False, "trace_viewer_options": options}
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(d / path.name)], tool, params)
    assert data is not None, f"XProf could not convert {path} for {tool}"
    doc = json.loads(data.decode() if isinstance(data, bytes) else data)
    return [e for e in doc["traceEvents"] if e]


def threads(events):
    """{process name: pid}, {(pid, thread name): tid}."""
    procs = {e["args"]["name"].split(" ", 1)[-1] if e["args"]["name"].startswith("synthhost ")
             else e["args"]["name"]: e["pid"] for e in events if e.get("name") == "process_name"}
    tids = {(e["pid"], e["args"]["name"]): e["tid"] for e in events if e.get("name") == "thread_name"}
    return procs, tids


def on(events, pid, tid, name):
    return sorted((e for e in events if e.get("pid") == pid and e.get("tid") == tid and
                   e.get("name") == name and e["ph"] in "Xi"), key=lambda e: e["ts"])


@pytest.fixture(scope="module")
def legacy(synth, tmp_path_factory):
    return viewer(synth[2], "trace_viewer", {}, tmp_path_factory)


@pytest.fixture(scope="module")
def streaming(synth, tmp_path_factory):
    """The trace viewer the Profile tab uses (streaming, every event:
    resolution 0)."""
    return viewer(synth[2], "trace_viewer@", {"resolution": 0}, tmp_path_factory)


def test_protoc_decodes(synth):
    text = run("sh", "-c", f"protoc --proto_path={PROTO_DIR} "
               f"--decode=tensorflow.profiler.XSpace xplane.proto < {synth[2]}")
    assert 'hostnames: "synthhost"' in text
    for name in ("/host:CPU", "/device:GPU:0", "Task Environment"):
        assert f'name: "{name}"' in text


def check_nesting(plane, line):
    """Sorted by offset (longer first at the same offset), no partial overlap."""
    last, open_ends = None, []
    for e in line.events:
        begin, end = e.offset_ps, e.offset_ps + e.duration_ps
        assert last is None or (begin, -end) >= last, (plane.name, line.name, last, begin)
        last = (begin, -end)
        while open_ends and open_ends[-1] <= begin:
            open_ends.pop()
        assert not open_ends or end <= open_ends[-1], (plane.name, line.name, begin, end)
        open_ends.append(end)


def test_structure(synth, xspace_class):
    n, _, path = synth
    space = xspace_class.FromString(path.read_bytes())
    assert list(space.hostnames) == ["synthhost"]
    assert [p.name for p in space.planes] == ["/host:CPU", "/device:GPU:0", "Task Environment"]
    assert [p.id for p in space.planes] == [0, 1, 2]
    assert len(space.warnings) == 1 and space.warnings[0].startswith("5 events were dropped")
    for p in space.planes:
        assert sorted(p.event_metadata) == list(range(1, len(p.event_metadata) + 1))
        assert all(k == m.id for k, m in p.event_metadata.items())
        assert all(k == m.id for k, m in p.stat_metadata.items())
        for line in p.lines:
            assert line.timestamp_ns == 0  # the profile start
            check_nesting(p, line)
    host, gpu, env = space.planes
    assert [(l.id, l.name, l.display_name) for l in host.lines] == [
        (0x80000000, "_counters_", "_counters_"), (4242, "main", "main (4242)"),
        (0x80000002, "CPU samples", "main (4242) CPU samples"),
        (4243, "loader", "loader (4243)")]
    assert [(l.id, l.name) for l in gpu.lines] == [
        (0x80000000, "_counters_"), (7, "Stream #7(Compute,Memcpy)")]
    assert [l.display_id for p in (host, gpu) for l in p.lines] == [1, 2, 3, 4, 1, 2]
    stat_names = {k: m.name for k, m in env.stat_metadata.items()}
    assert {stat_names[s.metadata_id]: s.uint64_value for s in env.stats} == {
        "profile_start_time": T0 + WALL_OFFSET,
        "profile_stop_time": T0 + step_start(n) + 3 * MS + WALL_OFFSET}
    names = {k: m.name for k, m in host.event_metadata.items()}
    steps = [e for e in host.lines[1].events if names[e.metadata_id] == "step"]
    assert [(e.offset_ps, e.duration_ps) for e in steps[:2]] == [
        (2 * MS * 1000, 9 * MS * 1000), (12 * MS * 1000, 8_900_000_000)]


def test_xprof_parser(synth):
    """XProf's own XSpace parser sees the planes, lines and events."""
    n, k, path = synth
    counts = {(p.name, l.name): collections.Counter(e.name for e in l.events)
              for p in ProfileData.from_file(str(path)).planes for l in p.lines}
    checkpoints = len(range(0, n, 10))
    assert counts[("/host:CPU", "main")] == {
        "step": n + 1, "forward": n, "backward": n, "cudaLaunchKernel": n,
        "checkpoint": checkpoints, "dropped events": 1}
    assert counts[("/host:CPU", "loader")] == {"load_batch": n}
    assert counts[("/host:CPU", "_counters_")] == {"cpu_util": n, "host_mem_used": n,
                                                   "cpu_sampler_hz": 1}
    assert counts[("/device:GPU:0", "Stream #7(Compute,Memcpy)")] == {"gemm_kernel": n,
                                                                      "memcpy_htod": n}
    assert counts[("/device:GPU:0", "_counters_")] == {"sm_active": n}
    # An event per stretch of samples sharing a frame (see flame below).
    assert counts[("/host:CPU", "CPU samples")] == collections.Counter(
        name for name, *_ in flame(n, k))


def test_trace_viewer_annotations(synth, legacy):
    n, _, _ = synth
    procs, tids = threads(legacy)
    host = procs["/host:CPU"]
    main, loader = tids[(host, "main (4242)")], tids[(host, "loader (4243)")]

    steps = on(legacy, host, main, "step")
    assert len(steps) == n + 1
    for i, e in enumerate(steps[:n]):
        assert (e["ts"], e["dur"]) == (us(step_start(i)), us(9 * MS - (i % 3) * MS // 10))
        assert "truncated" not in e.get("args", {})
    # The step still open at the window's end, closed there.
    assert (steps[n]["ts"], steps[n]["dur"]) == (us(step_start(n)), us(3 * MS))
    assert steps[n]["args"]["truncated"] == "1"

    def spans(tid, name):
        return [(e["ts"], e.get("dur", 0)) for e in on(legacy, host, tid, name)]

    assert spans(main, "forward") == [(us(step_start(i) + MS), us(3 * MS)) for i in range(n)]
    assert spans(main, "backward") == [(us(step_start(i) + 4 * MS), us(4 * MS)) for i in range(n)]
    assert spans(loader, "load_batch") == [(us(step_start(i) + MS // 2), us(5 * MS // 2))
                                           for i in range(n)]
    # Runtime API calls from gpu0's ring, on the thread that made them.
    assert spans(main, "cudaLaunchKernel") == [(us(step_start(i) + 3 * MS // 2), 20.0)
                                               for i in range(n)]
    assert spans(main, "checkpoint") == [(us(step_start(i) + 19 * MS // 2), 0)
                                         for i in range(0, n, 10)]
    drops = on(legacy, host, main, "dropped events")
    assert [(e["ts"], e["args"]["dropped"]) for e in drops] == [(us(MS), "5")]
    # The warmup range began before the window: left out.
    assert not [e for e in legacy if e.get("name") == "warmup"]


def test_trace_viewer_gpu(synth, legacy):
    n, _, _ = synth
    procs, tids = threads(legacy)
    gpu = procs["/device:GPU:0"]
    stream = tids[(gpu, "Stream #7(Compute,Memcpy)")]
    kernels = on(legacy, gpu, stream, "gemm_kernel")
    assert [(e["ts"], e["dur"], e["args"]["correlation_id"], e["args"]["stream_id"])
            for e in kernels] == [(us(step_start(i) + 2 * MS), us(3 * MS // 2), str(i + 1), "7")
                                  for i in range(n)]
    # The launch configuration as XLA's GPU tracer writes it.
    assert {e["args"]["kernel_details"] for e in kernels} == {
        "regs:64 static_shared:4096 dynamic_shared:16384 grid:128,2,1 block:256,1,1"}
    copies = on(legacy, gpu, stream, "memcpy_htod")
    assert [(e["ts"], e["dur"], e["args"]["bytes"]) for e in copies] == [
        (us(step_start(i) + 6 * MS // 5), us(2 * MS // 5), "1048576") for i in range(n)]


def test_trace_viewer_launch_flows(synth, streaming, legacy):
    """XProf's trace viewer draws an arrow from each cudaLaunchKernel to
    the kernel it launched: both carry the correlation id, and the flow
    stats bind them (one bind_id, flow_out on the call, flow_in on the
    kernel, category gpu_launch)."""
    n, _, _ = synth
    procs, tids = threads(legacy)
    main = tids[(procs["/host:CPU"], "main (4242)")]
    calls = on(legacy, procs["/host:CPU"], main, "cudaLaunchKernel")
    assert [e["args"]["correlation_id"] for e in calls] == [str(i + 1) for i in range(n)]
    ends = collections.defaultdict(list)
    for e in streaming:
        if "bind_id" in e:
            side = "out" if e.get("flow_out") else "in" if e.get("flow_in") else "?"
            ends[e["bind_id"]].append((side, e["name"], e["ts"], e["cat"]))
    assert sorted(sorted(v) for v in ends.values()) == [
        [("in", "gemm_kernel", us(step_start(i) + 2 * MS), "gpu_launch"),
         ("out", "cudaLaunchKernel", us(step_start(i) + 3 * MS // 2), "gpu_launch")]
        for i in range(n)]


def flame(n, k):
    """The samples line's events, (name, begin, duration, samples): per
    stack frame, consecutive samples that share it make one event, each
    sample lasting up to the next one, the last one period; a gap of over
    1.5 periods ends every frame one period after the last sample."""
    samples = []
    for i in range(n):
        for j in range(k):
            leaf = "synth_hot_a" if j % 10 < 6 else "synth_hot_b" if j % 10 < 9 else "synth_hot_c"
            samples.append((step_start(i) + j * (10 * MS // k) + 1000, ["main", "synth_step", leaf]))
    frames, out, last = [], [], None

    def close(keep, end):
        while len(frames) > keep:
            name, begin, count = frames.pop()
            out.append((name, begin, end - begin, count))

    for ts, stack in samples:
        if frames and ts > last + SAMPLE_PERIOD + SAMPLE_PERIOD // 2:
            close(0, last + SAMPLE_PERIOD)
        common = 0
        while common < len(frames) and frames[common][0] == stack[common]:
            common += 1
        close(common, ts)
        for f in frames:
            f[2] += 1
        frames += [[name, ts, 1] for name in stack[common:]]
        last = ts
    close(0, last + SAMPLE_PERIOD)
    return sorted(out)


def test_trace_viewer_cpu_samples(synth, legacy):
    n, k, _ = synth
    procs, tids = threads(legacy)
    host = procs["/host:CPU"]
    tid = tids[(host, "main (4242) CPU samples")]
    got = sorted((e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000), int(e["args"]["samples"]))
                 for e in legacy if e.get("pid") == host and e.get("tid") == tid and e["ph"] == "X")
    assert got == flame(n, k)
    # Each sample counted once per frame: 60/30/10 over the leaves.
    per_leaf = collections.Counter()
    for name, _, _, count in got:
        per_leaf[name] += count
    assert per_leaf["main"] == per_leaf["synth_step"] == n * k
    assert per_leaf["synth_hot_a"] == n * sum(j % 10 < 6 for j in range(k))
    if n == 20 and k == 10:  # one event per leaf per step
        assert [(e[0], e[2]) for e in got if e[1] < step_start(1)] == [
            ("main", 200 * MS), ("synth_hot_a", 6 * MS), ("synth_hot_b", 3 * MS),
            ("synth_hot_c", 1 * MS), ("synth_step", 200 * MS)]


def test_trace_viewer_counters(synth, streaming):
    """Counters through the trace viewer the Profile tab uses."""
    n, _, _ = synth
    events = streaming
    procs, tids = threads(events)
    host, gpu = procs["/host:CPU"], procs["/device:GPU:0"]
    counters = {(e["pid"], e["name"]): e["entries"] for e in events if e["ph"] == "C"}
    assert counters == {
        (host, "cpu_sampler_hz"): [[0, 1000]],
        (host, "cpu_util"): [[us(step_start(i)), 50 + i % 50] for i in range(n)],
        (host, "host_mem_used"): [[us(step_start(i)), 1e9 + i * 4096] for i in range(n)],
        (gpu, "sm_active"): [[us(step_start(i)), 0.8] for i in range(n)],
    }
    # Everything else is drawn too, on the lines named as in the file.
    assert set(tids) == {(host, "main (4242)"), (host, "main (4242) CPU samples"),
                         (host, "loader (4243)"), (gpu, "Stream #7(Compute,Memcpy)")}
    drawn = collections.Counter(e["name"] for e in events if e["ph"] == "X")
    assert {name: drawn[name] for name in ("step", "forward", "load_batch", "cudaLaunchKernel",
                                           "gemm_kernel", "memcpy_htod")} == {
        "step": n + 1, "forward": n, "load_batch": n, "cudaLaunchKernel": n,
        "gemm_kernel": n, "memcpy_htod": n}


@pytest.mark.skipif(not HAVE_CPP, reason="the tests were built without a C++ compiler")
def test_cpp_frames_demangled(xspace_class, tmp_path_factory):
    """A C++ frame's event metadata is named by its symbol and shown
    demangled: XProf's trace viewer draws the demangled name, the mangled
    one as its long_name."""
    tmp = tmp_path_factory.mktemp("cpp")
    path = export(worker_session(tmp, steps=4, k=10, w=5), "xplane", tmp / "h.xplane.pb")
    host = xspace_class.FromString(path.read_bytes()).planes[0]
    metas = [m for m in host.event_metadata.values() if m.name == CPP_MANGLED]
    assert [m.display_name for m in metas] == [CPP_NAME]
    assert all(m.display_name == "" for m in host.event_metadata.values() if m.name != CPP_MANGLED)
    events = viewer(path, "trace_viewer", {}, tmp_path_factory)
    procs, tids = threads(events)
    tid = tids[(procs["/host:CPU"], f"worker ({WORKER}) CPU samples")]
    drawn = [e for e in events if e.get("tid") == tid and e.get("ph") == "X"]
    assert {e["name"] for e in drawn} == {CPP_NAME, "main"}
    assert {e["args"].get("long_name") for e in drawn if e["name"] == CPP_NAME} == {CPP_MANGLED}
    assert sum(int(e["args"]["samples"]) for e in drawn if e["name"] == CPP_NAME) == 4 * 5
