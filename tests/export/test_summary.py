"""The summary and the exports narrowed to one job (--pid, --comm), and the
summary's warning for stacks cut short, on sessions make-session writes
with a worker process (see tests/export/make_session.c): per step, the
trainer (4242) has K samples of three frames, the worker (4244) W
samples of two frames, in a C++ function called from main.  Read back by
go tool pprof and Python's json; the summary as text."""

import json
import re
import shutil
import subprocess

import pytest
from synth_session import CLI, CPP_NAME, HAVE_CPP, WORKER, export, make_session, run, worker_session

TRAINER = 4242
N, K, W = 4, 10, 5


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return worker_session(tmp_path_factory.mktemp("summary"), steps=N, k=K, w=W)


def summary(session, *args):
    return run(CLI, "summary", session, *args)


def processes(text):
    """pid -> samples of the summary's process table."""
    table = text.split("\nprocess ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return {int(line[16:].split()[0]): int(line[16:].split()[1]) for line in table}


def total_samples(text):
    return int(re.search(r"(\d+) CPU samples", text).group(1))


def test_summary_unfiltered_names_both(session):
    out = summary(session)
    assert "filter" not in out
    assert processes(out) == {TRAINER: N * K, WORKER: N * W}, out
    assert total_samples(out) == N * (K + W)


@pytest.mark.parametrize("args", [("--pid", str(WORKER)), ("--comm", "worker"),
                                  ("--pid", f"99999,{WORKER}"), ("--comm", "nobody", "--comm", "worker")],
                         ids=["pid", "comm", "pid-list", "comm-repeated"])
def test_summary_one_job(session, args):
    out = summary(session, *args)
    listed = re.search(r"^filter     .*: only the events of process ([\d, ]+) \(", out, re.M)
    assert listed and str(WORKER) in listed.group(1).split(", "), out
    assert processes(out) == {WORKER: N * W}, out
    assert total_samples(out) == N * W
    # Its ranges only: the worker's jobs, none of the trainer's steps.
    assert re.search(r"^job\s+4\s", out, re.M) and not re.search(r"^(step|forward)\s", out, re.M), out
    if HAVE_CPP:
        assert re.search(r"^\s+100\.00\s+100\.00\s+20\s+20\s+" + re.escape(CPP_NAME), out, re.M), out
    # Host-wide counters stay.
    assert re.search(r"^cpu_util\s+4\s", out, re.M), out


def test_summary_pid_and_comm_together(session):
    out = summary(session, "--pid", str(TRAINER), "--comm", "worker")
    assert f"filter     pid {TRAINER}, comm worker: only the events of process {TRAINER}, {WORKER} " in out
    assert processes(out) == {TRAINER: N * K, WORKER: N * W}


def test_summary_filter_matching_nothing(session):
    out = summary(session, "--comm", "nobody")
    assert "filter     comm nobody: no process of the session matches" in out
    assert total_samples(out) == 0 and "\nprocess " not in out


@pytest.mark.parametrize("args", [("--pid", "x"), ("--pid", "1,,2"), ("--pid", "-3"),
                                  ("--comm", "")])
def test_bad_filter_is_a_usage_error(session, args):
    p = subprocess.run([str(CLI), "summary", str(session), *args], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 2 and args[0] in p.stderr and p.stdout == "", p


def test_filtered_export_needs_its_own_path(session):
    """Without -o a filtered export would replace the session's whole ones."""
    before = sorted(p.name for p in session.iterdir())
    p = subprocess.run([str(CLI), "export", str(session), "--pid", str(WORKER)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "give -o PATH" in p.stderr, p
    assert sorted(p.name for p in session.iterdir()) == before


def test_export_summary_file_says_its_filter(session, tmp_path):
    out = export(session, "summary", tmp_path / "s.txt", "--pid", str(TRAINER)).read_text()
    assert f"filter     pid {TRAINER}: only the events of process {TRAINER} " in out
    assert processes(out) == {TRAINER: N * K}


def test_json_one_job(session, tmp_path):
    doc = json.loads(export(session, "json", tmp_path / "j.json", "--comm", "worker").read_text())
    assert {s["pid"] for s in doc["cpu_samples"]} == {WORKER} and len(doc["cpu_samples"]) == N * W
    assert {(e["name"], e["process_id"]) for e in doc["trace_events"]} == {("job", WORKER)}
    assert {c["name"] for c in doc["counters"]} >= {"cpu_util", "host_mem_used"}


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
@pytest.mark.parametrize("pid,want", [(TRAINER, N * K), (WORKER, N * W)])
def test_pprof_one_job(session, tmp_path, pid, want):
    path = export(session, "pprof", tmp_path / "p.pb.gz", "--pid", str(pid))
    assert f"Total samples = {want}ms" in run("go", "tool", "pprof", "-top", "-unit=ms", path)
    raw = run("go", "tool", "pprof", "-raw", path)
    pids = re.findall(r"pid:\[(\d+)\]", raw)
    assert pids and set(pids) == {str(pid)}, raw


def test_truncated_stacks_warned_per_process(session):
    out = summary(session)
    warnings = re.findall(r"^warning: the stacks of (\S+) \(pid (\d+)\) look cut short: "
                          r"(\d+)% of its (\d+) samples have at most 2 user frames, the outermost "
                          r"mostly in make-session, likely built without frame pointers", out, re.M)
    # The worker's two-frame stacks, not the trainer's three-frame ones.
    assert warnings == [("worker", str(WORKER), "100", str(N * W))], out
    assert "-fno-omit-frame-pointer" in out and "stack_copy" in out
    # Narrowed to the trainer, no warning.
    assert "warning:" not in summary(session, "--pid", str(TRAINER))


def test_few_samples_are_no_warning(tmp_path):
    """Under 20 samples say nothing about a process's stacks."""
    out = summary(worker_session(tmp_path, steps=3, k=K, w=W))  # 15 worker samples
    assert processes(out)[WORKER] == 15 and "warning:" not in out, out


def test_summary_gpu_activity(session):
    """make-session's gpu0: per step one 1.5 ms gemm_kernel and one 0.4 ms
    1 MiB memcpy_htod: busy % over the covered window, the kernel table,
    copies with bytes and bandwidth."""
    out = summary(session)
    window_ms = float(re.search(r"^covered    \S+ \+ (\d+)ms$", out, re.M).group(1))
    busy = re.search(r"^gpu0\s+(\d+\.\d+)\s+(\d+)\s+(\d+\.\d+)$", out, re.M)
    assert busy, out
    assert float(busy.group(1)) == pytest.approx(100 * N * 1.5 / window_ms, abs=0.01)
    assert int(busy.group(2)) == N and float(busy.group(3)) == pytest.approx(N * 1.5)
    kernel = re.search(r"^gemm_kernel\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
                       out, re.M)
    assert kernel, out
    assert int(kernel.group(1)) == N
    assert [float(x) for x in kernel.groups()[1:]] == pytest.approx(
        [N * 1.5, 1.5, 1.5, 1.5, 1.5], rel=0.02)
    copy = re.search(r"^memcpy_htod\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert copy, out
    assert int(copy.group(1)) == N and float(copy.group(2)) == pytest.approx(N)
    assert float(copy.group(3)) == pytest.approx(N * 0.4)
    assert float(copy.group(4)) == pytest.approx((1 << 20) / 0.4e6, rel=0.01)
