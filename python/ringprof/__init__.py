"""ringprof for Python: annotate a program for the ringprof flight recorder
and drive its sessions.

Annotations (annotate, instant, counter) go through libringprof into a
per-thread shared-memory ring: they never raise, never block, and cost
next to nothing when no daemon runs.  Session calls (start_session,
stop_session, snapshot, trace, status) talk to ringprofd's control API and
raise RingprofError with the daemon's message.
"""

import contextlib
import datetime
import functools
import urllib.parse

from . import _native
from ._api import RingprofError, request, socket_path

__all__ = [
    "RingprofError", "annotate", "instant", "counter", "connected", "dropped",
    "start_session", "stop_session", "snapshot", "trace", "status", "socket_path",
]
__version__ = "0.1.0"


def _encode(name):
    if not isinstance(name, str):
        raise TypeError(f"an annotation name is a str, not {type(name).__name__}")
    return name.encode("utf-8", "replace")


def _wrap(func, name):
    encoded = _encode(name)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        _native.begin(encoded)
        try:
            return func(*args, **kwargs)
        finally:
            _native.end()

    return wrapper


class annotate:
    """A named range on the calling thread's timeline.

        with ringprof.annotate("data"):     # context manager
            ...
        @ringprof.annotate("step")          # decorator
        @ringprof.annotate()                # named after func.__qualname__
        @ringprof.annotate                  # the same, without parentheses

    Ranges nest per thread; an instance may be entered again and again."""

    __slots__ = ("name", "_encoded")

    def __new__(cls, name=None):
        if callable(name):
            return _wrap(name, name.__qualname__)
        return super().__new__(cls)

    def __init__(self, name=None):
        self.name = name
        self._encoded = None if name is None else _encode(name)

    def __enter__(self):
        if self._encoded is None:
            raise TypeError("ringprof.annotate() needs a name when used as a context "
                            "manager: with ringprof.annotate(\"name\"): ...")
        _native.begin(self._encoded)
        return self

    def __exit__(self, *exc):
        _native.end()
        return False

    def __call__(self, func):
        return _wrap(func, self.name if self.name is not None else func.__qualname__)

    def __repr__(self):
        return f"ringprof.annotate({self.name!r})"


def instant(name):
    """A point event on the calling thread's timeline."""
    _native.instant(_encode(name))


def counter(name, value):
    """A sample of a numeric series (loss, queue depth, ...)."""
    _native.counter(_encode(name), float(value))


def connected():
    """Whether the calling thread's annotations currently reach a daemon."""
    return bool(_native.connected())


def dropped():
    """Annotations of the calling thread dropped because its ring was full."""
    return int(_native.dropped())


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
