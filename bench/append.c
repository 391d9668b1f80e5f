/* Append cost of a producer ring (shmring.h), per event, for one producer
 * thread writing range begin/end pairs (with a ~16-character name) while a
 * consumer thread drains the ring, beside its floor (rdtsc and
 * clock_gettime), the same pairs through libringprof's public API as a
 * user program calls it (bench-append-api, built from ringprof.h and
 * linked against libringprof.so through pkg-config) without a daemon and
 * into a live ringprofd, and as LTTng-UST tracepoints into a
 * snapshot-mode session.  Prints figures; it is not a pass/fail test.
 *
 * Each figure is the median of RUNS runs of PAIRS pairs (APPEND_PAIRS
 * for the append without timestamps; the public API's rows: API_RUNS
 * runs of their own sizes).  The last line, "result: ...", has a fixed
 * form for scripts. */
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "shmring.h"

#ifdef HAVE_LTTNG_UST
#include "append_tp.h"
#include "lttng_session.h"
#endif

#define RUNS 9
#define PAIRS 1500000u          /* 3 M events per run */
/* Appends without a timestamp outpace the consumer; their runs are
 * short enough (12 MB) for the ring to hold one whole. */
#define APPEND_PAIRS 250000u
/* 50 ms of events: a consumer preempted for a while (on a small, busy
 * machine) does not make the producer drop. */
#define RING_BYTES (64u << 20)
#define NAP_NS 200000           /* consumer poll interval */
/* The public API runs into a daemon with the default configuration
 * (1 MiB producer rings, drained every 10 ms).  Bursts of BURST_PAIRS
 * (48 bytes a pair: 480 KB) fit the ring and are drained in the pause
 * after each; a tight loop of LOOP_PAIRS outruns the drain, and most of
 * its events are dropped.  The internal append is also timed in the
 * bursts' shape, on a ring of the same size: the like-for-like peer. */
#define API_RUNS 21
#define BURST_PAIRS 10000u
#define BURST_PAUSE_MS 100
#define BURST_RING_BYTES (1u << 20)
#define LOOP_PAIRS 100000u

/* Names cycle so that nothing about them is a compile-time constant. */
static const char *const names[8] = {
	"forward_attn_l12", "backward_mlp_l03", "optimizer_step_0", "allreduce_grad_7",
	"dataloader_next_", "embedding_lookup", "loss_compute_x01", "checkpoint_save_",
};

static volatile uint64_t sink;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

static void pin_to_cpu(int cpu)
{
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static double floor_rdtsc(void)
{
	uint64_t sum = 0, t0 = rp_clock_now_ns();
	for (unsigned i = 0; i < 2 * PAIRS; i++)
		sum += rp_rdtsc();
	uint64_t t1 = rp_clock_now_ns();
	sink = sum;
	return (double)(t1 - t0) / (2.0 * PAIRS);
}

static double floor_clock_gettime(void)
{
	uint64_t sum = 0, t0 = rp_clock_now_ns();
	for (unsigned i = 0; i < 2 * PAIRS; i++)
		sum += rp_clock_now_ns();
	uint64_t t1 = rp_clock_now_ns();
	sink = sum;
	return (double)(t1 - t0) / (2.0 * PAIRS);
}

struct consumer {
	struct rp_shmring *ring;
	atomic_bool stop;
	_Atomic uint64_t records;
	uint64_t corrupt;
};

static int count_record(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	(void)r;
	(void)rec;
	struct consumer *c = ctx;
	atomic_store_explicit(&c->records,
			      atomic_load_explicit(&c->records, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	return 0;
}

/* Each run starts on an empty ring: wait until the consumer has taken
 * every event written so far that was not dropped (giving up after 10 s,
 * which only a consumer bug would take). */
static void wait_drained(struct consumer *c, const struct rp_shmring *p, uint64_t written)
{
	for (int waited = 0; waited < 100000; waited++) {
		if (atomic_load_explicit(&c->records, memory_order_relaxed) +
		    rp_shmring_dropped(p) >= written)
			return;
		usleep(100);
	}
	fprintf(stderr, "bench-append: the consumer did not catch up\n");
}

/* Drains like the daemon would: whatever is there, then a nap, so that
 * it reads whole cache lines the producer has left behind rather than
 * chasing it line by line. */
static void *consume(void *arg)
{
	struct consumer *c = arg;
	pin_to_cpu(1);
	const struct timespec nap = { 0, NAP_NS };
	while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
		rp_shmring_drain(c->ring, count_record, c, 0, &c->corrupt);
		nanosleep(&nap, NULL);
	}
	while (rp_shmring_drain(c->ring, count_record, c, 0, &c->corrupt) > 0)
		;
	return NULL;
}

static double run_ringprof(struct rp_shmring *p, unsigned pairs)
{
	uint64_t t0 = rp_clock_now_ns();
	for (unsigned i = 0; i < pairs; i++) {
		rp_shm_range_begin(p, rp_shmring_now(p), names[i & 7]);
		rp_shm_range_end(p, rp_shmring_now(p));
	}
	return (double)(rp_clock_now_ns() - t0) / (2.0 * pairs);
}

/* The same without reading the clock: the cost of the append alone. */
static double run_append_only(struct rp_shmring *p)
{
	uint64_t t0 = rp_clock_now_ns();
	for (unsigned i = 0; i < APPEND_PAIRS; i++) {
		rp_shm_range_begin(p, i, names[i & 7]);
		rp_shm_range_end(p, i);
	}
	return (double)(rp_clock_now_ns() - t0) / (2.0 * APPEND_PAIRS);
}

/* A ring of this process, its producer mapping and the consumer thread
 * draining it. */
struct drained_ring {
	struct rp_shmring *ring, *producer;
	struct consumer c;
	pthread_t thread;
	uint64_t written;   /* events, for wait_drained */
};

/* 0, or -1 with a message. */
static int drained_start(struct drained_ring *d, size_t bytes)
{
	struct rp_err err = { 0 };
	enum rp_shm_clock clock = rp_tsc_usable() ? RP_SHM_CLOCK_TSC : RP_SHM_CLOCK_MONOTONIC;
	*d = (struct drained_ring){ 0 };
	if (rp_shmring_create(bytes, (uint32_t)getpid(), (uint32_t)gettid(), clock, &d->ring,
			      &err) < 0 ||
	    rp_shmring_map(rp_shmring_fd(d->ring), &d->producer, &err) < 0) {
		fprintf(stderr, "bench-append: %s\n", err.msg);
		return -1;
	}
	d->c.ring = d->ring;
	if (pthread_create(&d->thread, NULL, consume, &d->c) != 0) {
		fprintf(stderr, "bench-append: cannot start the consumer thread\n");
		return -1;
	}
	return 0;
}

static void drained_stop(struct drained_ring *d)
{
	atomic_store(&d->c.stop, true);
	pthread_join(d->thread, NULL);
	rp_shmring_close(d->producer);
	rp_shmring_close(d->ring);
}

/* Returns the median ns per event, with that of the append alone in
 * *append and the drops of each phase, or a negative value (with a
 * message printed) when the ring could not be set up. */
static double bench_ringprof(double *runs, double *append_runs, double *append,
			     uint64_t *drops, uint64_t *append_drops, uint64_t *records)
{
	struct drained_ring d;
	if (drained_start(&d, RING_BYTES) < 0)
		return -1;
	for (int i = -1; i < RUNS; i++) { /* run -1 warms up */
		double ns = run_ringprof(d.producer, PAIRS);
		if (i >= 0)
			runs[i] = ns;
		d.written += 2 * PAIRS;
		wait_drained(&d.c, d.producer, d.written);
	}
	*drops = rp_shmring_dropped(d.producer);
	for (int i = 0; i < RUNS; i++) {
		append_runs[i] = run_append_only(d.producer);
		d.written += 2 * APPEND_PAIRS;
		wait_drained(&d.c, d.producer, d.written);
	}
	*append = median(append_runs, RUNS);
	*append_drops = rp_shmring_dropped(d.producer) - *drops;
	drained_stop(&d);
	*records = d.c.records;
	return median(runs, RUNS);
}

/* The appends with timestamps in the public API's bursts: a ring of the
 * daemon's default size, drained after each run.  Returns the median ns
 * per event (drops in *drops), or a negative value with a message. */
static double bench_bursts(double *runs, uint64_t *drops)
{
	struct drained_ring d;
	if (drained_start(&d, BURST_RING_BYTES) < 0)
		return -1;
	for (int i = -1; i < API_RUNS; i++) {
		double ns = run_ringprof(d.producer, BURST_PAIRS);
		if (i >= 0)
			runs[i] = ns;
		d.written += 2 * BURST_PAIRS;
		wait_drained(&d.c, d.producer, d.written);
	}
	*drops = rp_shmring_dropped(d.producer);
	drained_stop(&d);
	return median(runs, API_RUNS);
}

#ifdef HAVE_LTTNG_UST
static double run_lttng(unsigned pairs)
{
	uint64_t t0 = rp_clock_now_ns();
	for (unsigned i = 0; i < pairs; i++) {
		tracepoint(ringprof_bench, range_begin, names[i & 7], i);
		tracepoint(ringprof_bench, range_end, i);
	}
	return (double)(rp_clock_now_ns() - t0) / (2.0 * pairs);
}

/* Times the tracepoints into a snapshot session, in runs of PAIRS and in
 * the public API's bursts (its ring overwrites: nothing to wait for
 * between them).  Returns the median ns per event, that of the bursts in
 * *bursts, or a negative value with the reason in why. */
static double bench_lttng(double *runs, double *burst_runs, double *bursts, char *why,
			  size_t why_cap, uint64_t *snapshot_bytes)
{
	struct bench_lttng l;
	if (bench_lttng_start(&l, "rpbench", "/tmp", NULL, why, why_cap) < 0)
		return -1;
	run_lttng(PAIRS); /* warm-up */
	for (int i = 0; i < RUNS; i++)
		runs[i] = run_lttng(PAIRS);
	for (int i = 0; i < API_RUNS; i++)
		burst_runs[i] = run_lttng(BURST_PAIRS);
	char out[8192];
	double seconds, result = -1;
	if (bench_sh("lttng stop rpbench", out, sizeof(out)) != 0)
		snprintf(why, why_cap, "lttng stop failed: %.900s", out);
	else if (bench_lttng_snapshot(&l, &seconds, NULL, snapshot_bytes, why, why_cap) == 0) {
		if (*snapshot_bytes == 0)
			snprintf(why, why_cap, "the LTTng snapshot is empty: no event was recorded");
		else
			result = median(runs, RUNS);
	}
	*bursts = result < 0 ? -1 : median(burst_runs, API_RUNS);
	bench_lttng_end(&l);
	return result;
}
#endif

static void fmt(char *buf, size_t cap, double v)
{
	if (v < 0)
		snprintf(buf, cap, "na");
	else
		snprintf(buf, cap, "%.2f", v);
}

static void print_row(const char *what, double *runs, int n, double med)
{
	if (med < 0) {
		printf("  %-36s %10s\n", what, "n/a");
		return;
	}
	/* runs is sorted by median(). */
	printf("  %-36s %10.2f %10.2f %10.2f\n", what, med, runs[0], runs[n - 1]);
}

/* One row of the public API: ns per event of each run and their median
 * (negative: not measured), whether it reached a daemon, its drops. */
struct api_row {
	unsigned pairs, pause_ms;
	double runs[API_RUNS], ns;
	int connected;
	unsigned long long dropped;
};

/* Runs bench-append-api with RINGPROF_SOCKET naming sock: 0, or -1 with
 * a message. */
static int run_api(const char *sock, struct api_row *row)
{
	char cmd[PATH_MAX + 64], line[1024];
	snprintf(cmd, sizeof(cmd), "'%s' %d %u %u", BENCH_APPEND_API, API_RUNS, row->pairs,
		 row->pause_ms);
	setenv("RINGPROF_SOCKET", sock, 1);
	FILE *p = popen(cmd, "r");
	row->ns = -1;
	if (!p) {
		fprintf(stderr, "bench-append: cannot run %s\n", BENCH_APPEND_API);
		return -1;
	}
	bool got = false;
	while (fgets(line, sizeof(line), p)) {
		if (strncmp(line, "api: ", 5) != 0)
			continue;
		int used = 0, n = sscanf(line + 5, "%d %llu%n", &row->connected, &row->dropped, &used);
		const char *at = line + 5 + used;
		for (int i = 0; n == 2 && i < API_RUNS; i++, at += used)
			if (sscanf(at, "%lf%n", &row->runs[i], &used) != 1)
				n = 0;
		got = n == 2;
	}
	int st = pclose(p);
	if (!got || st != 0) {
		fprintf(stderr, "bench-append: %s (RINGPROF_SOCKET=%s) failed (status %d) or "
			"printed no result\n", BENCH_APPEND_API, sock, st);
		return -1;
	}
	row->ns = median(row->runs, API_RUNS);
	return 0;
}

/* Events one row wrote, its warm-up run included. */
static double api_events(const struct api_row *row)
{
	return 2.0 * row->pairs * (API_RUNS + 1);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: bench-append [--dir DIR] [--daemon PATH]\n"
		"\n"
		"ns per event of a producer ring's append, of libringprof's public API (without\n"
		"a daemon and into a live ringprofd) and of an LTTng-UST tracepoint.\n"
		"\n"
		"  --dir DIR      make the daemon's work directory under DIR, on a real disk,\n"
		"                 not tmpfs; it is removed at the end (.)\n"
		"  --daemon PATH  ringprofd to start (%s)\n", RINGPROFD_PATH);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dir", required_argument, NULL, 'd' }, { "daemon", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },      { NULL, 0, NULL, 0 },
	};
	struct bench_daemon d = { .prog = "bench-append", .path = RINGPROFD_PATH, .cpu = 1 };
	const char *parent = ".";
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
		if (bench_common_option(&d, &parent, c, optarg, usage) < 0)
			return 2;
	if (bench_no_arguments(&d, argc, argv, usage) < 0)
		return 2;

	pin_to_cpu(0);
	double r_rdtsc[RUNS], r_gettime[RUNS], r_ring[RUNS], r_lttng[RUNS] = { 0 };
	for (int i = 0; i < RUNS; i++) {
		r_rdtsc[i] = floor_rdtsc();
		r_gettime[i] = floor_clock_gettime();
	}
	double rdtsc = median(r_rdtsc, RUNS), gettime = median(r_gettime, RUNS);

	double r_append[RUNS], append = -1;
	uint64_t drops = 0, append_drops = 0, records = 0;
	double ring = bench_ringprof(r_ring, r_append, &append, &drops, &append_drops, &records);
	double r_bursts[API_RUNS];
	uint64_t burst_drops = 0;
	double bursts = bench_bursts(r_bursts, &burst_drops);

	/* The program inherits this thread's CPU 0; the daemon gets CPU 1,
	 * where the consumer thread was. */
	struct api_row none = { BURST_PAIRS, BURST_PAUSE_MS, .ns = -1 };
	struct api_row burst = { BURST_PAIRS, BURST_PAUSE_MS, .ns = -1 };
	struct api_row loop = { LOOP_PAIRS, 0, .ns = -1 };
	if (bench_workdir(&d, parent) == 0) {
		char sock[PATH_MAX];
		snprintf(sock, sizeof(sock), "%s/no-daemon.sock", d.dir);
		if (run_api(sock, &none) == 0 && none.connected) {
			fprintf(stderr, "bench-append: the public API reached a daemon at %s\n", sock);
			none.ns = -1;
		}
		if (bench_daemon_start(&d, "") == 0 && run_api(d.sock, &burst) == 0 &&
		    run_api(d.sock, &loop) == 0 && !(burst.connected && loop.connected)) {
			fprintf(stderr, "bench-append: the public API did not reach the daemon\n");
			burst.ns = loop.ns = -1;
		}
		bench_daemon_cleanup(&d);
	}

	char why[1024] = "built without lttng-ust";
	double lttng = -1, lttng_bursts = -1, r_lttng_bursts[API_RUNS] = { 0 };
	uint64_t snapshot_bytes = 0;
#ifdef HAVE_LTTNG_UST
	lttng = bench_lttng(r_lttng, r_lttng_bursts, &lttng_bursts, why, sizeof(why),
			    &snapshot_bytes);
#endif

	printf("bench-append: %d runs of %u range begin/end pairs (%u events), 16-char names\n",
	       RUNS, PAIRS, 2 * PAIRS);
	printf("  %-36s %10s %10s %10s\n", "ns per event", "median", "min", "max");
	print_row("rdtsc (floor)", r_rdtsc, RUNS, rdtsc);
	print_row("clock_gettime (floor)", r_gettime, RUNS, gettime);
	print_row("ringprof append, no timestamp", r_append, RUNS, append);
	print_row("ringprof append + timestamp", r_ring, RUNS, ring);
	print_row("ringprof append + timestamp, bursts", r_bursts, API_RUNS, bursts);
	print_row("public API, no daemon", none.runs, API_RUNS, none.ns);
	print_row("public API, daemon, bursts", burst.runs, API_RUNS, burst.ns);
	print_row("public API, daemon, tight loop", loop.runs, API_RUNS, loop.ns);
	print_row("lttng-ust tracepoint", r_lttng, RUNS, lttng);
	print_row("lttng-ust tracepoint, bursts", r_lttng_bursts, API_RUNS, lttng_bursts);
	if (ring >= 0)
		printf("ringprof: %llu records drained by the consumer thread; dropped: %llu "
		       "with timestamps, %llu without, %llu in bursts%s\n",
		       (unsigned long long)records, (unsigned long long)drops,
		       (unsigned long long)append_drops, (unsigned long long)burst_drops,
		       drops || append_drops || burst_drops
			       ? " (the ring filled: figures include refused writes)" : "");
	printf("public API: %s, linked against libringprof.so through pkg-config (the build "
	       "tree's meson-uninstalled/ringprof-uninstalled.pc); %d runs of %u pairs %d ms "
	       "apart (bursts; dropped %llu of %.0f events) and of %u pairs back to back (tight "
	       "loop; dropped %llu, %.0f%%), into a ringprofd with 1 MiB producer rings\n",
	       BENCH_APPEND_API, API_RUNS, BURST_PAIRS, BURST_PAUSE_MS, burst.dropped,
	       api_events(&burst), LOOP_PAIRS, loop.dropped,
	       100.0 * (double)loop.dropped / api_events(&loop));
	if (lttng >= 0)
		printf("lttng: snapshot session rpbench recorded %llu bytes of trace\n",
		       (unsigned long long)snapshot_bytes);
	else
		printf("lttng: n/a: %s\n", why);

	char s_ring[32], s_lttng[32], s_speed[32], s_rdtsc[32], s_gettime[32];
	char s_api[32], s_bursts[32], s_none[32], s_loop[32], s_lttng_bursts[32];
	char s_api_ratio[32], s_api_speed[32];
	fmt(s_ring, sizeof(s_ring), ring);
	fmt(s_lttng, sizeof(s_lttng), lttng);
	fmt(s_speed, sizeof(s_speed), ring > 0 && lttng >= 0 ? lttng / ring : -1);
	fmt(s_rdtsc, sizeof(s_rdtsc), rdtsc);
	fmt(s_gettime, sizeof(s_gettime), gettime);
	fmt(s_api, sizeof(s_api), burst.ns);
	fmt(s_bursts, sizeof(s_bursts), bursts);
	fmt(s_lttng_bursts, sizeof(s_lttng_bursts), lttng_bursts);
	fmt(s_none, sizeof(s_none), none.ns);
	fmt(s_loop, sizeof(s_loop), loop.ns);
	fmt(s_api_ratio, sizeof(s_api_ratio), bursts > 0 && burst.ns >= 0 ? burst.ns / bursts : -1);
	fmt(s_api_speed, sizeof(s_api_speed),
	    burst.ns > 0 && lttng_bursts >= 0 ? lttng_bursts / burst.ns : -1);
	if (ring > 0 && lttng >= 0)
		printf("lttng/ringprof: %sx\n", s_speed);
	printf("in bursts: public API/internal append: %s; lttng/public API: %sx\n",
	       s_api_ratio, s_api_speed);
	printf("result: ringprof_ns_per_event=%s lttng_ns_per_event=%s speedup_vs_lttng=%s "
	       "rdtsc_ns=%s clock_gettime_ns=%s bursts_ns_per_event=%s api_ns_per_event=%s "
	       "api_no_daemon_ns=%s api_tight_loop_ns=%s lttng_bursts_ns=%s api_vs_internal=%s "
	       "lttng_vs_api=%s\n",
	       s_ring, s_lttng, s_speed, s_rdtsc, s_gettime, s_bursts, s_api, s_none, s_loop,
	       s_lttng_bursts, s_api_ratio, s_api_speed);
	return ring < 0 || burst.ns < 0;
}
