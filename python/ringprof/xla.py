"""XLA runtimes (JAX; TPU, GPU, CPU): let ringprofd pull the workload's
device and op events.

    import ringprof.xla
    ringprof.xla.attach()

starts JAX's profiler server (jax.profiler.start_server) on a free
loopback port, unless attach() already started one, and registers
"127.0.0.1:PORT" with this process's pid at ringprofd
(POST /v1/xla/endpoints).  The daemon's XLA collector then pulls the
runtime's events continuously (docs/xla.md) and forgets the server when
this process exits; the server stops at interpreter exit.  `ringprof
run` calls attach() in any Python program that imports jax (its start-up
hook, python/hook/sitecustomize.py).  Only one profiling session runs in
a process at a time: while ringprofd pulls, jax.profiler.trace() in the
same process fails, and the other way round.
"""

import os
import socket

from ._api import request

_address = None


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
    return _address
