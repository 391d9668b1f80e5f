"""Device identity as data (issue 11): producers on a Neuron core (nc2) and
on a GPU with a stable id (gpu1) give rings whose recorded identity, not
their names, names the devices in the manifest, the XSpace (read by XProf's
own converter and by the schema), the Perfetto trace (read by its schema),
the JSON export and the summary."""

import json
import os
import shutil
import subprocess
import time

from daemon_harness import Daemon, producer_hello

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CONFIG = """
[daemon]
seal_interval = 100ms
host_name = identhost
[sessions]
exports = xplane,perfetto,json,summary
perfetto_grouping = device
"""
GPU_UID = "GPU-8f6e1c2a-0b7d-4c11-9e55-3a1f0c9d2b4e"

DEVICE_PRODUCER = os.environ.get(
    "RINGPROF_DEVICE_PRODUCER",
    os.path.join(os.path.dirname(__file__), "..", "..", "build", "tests", "device-producer"))


def start_device_producer(d, device, uid=None):
    """A producer on device with uid: its ring drained once this returns."""
    proc = subprocess.Popen([DEVICE_PRODUCER, d.socket + ".producers", device] + ([uid] if uid else []),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def wait_files(paths, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(os.path.exists(p) for p in paths):
        time.sleep(0.1)
    return all(os.path.exists(p) for p in paths)


def xspace(path, tmp):
    """The XSpace through our .proto and protoc's descriptors."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: PLC0415
    desc = os.path.join(tmp, "xplane.desc")
    subprocess.run(["protoc", "--proto_path=" + os.path.join(ROOT, "storage", "proto"),
                    "--descriptor_set_out=" + desc, "xplane.proto"], check=True)
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(open(desc, "rb").read()).file:
        pool.Add(f)
    space = message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.profiler.XSpace"))()
    space.ParseFromString(open(path, "rb").read())
    return space


def snapshot(d, name):
    r = d.cli("snapshot", "--last", "10s", "--name", name, "--json", check=True)
    path = json.loads(r.stdout)["path"]
    files = [os.path.join(path, "identhost" + s)
             for s in (".xplane.pb", ".pftrace", ".json", ".summary.txt")]
    assert wait_files(files), (os.listdir(path), open(d.log).read())
    return path, files


def xprof_devices(xplane, tmp, name):
    """{process name: names of its events} as XProf's trace viewer shows them."""
    from xprof.convert import raw_to_tool_data  # noqa: PLC0415
    xdir = os.path.join(tmp, "xprof", "plugins", "profile", name)
    os.makedirs(xdir)  # XProf writes caches beside the file: a copy keeps the session clean
    shutil.copy(xplane, xdir)
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [os.path.join(xdir, os.path.basename(xplane))], "trace_viewer", {"use_saved_result": False})
    trace = json.loads(data.decode() if isinstance(data, bytes) else data)
    processes = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
                 if e and e.get("ph") == "M" and e.get("name") == "process_name"}
    shown = {}
    for e in trace["traceEvents"]:
        if e and e.get("ph") == "X":
            shown.setdefault(processes.get(e["pid"], ""), set()).add(e.get("name"))
    return shown


def test_rings_record_what_device_they_hold(tmp_path):
    d = Daemon(tmp_path, config=CONFIG).start()
    procs = []
    try:
        procs.append(start_device_producer(d, "nc2"))
        # XProf's trace viewer shows one kind of device planes (GPU, else
        # TPU, else custom ones): the Neuron core alone first.
        _, nc_files = snapshot(d, "nc")
        procs.append(start_device_producer(d, "gpu1", GPU_UID))
        # Producers naming another uid for gpu1: accepted, the ring keeps
        # its first uid, and the log says so, once.
        for _ in range(3):
            status, message, fd = producer_hello(d, device="gpu1", uid=b"GPU-00000000-other")
            assert status == 0, message
            os.close(fd)
        path, files = snapshot(d, "ident")
        log = open(d.log).read()
    finally:
        for proc in procs:
            proc.communicate(timeout=30)
        d.stop()
    assert log.count("ring gpu1: producer pid %d names device uid GPU-00000000-other, but the "
                     "ring holds device %s" % (os.getpid(), GPU_UID)) == 1, log

    manifest = json.load(open(os.path.join(path, "identhost.manifest.json")))
    devices = {dev["device"]: (dev["kind"], dev["index"], dev["uid"]) for dev in manifest["devices"]}
    assert devices == {"host": ("host", 0, ""), "nc2": ("neuron_core", 2, ""),
                       "gpu1": ("gpu", 1, GPU_UID)}, manifest["devices"]

    space = xspace(files[0], str(tmp_path))
    planes = {p.name: p for p in space.planes}
    assert {"/device:GPU:1", "/device:CUSTOM:NeuronCore 2"} <= set(planes), list(planes)
    gpu = planes["/device:GPU:1"]
    stat_names = {k: v.name for k, v in gpu.stat_metadata.items()}
    assert [s.str_value for s in gpu.stats if stat_names[s.metadata_id] == "device_uid"] == [GPU_UID]
    assert not [s for s in planes["/device:CUSTOM:NeuronCore 2"].stats
                if stat_names[s.metadata_id] == "device_uid"]
    for plane, kernel in (("/device:GPU:1", "gpu1_kernel"), ("/device:CUSTOM:NeuronCore 2", "nc2_kernel")):
        names = {m.name for m in planes[plane].event_metadata.values()}
        assert kernel in names, (plane, names)

    # XProf's own converter shows each device with its kernel.
    shown = xprof_devices(nc_files[0], str(tmp_path), "nc")
    assert "nc2_kernel" in shown.get("/device:CUSTOM:NeuronCore 2", set()), shown
    shown = xprof_devices(files[0], str(tmp_path), "ident")
    assert "gpu1_kernel" in shown.get("/device:GPU:1", set()), shown

    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace  # noqa: PLC0415
    t = Trace()
    t.ParseFromString(open(files[1], "rb").read())
    tracks = {p.track_descriptor.name for p in t.packet if p.HasField("track_descriptor")}
    assert {"GPU 1 (%s)" % GPU_UID, "NeuronCore 2", "identhost"} <= tracks, tracks

    doc = json.load(open(files[2]))
    info = {i["device"]: (i["kind"], i["index"], i["uid"]) for i in doc["device_info"]}
    assert info["nc2"] == ("neuron_core", 2, "") and info["gpu1"] == ("gpu", 1, GPU_UID), info

    summary = open(files[3]).read()
    assert "neuron_core 2" in summary and "gpu 1 " + GPU_UID in summary, summary


def test_a_device_uid_must_be_printable(tmp_path):
    d = Daemon(tmp_path, config=CONFIG).start()
    try:
        status, message, fd = producer_hello(d, device="gpu0", uid=b"GPU 0\x1b[2J")
        assert status < 0 and fd is None and "device uid" in message, message
    finally:
        d.stop()

