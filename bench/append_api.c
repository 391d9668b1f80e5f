/* The public annotation API as a user program calls it: built from the
 * public header alone and linked against libringprof.so through
 * pkg-config (bench/cc_pkgconfig.sh), so that every call goes through the
 * PLT into the shared library.  bench-append runs it with and without a
 * daemon (RINGPROF_SOCKET) and reads its last line.
 *
 * Usage: bench-append-api RUNS PAIRS PAUSE_MS.  Times RUNS runs (after
 * one warm-up, which also connects) of PAIRS ringprof_range_begin/end
 * pairs with the same 16-character names as bench-append, pausing
 * PAUSE_MS between runs so that a daemon can drain the ring.
 * Prints "api: CONNECTED DROPPED NS..." (ns per event of each run). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ringprof/ringprof.h>

#define RUNS_MAX 64

static const char *const names[8] = {
	"forward_attn_l12", "backward_mlp_l03", "optimizer_step_0", "allreduce_grad_7",
	"dataloader_next_", "embedding_lookup", "loss_compute_x01", "checkpoint_save_",
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double run(unsigned pairs)
{
	uint64_t t0 = now_ns();
	for (unsigned i = 0; i < pairs; i++) {
		ringprof_range_begin(names[i & 7]);
		ringprof_range_end();
	}
	return (double)(now_ns() - t0) / (2.0 * pairs);
}

int main(int argc, char **argv)
{
	int runs = argc > 3 ? atoi(argv[1]) : 0;
	long pairs = argc > 3 ? atol(argv[2]) : 0, pause_ms = argc > 3 ? atol(argv[3]) : -1;
	if (runs < 1 || runs > RUNS_MAX || pairs < 1 || pairs > 100000000 || pause_ms < 0 ||
	    pause_ms > 10000) {
		fprintf(stderr, "usage: bench-append-api RUNS(1-%d) PAIRS PAUSE_MS(0-10000)\n",
			RUNS_MAX);
		return 2;
	}
	const struct timespec pause = { pause_ms / 1000, pause_ms % 1000 * 1000000L };
	double ns[RUNS_MAX];
	for (int i = -1; i < runs; i++) {
		double v = run((unsigned)pairs);
		if (i >= 0)
			ns[i] = v;
		nanosleep(&pause, NULL);
	}
	printf("api: %d %llu", ringprof_connected(), (unsigned long long)ringprof_dropped());
	for (int i = 0; i < runs; i++)
		printf(" %.3f", ns[i]);
	printf("\n");
	return 0;
}
