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
#include "symbolize.h"

/* Durations go into log-spaced buckets, 32 per power of two: percentiles
 * within about 2% without keeping every duration. */
#define SUB_BITS 5
#define SUB_BUCKETS (1u << SUB_BITS)
#define NBUCKETS (64 * SUB_BUCKETS)
#define MAX_DEPTH 64
/* Rows of the CPU tables: the functions with the most self samples, plus
 * those with the most total samples (callers like main), and processes. */
#define TOP_SELF 25
#define TOP_TOTAL 10
#define TOP_PROCS 20
#define FUNC_NAME_MAX 512

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

/* A function (or module+offset) seen in CPU samples. */
struct func_stat {
	char *name;
	const char *module; /* the symbolizer's */
	uint64_t self, total;
	uint64_t last_sample; /* counts total once per sample */
	bool shown;
};

/* A process: its name and command line (from metadata events anywhere in
 * the session) and its CPU samples in the window. */
struct proc_stat {
	bool used;
	uint32_t pid;
	uint64_t samples;
	double cpu_s;       /* each sample is 1/rate of a second */
	char *name, *cmdline;
};

/* The sampling rate from ts on: a cpu_sampler_hz counter. */
struct rate_point {
	uint64_t ts;
	double hz;
};

struct tally {
	struct stat_entry *stats;
	size_t nstats;
	struct thread_state *threads;
	size_t nthreads;
	uint64_t events, samples, drops, unmatched_ends;

	struct rp_symbolizer *sym;
	struct func_stat *funcs; /* open addressing by name */
	size_t funcs_mask, nfuncs;
	struct proc_stat *procs; /* open addressing by pid, pid 0 included */
	size_t procs_mask, nprocs;
	/* Sampling rates over time, sorted by ts once the metadata is read;
	 * none: CPU time is unknown. */
	struct rate_point *rates;
	size_t nrates, rates_cap;
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

static size_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return (size_t)(h ^ h >> 29);
}

/* Keeps the open-addressing table *pp (any pointer to mask + 1 entries of
 * elem bytes) at most half full with n + 1 entries: doubles it, moving
 * every entry to the slot slot_of gives it.  -1 when out of memory. */
static int make_room(void *pp, size_t *mask, size_t n, size_t elem,
		     bool (*used)(const void *), size_t (*slot_of)(const void *))
{
	char *old;
	memcpy(&old, pp, sizeof(old));
	if (old && n + 1 <= (*mask + 1) / 2)
		return 0;
	size_t size = old ? 2 * (*mask + 1) : 256;
	char *grown = calloc(size, elem);
	if (!grown)
		return -1;
	for (size_t i = 0; old && i <= *mask; i++) {
		const void *e = old + i * elem;
		if (!used(e))
			continue;
		size_t j = slot_of(e) & (size - 1);
		while (used(grown + j * elem))
			j = (j + 1) & (size - 1);
		memcpy(grown + j * elem, e, elem);
	}
	free(old);
	memcpy(pp, &grown, sizeof(grown));
	*mask = size - 1;
	return 0;
}

static bool func_used(const void *e) { return ((const struct func_stat *)e)->name != NULL; }
static size_t func_slot(const void *e) { return hash_str(((const struct func_stat *)e)->name); }
static bool proc_used(const void *e) { return ((const struct proc_stat *)e)->used; }
static size_t pid_hash(uint32_t pid) { return pid * 2654435761u; }
static size_t proc_slot(const void *e) { return pid_hash(((const struct proc_stat *)e)->pid); }

static struct func_stat *find_func(struct tally *t, const char *name, const char *module)
{
	if (make_room(&t->funcs, &t->funcs_mask, t->nfuncs, sizeof(*t->funcs), func_used,
		      func_slot) < 0)
		return NULL;
	size_t i = hash_str(name) & t->funcs_mask;
	for (; t->funcs[i].name; i = (i + 1) & t->funcs_mask)
		if (strcmp(t->funcs[i].name, name) == 0)
			return &t->funcs[i];
	if (!(t->funcs[i].name = strdup(name)))
		return NULL;
	t->funcs[i].module = module;
	t->nfuncs++;
	return &t->funcs[i];
}

static struct proc_stat *find_proc(struct tally *t, uint32_t pid)
{
	if (make_room(&t->procs, &t->procs_mask, t->nprocs, sizeof(*t->procs), proc_used,
		      proc_slot) < 0)
		return NULL;
	size_t i = pid_hash(pid) & t->procs_mask;
	for (; t->procs[i].used; i = (i + 1) & t->procs_mask)
		if (t->procs[i].pid == pid)
			return &t->procs[i];
	t->procs[i] = (struct proc_stat){ .used = true, .pid = pid };
	t->nprocs++;
	return &t->procs[i];
}

static void set_string(char **dst, const char *s)
{
	if (*dst && strcmp(*dst, s) == 0)
		return;
	char *copy = strdup(s);
	if (copy) {
		free(*dst);
		*dst = copy;
	}
}

/* Every frame is symbolized; the leaf counts as self time, and each
 * function on the stack once as total time.  Frames other than the
 * leaf of the kernel and of the user stack are return addresses: looked
 * up one byte earlier, inside the call. */
static int by_ts(const void *a, const void *b)
{
	const struct rate_point *x = a, *y = b;
	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* The rate at ts: of the last point at or before it, else the first. */
static double rate_at(const struct tally *t, uint64_t ts)
{
	size_t lo = 0, hi = t->nrates; /* points [0, lo) are at or before ts */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->rates[mid].ts <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	return t->rates[lo ? lo - 1 : 0].hz;
}

static void count_sample(struct tally *t, const struct rp_event *ev)
{
	t->samples++;
	struct proc_stat *p = find_proc(t, ev->pid);
	if (p) {
		p->samples++;
		if (t->nrates)
			p->cpu_s += 1.0 / rate_at(t, ev->ts);
	}
	for (unsigned i = 0; i < ev->u.sample.nframes; i++) {
		bool kernel = i < ev->u.sample.nkernel, leaf = i == 0 || i == ev->u.sample.nkernel;
		struct rp_symbol sym;
		char name[FUNC_NAME_MAX];
		rp_symbolize(t->sym, ev->pid, ev->u.sample.frames[i] - !leaf, kernel, &sym);
		struct func_stat *f = find_func(t, rp_symbol_name(&sym, name, sizeof(name)),
						sym.module);
		if (!f)
			continue;
		f->self += i == 0;
		if (f->last_sample != t->samples) {
			f->total++;
			f->last_sample = t->samples;
		}
	}
}

/* Names, command lines, mappings and the sampling rate are taken from
 * anywhere in the session's chunks, not only the window: they are what
 * the window's samples need. */
static void note_metadata(struct tally *t, const struct rp_event *ev)
{
	struct proc_stat *p;
	switch (ev->kind) {
	case RP_EV_MAPPING:
		rp_symbolizer_add_mapping(t->sym, ev->pid, ev->u.mapping.start, ev->u.mapping.end,
					  ev->u.mapping.offset, ev->name ? ev->name : "",
					  ev->u.mapping.build_id, ev->u.mapping.build_id_len);
		break;
	case RP_EV_PROCESS_NAME:
	case RP_EV_PROCESS_CMDLINE:
		if ((p = find_proc(t, ev->pid)) && ev->name)
			set_string(ev->kind == RP_EV_PROCESS_NAME ? &p->name : &p->cmdline, ev->name);
		break;
	case RP_EV_COUNTER:
		if (ev->name && strcmp(ev->name, "cpu_sampler_hz") == 0 && ev->u.counter.value > 0) {
			/* Every chunk repeats the rate: keep its changes only. */
			const struct rate_point *last = t->nrates ? &t->rates[t->nrates - 1] : NULL;
			if (last && last->hz == ev->u.counter.value && last->ts <= ev->ts)
				break;
			if (t->nrates == t->rates_cap) {
				size_t cap = t->rates_cap ? 2 * t->rates_cap : 64;
				struct rate_point *grown = realloc(t->rates, cap * sizeof(*grown));
				if (!grown)
					break; /* the rates read so far still serve */
				t->rates = grown;
				t->rates_cap = cap;
			}
			t->rates[t->nrates++] = (struct rate_point){ ev->ts, ev->u.counter.value };
		}
		break;
	default:
		break;
	}
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
		count_sample(t, ev);
		break;
	case RP_EV_DROPS:
		t->drops += ev->u.drops.count;
		break;
	default:
		break;
	}
}

/* One of two passes over a chunk file: the metadata first (of every
 * chunk, so that each sample finds its process's mappings wherever in the
 * session they are), then the window's events.  Ranges are counted in
 * time order per thread: chunks of one device come in seq order, and a
 * thread's events are in order within its chunks. */
static int tally_file(struct tally *t, const char *path, bool metadata, uint64_t t0,
		      uint64_t t1, uint64_t *corrupt, struct rp_err *err)
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
		while ((rc = rp_chunk_reader_next(r, &ev, &cerr)) == 1) {
			if (metadata)
				note_metadata(t, &ev);
			else if (ev.ts >= t0 && ev.ts <= t1)
				count_event(t, &ev);
		}
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

static int by_self_desc(const void *a, const void *b)
{
	const struct func_stat *x = a, *y = b;
	if (x->self != y->self)
		return x->self < y->self ? 1 : -1;
	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	return strcmp(x->name, y->name);
}

static int by_total_then_self(const void *a, const void *b)
{
	const struct func_stat *x = a, *y = b;
	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	return by_self_desc(a, b);
}

static int by_samples_desc(const void *a, const void *b)
{
	const struct proc_stat *x = a, *y = b;
	if (x->samples != y->samples)
		return x->samples < y->samples ? 1 : -1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* Packs the used entries of an open-addressing table to its front (and
 * empties the rest, so that each entry is freed once). */
static size_t pack(void *table, size_t mask, size_t elem, bool (*used)(const void *))
{
	char *base = table;
	size_t n = 0;
	for (size_t i = 0; base && i <= mask; i++)
		if (used(base + i * elem))
			memmove(base + n++ * elem, base + i * elem, elem);
	if (base)
		memset(base + n * elem, 0, (mask + 1 - n) * elem);
	return n;
}

static void print_functions(FILE *out, struct tally *t)
{
	/* The table is not looked up any more: sort it in place. */
	size_t n = pack(t->funcs, t->funcs_mask, sizeof(*t->funcs), func_used);
	if (!n)
		return;
	double all = (double)t->samples;
	qsort(t->funcs, n, sizeof(*t->funcs), by_total_then_self);
	for (size_t i = 0; i < n && i < TOP_TOTAL; i++)
		t->funcs[i].shown = true;
	qsort(t->funcs, n, sizeof(*t->funcs), by_self_desc);
	for (size_t i = 0; i < n && i < TOP_SELF; i++)
		t->funcs[i].shown = true;
	fprintf(out, "\ntop functions (self: the sampled frame; total: anywhere on the stack)\n");
	fprintf(out, "%7s %7s %8s %8s  %-40s %s\n", "self%", "total%", "self", "total", "function",
		"module");
	for (size_t i = 0; i < n; i++) {
		const struct func_stat *f = &t->funcs[i];
		if (!f->shown)
			continue;
		fprintf(out, "%7.2f %7.2f %8llu %8llu  %-40s %s\n", 100.0 * (double)f->self / all,
			100.0 * (double)f->total / all, (unsigned long long)f->self,
			(unsigned long long)f->total, f->name, f->module ? f->module : "");
	}
}

/* s, cut to cap - 1 bytes, with control characters (a newline in a
 * command line) as '?', so that each process keeps to its line. */
static const char *one_line(const char *s, char *buf, size_t cap)
{
	size_t i = 0;
	for (; s && s[i] && i + 1 < cap; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[i] = 0;
	return buf;
}

static void print_processes(FILE *out, struct tally *t)
{
	size_t n = pack(t->procs, t->procs_mask, sizeof(*t->procs), proc_used);
	qsort(t->procs, n, sizeof(*t->procs), by_samples_desc);
	if (!n || !t->procs[0].samples)
		return;
	fprintf(out, "\n%-16s %8s %8s %10s %7s  %s\n", "process", "pid", "samples", "cpu ms", "share",
		"command line");
	for (size_t i = 0; i < n && i < TOP_PROCS && t->procs[i].samples; i++) {
		const struct proc_stat *p = &t->procs[i];
		char ms[32] = "-"; /* without the sampling rate, CPU time is unknown */
		if (t->nrates)
			snprintf(ms, sizeof(ms), "%.1f", 1000.0 * p->cpu_s);
		char name[17], cmdline[81];
		fprintf(out, "%-16s %8u %8llu %10s %6.2f%%  %s\n",
			p->name ? one_line(p->name, name, sizeof(name)) : "?", p->pid,
			(unsigned long long)p->samples, ms, 100.0 * (double)p->samples / (double)t->samples,
			one_line(p->cmdline, cmdline, sizeof(cmdline)));
	}
}

/* Why frames stayed unnamed, when it is something the reader can fix. */
static void print_symbol_notes(FILE *out, const struct tally *t)
{
	struct rp_symbolizer_stats st;
	rp_symbolizer_stats(t->sym, &st);
	if (st.kallsyms_zeroed || st.kallsyms_missing || st.mismatched || st.unreadable)
		fputc('\n', out);
	if (st.kallsyms_zeroed)
		fprintf(out, "note: kernel frames are unnamed: /proc/kallsyms shows every address as 0 "
			"to this user; run the summary as root\n");
	if (st.kallsyms_missing)
		fprintf(out, "note: kernel frames are unnamed: /proc/kallsyms cannot be read here\n");
	if (st.mismatched)
		fprintf(out, "note: %llu frames are in files replaced since they were recorded (the "
			"build-id differs): shown as module+offset\n", (unsigned long long)st.mismatched);
	if (st.unreadable)
		fprintf(out, "note: %llu frames are in files that cannot be read here: shown as "
			"module+offset\n", (unsigned long long)st.unreadable);
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
	if (t->samples) {
		print_functions(out, t);
		print_processes(out, t);
		print_symbol_notes(out, t);
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
	for (size_t i = 0; t->funcs && i <= t->funcs_mask; i++)
		free(t->funcs[i].name);
	free(t->funcs);
	for (size_t i = 0; t->procs && i <= t->procs_mask; i++) {
		free(t->procs[i].name);
		free(t->procs[i].cmdline);
	}
	free(t->procs);
	free(t->rates);
	rp_symbolizer_free(t->sym);
}

/* One host's part of a session, from its manifest m. */
static int summarise_host(const char *session_dir, json_t *m, FILE *out, struct rp_err *err)
{
	char path[PATH_MAX];
	json_t *req = json_object_get(m, "requested");
	uint64_t t0 = (uint64_t)json_integer_value(json_object_get(req, "start_ns"));
	uint64_t t1 = (uint64_t)json_integer_value(json_object_get(req, "end_ns"));
	struct tally t = { 0 };
	uint64_t corrupt = 0, corrupt_again = 0;
	int rc = rp_symbolizer_new(NULL, &t.sym, err);
	for (int pass = 0; pass < 2 && rc == 0; pass++) {
		size_t i;
		json_t *dev;
		json_array_foreach(json_object_get(m, "devices"), i, dev) {
			const char *file = json_string_value(json_object_get(dev, "file"));
			if (!file || strchr(file, '/'))
				continue; /* never read outside the session directory */
			snprintf(path, sizeof(path), "%s/%s", session_dir, file);
			if ((rc = tally_file(&t, path, pass == 0, t0, t1,
					     pass ? &corrupt : &corrupt_again, err)) < 0)
				break;
		}
		if (pass == 0)
			qsort(t.rates, t.nrates, sizeof(*t.rates), by_ts);
	}
	if (rc == 0)
		print_report(out, m, &t, corrupt);
	free_tally(&t);
	return rc;
}

int rp_summary_write(const char *session_dir, FILE *out, struct rp_err *err)
{
	json_t *all, *m;
	int rc = rp_session_manifests(session_dir, &all, err);
	if (rc < 0)
		return rc;
	if (!json_array_size(all))
		rc = rp_err_set(err, -ENOENT, "%s holds no readable <host>.manifest.json: is it a "
				"ringprof session directory, and is the session complete?", session_dir);
	size_t i;
	json_array_foreach(all, i, m) {
		if (rc < 0)
			break;
		if (i)
			fputc('\n', out);
		rc = summarise_host(session_dir, m, out, err);
	}
	json_decref(all);
	return rc;
}
