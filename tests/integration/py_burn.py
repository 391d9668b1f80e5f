"""A Python workload with a known call chain: outer -> middle -> leaf_fib
burns most of the CPU, outer -> middle -> string_work the rest.  Runs for
the seconds given (default 4) and prints its pid first.  A second
argument puts that many frames of descend between outer and middle."""
import sys
import time


def leaf_fib(n):
    return n if n < 2 else leaf_fib(n - 1) + leaf_fib(n - 2)


def string_work():
    s = ""
    for i in range(2000):
        s += str(i)
    return len(s)


def middle(k):
    if k % 4:
        return leaf_fib(18)
    return string_work()


def descend(depth, k):
    return middle(k) if depth <= 1 else descend(depth - 1, k)


def outer(seconds, depth):
    end = time.monotonic() + seconds
    k = 0
    while time.monotonic() < end:
        if depth:
            descend(depth, k)
        else:
            middle(k)
        k += 1


print(__import__("os").getpid(), flush=True)
outer(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
