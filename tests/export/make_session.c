/* make-session: write a synthetic session with known content, for the
 * exporters' tests (tests/export/test_*.py).
 *
 *   make-session OUTDIR [--host H] [--steps N] [--samples-per-step K]
 *                       [--worker-samples W]
 *
 * Prints the session directory, OUTDIR/plugins/profile/synth.  With
 * T0 = 1 s (host clock), step i = 0..N-1 starting at s = T0 + 2 ms + i*10 ms
 * and the window [T0, T0 + 2 ms + N*10 ms + 3 ms], wall = host + 1.75e18:
 *
 * device "host": process 4242 "trainer" ("python3 train.py"), threads
 * 4242 "main" and 4243 "loader", this program's mappings; a "warmup"
 * range from T0-2ms to T0+1ms (its end has no begin in the window); 5
 * drops at T0+1ms; counter cpu_sampler_hz = 1000 at T0.  Per step: on
 * 4242 "step" [s, s+9ms-(i%3)*0.1ms] holding "forward" [s+1ms, s+4ms]
 * and "backward" [s+4ms, s+8ms], and an instant "checkpoint" at s+9.5ms
 * when i%10 == 0; on 4243 "load_batch" [s+0.5ms, s+3ms]; counters
 * cpu_util = 50+i%50 and host_mem_used = 1e9+i*4096 at s; K samples on
 * 4242 (cpu i%4) at s + j*10ms/K + 1us in synth_hot_a (j%10 < 6),
 * synth_hot_b (< 9) or synth_hot_c, called from synth_step from main.
 * A last "step" begins at T0 + 2ms + N*10ms and never ends.
 *
 * device "gpu0": per step counter sm_active = 0.8 at s; memcpy
 * "memcpy_htod" [s+1.2ms, s+1.6ms] of 1 MiB on stream 7; API call
 * "cudaLaunchKernel" on 4242 at s+1.5ms for 20us, correlation i+1,
 * which launches kernel "gemm_kernel" [s+2ms, s+3.5ms] on stream 7
 * (grid 128,2,1, block 256,1,1, 64 registers per thread, 4096 bytes of
 * static and 16384 of dynamic shared memory).
 *
 * With --worker-samples W, also on "host": process 4244 "worker"
 * ("worker --jobs 2"), its thread 4244, this program's mappings as its
 * own; per step a "job" range [s, s+5ms] on 4244 and W samples on 4244
 * (cpu (i+1)%4) at s + j*10ms/W + 2us, each of two frames: the C++
 * function synth::Kernel<float>::run(int) (synth_hot_c when the tests
 * were built without C++) called from main. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

static unsigned number(const char *s, const char *what)
{
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *end || v == 0 || v > 100000000) {
		fprintf(stderr, "make-session: %s must be a whole number from 1 to 100000000, not '%s'\n",
			what, s);
		exit(2);
	}
	return (unsigned)v;
}

static const char usage[] = "usage: make-session OUTDIR [--host H] [--steps N] "
			    "[--samples-per-step K] [--worker-samples W]\n"
			    "                    [--worker-name NAME]\n";

int main(int argc, char **argv)
{
	const char *outdir = NULL, *host = "synthhost";
	unsigned steps = 20, k = 10;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--host") == 0 && i + 1 < argc)
			host = argv[++i];
		else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
			steps = number(argv[++i], "--steps");
		else if (strcmp(argv[i], "--samples-per-step") == 0 && i + 1 < argc)
			k = number(argv[++i], "--samples-per-step");
		else if (strcmp(argv[i], "--worker-samples") == 0 && i + 1 < argc)
			synth_worker_samples = number(argv[++i], "--worker-samples");
		else if (strcmp(argv[i], "--worker-name") == 0 && i + 1 < argc)
			synth_worker_name = argv[++i];
		else if (argv[i][0] != '-' && !outdir)
			outdir = argv[i];
		else {
			fputs(usage, stderr);
			return 2;
		}
	}
	if (!outdir) {
		fputs(usage, stderr);
		return 2;
	}
	char dir[PATH_MAX];
	if (synth_session(outdir, host, steps, k, dir, sizeof(dir)) < 0)
		return 1;
	printf("%s\n", dir);
	return 0;
}
