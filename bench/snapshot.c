/* Snapshot latency and daemon memory of ringprofd under load.
 *
 * Starts the daemon (its own socket, rings and sessions in a work
 * directory), feeds its host ring RATE events/s from PRODUCERS threads
 * through libringprof (range begin/end pairs and a counter, paced every
 * millisecond) and, once the ring holds the whole window, takes REPEATS
 * snapshots of the last WINDOW through POST /v1/snapshot while the load
 * goes on.  For each: the daemon's freeze time (request until the window
 * is pinned, ringprof_snapshot_freeze_seconds in /metrics), the client's
 * request-to-201 time (session complete on disk, fsync'ed), the session's
 * bytes and its write bandwidth (bytes / (total - freeze)), beside the
 * disk's own: a file of the same size written in 1 MiB writes and
 * fsync'ed.  The daemon's VmRSS and VmHWM are sampled every second over
 * the whole run, and compared with its configured buffers (the producer
 * rings it maps plus the ring file's writes in flight).
 *
 * With --soak the load goes on that long after, with a snapshot every
 * SOAK_EVERY_S, for the memory target (--soak 600: a 10-minute run).
 *
 * The LTTng peer (built with lttng-ust, lttng-tools installed, and root or
 * a running session daemon): a snapshot session whose per-CPU buffer holds
 * as many bytes as the ringprof session, filled by one thread emitting
 * the same event rate through the bench/append_tp.h tracepoints; then
 * `lttng snapshot record` is timed REPEATS times while it goes on.
 *
 * Figures are medians; MB and GB are 10^6 and 10^9 bytes, memory is in
 * MiB.  Not a pass/fail test: targets are printed beside the figures.
 * The last line, "result: ...", has a fixed form for scripts ("na" where
 * a figure is unavailable). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <ringprof/ringprof.h>

#include "client.h"
#include "daemon.h"
#include "parse.h"

#ifdef HAVE_LTTNG_UST
#include "append_tp.h"
#include "lttng_session.h"
#endif

#define PRODUCERS 2
#define TICK_NS 1000000ull      /* emitters catch up with their schedule every 1 ms */
#define RINGPROF_UNIT 5         /* events per emit_ringprof() */
#define LTTNG_UNIT 2            /* events per emit_lttng() */
#define REPEATS 3
#define GAP_S 3.0               /* between snapshots */
#define SOAK_EVERY_S 30.0
#define FILL_MARGIN_S 2.0       /* load beyond the window before the first snapshot */
#define DEFAULT_BUDGET (1ull << 30)
#define SEAL_INTERVAL "100ms"
#define PRODUCER_RING (1ull << 20)  /* [producers] ring_size: the default */
/* Writes in flight per ring file, each of up to a largest chunk
 * (slot_size) and two pages: ringbuf/ringfile.c's DEFAULT_QUEUE_DEPTH,
 * which the daemon uses. */
#define RING_QUEUE_DEPTH 16
#define RSS_TARGET_MIB 32.0
#define FREEZE_TARGET_MS 10.0
#define DISK_BLOCK (1u << 20)
#define START_TIMEOUT_S 10.0
#define MIB (1024.0 * 1024.0)
#define INGESTED "ringprof_ring_ingested_events_total{device=\"host\"}"
/* A range_begin (a 4-byte compact header, a 16-character name with its
 * NUL, a u64) and a range_end (header, u64) take at least this many
 * bytes in an LTTng buffer: buffer / (pairs/s * this) is how long it
 * takes at most to fill it; the fill lasts half as long again, and a
 * second more. */
#define LTTNG_MIN_PAIR_BYTES 41.0

static const char *const ops[8] = {
	"forward_attn_l12", "backward_mlp_l03", "optimizer_step_0", "allreduce_grad_7",
	"dataloader_next_", "embedding_lookup", "loss_compute_x01", "checkpoint_save_",
};
static const char *const kernels[4] = {
	"gemm_bf16_128x256", "flash_attn_fwd", "layernorm_fwd", "nccl_allreduce_ring",
};

/* ---- load ---- */

/* One paced thread calling unit() units_per_tick times a tick. */
struct emitter {
	pthread_t thread;
	const char *name;
	void (*unit)(uint64_t k);
	unsigned unit_events;
	uint64_t units_per_tick;
	int cpu;                  /* pinned there; -1: not pinned */
	bool ringprof;            /* annotates through libringprof */
	atomic_bool stop;
	_Atomic uint64_t events;
	_Atomic uint64_t dropped; /* ringprof_dropped() of the thread */
	_Atomic uint64_t worst_late_ns;
};

/* A layer, a kernel in it, and a counter: what a training loop marks. */
static void emit_ringprof(uint64_t k)
{
	ringprof_range_begin(ops[k & 7]);
	ringprof_range_begin(kernels[(k >> 3) & 3]);
	ringprof_range_end();
	ringprof_range_end();
	ringprof_counter("tokens_in_flight", (double)(k & 4095));
}

#ifdef HAVE_LTTNG_UST
/* The same pairs as bench/append's LTTng run. */
static void emit_lttng(uint64_t k)
{
	tracepoint(ringprof_bench, range_begin, ops[k & 7], k);
	tracepoint(ringprof_bench, range_end, k);
}
#endif

static void *emit_main(void *arg)
{
	struct emitter *e = arg;
	pthread_setname_np(pthread_self(), e->name);
	if (e->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(e->cpu, &set);
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	}
	if (e->ringprof)
		ringprof_thread_name(e->name);
	struct timespec due;
	clock_gettime(CLOCK_MONOTONIC, &due);
	uint64_t k = 0, worst = 0;
	while (!atomic_load_explicit(&e->stop, memory_order_relaxed)) {
		for (uint64_t i = 0; i < e->units_per_tick; i++)
			e->unit(k++);
		atomic_store_explicit(&e->events, k * e->unit_events, memory_order_relaxed);
		if (e->ringprof)
			atomic_store_explicit(&e->dropped, ringprof_dropped(), memory_order_relaxed);
		due.tv_nsec += (long)TICK_NS;
		if (due.tv_nsec >= 1000000000) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000;
		}
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t late = (int64_t)(now.tv_sec - due.tv_sec) * 1000000000 +
			       (now.tv_nsec - due.tv_nsec);
		if (late > (int64_t)worst) {
			worst = (uint64_t)late;
			atomic_store_explicit(&e->worst_late_ns, worst, memory_order_relaxed);
		}
		if (late < 0) /* else behind: catch up without sleeping */
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
	}
	return NULL;
}

static int start_emitter(struct emitter *e)
{
	atomic_store(&e->stop, false);
	int rc = pthread_create(&e->thread, NULL, emit_main, e);
	if (rc != 0)
		fprintf(stderr, "bench-snapshot: cannot start thread %s: %s\n", e->name,
			strerror(rc));
	return -rc;
}

static void stop_emitter(struct emitter *e)
{
	atomic_store(&e->stop, true);
	pthread_join(e->thread, NULL);
}

/* ---- daemon memory ---- */

struct rss {
	pthread_t thread;
	pid_t pid;
	atomic_bool stop;
	pthread_mutex_t lock;
	/* kB, guarded by lock */
	long now, peak, hwm, peak_anon, peak_shmem, peak_file;
	unsigned samples;
};

static void rss_sample(struct rss *r)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)r->pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	long rss = -1, hwm = -1, anon = 0, shmem = 0, file = 0;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "VmRSS: %ld", &rss);
		sscanf(line, "VmHWM: %ld", &hwm);
		sscanf(line, "RssAnon: %ld", &anon);
		sscanf(line, "RssFile: %ld", &file);
		sscanf(line, "RssShmem: %ld", &shmem);
	}
	fclose(f);
	if (rss < 0)
		return;
	pthread_mutex_lock(&r->lock);
	r->now = rss;
	r->samples++;
	if (rss > r->peak) {
		r->peak = rss;
		r->peak_anon = anon;
		r->peak_shmem = shmem;
		r->peak_file = file;
	}
	if (hwm > r->hwm)
		r->hwm = hwm;
	pthread_mutex_unlock(&r->lock);
}

/* Resident kB of the BPF maps the daemon maps (the CPU sampler's ring
 * buffer, when it runs): buffers it sizes from its configuration, like
 * the producer rings. */
static long bpf_maps_kib(pid_t pid)
{
	char path[64], line[512];
	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	long total = 0, rss;
	bool in_map = false;
	while (fgets(line, sizeof(line), f)) {
		size_t hex = strspn(line, "0123456789abcdef");
		if (hex && line[hex] == '-') /* a mapping's first line: "start-end perms ..." */
			in_map = strstr(line, "anon_inode:bpf-map") != NULL;
		else if (in_map && sscanf(line, "Rss: %ld", &rss) == 1)
			total += rss;
	}
	fclose(f);
	return total;
}

static void *rss_main(void *arg)
{
	struct rss *r = arg;
	while (!atomic_load(&r->stop)) {
		rss_sample(r);
		for (int i = 0; i < 10 && !atomic_load(&r->stop); i++)
			usleep(100000);
	}
	return NULL;
}

/* ---- files ---- */

/* Bytes of the session's .chunks files; -1 when it cannot be read. */
static int64_t chunks_bytes(const char *session_dir)
{
	DIR *d = opendir(session_dir);
	if (!d)
		return -1;
	int64_t total = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		struct stat st;
		if (n > 7 && strcmp(e->d_name + n - 7, ".chunks") == 0 &&
		    fstatat(dirfd(d), e->d_name, &st, 0) == 0)
			total += st.st_size;
	}
	closedir(d);
	return total;
}

/* ---- the daemon ---- */

struct bench {
	/* options */
	const char *parent;       /* where the work directory is made */
	uint64_t window_ns;
	uint64_t budget;
	uint64_t rate;            /* events/s, a multiple of PRODUCERS * RINGPROF_UNIT * 1000 */
	double soak_s;

	struct bench_daemon d;
	struct emitter prod[PRODUCERS];
	unsigned nprod;           /* started */
	struct rss rss;
	bool rss_started;
};

/* Write and fsync a file of `bytes` in DISK_BLOCK writes, as the daemon
 * writes a session; returns GB/s, or -1 with a message printed. */
static double disk_gbps(const struct bench *b, uint64_t bytes)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/disk-test", b->d.dir);
	char *buf = malloc(DISK_BLOCK);
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
	if (!buf || fd < 0) {
		fprintf(stderr, "bench-snapshot: cannot create %s: %s\n", path, strerror(errno));
		free(buf);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	for (size_t i = 0; i < DISK_BLOCK; i++)
		buf[i] = (char)(i * 2654435761u >> 24);
	double t0 = bench_now_s();
	int rc = 0;
	for (uint64_t done = 0; done < bytes && rc == 0;) {
		size_t n = bytes - done < DISK_BLOCK ? (size_t)(bytes - done) : DISK_BLOCK;
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno != EINTR)
			rc = -errno;
		else if (w > 0)
			done += (uint64_t)w;
	}
	if (rc == 0 && fsync(fd) < 0)
		rc = -errno;
	double t = bench_now_s() - t0;
	close(fd);
	unlink(path);
	free(buf);
	if (rc < 0) {
		fprintf(stderr, "bench-snapshot: writing %s failed: %s\n", path, strerror(-rc));
		return -1;
	}
	return (double)bytes / t / 1e9;
}

/* One series of GET /metrics, e.g. "ringprof_producers{device=\"host\"}";
 * -1 with a message when missing. */
static double metric(struct bench *b, const char *series)
{
	struct rp_err err = { 0 };
	char *text = NULL;
	if (rp_client_get_text(b->d.client, "/metrics", &text, &err) < 0) {
		fprintf(stderr, "bench-snapshot: GET /metrics: %s\n", err.msg);
		return -1;
	}
	size_t n = strlen(series);
	double v = -1;
	for (const char *line = text; line;) {
		if (strncmp(line, series, n) == 0 && line[n] == ' ') {
			v = strtod(line + n + 1, NULL);
			break;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	if (v < 0)
		fprintf(stderr, "bench-snapshot: GET /metrics has no %s\n", series);
	free(text);
	return v;
}

struct ring_status {
	double horizon_s;
	json_int_t events, bytes_used, dropped, producers, slot_size;
	int direct_io;
};

/* The host ring in GET /v1/status; -1 with a message. */
static int host_ring(struct bench *b, struct ring_status *r)
{
	json_t *st = bench_call(&b->d, "GET", "/v1/status", NULL);
	if (!st)
		return -1;
	json_t *ring, *found = NULL;
	size_t i;
	json_array_foreach(json_object_get(st, "rings"), i, ring)
		if (json_is_string(json_object_get(ring, "device")) &&
		    strcmp(json_string_value(json_object_get(ring, "device")), "host") == 0)
			found = ring;
	int rc = found && json_unpack(found, "{s:F, s:I, s:I, s:I, s:I, s:I, s:b}",
				      "horizon_s", &r->horizon_s, "events", &r->events,
				      "bytes_used", &r->bytes_used, "dropped", &r->dropped,
				      "producers", &r->producers, "slot_size", &r->slot_size,
				      "direct_io", &r->direct_io) == 0 ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "bench-snapshot: GET /v1/status has no host ring with the fields "
			"of docs/api.md\n");
	json_decref(st);
	return rc;
}

/* ---- snapshots ---- */

struct snap {
	double total_ms;          /* client: request until 201 */
	double freeze_ms;         /* daemon: request until the window was pinned */
	double mb;
	double gbps;              /* bytes / (total - freeze) */
	double covered_s;
	json_int_t events;
};

/* Takes a snapshot of the last window, measures it and removes it. */
static int snapshot(struct bench *b, struct snap *s)
{
	json_t *body = json_pack("{s:I, s:s}", "last_ns", (json_int_t)b->window_ns,
				 "reason", "bench-snapshot");
	double t0 = bench_now_s();
	json_t *resp = bench_call(&b->d, "POST", "/v1/snapshot", body);
	s->total_ms = (bench_now_s() - t0) * 1e3;
	json_decref(body);
	if (!resp)
		return -1;
	const char *state = "", *path = "";
	json_int_t start = 0, end = 0;
	json_t *devices = NULL, *dev;
	int rc = json_unpack(resp, "{s:s, s:s, s:{s:I, s:I}, s:o}", "state", &state, "path", &path,
			     "covered", "start_ns", &start, "end_ns", &end, "devices", &devices);
	if (rc < 0 || strcmp(state, "complete") != 0) {
		char *text = json_dumps(resp, JSON_COMPACT);
		fprintf(stderr, "bench-snapshot: the snapshot is not complete: %s\n", text);
		free(text);
		json_decref(resp);
		return -1;
	}
	size_t i;
	s->events = 0;
	json_array_foreach(devices, i, dev)
		s->events += json_integer_value(json_object_get(dev, "events"));
	s->covered_s = (double)(end - start) / 1e9;
	int64_t bytes = chunks_bytes(path);
	if (bytes < 0)
		fprintf(stderr, "bench-snapshot: cannot read session directory %s: %s\n", path,
			strerror(errno));
	bench_remove_tree(path);
	json_decref(resp);
	double freeze = metric(b, "ringprof_snapshot_freeze_seconds");
	if (bytes < 0 || freeze < 0)
		return -1;
	s->freeze_ms = freeze * 1e3;
	s->mb = (double)bytes / 1e6;
	s->gbps = s->total_ms > s->freeze_ms
			  ? (double)bytes / ((s->total_ms - s->freeze_ms) / 1e3) / 1e9 : 0;
	return 0;
}

static void print_snap(const char *what, const struct snap *s)
{
	printf("  %-8s freeze %7.2f ms, total %8.1f ms, %8.1f MB, %6.2f GB/s, %.1f s / %.2f M events covered\n",
	       what, s->freeze_ms, s->total_ms, s->mb, s->gbps, s->covered_s, (double)s->events / 1e6);
}

/* ---- the LTTng peer ---- */

struct lttng_peer {
	double ms, mb;            /* medians; -1: not measured */
	double durable_ms;        /* record, then fsync */
	uint64_t per_cpu;         /* buffer bytes per CPU */
	uint64_t subbuf;          /* sub-buffer bytes */
	unsigned subbufs;
	double fill_s;
	char why[1024];
};

#ifdef HAVE_LTTNG_UST
/* A snapshot session whose per-CPU buffer holds about target bytes (the
 * nearest power of two, at least 2 sub-buffers), filled at the bench's
 * rate by a thread pinned to CPU 0, so that one CPU's buffer is the
 * window; then `lttng snapshot record` REPEATS times under that load. */
static void lttng_peer(struct bench *b, uint64_t target, struct lttng_peer *p)
{
	p->subbuf = 4ull << 20;
	p->per_cpu = 2 * p->subbuf;
	while (p->per_cpu + p->per_cpu / 2 < target) /* nearer to the next one up */
		p->per_cpu *= 2;
	p->subbufs = (unsigned)(p->per_cpu / p->subbuf);
	char opts[128];
	snprintf(opts, sizeof(opts), "--buffers-uid --subbuf-size=%lluM --num-subbuf=%u",
		 (unsigned long long)(p->subbuf >> 20), p->subbufs);
	struct bench_lttng l;
	if (bench_lttng_start(&l, "rpbench_snapshot", b->d.dir, opts, p->why, sizeof(p->why)) < 0)
		return;
	struct emitter e = { .name = "lttng-load", .unit = emit_lttng, .unit_events = LTTNG_UNIT,
			     .units_per_tick = b->rate / LTTNG_UNIT / (1000000000 / TICK_NS),
			     .cpu = 0 };
	if (start_emitter(&e) < 0) {
		snprintf(p->why, sizeof(p->why), "cannot start the LTTng load thread");
		bench_lttng_end(&l);
		return;
	}
	p->fill_s = 1.5 * (double)p->per_cpu / ((double)b->rate / LTTNG_UNIT * LTTNG_MIN_PAIR_BYTES) +
		    1.0;
	printf("lttng: filling %u x %llu MiB per-CPU buffers at %.2f M events/s for %.1f s\n",
	       p->subbufs, (unsigned long long)(p->subbuf >> 20), (double)b->rate / 1e6,
	       p->fill_s);
	fflush(stdout);
	double ms[REPEATS], durable_ms[REPEATS], mb[REPEATS];
	int n = 0;
	if (bench_wait_s(&b->d, p->fill_s, "")) {
		for (; n < REPEATS; n++) {
			double seconds, durable;
			uint64_t bytes;
			if ((n && !bench_wait_s(&b->d, 1.0, "")) ||
			    bench_lttng_snapshot(&l, &seconds, &durable, &bytes, p->why,
						 sizeof(p->why)) < 0)
				break;
			ms[n] = seconds * 1e3;
			durable_ms[n] = durable * 1e3;
			mb[n] = (double)bytes / 1e6;
			printf("  lttng    snapshot record %7.1f ms, %8.1f MB; with fsync %7.1f ms\n",
			       ms[n], mb[n], durable_ms[n]);
		}
	} else {
		snprintf(p->why, sizeof(p->why), "interrupted");
	}
	stop_emitter(&e);
	bench_lttng_end(&l);
	if (n == REPEATS) {
		p->ms = bench_median(ms, n);
		p->durable_ms = bench_median(durable_ms, n);
		p->mb = bench_median(mb, n);
	}
}
#endif

/* ---- the run ---- */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: bench-snapshot [--window DURATION] [--soak SECONDS] [--rate EVENTS_PER_S]\n"
		"                      [--budget SIZE] [--dir DIR] [--daemon PATH]\n"
		"\n"
		"Snapshot latency of ringprofd while its host ring takes RATE events/s: freeze\n"
		"time, time until the session is on disk and its bandwidth beside the disk's,\n"
		"`lttng snapshot record` of a comparable buffer, and the daemon's memory.\n"
		"\n"
		"  --window DURATION  snapshot window, also how long the ring fills first (60s)\n"
		"  --soak SECONDS     then keep the load that long, a snapshot every %.0f s,\n"
		"                     for the memory target (0; --soak 600 is the 10-minute run)\n"
		"  --rate N           events/s, a multiple of %d (1000000)\n"
		"  --budget SIZE      host ring size: must hold the window at that rate (1GiB)\n"
		"  --dir DIR          make the work directory (ring, sessions, daemon log) under\n"
		"                     DIR, on a real disk, not tmpfs; it is removed at the end (.)\n"
		"  --daemon PATH      ringprofd to start (%s)\n",
		SOAK_EVERY_S, PRODUCERS * RINGPROF_UNIT * 1000, RINGPROFD_PATH);
}

static int parse_args(int argc, char **argv, struct bench *b)
{
	static const struct option longopts[] = {
		{ "window", required_argument, NULL, 'w' }, { "soak", required_argument, NULL, 's' },
		{ "rate", required_argument, NULL, 'r' },   { "budget", required_argument, NULL, 'b' },
		{ "dir", required_argument, NULL, 'd' },    { "daemon", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
	};
	*b = (struct bench){ .d = { .prog = "bench-snapshot", .path = RINGPROFD_PATH, .cpu = -1 },
			     .parent = ".",
			     .window_ns = 60000000000ull, .budget = DEFAULT_BUDGET,
			     .rate = 1000000 };
	struct rp_err err = { 0 };
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		char *end = NULL;
		switch (c) {
		case 'w':
			if (rp_parse_duration(optarg, &b->window_ns, &err) < 0)
				goto bad;
			break;
		case 's':
			b->soak_s = strtod(optarg, &end);
			if (end == optarg || *end || b->soak_s < 0) {
				fprintf(stderr, "bench-snapshot: --soak '%s': give seconds, e.g. 600\n",
					optarg);
				return -1;
			}
			break;
		case 'r':
			b->rate = strtoull(optarg, &end, 10);
			if (end == optarg || *end || b->rate == 0 ||
			    b->rate % (PRODUCERS * RINGPROF_UNIT * 1000) != 0 || b->rate > 100000000) {
				fprintf(stderr, "bench-snapshot: --rate '%s': give events/s, a multiple "
					"of %d up to 100000000\n", optarg, PRODUCERS * RINGPROF_UNIT * 1000);
				return -1;
			}
			break;
		case 'b':
			if (rp_parse_size(optarg, &b->budget, &err) < 0)
				goto bad;
			break;
		default:
			if (bench_common_option(&b->d, &b->parent, c, optarg, usage) < 0)
				return -1;
		}
	}
	return bench_no_arguments(&b->d, argc, argv, usage);
bad:
	fprintf(stderr, "bench-snapshot: %s\n", err.msg);
	return -1;
}

/* Room for the ring, a session and the disk test's file of the same
 * size, and the LTTng output. */
static int check_space(const struct bench *b)
{
	struct statfs fs;
	if (statfs(b->d.dir, &fs) < 0) {
		fprintf(stderr, "bench-snapshot: statfs %s: %s\n", b->d.dir, strerror(errno));
		return -1;
	}
	uint64_t avail = (uint64_t)fs.f_bavail * (uint64_t)fs.f_bsize;
	uint64_t need = 3 * b->budget + (256ull << 20);
	if (avail < need) {
		fprintf(stderr, "bench-snapshot: not enough disk space in %s: %.1f GiB free, "
			"%.1f GiB needed (the %.1f GiB ring, and a session and a test file of up "
			"to that size each): free space, pass --dir elsewhere or a smaller --budget\n",
			b->d.dir, (double)avail / (1 << 30), (double)need / (1 << 30),
			(double)b->budget / (1 << 30));
		return -1;
	}
	return 0;
}

static int start_daemon(struct bench *b)
{
	char conf[256];
	snprintf(conf, sizeof(conf), "[daemon]\nseal_interval = %s\n\n[ring.host]\nbudget = %llu\n\n"
		 "[producers]\nring_size = %llu\n\n"
		 /* exports run after the session closes: bench-export times them */
		 "[sessions]\nexports = none\n", SEAL_INTERVAL, (unsigned long long)b->budget,
		 (unsigned long long)PRODUCER_RING);
	return bench_daemon_start(&b->d, conf);
}

static uint64_t load_events(struct bench *b, uint64_t *dropped, double *worst_late_ms)
{
	uint64_t events = 0, worst = 0;
	*dropped = 0;
	for (unsigned i = 0; i < b->nprod; i++) {
		events += atomic_load(&b->prod[i].events);
		*dropped += atomic_load(&b->prod[i].dropped);
		uint64_t late = atomic_load(&b->prod[i].worst_late_ns);
		if (late > worst)
			worst = late;
	}
	*worst_late_ms = (double)worst / 1e6;
	return events;
}

static int start_load(struct bench *b)
{
	static const char *const names[PRODUCERS] = { "train-loop-0", "train-loop-1" };
	for (unsigned i = 0; i < PRODUCERS; i++) {
		b->prod[i] = (struct emitter){
			.name = names[i], .unit = emit_ringprof, .unit_events = RINGPROF_UNIT,
			.units_per_tick = b->rate / PRODUCERS / RINGPROF_UNIT / (1000000000 / TICK_NS),
			.cpu = -1, .ringprof = true,
		};
		if (start_emitter(&b->prod[i]) < 0)
			return -1;
		b->nprod++;
	}
	struct ring_status r = { 0 };
	for (double until = bench_now_s() + START_TIMEOUT_S; bench_now_s() < until;) {
		if (host_ring(b, &r) < 0)
			return -1;
		if (r.producers >= PRODUCERS)
			return 0;
		if (!bench_wait_s(&b->d, 0.05, "while producers connected"))
			return -1;
	}
	fprintf(stderr, "bench-snapshot: only %lld of %d producer threads reached ringprofd "
		"within %.0f s; its log:\n", (long long)r.producers, PRODUCERS, START_TIMEOUT_S);
	bench_print_log(&b->d);
	return -1;
}

static void stop_load(struct bench *b)
{
	for (unsigned i = 0; i < b->nprod; i++)
		stop_emitter(&b->prod[i]);
}

static void cleanup(struct bench *b)
{
	if (b->nprod) {
		stop_load(b);
		b->nprod = 0;
	}
	if (b->rss_started) {
		atomic_store(&b->rss.stop, true);
		pthread_join(b->rss.thread, NULL);
		b->rss_started = false;
	}
	bench_daemon_cleanup(&b->d);
}

static void fmt(char *buf, size_t cap, const char *f, double v)
{
	if (v < 0)
		snprintf(buf, cap, "na");
	else
		snprintf(buf, cap, f, v);
}

int main(int argc, char **argv)
{
	struct bench b;
	if (parse_args(argc, argv, &b) < 0)
		return 2;
	bench_catch_signals();
	pthread_mutex_init(&b.rss.lock, NULL);
	double window_s = (double)b.window_ns / 1e9;

	if (bench_workdir(&b.d, b.parent) < 0 || check_space(&b) < 0 || start_daemon(&b) < 0)
		goto fail;
	/* Before the first annotation: the producer threads ask this daemon. */
	setenv("RINGPROF_SOCKET", b.d.sock, 1);
	b.rss.pid = b.d.pid;
	if (pthread_create(&b.rss.thread, NULL, rss_main, &b.rss) != 0) {
		fprintf(stderr, "bench-snapshot: cannot start the memory sampler thread\n");
		goto fail;
	}
	b.rss_started = true;
	printf("bench-snapshot: ringprofd %s, work directory %s\n", b.d.path, b.d.dir);
	printf("host ring %.2f GiB, seal_interval %s, %d producer threads at %.2f M events/s "
	       "together, snapshots of the last %.0f s\n",
	       (double)b.budget / (1 << 30), SEAL_INTERVAL, PRODUCERS, (double)b.rate / 1e6, window_s);
	fflush(stdout);
	if (start_load(&b) < 0)
		goto fail;
	double load_t0 = bench_now_s(), ingested0 = metric(&b, INGESTED);

	/* Fill the window. */
	struct ring_status r = { 0 };
	double fill_s = window_s + FILL_MARGIN_S;
	for (double t = 0; t < fill_s;) {
		double step = fill_s - t < 10 ? fill_s - t : 10;
		if (!bench_wait_s(&b.d, step, "while the ring filled") || host_ring(&b, &r) < 0)
			goto fail;
		t += step;
		printf("  fill %5.1f s: ring horizon %5.1f s, %6.1f M events, %7.1f MB, dropped %lld\n",
		       t, r.horizon_s, (double)r.events / 1e6, (double)r.bytes_used / 1e6,
		       (long long)r.dropped);
		fflush(stdout);
	}
	double bytes_per_event = r.events ? (double)r.bytes_used / (double)r.events : 0;
	if (r.horizon_s < window_s) {
		fprintf(stderr, "bench-snapshot: the host ring holds only %.1f s at this rate "
			"(%.2f bytes/event): pass a --budget above %.0f MiB for a %.0f s window\n",
			r.horizon_s, bytes_per_event,
			bytes_per_event * (double)b.rate * window_s * 1.1 / MIB, window_s);
		goto fail;
	}

	/* The measured snapshots, each with the disk test beside it; the
	 * producers' drops are told apart by phase. */
	double total[REPEATS], freeze[REPEATS], mb[REPEATS], gbps[REPEATS], disk[REPEATS],
		ratio[REPEATS];
	for (int i = 0; i < REPEATS; i++) {
		if (i && !bench_wait_s(&b.d, GAP_S, "between snapshots"))
			goto fail;
		struct snap s;
		uint64_t drops[3];
		double late;
		load_events(&b, &drops[0], &late);
		if (snapshot(&b, &s) < 0)
			goto fail;
		load_events(&b, &drops[1], &late);
		disk[i] = disk_gbps(&b, (uint64_t)(s.mb * 1e6));
		if (disk[i] < 0 || !bench_wait_s(&b.d, 0.05, "after the disk test"))
			goto fail;
		load_events(&b, &drops[2], &late);
		char what[16];
		snprintf(what, sizeof(what), "snap %d", i + 1);
		print_snap(what, &s);
		printf("  %-8s disk write + fsync of the same size: %.2f GB/s; producers dropped "
		       "%llu events during the snapshot, %llu during the disk test\n", "", disk[i],
		       (unsigned long long)(drops[1] - drops[0]),
		       (unsigned long long)(drops[2] - drops[1]));
		if (s.covered_s < window_s * 0.99)
			printf("  (the session covers only %.1f s of the %.0f s window)\n",
			       s.covered_s, window_s);
		fflush(stdout);
		total[i] = s.total_ms;
		freeze[i] = s.freeze_ms;
		mb[i] = s.mb;
		gbps[i] = s.gbps;
		ratio[i] = s.gbps / disk[i];
	}

	/* Soak: the load goes on, a snapshot every SOAK_EVERY_S. */
	double worst_freeze = 0, worst_total = 0;
	int soaked = 0;
	for (double t0 = bench_now_s(), next = SOAK_EVERY_S; b.soak_s > 0 && bench_now_s() - t0 < b.soak_s;
	     next += SOAK_EVERY_S) {
		double left = b.soak_s - (bench_now_s() - t0), until = next - (bench_now_s() - t0);
		if (!bench_wait_s(&b.d, until < left ? until : left, "during the soak"))
			goto fail;
		if (bench_now_s() - t0 >= b.soak_s)
			break;
		struct snap s;
		if (snapshot(&b, &s) < 0)
			goto fail;
		soaked++;
		if (s.freeze_ms > worst_freeze)
			worst_freeze = s.freeze_ms;
		if (s.total_ms > worst_total)
			worst_total = s.total_ms;
		pthread_mutex_lock(&b.rss.lock);
		long rss_now = b.rss.now, hwm = b.rss.hwm;
		pthread_mutex_unlock(&b.rss.lock);
		uint64_t dropped;
		double late;
		load_events(&b, &dropped, &late);
		printf("  soak %5.0f s: freeze %.2f ms, total %.1f ms, %.1f MB; daemon RSS %.1f MiB "
		       "(peak %.1f); producers dropped %llu events so far\n", bench_now_s() - t0,
		       s.freeze_ms, s.total_ms, s.mb, (double)rss_now / 1024, (double)hwm / 1024,
		       (unsigned long long)dropped);
		fflush(stdout);
	}

	/* Load totals, then the daemon stops. */
	uint64_t lib_dropped;
	double worst_late_ms, load_s = bench_now_s() - load_t0;
	uint64_t emitted = load_events(&b, &lib_dropped, &worst_late_ms);
	double ingested = metric(&b, INGESTED);
	stop_load(&b);
	b.nprod = 0;
	if (ingested < 0 || ingested0 < 0 || !bench_wait_s(&b.d, 0.2, "after the load stopped") ||
	    host_ring(&b, &r) < 0)
		goto fail;
	double events_per_s = (ingested - ingested0) / load_s;
	double bpf_mib = (double)bpf_maps_kib(b.d.pid) / 1024;
	rss_sample(&b.rss);
	atomic_store(&b.rss.stop, true);
	pthread_join(b.rss.thread, NULL);
	b.rss_started = false;
	bench_daemon_stop(&b.d);

	struct lttng_peer lt = { .ms = -1, .mb = -1, .why = "built without lttng-ust" };
#ifdef HAVE_LTTNG_UST
	double mb_sorted[REPEATS];
	memcpy(mb_sorted, mb, sizeof(mb));
	lttng_peer(&b, (uint64_t)(bench_median(mb_sorted, REPEATS) * 1e6), &lt);
#endif
	cleanup(&b);

	/* Report. */
	double m_total = bench_median(total, REPEATS), m_freeze = bench_median(freeze, REPEATS),
	       m_mb = bench_median(mb, REPEATS), m_gbps = bench_median(gbps, REPEATS),
	       m_disk = bench_median(disk, REPEATS), m_ratio = bench_median(ratio, REPEATS);
	double slot_mib = (double)r.slot_size / MIB, ring_mib = (double)PRODUCER_RING / MIB;
	double buffers = PRODUCERS * ring_mib + RING_QUEUE_DEPTH * slot_mib + bpf_mib;
	double peak = (double)(b.rss.hwm > b.rss.peak ? b.rss.hwm : b.rss.peak) / 1024;
	printf("\nbench-snapshot: %d snapshots of the last %.0f s (medians; min, max)\n", REPEATS,
	       window_s);
	printf("  %-36s %10.2f %10.2f %10.2f   target <= %.0f ms\n", "freeze (daemon), ms", m_freeze,
	       freeze[0], freeze[REPEATS - 1], FREEZE_TARGET_MS);
	printf("  %-36s %10.1f %10.1f %10.1f\n", "request to session on disk, ms", m_total,
	       total[0], total[REPEATS - 1]);
	printf("  %-36s %10.1f %10.1f %10.1f\n", "session, MB", m_mb, mb[0], mb[REPEATS - 1]);
	printf("  %-36s %10.2f %10.2f %10.2f   target >= 1 GB/s, disk-bound\n",
	       "session write, GB/s", m_gbps, gbps[0], gbps[REPEATS - 1]);
	printf("  %-36s %10.2f %10.2f %10.2f\n", "disk write + fsync, GB/s", m_disk, disk[0],
	       disk[REPEATS - 1]);
	printf("  %-36s %10.2f %10.2f %10.2f\n", "session / disk", m_ratio, ratio[0],
	       ratio[REPEATS - 1]);
	if (soaked)
		printf("soak: %.0f s, %d more snapshots: worst freeze %.2f ms, worst total %.1f ms\n",
		       b.soak_s, soaked, worst_freeze, worst_total);
	if (lt.ms >= 0)
		printf("lttng: per-UID buffers, %u x %llu MiB sub-buffers per CPU (%.0f MiB: the "
		       "ringprof session is %.0f MB), filled for %.1f s by one thread on CPU 0; "
		       "snapshot record %.1f ms for %.1f MB, not synced; %.1f ms with an fsync after\n",
		       lt.subbufs, (unsigned long long)(lt.subbuf >> 20), (double)lt.per_cpu / MIB,
		       m_mb, lt.fill_s, lt.ms, lt.mb, lt.durable_ms);
	else
		printf("lttng: n/a: %s\n", lt.why);
	printf("daemon memory: peak RSS %.1f MiB (at the peak sample: anon %.1f, shmem %.1f, "
	       "file %.1f; %u samples); configured buffers %.1f MiB (%d producer rings of "
	       "%.1f MiB, %d ring writes of %.3f MiB, %.1f MiB of BPF maps: the CPU sampler's "
	       "ring buffer); over them %.1f MiB, target <= %.0f\n",
	       peak, (double)b.rss.peak_anon / 1024, (double)b.rss.peak_shmem / 1024,
	       (double)b.rss.peak_file / 1024, b.rss.samples, buffers, PRODUCERS, ring_mib,
	       RING_QUEUE_DEPTH, slot_mib, bpf_mib, peak - buffers, RSS_TARGET_MIB);
	printf("load: %.1f M events emitted in %.1f s, the host ring took %.3f M events/s; "
	       "dropped %lld (producers counted %llu); worst producer lateness %.1f ms; "
	       "%.2f bytes/event in the ring (direct I/O %s)\n",
	       (double)emitted / 1e6, load_s, events_per_s / 1e6, (long long)r.dropped,
	       (unsigned long long)lib_dropped, worst_late_ms, bytes_per_event,
	       r.direct_io ? "on" : "off");

	char s_lms[32], s_lmb[32];
	fmt(s_lms, sizeof(s_lms), "%.1f", lt.ms);
	fmt(s_lmb, sizeof(s_lmb), "%.1f", lt.mb);
	printf("result: freeze_ms=%.2f snapshot_total_ms=%.1f session_mb=%.1f session_gb_per_s=%.2f "
	       "disk_gb_per_s=%.2f vs_disk=%.2f lttng_snapshot_ms=%s lttng_snapshot_mb=%s "
	       "rss_peak_mb=%.1f rss_over_buffers_mb=%.1f events_per_s=%.0f dropped=%lld\n",
	       m_freeze, m_total, m_mb, m_gbps, m_disk, m_ratio, s_lms, s_lmb, peak,
	       peak - buffers, events_per_s, (long long)r.dropped);
	return 0;
fail:
	cleanup(&b);
	return 1;
}
