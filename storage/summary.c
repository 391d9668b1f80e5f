#include "summary.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"
#include "parse.h"
#include "session.h"

/* Durations go into log-spaced buckets, 32 per power of two: percentiles
 * within about 2% without keeping every duration. */
#define SUB_BITS 5
#define SUB_BUCKETS (1u << SUB_BITS)
#define NBUCKETS (64 * SUB_BUCKETS)
#define MAX_DEPTH 64

/* One line of the summary: a range name, a counter or an instant. */
struct stat_entry {
	uint8_t kind;           /* RP_EV_RANGE_BEGIN, RP_EV_COUNTER, RP_EV_INSTANT */
	char *name;
	uint64_t count;
	uint64_t total_ns, max_ns;  /* ranges */
	uint32_t *buckets;          /* ranges: NBUCKETS */
	double last, min, max;      /* counters */
	uint64_t last_ts;
};

struct open_range {
	uint64_t ts;
	long stat; /* index in stats, -1 when it could not be recorded */
};

struct thread_state {
	uint32_t pid, tid;
	int depth;
	struct open_range stack[MAX_DEPTH];
};

struct tally {
	struct stat_entry *stats;
	size_t nstats;
	struct thread_state *threads;
	size_t nthreads;
	uint64_t events, samples, drops, unmatched_ends;
};

static unsigned bucket_of(uint64_t ns)
{
	if (ns < SUB_BUCKETS)
		return (unsigned)ns;
	unsigned exp = 63u - (unsigned)__builtin_clzll(ns);
	unsigned sub = (unsigned)((ns >> (exp - SUB_BITS)) & (SUB_BUCKETS - 1));
	return (exp - SUB_BITS + 1) * SUB_BUCKETS + sub;
}

/* Middle of bucket b's range, the inverse of bucket_of. */
static double bucket_mid(unsigned b)
{
	if (b < SUB_BUCKETS)
		return b;
	int exp = (int)(b / SUB_BUCKETS) + SUB_BITS - 1;
	double width = ldexp(1, exp - SUB_BITS);
	return ldexp(1, exp) + (b % SUB_BUCKETS) * width + width / 2;
}

static double percentile(const struct stat_entry *s, double p)
{
	uint64_t want = (uint64_t)ceil(p * (double)s->count), seen = 0;
	for (unsigned b = 0; b < NBUCKETS; b++) {
		seen += s->buckets[b];
		if (want > 0 && seen >= want)
			return fmin(bucket_mid(b), (double)s->max_ns);
	}
	return (double)s->max_ns;
}

static long find_stat(struct tally *t, uint8_t kind, const char *name)
{
	for (size_t i = 0; i < t->nstats; i++)
		if (t->stats[i].kind == kind && strcmp(t->stats[i].name, name) == 0)
			return (long)i;
	struct stat_entry *grown = realloc(t->stats, (t->nstats + 1) * sizeof(*grown));
	if (!grown)
		return -1;
	t->stats = grown;
	struct stat_entry *s = &t->stats[t->nstats];
	*s = (struct stat_entry){ .kind = kind, .name = strdup(name), .min = INFINITY, .max = -INFINITY };
	if (kind == RP_EV_RANGE_BEGIN)
		s->buckets = calloc(NBUCKETS, sizeof(*s->buckets));
	if (!s->name || (kind == RP_EV_RANGE_BEGIN && !s->buckets)) {
		free(s->name);
		free(s->buckets);
		return -1;
	}
	return (long)t->nstats++;
}

static struct thread_state *find_thread(struct tally *t, uint32_t pid, uint32_t tid)
{
	for (size_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].pid == pid && t->threads[i].tid == tid)
			return &t->threads[i];
	struct thread_state *grown = realloc(t->threads, (t->nthreads + 1) * sizeof(*grown));
	if (!grown)
		return NULL;
	t->threads = grown;
	t->threads[t->nthreads] = (struct thread_state){ .pid = pid, .tid = tid };
	return &t->threads[t->nthreads++];
}

static void count_event(struct tally *t, const struct rp_event *ev)
{
	t->events++;
	switch (ev->kind) {
	case RP_EV_RANGE_BEGIN: {
		struct thread_state *th = find_thread(t, ev->pid, ev->tid);
		if (th && th->depth < MAX_DEPTH)
			th->stack[th->depth++] = (struct open_range){
				.ts = ev->ts, .stat = find_stat(t, RP_EV_RANGE_BEGIN, ev->name ? ev->name : "")
			};
		else if (th)
			th->depth++; /* too deep to time; keep ends matched */
		break;
	}
	case RP_EV_RANGE_END: {
		struct thread_state *th = find_thread(t, ev->pid, ev->tid);
		if (!th || th->depth == 0) {
			t->unmatched_ends++; /* its begin lies before the window */
			break;
		}
		if (--th->depth >= MAX_DEPTH)
			break;
		struct open_range *o = &th->stack[th->depth];
		if (o->stat < 0 || ev->ts < o->ts)
			break;
		struct stat_entry *s = &t->stats[o->stat];
		uint64_t d = ev->ts - o->ts;
		s->count++;
		s->total_ns += d;
		if (d > s->max_ns)
			s->max_ns = d;
		s->buckets[bucket_of(d)]++;
		break;
	}
	case RP_EV_COUNTER: {
		long i = find_stat(t, RP_EV_COUNTER, ev->name ? ev->name : "");
		if (i < 0)
			break;
		struct stat_entry *s = &t->stats[i];
		s->count++;
		if (ev->ts >= s->last_ts) {
			s->last = ev->u.counter.value;
			s->last_ts = ev->ts;
		}
		s->min = fmin(s->min, ev->u.counter.value);
		s->max = fmax(s->max, ev->u.counter.value);
		break;
	}
	case RP_EV_INSTANT: {
		long i = find_stat(t, RP_EV_INSTANT, ev->name ? ev->name : "");
		if (i >= 0)
			t->stats[i].count++;
		break;
	}
	case RP_EV_CPU_SAMPLE:
		t->samples++;
		break;
	case RP_EV_DROPS:
		t->drops += ev->u.drops.count;
		break;
	default:
		break;
	}
}

/* Ranges are counted in time order per thread: chunks of one device come
 * in seq order, and a thread's events are in order within its chunks. */
static int tally_file(struct tally *t, const char *path, uint64_t t0, uint64_t t1,
		      uint64_t *corrupt, struct rp_err *err)
{
	struct rp_session_chunks *sc;
	struct rp_chunk_reader *r;
	int rc = rp_session_chunks_open(path, &sc, err);
	if (rc < 0)
		return rc;
	if ((rc = rp_chunk_reader_new(&r)) < 0) {
		rp_session_chunks_close(sc);
		return rp_err_set(err, rc, "out of memory");
	}
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	struct rp_err cerr;
	while ((rc = rp_session_chunks_next(sc, &chunk, &len, &hdr, &cerr)) != 0) {
		if (rc < 0 || rp_chunk_reader_load(r, chunk, len, &cerr) < 0) {
			(*corrupt)++;
			continue;
		}
		struct rp_event ev;
		while ((rc = rp_chunk_reader_next(r, &ev, &cerr)) == 1)
			if (ev.ts >= t0 && ev.ts <= t1)
				count_event(t, &ev);
		if (rc < 0)
			(*corrupt)++;
	}
	rp_chunk_reader_free(r);
	rp_session_chunks_close(sc);
	return 0;
}

static int by_total_desc(const void *a, const void *b)
{
	const struct stat_entry *x = a, *y = b;
	if (x->kind != y->kind)
		return x->kind - y->kind;
	if (x->total_ns != y->total_ns)
		return x->total_ns < y->total_ns ? 1 : -1;
	return strcmp(x->name, y->name);
}

static void print_ms(FILE *out, double ns)
{
	fprintf(out, " %10.3f", ns / 1e6);
}

static void print_window(FILE *out, const char *label, json_t *w)
{
	if (!json_is_object(w)) {
		fprintf(out, "%-10s nothing (the rings held no data for the window)\n", label);
		return;
	}
	char start[64], dur[64];
	int64_t s = json_integer_value(json_object_get(w, "start_wall_ns"));
	int64_t e = json_integer_value(json_object_get(w, "end_wall_ns"));
	rp_format_time(s, start, sizeof(start));
	rp_format_duration(e > s ? (uint64_t)(e - s) : 0, dur, sizeof(dur));
	fprintf(out, "%-10s %s + %s\n", label, start, dur);
}

static void print_report(FILE *out, json_t *m, struct tally *t, uint64_t corrupt)
{
	fprintf(out, "session    %s (run %s, %s, %s)\n",
		json_string_value(json_object_get(m, "id")), json_string_value(json_object_get(m, "run")),
		json_string_value(json_object_get(m, "kind")), json_string_value(json_object_get(m, "state")));
	fprintf(out, "host       %s\n", json_string_value(json_object_get(m, "host")));
	print_window(out, "requested", json_object_get(m, "requested"));
	print_window(out, "covered", json_object_get(m, "covered"));
	if (json_is_false(json_object_get(m, "complete_coverage")))
		fprintf(out, "           (the rings held less than the requested window)\n");
	json_t *trigger = json_object_get(m, "trigger");
	const char *reason = json_string_value(json_object_get(trigger, "reason"));
	fprintf(out, "trigger    %s%s%s\n", json_string_value(json_object_get(trigger, "source")),
		reason ? ": " : "", reason ? reason : "");
	fprintf(out, "\n%-12s %12s %10s %8s\n", "device", "events", "dropped", "lost");
	size_t i;
	json_t *dev;
	json_array_foreach(json_object_get(m, "devices"), i, dev)
		fprintf(out, "%-12s %12lld %10lld %8lld\n", json_string_value(json_object_get(dev, "device")),
			json_integer_value(json_object_get(dev, "events")),
			json_integer_value(json_object_get(dev, "dropped")),
			json_integer_value(json_object_get(dev, "lost_chunks")));

	qsort(t->stats, t->nstats, sizeof(*t->stats), by_total_desc);
	bool header = false;
	for (size_t k = 0; k < t->nstats; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (s->kind != RP_EV_RANGE_BEGIN || !s->count)
			continue;
		if (!header) {
			fprintf(out, "\n%-28s %8s %10s %10s %10s %10s %10s\n", "range", "count",
				"total ms", "mean ms", "p50 ms", "p99 ms", "max ms");
			header = true;
		}
		fprintf(out, "%-28.28s %8llu", s->name, (unsigned long long)s->count);
		print_ms(out, (double)s->total_ns);
		print_ms(out, (double)s->total_ns / (double)s->count);
		print_ms(out, percentile(s, 0.5));
		print_ms(out, percentile(s, 0.99));
		print_ms(out, (double)s->max_ns);
		fputc('\n', out);
	}
	header = false;
	for (size_t k = 0; k < t->nstats; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (s->kind != RP_EV_COUNTER)
			continue;
		if (!header) {
			fprintf(out, "\n%-28s %8s %12s %12s %12s\n", "counter", "samples", "last", "min", "max");
			header = true;
		}
		fprintf(out, "%-28.28s %8llu %12.6g %12.6g %12.6g\n", s->name,
			(unsigned long long)s->count, s->last, s->min, s->max);
	}
	header = false;
	for (size_t k = 0; k < t->nstats; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (s->kind != RP_EV_INSTANT)
			continue;
		if (!header) {
			fprintf(out, "\n%-28s %8s\n", "instant", "count");
			header = true;
		}
		fprintf(out, "%-28.28s %8llu\n", s->name, (unsigned long long)s->count);
	}
	fprintf(out, "\n%llu events in the window, %llu CPU samples, %llu dropped by producers",
		(unsigned long long)t->events, (unsigned long long)t->samples,
		(unsigned long long)t->drops);
	if (corrupt)
		fprintf(out, ", %llu corrupt chunks skipped", (unsigned long long)corrupt);
	fputc('\n', out);
}

static void free_tally(struct tally *t)
{
	for (size_t i = 0; i < t->nstats; i++) {
		free(t->stats[i].name);
		free(t->stats[i].buckets);
	}
	free(t->stats);
	free(t->threads);
}

int rp_summary_write(const char *session_dir, FILE *out, struct rp_err *err)
{
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/manifest.json", session_dir) >= sizeof(path))
		return rp_err_set(err, -ENAMETOOLONG, "session path too long: %s", session_dir);
	json_error_t jerr;
	json_t *m = json_load_file(path, 0, &jerr);
	if (!m)
		return rp_err_set(err, errno == ENOENT ? -ENOENT : -EINVAL,
				  "%s: %s (is %s a ringprof session directory?)", path, jerr.text,
				  session_dir);
	json_t *req = json_object_get(m, "requested");
	uint64_t t0 = (uint64_t)json_integer_value(json_object_get(req, "start_ns"));
	uint64_t t1 = (uint64_t)json_integer_value(json_object_get(req, "end_ns"));
	struct tally t = { 0 };
	uint64_t corrupt = 0;
	int rc = 0;
	size_t i;
	json_t *dev;
	json_array_foreach(json_object_get(m, "devices"), i, dev) {
		const char *file = json_string_value(json_object_get(dev, "file"));
		if (!file || strchr(file, '/'))
			continue; /* never read outside the session directory */
		snprintf(path, sizeof(path), "%s/%s", session_dir, file);
		if ((rc = tally_file(&t, path, t0, t1, &corrupt, err)) < 0)
			break;
	}
	if (rc == 0)
		print_report(out, m, &t, corrupt);
	free_tally(&t);
	json_decref(m);
	return rc;
}
