"""What the exporters' tests share: paths, the content make-session writes
(tests/export/make_session.c spells it out) and running the tools."""

import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("RINGPROF_BUILD", ROOT / "build"))
PROTO_DIR = ROOT / "storage" / "proto"
MAKE_SESSION = BUILD / "tests" / "make-session"
CLI = BUILD / "cli" / "ringprof"

T0 = 1_000_000_000          # host clock ns of the window's start
MS = 1_000_000
US = 1_000
WALL_OFFSET = 1_750_000_000_000_000_000


def step_start(i):
    """Host clock ns at which step i begins."""
    return T0 + 2 * MS + i * 10 * MS


def wall(ts):
    return ts + WALL_OFFSET


def run(*args, timeout=300):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{args} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out.stdout


def make_session(tmp, *args):
    """The session directory make-session wrote under tmp."""
    return pathlib.Path(run(MAKE_SESSION, tmp, *args).strip())


def export(session, fmt, path):
    run(CLI, "export", session, "--format", fmt, "-o", path)
    return path
