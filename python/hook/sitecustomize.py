"""`ringprof run`'s start-up hook for Python programs (docs/xla.md).

`ringprof run` puts this directory first on PYTHONPATH and sets
RINGPROF_XLA_ATTACH=1, so every Python program it starts runs this file at
start-up (the `site` module imports `sitecustomize`).  It costs a program
that never imports jax one finder on sys.meta_path: once jax has been
imported, ringprof.xla.attach() serves the program's XLA profiler and
registers it with ringprofd, which then pulls its XLA ops and steps.  A
failure (the ringprof package missing for this interpreter, no daemon) is
one line on stderr; the program runs on unprofiled.  Then the
sitecustomize this one hides, if any, runs as it would have."""

import importlib.abc
import importlib.util
import os
import sys


def _attach():
    try:
        import ringprof.xla
        ringprof.xla.attach()
    except ImportError as e:
        print(f"ringprof run: this program imports jax, but {sys.executable} cannot import "
              f"the ringprof Python package ({e}): pip install it for that interpreter to "
              "have the program's XLA ops", file=sys.stderr)
    except Exception as e:  # noqa: BLE001  (the program must run on)
        print(f"ringprof run: cannot attach the program's XLA profiler: {e}", file=sys.stderr)


class _AttachAfterJax(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it wraps jax's loader so that attaching runs
    once jax's own import has completed."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_attach(module):
            exec_module(module)
            _attach()
        spec.loader.exec_module = exec_then_attach
        return spec


def _run_hidden_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.pop(__name__)
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401  (the one this file hides)
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        sys.modules[__name__] = me  # none: the import of this one expects it back
    finally:
        sys.path[:] = saved


if os.environ.get("RINGPROF_XLA_ATTACH") == "1" and "jax" not in sys.modules:
    sys.meta_path.insert(0, _AttachAfterJax())
_run_hidden_sitecustomize()
