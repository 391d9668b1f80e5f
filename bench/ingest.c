/* bench/ingest: events per second end to end, from two producer threads
 * through shared-memory rings, chunk encoding, LZ4 and io_uring into a
 * ring file, and bytes per event on disk.  The same run measures the
 * peers: plain LZ4_compress_default on the producers' raw records, and
 * memcpy bandwidth.
 *
 *   bench-ingest [--dir DIR] [--events N] [--horizon-only]
 *
 * Phase 1 runs the producers as fast as the pipeline takes their events
 * (they wait for room instead of dropping): what it sustains.  Phase 2
 * paces them at 80% of that with the ordinary never-waiting writes and
 * must show zero drops.  Phase 3 measures the horizon a 64 MiB ring
 * reaches at 1k, 100k and 10M events/s (time simulated: event timestamps
 * advance at the rate, a chunk seals every simulated second or when
 * full) against budget / (compressed bytes per second). */
#include <errno.h>
#include <getopt.h>
#include <lz4.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "drain.h"
#include "ringfile.h"
#include "shmring.h"

#define PRODUCERS 2
#define RING_BYTES (8u << 20)

static const char *const names[] = {
	"train_step", "forward", "backward", "allreduce",
	"optimizer", "dataloader", "h2d_copy", "eval",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

struct producer {
	pthread_t thread;
	int fd;
	uint64_t pairs;          /* range begin/end pairs to write */
	double pairs_per_s;      /* 0: as fast as the pipeline takes them */
	atomic_bool done;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	struct rp_shmring *r;
	if (rp_shmring_map(p->fd, &r, NULL) < 0)
		return NULL;
	uint64_t start = rp_clock_now_ns();
	/* Names in an irregular order, as phases of real code interleave;
	 * a fixed rotation would flatter the compression. */
	uint32_t x = 2463534242u + (uint32_t)p->fd;
	for (uint64_t i = 0; i < p->pairs; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		/* Unpaced, wait for room rather than drop: the figure is what
		 * the pipeline sustains without losing anything. */
		while (p->pairs_per_s == 0 && rp_shmring_free_bytes(r) < 256)
			sched_yield();
		rp_shm_range_begin(r, rp_shmring_now(r), names[x % NNAMES]);
		rp_shm_range_end(r, rp_shmring_now(r));
		if (p->pairs_per_s > 0 && (i & 1023) == 1023) {
			/* Pace in batches; sleeping hands the core to the drain. */
			uint64_t due = start + (uint64_t)((double)(i + 1) / p->pairs_per_s * 1e9);
			uint64_t now = rp_clock_now_ns();
			if (due > now) {
				struct timespec ts = { .tv_sec = (time_t)((due - now) / 1000000000u),
						       .tv_nsec = (long)((due - now) % 1000000000u) };
				nanosleep(&ts, NULL);
			}
		}
	}
	rp_shmring_close(r);
	atomic_store(&p->done, true);
	return NULL;
}

struct ingest_result {
	double seconds;
	uint64_t events, drops;
	double bytes_per_event, ratio;
	bool direct_io;
};

static int run_ingest(const char *dir, uint64_t pairs_per_producer, double pairs_per_s,
		      struct ingest_result *res)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/bench-ingest.ring", dir);
	unlink(path);
	struct rp_err err = { 0 };
	struct rp_ringfile *rf;
	struct rp_ringfile_opts ro = { .device = "host", .budget_bytes = 512ull << 20,
				       .slot_size = 256 << 10, .queue_depth = 16 };
	struct rp_drain *d;
	if (rp_ringfile_open(path, &ro, &rf, &err) < 0 || rp_drain_new(rf, NULL, &d, &err) < 0) {
		fprintf(stderr, "bench-ingest: %s\n", err.msg);
		return -1;
	}
	enum rp_shm_clock clock = rp_tsc_usable() ? RP_SHM_CLOCK_TSC : RP_SHM_CLOCK_MONOTONIC;
	struct producer prod[PRODUCERS];
	uint64_t t0 = rp_clock_now_ns();
	for (int i = 0; i < PRODUCERS; i++) {
		struct rp_shmring *ring;
		if (rp_shmring_create(RING_BYTES, (uint32_t)getpid(), 100 + (uint32_t)i, clock, &ring, &err) < 0 ||
		    rp_drain_attach(d, ring) < 0) {
			fprintf(stderr, "bench-ingest: %s\n", err.msg);
			return -1;
		}
		prod[i] = (struct producer){ .fd = rp_shmring_fd(ring), .pairs = pairs_per_producer,
					     .pairs_per_s = pairs_per_s };
		atomic_init(&prod[i].done, false);
		pthread_create(&prod[i].thread, NULL, produce, &prod[i]);
	}
	for (;;) {
		bool all_done = true;
		for (int i = 0; i < PRODUCERS; i++)
			all_done &= atomic_load(&prod[i].done);
		long n = rp_drain_poll(d, &err);
		if (n < 0) {
			fprintf(stderr, "bench-ingest: %s\n", err.msg);
			return -1;
		}
		if (all_done && n == 0)
			break;
		if (n == 0)
			sched_yield();
	}
	if (rp_drain_flush(d, &err) < 0) {
		fprintf(stderr, "bench-ingest: %s\n", err.msg);
		return -1;
	}
	res->seconds = (double)(rp_clock_now_ns() - t0) / 1e9;
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(prod[i].thread, NULL);
	struct rp_drain_stats ds;
	rp_drain_stats(d, &ds);
	struct rp_ringfile_stats rs;
	rp_ringfile_stats(rf, &rs);
	res->events = ds.events;
	res->drops = ds.producer_drops;
	res->bytes_per_event = (double)ds.comp_bytes / (double)ds.events;
	res->ratio = (double)ds.raw_bytes / (double)ds.comp_bytes;
	res->direct_io = rs.direct_io;
	rp_drain_free(d);
	rp_ringfile_close(rf);
	unlink(path);
	return 0;
}

#define HORIZON_BUDGET (64ull << 20)

struct horizon_result {
	double horizon_s;   /* span the ring holds once it has wrapped */
	double expected_s;  /* budget / compressed bytes per second */
	double bytes_per_s; /* compressed, chunk headers included */
};

/* Feed rate events/s of simulated time (ranges, names in an irregular
 * order) through a drain into a 64 MiB ring, a seal each simulated second,
 * until it has taken twice its budget. */
static int run_horizon(const char *dir, double rate, struct horizon_result *res)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/bench-horizon.ring", dir);
	unlink(path);
	struct rp_err err = { 0 };
	struct rp_ringfile *rf;
	struct rp_ringfile_opts ro = { .device = "host", .budget_bytes = HORIZON_BUDGET };
	struct rp_drain *d;
	if (rp_ringfile_open(path, &ro, &rf, &err) < 0 || rp_drain_new(rf, NULL, &d, &err) < 0) {
		fprintf(stderr, "bench-ingest: %s\n", err.msg);
		return -1;
	}
	uint64_t t0 = rp_clock_now_ns(), ts = t0, seconds = 0;
	double step = 1e9 / rate, due = (double)t0;
	uint32_t x = 2463534242u;
	struct rp_drain_stats ds = { 0 };
	int rc = 0;
	while (rc == 0 && ds.comp_bytes < 2 * HORIZON_BUDGET) {
		uint64_t second_end = t0 + (seconds + 1) * 1000000000ull;
		for (; rc == 0 && (uint64_t)due < second_end; due += 2 * step) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			ts = (uint64_t)due;
			struct rp_event ev = { .kind = RP_EV_RANGE_BEGIN, .ts = ts, .pid = 1, .tid = 2,
					       .name = names[x % NNAMES] };
			rc = rp_drain_add(d, &ev, &err);
			ev = (struct rp_event){ .kind = RP_EV_RANGE_END, .ts = ts + (uint64_t)step,
						.pid = 1, .tid = 2 };
			if (rc == 0)
				rc = rp_drain_add(d, &ev, &err);
		}
		if (rc == 0)
			rc = rp_drain_flush(d, &err);
		seconds++;
		rp_drain_stats(d, &ds);
	}
	struct rp_ringfile_stats rs;
	rp_ringfile_stats(rf, &rs);
	if (rc < 0)
		fprintf(stderr, "bench-ingest: %s\n", err.msg);
	res->bytes_per_s = (double)ds.comp_bytes / (double)seconds;
	res->expected_s = (double)HORIZON_BUDGET / res->bytes_per_s;
	res->horizon_s = (double)(rs.last_ts - rs.first_ts) / 1e9;
	rp_drain_free(d);
	rp_ringfile_close(rf);
	unlink(path);
	return rc < 0 ? -1 : 0;
}

struct raw_copy {
	char *buf;
	size_t len, cap;
};

static int copy_record(void *ctx, const struct rp_shmring *ring, const struct rp_rec *rec)
{
	(void)ring;
	struct raw_copy *c = ctx;
	if (c->len + rec->size <= c->cap) {
		memcpy(c->buf + c->len, rec, rec->size);
		c->len += rec->size;
	}
	return 0;
}

/* Peer: the producers' raw records (as they sit in the shared-memory
 * rings) compressed with plain LZ4_compress_default, 1 MiB at a time. */
static double lz4_raw_events_per_s(double *mb_per_s, double *ratio)
{
	struct rp_shmring *r;
	if (rp_shmring_create(RING_BYTES, 1, 1, RP_SHM_CLOCK_MONOTONIC, &r, NULL) < 0)
		return 0;
	struct raw_copy c = { .cap = 64u << 20 };
	c.buf = malloc(c.cap);
	uint64_t ts = rp_clock_now_ns(), nev = 0;
	while (c.len + 64 * 4096 < c.cap) {
		for (int i = 0; i < 4096; i++) {
			ts += 150;
			rp_shm_range_begin(r, ts, names[nev / 2 % NNAMES]);
			ts += 150;
			rp_shm_range_end(r, ts);
			nev += 2;
		}
		rp_shmring_drain(r, copy_record, &c, 0, NULL);
	}
	rp_shmring_close(r);
	int bound = LZ4_compressBound(1 << 20);
	char *dst = malloc((size_t)bound);
	double best = 1e30;
	size_t comp = 0;
	for (int rep = 0; rep < 5; rep++) {
		uint64_t t0 = rp_clock_now_ns();
		comp = 0;
		for (size_t off = 0; off < c.len; off += 1 << 20) {
			size_t n = c.len - off < (1u << 20) ? c.len - off : (1u << 20);
			comp += (size_t)LZ4_compress_default(c.buf + off, dst, (int)n, bound);
		}
		double s = (double)(rp_clock_now_ns() - t0) / 1e9;
		if (s < best)
			best = s;
	}
	*ratio = (double)c.len / (double)comp;
	*mb_per_s = (double)c.len / best / 1e6;
	free(dst);
	free(c.buf);
	return (double)nev / best;
}

/* Peer: memcpy bandwidth over 64 MiB, best of 5. */
static double memcpy_gb_per_s(void)
{
	size_t n = 64u << 20;
	char *a = malloc(n), *b = malloc(n);
	memset(a, 1, n);
	memset(b, 2, n);
	double best = 1e30;
	for (int rep = 0; rep < 5; rep++) {
		uint64_t t0 = rp_clock_now_ns();
		memcpy(b, a, n);
		double s = (double)(rp_clock_now_ns() - t0) / 1e9;
		if (s < best)
			best = s;
		a[rep] = b[n - 1 - (size_t)rep]; /* keep the copies observable */
	}
	free(a);
	free(b);
	return (double)n / best / 1e9;
}

/* Phase 3: the horizon of a 64 MiB ring at three rates; exit status 1
 * when one falls below 0.9 of budget / compressed rate. */
static int report_horizons(const char *dir)
{
	static const double rates[] = { 1e3, 1e5, 1e7 };
	bool short_one = false;
	printf("  horizon of a 64 MiB ring (simulated time, a seal each second):\n");
	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		struct horizon_result h;
		if (run_horizon(dir, rates[i], &h) < 0)
			return 1;
		double ratio = h.horizon_s / h.expected_s;
		short_one |= ratio < 0.9;
		printf("    %8.0f events/s: %10.1f s held, budget / compressed rate (%.0f B/s) = "
		       "%10.1f s: %.3f\n", rates[i], h.horizon_s, h.bytes_per_s, h.expected_s, ratio);
		printf("result: rate=%.0f horizon_s=%.1f expected_s=%.1f ratio=%.3f\n", rates[i],
		       h.horizon_s, h.expected_s, ratio);
	}
	return short_one ? 1 : 0;
}

int main(int argc, char **argv)
{
	const char *dir = ".";
	uint64_t events = 40000000;
	bool horizon_only = false;
	static const struct option opts[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "events", required_argument, NULL, 'n' },
		{ "horizon-only", no_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "d:n:Hh", opts, NULL)) != -1;) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'n': events = strtoull(optarg, NULL, 10); break;
		case 'H': horizon_only = true; break;
		case 'h':
			printf("usage: bench-ingest [--dir DIR] [--events N] [--horizon-only]\n"
			       "Writes DIR/bench-ingest.ring (512 MiB) and DIR/bench-horizon.ring\n"
			       "(64 MiB), removed afterwards.\n");
			return 0;
		default: return 2;
		}
	}
	if (horizon_only)
		return report_horizons(dir);
	if (events < 1000000) {
		fprintf(stderr, "bench-ingest: --events must be at least 1000000\n");
		return 2;
	}
	uint64_t pairs = events / 2 / PRODUCERS;
	struct ingest_result flat, paced;
	printf("bench-ingest: %d producer threads, %llu range events, ring file in %s\n", PRODUCERS,
	       (unsigned long long)(pairs * 2 * PRODUCERS), dir);
	if (run_ingest(dir, pairs, 0, &flat) < 0)
		return 1;
	double flat_rate = (double)flat.events / flat.seconds;
	printf("  sustained: %.2f M events/s end to end (%.2f s, %llu dropped), %.2f bytes/event on disk, LZ4 ratio %.1fx, %s\n",
	       flat_rate / 1e6, flat.seconds, (unsigned long long)flat.drops, flat.bytes_per_event,
	       flat.ratio, flat.direct_io ? "O_DIRECT" : "buffered");

	/* Paced at 80% of what the flat-out run got through, for ~2 s. */
	double target = 0.8 * flat_rate;
	uint64_t paced_pairs = (uint64_t)(target * 2.0 / 2 / PRODUCERS);
	if (run_ingest(dir, paced_pairs, target / 2 / PRODUCERS, &paced) < 0)
		return 1;
	double paced_rate = (double)paced.events / paced.seconds;
	printf("  paced at %.2f M events/s: %.2f M events/s, %llu dropped\n", target / 1e6,
	       paced_rate / 1e6, (unsigned long long)paced.drops);

	double lz4_mb = 0, lz4_ratio = 0;
	double lz4_rate = lz4_raw_events_per_s(&lz4_mb, &lz4_ratio);
	double mem = memcpy_gb_per_s();
	printf("  peer: plain LZ4_compress_default on raw records: %.2f M events/s (%.0f MB/s, ratio %.1fx)\n",
	       lz4_rate / 1e6, lz4_mb, lz4_ratio);
	printf("  peer: memcpy %.2f GB/s\n", mem);
	printf("  ratio ringprof end-to-end / plain LZ4 alone: %.2f\n", flat_rate / lz4_rate);
	printf("result: events_per_s=%.0f bytes_per_event=%.2f paced_events_per_s=%.0f paced_drops=%llu "
	       "lz4_raw_events_per_s=%.0f lz4_raw_mb_per_s=%.0f memcpy_gb_per_s=%.2f ratio_vs_lz4=%.2f\n",
	       flat_rate, flat.bytes_per_event, paced_rate, (unsigned long long)paced.drops, lz4_rate,
	       lz4_mb, mem, flat_rate / lz4_rate);
	return report_horizons(dir);
}
