"""pprof export read back by the real reader, `go tool pprof`.

make-session writes a session whose CPU samples are known exactly: per
step K samples on 4242/4242 ("main"), 60% in synth_hot_a, 30% in
synth_hot_b, 10% in synth_hot_c, each called from synth_step called from
main, at 1000 Hz (1 ms of CPU each).  The profile must say so to the
sample: flat and cumulative shares, total CPU time, the pid/tid/comm
labels, the stacks' order (leaf first) and the profile's time and
duration (the window, wall clock)."""

import gzip
import re
import shutil
import subprocess

import pytest
from synth_session import (CPP_MANGLED, CPP_NAME, HAVE_CPP, PROTO_DIR, T0, MS, WALL_OFFSET, WORKER,
                           export, make_session, message_class, run, worker_session)


if shutil.which("go") is None:
    pytest.skip("go is not installed: the pprof export is checked with `go tool pprof` "
                "(Debian: apt-get install golang-go)", allow_module_level=True)


@pytest.fixture(scope="module", params=[(20, 10), (7, 20)], ids=["N20K10", "N7K20"])
def profile(request, tmp_path_factory):
    """(steps, samples per step, path of the exported profile)."""
    n, k = request.param
    tmp = tmp_path_factory.mktemp("pprof")
    session = make_session(tmp, "--steps", n, "--samples-per-step", k)
    return n, k, export(session, "pprof", tmp / "out.cpu.pb.gz")


def pprof(*args):
    return run("go", "tool", "pprof", *args)


def expected_flat(n, k):
    """ms of CPU in each leaf: j % 10 < 6 is synth_hot_a, < 9 synth_hot_b,
    else synth_hot_c (exact: the data is synthetic)."""
    leaf = ["synth_hot_a"] * 6 + ["synth_hot_b"] * 3 + ["synth_hot_c"]
    flat = {"synth_hot_a": 0, "synth_hot_b": 0, "synth_hot_c": 0}
    for j in range(k):
        flat[leaf[j % 10]] += n
    return flat


def top_rows(text):
    """name -> (flat ms, flat %, cum ms, cum %) from -top -unit=ms (0 has no unit)."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d.]+)(?:ms)?\s+([\d.]+)%\s+[\d.]+%\s+([\d.]+)(?:ms)?\s+"
                     r"([\d.]+)%\s+(\S+)$", line)
        if m:
            rows[m.group(5)] = tuple(float(g) for g in m.group(1, 2, 3, 4))
    return rows


def test_top_shares_and_total(profile):
    n, k, path = profile
    total = n * k  # ms: every sample is 1 ms of CPU at 1000 Hz
    out = pprof("-top", "-unit=ms", path)
    assert f"Total samples = {total}ms" in out, out
    assert "Type: cpu" in out, out
    rows = top_rows(out)
    assert set(rows) == {"synth_hot_a", "synth_hot_b", "synth_hot_c", "synth_step", "main"}, out
    for name, ms in expected_flat(n, k).items():
        assert rows[name][0] == ms and rows[name][2] == ms, (name, rows[name], out)
        assert rows[name][1] == pytest.approx(100.0 * ms / total, abs=0.01)
    for name in ("synth_step", "main"):
        assert rows[name] == (0, 0, total, 100.0), (name, rows[name], out)


def test_raw_samples_labels_and_period(profile):
    n, k, path = profile
    out = pprof("-raw", path)
    assert "PeriodType: cpu nanoseconds" in out, out
    assert re.search(r"^Period: 1000000$", out, re.M), out
    assert re.search(r"^samples/count cpu/nanoseconds$", out, re.M), out
    # Samples: "count cpu_ns: location ids", then their labels.
    samples = re.findall(r"^\s+(\d+)\s+(\d+): ([\d ]+)\n\s+comm:\[(\w+)\]\n\s+pid:\[(\d+)\] "
                         r"tid:\[(\d+)\]", out, re.M)
    assert len(samples) == 3, out  # one per leaf: same thread, same callers
    assert sum(int(s[0]) for s in samples) == n * k
    for count, cpu_ns, locs, comm, pid, tid in samples:
        assert int(cpu_ns) == int(count) * MS
        assert len(locs.split()) == 3  # synth_hot_*, synth_step, main
        assert (comm, pid, tid) == ("main", "4242", "4242")
    # One location per distinct frame, each named with its source file.
    locations = re.findall(r"^\s+\d+: 0x[0-9a-f]+ M=(\d+) (\w+) (\S+):(\d+) s=0$", out, re.M)
    names = sorted(loc[1] for loc in locations)
    assert names == sorted(["synth_hot_a", "synth_hot_b", "synth_hot_c", "synth_step", "main"])
    assert {loc[2].rsplit("/", 1)[-1] for loc in locations} == {"synth.c", "make_session.c"}
    assert all(int(loc[3]) > 0 for loc in locations), out
    assert re.search(r"^1: 0x0/0x0/0x0 make-session\s+\[FN\]$", out, re.M), out


def test_stacks_leaf_first(profile):
    n, k, path = profile
    out = pprof("-traces", "-unit=ms", path)
    blocks = out.split("-----------+-------------------------------------------------------\n")[1:]
    weights = {}
    for block in blocks:
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue  # after the last separator
        labels = dict(re.match(r"^\s+(\w+):\s+(\S+)$", line).groups() for line in lines if ":" in line)
        assert labels == {"comm": "main", "pid": "4242", "tid": "4242"}, block
        frames = [re.match(r"^\s+(?:([\d.]+)ms\s+)?(\w+)$", line) for line in lines if ":" not in line]
        assert all(frames), block
        names = [f.group(2) for f in frames]
        assert names[1:] == ["synth_step", "main"], block
        weights[names[0]] = float(frames[0].group(1))
    assert weights == expected_flat(n, k), out


def test_labels_select_threads(profile):
    n, k, path = profile
    tags = pprof("-tags", path)
    assert re.search(r"comm: Total [\d.]+m?s\n\s+[\d.]+m?s \(\s*100%\): main", tags), tags
    assert re.search(r"pid: Total .*\n\s+.*\(\s*100%\): 4242", tags), tags
    assert re.search(r"tid: Total .*\n\s+.*\(\s*100%\): 4242", tags), tags
    assert f"Total samples = {n * k}ms" in pprof("-top", "-unit=ms", "-tagfocus=comm=main", path)
    # No sample is on the loader thread.
    other = pprof("-top", "-tagfocus=tid=4243", path)
    assert "Showing nodes accounting for 0, 0% of" in other, other


def test_header_fields(profile):
    """time_nanos, duration_nanos and string_table[0], read with protoc
    against our schema (the upstream numbers)."""
    n, _, path = profile
    if shutil.which("protoc") is None:
        pytest.skip("protoc is not installed (Debian: protobuf-compiler)")
    out = subprocess.run(["protoc", f"--proto_path={PROTO_DIR}", "--decode=perftools.profiles.Profile",
                          str(PROTO_DIR / "profile.proto")], input=gzip.decompress(path.read_bytes()),
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert re.search(r'^string_table: ""$', text, re.M), text
    assert text.index('string_table: ""') < text.index("string_table: \"samples\""), text
    assert f"time_nanos: {WALL_OFFSET + T0}\n" in text, text
    assert f"duration_nanos: {2 * MS + n * 10 * MS + 3 * MS}\n" in text, text
    assert "period: 1000000\n" in text, text


@pytest.mark.skipif(not HAVE_CPP, reason="the tests were built without a C++ compiler")
def test_cpp_functions_named_and_system_named(tmp_path):
    """Function.name is the demangled C++ name, system_name the symbol:
    what go tool pprof shows (it demangles only a name equal to its
    system_name) is ours."""
    path = export(worker_session(tmp_path, steps=4, k=10, w=5), "pprof", tmp_path / "p.pb.gz")
    prof = message_class(tmp_path, "profile.proto", "perftools.profiles.Profile").FromString(
        gzip.decompress(path.read_bytes()))
    names = {(prof.string_table[f.name], prof.string_table[f.system_name]) for f in prof.function}
    assert (CPP_NAME, CPP_MANGLED) in names
    assert ("main", "main") in names and ("synth_hot_a", "synth_hot_a") in names
    top = pprof("-top", "-unit=ms", f"-tagfocus=pid={WORKER}", path)
    assert re.search(r"^\s+20ms\s+[\d.]+%\s+[\d.]+%\s+20ms\s+[\d.]+%\s+" + re.escape(CPP_NAME) +
                     "$", top, re.M), top
    assert re.search(re.escape(CPP_NAME) + r" \S+synth_cpp\.cpp:\d+ s=0\(" + CPP_MANGLED + r"\)",
                     pprof("-raw", path)), "the -raw listing names the function and its symbol"
