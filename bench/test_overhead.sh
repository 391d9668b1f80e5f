#!/bin/bash
# bench-overhead's workloads and options, without timing (benchmarks are not
# tests): each of the three workloads runs one round and prints its time, its
# thread's and its process's CPU time; --help names the workloads, and a
# workload it does not know is refused with the ones it knows.
# usage: test_overhead.sh BENCH_OVERHEAD BENCH_OVERHEAD_NOFP PYTHON WORKLOAD_PY
set -euo pipefail
bench=$1 nofp=$2 python=$3 script=$4
fail() { echo "FAIL: $*" >&2; exit 1; }

for cmd in "$bench --run-workload 1" "$nofp --run-workload 1" "$python $script 1"; do
	out=$($cmd) || fail "$cmd exited $?"
	[[ $out =~ ^[0-9]+\.[0-9]+\ [0-9]+\.[0-9]+\ [0-9]+\.[0-9]+$ ]] ||
		fail "$cmd printed '$out', not three numbers"
done
if out=$("$bench" --run-workload 0 2>&1); then fail "--run-workload 0 accepted"; fi

help=$("$bench" --help)
for w in fp nofp python all; do
	[[ $help == *"$w"* ]] || fail "--help does not name the workload $w: $help"
done
if err=$("$bench" --workload bogus 2>&1); then fail "--workload bogus accepted"; fi
[[ $err == *"give fp, nofp, python or all"* ]] || fail "--workload bogus said: $err"
echo "ok: three workloads ran a round each; --help and --workload checked"
