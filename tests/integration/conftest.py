"""Shared pieces of the tests against the real ringprofd.

test_python.py and test_libringprof.py share one daemon (the `ringprofd`
fixture) for the whole run, so the test process's own threads stay
connected to it from test to test: a thread's ring outlives any one
test.  Paths come from daemon_harness (RINGPROF_BUILD, RINGPROFD, ...)
and RINGPROF_PROBE (tests/integration/probe.c, built with libringprof)."""

import collections
import json
import os
import pathlib
import subprocess

import pytest

from daemon_harness import BUILD, Daemon, dump
from pypackage import put_on_path

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The package from this tree, built, not some installed copy.
put_on_path()

# Drains and seals often, so sessions see the newest events; 16 MiB
# producer rings take the C probe's bursts without drops.
CONFIG = """
[daemon]
poll_interval = 10ms
seal_interval = 100ms
[producers]
ring_size = 16MiB
"""


@pytest.fixture(scope="session")
def ringprofd(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("ringprofd"), config=CONFIG)
    old = os.environ.get("RINGPROF_SOCKET")
    os.environ["RINGPROF_SOCKET"] = d.socket
    d.start()
    yield d
    d.stop()
    if old is None:
        del os.environ["RINGPROF_SOCKET"]
    else:
        os.environ["RINGPROF_SOCKET"] = old


@pytest.fixture(scope="session")
def probe():
    path = os.environ.get("RINGPROF_PROBE", os.path.join(BUILD, "lib", "ringprof-probe"))
    if not os.path.exists(path):
        pytest.fail(f"{path} does not exist: build ringprof, or set RINGPROF_PROBE")
    return path


def run_probe(probe, *args, env=None):
    """Runs the C probe; returns the JSON object it prints."""
    out = subprocess.run([probe, *map(str, args)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def events(session, pid=None):
    """The events inside a completed session's window, of one process."""
    return [e for e in dump(session["path"]) if pid is None or e["pid"] == pid]


def ranges(evs):
    """Ranges completed in evs, matching each end with the innermost open
    begin of its thread: a Counter of names, and the number of ends whose
    begin lies before the window."""
    stacks = collections.defaultdict(list)
    done = collections.Counter()
    unmatched = 0
    for ev in sorted(evs, key=lambda e: e["ts"]):
        key = (ev["pid"], ev["tid"])
        if ev["kind"] == "range_begin":
            stacks[key].append(ev["name"])
        elif ev["kind"] == "range_end":
            if stacks[key]:
                done[stacks[key].pop()] += 1
            else:
                unmatched += 1
    return done, unmatched


def host_events(session):
    return next(d["events"] for d in session["devices"] if d["device"] == "host")
