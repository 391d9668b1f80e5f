"""ringprofd's control API (docs/api.md): HTTP/1.1 + JSON over its Unix
socket, with the standard library only."""

import http.client
import json
import os
import socket


class RingprofError(Exception):
    """A failed call to ringprofd; the message is the daemon's (or says why
    the daemon could not be reached).  status is the HTTP status, or None
    when no answer came.  session: the session, when the error is about
    its exports (wait=), else None."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status
        self.session = None


def socket_path():
    """$RINGPROF_SOCKET, else the default: as util/paths.c decides."""
    env = os.environ.get("RINGPROF_SOCKET")
    if env:
        return env
    if os.geteuid() == 0:
        return "/run/ringprof/ringprofd.sock"
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "ringprof", "ringprofd.sock")
    return f"/tmp/ringprof-{os.getuid()}/ringprofd.sock"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


_START = "start it with `ringprofd` (or `systemctl start ringprofd`), or set RINGPROF_SOCKET"


def _unreachable(path, e):
    if isinstance(e, FileNotFoundError):
        why = f"no such socket: is the daemon running? {_START}"
    elif isinstance(e, ConnectionRefusedError):
        why = ("nobody is listening on the socket (left over from a daemon that "
               f"exited?): {_START}")
    elif isinstance(e, PermissionError):
        why = ("permission denied: join the ringprof group (sudo usermod -aG "
               "ringprof $USER, then log in again) or run as root")
    else:
        why = str(e)
    return RingprofError(f"cannot reach ringprofd at {path}: {why}")


def request(method, path, body=None, timeout=60.0):
    """One call; returns the decoded JSON answer or raises RingprofError."""
    sock = socket_path()
    conn = _UnixConnection(sock, timeout)
    headers = {"X-Ringprof-Client": "python"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    try:
        try:
            conn.request(method, path, body=data, headers=headers)
        except OSError as e:
            raise _unreachable(sock, e) from None
        try:
            resp = conn.getresponse()
            raw = resp.read()
        except socket.timeout:
            raise RingprofError(f"ringprofd at {sock} did not answer {method} {path} "
                                f"within {timeout:g} s") from None
        except (OSError, http.client.HTTPException) as e:
            raise RingprofError(f"{method} {path} to ringprofd at {sock} failed: {e}") from None
    finally:
        conn.close()
    try:
        doc = json.loads(raw) if raw else None
    except ValueError:
        doc = None
    if resp.status >= 400:
        err = doc.get("error") if isinstance(doc, dict) else None
        message = err.get("message") if isinstance(err, dict) else None
        raise RingprofError(message or f"ringprofd answered {resp.status} {resp.reason} "
                            f"to {method} {path}", status=resp.status)
    if raw and doc is None:
        raise RingprofError(f"ringprofd at {sock} answered {method} {path} with "
                            "something that is not JSON", status=resp.status)
    return doc
