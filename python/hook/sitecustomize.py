"""`ringprof run`'s start-up hook for Python programs (docs/xla.md,
docs/gpu.md).

`ringprof run` puts this directory first on PYTHONPATH, so every Python
program it starts runs this file at start-up (the `site` module imports
`sitecustomize`), and sets a variable for each thing the hook should do
once a framework has been imported (_AFTER_IMPORT):
  RINGPROF_XLA_ATTACH=1   after jax: ringprof.xla.attach() serves the
                          program's XLA profiler and registers it with
                          ringprofd, which then pulls its XLA ops and steps;
  RINGPROF_TORCH_SHARE=1  after torch: ringprof.cupti shares CUPTI between
                          torch.profiler and ringprof's GPU collector, which
                          records nothing in a PyTorch process until then.
It costs a program that imports neither one finder on sys.meta_path. A
failure (the ringprof package missing for this interpreter, no daemon) is
one line on stderr; the program runs on unprofiled.  Then the
sitecustomize this one hides, if any, runs as it would have."""

import importlib.abc
import importlib.util
import os
import sys


def _attach_xla():
    import ringprof.xla
    ringprof.xla.attach()


def _share_cupti():
    import ringprof.cupti
    ringprof.cupti.share_with_torch_profiler()


# (variable, framework, what to do once it is imported, what it gives)
_AFTER_IMPORT = [
    ("RINGPROF_XLA_ATTACH", "jax", _attach_xla, "the program's XLA ops"),
    ("RINGPROF_TORCH_SHARE", "torch", _share_cupti, "its GPU activity"),
]


def _run(framework, action, gives):
    try:
        action()
    except ImportError as e:
        print(f"ringprof run: this program imports {framework}, but {sys.executable} cannot "
              f"import the ringprof Python package ({e}): pip install it for that interpreter "
              f"to have {gives}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001  (the program must run on)
        print(f"ringprof run: cannot set up {gives} after {framework}: {e}", file=sys.stderr)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it wraps a framework's loader so that its
    action runs once the framework's own import has completed."""

    def __init__(self, wanted):
        self.wanted = wanted  # framework -> (action, gives)

    def find_spec(self, name, path=None, target=None):
        if name not in self.wanted:
            return None
        action, gives = self.wanted.pop(name)
        if not self.wanted:
            sys.meta_path.remove(self)
        # Find the real spec past this finder (it no longer wants name).
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_act(module):
            exec_module(module)
            _run(name, action, gives)
        spec.loader.exec_module = exec_then_act
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


_wanted = {fw: (action, gives) for var, fw, action, gives in _AFTER_IMPORT
           if os.environ.get(var) == "1" and fw not in sys.modules}
if _wanted:
    sys.meta_path.insert(0, _AfterImport(_wanted))
_run_hidden_sitecustomize()
