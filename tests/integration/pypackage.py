"""The Python package of this tree, built for tests that import it in
their own process (test_python.py): setup.py builds it, as pip does, into
a directory of its own, not the tree's python/build, so each run compiles
afresh with its own flags: scripts/test.sh's ASan pass (RINGPROF_SANITIZED=1)
gets a sanitized extension, as it gets a sanitized daemon."""

import atexit
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from daemon_harness import SANITIZED

PYTHON_DIR = pathlib.Path(__file__).resolve().parents[2] / "python"


def build(dest, python=sys.executable):
    """Builds the package under dest; returns the directory that holds it."""
    dest = pathlib.Path(dest)
    env = dict(os.environ)
    if SANITIZED:
        for var in ("CFLAGS", "LDFLAGS"):
            env[var] = " ".join(filter(None, [env.get(var), "-fsanitize=address,undefined"]))
    out = subprocess.run([python, "setup.py", "build", "--build-base", str(dest),
                          "--build-temp", str(dest / "temp")],
                         cwd=PYTHON_DIR, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"building the Python package failed:\n{out.stdout}\n{out.stderr}")
    (lib,) = [p for p in dest.iterdir() if p.name.startswith("lib")]
    return lib


def put_on_path():
    """Builds the package into a temporary directory, removed at exit, and
    puts it first on sys.path and on the PYTHONPATH of the Python programs
    the tests start."""
    dest = tempfile.mkdtemp(prefix="ringprof-python-")
    atexit.register(shutil.rmtree, dest, ignore_errors=True)
    lib = str(build(dest))
    sys.path.insert(0, lib)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [lib, os.environ.get("PYTHONPATH")]))
