/* JSON export (<host>.json): the window's events for scripts, in the
 * spirit of `neuron-profile --output-format json`.  One object:
 *
 *   host, session {id, run, kind, state, trigger}, clock {name,
 *   wall_offset_ns, profile_start_ns, profile_end_ns,
 *   profile_start_wall_ns, profile_end_wall_ns}, devices [name],
 *   device_info [{device, kind, index, uid}] (parallel to devices: what
 *     each is, kind host, gpu, tpu, neuron_core or other, uid "" when
 *     it has no stable id),
 *   processes [{pid, name, cmdline, threads [{tid, name}]}],
 *   trace_events [{name, type, timestamp, duration, process_id,
 *     thread_id, device, group, args}],
 *   counters [{name, device, timestamp, value, process_id}],
 *   cpu_samples [{timestamp, pid, tid, cpu, comm, kernel_frames,
 *     frames, mangled}],
 *   drops [{timestamp, device, pid, tid, count}],
 *   corrupt_chunks
 *
 * Times are wall clock ns (host clock + wall_offset_ns), integers.
 * Trace event types: range (written at its end: timestamp is its begin,
 * args depth and truncated), instant, api_call (args device_index,
 * correlation: that of the GPU work it launched, 0 for none),
 * gpu_kernel, gpu_memcpy, gpu_memset (args correlation, stream,
 * device_index, bytes for copies and sets, and for kernels whose launch
 * configuration is known grid [x,y,z], block [x,y,z],
 * registers_per_thread, static_shared_memory, dynamic_shared_memory;
 * an unknown kind of GPU activity is gpu_activity; C++ kernel names
 * demangled).  group is the thread's name ("thread TID" without one), or
 * "stream N" for GPU activity.
 * frames are leaf first, named as the summary names them (C++ names
 * demangled); mangled, only in samples with a demangled frame, is
 * parallel to frames: the symbol as the binary spells it, or null for a
 * frame whose name was not demangled.  Pid 0 (no
 * process: system-wide counters) is listed only when it has a name.
 *
 * Elements come in the session's order: device by device, each thread's
 * in time order, not sorted across threads.
 *
 * Streamed: one pass over the session per array (and one first, for the
 * processes, which also counts each array's elements so that an empty
 * one costs no pass), each element written as it comes; memory grows
 * with the threads and distinct frames only. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"
#include "writers.h"

#define SYM_NAME_MAX 512

struct thread {
	uint64_t key; /* pid << 32 | tid */
	bool used;
	const char *group; /* the thread's name (the reader's), NULL: none */
	const char *comm;  /* the thread's name, else the process's */
};

/* A frame of a CPU sample, named once: pid 0 for the kernel's. */
struct frame {
	uint64_t addr;
	uint32_t pid;
	bool kernel, used;
	char *name, *mangled; /* mangled: NULL unless name was demangled */
};

/* The arrays, in the file's order; NO_ELEMENT for events that have none
 * (a range's begin: its end carries it). */
enum section { PROCESSES, TRACE_EVENTS, COUNTERS, CPU_SAMPLES, DROPS, NO_ELEMENT };

struct jout {
	struct rp_reader *r;
	FILE *out;
	int error; /* errno of the first failed write */
	enum section section;
	size_t elements[NO_ELEMENT + 1]; /* of each array, counted by the first pass */
	bool first; /* no element written yet in this array */
	struct thread *threads;
	size_t threads_mask, nthreads;
	struct frame *frames;
	size_t frames_mask, nframes;
	size_t len;
	char buf[1 << 16];
};

static void flush(struct jout *o)
{
	if (o->len && !o->error && fwrite(o->buf, 1, o->len, o->out) != o->len)
		o->error = errno ? errno : EIO;
	o->len = 0;
}

static void put(struct jout *o, const char *s, size_t n)
{
	if (o->len + n > sizeof(o->buf)) {
		flush(o);
		if (n > sizeof(o->buf)) {
			if (!o->error && fwrite(s, 1, n, o->out) != n)
				o->error = errno ? errno : EIO;
			return;
		}
	}
	memcpy(o->buf + o->len, s, n);
	o->len += n;
}

#define PUT(o, lit) put(o, lit, sizeof(lit) - 1)

static void put_u64(struct jout *o, uint64_t v)
{
	/* Two digits at a time: timestamps have 19. */
	static const char pairs[] = "00010203040506070809101112131415161718192021222324"
				    "25262728293031323334353637383940414243444546474849"
				    "50515253545556575859606162636465666768697071727374"
				    "75767778798081828384858687888990919293949596979899";
	char digits[20];
	size_t n = sizeof(digits);
	while (v >= 100) {
		n -= 2;
		memcpy(digits + n, pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10) {
		n -= 2;
		memcpy(digits + n, pairs + 2 * v, 2);
	} else {
		digits[--n] = (char)('0' + v);
	}
	put(o, digits + n, sizeof(digits) - n);
}

static void put_i64(struct jout *o, int64_t v)
{
	if (v < 0) {
		PUT(o, "-");
		put_u64(o, -(uint64_t)v);
	} else {
		put_u64(o, (uint64_t)v);
	}
}

/* A number that reads back as the same double; null for NaN and
 * infinities, which JSON lacks.  Whole numbers keep a ".0" so that the
 * value is a float to every reader. */
static void put_double(struct jout *o, double v)
{
	char num[32];
	if (!isfinite(v)) {
		PUT(o, "null");
		return;
	}
	if (v == trunc(v) && fabs(v) < 9007199254740992.0) {
		put_i64(o, (int64_t)v);
		PUT(o, ".0");
		return;
	}
	int n = snprintf(num, sizeof(num), "%.15g", v);
	if (strtod(num, NULL) != v)
		n = snprintf(num, sizeof(num), "%.17g", v);
	put(o, num, (size_t)n);
}

/* The length of the valid UTF-8 sequence at s, 0 when it is not one
 * (overlong forms, surrogates and code points past U+10FFFF included). */
static size_t utf8_len(const unsigned char *s)
{
	unsigned c = s[0];
	size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
	if (c < 0xc2 || c > 0xf4)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
	    (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
		return 0;
	return n;
}

/* s as a JSON string: quotes, backslashes and control characters
 * escaped, bytes that are not UTF-8 as U+FFFD. */
static void put_str(struct jout *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	PUT(o, "\"");
	while (*p) {
		const unsigned char *run = p;
		while (*p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
			p++;
		put(o, (const char *)run, (size_t)(p - run));
		if (!*p)
			break;
		if (*p >= 0x80) {
			size_t n = utf8_len(p);
			if (n)
				put(o, (const char *)p, n);
			else
				PUT(o, "\\ufffd");
			p += n ? n : 1;
			continue;
		}
		char esc[6] = { '\\', (char)*p };
		size_t n = 2;
		if (*p == '\n')
			esc[1] = 'n';
		else if (*p == '\t')
			esc[1] = 't';
		else if (*p == '\r')
			esc[1] = 'r';
		else if (*p < 0x20) {
			memcpy(esc + 1, "u00", 3);
			esc[4] = hex[*p >> 4];
			esc[5] = hex[*p & 15];
			n = 6;
		}
		put(o, esc, n);
		p++;
	}
	PUT(o, "\"");
}

static void put_str_or_null(struct jout *o, const char *s)
{
	if (s)
		put_str(o, s);
	else
		PUT(o, "null");
}

/* A whole jansson value (the manifest's parts), compact. */
static void put_json(struct jout *o, json_t *v)
{
	char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	if (s)
		put(o, s, strlen(s));
	else
		PUT(o, "null");
	free(s);
}

static bool thread_used(const void *e) { return ((const struct thread *)e)->used; }
static uint64_t thread_hash(const void *e) { return rp_hash_u64(((const struct thread *)e)->key); }

/* The thread's entry, made the first time: NULL without memory. */
static struct thread *thread_of(struct jout *o, uint32_t pid, uint32_t tid)
{
	uint64_t key = (uint64_t)pid << 32 | tid;
	size_t i = rp_hash_u64(key) & o->threads_mask;
	for (; o->threads && o->threads[i].used; i = (i + 1) & o->threads_mask)
		if (o->threads[i].key == key)
			return &o->threads[i];
	if (rp_table_reserve(&o->threads, &o->threads_mask, o->nthreads, sizeof(*o->threads),
			     thread_used, thread_hash, RP_TABLE_FIRST) < 0)
		return NULL;
	i = rp_hash_u64(key) & o->threads_mask;
	while (o->threads[i].used)
		i = (i + 1) & o->threads_mask;
	struct thread *t = &o->threads[i];
	t->key = key;
	t->used = true;
	t->group = rp_reader_thread_name(o->r, pid, tid);
	t->comm = t->group ? t->group : rp_reader_process_name(o->r, pid);
	o->nthreads++;
	return t;
}

static bool frame_used(const void *e) { return ((const struct frame *)e)->used; }

static uint64_t frame_key_hash(uint32_t pid, uint64_t addr, bool kernel)
{
	return rp_hash_u64(addr * 31 + ((uint64_t)pid << 1 | kernel));
}

static uint64_t frame_hash(const void *e)
{
	const struct frame *f = e;
	return frame_key_hash(f->pid, f->addr, f->kernel);
}

/* The frame at addr (already a return address less one), named the
 * first time: NULL without memory. */
static const struct frame *frame_of(struct jout *o, uint32_t pid, uint64_t addr, bool kernel)
{
	uint32_t kpid = kernel ? 0 : pid;
	size_t h = frame_key_hash(kpid, addr, kernel), i = h & o->frames_mask;
	for (; o->frames && o->frames[i].used; i = (i + 1) & o->frames_mask) {
		const struct frame *f = &o->frames[i];
		if (f->addr == addr && f->pid == kpid && f->kernel == kernel)
			return f;
	}
	if (rp_table_reserve(&o->frames, &o->frames_mask, o->nframes, sizeof(*o->frames), frame_used,
			     frame_hash, RP_TABLE_FIRST) < 0)
		return NULL;
	struct rp_symbol sym;
	char buf[SYM_NAME_MAX];
	rp_symbolize(rp_reader_symbolizer(o->r), pid, addr, kernel, &sym);
	char *name = strdup(rp_symbol_name(&sym, buf, sizeof(buf)));
	char *mangled = sym.mangled ? strdup(sym.mangled) : NULL;
	if (!name || (sym.mangled && !mangled)) {
		free(name);
		return NULL;
	}
	for (i = h & o->frames_mask; o->frames[i].used; i = (i + 1) & o->frames_mask)
		;
	o->frames[i] = (struct frame){ .addr = addr, .pid = kpid, .kernel = kernel, .used = true,
				       .name = name, .mangled = mangled };
	o->nframes++;
	return &o->frames[i];
}

/* Starts an element of the current array. */
static void element(struct jout *o)
{
	if (o->first)
		PUT(o, "\n");
	else
		PUT(o, ",\n");
	o->first = false;
}

/* ,"grid":[x,y,z],"block":[x,y,z],"registers_per_thread":..., and the
 * shared memory bytes per block. */
static void put_launch(struct jout *o, const struct rp_gpu_launch *l)
{
	const uint32_t *dims[2] = { l->grid, l->block };
	static const char *const names[2] = { ",\"grid\":[", ",\"block\":[" };
	for (size_t d = 0; d < 2; d++) {
		put(o, names[d], strlen(names[d]));
		for (size_t i = 0; i < 3; i++) {
			if (i)
				PUT(o, ",");
			put_u64(o, dims[d][i]);
		}
		PUT(o, "]");
	}
	PUT(o, ",\"registers_per_thread\":");
	put_u64(o, l->registers);
	PUT(o, ",\"static_shared_memory\":");
	put_u64(o, l->static_shared);
	PUT(o, ",\"dynamic_shared_memory\":");
	put_u64(o, l->dynamic_shared);
}

static const char *gpu_type(uint8_t kind)
{
	switch (kind) {
	case RP_GPU_KERNEL:
		return "gpu_kernel";
	case RP_GPU_MEMCPY:
		return "gpu_memcpy";
	case RP_GPU_MEMSET:
		return "gpu_memset";
	default:
		return "gpu_activity";
	}
}

static void put_wall(struct jout *o, uint64_t ts)
{
	put_i64(o, (int64_t)ts + rp_reader_wall_offset_ns(o->r));
}

/* name, type, timestamp, duration, process_id, thread_id, device:
 * what every trace event starts with. */
static void trace_head(struct jout *o, const struct rp_reader_event *e, const char *name,
		       const char *type, uint64_t ts, uint64_t duration)
{
	const struct rp_event *ev = e->ev;
	element(o);
	PUT(o, "{\"name\":");
	put_str(o, name ? name : "");
	PUT(o, ",\"type\":\"");
	put(o, type, strlen(type));
	PUT(o, "\",\"timestamp\":");
	put_wall(o, ts);
	PUT(o, ",\"duration\":");
	put_u64(o, duration);
	PUT(o, ",\"process_id\":");
	put_u64(o, ev->pid);
	PUT(o, ",\"thread_id\":");
	put_u64(o, ev->tid);
	PUT(o, ",\"device\":");
	put_str(o, rp_reader_device_name(o->r, e->device));
}

/* ,"group": the thread's name. */
static int thread_group(struct jout *o, const struct rp_event *ev)
{
	const struct thread *t = thread_of(o, ev->pid, ev->tid);
	if (!t)
		return -ENOMEM;
	PUT(o, ",\"group\":");
	if (t->group) {
		put_str(o, t->group);
	} else {
		PUT(o, "\"thread ");
		put_u64(o, ev->tid);
		PUT(o, "\"");
	}
	return 0;
}

/* The array whose element an event of this kind is. */
static enum section section_of(uint8_t kind)
{
	switch (kind) {
	case RP_EV_RANGE_END:
	case RP_EV_INSTANT:
	case RP_EV_API_CALL:
	case RP_EV_GPU_ACTIVITY:
	case RP_EV_DEVICE_OP:
		return TRACE_EVENTS;
	case RP_EV_COUNTER:
		return COUNTERS;
	case RP_EV_CPU_SAMPLE:
		return CPU_SAMPLES;
	case RP_EV_DROPS:
		return DROPS;
	default:
		return NO_ELEMENT;
	}
}

/* One of the kinds section_of puts in TRACE_EVENTS. */
static int trace_event(struct jout *o, const struct rp_reader_event *e)
{
	const struct rp_event *ev = e->ev;
	int rc = 0;
	switch (ev->kind) {
	case RP_EV_RANGE_END:
		trace_head(o, e, e->range_name, "range", e->begin_ts, ev->ts - e->begin_ts);
		rc = thread_group(o, ev);
		PUT(o, ",\"args\":{\"depth\":");
		put_u64(o, e->depth);
		if (e->truncated)
			PUT(o, ",\"truncated\":true}}");
		else
			PUT(o, ",\"truncated\":false}}");
		break;
	case RP_EV_INSTANT:
		trace_head(o, e, ev->name, "instant", ev->ts, 0);
		rc = thread_group(o, ev);
		PUT(o, ",\"args\":{}}");
		break;
	case RP_EV_API_CALL:
		trace_head(o, e, ev->name, "api_call", ev->ts, ev->u.api.duration);
		rc = thread_group(o, ev);
		PUT(o, ",\"args\":{\"device_index\":");
		put_u64(o, ev->u.api.device);
		PUT(o, ",\"correlation\":");
		put_u64(o, ev->u.api.correlation);
		PUT(o, "}}");
		break;
	case RP_EV_GPU_ACTIVITY:
		trace_head(o, e,
			   ev->name ? rp_symbolizer_demangle(rp_reader_symbolizer(o->r), ev->name) : NULL,
			   gpu_type(ev->u.gpu.kind), ev->ts,
			   ev->u.gpu.end > ev->ts ? ev->u.gpu.end - ev->ts : 0);
		PUT(o, ",\"group\":\"stream ");
		put_u64(o, ev->u.gpu.stream);
		PUT(o, "\",\"args\":{\"correlation\":");
		put_u64(o, ev->u.gpu.correlation);
		PUT(o, ",\"stream\":");
		put_u64(o, ev->u.gpu.stream);
		PUT(o, ",\"device_index\":");
		put_u64(o, ev->u.gpu.device);
		if (ev->u.gpu.kind != RP_GPU_KERNEL) {
			PUT(o, ",\"bytes\":");
			put_u64(o, ev->u.gpu.bytes);
		}
		if (ev->u.gpu.launch.block[0])
			put_launch(o, &ev->u.gpu.launch);
		PUT(o, "}}");
		break;
	case RP_EV_DEVICE_OP:
		trace_head(o, e, ev->name, "xla_op", ev->ts, ev->u.op.end - ev->ts);
		if (ev->u.op.device == RP_OP_HOST) {
			rc = thread_group(o, ev);
		} else {
			PUT(o, ",\"group\":\"line ");
			put_u64(o, ev->u.op.line);
			PUT(o, "\"");
		}
		PUT(o, ",\"args\":{\"line\":");
		put_u64(o, ev->u.op.line);
		if (ev->u.op.device != RP_OP_HOST) {
			PUT(o, ",\"device_index\":");
			put_u64(o, ev->u.op.device);
		}
		static const char *const str_args[] = { "hlo_op", "hlo_module" };
		const char *strs[] = { ev->u.op.hlo_op, ev->u.op.hlo_module };
		for (size_t i = 0; i < 2; i++) {
			if (!strs[i])
				continue;
			PUT(o, ",");
			put_str(o, str_args[i]);
			PUT(o, ":");
			put_str(o, strs[i]);
		}
		static const char *const num_args[] = { "program_id", "flops", "bytes_accessed" };
		const uint64_t nums[] = { ev->u.op.program_id, ev->u.op.flops, ev->u.op.bytes_accessed };
		for (size_t i = 0; i < 3; i++) {
			if (!nums[i])
				continue;
			PUT(o, ",");
			put_str(o, num_args[i]);
			PUT(o, ":");
			put_u64(o, nums[i]);
		}
		PUT(o, "}}");
		break;
	}
	return rc;
}

/* Frame i of a CPU sample (leaf first). */
static const struct frame *sample_frame(struct jout *o, const struct rp_event *ev, unsigned i)
{
	return frame_of(o, ev->pid, rp_frame_address(ev->u.sample.frames, ev->u.sample.nkernel, i),
			i < ev->u.sample.nkernel);
}

static int cpu_sample(struct jout *o, const struct rp_reader_event *e)
{
	const struct rp_event *ev = e->ev;
	const struct thread *t = thread_of(o, ev->pid, ev->tid);
	if (!t)
		return -ENOMEM;
	element(o);
	PUT(o, "{\"timestamp\":");
	put_wall(o, ev->ts);
	PUT(o, ",\"pid\":");
	put_u64(o, ev->pid);
	PUT(o, ",\"tid\":");
	put_u64(o, ev->tid);
	PUT(o, ",\"cpu\":");
	put_u64(o, ev->u.sample.cpu);
	PUT(o, ",\"comm\":");
	put_str_or_null(o, t->comm);
	PUT(o, ",\"kernel_frames\":");
	put_u64(o, ev->u.sample.nkernel);
	PUT(o, ",\"frames\":[");
	/* Looked up again for mangled: the table may grow while naming. */
	bool any_mangled = false;
	for (unsigned i = 0; i < ev->u.sample.nframes; i++) {
		const struct frame *f = sample_frame(o, ev, i);
		if (!f)
			return -ENOMEM;
		if (i)
			PUT(o, ",");
		put_str(o, f->name);
		any_mangled |= f->mangled != NULL;
	}
	PUT(o, "]");
	if (any_mangled) {
		PUT(o, ",\"mangled\":[");
		for (unsigned i = 0; i < ev->u.sample.nframes; i++) {
			if (i)
				PUT(o, ",");
			put_str_or_null(o, sample_frame(o, ev, i)->mangled);
		}
		PUT(o, "]");
	}
	PUT(o, "}");
	return 0;
}

static int write_event(void *ctx, const struct rp_reader_event *e)
{
	struct jout *o = ctx;
	const struct rp_event *ev = e->ev;
	enum section s = section_of(ev->kind);
	if (o->section == PROCESSES) {
		o->elements[s]++;
		return thread_of(o, ev->pid, ev->tid) ? 0 : -ENOMEM;
	}
	if (s != o->section)
		return 0;
	switch (s) {
	case TRACE_EVENTS:
		return trace_event(o, e);
	case COUNTERS:
		element(o);
		PUT(o, "{\"name\":");
		put_str(o, ev->name ? ev->name : "");
		PUT(o, ",\"device\":");
		put_str(o, rp_reader_device_name(o->r, e->device));
		PUT(o, ",\"timestamp\":");
		put_wall(o, ev->ts);
		PUT(o, ",\"value\":");
		put_double(o, ev->u.counter.value);
		PUT(o, ",\"process_id\":");
		put_u64(o, ev->pid);
		PUT(o, "}");
		return 0;
	case CPU_SAMPLES:
		return cpu_sample(o, e);
	case DROPS:
		element(o);
		PUT(o, "{\"timestamp\":");
		put_wall(o, ev->ts);
		PUT(o, ",\"device\":");
		put_str(o, rp_reader_device_name(o->r, e->device));
		PUT(o, ",\"pid\":");
		put_u64(o, ev->pid);
		PUT(o, ",\"tid\":");
		put_u64(o, ev->tid);
		PUT(o, ",\"count\":");
		put_u64(o, ev->u.drops.count);
		PUT(o, "}");
		return 0;
	default:
		return 0;
	}
}

static int by_key(const void *a, const void *b)
{
	const struct thread *x = a, *y = b;
	return x->key < y->key ? -1 : x->key > y->key;
}

/* The threads seen, grouped into their processes: -ENOMEM without
 * memory for a sorted copy. */
static int put_processes(struct jout *o)
{
	struct thread *sorted = malloc((o->nthreads ? o->nthreads : 1) * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; o->threads && i <= o->threads_mask; i++)
		if (o->threads[i].used)
			sorted[n++] = o->threads[i];
	if (n)
		qsort(sorted, n, sizeof(*sorted), by_key);
	PUT(o, ",\n\"processes\":[");
	o->first = true;
	for (size_t i = 0; i < n;) {
		uint32_t pid = (uint32_t)(sorted[i].key >> 32);
		const char *name = rp_reader_process_name(o->r, pid);
		size_t end = i;
		while (end < n && (uint32_t)(sorted[end].key >> 32) == pid)
			end++;
		if (pid == 0 && !name) {
			i = end;
			continue;
		}
		element(o);
		PUT(o, "{\"pid\":");
		put_u64(o, pid);
		PUT(o, ",\"name\":");
		put_str_or_null(o, name);
		PUT(o, ",\"cmdline\":");
		put_str_or_null(o, rp_reader_process_cmdline(o->r, pid));
		PUT(o, ",\"threads\":[");
		bool first = true;
		for (; i < end; i++) {
			uint32_t tid = (uint32_t)sorted[i].key;
			if (!tid)
				continue; /* events of the process, not of a thread */
			if (!first)
				PUT(o, ",");
			first = false;
			PUT(o, "{\"tid\":");
			put_u64(o, tid);
			PUT(o, ",\"name\":");
			put_str_or_null(o, sorted[i].group);
			PUT(o, "}");
		}
		PUT(o, "]}");
	}
	PUT(o, "\n]");
	free(sorted);
	return 0;
}

static void put_header(struct jout *o)
{
	struct rp_reader *r = o->r;
	json_t *m = rp_reader_manifest(r);
	uint64_t t0 = rp_reader_start_ns(r), t1 = rp_reader_end_ns(r);
	PUT(o, "{\"host\":");
	put_str(o, rp_reader_host(r));
	PUT(o, ",\"session\":{\"id\":");
	put_json(o, json_object_get(m, "id"));
	PUT(o, ",\"run\":");
	put_json(o, json_object_get(m, "run"));
	PUT(o, ",\"kind\":");
	put_json(o, json_object_get(m, "kind"));
	PUT(o, ",\"state\":");
	put_json(o, json_object_get(m, "state"));
	PUT(o, ",\"trigger\":");
	put_json(o, json_object_get(m, "trigger"));
	PUT(o, "},\n\"clock\":{\"name\":");
	put_json(o, json_object_get(m, "clock"));
	PUT(o, ",\"wall_offset_ns\":");
	put_i64(o, rp_reader_wall_offset_ns(r));
	PUT(o, ",\"profile_start_ns\":");
	put_u64(o, t0);
	PUT(o, ",\"profile_end_ns\":");
	put_u64(o, t1);
	PUT(o, ",\"profile_start_wall_ns\":");
	put_wall(o, t0);
	PUT(o, ",\"profile_end_wall_ns\":");
	put_wall(o, t1);
	PUT(o, "},\n\"devices\":[");
	for (size_t d = 0; d < rp_reader_device_count(r); d++) {
		if (d)
			PUT(o, ",");
		put_str(o, rp_reader_device_name(r, d));
	}
	PUT(o, "],\n\"device_info\":[");
	for (size_t d = 0; d < rp_reader_device_count(r); d++) {
		const struct rp_device_identity *id = rp_reader_device_identity(r, d);
		if (d)
			PUT(o, ",");
		PUT(o, "{\"device\":");
		put_str(o, rp_reader_device_name(r, d));
		PUT(o, ",\"kind\":");
		put_str(o, rp_device_kind_name(id->kind));
		PUT(o, ",\"index\":");
		put_u64(o, id->index);
		PUT(o, ",\"uid\":");
		put_str(o, id->uid);
		PUT(o, "}");
	}
	PUT(o, "]");
}

static const char *const section_names[] = {
	[TRACE_EVENTS] = "trace_events",
	[COUNTERS] = "counters",
	[CPU_SAMPLES] = "cpu_samples",
	[DROPS] = "drops",
};

int rp_write_json(struct rp_reader *r, FILE *out, struct rp_err *err)
{
	struct jout *o = calloc(1, sizeof(*o));
	if (!o)
		return rp_err_set(err, -ENOMEM, "out of memory for the JSON export");
	o->r = r;
	o->out = out;
	put_header(o);
	int rc = rp_reader_each(r, write_event, o, err);
	if (rc == 0)
		rc = put_processes(o);
	/* No more passes once a write failed: the file is lost. */
	for (enum section s = TRACE_EVENTS; s <= DROPS && rc == 0 && !o->error; s++) {
		o->section = s;
		o->first = true;
		PUT(o, ",\n");
		put_str(o, section_names[s]);
		PUT(o, ":[");
		if (o->elements[s])
			rc = rp_reader_each(r, write_event, o, err);
		PUT(o, "\n]");
	}
	if (rc == 0) {
		PUT(o, ",\n\"corrupt_chunks\":");
		put_u64(o, rp_reader_corrupt_chunks(r));
		PUT(o, "}\n");
		flush(o);
	}
	if (rc == -ENOMEM)
		rc = rp_err_set(err, rc, "out of memory for the JSON export's threads and frames");
	else if (rc == 0 && o->error)
		rc = rp_err_set(err, -o->error, "cannot write the JSON export: %s%s",
				strerror(o->error),
				o->error == ENOSPC ? " (free space on its file system)" : "");
	for (size_t i = 0; o->frames && i <= o->frames_mask; i++) {
		free(o->frames[i].name);
		free(o->frames[i].mangled);
	}
	free(o->frames);
	free(o->threads);
	free(o);
	return rc;
}
