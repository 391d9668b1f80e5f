"""XLA runtimes (JAX; TPU, GPU, CPU): let ringprofd pull the workload's
device and op events.

    import ringprof.xla
    ringprof.xla.attach()

starts JAX's profiler server (jax.profiler.start_server) on a free
loopback port, unless attach() already started one, and registers
"127.0.0.1:PORT" with this process's pid at ringprofd
(POST /v1/xla/endpoints).  The daemon's XLA collector then pulls the
runtime's events continuously (docs/xla.md).  At interpreter exit (or on
detach()) the process tells the daemon it is leaving (POST
/v1/xla/endpoints/PID/detach) and waits while the daemon pulls its last
window and stops its profiling session, so that the end of the run is
kept and the server is not torn down in the middle of a call; a process
that dies without saying so is forgotten once it has exited.  `ringprof
run` calls attach() in any Python program that imports jax (its start-up
hook, python/hook/sitecustomize.py).  Only one profiling session runs in
a process at a time: while ringprofd pulls, jax.profiler.trace() in the
same process fails, and the other way round.
"""

import atexit
import os
import socket
import sys

from ._api import RingprofError, request

_address = None
_registered_exit = False
# A last window is one continuous-profiling snapshot; the daemon's deadline
# for it is the window plus 10 s.
_DETACH_TIMEOUT_S = 30.0


def _free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def attach(port=None):
    """Serve this process's XLA profiler and register it with ringprofd.

    port: the server's port (None: a free one).  Returns the registered
    address.  Raises RingprofError when the daemon refuses or cannot be
    reached, ImportError without JAX.  Calling it again registers the
    same server again (after a daemon restart, say)."""
    global _address
    if _address is None:
        import jax.profiler  # noqa: PLC0415  (only workloads that attach need JAX)
        port = port or _free_loopback_port()
        jax.profiler.start_server(port)
        _address = f"127.0.0.1:{port}"
    request("POST", "/v1/xla/endpoints", {"address": _address, "pid": os.getpid()})
    global _registered_exit
    if not _registered_exit:
        atexit.register(_detach_at_exit)
        _registered_exit = True
    return _address


def detach():
    """Tell ringprofd this process is leaving: it pulls the last window of
    events from the server, stops its profiling session and forgets the
    server.  Returns once done (seconds at most).  Called at interpreter
    exit after attach(); calling it earlier stops the pull until the next
    attach().  Raises RingprofError when the daemon cannot be reached."""
    if _address is not None:
        request("POST", f"/v1/xla/endpoints/{os.getpid()}/detach", timeout=_DETACH_TIMEOUT_S)


def _detach_at_exit():
    try:
        detach()
    except RingprofError as e:
        print(f"ringprof.xla: the last window of this process may be lost: {e}",
              file=sys.stderr)
