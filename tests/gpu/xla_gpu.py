"""The GPU check's XLA workload (tests/gpu/run.sh): JAX on the GPU serving
its profiler and registered with ringprofd, as ringprof.xla.attach() does
(the package's control-API client is loaded from the source tree: its
native part is not built for the machine's Python).  Runs a jitted
matmul step for SECONDS inside StepTraceAnnotations and prints one JSON
line: pid, steps, its wall-clock bounds (ns), the JAX devices."""
import importlib.util
import json
import os
import pathlib
import socket
import sys
import time

import jax
import jax.numpy as jnp

seconds = float(sys.argv[1])
src = pathlib.Path(__file__).resolve().parents[2] / "python" / "ringprof" / "_api.py"
spec = importlib.util.spec_from_file_location("ringprof_api", src)
api = importlib.util.module_from_spec(spec)
spec.loader.exec_module(api)

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
jax.profiler.start_server(port)
api.request("POST", "/v1/xla/endpoints", {"address": f"127.0.0.1:{port}", "pid": os.getpid()})


@jax.jit
def train_step(w, x):
    return w - 1e-3 * jnp.tanh(x @ w).T @ x


key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (2048, 2048))
x = jax.random.normal(key, (2048, 2048))
w = train_step(w, x).block_until_ready()
t0 = time.time_ns()
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    with jax.profiler.StepTraceAnnotation("train", step_num=n):
        w = train_step(w, x).block_until_ready()
    n += 1
print(json.dumps({"pid": os.getpid(), "steps": n, "bounds": [t0, time.time_ns()],
                  "devices": [str(d) for d in jax.devices()], "address": f"127.0.0.1:{port}"}))
