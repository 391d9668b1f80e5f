"""A JAX training loop with a profiler server, the peer of the XLA pull tests.

Usage: xla_train.py PORT SECONDS [STEP_LOG [TRACE_DIR]]
Starts jax.profiler's server on PORT (0: none; "attach": through
ringprof.xla.attach(), which registers it with ringprofd), compiles a jitted train
step, prints "ready" and then runs steps, each inside a StepTraceAnnotation
named "train" (step_num = the step), for SECONDS.  Every 64th step is
bracketed in STEP_LOG ("step N BEFORE AFTER", CLOCK_MONOTONIC ns read just
outside the annotation), which the tests hold the pulled times against, and
so is the last step.
With TRACE_DIR the whole run is also traced in-process with
jax.profiler.trace.
"""
import sys
import time

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x, y):
    def loss(w):
        return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
    return w - 0.01 * jax.grad(loss)(w)


def main():
    seconds = float(sys.argv[2])
    if sys.argv[1] == "attach":
        import ringprof  # noqa: PLC0415
        ringprof.xla.attach()
    elif int(sys.argv[1]):
        jax.profiler.start_server(int(sys.argv[1]))
    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (64, 64))
    x = jax.random.normal(key, (128, 64))
    y = jnp.zeros((128, 64))
    w = train_step(w, x, y).block_until_ready()
    print("ready", flush=True)
    log = open(sys.argv[3], "w", buffering=1) if len(sys.argv) > 3 else None
    mono = time.CLOCK_MONOTONIC
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        before = time.clock_gettime_ns(mono)
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            w = train_step(w, x, y).block_until_ready()
        after = time.clock_gettime_ns(mono)
        if log and step % 64 == 0:
            log.write(f"step {step} {before} {after}\n")
        step += 1
    if log and (step - 1) % 64:
        log.write(f"step {step - 1} {before} {after}\n")
    print("steps", step, flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 4:
        with jax.profiler.trace(sys.argv[4]):
            main()
    else:
        main()
