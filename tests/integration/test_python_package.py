"""The Python package as a user gets it: `pip install ./python` into a
fresh venv (pip builds the native part from the tree's C sources), then a
script of that venv annotates into a real ringprofd and its snapshot holds
the script's ranges; the same from a wheel (`pip wheel ./python`) with the
source tree out of reach.  For the interpreter running the tests, Debian's
python3 and the oldest and newest supported Pythons of pyenv, where present.

pip's build isolation fetches setuptools, pinned by
python-build-constraints.txt.  The ASan pass of scripts/test.sh skips
these: pip builds the same unsanitized module there, and test_python.py
runs the sanitized one."""

import glob
import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT, events, ranges
from daemon_harness import SANITIZED

pytestmark = pytest.mark.skipif(SANITIZED, reason="pip builds the same module in both passes")

CONSTRAINTS = pathlib.Path(__file__).with_name("python-build-constraints.txt")
PYENV = pathlib.Path(os.environ.get("PYENV_ROOT", pathlib.Path.home() / ".pyenv"))

SCRIPT = """
import json, os, sys, ringprof

@ringprof.annotate
def step(i):
    with ringprof.annotate("user.inner"):
        ringprof.counter("user.loss", i / 2)

for i in range(50):
    with ringprof.annotate("user.block"):
        step(i)
ringprof.instant("user.done")
session = ringprof.snapshot(last="5s", reason="test_python_package")
print(json.dumps({"pid": os.getpid(), "connected": ringprof.connected(),
                  "dropped": ringprof.dropped(), "package": ringprof.__file__,
                  "version": sys.version_info[:2], "session": session}))
"""


def pyenv_python(minor):
    """pyenv's newest 3.<minor>, or None."""
    found = sorted(glob.glob(str(PYENV / "versions" / f"3.{minor}.*" / "bin" / "python3")),
                   key=lambda p: int(p.split("/")[-3].split(".")[2]))
    return found[-1] if found else None


PYTHONS = {
    "running": sys.executable,
    "debian": "/usr/bin/python3",
    "pyenv-3.10": pyenv_python(10),
    "pyenv-3.13": pyenv_python(13),
}


def make_venv(python, path):
    if not python or not os.path.exists(python):
        pytest.skip(f"no such Python here: {python}")
    out = subprocess.run([python, "-m", "venv", str(path)], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0 and "ensurepip" in out.stdout + out.stderr:
        pytest.skip(f"{python} cannot make a venv with pip (install python3-venv)")
    assert out.returncode == 0, out.stdout + out.stderr
    return path / "bin" / "python"


def pip(venv_python, *args):
    out = subprocess.run([str(venv_python), "-m", "pip", "--no-input", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PIP_CONSTRAINT": str(CONSTRAINTS)})
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def run_script(venv_python, cwd, daemon):
    """SCRIPT in the venv, away from the source tree; returns its report."""
    script = cwd / "user_script.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([str(venv_python), str(script)], cwd=cwd, capture_output=True,
                         text=True, timeout=120, env={**env, "RINGPROF_SOCKET": daemon.socket})
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    return json.loads(out.stdout)


def check_report(report, venv):
    assert report["connected"] and report["dropped"] == 0
    # The installed copy, not the tree's python/.
    assert pathlib.Path(report["package"]).is_relative_to(venv)
    done, _ = ranges(events(report["session"], pid=report["pid"]))
    assert done["user.block"] == 50 and done["step"] == 50 and done["user.inner"] == 50
    evs = events(report["session"], pid=report["pid"])
    assert [e["value"] for e in evs if e.get("name") == "user.loss"] == [i / 2 for i in range(50)]


@pytest.mark.parametrize("which", list(PYTHONS))
def test_pip_install_into_a_fresh_venv_annotates_into_the_daemon(ringprofd, tmp_path, which):
    venv_python = make_venv(PYTHONS[which], tmp_path / "venv")
    pip(venv_python, "install", "./python")
    report = run_script(venv_python, tmp_path, ringprofd)
    print(f"{which}: Python {report['version']}")
    check_report(report, tmp_path / "venv")


def test_a_wheel_carries_the_native_part(ringprofd, tmp_path):
    """`pip wheel ./python`, installed elsewhere without an index or the
    tree: the wheel alone is the working package."""
    venv_python = make_venv(sys.executable, tmp_path / "venv")
    pip(venv_python, "wheel", "--no-deps", "-w", str(tmp_path / "wheels"), "./python")
    (wheel,) = (tmp_path / "wheels").glob("ringprof-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("ringprof/_ringprof.") and n.endswith(".so") for n in names)
    assert "ringprof/__init__.py" in names and "ringprof/_api.py" in names
    assert not [n for n in names if n.endswith(".c")]
    pip(venv_python, "install", "--no-index", str(wheel))
    check_report(run_script(venv_python, tmp_path, ringprofd), tmp_path / "venv")
