"""What the exporters' tests share: paths, the content make-session writes
(tests/export/make_session.c spells it out) and running the tools."""

import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("RINGPROF_BUILD", ROOT / "build"))
PROTO_DIR = ROOT / "storage" / "proto"
MAKE_SESSION = BUILD / "tests" / "make-session"
CLI = BUILD / "cli" / "ringprof"

T0 = 1_000_000_000          # host clock ns of the window's start
MS = 1_000_000
US = 1_000
WALL_OFFSET = 1_750_000_000_000_000_000

# make-session --worker-samples W: process 4244 "worker", W samples a step
# in a C++ function (synth_cpp.cpp) called from main, two frames deep.
WORKER = 4244
HAVE_CPP = os.environ.get("RINGPROF_HAVE_CPP", "1") == "1"
CPP_NAME = "synth::Kernel<float>::run(int)"
CPP_MANGLED = "_ZN5synth6KernelIfE3runEi"


def step_start(i):
    """Host clock ns at which step i begins."""
    return T0 + 2 * MS + i * 10 * MS


def wall(ts):
    return ts + WALL_OFFSET


def run(*args, timeout=300):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{args} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    return out.stdout


def make_session(tmp, *args):
    """The session directory make-session wrote under tmp."""
    return pathlib.Path(run(MAKE_SESSION, tmp, *args).strip())


def worker_session(tmp, steps=10, k=10, w=5):
    """A session with the trainer's k and the worker's w samples a step."""
    return make_session(tmp, "--steps", steps, "--samples-per-step", k, "--worker-samples", w)


def export(session, fmt, path, *args):
    run(CLI, "export", session, "--format", fmt, "-o", path, *args)
    return path


def message_class(tmp, proto, name):
    """The class of message name from storage/proto/<proto>, through
    protoc's descriptors."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    desc = tmp / (proto + ".desc")
    run("protoc", f"--proto_path={PROTO_DIR}", f"--descriptor_set_out={desc}", proto)
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(desc.read_bytes()).file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
