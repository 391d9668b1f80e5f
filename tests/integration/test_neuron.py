"""The Neuron collector (collectors/neuron, docs/neuron.md) against the
stand-in libnrt (tests/neuron): the runtime's API calls and its system
trace land in the ncN rings of a real ringprofd, with the right core,
names and durations, read back from a snapshot by `ringprof export`."""

import json
import os
import subprocess

import pytest

from conftest import CONFIG
from daemon_harness import BUILD, SANITIZED, Daemon, dump

TESTS = os.path.join(BUILD, "tests", "neuron")
LIB = os.environ.get("RINGPROF_NEURON_LIB",
                     os.path.join(BUILD, "collectors", "neuron", "libringprof-neuron.so"))
APP_LINKED = os.environ.get("RINGPROF_NEURON_APP_LINKED", os.path.join(TESTS, "neuron-app-linked"))
APP_DLOPEN = os.environ.get("RINGPROF_NEURON_APP_DLOPEN", os.path.join(TESTS, "neuron-app-dlopen"))
FAKE_NRT = os.environ.get("RINGPROF_FAKE_NRT", os.path.join(TESTS, "libnrt.so.1"))
FAKE_NRT_NOTRACE = os.environ.get("RINGPROF_FAKE_NRT_NOTRACE",
                                  os.path.join(TESTS, "notrace", "libnrt.so.1"))

# What each stand-in call takes (tests/neuron/fake_nrt.h), by name.
NOMINAL_NS = {"nrt_init": 3000000, "nrt_close": 1000000, "nrt_load": 4000000,
              "nrt_unload": 1000000, "nrt_execute": 2000000, "nrt_execute_repeat": 4000000,
              "nrt_build_global_comm": 1500000, "nrt_tensor_read": 500000,
              "nrt_tensor_write": 500000}


def run_app(d, argv, how="LD_PRELOAD", env_extra=None):
    # The stand-in with the trace unless the test says otherwise (meson's
    # LD_LIBRARY_PATH may name the one without first).
    env = dict(d.env() if d else os.environ)
    env["LD_LIBRARY_PATH"] = os.path.dirname(FAKE_NRT)
    env.update(env_extra or {})
    # After what is there (a sanitized build's runtime must come first).
    env[how] = ":".join(filter(None, [env.get(how), LIB]))
    env["RINGPROF_NEURON_TRACE_MS"] = "20"
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()], out.stderr


def snapshot(d, name):
    """The last minute as session name; its directory."""
    r = d.cli("snapshot", "--last", "60s", "--name", name, "--json", check=True)
    return json.loads(r.stdout)["path"]


def export_json(d, tmp_path, name):
    """Session name's events, as `ringprof export --format json` writes them."""
    out = tmp_path / (name + ".json")
    d.cli("export", name, "--format", "json", "-o", str(out), check=True)
    return json.load(open(out))["trace_events"]


def exported(d, tmp_path, name):
    snapshot(d, name)
    return export_json(d, tmp_path, name)


def ring_of(core):
    return "host" if core < 0 else "nc%d" % core


def check_calls(calls, events):
    """Every call the program made is one api_call event in its core's
    ring, named with its status, lasting at least the stand-in's time and
    at most what the program saw around it."""
    api = [e for e in events if e["type"] == "api_call"]
    assert len(api) == len(calls), (len(api), len(calls))
    by_key = {}
    for e in sorted(api, key=lambda e: e["timestamp"]):
        by_key.setdefault((e["name"].split()[0], e["device"]), []).append(e)
    for c in calls:
        e = by_key[(c["call"], ring_of(c["core"]))].pop(0)
        if c["status"] >= 0:
            assert e["name"].endswith(" status=%d" % c["status"]), (e, c)
        nominal = NOMINAL_NS.get(c["call"], 0)
        if c["status"] == 0:
            assert nominal <= e["duration"] <= c["outer_ns"], (e, c)
        assert e["args"]["device_index"] == (c["core"] if c["core"] >= 0 else 2**32 - 1)
    return api


def check_model_and_tensor_names(api, cores):
    for core in cores:
        ring = [e["name"] for e in api if e["device"] == "nc%d" % core]
        load = next(n for n in ring if n.startswith("nrt_load "))
        model = load.split()[1]
        assert model.startswith("model=") and "neff_bytes=%d" % (1024 + core) in load
        assert sum(n == "nrt_execute %s status=0" % model for n in ring) == 3, ring
        assert "nrt_execute_repeat %s repeat=2 status=0" % model in ring
        assert "nrt_tensor_allocate tensor=input%d size=4096 status=0" % core in ring
        assert "nrt_tensor_write tensor=input%d size=4096 status=0" % core in ring
        # A runtime error is recorded with its status (NRT_INVALID).
        assert "nrt_tensor_read tensor=input%d size=8192 status=2" % core in ring
        assert "nrt_unload %s status=0" % model in ring


def check_sys_trace(events, cores):
    """The stand-in's trace: per core 5 executions (3 + a repeat of 2), a
    write and a read of the tensor, on the core's ring, in host time."""
    dev = [e for e in events if e["type"] != "api_call"]
    for core in cores:
        mine = [e for e in dev if e["device"] == "nc%d" % core]
        assert sum(e["name"] == "nc_exec" for e in mine) == 5, sorted({(e["type"], e["device"], e["name"]) for e in events})
        assert sum(e["name"] == "dma_h2d tensor=input%d" % core for e in mine) == 1
        assert sum(e["name"] == "dma_d2h tensor=input%d" % core for e in mine) == 1
        assert all(e["duration"] in (2000000, 500000) for e in mine)
        api = [e for e in events if e["type"] == "api_call" and e["device"] == "nc%d" % core]
        execs = [e for e in api if e["name"].startswith("nrt_execute ")]
        # Each traced execution lies inside an nrt_execute call's span.
        first = min(e["timestamp"] for e in execs)
        assert any(first <= e["timestamp"] <= first + 3000000
                   for e in mine if e["name"] == "nc_exec"), (execs, mine)


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path, config=CONFIG).start()
    yield d
    d.stop()


def test_linked_program_calls_and_trace_land_on_their_core(daemon, tmp_path):
    calls, _ = run_app(daemon, [APP_LINKED, "once"])
    events = exported(daemon, tmp_path, "neuron_linked")
    api = check_calls(calls, events)
    check_model_and_tensor_names(api, [0])
    check_sys_trace(events, [0])


@pytest.mark.skipif(SANITIZED, reason="an LD_AUDIT module is loaded before LD_PRELOAD, so the "
                    "sanitized collector cannot have the ASan runtime first: checked in the normal pass")
def test_dlopen_program_through_ld_audit(daemon, tmp_path):
    calls, _ = run_app(daemon, [APP_DLOPEN, FAKE_NRT], how="LD_AUDIT")
    events = exported(daemon, tmp_path, "neuron_dlopen")
    api = check_calls(calls, events)
    check_model_and_tensor_names(api, [0])
    check_sys_trace(events, [0])


@pytest.fixture(scope="module")
def two_cores(tmp_path_factory):
    """Two models on two cores from two threads, as session neuron_threads
    of a daemon of its own: (daemon, the calls the program made, the
    session's events as `ringprof export` wrote them, its directory)."""
    tmp = tmp_path_factory.mktemp("neuron_threads")
    d = Daemon(tmp, config=CONFIG).start()
    try:
        calls, _ = run_app(d, [APP_LINKED, "threads"])
        path = snapshot(d, "neuron_threads")
        yield d, calls, export_json(d, tmp, "neuron_threads"), path
    finally:
        d.stop()


def test_two_models_on_two_cores_from_two_threads(two_cores):
    """Each thread's calls on its core, and the call each makes from a
    thread-exit destructor that runs after the collector closed the
    thread's rings (check_calls: every call the program made is there)."""
    daemon, calls, events, _ = two_cores
    api = check_calls(calls, events)
    check_model_and_tensor_names(api, [0, 1])
    check_sys_trace(events, [0, 1])
    # The model ids differ: each core's executions name its own.
    models = {e["device"]: e["name"].split()[1] for e in api
              if e["name"].startswith("nrt_execute ")}
    assert models["nc0"] != models["nc1"]
    # The summary, per NeuronCore: busy share, each call and activity
    # with its count.
    out = daemon.cli("summary", "neuron_threads", check=True).stdout
    rows = {tuple(line.split()[:4]) for line in out.splitlines()}
    for core in (0, 1):
        busy = [line.split()[1] for line in out.splitlines()
                if line.startswith("nc%d " % core) and "%" in line]
        assert busy and all(b.endswith("%") and float(b[:-1]) > 0 for b in busy), out
        assert ("nc%d" % core, busy[0], "nrt_execute", "3") in rows, out
        assert ("nc%d" % core, busy[0], "nc_exec", "5") in rows, out


def device_table(summary):
    """`ringprof summary`'s table of device rings: {device: (events,
    dropped, lost, what it is)}."""
    lines = summary.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:5] ==
                 ["device", "events", "dropped", "lost", "is"])
    table = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        device, events, dropped, lost, what = line.split(None, 4)
        table[device] = (int(events), int(dropped), int(lost), what)
    return table


def test_summary_lists_each_neuron_core_ring(two_cores):
    """The summary's device table has a row per NeuronCore the program
    used, a neuron_core with its index, holding what the session's chunk
    files hold for it (read back by session-dump): the core's API calls
    and its system-trace events among them."""
    daemon, calls, _, path = two_cores
    out = daemon.cli("summary", "neuron_threads", check=True).stdout
    table = device_table(out)
    # Their activity is in the device table, not counted as GPUs'.
    assert not any(line.split()[:2] == ["gpu", "busy"] for line in out.splitlines()), out
    assert sorted(d for d in table if d.startswith("nc")) == ["nc0", "nc1"], table
    assert table["host"][3] == "host", table
    held = dump(path, all_events=True)
    for core in (0, 1):
        ring = "nc%d" % core
        events, dropped, lost, what = table[ring]
        assert what == "neuron_core %d" % core, table
        assert (dropped, lost) == (0, 0), table
        mine = [e for e in held if e["device"] == ring]
        assert events == len(mine), (table, ring, len(mine))
        assert sum(e["kind"] == "api_call" for e in mine) == \
            sum(c["core"] == core for c in calls), (ring, calls)
        # 5 executions and 2 tensor copies in the stand-in's trace.
        assert sum(e["kind"] == "gpu_activity" for e in mine) == 7, mine


def test_tensor_table_after_more_tensors_than_it_holds(daemon, tmp_path):
    """6000 tensors allocated on core 1 and freed, more than the
    collector's handle table holds: those it took are freed on nc1 with
    their name, the rest on the host ring without; the model that follows
    on core 0 still has its tensor's core and name."""
    calls, _ = run_app(daemon, [APP_LINKED, "churn"])
    events = exported(daemon, tmp_path, "neuron_churn")
    def churned(e):
        return e["type"] == "api_call" and (e["device"] == "nc1" or e["name"] == "nrt_tensor_free")
    churn = [e for e in events if churned(e)]
    rest = [e for e in events if not churned(e)]
    api = check_calls(calls, rest)
    check_model_and_tensor_names(api, [0])
    allocs = [e for e in churn if e["name"].startswith("nrt_tensor_allocate tensor=churn ")]
    assert len(allocs) == 6000 and all(e["device"] == "nc1" for e in allocs)
    named = [e for e in churn if e["name"] == "nrt_tensor_free tensor=churn"]
    assert all(e["device"] == "nc1" for e in named)
    assert 2048 <= len(named) <= 4096, len(named)
    assert sum(e["name"] == "nrt_tensor_free" and e["device"] == "host"
               for e in churn) == 6000 - len(named)
    # A 299-byte tensor name: the event name stops at 255 bytes, with no
    # number cut short after it; the table keeps its first 47 bytes.
    long = [e["name"] for e in churn if "tensor=xx" in e["name"]]
    assert long == ["nrt_tensor_allocate tensor=" + "x" * (255 - 27),
                    "nrt_tensor_free tensor=" + "x" * 47], long


def test_child_of_fork_gets_rings_of_its_own(daemon, tmp_path):
    """A child of fork() that calls the runtime (allocates, writes, frees,
    closes it) records its calls under its own pid, and does not write
    into its parent's rings: every call of the parent, before the fork and
    after it, is there under the parent's pid; the child's nrt_close does
    not wait for a trace thread it does not have."""
    calls, _ = run_app(daemon, [APP_LINKED, "fork"])
    events = exported(daemon, tmp_path, "neuron_fork")
    parent = calls[0]["pid"]
    child = {c["pid"] for c in calls} - {parent}
    assert len(child) == 1, calls
    for pid in (parent, *child):
        mine = [e for e in events if e.get("process_id") == pid]
        check_calls([c for c in calls if c["pid"] == pid], mine)
    names = [e["name"] for e in events if e["type"] == "api_call" and e["device"] == "nc0" and
             e["process_id"] in child]
    assert "nrt_tensor_write tensor=child size=256 status=0" in names, names


def test_runtime_without_trace_functions(daemon, tmp_path):
    calls, _ = run_app(daemon, [APP_LINKED, "once"],
                       env_extra={"LD_LIBRARY_PATH": os.path.dirname(FAKE_NRT_NOTRACE)})
    events = exported(daemon, tmp_path, "neuron_notrace")
    check_calls(calls, events)
    assert not [e for e in events if e["type"] != "api_call" and e["device"].startswith("nc")]


def test_malformed_trace_json_costs_only_the_trace(daemon, tmp_path):
    calls, err = run_app(daemon, [APP_LINKED, "once"], env_extra={"FAKE_NRT_TRACE_JSON": "malformed"})
    assert "Neuron system trace is not JSON" in err
    events = exported(daemon, tmp_path, "neuron_malformed")
    check_calls(calls, events)


def test_no_daemon_changes_nothing(tmp_path):
    env = {"RINGPROF_SOCKET": str(tmp_path / "no-daemon.sock")}
    calls, err = run_app(None, [APP_LINKED, "threads"], env_extra=env)
    bare = subprocess.run([APP_LINKED, "threads"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(FAKE_NRT), **env))
    strip = [(c["call"], c["core"], c["status"]) for c in calls]
    assert strip == [(c["call"], c["core"], c["status"])
                     for c in map(json.loads, bare.stdout.splitlines())] or \
        sorted(strip) == sorted((c["call"], c["core"], c["status"])
                                for c in map(json.loads, bare.stdout.splitlines()))
    # nrt_init, the first nrt_build_global_comm, 11 calls a model and one
    # at each thread's exit, nrt_close.
    assert len(calls) == 2 + 2 * (11 + 1) + 1


def test_ringprof_run_preloads_the_collector(daemon, tmp_path):
    """`ringprof run` preloads the collector (RINGPROF_NEURON_LIB: this
    build's) and the session it makes holds the workload's calls."""
    env = dict(os.environ, RINGPROF_NEURON_LIB=LIB, LD_LIBRARY_PATH=os.path.dirname(FAKE_NRT))
    assert LIB not in env.get("LD_PRELOAD", "")
    r = subprocess.run([os.environ.get("RINGPROF_CLI", os.path.join(BUILD, "cli", "ringprof")),
                        "--socket", daemon.socket, "run", "--name", "neuron_run", "--",
                        APP_LINKED, "once"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    calls = [json.loads(line) for line in r.stdout.splitlines()]
    out = tmp_path / "run.json"
    daemon.cli("export", "neuron_run", "--format", "json", "-o", str(out), check=True)
    check_calls(calls, json.load(open(out))["trace_events"])
