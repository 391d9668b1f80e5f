"""ringprof for Python: annotate a program for the ringprof flight recorder
and drive its sessions.

Annotations (annotate, instant, counter) go through libringprof's
annotations, compiled into the extension ringprof._ringprof, into a
per-thread shared-memory ring: they never raise (but for a name that is
not a str), never block, and cost next to nothing when no daemon runs.
Session calls (start_session, stop_session, snapshot, trace, status) talk
to ringprofd's control API and raise RingprofError with the daemon's
message.
"""

import contextlib
import datetime
import time
import urllib.parse

try:
    from ._ringprof import __version__, annotate, connected, counter, dropped, instant
except ImportError as e:  # a copy of the sources, not an installed package
    raise ImportError(
        f"ringprof's native part is missing ({e}): install the package with "
        "`pip install ./python` from the ringprof source tree") from e
from . import xla
from ._api import RingprofError, request, socket_path

__all__ = [
    "RingprofError", "annotate", "instant", "counter", "connected", "dropped",
    "start_session", "stop_session", "snapshot", "trace", "status", "socket_path", "xla",
]


def _optional(**fields):
    return {k: v for k, v in fields.items() if v is not None}


def _duration(last):
    if isinstance(last, bool) or not isinstance(last, (int, float, str, datetime.timedelta)):
        raise TypeError("last is seconds (a number), a duration string such as '30s', "
                        f"or a timedelta, not {type(last).__name__}")
    if isinstance(last, datetime.timedelta):
        return last.total_seconds()
    return last


def _time(end):
    if isinstance(end, datetime.datetime):
        # A naive datetime is local time, as datetime.now() gives it.
        return end.astimezone().isoformat()
    if isinstance(end, bool) or not isinstance(end, (int, str)):
        raise TypeError("end is a datetime, Unix nanoseconds (int) or an RFC 3339 "
                        f"string, not {type(end).__name__}")
    return end


_WAIT_DEFAULT_S = 60.0
_POLL_S = 0.1


def _wait_timeout(wait):
    """wait= as seconds to wait for exports; None: do not wait."""
    if wait is True:
        return _WAIT_DEFAULT_S
    if wait is None or wait is False or (isinstance(wait, (int, float)) and wait == 0):
        return None
    if isinstance(wait, (int, float)) and wait > 0:
        return float(wait)
    raise ValueError("wait is True (up to 60 s), False (or 0), or the seconds to wait, "
                     f"not {wait!r}")


def _pending(session):
    if session.get("state") == "open":
        return ["the session is still open"]
    return [f for f, st in (session.get("exports") or {}).items() if st.get("state") == "pending"]


def _await_exports(session, timeout):
    """session, polled from the daemon until its exports are all written
    or failed; RingprofError (with .session) when one failed or when
    timeout seconds passed first."""
    path = f"/v1/sessions/{urllib.parse.quote(session['id'], safe='')}"
    deadline = time.monotonic() + timeout
    while _pending(session):
        if time.monotonic() >= deadline:
            e = RingprofError(f"session {session['id']}: {', '.join(_pending(session))} still "
                              f"pending after {timeout:g} s: the daemon exports sessions one at "
                              "a time, in the order they closed; wait longer (wait=SECONDS)")
            e.session = session
            raise e
        time.sleep(_POLL_S)
        session = request("GET", path)
    failed = [f"the {f} export failed: {st.get('error')}"
              for f, st in (session.get("exports") or {}).items() if st.get("state") == "failed"]
    if failed:
        e = RingprofError(f"session {session['id']}: " + "; ".join(failed) +
                          f" (retry: ringprof export {session.get('path')} --format FORMAT)")
        e.session = session
        raise e
    return session


def _job(pids, cgroup):
    """The job fields of a request: pids (a list of ints) and a cgroup path."""
    if pids is not None:
        pids = list(pids)
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in pids):
            raise TypeError("pids is a list of process ids (ints)")
    return _optional(pids=pids or None, cgroup=cgroup)


def start_session(name=None, run=None, reason=None, pids=None, cgroup=None):
    """Start recording a session now; returns its id for stop_session.
    pids, cgroup: keep only that job's events (see snapshot)."""
    return request("POST", "/v1/sessions",
                   {**_optional(name=name, run=run, reason=reason), **_job(pids, cgroup)})["id"]


def stop_session(id, wait=False, pids=None, cgroup=None):
    """Stop a session; returns the completed session (its manifest).
    wait: as snapshot's; pids, cgroup: more of the job the start named."""
    timeout = _wait_timeout(wait)
    s = request("POST", f"/v1/sessions/{urllib.parse.quote(id, safe='')}/stop",
                _job(pids, cgroup) or None)
    return s if timeout is None else _await_exports(s, timeout)


def snapshot(last=30.0, end=None, name=None, run=None, reason=None, wait=False, pids=None,
             cgroup=None):
    """Freeze the recent past into a session and return it, complete on disk.

    last: the window's length, in seconds or as '500ms', '30s', '5m' (None:
    the daemon's default).  end: where the window ends (default now): a
    datetime, Unix ns (int) or an RFC 3339 string; it may lie in the past.
    wait: True (up to 60 s) or seconds: return once the session's exports
    (the daemon's [sessions] exports, written after the session closes)
    are done; the session's "exports" then says written (with "bytes") for
    each.  Raises RingprofError, whose .session is the session, when one
    failed or when the time ran out.  pids (process ids) and cgroup (as
    /proc/PID/cgroup shows it): keep only that job's events in the session;
    the daemon reads the cgroup's processes now."""
    timeout = _wait_timeout(wait)
    body = _optional(last=None if last is None else _duration(last),
                     end=None if end is None else _time(end),
                     name=name, run=run, reason=reason, **_job(pids, cgroup))
    s = request("POST", "/v1/snapshot", body)
    return s if timeout is None else _await_exports(s, timeout)


def status():
    """The daemon's status: rings, their horizon and fill, open sessions."""
    return request("GET", "/v1/status")


class trace(contextlib.AbstractContextManager):
    """Record a session around a block, like jax.profiler.trace:

        with ringprof.trace(name="epoch-3") as t:
            ...
        t.session["path"]     # the completed session, after the block

    The session is stopped even when the block raises.  wait: as
    snapshot's, when the block ends (t.session then has its exports)."""

    def __init__(self, name=None, run=None, reason=None, wait=False):
        _wait_timeout(wait)  # checked now, not after the block
        self.name, self.run, self.reason, self.wait = name, run, reason, wait
        self.id = None
        self.session = None

    def __enter__(self):
        self.id = start_session(self.name, self.run, self.reason)
        return self

    def __exit__(self, *exc):
        # A block that raised gets its session back without waiting: its
        # own exception is the one to see.
        self.session = stop_session(self.id, wait=self.wait if exc[0] is None else False)
        return False
