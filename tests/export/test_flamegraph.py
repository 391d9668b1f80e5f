"""Flame graph (SVG) and folded stacks, read back: the SVG by Python's XML
parser, the folded text line by line against `go tool pprof`'s reading of
the pprof export of the same session.

make-session's CPU samples are known exactly (see test_pprof.py): per step
K samples of process 4242 ("trainer"), 60% in synth_hot_a, 30% in
synth_hot_b, 10% in synth_hot_c, each under synth_step under main; with
--worker-samples W, W more a step of process 4244 ("worker") in a C++
function whose name holds '<' and '>' (XML must escape them)."""

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from synth_session import CLI, CPP_NAME, HAVE_CPP, MAKE_SESSION, WORKER, export, run, worker_session

SVG = "{http://www.w3.org/2000/svg}"
STEPS, K, W = 20, 10, 5


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return worker_session(tmp_path_factory.mktemp("flame"), steps=STEPS, k=K, w=W)


def frames(path):
    """[(name, samples, rect width, depth)] of every frame the SVG draws."""
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    out = []
    for g in root.find(SVG + "g[@id='frames']").findall(SVG + "g"):
        title = g.find(SVG + "title").text
        m = re.match(r"^(.*) \((\d+) samples, ([\d.]+)%\)$", title)
        assert m, title
        rect = g.find(SVG + "rect")
        out.append((m.group(1), int(m.group(2)), float(rect.get("width")), int(g.get("data-d"))))
        assert int(g.get("data-n")) == int(m.group(2))
    return out


def by_name(fs):
    return {name: (n, w) for name, n, w, _ in fs}


def test_svg_parses_and_widths_follow_samples(session, tmp_path):
    path = export(session, "flamegraph", tmp_path / "f.svg")
    fs = by_name(frames(path))
    a, b, c = STEPS * K * 6 // 10, STEPS * K * 3 // 10, STEPS * K // 10
    assert fs["synth_hot_a"][0] == a and fs["synth_hot_b"][0] == b and fs["synth_hot_c"][0] == c
    assert fs["synth_step"][0] == STEPS * K
    assert fs["trainer (4242)"][0] == STEPS * K
    assert fs[f"worker ({WORKER})"][0] == STEPS * W
    # Widths are proportional to samples: 60/30/10 within the rounding of
    # two decimals.
    scale = fs["synth_step"][1] / fs["synth_step"][0]
    for name in ("synth_hot_a", "synth_hot_b", "synth_hot_c", f"worker ({WORKER})"):
        assert fs[name][1] == pytest.approx(fs[name][0] * scale, abs=0.02), name
    assert fs["synth_hot_a"][1] == pytest.approx(2 * fs["synth_hot_b"][1], abs=0.05)
    assert fs["synth_hot_b"][1] == pytest.approx(3 * fs["synth_hot_c"][1], abs=0.05)
    # The whole graph is the width of both processes.
    assert fs["trainer (4242)"][1] + fs[f"worker ({WORKER})"][1] == pytest.approx(1180, abs=0.05)
    text = path.read_text()
    assert "<script" in text and "http" not in text.replace("http://www.w3.org/2000/svg", ""), \
        "self-contained: nothing fetched"


@pytest.mark.skipif(not HAVE_CPP, reason="the tests were built without a C++ compiler")
def test_svg_escapes_names(session, tmp_path):
    fs = by_name(frames(export(session, "flamegraph", tmp_path / "f.svg")))
    assert fs[CPP_NAME][0] == STEPS * W, fs


def test_hostile_names_stay_valid_xml(tmp_path):
    """A process name with XML's special characters, a byte that is not
    UTF-8, a control character and 300 two-byte characters (the label is
    cut to fit, never inside one): the SVG still parses, the folded line
    stays one line."""
    name = b"<a&b>\"c'd;\xff\x1b" + "\u00e9".encode() * 300
    out = subprocess.run([MAKE_SESSION, tmp_path, "--steps", "2", "--samples-per-step", "10",
                          "--worker-samples", "5", "--worker-name", name],
                         capture_output=True, timeout=60, check=True)
    session = out.stdout.decode().strip()
    fs = frames(export(session, "flamegraph", tmp_path / "f.svg"))
    roots = [f[0] for f in fs if f[3] == 1]
    hostile = [r for r in roots if r.startswith("<a&b>")]
    assert len(hostile) == 1, roots
    assert hostile[0].startswith("<a&b>\"c'd;\\xff\\x1b\u00e9"), hostile
    svg = (tmp_path / "f.svg").read_bytes()
    svg.decode("utf-8")  # strict: every byte is UTF-8
    text = ET.parse(tmp_path / "f.svg").getroot().find(SVG + "g[@id='frames']")
    labels = [g.find(SVG + "text").text or "" for g in text.findall(SVG + "g")]
    assert any(label.endswith("\u00e9..") for label in labels), labels
    lines = export(session, "folded", tmp_path / "s.folded").read_text().splitlines()
    assert len(lines) == 4, lines  # three trainer leaves, one worker stack
    worker = [line for line in lines if line.startswith("<a&b>")]
    assert len(worker) == 1 and worker[0].startswith("<a&b>\"c'd:\\xff"), worker


def test_svg_of_one_process(session, tmp_path):
    fs = frames(export(session, "flamegraph", tmp_path / "f.svg", "--pid", WORKER))
    roots = [f for f in fs if f[3] == 1]
    assert [r[0] for r in roots] == [f"worker ({WORKER})"] and roots[0][1] == STEPS * W
    assert roots[0][2] == pytest.approx(1180, abs=0.05), "one process takes the whole width"
    assert "synth_hot_a" not in by_name(fs)


def folded(path):
    """{stack (tuple, root first): count} of a folded file."""
    out = {}
    for line in path.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        out[tuple(stack.split(";"))] = out.get(tuple(stack.split(";")), 0) + int(count)
    return out


def test_folded_stacks(session, tmp_path):
    stacks = folded(export(session, "folded", tmp_path / "s.folded"))
    t = ("trainer (4242)", "main", "synth_step")
    assert stacks[t + ("synth_hot_a",)] == STEPS * K * 6 // 10
    assert stacks[t + ("synth_hot_b",)] == STEPS * K * 3 // 10
    assert stacks[t + ("synth_hot_c",)] == STEPS * K // 10
    assert sum(stacks.values()) == STEPS * (K + W)


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed (golang-go)")
def test_folded_round_trips_against_pprof(session, tmp_path):
    """Each leaf's samples and the total are pprof's (1 sample = 1 ms at
    make-session's 1000 Hz)."""
    stacks = folded(export(session, "folded", tmp_path / "s.folded"))
    top = run("go", "tool", "pprof", "-top", "-unit=ms",
              export(session, "pprof", tmp_path / "p.pb.gz"))
    total = int(re.search(r"Total samples = (\d+)ms", top).group(1))
    assert sum(stacks.values()) == total, top
    flat = {}
    for stack, n in stacks.items():
        flat[stack[-1]] = flat.get(stack[-1], 0) + n
    for name, n in flat.items():
        m = re.search(r"^\s+(\d+)ms\s+[\d.]+%\s+[\d.]+%\s+\d+ms\s+[\d.]+%\s+" + re.escape(name) + "$",
                      top, re.M)
        assert m and int(m.group(1)) == n, (name, n, top)


def test_export_prints_what_it_wrote(session, tmp_path):
    out = run(CLI, "export", session, "--format", "flamegraph,folded")
    for suffix in (".flamegraph.svg", ".folded"):
        m = re.search(r"^wrote (\S+" + re.escape(suffix) + r") \((\d+(?:\.\d)? (?:B|KiB|MiB))\)$",
                      out, re.M)
        assert m, out
    one = tmp_path / "one.folded"
    out = run(CLI, "export", session, "--format", "folded", "-o", one)
    assert out == f"wrote {one} ({one.stat().st_size} B)\n"

