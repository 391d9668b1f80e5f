"""User stacks of code without frame pointers, unwound with CFI end to end:
the real ringprofd's sampler copies the stack of unwind-burn (built -O2
-fomit-frame-pointer) when its frame-pointer walk is cut short, the daemon
unwinds it with the binaries' .eh_frame at ingest, and the folded export
of a snapshot taken after the process exited shows main -> unwind_a ->
unwind_b -> unwind_c.  The same program with frame pointers, and Debian's
python3.11 (libpython without frame pointers) reaching Py_RunMain.  Needs
root for the sampler."""

import os
import subprocess
import time

import pytest

from daemon_harness import BUILD, SANITIZED
from test_python_frames import FRAME, PY_BURN, daemon, folded  # noqa: F401 (a fixture)

UNWIND_BURN = os.environ.get("RINGPROF_UNWIND_BURN", os.path.join(BUILD, "tests", "unwind-burn"))
UNWIND_BURN_FP = os.environ.get("RINGPROF_UNWIND_BURN_FP",
                                os.path.join(BUILD, "tests", "unwind-burn-fp"))
CHAIN = ["unwind_a", "unwind_b", "unwind_c"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the eBPF sampler needs root")


def right_callers(stack, root="main"):
    """A root-first stack reaches root, and below it the workload's
    functions in their calling order, nothing between them."""
    if root not in stack:
        return False
    below = stack[stack.index(root) + 1:]
    ours = [f for f in below if f.startswith("unwind_")]
    return below[:len(ours)] == ours == CHAIN[:len(ours)]


def snapshot_stacks(daemon, pid, tmp_path):
    time.sleep(1.5)  # exited: the snapshot reads only what the ring holds
    session = f"unwind-{pid}"
    daemon.cli("snapshot", "--last", "7s", "--name", session, check=True)
    return folded(daemon, session, pid, tmp_path)


@pytest.mark.parametrize("program,mode,root", [(UNWIND_BURN, "main", "main"),
                                               (UNWIND_BURN_FP, "main", "main"),
                                               (UNWIND_BURN, "thread", "burn_thread"),
                                               (UNWIND_BURN, "context", "burn_context")],
                         ids=["no-frame-pointers", "frame-pointers", "no-frame-pointers-thread",
                              "no-frame-pointers-own-stack"])
def test_stacks_reach_main_through_the_callers(daemon, program, mode, root, tmp_path):
    """The sampler copies a stack only up to its thread's first frame (the
    main thread's arguments, another thread's control block): the unwind
    still reaches main, or the thread's start function; on a stack of the
    program's own (makecontext), it copies what reads and reaches the
    function started there."""
    p = subprocess.Popen([program, "3", mode])
    assert p.wait(timeout=60) == 0
    stacks = snapshot_stacks(daemon, p.pid, tmp_path)
    total = sum(n for _, n in stacks)
    right = sum(n for s, n in stacks if right_callers(s, root))
    deepest = sum(n for s, n in stacks if "unwind_c" in s)
    assert total >= 100, stacks
    assert right >= 0.95 * total, (right, total, sorted(stacks, key=lambda s: -s[1])[:10])
    # unwind_c burns 60% of the time: its samples are there, under b and a.
    assert deepest >= 0.4 * total, (deepest, total)


@pytest.mark.skipif(SANITIZED, reason="measures shares of samples, which the sanitized pass's slower daemon and ASan-preloaded workload move: checked in the normal pass")
def test_python_stacks_reach_py_runmain(daemon, tmp_path):
    """Debian's libpython3.11 has no frame pointers: its native frames
    above the interpreter loop come from the CFI unwind."""
    python = "/usr/bin/python3.11"
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is not installed")
    p = subprocess.run([python, PY_BURN, "3"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout.split()[0])
    stacks = snapshot_stacks(daemon, pid, tmp_path)
    total = sum(n for _, n in stacks)
    runmain = [(s, n) for s, n in stacks if "Py_RunMain" in s]
    assert total >= 100, stacks
    assert sum(n for _, n in runmain) >= 0.9 * total, (total, sorted(stacks, key=lambda s: -s[1])[:10])
    # The script's Python frames merged in below the interpreter's entry,
    # in their calling order.
    fib = 0
    for stack, n in runmain:
        py = [i for i, f in enumerate(stack) if FRAME.match(f)]
        assert not py or py[0] > stack.index("Py_RunMain"), stack
        fib += n if any(f.startswith("leaf_fib (") for f in stack) else 0
    assert fib >= 0.5 * total, (fib, total)


XLA_TRAIN = os.path.join(os.path.dirname(__file__), "xla_train.py")


@pytest.mark.skipif(SANITIZED, reason="measures shares of samples, which the sanitized pass's slower daemon and ASan-preloaded workload move: checked in the normal pass")
def test_jax_cpu_loop_has_almost_no_unknown_frames(daemon, tmp_path):
    """JAX on CPU runs code generated at run time: XLA's fusions (LLVM's ORC
    JIT, registered through GDB's JIT interface, which the daemon reads from
    the process) and oneDNN's matmul kernels (named in the perf map oneDNN
    writes with ONEDNN_JIT_PROFILE=2, as `ringprof run` sets it). Issue 14:
    under 2% of the loop's samples end in [unknown]; XLA's fusions are
    named."""
    pytest.importorskip("jax")
    env = dict(os.environ, ONEDNN_JIT_PROFILE="2", JAX_PLATFORMS="cpu")
    p = subprocess.Popen(["python3", XLA_TRAIN, "0", "6"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    pid = p.pid
    try:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        time.sleep(1)
        daemon.cli("snapshot", "--last", "30s", "--name", "jax-cpu", check=True)
        stacks = folded(daemon, "jax-cpu", pid, tmp_path)
    finally:
        if os.path.exists(f"/tmp/perf-{pid}.map"):
            os.unlink(f"/tmp/perf-{pid}.map")
    total = sum(n for _, n in stacks)
    unknown = sum(n for s, n in stacks if s and s[-1].startswith("[unknown]"))
    fusions = sum(n for s, n in stacks if any("fusion" in f or f.startswith("wrapped_") for f in s))
    assert total >= 200, stacks[:5]
    assert 100 * unknown / total < 2, (unknown, total,
                                       sorted((n, ";".join(s[-3:])) for s, n in stacks
                                              if s and s[-1].startswith("[unknown]"))[-8:])
    assert fusions > 0, "no sample named an XLA fusion"
