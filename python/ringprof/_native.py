"""libringprof through ctypes, loaded on the first annotation.

The module attributes begin/end/instant/counter/connected/dropped start as
loaders that bind them to the library's functions (or to no-ops, with one
warning, when it cannot be loaded), so later calls go straight through.

The library is opened with PyDLL: its annotation calls take nanoseconds and
never block, so holding the GIL is cheaper than releasing it, and a thread
never loses the GIL to another in the middle of an annotation.
"""

import ctypes
import ctypes.util
import os
import pathlib
import threading
import warnings

_lock = threading.Lock()
_loaded = False


def _candidates():
    """Paths to try, best first; $RINGPROF_LIBRARY alone when it is set."""
    env = os.environ.get("RINGPROF_LIBRARY")
    if env:
        return [env]
    paths = []
    found = ctypes.util.find_library("ringprof")
    if found:
        paths.append(found)
    # Uninstalled use from a source tree: <repo>/python/ringprof/_native.py.
    repo = pathlib.Path(__file__).resolve().parents[2]
    builds = [repo / "build"] + sorted(p for p in repo.glob("build?*") if p.is_dir())
    paths += [str(b / "lib" / "libringprof.so") for b in builds
              if (b / "lib" / "libringprof.so").exists()]
    return paths


def _open():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.PyDLL(path)
        except OSError as e:
            errors.append(str(e))
            continue
        lib.ringprof_range_begin.argtypes = [ctypes.c_char_p]
        lib.ringprof_range_begin.restype = None
        lib.ringprof_range_end.argtypes = []
        lib.ringprof_range_end.restype = None
        lib.ringprof_instant.argtypes = [ctypes.c_char_p]
        lib.ringprof_instant.restype = None
        lib.ringprof_counter.argtypes = [ctypes.c_char_p, ctypes.c_double]
        lib.ringprof_counter.restype = None
        lib.ringprof_connected.argtypes = []
        lib.ringprof_connected.restype = ctypes.c_int
        lib.ringprof_dropped.argtypes = []
        lib.ringprof_dropped.restype = ctypes.c_uint64
        return lib
    why = "; ".join(errors) or "libringprof.so is not installed"
    warnings.warn(
        f"ringprof: cannot load libringprof ({why}); annotations do nothing. "
        "Install ringprof or set RINGPROF_LIBRARY to the path of libringprof.so.",
        RuntimeWarning, stacklevel=5)  # the user's annotation
    return None


def _noop(*args):
    return None


def _bind():
    global _loaded, begin, end, instant, counter, connected, dropped
    with _lock:
        if _loaded:
            return
        lib = _open()
        if lib is None:
            begin = end = instant = counter = _noop
            connected = dropped = lambda: 0
        else:
            begin = lib.ringprof_range_begin
            end = lib.ringprof_range_end
            instant = lib.ringprof_instant
            counter = lib.ringprof_counter
            connected = lib.ringprof_connected
            dropped = lib.ringprof_dropped
        _loaded = True


# Loaders: each binds every function, then calls the bound one.
def begin(name):
    _bind()
    begin(name)


def end():
    _bind()
    end()


def instant(name):
    _bind()
    instant(name)


def counter(name, value):
    _bind()
    counter(name, value)


def connected():
    _bind()
    return connected()


def dropped():
    _bind()
    return dropped()
