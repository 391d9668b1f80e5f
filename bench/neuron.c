/* What the Neuron collector adds to a runtime call (docs/neuron.md).
 *
 *   bench-neuron [--calls N] [--dir DIR] [--daemon PATH]
 *
 * The workload calls nrt_execute and nrt_tensor_read of the stand-in
 * libnrt (tests/neuron, every call returning at once: FAKE_NRT_NO_WAIT),
 * in the same run both bare (the runtime's own function, found by dlsym on
 * libnrt's handle) and intercepted (through libringprof-neuron.so, which
 * the benchmark preloads by running itself again).  Three phases: no
 * daemon (the collector finds none), then a ringprofd started here that
 * drains the rings.  Prints ns per call for each, the difference and the
 * ratio (target: at most 100 ns added per call with a daemon), then a
 * result line.  The bare call is the reference: no peer records the
 * Neuron runtime's calls without the real runtime (Neuron Profiler's
 * NEURON_RT_INSPECT_ENABLE is libnrt's own). */
#include <dlfcn.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "nrt_api.h"

#define ROUNDS 15

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct calls {
	__typeof__(&nrt_execute) execute;
	__typeof__(&nrt_tensor_read) read;
};

/* ns per call (an execute and a read each round), one round of n. */
static double round_ns(const struct calls *c, nrt_model_t *m, const nrt_tensor_t *t, long n)
{
	char buf[64];
	double t0 = now_ns();
	for (long i = 0; i < n; i++) {
		(void)c->execute(m, NULL, NULL);
		(void)c->read(t, buf, 0, sizeof(buf));
	}
	return (now_ns() - t0) / (double)n / 2;
}

#define TARGET_NS 100.0

/* One phase's medians, ns per call. */
struct phase {
	double bare, wrapped;
};

static int measure(const char *label, long n, struct phase *out)
{
	void *h = dlopen("libnrt.so.1", RTLD_NOW | RTLD_NOLOAD);
	struct calls bare = { h ? (__typeof__(bare.execute))dlsym(h, "nrt_execute") : NULL,
			      h ? (__typeof__(bare.read))dlsym(h, "nrt_tensor_read") : NULL };
	struct calls wrapped = { nrt_execute, nrt_tensor_read };
	if (!bare.execute || !bare.read || (void *)bare.execute == (void *)wrapped.execute) {
		fprintf(stderr, "bench-neuron: the collector is not interposed on libnrt\n");
		return -1;
	}
	nrt_model_t *m = NULL;
	nrt_tensor_t *t = NULL;
	static const char neff[64] = "NEFF";
	if (nrt_load(neff, sizeof(neff), 0, -1, &m) != NRT_SUCCESS ||
	    nrt_tensor_allocate(NRT_TENSOR_PLACEMENT_DEVICE, 0, 64, "bench", &t) != NRT_SUCCESS) {
		fprintf(stderr, "bench-neuron: the stand-in runtime refused to load\n");
		return -1;
	}
	/* Over a second of calls first: rings that found no daemon ask again
	 * once a second; then they are mapped and their pages touched. */
	for (double t0 = now_ns(); now_ns() - t0 < 1.5e9;)
		(void)round_ns(&wrapped, m, t, 1000);
	/* Bare and intercepted in turns, so that a busy moment of the
	 * machine falls on both alike; medians of ROUNDS. */
	double vb[ROUNDS], vw[ROUNDS];
	for (int r = 0; r < ROUNDS; r++) {
		vb[r] = round_ns(&bare, m, t, n);
		vw[r] = round_ns(&wrapped, m, t, n);
	}
	double b = bench_median(vb, ROUNDS), w = bench_median(vw, ROUNDS);
	printf("%-10s bare %.1f ns/call, intercepted %.1f ns/call, added %.1f ns (target <= %.0f), "
	       "ratio %.2f\n", label, b, w, w - b, TARGET_NS, w / b);
	*out = (struct phase){ b, w };
	nrt_tensor_free(&t);
	(void)nrt_unload(m);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: bench-neuron [--calls N] [--dir DIR] [--daemon PATH]\n");
}

int main(int argc, char **argv)
{
	if (!getenv("LD_PRELOAD")) {
		/* Run again with the collector preloaded. */
		(void)setenv("LD_PRELOAD", NEURON_LIB_PATH, 1);
		(void)setenv("FAKE_NRT_NO_WAIT", "1", 1);
		(void)setenv("RINGPROF_QUIET", "1", 1);
		/* The API calls alone: the stand-in's trace costs the bare
		 * call too. */
		(void)setenv("RINGPROF_NEURON_TRACE", "0", 1);
		execv("/proc/self/exe", argv);
		perror("bench-neuron: exec");
		return 1;
	}
	struct bench_daemon d = { .prog = "bench-neuron", .path = RINGPROFD_PATH, .cpu = -1 };
	const char *parent = ".";
	long n = 200000;
	static const struct option opts[] = {
		{ "calls", required_argument, NULL, 'n' }, { "dir", required_argument, NULL, 'd' },
		{ "daemon", required_argument, NULL, 'D' }, { "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'n')
			n = strtol(optarg, NULL, 10) > 0 ? strtol(optarg, NULL, 10) : n;
		else if (bench_common_option(&d, &parent, c, optarg, usage) < 0)
			return 2;
	}
	if (bench_no_arguments(&d, argc, argv, usage) < 0)
		return 2;
	if (bench_workdir(&d, parent) < 0)
		return 1;
	/* No daemon yet: the collector's socket leads nowhere. */
	char nowhere[PATH_MAX];
	(void)snprintf(nowhere, sizeof(nowhere), "%s/none.sock", d.dir);
	(void)setenv("RINGPROF_SOCKET", nowhere, 1);
	if (nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") != NRT_SUCCESS)
		return 1;
	struct phase none = { 0 }, drained = { 0 };
	int rc = measure("no daemon", n, &none);
	nrt_close();
	if (rc == 0 && bench_daemon_start(&d, "[producers]\nring_size = 64MiB\n") < 0)
		rc = -1;
	if (rc == 0) {
		(void)setenv("RINGPROF_SOCKET", d.sock, 1);
		/* The rings that found none ask again within a second: the
		 * warm-up of measure() covers that. */
		rc = nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", "") == NRT_SUCCESS ? 0 : -1;
		if (rc == 0)
			rc = measure("daemon", n, &drained);
		nrt_close();
	}
	if (rc == 0)
		printf("result: bare_ns=%.1f no_daemon_added_ns=%.1f daemon_added_ns=%.1f "
		       "daemon_ratio=%.2f within_target=%d\n", drained.bare, none.wrapped - none.bare,
		       drained.wrapped - drained.bare, drained.wrapped / drained.bare,
		       drained.wrapped - drained.bare <= TARGET_NS);
	bench_daemon_cleanup(&d);
	return rc < 0;
}
