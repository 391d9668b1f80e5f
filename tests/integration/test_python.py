"""The Python package against the real daemon: annotations reach its rings
and come back out of sessions, session calls and their errors, and a
daemon restart under a running program.  The restart test is last: the
others share this process's connection to the daemon."""

import datetime
import errno
import gc
import inspect
import os
import pathlib
import pickle
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref

import pytest

import ringprof
from conftest import ROOT, events, host_events, ranges
from daemon_harness import Daemon
from pypackage import build


def settle():
    """Room between tests' windows: chunks are filtered by timestamp."""
    time.sleep(0.05)


def test_annotations_reach_a_snapshot(ringprofd):
    settle()
    for i in range(100):
        with ringprof.annotate("py.block"):
            ringprof.instant("py.tick")
            ringprof.counter("py.loss", i / 2)
    assert ringprof.connected()
    s = ringprof.snapshot(last="5s", reason="test_annotations_reach_a_snapshot")
    assert s["kind"] == "snapshot" and s["state"] == "complete"
    assert s["trigger"]["source"] == "python"
    assert host_events(s) > 0

    evs = events(s, pid=os.getpid())
    done, _ = ranges(evs)
    assert done["py.block"] == 100
    assert [e["name"] for e in evs if e["kind"] == "instant"].count("py.tick") == 100
    losses = [e["value"] for e in evs if e["kind"] == "counter" and e["name"] == "py.loss"]
    assert losses == [i / 2 for i in range(100)]
    assert {e["tid"] for e in evs if e.get("name") == "py.tick"} == {threading.get_native_id()}
    assert ringprof.dropped() == 0


@ringprof.annotate
def bare():
    return "bare"


@ringprof.annotate()
def empty_parens():
    return "empty"


@ringprof.annotate("py.custom")
def named(x, *, y):
    return x + y


class Model:
    @ringprof.annotate
    def forward(self):
        with ringprof.annotate("py.inner"):
            return bare()


@ringprof.annotate
def fails():
    raise KeyError("inside a range")


def test_decorator_and_context_manager_forms(ringprofd):
    settle()
    assert bare() == "bare" and bare.__name__ == "bare"
    assert empty_parens() == "empty"
    assert named(1, y=2) == 3
    assert Model().forward() == "bare"
    with pytest.raises(KeyError):
        fails()
    reused = ringprof.annotate("py.reused")
    with reused:
        with reused:
            pass
    with pytest.raises(TypeError, match="needs a name"):
        with ringprof.annotate():
            pass
    with pytest.raises(TypeError):
        ringprof.annotate(42)
    s = ringprof.snapshot(last=2.0)

    done, _ = ranges(events(s, pid=os.getpid()))
    assert done["bare"] == 2
    assert done["empty_parens"] == 1
    assert done["py.custom"] == 1
    assert done["Model.forward"] == 1
    assert done["py.inner"] == 1
    assert done["fails"] == 1
    assert done["py.reused"] == 2


def test_trace_records_a_session_covering_the_block(ringprofd):
    settle()
    before = time.monotonic_ns()
    with ringprof.trace(name="py-trace", reason="test") as t:
        assert t.id == "py-trace" and t.session is None
        inside = time.monotonic_ns()
        with ringprof.annotate("py.traced"):
            time.sleep(0.2)
    after = time.monotonic_ns()
    s = t.session
    assert s["id"] == "py-trace"
    assert s["kind"] == "session" and s["state"] == "complete"
    assert before <= s["requested"]["start_ns"] <= inside
    assert inside + 200_000_000 <= s["requested"]["end_ns"] <= after
    assert os.path.isdir(s["path"])
    done, _ = ranges(events(s, pid=os.getpid()))
    assert done["py.traced"] == 1

    # Stopped even when the block fails.
    with pytest.raises(RuntimeError):
        with ringprof.trace() as t:
            raise RuntimeError("in the traced block")
    assert t.session["state"] == "complete"


def test_start_and_stop_session(ringprofd):
    sid = ringprof.start_session(name="py-manual", run="py-run")
    assert sid == "py-manual"
    assert sid in ringprof.status()["open_sessions"]
    with ringprof.annotate("py.manual"):
        pass
    s = ringprof.stop_session(sid)
    assert s["run"] == "py-run" and s["state"] == "complete"
    assert f"{os.sep}py-run{os.sep}plugins{os.sep}profile{os.sep}py-manual" in s["path"]
    with pytest.raises(ringprof.RingprofError) as e:
        ringprof.stop_session(sid)
    assert e.value.status == 409


def test_snapshot_window_in_the_past(ringprofd):
    settle()
    with ringprof.annotate("py.before"):
        time.sleep(0.01)
    time.sleep(0.2)
    end_wall = time.time_ns()
    time.sleep(0.2)
    with ringprof.annotate("py.after"):
        pass
    time.sleep(0.05)

    for end in (end_wall, datetime.datetime.fromtimestamp(end_wall / 1e9),
                datetime.datetime.fromtimestamp(end_wall / 1e9, datetime.timezone.utc)
                .isoformat().replace("+00:00", "Z")):
        s = ringprof.snapshot(last="300ms", end=end)
        req = s["requested"]
        # datetime keeps microseconds only.
        assert abs(req["end_wall_ns"] - end_wall) < 1000
        assert req["end_ns"] - req["start_ns"] == 300_000_000
        done, _ = ranges(events(s, pid=os.getpid()))
        assert done["py.before"] == 1
        assert done["py.after"] == 0

    for last, ns in ((0.25, 250_000_000), ("250ms", 250_000_000),
                     (datetime.timedelta(milliseconds=250), 250_000_000), (1, 10**9)):
        s = ringprof.snapshot(last=last)
        assert s["requested"]["end_ns"] - s["requested"]["start_ns"] == ns


def test_bad_input_raises_with_the_daemons_message(ringprofd):
    with pytest.raises(ringprof.RingprofError, match="negative") as e:
        ringprof.snapshot(last=-5)
    assert e.value.status == 400
    with pytest.raises(ringprof.RingprofError, match="negative"):
        ringprof.snapshot(last="-5s")
    with pytest.raises(ringprof.RingprofError, match="future"):
        ringprof.snapshot(end=time.time_ns() + 60 * 10**9)
    with pytest.raises(ringprof.RingprofError) as e:
        ringprof.stop_session("no_such_session")
    assert e.value.status == 404
    with pytest.raises(ringprof.RingprofError) as e:
        ringprof.start_session(name="not a/name")
    assert e.value.status == 400
    with pytest.raises(TypeError):
        ringprof.snapshot(last=True)
    with pytest.raises(TypeError):
        ringprof.snapshot(end=1.5)


def test_status(ringprofd):
    st = ringprof.status()
    assert st["version"] == "0.1.0"
    assert st["pid"] == ringprofd.proc.pid
    host = next(r for r in st["rings"] if r["device"] == "host")
    assert host["producers"] >= 1


def run_python(code, pythonpath=None, **env):
    """Runs code in a fresh interpreter, with the package the tests use."""
    path = pythonpath or str(pathlib.Path(ringprof.__file__).parents[1])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": path, **env})


def test_without_a_daemon_annotations_are_no_ops():
    code = """if True:
        import time, ringprof
        t = time.perf_counter()
        for _ in range(100000):
            with ringprof.annotate("x"):
                pass
        per = (time.perf_counter() - t) / 200000 * 1e9
        print(f"{per:.0f} ns per Python annotation without a daemon", ringprof.connected())
        try:
            ringprof.snapshot()
        except ringprof.RingprofError as e:
            print(e)
    """
    out = run_python(code, RINGPROF_SOCKET="/nonexistent/ringprofd.sock")
    assert out.returncode == 0, out.stderr
    # No daemon is the harmless case: not even the refusal warning.
    assert out.stderr == ""
    timing, error = out.stdout.splitlines()
    print(timing)
    assert timing.endswith(" False")
    assert "cannot reach ringprofd at /nonexistent/ringprofd.sock" in error


def test_the_source_tree_without_its_native_part_says_how_to_install(tmp_path):
    # The sources alone: python/ may hold a module of `pip install -e`.
    shutil.copytree(ROOT / "python" / "ringprof", tmp_path / "ringprof",
                    ignore=shutil.ignore_patterns("*.so"))
    out = run_python("import ringprof", pythonpath=str(tmp_path))
    assert out.returncode != 0
    assert "ringprof's native part is missing" in out.stderr
    assert "pip install ./python" in out.stderr


def test_the_native_part_exports_nothing_but_its_init():
    """libringprof's code is compiled into the module with hidden
    visibility: it cannot clash with another copy in the process."""
    out = subprocess.run(["nm", "-D", "--defined-only", ringprof._ringprof.__file__],
                         capture_output=True, text=True, check=True)
    assert [line.split()[-1] for line in out.stdout.splitlines()] == ["PyInit__ringprof"]


def test_annotate_objects():
    a = ringprof.annotate(name="py.kw")
    assert a.name == "py.kw" and repr(a) == "ringprof.annotate('py.kw')"
    assert ringprof.annotate().name is None
    assert isinstance(ringprof.annotate("x"), ringprof.annotate)
    with a as entered:
        assert entered is a
    with pytest.raises(KeyError):  # __exit__ lets exceptions through
        with ringprof.annotate("py.raises"):
            raise KeyError("inside a range")
    with pytest.raises(TypeError, match="is a str, not bytes"):
        ringprof.annotate(b"bytes")
    with pytest.raises(TypeError):
        ringprof.annotate("x", "y")
    with pytest.raises(TypeError):
        ringprof.annotate(nom="x")
    with pytest.raises(TypeError, match="is a str, not int"):
        ringprof.instant(1)
    with pytest.raises(TypeError):
        ringprof.counter("x", "not a number")
    with pytest.raises(TypeError):
        ringprof.counter("x")
    assert named.__wrapped__.__name__ == "named" and named.__qualname__ == "named"
    assert str(inspect.signature(named)) == "(x, *, y)"
    assert "ringprof.annotate('py.custom') of <function named" in repr(named)
    # Pickled by reference, as functions are (multiprocessing, ...).
    assert pickle.loads(pickle.dumps(named)) is named
    assert pickle.loads(pickle.dumps(Model.forward)) is Model.forward
    assert type.__call__(ringprof.annotate, "py.tuple").name == "py.tuple"
    # A decorated function that refers to itself is a cycle the GC frees.
    @ringprof.annotate
    def cyclic():
        return cyclic
    ref = weakref.ref(cyclic)
    del cyclic
    gc.collect()
    assert ref() is None


class Methods:
    @ringprof.annotate
    def method(self, x):
        return (self, x)

    @staticmethod
    @ringprof.annotate
    def static(x):
        return x

    @classmethod
    @ringprof.annotate
    def klass(cls, x):
        return (cls, x)


def test_names_and_methods_reach_a_snapshot(ringprofd):
    settle()
    m = Methods()
    assert m.method(1) == (m, 1)
    bound = m.method
    assert bound(2) == (m, 2) and bound.__self__ is m
    assert Methods.method(m, 3) == (m, 3)
    assert Methods.static(4) == 4 and m.klass(5) == (Methods, 5)
    # Lone surrogates cannot be UTF-8: they are replaced, as with "replace".
    with ringprof.annotate("py.bad\udcffname"):
        ringprof.instant("py.bad\udcffinstant")
    with ringprof.annotate("py.ünïcode"):
        pass
    s = ringprof.snapshot(last=2.0)
    evs = events(s, pid=os.getpid())
    done, _ = ranges(evs)
    assert done["Methods.method"] == 3
    assert done["Methods.static"] == 1 and done["Methods.klass"] == 1
    assert done["py.bad?name"] == 1 and done["py.ünïcode"] == 1
    assert "py.bad?instant" in {e["name"] for e in evs if e["kind"] == "instant"}


def fake_refusing_daemon(tmp_path, status, message):
    """A producer socket that answers every hello with a refusal, as
    ringprofd does (docs/api.md, "Producer socket"); returns the control
    socket path to give the producer."""
    path = str(tmp_path / "ctl.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path + ".producers")
    server.listen(16)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.send(struct.pack("<8sii248s", b"RPREPLY1", status, 0, message.encode()))

    threading.Thread(target=serve, daemon=True).start()
    return path, server


REFUSAL_WORKLOAD = """if True:
    import threading, time, ringprof
    def work():
        end = time.monotonic() + 2.5  # the library retries once a second
        while time.monotonic() < end:
            with ringprof.annotate("x"):
                ringprof.instant("y")
            time.sleep(0.005)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(ringprof.connected())
"""


def test_a_refused_producer_warns_once_with_the_daemons_message(tmp_path):
    message = "producer quota reached: 64 rings of uid 0 (raise [producers] max_rings)"
    path, server = fake_refusing_daemon(tmp_path, -errno.EDQUOT, message)
    try:
        out = run_python(REFUSAL_WORKLOAD, RINGPROF_SOCKET=path)
        quiet = run_python(REFUSAL_WORKLOAD, RINGPROF_SOCKET=path, RINGPROF_QUIET="1")
    finally:
        server.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"]
    warning = out.stderr.splitlines()
    assert len(warning) == 1, out.stderr
    assert warning[0].startswith("ringprof: this process's annotations are not recorded")
    assert message in warning[0] and "RINGPROF_QUIET=1" in warning[0]
    assert quiet.returncode == 0 and quiet.stderr == ""


SYSTEM_PYTHON = "/usr/bin/python3"  # one that another user may run, unlike pyenv's


@pytest.fixture
def refusing_socket():
    """A root daemon whose 0660 socket other users cannot open; the tests'
    directory is not under pytest's 0700 tmp_path, so that the socket's
    mode alone keeps them out, as with /run/ringprof."""
    tmp = tempfile.mkdtemp(prefix="ringprof-refused-")
    os.chmod(tmp, 0o755)
    d = Daemon(os.path.join(tmp, "daemon"))
    os.mkdir(d.tmp)
    d.start()
    yield d, pathlib.Path(tmp)
    d.stop()
    shutil.rmtree(tmp, ignore_errors=True)


NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def assert_one_group_warning(out, d):
    assert out.returncode == 0, out
    warning = out.stderr.splitlines()
    assert len(warning) == 1, out.stderr
    assert "this process's annotations are not recorded" in warning[0]
    assert "Permission denied" in warning[0]
    assert f"{d.socket}.producers belongs to group 'root'" in warning[0]
    assert "usermod -aG root $USER" in warning[0]


def test_a_c_producer_outside_the_sockets_group_warns_once(refusing_socket, probe):
    """The library says it, so C programs get it too."""
    d, _ = refusing_socket
    # 4 threads, each retrying for the probe's 5 s wait for the daemon.
    out = subprocess.run([*NOBODY, probe, "threads", "4", "10"], capture_output=True,
                         text=True, timeout=60, env=d.env())
    quiet = subprocess.run([*NOBODY, probe, "threads", "1", "10"], capture_output=True,
                           text=True, timeout=60, env={**d.env(), "RINGPROF_QUIET": "1"})
    assert_one_group_warning(out, d)
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason=f"no {SYSTEM_PYTHON}")
def test_a_python_producer_outside_the_sockets_group_warns_once(refusing_socket):
    """The issue's case: a training script of a user outside the group got
    connected() False and nothing else."""
    d, tmp = refusing_socket
    package = build(tmp / "package", python=SYSTEM_PYTHON)
    out = subprocess.run([*NOBODY, SYSTEM_PYTHON, "-c", REFUSAL_WORKLOAD], capture_output=True,
                         text=True, timeout=60, env={**d.env(), "PYTHONPATH": str(package)})
    assert out.stdout.split() == ["False"]
    assert_one_group_warning(out, d)


def test_annotation_cost_with_a_daemon(ringprofd):
    n = 200000
    t = time.perf_counter()
    for _ in range(n):
        with ringprof.annotate("py.cost"):
            pass
    per = (time.perf_counter() - t) / (2 * n) * 1e9
    print(f"{per:.0f} ns per Python annotation with a daemon")
    assert ringprof.connected()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_daemon_restart_annotations_resume(ringprofd, sig):
    with ringprof.annotate("py.before-restart"):
        pass
    assert ringprof.connected()
    ringprofd.kill(sig)
    # Annotating into a dead daemon: no exception, no stall.
    t = time.perf_counter()
    for _ in range(10000):
        with ringprof.annotate("py.while-down"):
            pass
    assert time.perf_counter() - t < 1.0
    ringprofd.start()
    restarted = time.monotonic()

    def reaches_new_daemon():
        # connected() holds for the old ring too, until its beat is 2 s
        # stale; the new daemon counts this thread once it took a ring.
        rings = ringprof.status()["rings"]
        return next(r for r in rings if r["device"] == "host")["producers"] > 0

    resumed = None
    while resumed is None and time.monotonic() < restarted + 5:
        with ringprof.annotate("py.after-restart"):
            pass
        if ringprof.connected() and reaches_new_daemon():
            resumed = time.monotonic()
        time.sleep(0.001)
    assert resumed is not None, open(ringprofd.log).read()
    print(f"resumed {resumed - restarted:.2f} s after the restart")
    for _ in range(10):
        with ringprof.annotate("py.resumed"):
            pass
    s = ringprof.snapshot(last="2s")
    done, _ = ranges(events(s, pid=os.getpid()))
    assert done["py.resumed"] == 10
