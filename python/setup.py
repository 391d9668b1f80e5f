"""Builds ringprof's native part, the ringprof._ringprof extension, from
the C sources of the ringprof tree this directory is in: libringprof's
annotations (lib/ringprof.c without its session calls) and the ring and
handshake code they use, compiled into the module with hidden visibility,
so that nothing but the module's init leaves it.  Neither an installed
libringprof nor a meson build is needed.

pip (>= 21.3) builds a local directory in place, so `pip install ./python`
and `pip wheel ./python` find the sources in ../lib, ../ringbuf, ../util.
An sdist cannot carry them: build from a checkout."""

import pathlib
import platform
import re

from setuptools import Extension, setup

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ["lib/ringprof.c", "producer/producer.c", "ringbuf/shmring.c", "common/clock.c",
           "common/err.c", "util/hello.c", "util/parse.c", "util/paths.c"]
INCLUDES = ["lib/include", "common", "producer", "ringbuf", "util"]

missing = [s for s in SOURCES if not (ROOT / s).is_file()]
if missing:
    raise SystemExit(
        f"ringprof's Python package builds its native part from the ringprof source "
        f"tree around it, but {ROOT} lacks {', '.join(missing)}: install it from a "
        "checkout of ringprof with pip >= 21.3 (pip install ./python), not from a "
        "copy of the python/ directory alone or an sdist")

# The version is written once, in meson.build's project().
VERSION = re.search(r"version\s*:\s*'([^']+)'", (ROOT / "meson.build").read_text()).group(1)

flags = ["-std=gnu17", "-D_GNU_SOURCE", "-DRINGPROF_NO_SESSIONS", "-fvisibility=hidden",
         "-fno-omit-frame-pointer"]
if platform.machine() in ("x86_64", "AMD64"):
    # TLS descriptors: the per-thread state without a __tls_get_addr call
    # per annotation in a dlopen'ed module (aarch64 has them by default).
    flags.append("-mtls-dialect=gnu2")

setup(version=VERSION, ext_modules=[Extension(
    "ringprof._ringprof",
    sources=["ringprof/_ringprof.c"] + [str(ROOT / s) for s in SOURCES],
    include_dirs=[str(ROOT / d) for d in INCLUDES],
    # A rebuild in place (python/build) follows header changes too.
    depends=sorted(str(h) for d in INCLUDES for h in (ROOT / d).rglob("*.h")),
    define_macros=[("RINGPROF_VERSION", f'"{VERSION}"')],
    extra_compile_args=flags,
    # Thread-exit destructors point into the module: never unload it.
    extra_link_args=["-Wl,-z,nodelete"],
)])
