"""A Python -> C -> Python workload: sort_with_qsort hands libc's qsort a
ctypes callback, and the callback (compare) burns CPU in Python, so most
samples hold Python frames, qsort's, then Python frames again.  Runs for
the seconds given (default 3) and prints its pid first."""
import ctypes
import ctypes.util
import sys
import time

LIBC = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))


def weigh(x):
    w = 0
    for i in range(200):
        w += (x * i) % 7
    return w


def compare(a, b):
    return weigh(a[0]) - weigh(b[0]) or a[0] - b[0]


def sort_with_qsort(values):
    arr = (ctypes.c_int * len(values))(*values)
    LIBC.qsort(arr, len(values), ctypes.sizeof(ctypes.c_int), CMP(compare))
    return list(arr)


def main(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sort_with_qsort(list(range(64, 0, -1)))


if __name__ == "__main__":
    print(__import__("os").getpid(), flush=True)
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 3)
