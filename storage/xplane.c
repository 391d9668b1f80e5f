/* XSpace for XProf (TensorBoard's Profile tab): one host's part of a
 * session as <host>.xplane.pb.
 *
 * Planes: /host:CPU (a line per thread: its annotation ranges, instants
 * and runtime API calls, whichever ring they came from; under it a line
 * of the thread's CPU samples), /device:GPU:<n>, /device:TPU:<n>,
 * /device:CUSTOM:NeuronCore <n> or /device:CUSTOM:<name> per device ring
 * as its recorded identity says (a line per GPU stream; the device's
 * stable id, when it has one, as the plane's device_uid stat), a
 * _counters_ line on the plane of the ring that recorded each counter,
 * and Task Environment with the profile's start and stop (epoch ns).
 * Line timestamps are 0, the profile start: an event's offset_ps is its
 * time since the start, so picoseconds never overflow.
 *
 * CPU samples are shown as a flame chart: per sampled thread, a line of
 * the symbolized stack, root on top, where consecutive samples that share
 * a frame extend one event (named by the function, with the number of
 * samples it covers) and each sample lasts one sampling period (up to the
 * next sample).  A thread not sampled for 1.5 periods is off CPU: its
 * frames end one period after its last sample.
 *
 * Streaming: XSpace nests length-prefixed messages, so a plane can only be
 * written once the sizes of all its lines are known.  Each event is
 * encoded with protobuf-c when it completes and goes into its line's batch
 * in memory; a batch is sorted (by begin, longer first) and spilled to a
 * temporary file.  A line's spilled batches form sorted runs: a batch that
 * does not sort after the previous one starts a new run (on a tie the
 * event read later goes first, as within a batch, so the output does not
 * depend on where batches were cut).  A thread's ranges complete innermost
 * first, so its batch is held while a top-level range (or a sampled stack)
 * is open; all batches together hold at most HELD_MAX bytes, past which
 * the largest is spilled (a range open for long then costs a run per
 * spill).  Events of the same thread from another ring (API calls in
 * gpu0's ring, read after the host's) start a run of their own.  At the
 * end, each line's runs are merged, FANIN at a time (more runs take more
 * passes through the file), and the merged events are checked for nesting:
 * an event that partly overlaps one before it goes to an extra line of the
 * same thread ("... overlap N"), so that every line nests.  The merged
 * events go back to the file per final line, whose sizes are then known,
 * and are copied into the output behind their hand-framed lines and
 * planes.  Memory: HELD_MAX, FANIN read buffers, a write buffer per
 * overlap level, the names and the runs' lists of extents; not the events.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "table.h"
#include "writers.h"
#include "xplane.pb-c.h"

#define BATCH_BYTES (32u << 10)
/* The most all lines' batches hold; past it, the largest is spilled. */
#define HELD_MAX (16u << 20)
#define IO_BLOCK (64u << 10)
#define FANIN 32
/* An encoded event with its framing: ids, two times and six stats fit. */
#define EVENT_MAX 128
/* The sampler's default rate (the daemon's), for sessions that lack one. */
#define DEFAULT_SAMPLE_HZ 99.0
/* Counter, CPU sample and overlap lines get ids above every tid (pid_max
 * is at most 2^22) and below XProf's derived line ids (0xdeadbeef on). */
#define EXTRA_LINE_ID 0x80000000ll

/* Every plane carries the same stat metadata: id = index + 1. */
enum stat_id {
	ST_VALUE = 1,
	ST_CORRELATION,
	ST_BYTES,
	ST_STREAM,
	ST_DEVICE,
	ST_TRUNCATED,
	ST_DROPPED,
	ST_SAMPLES,
	ST_START,
	ST_STOP,
	ST_DEVICE_UID,
	ST_HLO_OP,
	ST_HLO_MODULE,
	ST_PROGRAM_ID,
	ST_FLOPS,
	ST_BYTES_ACCESSED,
	ST_FLOW,
	ST_KERNEL_DETAILS,
	NSTATS = ST_KERNEL_DETAILS,
};

static const char *const stat_names[NSTATS + 1] = {
	[ST_VALUE] = "value",
	[ST_CORRELATION] = "correlation_id",
	[ST_BYTES] = "bytes",
	[ST_STREAM] = "stream_id",
	[ST_DEVICE] = "device_id",
	[ST_TRUNCATED] = "truncated",
	[ST_DROPPED] = "dropped",
	[ST_SAMPLES] = "samples",
	[ST_START] = "profile_start_time",
	[ST_STOP] = "profile_stop_time",
	[ST_DEVICE_UID] = "device_uid",
	/* XLA's names, which XProf's tools look for. */
	[ST_HLO_OP] = "hlo_op",
	[ST_HLO_MODULE] = "hlo_module",
	[ST_PROGRAM_ID] = "program_id",
	[ST_FLOPS] = "flops",
	[ST_BYTES_ACCESSED] = "bytes_accessed",
	/* TSL's XFlow, which XProf's trace viewer draws as an arrow. */
	[ST_FLOW] = "flow",
	/* XLA's GPU tracer's launch configuration, which XProf's kernel
	 * stats parse. */
	[ST_KERNEL_DETAILS] = "kernel_details",
};

/* XFlow's encoding (tsl/profiler/utils/xplane_schema.h): direction in
 * bits 0..1, the flow id in 2..57, the category (ContextType) in 58..63. */
enum { FLOW_IN = 1, FLOW_OUT = 2 };
#define FLOW_ID_MASK ((1ull << 56) - 1)
#define FLOW_GPU_LAUNCH 9ull /* ContextType::kGpuLaunch */

/* In the order lines are shown within a plane. */
enum line_role {
	ROLE_COUNTERS,
	ROLE_THREAD,
	ROLE_SAMPLES,
	ROLE_STREAM,
	/* A device's XLA events (RP_EV_DEVICE_OP), as XLA lays them out:
	 * modules, ops (those with an hlo_op), and the rest by line id. */
	ROLE_XLA_MODULES,
	ROLE_XLA_OPS,
	ROLE_XLA_LINE,
};

/* A stretch of the spill file. */
struct extent {
	uint64_t off, len;
};

struct extents {
	struct extent *v;
	size_t n, cap;
	uint64_t bytes;
};

/* A record in the spill: begin and end (ns since the profile start),
 * then len bytes: the event, framed as XLine field 4. */
struct rec {
	uint64_t begin, end;
	uint32_t len;
};
#define REC_HDR 20

/* Events of a line, in memory until sorted and spilled. */
struct batch_ent {
	uint64_t begin, end;
	uint32_t off, len;
};

struct batch {
	unsigned char *bytes;
	size_t len, cap;
	struct batch_ent *ents;
	size_t n, ents_cap;
};

/* A sorted run: records in key order over its extents; last_* is the
 * last record's key. */
struct run {
	struct extents ext;
	uint64_t last_begin, last_end;
};

struct frame {
	uint32_t meta;
	uint32_t samples;
	uint64_t begin;
};

/* A sampled thread's open stack, root first. */
struct flame {
	struct frame f[RP_STACK_MAX];
	unsigned depth;
	uint64_t last_ts, period;
};

struct line {
	size_t plane;
	uint8_t role;
	uint32_t pid, id;  /* id: the tid, or the GPU stream */
	unsigned open;     /* ranges open: the batch waits for them (frames: flame->depth) */
	unsigned gpu_kinds; /* ROLE_STREAM: bit per enum rp_gpu_activity_kind seen */
	struct batch batch;
	struct run *runs;
	size_t nruns, runs_cap;
	struct flame *flame;
};

/* A name of a plane in its index: the name's hash kept, to grow the
 * index without hashing the names again. */
struct name_slot {
	uint32_t id; /* 0: empty */
	uint32_t hash;
};

/* An event metadata's name, and the name shown for it when they differ
 * (a C++ frame: the mangled symbol, shown demangled); one allocation. */
struct event_name {
	char *name;
	const char *display; /* NULL: the name */
};

/* Event metadata names of a plane: id = index + 1. */
struct plane {
	char name[RP_NAME_MAX + 32];
	const char *uid; /* the device's stable id, NULL when none; the reader's */
	struct event_name *names;
	size_t nnames, names_cap;
	struct name_slot *slots; /* open addressing */
	size_t slots_mask;
};

/* Open addressing from a 128-bit key to a u32. */
struct slot {
	uint64_t a, b;
	uint32_t val;
	bool used;
};

struct table {
	struct slot *v;
	size_t mask, n;
};

/* Reads records of a run (or of any extents) back. */
struct cursor {
	const struct extents *x;
	size_t ext;
	uint64_t pos;  /* bytes of extent ext loaded into buf */
	uint64_t left; /* bytes of x not taken yet */
	unsigned char *buf;
	size_t have, at;
	struct rec head;
	unsigned char payload[EVENT_MAX];
	bool valid;
};

/* Collects the bytes of a final line or of a merged run in the spill. */
struct writer {
	struct extents *dst;
	unsigned char *buf;
	size_t fill;
};

/* One line of output: a line's events at one overlap level. */
struct out_line {
	size_t line;
	unsigned level;
	struct extents ext;
};

struct level {
	struct extents ext;
	struct writer wr;
	uint64_t *stack; /* ends of the events that enclose the next */
	size_t depth, cap;
};

struct xw {
	struct rp_reader *r;
	struct rp_err *err;
	uint64_t start;
	int fd; /* the spill, -1 before it is made */
	const char *scratch_dir; /* where it is */
	uint64_t spill_end;
	struct plane *planes;
	size_t nplanes;
	size_t *dev_plane;
	struct line *lines;
	size_t nlines, lines_cap;
	struct table line_tab, sym_tab;
	size_t held; /* bytes in all batches, their index included */
	unsigned char *copy_buf;
	uint64_t drops;
	/* Strings that events' ref_value stats name (hlo_op, hlo_module):
	 * stat metadata NSTATS + id on every plane. */
	struct plane refs;
};

static int nomem(struct xw *w)
{
	return rp_err_set(w->err, -ENOMEM, "out of memory writing the XSpace file");
}


static size_t put_varint(unsigned char *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (unsigned char)v;
	return n;
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint64_t key_hash(uint64_t a, uint64_t b)
{
	return rp_hash_u64(a * 0x9e3779b97f4a7c15ull ^ b);
}

static bool slot_used(const void *e) { return ((const struct slot *)e)->used; }
static uint64_t slot_hash(const void *e)
{
	const struct slot *s = e;
	return key_hash(s->a, s->b);
}

/* The value slot for key (a, b), made (0) when new; NULL without memory. */
static uint32_t *table_get(struct table *t, uint64_t a, uint64_t b)
{
	if (rp_table_reserve(&t->v, &t->mask, t->n, sizeof(*t->v), slot_used, slot_hash,
			     RP_TABLE_FIRST) < 0)
		return NULL;
	size_t i = key_hash(a, b) & t->mask;
	for (; t->v[i].used; i = (i + 1) & t->mask)
		if (t->v[i].a == a && t->v[i].b == b)
			return &t->v[i].val;
	t->v[i] = (struct slot){ .a = a, .b = b, .used = true };
	t->n++;
	return &t->v[i].val;
}

static bool name_used(const void *e) { return ((const struct name_slot *)e)->id != 0; }
static uint64_t name_hash(const void *e) { return ((const struct name_slot *)e)->hash; }

/* The event metadata id of name on plane p, made when new, shown as
 * display (NULL: as its name); 0 without memory. */
static uint32_t intern_in(struct plane *pl, const char *name, const char *display)
{
	if (rp_table_reserve(&pl->slots, &pl->slots_mask, pl->nnames, sizeof(*pl->slots), name_used,
			     name_hash, RP_TABLE_FIRST) < 0)
		return 0;
	uint32_t h = (uint32_t)rp_hash_str(name);
	size_t i = h & pl->slots_mask;
	for (; pl->slots[i].id; i = (i + 1) & pl->slots_mask)
		if (pl->slots[i].hash == h && strcmp(pl->names[pl->slots[i].id - 1].name, name) == 0)
			return pl->slots[i].id;
	size_t n = strlen(name) + 1, d = display ? strlen(display) + 1 : 0;
	char *copy = malloc(n + d);
	if (!copy || rp_array_reserve(&pl->names, &pl->names_cap, pl->nnames + 1,
				      sizeof(*pl->names)) < 0) {
		free(copy);
		return 0;
	}
	memcpy(copy, name, n);
	if (display)
		memcpy(copy + n, display, d);
	pl->names[pl->nnames++] = (struct event_name){ copy, display ? copy + n : NULL };
	pl->slots[i] = (struct name_slot){ .id = (uint32_t)pl->nnames, .hash = h };
	return pl->slots[i].id;
}

static uint32_t intern_shown(struct xw *w, size_t p, const char *name, const char *display)
{
	return intern_in(&w->planes[p], name, display);
}

static uint32_t intern(struct xw *w, size_t p, const char *name)
{
	return intern_shown(w, p, name, NULL);
}

/* The line of (role, pid, id) on plane p, made when new; NULL without
 * memory.  The pointer lasts until the next line is made. */
static struct line *get_line(struct xw *w, size_t p, enum line_role role, uint32_t pid, uint32_t id)
{
	uint32_t *slot = table_get(&w->line_tab, (uint64_t)p << 8 | role, (uint64_t)pid << 32 | id);
	if (!slot)
		return NULL;
	if (*slot)
		return &w->lines[*slot - 1];
	if (rp_array_reserve(&w->lines, &w->lines_cap, w->nlines + 1, sizeof(*w->lines)) < 0)
		return NULL;
	w->lines[w->nlines] = (struct line){ .plane = p, .role = (uint8_t)role, .pid = pid, .id = id };
	*slot = (uint32_t)++w->nlines;
	return &w->lines[w->nlines - 1];
}

static int spill_write(struct xw *w, const void *data, size_t len, struct extents *x)
{
	if (rp_array_reserve(&x->v, &x->cap, x->n + 1, sizeof(*x->v)) < 0)
		return nomem(w);
	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(w->fd, (const char *)data + done, len - done,
				   (off_t)(w->spill_end + done));
		if (n <= 0) {
			int e = n < 0 ? errno : ENOSPC; /* a short write: the disk is full */
			return rp_err_set(w->err, -e, "cannot write the XSpace exporter's temporary "
					  "file in %s: %s%s", w->scratch_dir, strerror(e),
					  e == ENOSPC ? " (free space on its file system, or export "
							"elsewhere with -o)" : "");
		}
		done += (size_t)n;
	}
	x->v[x->n++] = (struct extent){ w->spill_end, len };
	x->bytes += len;
	w->spill_end += len;
	return 0;
}

static int writer_put(struct xw *w, struct writer *wr, const void *data, size_t len)
{
	const unsigned char *d = data;
	while (len) {
		if (!wr->buf && !(wr->buf = malloc(IO_BLOCK)))
			return nomem(w);
		size_t k = IO_BLOCK - wr->fill < len ? IO_BLOCK - wr->fill : len;
		memcpy(wr->buf + wr->fill, d, k);
		wr->fill += k;
		d += k;
		len -= k;
		if (wr->fill == IO_BLOCK) {
			int rc = spill_write(w, wr->buf, wr->fill, wr->dst);
			wr->fill = 0;
			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static int writer_close(struct xw *w, struct writer *wr)
{
	int rc = wr->fill ? spill_write(w, wr->buf, wr->fill, wr->dst) : 0;
	free(wr->buf);
	wr->buf = NULL;
	wr->fill = 0;
	return rc;
}

static int put_rec(struct xw *w, struct writer *wr, const struct rec *h, const unsigned char *payload)
{
	unsigned char hdr[REC_HDR];
	memcpy(hdr, &h->begin, 8);
	memcpy(hdr + 8, &h->end, 8);
	memcpy(hdr + 16, &h->len, 4);
	int rc = writer_put(w, wr, hdr, REC_HDR);
	return rc < 0 ? rc : writer_put(w, wr, payload, h->len);
}

/* a sorts before b: it begins first, or as early and ends later (a
 * parent before its children). */
static bool key_less(uint64_t ab, uint64_t ae, uint64_t bb, uint64_t be)
{
	return ab < bb || (ab == bb && ae > be);
}

static int by_key(const void *x, const void *y)
{
	const struct batch_ent *a = x, *b = y;
	if (key_less(a->begin, a->end, b->begin, b->end))
		return -1;
	if (key_less(b->begin, b->end, a->begin, a->end))
		return 1;
	/* The same span: the later one encloses the other (ranges and
	 * frames end innermost first), so it goes first. */
	return a->off > b->off ? -1 : a->off < b->off;
}

/* Sorts l's batch and spills it to the end of its last run, or to a new
 * run when its first event does not sort after that run's last one (on a
 * tie the later batch goes first: merge_runs puts it first). */
static int flush_batch(struct xw *w, struct line *l)
{
	struct batch *b = &l->batch;
	if (!b->n)
		return 0;
	bool sorted = true;
	for (size_t i = 1; i < b->n && sorted; i++)
		sorted = key_less(b->ents[i - 1].begin, b->ents[i - 1].end, b->ents[i].begin,
				  b->ents[i].end);
	if (!sorted)
		qsort(b->ents, b->n, sizeof(*b->ents), by_key);
	struct run *last = l->nruns ? &l->runs[l->nruns - 1] : NULL;
	if (!last || !key_less(last->last_begin, last->last_end, b->ents[0].begin, b->ents[0].end)) {
		if (rp_array_reserve(&l->runs, &l->runs_cap, l->nruns + 1, sizeof(*l->runs)) < 0)
			return nomem(w);
		last = &l->runs[l->nruns++];
		*last = (struct run){ 0 };
	}
	last->last_begin = b->ents[b->n - 1].begin;
	last->last_end = b->ents[b->n - 1].end;
	struct writer wr = { .dst = &last->ext };
	int rc = 0;
	for (size_t i = 0; i < b->n && rc == 0; i++) {
		const struct batch_ent *e = &b->ents[i];
		struct rec h = { e->begin, e->end, e->len };
		rc = put_rec(w, &wr, &h, b->bytes + e->off);
	}
	int closed = writer_close(w, &wr);
	w->held -= b->len + b->n * sizeof(*b->ents);
	b->n = 0;
	b->len = 0;
	return rc < 0 ? rc : closed;
}

/* Keeps the batches within HELD_MAX: spills the largest. */
static int limit_held(struct xw *w)
{
	while (w->held > HELD_MAX) {
		struct line *big = &w->lines[0];
		for (size_t i = 1; i < w->nlines; i++)
			if (w->lines[i].batch.len > big->batch.len)
				big = &w->lines[i];
		int rc = flush_batch(w, big);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Adds an event to line l: metadata meta over [begin, end] (host ns),
 * with stats. */
static int add_event(struct xw *w, struct line *l, uint32_t meta, uint64_t begin, uint64_t end,
		     Tensorflow__Profiler__XStat **stats, size_t nstats)
{
	if (!meta)
		return nomem(w);
	begin = begin > w->start ? begin - w->start : 0;
	end = end > w->start ? end - w->start : 0;
	if (end < begin)
		end = begin;
	Tensorflow__Profiler__XEvent xe = TENSORFLOW__PROFILER__XEVENT__INIT;
	xe.metadata_id = meta;
	xe.data_case = TENSORFLOW__PROFILER__XEVENT__DATA_OFFSET_PS;
	xe.offset_ps = (int64_t)(begin * 1000);
	xe.duration_ps = (int64_t)((end - begin) * 1000);
	xe.n_stats = nstats;
	xe.stats = stats;
	struct batch *b = &l->batch;
	if (rp_array_reserve(&b->bytes, &b->cap, b->len + EVENT_MAX, 1) < 0 ||
	    rp_array_reserve(&b->ents, &b->ents_cap, b->n + 1, sizeof(*b->ents)) < 0)
		return nomem(w);
	/* Under 128 bytes, so its length is one byte. */
	unsigned char *p = b->bytes + b->len;
	p[0] = 4 << 3 | 2;
	size_t n = tensorflow__profiler__xevent__pack(&xe, p + 2);
	p[1] = (unsigned char)n;
	b->ents[b->n++] = (struct batch_ent){ begin, end, (uint32_t)b->len, (uint32_t)(n + 2) };
	b->len += n + 2;
	w->held += n + 2 + sizeof(*b->ents);
	if (!(l->flame ? l->flame->depth : l->open) && b->len >= BATCH_BYTES)
		return flush_batch(w, l);
	return limit_held(w);
}

static Tensorflow__Profiler__XStat u64_stat(enum stat_id id, uint64_t v)
{
	Tensorflow__Profiler__XStat s = TENSORFLOW__PROFILER__XSTAT__INIT;
	s.metadata_id = id;
	s.value_case = TENSORFLOW__PROFILER__XSTAT__VALUE_UINT64_VALUE;
	s.uint64_value = v;
	return s;
}

static Tensorflow__Profiler__XStat double_stat(enum stat_id id, double v)
{
	Tensorflow__Profiler__XStat s = TENSORFLOW__PROFILER__XSTAT__INIT;
	s.metadata_id = id;
	s.value_case = TENSORFLOW__PROFILER__XSTAT__VALUE_DOUBLE_VALUE;
	s.double_value = v;
	return s;
}

/* The flow from a runtime API call to the GPU work it launched: CUPTI's
 * correlation ids are per process (and 32 bits), so the pid goes above. */
static Tensorflow__Profiler__XStat launch_flow(uint32_t pid, uint64_t corr, unsigned dir)
{
	uint64_t id = ((uint64_t)pid << 32 | (corr & UINT32_MAX)) & FLOW_ID_MASK;
	return u64_stat(ST_FLOW, FLOW_GPU_LAUNCH << 58 | id << 2 | dir);
}

/* A string stat as a reference to stat metadata named str (how XLA
 * writes hlo_op); false without memory. */
static bool ref_stat(struct xw *w, enum stat_id id, const char *str, Tensorflow__Profiler__XStat *s)
{
	uint32_t ref = intern_in(&w->refs, str, NULL);
	tensorflow__profiler__xstat__init(s);
	s->metadata_id = id;
	s->value_case = TENSORFLOW__PROFILER__XSTAT__VALUE_REF_VALUE;
	s->ref_value = NSTATS + (uint64_t)ref;
	return ref != 0;
}

/* An XLA op, module or step: on the host, on its thread's line like the
 * runtime's API calls; on a device, on its XLA Ops, XLA Modules or own
 * line.  The stats keep XLA's names. */
static int on_device_op(struct xw *w, size_t p, const struct rp_event *ev)
{
	bool host = ev->u.op.device == RP_OP_HOST;
	enum line_role role = host ? ROLE_THREAD
			      : ev->u.op.hlo_op ? ROLE_XLA_OPS
			      : ev->u.op.hlo_module ? ROLE_XLA_MODULES : ROLE_XLA_LINE;
	size_t plane = host ? 0 : p;
	struct line *l = get_line(w, plane, role, host ? ev->pid : 0,
				  role == ROLE_XLA_LINE || host ? ev->tid : 0);
	if (!l)
		return nomem(w);
	Tensorflow__Profiler__XStat s[5], *sp[5];
	size_t n = 0;
	if (ev->u.op.hlo_op && !ref_stat(w, ST_HLO_OP, ev->u.op.hlo_op, &s[n++]))
		return nomem(w);
	if (ev->u.op.hlo_module && !ref_stat(w, ST_HLO_MODULE, ev->u.op.hlo_module, &s[n++]))
		return nomem(w);
	if (ev->u.op.program_id)
		s[n++] = u64_stat(ST_PROGRAM_ID, ev->u.op.program_id);
	if (ev->u.op.flops)
		s[n++] = u64_stat(ST_FLOPS, ev->u.op.flops);
	if (ev->u.op.bytes_accessed)
		s[n++] = u64_stat(ST_BYTES_ACCESSED, ev->u.op.bytes_accessed);
	for (size_t i = 0; i < n; i++)
		sp[i] = &s[i];
	return add_event(w, l, intern(w, plane, ev->name ? ev->name : "XLA op"), ev->ts,
			 ev->u.op.end, sp, n);
}

/* Ends l's frames from the innermost to depth keep at end. */
static int close_frames(struct xw *w, struct line *l, unsigned keep, uint64_t end)
{
	struct flame *f = l->flame;
	while (f->depth > keep) {
		const struct frame *fr = &f->f[--f->depth];
		Tensorflow__Profiler__XStat s = u64_stat(ST_SAMPLES, fr->samples), *sp = &s;
		int rc = add_event(w, l, fr->meta, fr->begin, end, &sp, 1);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The event metadata (on the host plane) naming the frame at ip, one
 * look-up per process and address.  Kernel addresses are the same in
 * every process. */
static uint32_t frame_meta(struct xw *w, uint32_t pid, uint64_t ip, bool kernel)
{
	uint32_t *slot = table_get(&w->sym_tab, kernel ? 1 : (uint64_t)pid << 1, ip);
	if (!slot || *slot)
		return slot ? *slot : 0;
	struct rp_symbol sym;
	char buf[128];
	rp_symbolize(rp_reader_symbolizer(w->r), pid, ip, kernel, &sym);
	const char *name = rp_symbol_name(&sym, buf, sizeof(buf));
	/* A C++ frame: named by its symbol, shown demangled (XProf's trace
	 * viewer shows the display name, the name as its long_name). */
	return *slot = sym.mangled ? intern_shown(w, 0, sym.mangled, name) : intern(w, 0, name);
}

static int on_sample(struct xw *w, const struct rp_event *ev)
{
	struct line *l = get_line(w, 0, ROLE_SAMPLES, ev->pid, ev->tid);
	if (!l || (!l->flame && !(l->flame = calloc(1, sizeof(*l->flame)))))
		return nomem(w);
	struct flame *f = l->flame;
	uint32_t ids[RP_STACK_MAX];
	unsigned n = ev->u.sample.nframes < RP_STACK_MAX ? ev->u.sample.nframes : RP_STACK_MAX;
	/* Leaf first in the event, root first here. */
	for (unsigned i = 0; i < n; i++) {
		uint64_t ip = rp_frame_address(ev->u.sample.frames, ev->u.sample.nkernel, i);
		if (!(ids[n - 1 - i] = frame_meta(w, ev->pid, ip, i < ev->u.sample.nkernel)))
			return nomem(w);
	}
	double hz = rp_reader_sample_hz_at(w->r, ev->ts);
	uint64_t period = (uint64_t)(1e9 / (hz > 0 ? hz : DEFAULT_SAMPLE_HZ) + 0.5);
	int rc = 0;
	if (f->depth && ev->ts > f->last_ts + f->period + f->period / 2)
		rc = close_frames(w, l, 0, f->last_ts + f->period);
	unsigned common = 0;
	while (common < f->depth && common < n && f->f[common].meta == ids[common])
		common++;
	if (rc < 0 || (rc = close_frames(w, l, common, ev->ts)) < 0)
		return rc;
	for (unsigned i = 0; i < common; i++)
		f->f[i].samples++;
	for (unsigned i = common; i < n; i++)
		f->f[i] = (struct frame){ ids[i], 1, ev->ts };
	f->depth = n;
	f->last_ts = ev->ts;
	f->period = period;
	return 0;
}

static int on_counter(struct xw *w, size_t p, const struct rp_event *ev)
{
	char name[RP_NAME_MAX + 32];
	const char *n = ev->name ? ev->name : "counter";
	/* Counters of a process, not the host's, keep apart from another's. */
	if (ev->pid)
		snprintf(name, sizeof(name), "%s (pid %u)", n, ev->pid);
	struct line *l = get_line(w, p, ROLE_COUNTERS, 0, 0);
	if (!l)
		return nomem(w);
	Tensorflow__Profiler__XStat s = double_stat(ST_VALUE, ev->u.counter.value), *sp = &s;
	return add_event(w, l, intern(w, p, ev->pid ? name : n), ev->ts, ev->ts, &sp, 1);
}

static const char *gpu_kind_name(unsigned kind)
{
	switch (kind) {
	case RP_GPU_KERNEL: return "Compute";
	case RP_GPU_MEMCPY: return "Memcpy";
	case RP_GPU_MEMSET: return "Memset";
	default: return NULL;
	}
}

static int on_gpu(struct xw *w, size_t p, const struct rp_event *ev)
{
	struct line *l = get_line(w, p, ROLE_STREAM, 0, ev->u.gpu.stream);
	if (!l)
		return nomem(w);
	if (ev->u.gpu.kind < 32)
		l->gpu_kinds |= 1u << ev->u.gpu.kind;
	Tensorflow__Profiler__XStat s[6], *sp[6];
	size_t n = 0;
	const struct rp_gpu_launch *g = &ev->u.gpu.launch;
	if (g->block[0]) {
		/* XLA's format (xla/backends/profiler/gpu KernelDetails), less
		 * occ_pct, which CUPTI's record does not give. */
		char d[160];
		snprintf(d, sizeof(d),
			 "regs:%u static_shared:%u dynamic_shared:%u grid:%u,%u,%u block:%u,%u,%u",
			 g->registers, g->static_shared, g->dynamic_shared, g->grid[0], g->grid[1],
			 g->grid[2], g->block[0], g->block[1], g->block[2]);
		if (!ref_stat(w, ST_KERNEL_DETAILS, d, &s[n++]))
			return nomem(w);
	}
	if (ev->u.gpu.correlation) {
		s[n++] = u64_stat(ST_CORRELATION, ev->u.gpu.correlation);
		s[n++] = launch_flow(ev->pid, ev->u.gpu.correlation, FLOW_IN);
	}
	if (ev->u.gpu.bytes)
		s[n++] = u64_stat(ST_BYTES, ev->u.gpu.bytes);
	s[n++] = u64_stat(ST_STREAM, ev->u.gpu.stream);
	s[n++] = u64_stat(ST_DEVICE, ev->u.gpu.device);
	for (size_t i = 0; i < n; i++)
		sp[i] = &s[i];
	const char *name = ev->name ? rp_symbolizer_demangle(rp_reader_symbolizer(w->r), ev->name)
				    : gpu_kind_name(ev->u.gpu.kind);
	return add_event(w, l, intern(w, p, name ? name : "gpu activity"), ev->ts, ev->u.gpu.end,
			 sp, n);
}

static int on_api_call(struct xw *w, struct line *l, const struct rp_event *ev)
{
	Tensorflow__Profiler__XStat s[3], *sp[3] = { &s[0], &s[1], &s[2] };
	size_t n = 0;
	s[n++] = u64_stat(ST_DEVICE, ev->u.api.device);
	if (ev->u.api.correlation) {
		s[n++] = u64_stat(ST_CORRELATION, ev->u.api.correlation);
		s[n++] = launch_flow(ev->pid, ev->u.api.correlation, FLOW_OUT);
	}
	return add_event(w, l, intern(w, 0, ev->name ? ev->name : "api call"), ev->ts,
			 ev->ts + ev->u.api.duration, sp, n);
}

static int on_event(void *ctx, const struct rp_reader_event *e)
{
	struct xw *w = ctx;
	const struct rp_event *ev = e->ev;
	size_t p = w->dev_plane[e->device];
	struct line *l;
	Tensorflow__Profiler__XStat s, *sp = &s;
	switch (ev->kind) {
	case RP_EV_RANGE_BEGIN:
		if (!(l = get_line(w, p, ROLE_THREAD, ev->pid, ev->tid)))
			return nomem(w);
		l->open++;
		return 0;
	case RP_EV_RANGE_END:
		if (!(l = get_line(w, p, ROLE_THREAD, ev->pid, ev->tid)))
			return nomem(w);
		if (l->open)
			l->open--;
		s = u64_stat(ST_TRUNCATED, 1);
		return add_event(w, l, intern(w, p, e->range_name ? e->range_name : ""), e->begin_ts,
				 ev->ts, &sp, e->truncated);
	case RP_EV_INSTANT:
		if (!(l = get_line(w, p, ROLE_THREAD, ev->pid, ev->tid)))
			return nomem(w);
		return add_event(w, l, intern(w, p, ev->name ? ev->name : ""), ev->ts, ev->ts, NULL, 0);
	case RP_EV_API_CALL:
		/* The runtime's calls belong to the host thread that made them. */
		if (!(l = get_line(w, 0, ROLE_THREAD, ev->pid, ev->tid)))
			return nomem(w);
		return on_api_call(w, l, ev);
	case RP_EV_DROPS:
		if (!(l = get_line(w, p, ROLE_THREAD, ev->pid, ev->tid)))
			return nomem(w);
		w->drops += ev->u.drops.count;
		s = u64_stat(ST_DROPPED, ev->u.drops.count);
		return add_event(w, l, intern(w, p, "dropped events"), ev->ts, ev->ts, &sp, 1);
	case RP_EV_COUNTER:
		return on_counter(w, p, ev);
	case RP_EV_GPU_ACTIVITY:
		return on_gpu(w, p, ev);
	case RP_EV_CPU_SAMPLE:
		return on_sample(w, ev);
	case RP_EV_DEVICE_OP:
		return on_device_op(w, p, ev);
	default:
		return 0;
	}
}

static int cursor_read(struct xw *w, struct cursor *c, void *dst, size_t n)
{
	unsigned char *d = dst;
	while (n) {
		if (c->at == c->have) {
			while (c->ext < c->x->n && c->pos == c->x->v[c->ext].len) {
				c->ext++;
				c->pos = 0;
			}
			if (c->ext == c->x->n)
				return rp_err_set(w->err, -EIO, "the XSpace exporter's temporary file "
						  "ends early");
			const struct extent *e = &c->x->v[c->ext];
			size_t len = e->len - c->pos < IO_BLOCK ? (size_t)(e->len - c->pos) : IO_BLOCK;
			if (pread(w->fd, c->buf, len, (off_t)(e->off + c->pos)) != (ssize_t)len)
				return rp_err_set(w->err, -EIO, "cannot read the XSpace exporter's "
						  "temporary file back: %s", strerror(errno));
			c->pos += len;
			c->have = len;
			c->at = 0;
		}
		size_t k = c->have - c->at < n ? c->have - c->at : n;
		memcpy(d, c->buf + c->at, k);
		c->at += k;
		d += k;
		n -= k;
	}
	return 0;
}

/* The cursor's next record into head and payload; valid false at the end. */
static int cursor_next(struct xw *w, struct cursor *c)
{
	unsigned char h[REC_HDR];
	if (!(c->valid = c->left > 0))
		return 0;
	int rc = cursor_read(w, c, h, REC_HDR);
	if (rc < 0)
		return rc;
	memcpy(&c->head.begin, h, 8);
	memcpy(&c->head.end, h + 8, 8);
	memcpy(&c->head.len, h + 16, 4);
	if (c->head.len > EVENT_MAX || REC_HDR + (uint64_t)c->head.len > c->left)
		return rp_err_set(w->err, -EIO, "the XSpace exporter's temporary file is damaged");
	c->left -= REC_HDR + c->head.len;
	return cursor_read(w, c, c->payload, c->head.len);
}

typedef int (*rec_sink)(struct xw *w, void *ctx, const struct rec *h, const unsigned char *payload);

/* Hands the records of runs[0..n) to sink in key order.  Ties: the later
 * run first, as by_key puts the later event first in a batch (it was read
 * later, so it encloses the other). */
static int merge_runs(struct xw *w, const struct run *runs, size_t n, rec_sink sink, void *ctx)
{
	if (!n)
		return 0;
	struct cursor *c = calloc(n, sizeof(*c));
	int rc = c ? 0 : nomem(w);
	for (size_t i = 0; i < n && rc == 0; i++) {
		c[i] = (struct cursor){ .x = &runs[i].ext, .left = runs[i].ext.bytes };
		if (!(c[i].buf = malloc(IO_BLOCK)))
			rc = nomem(w);
		else
			rc = cursor_next(w, &c[i]);
	}
	while (rc == 0) {
		struct cursor *min = NULL;
		for (size_t i = n; i-- > 0;)
			if (c[i].valid && (!min || key_less(c[i].head.begin, c[i].head.end,
							    min->head.begin, min->head.end)))
				min = &c[i];
		if (!min)
			break;
		if ((rc = sink(w, ctx, &min->head, min->payload)) == 0)
			rc = cursor_next(w, min);
	}
	for (size_t i = 0; c && i < n; i++)
		free(c[i].buf);
	free(c);
	return rc;
}

static int sink_run(struct xw *w, void *ctx, const struct rec *h, const unsigned char *payload)
{
	return put_rec(w, ctx, h, payload);
}

/* Merges l's runs FANIN neighbours at a time, so that they stay in the
 * order they were read (merge_runs' ties need it), until FANIN or fewer
 * are left. */
static int reduce_runs(struct xw *w, struct line *l)
{
	while (l->nruns > FANIN) {
		size_t kept = 0, i = 0;
		int rc = 0;
		while (i < l->nruns) {
			size_t n = l->nruns - i < FANIN ? l->nruns - i : FANIN;
			if (n == 1) {
				l->runs[kept++] = l->runs[i++];
				continue;
			}
			struct run merged = { 0 };
			struct writer wr = { .dst = &merged.ext };
			rc = merge_runs(w, l->runs + i, n, sink_run, &wr);
			int closed = writer_close(w, &wr);
			if (rc == 0)
				rc = closed;
			if (rc < 0) {
				free(merged.ext.v);
				break;
			}
			for (size_t k = 0; k < n; k++)
				free(l->runs[i + k].ext.v);
			l->runs[kept++] = merged;
			i += n;
		}
		/* After a failure, the runs not merged follow the merged ones. */
		memmove(l->runs + kept, l->runs + i, (l->nruns - i) * sizeof(*l->runs));
		l->nruns = kept + l->nruns - i;
		if (rc < 0)
			return rc;
	}
	return 0;
}

struct levels {
	struct level *v;
	size_t n, cap;
};

/* Puts an event on the first level where it nests: after or inside the
 * events before it, never across one's end. */
static int sink_level(struct xw *w, void *ctx, const struct rec *h, const unsigned char *payload)
{
	struct levels *ls = ctx;
	for (size_t i = 0;; i++) {
		if (i == ls->n) {
			if (rp_array_reserve(&ls->v, &ls->cap, ls->n + 1, sizeof(*ls->v)) < 0)
				return nomem(w);
			ls->v[ls->n++] = (struct level){ 0 };
		}
		struct level *lv = &ls->v[i];
		while (lv->depth && lv->stack[lv->depth - 1] <= h->begin)
			lv->depth--;
		if (lv->depth && h->end > lv->stack[lv->depth - 1])
			continue;
		if (rp_array_reserve(&lv->stack, &lv->cap, lv->depth + 1, sizeof(*lv->stack)) < 0)
			return nomem(w);
		lv->stack[lv->depth++] = h->end;
		lv->wr.dst = &lv->ext;
		return writer_put(w, &lv->wr, payload, h->len);
	}
}

/* l's events as out lines, one per overlap level, appended to *outs. */
static int split_line(struct xw *w, size_t li, struct out_line **outs, size_t *nouts, size_t *cap)
{
	struct line *l = &w->lines[li];
	struct levels ls = { 0 };
	int rc = reduce_runs(w, l);
	if (rc == 0)
		rc = merge_runs(w, l->runs, l->nruns, sink_level, &ls);
	for (size_t i = 0; i < ls.n; i++) {
		ls.v[i].wr.dst = &ls.v[i].ext; /* the levels may have moved since */
		int closed = writer_close(w, &ls.v[i].wr);
		if (rc == 0)
			rc = closed;
		if (rc == 0 && rp_array_reserve(outs, cap, *nouts + 1, sizeof(**outs)) < 0)
			rc = nomem(w);
		if (rc == 0)
			(*outs)[(*nouts)++] = (struct out_line){ li, (unsigned)i, ls.v[i].ext };
		else
			free(ls.v[i].ext.v);
		free(ls.v[i].stack);
	}
	free(ls.v);
	return rc;
}

static int by_display(const void *x, const void *y, void *ctx)
{
	const struct line *lines = ctx;
	const struct line *a = &lines[*(const size_t *)x], *b = &lines[*(const size_t *)y];
	if ((a->role == ROLE_COUNTERS) != (b->role == ROLE_COUNTERS))
		return a->role == ROLE_COUNTERS ? -1 : 1;
	if (a->pid != b->pid)
		return a->pid < b->pid ? -1 : 1;
	if (a->id != b->id)
		return a->id < b->id ? -1 : 1;
	return a->role - b->role;
}

/* The header of out line i of its plane, its events left out: the
 * names it shows go into name and display, len bytes each. */
static void line_header(struct xw *w, const struct out_line *o, size_t i,
			Tensorflow__Profiler__XLine *xl, char *name, char *display, size_t len)
{
	const struct line *l = &w->lines[o->line];
	const char *t = l->role == ROLE_THREAD || l->role == ROLE_SAMPLES
				? rp_reader_thread_name(w->r, l->pid, l->id) : NULL;
	int n;
	switch (l->role) {
	case ROLE_COUNTERS:
		snprintf(name, len, "_counters_");
		break;
	case ROLE_STREAM: {
		/* Like XProf's GPU planes: "Stream #7(Compute,Memcpy)". */
		char kinds[32] = "";
		for (unsigned k = 0; k < 32; k++)
			if (l->gpu_kinds & 1u << k && gpu_kind_name(k))
				snprintf(kinds + strlen(kinds), sizeof(kinds) - strlen(kinds), "%s%s",
					 *kinds ? "," : "", gpu_kind_name(k));
		snprintf(name, len, *kinds ? "Stream #%u(%s)" : "Stream #%u", l->id, kinds);
		break;
	}
	case ROLE_SAMPLES:
		snprintf(name, len, "CPU samples");
		break;
	case ROLE_XLA_MODULES:
		snprintf(name, len, "XLA Modules");
		break;
	case ROLE_XLA_OPS:
		snprintf(name, len, "XLA Ops");
		break;
	case ROLE_XLA_LINE:
		snprintf(name, len, "XLA line %u", l->id);
		break;
	default:
		snprintf(name, len, "%s", t ? t : "thread");
		break;
	}
	n = l->role == ROLE_SAMPLES ? snprintf(display, len, "%s (%u) CPU samples", t ? t : "thread", l->id)
	    : l->role == ROLE_THREAD ? snprintf(display, len, "%s (%u)", name, l->id)
	    : snprintf(display, len, "%s", name);
	if (o->level && n >= 0 && (size_t)n < len)
		snprintf(display + n, len - (size_t)n, " overlap %u", o->level);
	xl->id = !o->level && l->role != ROLE_SAMPLES && l->role != ROLE_COUNTERS
			 ? l->id : EXTRA_LINE_ID + (int64_t)i;
	xl->display_id = (int64_t)i + 1;
	xl->name = name;
	xl->display_name = display;
}

static void write_tag_len(FILE *out, unsigned field, uint64_t len)
{
	unsigned char b[12];
	size_t n = put_varint(b, (uint64_t)field << 3 | 2);
	n += put_varint(b + n, len);
	fwrite(b, 1, n, out);
}

struct file_buffer {
	ProtobufCBuffer base;
	FILE *out;
};

static void file_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
	fwrite(data, 1, len, ((struct file_buffer *)b)->out);
}

static int copy_extents(struct xw *w, const struct extents *x, FILE *out)
{
	if (!w->copy_buf && !(w->copy_buf = malloc(IO_BLOCK)))
		return nomem(w);
	for (size_t i = 0; i < x->n; i++)
		for (uint64_t done = 0; done < x->v[i].len;) {
			size_t k = x->v[i].len - done < IO_BLOCK ? (size_t)(x->v[i].len - done) : IO_BLOCK;
			if (pread(w->fd, w->copy_buf, k, (off_t)(x->v[i].off + done)) != (ssize_t)k)
				return rp_err_set(w->err, -EIO, "cannot read the XSpace exporter's "
						  "temporary file back: %s", strerror(errno));
			fwrite(w->copy_buf, 1, k, out);
			done += k;
		}
	return 0;
}

/* Plane p with its lines (merged and split into nesting lines) and
 * stats: the plane's fields through protobuf-c, its lines framed here. */
static int write_plane(struct xw *w, size_t p, int64_t id, Tensorflow__Profiler__XStat **stats,
		       size_t nstats, FILE *out)
{
	struct plane *pl = &w->planes[p];
	size_t *idx = malloc((w->nlines ? w->nlines : 1) * sizeof(*idx)), nidx = 0;
	struct out_line *outs = NULL;
	size_t nouts = 0, outs_cap = 0;
	Tensorflow__Profiler__XPlane__EventMetadataEntry *ee = calloc(pl->nnames + 1, sizeof(*ee));
	Tensorflow__Profiler__XPlane__EventMetadataEntry **eep = calloc(pl->nnames + 1, sizeof(*eep));
	Tensorflow__Profiler__XEventMetadata *em = calloc(pl->nnames + 1, sizeof(*em));
	Tensorflow__Profiler__XPlane__StatMetadataEntry *se = NULL, **sep = NULL;
	Tensorflow__Profiler__XStatMetadata *sm = NULL;
	int rc = idx && ee && eep && em ? 0 : nomem(w);
	for (size_t i = 0; i < w->nlines && rc == 0; i++)
		if (w->lines[i].plane == p && (rc = flush_batch(w, &w->lines[i])) == 0)
			idx[nidx++] = i;
	if (rc == 0)
		qsort_r(idx, nidx, sizeof(*idx), by_display, w->lines);
	for (size_t i = 0; i < nidx && rc == 0; i++)
		rc = split_line(w, idx[i], &outs, &nouts, &outs_cap);
	if (rc < 0 || (!nouts && p != 0 && !nstats))
		goto out; /* a device without events in the window shows nothing */
	Tensorflow__Profiler__XStat uid = TENSORFLOW__PROFILER__XSTAT__INIT, *uidp = &uid;
	if (!nstats && pl->uid) {
		uid.metadata_id = ST_DEVICE_UID;
		uid.value_case = TENSORFLOW__PROFILER__XSTAT__VALUE_STR_VALUE;
		uid.str_value = (char *)pl->uid;
		stats = &uidp;
		nstats = 1;
	}

	Tensorflow__Profiler__XPlane xp = TENSORFLOW__PROFILER__XPLANE__INIT;
	size_t nsm = NSTATS + w->refs.nnames;
	se = calloc(nsm, sizeof(*se));
	sep = calloc(nsm, sizeof(*sep));
	sm = calloc(nsm, sizeof(*sm));
	if (!se || !sep || !sm) {
		rc = nomem(w);
		goto out;
	}
	xp.id = id;
	xp.name = pl->name;
	for (size_t i = 0; i < pl->nnames; i++) {
		tensorflow__profiler__xevent_metadata__init(&em[i]);
		em[i].id = (int64_t)i + 1;
		em[i].name = pl->names[i].name;
		if (pl->names[i].display)
			em[i].display_name = (char *)pl->names[i].display;
		tensorflow__profiler__xplane__event_metadata_entry__init(&ee[i]);
		ee[i].key = em[i].id;
		ee[i].value = &em[i];
		eep[i] = &ee[i];
	}
	xp.n_event_metadata = pl->nnames;
	xp.event_metadata = eep;
	for (size_t i = 0; i < nsm; i++) {
		tensorflow__profiler__xstat_metadata__init(&sm[i]);
		sm[i].id = (int64_t)i + 1;
		sm[i].name = i < NSTATS ? (char *)stat_names[i + 1] : w->refs.names[i - NSTATS].name;
		tensorflow__profiler__xplane__stat_metadata_entry__init(&se[i]);
		se[i].key = sm[i].id;
		se[i].value = &sm[i];
		sep[i] = &se[i];
	}
	xp.n_stat_metadata = nsm;
	xp.stat_metadata = sep;
	xp.n_stats = nstats;
	xp.stats = stats;

	/* Sizes first: each line's header and events, then the plane's. */
	char name[RP_NAME_MAX + 64], display[RP_NAME_MAX + 64];
	Tensorflow__Profiler__XLine xl = TENSORFLOW__PROFILER__XLINE__INIT;
	uint64_t size = tensorflow__profiler__xplane__get_packed_size(&xp);
	for (size_t i = 0; i < nouts; i++) {
		line_header(w, &outs[i], i, &xl, name, display, sizeof(name));
		uint64_t len = tensorflow__profiler__xline__get_packed_size(&xl) + outs[i].ext.bytes;
		size += 1 + varint_len(len) + len;
	}
	write_tag_len(out, 1, size);
	struct file_buffer fb = { .base.append = file_append, .out = out };
	tensorflow__profiler__xplane__pack_to_buffer(&xp, &fb.base);
	for (size_t i = 0; i < nouts && rc == 0; i++) {
		line_header(w, &outs[i], i, &xl, name, display, sizeof(name));
		write_tag_len(out, 3, tensorflow__profiler__xline__get_packed_size(&xl) + outs[i].ext.bytes);
		tensorflow__profiler__xline__pack_to_buffer(&xl, &fb.base);
		rc = copy_extents(w, &outs[i].ext, out);
	}
out:
	for (size_t i = 0; i < nouts; i++)
		free(outs[i].ext.v);
	free(outs);
	free(idx);
	free(ee);
	free(eep);
	free(em);
	free(se);
	free(sep);
	free(sm);
	return rc;
}

static void plane_name(const char *dev, const struct rp_device_identity *id, char *buf,
		       size_t len)
{
	switch (id->kind) {
	case RP_DEVICE_HOST:
		snprintf(buf, len, "/host:CPU");
		break;
	case RP_DEVICE_GPU:
		snprintf(buf, len, "/device:GPU:%u", id->index);
		break;
	case RP_DEVICE_TPU:
		snprintf(buf, len, "/device:TPU:%u", id->index);
		break;
	case RP_DEVICE_NEURON_CORE:
		/* XProf knows no Neuron planes: a custom one it shows by name. */
		snprintf(buf, len, "/device:CUSTOM:NeuronCore %u", id->index);
		break;
	default:
		snprintf(buf, len, "/device:CUSTOM:%s", dev);
		break;
	}
}

/* Planes: the host's first (index 0), then one per other device. */
static int make_planes(struct xw *w)
{
	size_t n = rp_reader_device_count(w->r);
	w->planes = calloc(n + 1, sizeof(*w->planes));
	w->dev_plane = calloc(n ? n : 1, sizeof(*w->dev_plane));
	if (!w->planes || !w->dev_plane)
		return nomem(w);
	w->nplanes = 1;
	snprintf(w->planes[0].name, sizeof(w->planes[0].name), "/host:CPU");
	for (size_t d = 0; d < n; d++) {
		const struct rp_device_identity *id = rp_reader_device_identity(w->r, d);
		if (id->kind == RP_DEVICE_HOST)
			continue;
		struct plane *pl = &w->planes[w->nplanes];
		w->dev_plane[d] = w->nplanes++;
		plane_name(rp_reader_device_name(w->r, d), id, pl->name, sizeof(pl->name));
		pl->uid = id->uid[0] ? id->uid : NULL;
	}
	return 0;
}

static void free_xw(struct xw *w)
{
	for (size_t i = 0; i < w->nlines; i++) {
		struct line *l = &w->lines[i];
		free(l->batch.bytes);
		free(l->batch.ents);
		for (size_t k = 0; k < l->nruns; k++)
			free(l->runs[k].ext.v);
		free(l->runs);
		free(l->flame);
	}
	free(w->lines);
	for (size_t p = 0; p < w->nplanes; p++) {
		for (size_t i = 0; i < w->planes[p].nnames; i++)
			free(w->planes[p].names[i].name);
		free(w->planes[p].names);
		free(w->planes[p].slots);
	}
	for (size_t i = 0; i < w->refs.nnames; i++)
		free(w->refs.names[i].name);
	free(w->refs.names);
	free(w->refs.slots);
	free(w->planes);
	free(w->dev_plane);
	free(w->line_tab.v);
	free(w->sym_tab.v);
	free(w->copy_buf);
	if (w->fd >= 0)
		close(w->fd);
}

/* Planes, then the warnings and the host name (XSpace fields 3 and 4
 * after field 1: any order is valid protobuf). */
static int write_space(struct xw *w, FILE *out)
{
	int rc = 0;
	for (size_t p = 0; p < w->nplanes && rc == 0; p++)
		rc = write_plane(w, p, (int64_t)p, NULL, 0, out);
	if (rc < 0)
		return rc;
	/* Task Environment: when the profile started and stopped, epoch ns. */
	size_t p = w->nplanes;
	int64_t wall = rp_reader_wall_offset_ns(w->r);
	Tensorflow__Profiler__XStat s[2] = {
		u64_stat(ST_START, (uint64_t)((int64_t)w->start + wall)),
		u64_stat(ST_STOP, (uint64_t)((int64_t)rp_reader_end_ns(w->r) + wall)),
	}, *sp[2] = { &s[0], &s[1] };
	struct plane *grown = realloc(w->planes, (p + 1) * sizeof(*grown));
	if (!grown)
		return nomem(w);
	w->planes = grown;
	w->planes[p] = (struct plane){ .name = "Task Environment" };
	w->nplanes++;
	if ((rc = write_plane(w, p, (int64_t)p, sp, 2, out)) < 0)
		return rc;

	char drops[160], corrupt[160];
	char *warnings[2], *host = (char *)rp_reader_host(w->r);
	Tensorflow__Profiler__XSpace xs = TENSORFLOW__PROFILER__XSPACE__INIT;
	if (w->drops) {
		snprintf(drops, sizeof(drops), "%llu events were dropped by producers whose rings "
			 "were full: the trace misses them (see the 'dropped events' marks)",
			 (unsigned long long)w->drops);
		warnings[xs.n_warnings++] = drops;
	}
	if (rp_reader_corrupt_chunks(w->r)) {
		snprintf(corrupt, sizeof(corrupt), "%llu corrupt chunks of the session were skipped",
			 (unsigned long long)rp_reader_corrupt_chunks(w->r));
		warnings[xs.n_warnings++] = corrupt;
	}
	xs.warnings = warnings;
	xs.n_hostnames = 1;
	xs.hostnames = &host;
	struct file_buffer fb = { .base.append = file_append, .out = out };
	tensorflow__profiler__xspace__pack_to_buffer(&xs, &fb.base);
	return 0;
}

/* The spill: an unnamed file in dir (O_TMPFILE, else a name removed at
 * once), so that nothing is left behind whatever happens. */
static int open_spill(const char *dir, struct rp_err *err)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/.xplane-spill-XXXXXX", dir);
		if ((fd = mkostemp(path, O_CLOEXEC)) >= 0)
			unlink(path);
	}
	if (fd < 0)
		return rp_err_set(err, -errno, "cannot make the XSpace exporter's temporary file in "
				  "%s: %s (it needs write access there)", dir, strerror(errno));
	return fd;
}

int rp_write_xplane(struct rp_reader *r, FILE *out, const char *scratch_dir, struct rp_err *err)
{
	struct xw w = { .r = r, .err = err, .start = rp_reader_start_ns(r), .fd = -1,
			.scratch_dir = scratch_dir };
	int rc = make_planes(&w);
	if (rc == 0 && (rc = open_spill(scratch_dir, err)) >= 0) {
		w.fd = rc;
		rc = rp_reader_each(r, on_event, &w, err);
	}
	/* Stacks still sampled at the end last one more period. */
	for (size_t i = 0; i < w.nlines && rc == 0; i++) {
		struct line *l = &w.lines[i];
		if (l->flame && l->flame->depth)
			rc = close_frames(&w, l, 0, l->flame->last_ts + l->flame->period);
	}
	if (rc == 0)
		rc = write_space(&w, out);
	if (rc == 0 && (fflush(out) != 0 || ferror(out)))
		rc = rp_err_set(err, -EIO, "cannot write the XSpace file: %s", strerror(errno));
	free_xw(&w);
	return rc;
}
