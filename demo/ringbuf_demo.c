/* ringbuf demo: a fake training loop annotates its steps into shared-memory
 * producer rings, a drain seals them into a device ring file, and the last
 * second is read back by time window and summarised. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "clock.h"
#include "drain.h"
#include "ringfile.h"
#include "shmring.h"

#define WORKERS 2
#define MAX_NAMES 32
#define MAX_DEPTH 16

static atomic_bool stop_workers;

static void spin_ns(uint64_t ns)
{
	uint64_t end = rp_clock_now_ns() + ns;
	while (rp_clock_now_ns() < end)
		;
}

struct worker {
	pthread_t thread;
	int fd; /* the producer ring, as a workload process would receive it */
	int rank;
};

/* One "rank" of a training loop: step -> forward, backward, optimizer. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct rp_shmring *r;
	if (rp_shmring_map(w->fd, &r, NULL) < 0)
		return NULL;
	char tname[32];
	snprintf(tname, sizeof(tname), "rank%d", w->rank);
	rp_shm_thread_name(r, rp_shmring_now(r), tname);
	double loss = 4.0;
	for (int step = 0; !atomic_load(&stop_workers); step++) {
		rp_shm_range_begin(r, rp_shmring_now(r), "train_step");
		rp_shm_range_begin(r, rp_shmring_now(r), "forward");
		spin_ns(2000000 + 300000 * (uint64_t)w->rank);
		rp_shm_range_end(r, rp_shmring_now(r));
		rp_shm_range_begin(r, rp_shmring_now(r), "backward");
		spin_ns(4000000);
		rp_shm_range_end(r, rp_shmring_now(r));
		rp_shm_range_begin(r, rp_shmring_now(r), "optimizer");
		spin_ns(500000);
		rp_shm_range_end(r, rp_shmring_now(r));
		loss *= 0.995;
		rp_shm_counter(r, rp_shmring_now(r), "loss", loss);
		if (step % 50 == 49)
			rp_shm_instant(r, rp_shmring_now(r), "checkpoint");
		rp_shm_range_end(r, rp_shmring_now(r));
		usleep(1000);
	}
	rp_shmring_close(r);
	return NULL;
}

struct name_stat {
	char name[RP_NAME_MAX + 1];
	uint64_t count, total_ns, max_ns;
};

struct tally {
	uint64_t by_kind[RP_EV_KIND_MAX + 1];
	struct name_stat names[MAX_NAMES];
	int nnames;
	/* open ranges per thread, for matching ends to begins */
	struct { uint32_t tid; int depth; uint64_t ts[MAX_DEPTH]; int name[MAX_DEPTH]; } threads[8];
	int nthreads;
	char thread_names[8][RP_NAME_MAX + 1];
};

static int name_index(struct tally *t, const char *name)
{
	for (int i = 0; i < t->nnames; i++)
		if (strcmp(t->names[i].name, name) == 0)
			return i;
	if (t->nnames == MAX_NAMES)
		return -1;
	snprintf(t->names[t->nnames].name, sizeof(t->names[0].name), "%s", name);
	return t->nnames++;
}

static int thread_index(struct tally *t, uint32_t tid)
{
	for (int i = 0; i < t->nthreads; i++)
		if (t->threads[i].tid == tid)
			return i;
	if (t->nthreads == 8)
		return -1;
	t->threads[t->nthreads].tid = tid;
	return t->nthreads++;
}

static void count_event(struct tally *t, const struct rp_event *ev)
{
	t->by_kind[ev->kind <= RP_EV_KIND_MAX ? ev->kind : 0]++;
	int th = thread_index(t, ev->tid);
	if (th < 0)
		return;
	if (ev->kind == RP_EV_THREAD_NAME)
		snprintf(t->thread_names[th], sizeof(t->thread_names[0]), "%s", ev->name);
	if (ev->kind == RP_EV_RANGE_BEGIN && t->threads[th].depth < MAX_DEPTH) {
		int d = t->threads[th].depth++;
		t->threads[th].ts[d] = ev->ts;
		t->threads[th].name[d] = name_index(t, ev->name);
	} else if (ev->kind == RP_EV_RANGE_END && t->threads[th].depth > 0) {
		int d = --t->threads[th].depth;
		int n = t->threads[th].name[d];
		if (n >= 0) {
			uint64_t dur = ev->ts - t->threads[th].ts[d];
			t->names[n].count++;
			t->names[n].total_ns += dur;
			if (dur > t->names[n].max_ns)
				t->names[n].max_ns = dur;
		}
	}
}

static int usage(FILE *out, int code)
{
	fprintf(out,
		"usage: ringbuf-demo [--state-dir DIR] [--seconds N]\n"
		"Runs a fake training loop for N seconds (default 3), recording its\n"
		"annotations into DIR/host.ring (default ./ringprof-demo), then reads\n"
		"the last second back by time window and prints what it found.\n");
	return code;
}

int main(int argc, char **argv)
{
	const char *dir = "ringprof-demo";
	int seconds = 3;
	static const struct option opts[] = {
		{ "state-dir", required_argument, NULL, 'd' },
		{ "seconds", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "d:s:h", opts, NULL)) != -1;) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 's':
			seconds = atoi(optarg);
			if (seconds < 1 || seconds > 3600) {
				fprintf(stderr, "ringbuf-demo: --seconds must be 1..3600, got '%s'\n", optarg);
				return 2;
			}
			break;
		case 'h': return usage(stdout, 0);
		default: return usage(stderr, 2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ringbuf-demo: unexpected argument '%s'\n", argv[optind]);
		return usage(stderr, 2);
	}
	if (mkdir(dir, 0750) < 0 && errno != EEXIST) {
		fprintf(stderr, "ringbuf-demo: cannot create %s: %s\n", dir, strerror(errno));
		return 1;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/host.ring", dir);

	struct rp_err err = { 0 };
	struct rp_ringfile *rf;
	struct rp_ringfile_opts ro = { .device = "host", .budget_bytes = 8 << 20, .slot_size = 64 << 10 };
	if (rp_ringfile_open(path, &ro, &rf, &err) < 0) {
		fprintf(stderr, "ringbuf-demo: %s\n", err.msg);
		return 1;
	}
	struct rp_drain *drain;
	struct rp_drain_opts dopts = { .seal_interval_ns = 100000000 };
	if (rp_drain_new(rf, &dopts, &drain, &err) < 0) {
		fprintf(stderr, "ringbuf-demo: %s\n", err.msg);
		return 1;
	}
	enum rp_shm_clock clock = rp_tsc_usable() ? RP_SHM_CLOCK_TSC : RP_SHM_CLOCK_MONOTONIC;
	struct worker workers[WORKERS];
	for (int i = 0; i < WORKERS; i++) {
		struct rp_shmring *ring;
		if (rp_shmring_create(1 << 20, (uint32_t)getpid(), 1000 + (uint32_t)i, clock, &ring, &err) < 0 ||
		    rp_drain_attach(drain, ring) < 0) {
			fprintf(stderr, "ringbuf-demo: %s\n", err.msg);
			return 1;
		}
		workers[i] = (struct worker){ .fd = rp_shmring_fd(ring), .rank = i };
		pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
	}
	printf("recording a fake training loop (%d ranks) for %d s into %s\n", WORKERS, seconds, path);
	uint64_t end = rp_clock_now_ns() + (uint64_t)seconds * 1000000000u;
	while (rp_clock_now_ns() < end) {
		if (rp_drain_poll(drain, &err) < 0) {
			fprintf(stderr, "ringbuf-demo: %s\n", err.msg);
			return 1;
		}
		usleep(10000);
	}
	atomic_store(&stop_workers, true);
	for (int i = 0; i < WORKERS; i++)
		pthread_join(workers[i].thread, NULL);
	if (rp_drain_flush(drain, &err) < 0) {
		fprintf(stderr, "ringbuf-demo: %s\n", err.msg);
		return 1;
	}

	uint64_t t1 = rp_clock_now_ns(), t0 = t1 - 1000000000u;
	struct rp_ringfile_iter *it;
	struct rp_chunk_reader *reader;
	static struct tally tally;
	uint64_t chunks = 0, events = 0, bytes = 0;
	rp_ringfile_iter_new(rf, t0, t1, &it);
	rp_chunk_reader_new(&reader);
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	while (rp_ringfile_iter_next(it, &chunk, &len, &hdr) == 1) {
		if (rp_chunk_reader_load(reader, chunk, len, &err) < 0) {
			fprintf(stderr, "ringbuf-demo: skipping chunk: %s\n", err.msg);
			continue;
		}
		chunks++;
		bytes += RP_CHUNK_HEADER_SIZE + hdr.comp_size;
		struct rp_event ev;
		while (rp_chunk_reader_next(reader, &ev, &err) == 1) {
			events++;
			/* Thread names are recorded once at start: keep those outside
			 * the window too, to label the ranks. */
			if (ev.kind == RP_EV_THREAD_NAME || (ev.ts >= t0 && ev.ts <= t1))
				count_event(&tally, &ev);
		}
	}
	rp_ringfile_iter_free(it);
	rp_chunk_reader_free(reader);

	struct rp_ringfile_stats st;
	rp_ringfile_stats(rf, &st);
	printf("\nring %s: %u of %u slots used, horizon %.2f s, %llu events, %.2f bytes/event on disk (LZ4 ratio %.1fx), %s I/O\n",
	       st.device, st.chunks, st.slot_count, (double)(st.last_ts - st.first_ts) / 1e9,
	       (unsigned long long)st.events, st.events ? (double)st.bytes_used / (double)st.events : 0.0,
	       st.bytes_used ? (double)st.raw_bytes / (double)st.bytes_used : 0.0,
	       st.direct_io ? "O_DIRECT" : "buffered");
	printf("window: last 1.000 s -> %llu chunks, %llu events decoded (%llu bytes)\n",
	       (unsigned long long)chunks, (unsigned long long)events, (unsigned long long)bytes);
	printf("  events in window: %llu range begin, %llu range end, %llu counter, %llu instant, %llu drops\n",
	       (unsigned long long)tally.by_kind[RP_EV_RANGE_BEGIN],
	       (unsigned long long)tally.by_kind[RP_EV_RANGE_END],
	       (unsigned long long)tally.by_kind[RP_EV_COUNTER],
	       (unsigned long long)tally.by_kind[RP_EV_INSTANT],
	       (unsigned long long)tally.by_kind[RP_EV_DROPS]);
	printf("\n  %-12s %8s %10s %10s\n", "range", "count", "mean ms", "max ms");
	for (int i = 0; i < tally.nnames; i++) {
		const struct name_stat *n = &tally.names[i];
		if (!n->count)
			continue;
		printf("  %-12s %8llu %10.3f %10.3f\n", n->name, (unsigned long long)n->count,
		       (double)n->total_ns / (double)n->count / 1e6, (double)n->max_ns / 1e6);
	}
	rp_drain_free(drain);
	rp_ringfile_close(rf);
	return events ? 0 : 1;
}
