"""Share CUPTI between ringprof's GPU collector and torch.profiler.

libringprof-cupti.so (loaded by the CUDA driver through
CUDA_INJECTION64_PATH) records GPU activity with CUPTI's activity API,
which serves one client's callbacks at a time: when torch.profiler
(Kineto) registers its own, the buffers ringprof holds go to Kineto,
which drops them, and neither tool sees those kernels (observed on an
H100, docs/gpu.md).

    import ringprof.cupti
    ringprof.cupti.share_with_torch_profiler()

makes them take turns: each torch.profiler session with CUDA activity
pauses ringprof's collector before Kineto takes CUPTI and resumes it when
the session ends; the pause and resume are instants in ringprof's host
ring.  In a process with PyTorch the collector records nothing until this
is called (it says so on stderr once).  `ringprof run` does this for
Python programs without a code change.
"""

import ctypes
import os

_NAME = "libringprof-cupti.so"


def injection_library():
    """ringprof's CUPTI library as loaded in this process (or about to be:
    CUDA_INJECTION64_PATH names it), or None."""
    path = os.environ.get("CUDA_INJECTION64_PATH", "")
    if os.path.basename(path) != _NAME:
        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps
                         if line.rstrip().endswith("/" + _NAME)), "")
    if not path:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    return lib if hasattr(lib, "rp_cupti_pause") else None


def _wants_cuda(prof):
    """Whether a torch.autograd.profiler.profile records CUDA activity."""
    from torch.profiler import ProfilerActivity  # noqa: PLC0415
    activities = getattr(prof, "kineto_activities", None)
    return activities is None or ProfilerActivity.CUDA in activities


def share_with_torch_profiler():
    """Pause ringprof's CUPTI collector during each torch.profiler session
    with CUDA activity.  Returns False where there is nothing to share (no
    ringprof CUPTI library in this process); torch is imported."""
    lib = injection_library()
    if lib is None:
        return False
    from torch.autograd import profiler  # noqa: PLC0415
    cls = profiler.profile
    if getattr(cls, "_ringprof_shares_cupti", False):
        return True
    prepare, leave = cls._prepare_trace, cls.__exit__

    def _prepare_trace(self, *args, **kwargs):
        self._ringprof_paused = _wants_cuda(self)
        if self._ringprof_paused:
            lib.rp_cupti_pause()
        return prepare(self, *args, **kwargs)

    def __exit__(self, *exc):
        try:
            return leave(self, *exc)
        finally:
            if getattr(self, "_ringprof_paused", False):
                self._ringprof_paused = False
                lib.rp_cupti_resume()

    cls._prepare_trace, cls.__exit__ = _prepare_trace, __exit__
    cls._ringprof_shares_cupti = True
    # With PyTorch in the process the collector waits for this before it
    # records: a torch.profiler session it was not told of would lose its
    # GPU activity.
    lib.rp_cupti_share()
    return True
