"""bench-overhead's Python workload (docs/performance.md): the C
workload's shape in Python.  Pinned to the last CPU, it recurses DEPTH
Python frames deep (descend) and there runs ROUNDS rounds of three
deterministic functions with names of their own (burn_hash, burn_sort,
whose key function Python calls back from C, and burn_string), so that
a sample's stack is DEPTH + 4 Python frames (5 in burn_key) among the
interpreter's native ones: about 30 frames merged.  Then prints the seconds it took, its thread's CPU time
and its process's CPU time (start-up included), as the C workload does.
A fixed amount of work, not a fixed time (as tests/integration/py_burn.py
runs): a profiler's cost shows as more time for the same work.

usage: python3 overhead_workload.py ROUNDS"""
import os
import sys
import time

DEPTH = 12


def burn_hash(seed):
    h = seed ^ 0xCBF29CE484222325
    for i in range(4000):
        h = ((h ^ i) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def burn_key(v):
    return (v * 2654435761) & 0xFFFF


def burn_sort(seed):
    return sorted(range(seed & 0xFF, (seed & 0xFF) + 600), key=burn_key)[0]


def burn_string(seed):
    s = ""
    for i in range(600):
        s += str(i ^ seed)
    return len(s)


def descend(depth, rounds):
    if depth > 0:
        return descend(depth - 1, rounds) + 1
    x = 0
    for r in range(rounds):
        x += burn_hash(x + r) + burn_sort(r) + burn_string(r)
    return x


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) == 2 and sys.argv[1].isdigit() else 0
    if rounds <= 0:
        sys.exit(f"overhead_workload.py: give a number of rounds, not {sys.argv[1:]}")
    os.sched_setaffinity(0, {os.cpu_count() - 1})
    t0, c0 = time.monotonic(), time.thread_time()
    descend(DEPTH, rounds)
    c1, t1 = time.thread_time(), time.monotonic()
    print(f"{t1 - t0:.6f} {c1 - c0:.6f} {time.process_time():.6f}", flush=True)


main()
