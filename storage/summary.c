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
#include "table.h"
#include "text.h"
#include "writers.h"

/* Durations go into log-spaced buckets, 32 per power of two: percentiles
 * within about 2% without keeping every duration. */
#define SUB_BITS 5
#define SUB_BUCKETS (1u << SUB_BITS)
#define NBUCKETS (64 * SUB_BUCKETS)
/* Rows of the CPU tables: the functions with the most self samples, plus
 * those with the most total samples (callers like main), and processes. */
#define TOP_SELF 25
#define TOP_TOTAL 10
#define TOP_PROCS 20
/* Rows of the XLA table: the ops (modules, steps) with the most time. */
#define TOP_XLA 20
/* Rows of the kernel table. */
#define TOP_KERNELS 25
#define FUNC_NAME_MAX 512
/* A process's stacks look cut short when more than half of its samples
 * with user frames have only one or two of them (a frame pointer walk
 * that met code built without frame pointers), once it has this many. */
#define SHALLOW_FRAMES 2
#define SHALLOW_MIN_SAMPLES 20
/* Where a process's short stacks end: the first few files, counted. */
#define SHALLOW_ENDS 4
/* Text from producers and the manifest, escaped (text.h): longer is cut. */
#define TEXT_MAX 1024

/* gpu_kind of the GPU activity stats kept by device ring ("nc0\tname"), beside
 * those by kernel or copy name. */
#define BY_RING 0xff
/* GPUs (devices of the session) whose busy time is kept. */
#define MAX_GPUS 64

/* One line of the summary: a range name, a counter, an instant, a GPU
 * kernel or copy (RP_EV_GPU_ACTIVITY, told apart by gpu_kind), or a device
 * ring's API call or device activity by ring (gpu_kind BY_RING; "nc0\tnrt_execute":
 * the ring, then the name's first word, without its key=value arguments). */
struct stat_entry {
	uint8_t kind;           /* RP_EV_RANGE_BEGIN, RP_EV_COUNTER, RP_EV_INSTANT, RP_EV_API_CALL,
				   RP_EV_GPU_ACTIVITY, RP_EV_DEVICE_OP ("device: name") */
	uint8_t gpu_kind;       /* enum rp_gpu_activity_kind, 0 for the others */
	char *name;
	uint64_t count;
	uint64_t total_ns, max_ns;  /* ranges, GPU activity, XLA ops */
	uint32_t *buckets;          /* ranges, API calls, GPU activity: NBUCKETS */
	uint64_t bytes;             /* copies and memsets */
	double last, min, max;      /* counters */
	uint64_t last_ts;
};

/* A function (or module+offset) seen in CPU samples. */
struct func_stat {
	char *name;
	const char *module; /* the symbolizer's */
	uint64_t self, total;
	uint64_t last_sample; /* counts total once per sample */
	bool shown;
};

/* A process's CPU samples in the window. */
struct proc_stat {
	bool used;
	uint32_t pid;
	uint64_t samples;
	double cpu_s;       /* each sample is 1/rate of a second */
	uint64_t user_samples, shallow; /* with user frames; of which SHALLOW_FRAMES or fewer */
	struct {
		const char *module; /* the symbolizer's; NULL: no file */
		uint64_t n;
	} ends[SHALLOW_ENDS];       /* the outermost frame's file of shallow stacks */
};

/* A device's kernel time, overlaps counted once (events come in start
 * order, so a kernel adds what it runs past the latest end so far). */
struct gpu_busy {
	uint64_t busy_ns, until, kernels;
};

struct tally {
	struct gpu_busy gpus[MAX_GPUS]; /* by the reader's device index */
	struct stat_entry *stats;
	size_t nstats;
	uint64_t events, samples, drops, lost_samples, truncated;

	struct rp_reader *r;
	struct rp_symbolizer *sym; /* the reader's */
	bool cpu_time_known;       /* the session recorded its sampling rate */
	struct func_stat *funcs;   /* open addressing by name */
	size_t funcs_mask, nfuncs;
	struct proc_stat *procs;   /* open addressing by pid, pid 0 included */
	size_t procs_mask, nprocs;
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

static long find_stat(struct tally *t, uint8_t kind, uint8_t gpu_kind, const char *name)
{
	for (size_t i = 0; i < t->nstats; i++)
		if (t->stats[i].kind == kind && t->stats[i].gpu_kind == gpu_kind &&
		    strcmp(t->stats[i].name, name) == 0)
			return (long)i;
	struct stat_entry *grown = realloc(t->stats, (t->nstats + 1) * sizeof(*grown));
	if (!grown)
		return -1;
	t->stats = grown;
	struct stat_entry *s = &t->stats[t->nstats];
	*s = (struct stat_entry){ .kind = kind, .gpu_kind = gpu_kind, .name = strdup(name),
				  .min = INFINITY, .max = -INFINITY };
	bool durations = kind == RP_EV_RANGE_BEGIN || kind == RP_EV_GPU_ACTIVITY ||
			 kind == RP_EV_API_CALL;
	if (durations)
		s->buckets = calloc(NBUCKETS, sizeof(*s->buckets));
	if (!s->name || (durations && !s->buckets)) {
		free(s->name);
		free(s->buckets);
		return -1;
	}
	return (long)t->nstats++;
}

static bool func_used(const void *e) { return ((const struct func_stat *)e)->name != NULL; }
static uint64_t func_slot(const void *e)
{
	return rp_hash_str(((const struct func_stat *)e)->name);
}
static bool proc_used(const void *e) { return ((const struct proc_stat *)e)->used; }
static size_t pid_hash(uint32_t pid) { return pid * 2654435761u; }
static uint64_t proc_slot(const void *e) { return pid_hash(((const struct proc_stat *)e)->pid); }

static struct func_stat *find_func(struct tally *t, const char *name, const char *module)
{
	if (rp_table_reserve(&t->funcs, &t->funcs_mask, t->nfuncs, sizeof(*t->funcs), func_used,
			     func_slot, RP_TABLE_FIRST) < 0)
		return NULL;
	size_t i = rp_hash_str(name) & t->funcs_mask;
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
	if (rp_table_reserve(&t->procs, &t->procs_mask, t->nprocs, sizeof(*t->procs), proc_used,
			     proc_slot, RP_TABLE_FIRST) < 0)
		return NULL;
	size_t i = pid_hash(pid) & t->procs_mask;
	for (; t->procs[i].used; i = (i + 1) & t->procs_mask)
		if (t->procs[i].pid == pid)
			return &t->procs[i];
	t->procs[i] = (struct proc_stat){ .used = true, .pid = pid };
	t->nprocs++;
	return &t->procs[i];
}

/* A shallow stack of p's ended in module: counted among the first
 * SHALLOW_ENDS files seen. */
static void count_end(struct proc_stat *p, const char *module)
{
	for (unsigned i = 0; i < SHALLOW_ENDS; i++)
		if (p->ends[i].module == module || !p->ends[i].n) {
			p->ends[i].module = module;
			p->ends[i].n++;
			return;
		}
}

/* Every frame is symbolized; the leaf counts as self time, and each
 * function on the stack once as total time. */
static void count_sample(struct tally *t, const struct rp_event *ev)
{
	t->samples++;
	struct proc_stat *p = find_proc(t, ev->pid);
	double hz = rp_reader_sample_hz_at(t->r, ev->ts);
	if (p) {
		p->samples++;
		if (hz > 0)
			p->cpu_s += 1.0 / hz;
	}
	unsigned nuser = ev->u.sample.nframes - ev->u.sample.nkernel;
	if (p && nuser) {
		p->user_samples++;
		p->shallow += nuser <= SHALLOW_FRAMES;
	}
	for (unsigned i = 0; i < ev->u.sample.nframes; i++) {
		struct rp_symbol sym;
		char name[FUNC_NAME_MAX];
		rp_symbolize(t->sym, ev->pid, rp_frame_address(ev->u.sample.frames, ev->u.sample.nkernel, i),
			     i < ev->u.sample.nkernel, &sym);
		if (p && nuser && nuser <= SHALLOW_FRAMES && i + 1 == ev->u.sample.nframes)
			count_end(p, sym.module);
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

static void add_duration(struct stat_entry *s, uint64_t d)
{
	s->count++;
	s->total_ns += d;
	if (d > s->max_ns)
		s->max_ns = d;
	s->buckets[bucket_of(d)]++;
}

static void count_gpu(struct tally *t, const struct rp_reader_event *e)
{
	const struct rp_event *ev = e->ev;
	if (ev->u.gpu.end < ev->ts)
		return;
	long i = find_stat(t, RP_EV_GPU_ACTIVITY, ev->u.gpu.kind,
			   ev->name ? rp_symbolizer_demangle(t->sym, ev->name) : "");
	if (i < 0)
		return;
	add_duration(&t->stats[i], ev->u.gpu.end - ev->ts);
	t->stats[i].bytes += ev->u.gpu.bytes;
	if (ev->u.gpu.kind != RP_GPU_KERNEL || e->device >= MAX_GPUS)
		return;
	struct gpu_busy *g = &t->gpus[e->device];
	uint64_t from = ev->ts > g->until ? ev->ts : g->until;
	if (ev->u.gpu.end > from)
		g->busy_ns += ev->u.gpu.end - from;
	if (ev->u.gpu.end > g->until)
		g->until = ev->u.gpu.end;
	g->kernels++;
}

/* An API call or device activity, by ring and the name's first word. */
static void count_device_call(struct tally *t, const struct rp_reader_event *e, uint64_t d)
{
	const char *dev = rp_reader_device_name(t->r, e->device);
	const char *name = e->ev->name ? e->ev->name : "";
	char key[RP_NAME_MAX + 64];
	(void)snprintf(key, sizeof(key), "%s\t%.*s", dev, (int)strcspn(name, " "), name);
	long i = find_stat(t, e->ev->kind, e->ev->kind == RP_EV_API_CALL ? 0 : BY_RING, key);
	if (i >= 0)
		add_duration(&t->stats[i], d);
}

static int count_event(void *ctx, const struct rp_reader_event *e)
{
	struct tally *t = ctx;
	const struct rp_event *ev = e->ev;
	t->events += !e->truncated;
	switch (ev->kind) {
	case RP_EV_RANGE_END: {
		if (e->truncated) {
			t->truncated++; /* open at the window's end: no duration */
			break;
		}
		long i = find_stat(t, RP_EV_RANGE_BEGIN, 0, e->range_name);
		if (i < 0 || ev->ts < e->begin_ts)
			break;
		add_duration(&t->stats[i], ev->ts - e->begin_ts);
		break;
	}
	case RP_EV_API_CALL:
		count_device_call(t, e, ev->u.api.duration);
		break;
	case RP_EV_GPU_ACTIVITY:
		count_gpu(t, e);
		count_device_call(t, e, ev->u.gpu.end > ev->ts ? ev->u.gpu.end - ev->ts : 0);
		break;
	case RP_EV_COUNTER: {
		long i = find_stat(t, RP_EV_COUNTER, 0, ev->name ? ev->name : "");
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
		long i = find_stat(t, RP_EV_INSTANT, 0, ev->name ? ev->name : "");
		if (i >= 0)
			t->stats[i].count++;
		break;
	}
	case RP_EV_DEVICE_OP: {
		char key[RP_NAME_MAX + 64];
		snprintf(key, sizeof(key), "%s: %s", rp_reader_device_name(t->r, e->device),
			 ev->name ? ev->name : "");
		long i = find_stat(t, RP_EV_DEVICE_OP, 0, key);
		if (i < 0)
			break;
		struct stat_entry *s = &t->stats[i];
		uint64_t d = ev->u.op.end - ev->ts;
		s->count++;
		s->total_ns += d;
		if (d > s->max_ns)
			s->max_ns = d;
		break;
	}
	case RP_EV_CPU_SAMPLE:
		count_sample(t, ev);
		break;
	case RP_EV_DROPS:
		/* pid 0: the CPU sampler's kernel buffer overflowed */
		*(ev->pid ? &t->drops : &t->lost_samples) += ev->u.drops.count;
		break;
	default:
		break;
	}
	return 0;
}

static int by_total_desc(const void *a, const void *b)
{
	const struct stat_entry *x = a, *y = b;
	if (x->kind != y->kind)
		return x->kind - y->kind;
	if (x->gpu_kind != y->gpu_kind)
		return x->gpu_kind - y->gpu_kind;
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
		char name[TEXT_MAX], module[TEXT_MAX];
		fprintf(out, "%7.2f %7.2f %8llu %8llu  %-40s %s\n", 100.0 * (double)f->self / all,
			100.0 * (double)f->total / all, (unsigned long long)f->self,
			(unsigned long long)f->total, rp_text_escape(f->name, name, sizeof(name)),
			rp_text_escape(f->module, module, sizeof(module)));
	}
}

static void print_processes(FILE *out, struct tally *t)
{
	size_t n = pack(t->procs, t->procs_mask, sizeof(*t->procs), proc_used);
	if (n)
		qsort(t->procs, n, sizeof(*t->procs), by_samples_desc);
	if (!n || !t->procs[0].samples)
		return;
	fprintf(out, "\n%-16s %8s %8s %10s %7s  %s\n", "process", "pid", "samples", "cpu ms", "share",
		"command line");
	for (size_t i = 0; i < n && i < TOP_PROCS && t->procs[i].samples; i++) {
		const struct proc_stat *p = &t->procs[i];
		char ms[32] = "-"; /* without the sampling rate, CPU time is unknown */
		if (t->cpu_time_known)
			snprintf(ms, sizeof(ms), "%.1f", 1000.0 * p->cpu_s);
		char name[17], cmdline[81];
		const char *pname = rp_reader_process_name(t->r, p->pid);
		fprintf(out, "%-16s %8u %8llu %10s %6.2f%%  %s\n",
			pname ? rp_text_escape(pname, name, sizeof(name)) : "?", p->pid,
			(unsigned long long)p->samples, ms, 100.0 * (double)p->samples / (double)t->samples,
			rp_text_escape(rp_reader_process_cmdline(t->r, p->pid), cmdline, sizeof(cmdline)));
	}
}

/* Processes whose stacks look cut short, and why: the sampler walks frame
 * pointers, which code built without them (most distributions' libraries:
 * libpython, libstdc++, XLA, libtorch) does not keep.  After
 * print_processes, which packs the table. */
static void print_shallow(FILE *out, const struct tally *t)
{
	for (size_t i = 0; i <= t->procs_mask && t->procs[i].used; i++) {
		const struct proc_stat *p = &t->procs[i];
		if (p->user_samples < SHALLOW_MIN_SAMPLES || 2 * p->shallow <= p->user_samples)
			continue;
		unsigned top = 0;
		for (unsigned k = 1; k < SHALLOW_ENDS; k++)
			top = p->ends[k].n > p->ends[top].n ? k : top;
		char name[TEXT_MAX], module[TEXT_MAX];
		const char *pname = rp_reader_process_name(t->r, p->pid);
		fprintf(out, "\nwarning: the stacks of %s (pid %u) look cut short: %.0f%% of its %llu "
			"samples have at most %d user frames, the outermost mostly in %s, likely "
			"built without frame pointers and without unwind tables the daemon could "
			"use (where a frame-pointer walk is cut short it unwinds a copy of the "
			"stack with the binary's .eh_frame).  Check that [sampler] stack_copy is "
			"not never and that the binary keeps its .eh_frame, or rebuild it with "
			"-fno-omit-frame-pointer\n",
			pname ? rp_text_escape(pname, name, sizeof(name)) : "?", p->pid,
			100.0 * (double)p->shallow / (double)p->user_samples,
			(unsigned long long)p->user_samples, SHALLOW_FRAMES,
			p->ends[top].module ? rp_text_escape(p->ends[top].module, module, sizeof(module))
					    : "code outside any mapped file");
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

/* What the summary was narrowed to, and the processes that matched. */
static void print_filter(FILE *out, const struct rp_reader *r)
{
	const uint32_t *pids;
	size_t n;
	const struct rp_reader_filter *f = rp_reader_filter(r, &pids, &n);
	if (!f)
		return;
	char text[1024], line[1024];
	fprintf(out, "filter     %s: ", rp_text_escape(rp_reader_filter_text(f, text, sizeof(text)), line,
						      sizeof(line)));
	if (!n)
		fprintf(out, "no process of the session matches\n");
	for (size_t i = 0; i < n; i++)
		fprintf(out, "%s%u%s", i ? ", " : "only the events of process ", pids[i],
			i + 1 == n ? " (and host-wide counters)\n" : "");
}

/* A string of the manifest, which is read from a directory others can
 * write to, escaped for the terminal; "(null)" where it is missing. */
static const char *mtext(json_t *o, const char *key, char buf[TEXT_MAX])
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? rp_text_escape(s, buf, TEXT_MAX) : "(null)";
}

/* What a device is, "gpu 1 GPU-8f6e...": the identity the reader
 * found, or for a device without data in the window what its name says. */
static const char *device_text(const struct rp_reader *r, const char *name, char *buf, size_t len)
{
	struct rp_device_identity named;
	const struct rp_device_identity *id = NULL;
	for (size_t d = 0; name && !id && d < rp_reader_device_count(r); d++)
		if (strcmp(rp_reader_device_name(r, d), name) == 0)
			id = rp_reader_device_identity(r, d);
	if (!id) {
		(void)rp_device_identify(name ? name : "", &named);
		id = &named;
	}
	char uid[TEXT_MAX];
	if (id->kind == RP_DEVICE_HOST || id->kind == RP_DEVICE_OTHER)
		snprintf(buf, len, "%s", rp_device_kind_name(id->kind));
	else
		snprintf(buf, len, "%s %u", rp_device_kind_name(id->kind), id->index);
	if (id->uid[0]) {
		size_t n = strlen(buf);
		snprintf(buf + n, len - n, " %s", rp_text_escape(id->uid, uid, sizeof(uid)));
	}
	return buf;
}

/* The stats of one kind (sorted by total), as a table of durations: at
 * most rows of them, names cut to width. */
static void print_durations(FILE *out, const struct tally *t, uint8_t kind, uint8_t gpu_kind,
			    const char *label, int width, size_t rows)
{
	char a[TEXT_MAX];
	size_t shown = 0;
	for (size_t k = 0; k < t->nstats && shown < rows; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (s->kind != kind || s->gpu_kind != gpu_kind || !s->count)
			continue;
		if (!shown++)
			fprintf(out, "\n%-*s %8s %10s %10s %10s %10s %10s\n", width, label, "count",
				"total ms", "mean ms", "p50 ms", "p99 ms", "max ms");
		fprintf(out, "%-*.*s %8llu", width, width, rp_text_escape(s->name, a, sizeof(a)),
			(unsigned long long)s->count);
		print_ms(out, (double)s->total_ns);
		print_ms(out, (double)s->total_ns / (double)s->count);
		print_ms(out, percentile(s, 0.5));
		print_ms(out, percentile(s, 0.99));
		print_ms(out, (double)s->max_ns);
		fputc('\n', out);
	}
}

/* Stats of API calls and device activity by device ring. */
static bool by_ring(const struct stat_entry *s)
{
	return s->kind == RP_EV_API_CALL || (s->kind == RP_EV_GPU_ACTIVITY && s->gpu_kind == BY_RING);
}

/* Per device ring (ncN, gpuN, ...): its busy share (device activity time
 * over the covered window), then its API calls and device activities by
 * total time, with p50 and p99.  stats are sorted by total. */
static void print_device_calls(FILE *out, const struct tally *t, json_t *covered)
{
	int64_t ws = json_integer_value(json_object_get(covered, "start_wall_ns"));
	int64_t we = json_integer_value(json_object_get(covered, "end_wall_ns"));
	char a[TEXT_MAX];
	bool header = false;
	for (size_t k = 0; k < t->nstats; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (!by_ring(s) || !s->count)
			continue;
		if (!header) {
			fprintf(out, "\n%-8s %6s %-24s %8s %10s %10s %10s %10s\n", "device", "busy",
				"call / activity", "count", "total ms", "p50 ms", "p99 ms", "max ms");
			header = true;
		}
		size_t dlen = strcspn(s->name, "\t");
		/* Busy: the device's activity time (not its API calls). */
		uint64_t busy = 0;
		for (size_t j = 0; j < t->nstats; j++)
			if (t->stats[j].kind == RP_EV_GPU_ACTIVITY && by_ring(&t->stats[j]) &&
			    !strncmp(t->stats[j].name, s->name, dlen + 1))
				busy += t->stats[j].total_ns;
		char share[16] = "-";
		if (busy && we > ws)
			(void)snprintf(share, sizeof(share), "%5.1f%%",
				       100.0 * (double)busy / (double)(we - ws));
		fprintf(out, "%-8.*s %6s %-24.24s %8llu", (int)dlen, s->name, share,
			rp_text_escape(s->name + dlen + (s->name[dlen] != 0), a, sizeof(a)),
			(unsigned long long)s->count);
		print_ms(out, (double)s->total_ns);
		print_ms(out, percentile(s, 0.5));
		print_ms(out, percentile(s, 0.99));
		print_ms(out, (double)s->max_ns);
		fputc('\n', out);
	}
}

/* GPU activity: each device's kernel busy time over the window, the
 * kernels with the most total time, and copies and memsets by name
 * (their kind: "Memcpy HtoD", ...) with bytes and bandwidth. */
static void print_gpus(FILE *out, const struct tally *t)
{
	char a[TEXT_MAX];
	uint64_t start = rp_reader_start_ns(t->r), end = rp_reader_end_ns(t->r);
	double window = end > start ? (double)(end - start) : 0;
	bool header = false;
	for (size_t d = 0; d < MAX_GPUS; d++) {
		const struct gpu_busy *g = &t->gpus[d];
		const struct rp_device_identity *id = rp_reader_device_identity(t->r, d);
		/* GPUs only: a NeuronCore's activity has its row in the
		 * device table (print_device_calls). */
		if (!g->kernels || (id && id->kind != RP_DEVICE_GPU))
			continue;
		if (!header) {
			fprintf(out, "\n%-12s %8s %10s %12s\n", "gpu", "busy %", "kernels", "kernel ms");
			header = true;
		}
		fprintf(out, "%-12.12s %8.2f %10llu %12.3f\n",
			rp_text_escape(rp_reader_device_name(t->r, d), a, sizeof(a)),
			window > 0 ? fmin(100.0, 100.0 * (double)g->busy_ns / window) : 0.0,
			(unsigned long long)g->kernels, (double)g->busy_ns / 1e6);
	}
	print_durations(out, t, RP_EV_GPU_ACTIVITY, RP_GPU_KERNEL, "kernel", 40, TOP_KERNELS);
	header = false;
	for (size_t k = 0; k < t->nstats; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (s->kind != RP_EV_GPU_ACTIVITY || s->gpu_kind == RP_GPU_KERNEL || by_ring(s))
			continue;
		if (!header) {
			fprintf(out, "\n%-28s %8s %12s %10s %10s\n", "copy / memset", "count", "MiB",
				"total ms", "GB/s");
			header = true;
		}
		fprintf(out, "%-28.28s %8llu %12.3f %10.3f %10.3f\n",
			rp_text_escape(s->name, a, sizeof(a)), (unsigned long long)s->count,
			(double)s->bytes / (1 << 20), (double)s->total_ns / 1e6,
			s->total_ns ? (double)s->bytes / (double)s->total_ns : 0.0);
	}
}

static void print_report(FILE *out, json_t *m, struct tally *t, uint64_t corrupt)
{
	char a[TEXT_MAX], b[TEXT_MAX], c[TEXT_MAX], d[TEXT_MAX];
	fprintf(out, "session    %s (run %s, %s, %s)\n", mtext(m, "id", a), mtext(m, "run", b),
		mtext(m, "kind", c), mtext(m, "state", d));
	fprintf(out, "host       %s\n", mtext(m, "host", a));
	print_window(out, "requested", json_object_get(m, "requested"));
	print_window(out, "covered", json_object_get(m, "covered"));
	if (json_is_false(json_object_get(m, "complete_coverage")))
		fprintf(out, "           (the rings held less than the requested window)\n");
	json_t *trigger = json_object_get(m, "trigger");
	const char *reason = json_string_value(json_object_get(trigger, "reason"));
	fprintf(out, "trigger    %s%s%s\n", mtext(trigger, "source", a), reason ? ": " : "",
		reason ? rp_text_escape(reason, b, sizeof(b)) : "");
	print_filter(out, t->r);
	fprintf(out, "\n%-12s %12s %10s %8s  %s\n", "device", "events", "dropped", "lost", "is");
	size_t i;
	json_t *dev;
	json_array_foreach(json_object_get(m, "devices"), i, dev)
		fprintf(out, "%-12s %12lld %10lld %8lld  %s\n", mtext(dev, "device", a),
			json_integer_value(json_object_get(dev, "events")),
			json_integer_value(json_object_get(dev, "dropped")),
			json_integer_value(json_object_get(dev, "lost_chunks")),
			device_text(t->r, json_string_value(json_object_get(dev, "device")), b,
				    sizeof(b)));

	if (t->nstats)
		qsort(t->stats, t->nstats, sizeof(*t->stats), by_total_desc);
	print_durations(out, t, RP_EV_RANGE_BEGIN, 0, "range", 28, t->nstats);
	print_gpus(out, t);
	bool header = false;
	for (size_t k = 0; k < t->nstats; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (s->kind != RP_EV_COUNTER)
			continue;
		if (!header) {
			fprintf(out, "\n%-28s %8s %12s %12s %12s\n", "counter", "samples", "last", "min", "max");
			header = true;
		}
		fprintf(out, "%-28.28s %8llu %12.6g %12.6g %12.6g\n", rp_text_escape(s->name, a, sizeof(a)),
			(unsigned long long)s->count, s->last, s->min, s->max);
	}
	header = false;
	for (size_t k = 0, shown = 0; k < t->nstats && shown < TOP_XLA; k++) {
		const struct stat_entry *s = &t->stats[k];
		if (s->kind != RP_EV_DEVICE_OP)
			continue;
		if (!header) {
			fprintf(out, "\n%-40s %8s %10s %10s %10s\n", "XLA op (device: name)", "count",
				"total ms", "mean ms", "max ms");
			header = true;
		}
		fprintf(out, "%-40.40s %8llu", rp_text_escape(s->name, a, sizeof(a)),
			(unsigned long long)s->count);
		print_ms(out, (double)s->total_ns);
		print_ms(out, (double)s->total_ns / (double)s->count);
		print_ms(out, (double)s->max_ns);
		fputc('\n', out);
		shown++;
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
		fprintf(out, "%-28.28s %8llu\n", rp_text_escape(s->name, a, sizeof(a)),
			(unsigned long long)s->count);
	}
	print_device_calls(out, t, json_object_get(m, "covered"));
	if (t->samples) {
		print_functions(out, t);
		print_processes(out, t);
		print_shallow(out, t);
		print_symbol_notes(out, t);
	}
	fprintf(out, "\n%llu events in the window, %llu CPU samples, %llu dropped by producers",
		(unsigned long long)t->events, (unsigned long long)t->samples,
		(unsigned long long)t->drops);
	if (t->lost_samples)
		fprintf(out, ", %llu CPU samples lost", (unsigned long long)t->lost_samples);
	if (t->truncated)
		fprintf(out, ", %llu ranges still open at the window's end", (unsigned long long)t->truncated);
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
	for (size_t i = 0; t->funcs && i <= t->funcs_mask; i++)
		free(t->funcs[i].name);
	free(t->funcs);
	free(t->procs);
}

int rp_write_summary(struct rp_reader *r, FILE *out, struct rp_err *err)
{
	struct tally t = { .r = r, .sym = rp_reader_symbolizer(r),
			   .cpu_time_known = rp_reader_sample_hz_at(r, rp_reader_start_ns(r)) > 0 };
	int rc = rp_reader_each(r, count_event, &t, err);
	if (rc == 0)
		print_report(out, rp_reader_manifest(r), &t, rp_reader_corrupt_chunks(r));
	free_tally(&t);
	return rc;
}

int rp_summary_write(const char *session_dir, const struct rp_reader_filter *filter, FILE *out,
		     struct rp_err *err)
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
		struct rp_reader *r = NULL;
		if ((rc = rp_reader_open(session_dir, m, NULL, &r, err)) == 0 &&
		    (rc = rp_reader_set_filter(r, filter)) < 0)
			rp_err_set(err, rc, "out of memory for the process filter");
		if (rc == 0)
			rc = rp_write_summary(r, out, err);
		rp_reader_free(r);
	}
	json_decref(all);
	return rc;
}
