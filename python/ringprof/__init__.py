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
import urllib.parse

try:
    from ._ringprof import annotate, connected, counter, dropped, instant
except ImportError as e:  # a copy of the sources, not an installed package
    raise ImportError(
        f"ringprof's native part is missing ({e}): install the package with "
        "`pip install ./python` from the ringprof source tree") from e
from ._api import RingprofError, request, socket_path

__all__ = [
    "RingprofError", "annotate", "instant", "counter", "connected", "dropped",
    "start_session", "stop_session", "snapshot", "trace", "status", "socket_path",
]
__version__ = "0.1.0"


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


def start_session(name=None, run=None, reason=None):
    """Start recording a session now; returns its id for stop_session."""
    return request("POST", "/v1/sessions", _optional(name=name, run=run, reason=reason))["id"]


def stop_session(id):
    """Stop a session; returns the completed session (its manifest)."""
    return request("POST", f"/v1/sessions/{urllib.parse.quote(id, safe='')}/stop")


def snapshot(last=30.0, end=None, name=None, run=None, reason=None):
    """Freeze the recent past into a session and return it, complete on disk.

    last: the window's length, in seconds or as '500ms', '30s', '5m' (None:
    the daemon's default).  end: where the window ends (default now): a
    datetime, Unix ns (int) or an RFC 3339 string; it may lie in the past."""
    body = _optional(last=None if last is None else _duration(last),
                     end=None if end is None else _time(end),
                     name=name, run=run, reason=reason)
    return request("POST", "/v1/snapshot", body)


def status():
    """The daemon's status: rings, their horizon and fill, open sessions."""
    return request("GET", "/v1/status")


class trace(contextlib.AbstractContextManager):
    """Record a session around a block, like jax.profiler.trace:

        with ringprof.trace(name="epoch-3") as t:
            ...
        t.session["path"]     # the completed session, after the block

    The session is stopped even when the block raises."""

    def __init__(self, name=None, run=None, reason=None):
        self.name, self.run, self.reason = name, run, reason
        self.id = None
        self.session = None

    def __enter__(self):
        self.id = start_session(self.name, self.run, self.reason)
        return self

    def __exit__(self, *exc):
        self.session = stop_session(self.id)
        return False
