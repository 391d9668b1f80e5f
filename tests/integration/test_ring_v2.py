"""Ring format version 2 end to end: at a light rate a ring keeps what its
budget allows (not a count of slots), status reports FILL as bytes over
the budget and HORIZON as the span held, a short snapshot names the lever
that keeps more, and a version-1 ring found at start is converted with
its history kept.  The version-2 reader here follows docs/ring-format.md
alone."""

import os
import struct
import time

from daemon_harness import SANITIZED, Daemon, dump, finish_producer, seq_values, start_producer

# A minute of 100 events/s, one seal a second, compressed into 12 s: the
# same 60 chunks of about 100 events each.  Version 1 held (2 MiB - 4 KiB)
# / 128 KiB = 15 of them: 15 s of the minute.
MINUTE_SEALS = 60
SEAL_S = 0.2
LIGHT_RING = """
[daemon]
seal_interval = 200ms
[rings]
budget = 2MiB
"""
V1_SLOTS = (2 * 1024 * 1024 - 4096) // (128 * 1024)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def read_v2_chunks(path):
    """The chunks a version-2 ring file holds, oldest first (section 4)."""
    data = open(path, "rb").read()
    assert data[:8] == b"RPRING01"
    version, = struct.unpack_from("<I", data, 8)
    assert version == 2
    max_chunk, align = struct.unpack_from("<II", data, 16)
    data_size, = struct.unpack_from("<Q", data, 104)
    salt = data[112:120]
    assert crc32c(data[:120]) == struct.unpack_from("<I", data, 120)[0]
    found = []
    for off in range(0, data_size, align):
        frame = data[4096 + off:4096 + off + 32]
        if frame[:4] != b"RPRE":
            continue
        length, pos, seq, reserved, crc = struct.unpack_from("<IQQII", frame, 4)
        if crc32c(salt + frame[:28]) != crc or reserved or pos % data_size != off:
            continue
        chunk = data[4096 + off + 32:4096 + off + 32 + length]
        comp, chunk_crc = struct.unpack_from("<II", chunk, 48)
        zeroed = chunk[:52] + b"\0\0\0\0" + chunk[56:64]
        if length > max_chunk or len(chunk) != 64 + comp or crc32c(zeroed + chunk[64:]) != chunk_crc:
            continue
        assert struct.unpack_from("<Q", chunk, 16)[0] == seq
        found.append((pos, seq, length, chunk))
    found.sort()
    if not found:
        return []
    pos, _, length, _ = found[-1]
    reach = (pos + 32 + length + 4095) // 4096 * 4096
    return [(seq, chunk) for pos, seq, _, chunk in found if pos + data_size >= reach]


def write_v1(path, chunks, slot_size, slots, device=b"host", device_id=0):
    """A version-1 ring file (section 4, version history) holding chunks."""
    header = bytearray(4096)
    struct.pack_into("<8sIIIIIIQ", header, 0, b"RPRING01", 1, 4096, slot_size, slots, device_id,
                     1, time.time_ns())
    header[40:40 + len(device)] = device
    struct.pack_into("<I", header, 104, crc32c(bytes(header[:104])))
    body = bytearray(slot_size * slots)
    for seq, chunk in chunks:
        at = (seq % slots) * slot_size
        body[at:at + len(chunk)] = chunk
    with open(path, "wb") as f:
        f.write(header + body)


def host_ring(d):
    return next(r for r in d.ok("GET", "/v1/status")["rings"] if r["device"] == "host")


def test_light_rate_ring_covers_the_whole_minute(tmp_path):
    d = Daemon(tmp_path, config=LIGHT_RING).start()
    try:
        run_s = MINUTE_SEALS * SEAL_S
        stats = finish_producer(start_producer(d, 100 / SEAL_S, run_s))
        time.sleep(2 * SEAL_S)
        snap = d.ok("POST", "/v1/snapshot", {"last": "5m"})
        values = [v for v, _ in seq_values(dump(snap["path"]))]
        assert stats["dropped"] == 0
        # The whole "minute", from its first event: nothing aged out.
        assert values == list(range(stats["produced"]))
        ring = host_ring(d)
        # About one chunk per seal (a few seals may find nothing new).
        assert ring["chunks"] >= MINUTE_SEALS * 0.8 > 3 * V1_SLOTS, ring
        assert ring["horizon_s"] >= run_s * 0.9, ring
        # FILL is bytes held over the budget: a little of 2 MiB, as USED says.
        assert abs(ring["fill"] - ring["bytes_used"] / ring["budget_bytes"]) < 1e-9
        assert ring["fill"] < 0.5, ring
        # ringprof status: FILL agrees with USED (chunks keep coming from
        # the sampler, so compare the line with itself, not with ring).
        out = d.cli("status", check=True).stdout
        cols = next(l for l in out.splitlines() if l.startswith("host")).split()
        of = cols.index("of")  # USED is "N KiB of M MiB", the last column
        used_kib, budget_mib = float(cols[of - 2]), float(cols[of + 1])
        assert cols[of - 1] == "KiB" and cols[of + 2] == "MiB", out
        assert abs(float(cols[1].rstrip("%")) - 100 * used_kib / 1024 / budget_mib) < 0.2, out
        # Asked for more than it has recorded: the hint says so, it does
        # not send the user to the budget.
        hint = d.cli("snapshot", "--last", "5m", check=True).stdout
        assert "has not been recording longer" in hint, hint
        assert "raise budget" not in hint, hint
    finally:
        d.stop()


def test_metrics_fill_and_horizon(tmp_path):
    d = Daemon(tmp_path, config=LIGHT_RING).start()
    try:
        finish_producer(start_producer(d, 1000, 1))
        time.sleep(2 * SEAL_S)
        ring = host_ring(d)
        status, text = d.request("GET", "/metrics")
        assert status == 200
        text = text if isinstance(text, str) else text.decode()
        fill = float(next(l.split()[-1] for l in text.splitlines()
                          if l.startswith('ringprof_ring_fill_ratio{device="host"}')))
        horizon = float(next(l.split()[-1] for l in text.splitlines()
                             if l.startswith('ringprof_ring_horizon_seconds{device="host"}')))
        assert 0 < fill < 0.5 and abs(fill - ring["bytes_used"] / ring["budget_bytes"]) < 0.01
        assert horizon > 0.5
    finally:
        d.stop()


def test_short_snapshot_names_the_lever(tmp_path):
    for sub in ("full", "aged"):
        os.mkdir(tmp_path / sub)
    # A full ring: the budget is the lever.
    d = Daemon(tmp_path / "full", config="[daemon]\nseal_interval = 100ms\n[rings]\nbudget = 1MiB\n"
               "slot_size = 16KiB\n").start()
    try:
        finish_producer(start_producer(d, 200000, 6 if SANITIZED else 3))
        ring = host_ring(d)
        assert ring["fill"] > 0.9, ring
        hint = d.cli("snapshot", "--last", "5m", check=True).stdout
        assert "ring host is full" in hint and "raise budget" in hint, hint
    finally:
        d.stop()
    # max_age shorter than the budget allows: max_age is the lever.
    d = Daemon(tmp_path / "aged", config=LIGHT_RING + "max_age = 1s\n").start()
    try:
        finish_producer(start_producer(d, 500, 4))
        ring = host_ring(d)
        assert ring["max_age_s"] == 1.0
        assert ring["horizon_s"] < 2.0, ring
        hint = d.cli("snapshot", "--last", "5m", check=True).stdout
        assert "raise or remove max_age" in hint, hint
    finally:
        d.stop()


def test_version1_ring_is_converted_with_its_history(tmp_path):
    d = Daemon(tmp_path, config=LIGHT_RING).start()
    stats = finish_producer(start_producer(d, 500, 2))
    time.sleep(2 * SEAL_S)
    d.stop()
    d.proc.wait(timeout=30)
    path = os.path.join(d.state_dir, "host.ring")
    chunks = read_v2_chunks(path)
    assert chunks and [s for s, _ in chunks] == list(range(chunks[0][0], chunks[-1][0] + 1))
    # The same history, as the previous release wrote it.
    write_v1(path, chunks, 128 * 1024, max(len(chunks), 2) + 1)
    d.start()
    try:
        log = open(d.log).read()
        assert "was a format version 1 ring file: its %d chunks were converted" % len(chunks) in log
        with open(path, "rb") as f:
            assert struct.unpack_from("<I", f.read(12), 8)[0] == 2
        assert not os.path.exists(path + ".v2new")
        snap = d.ok("POST", "/v1/snapshot", {"last": "5m"})
        values = [v for v, _ in seq_values(dump(snap["path"]))]
        assert values == list(range(stats["produced"]))
    finally:
        d.stop()
