#include "reader.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"
#include "session.h"
#include "table.h"

/* A process or a thread (tid 0 for a process): the names recorded for it,
 * keyed by pid << 32 | tid. */
struct name_entry {
	uint64_t key;
	bool used;
	char *name, *cmdline;
};

/* The sampling rate from ts on: a cpu_sampler_hz counter. */
struct rate_point {
	uint64_t ts;
	double hz;
};

/* The name is kept in place: no allocation per range. */
struct open_range {
	uint64_t ts;
	char name[RP_NAME_MAX + 1];
};

/* Ranges open on one thread of the device being read. */
struct thread_stack {
	uint64_t key;
	bool used;
	size_t depth, cap;
	struct open_range *open;
};

struct rp_reader {
	char *dir;
	json_t *manifest;
	uint64_t t0, t1;
	int64_t wall_offset;
	size_t ndevices;
	char **device_names, **device_paths;
	struct rp_device_identity *device_ids;

	struct name_entry *names; /* open addressing, mask + 1 slots */
	size_t names_mask, nnames;
	struct rate_point *rates; /* sorted by ts */
	size_t nrates, rates_cap;
	struct rp_symbolizer *sym;

	bool filtered;
	struct rp_reader_filter filter;
	uint32_t *keep; /* filtered: the pids whose events pass, sorted */
	size_t nkeep;

	struct thread_stack *stacks;
	size_t stacks_mask, nstacks;
	bool out_of_memory; /* for open ranges, in rp_reader_each */
	uint64_t corrupt;
};

/* The slot of key in a table of mask + 1 entries (each elem bytes, with
 * the key and used flag at the front, as name_entry and thread_stack
 * have them), made at most half full first: NULL without memory. */
struct slot_head {
	uint64_t key;
	bool used;
};

static bool head_used(const void *e) { return ((const struct slot_head *)e)->used; }
static uint64_t head_hash(const void *e) { return rp_hash_u64(((const struct slot_head *)e)->key); }

static void *find_slot(void *pp, size_t *mask, size_t *n, size_t elem, uint64_t key)
{
	/* 64 slots first: a session has few threads. */
	if (rp_table_reserve(pp, mask, *n, elem, head_used, head_hash, 64) < 0)
		return NULL;
	char *t;
	memcpy(&t, pp, sizeof(t));
	size_t i = rp_hash_u64(key) & *mask;
	for (;; i = (i + 1) & *mask) {
		struct slot_head *e = (struct slot_head *)(t + i * elem);
		if (!e->used) {
			e->used = true;
			e->key = key;
			(*n)++;
			return e;
		}
		if (e->key == key)
			return e;
	}
}

static const void *lookup(const void *table, size_t mask, size_t elem, uint64_t key)
{
	const char *t = table;
	if (!t)
		return NULL;
	for (size_t i = rp_hash_u64(key) & mask;; i = (i + 1) & mask) {
		const struct slot_head *e = (const struct slot_head *)(t + i * elem);
		if (!e->used)
			return NULL;
		if (e->key == key)
			return e;
	}
}

static uint64_t name_key(uint32_t pid, uint32_t tid)
{
	return (uint64_t)pid << 32 | tid;
}

static void set_string(char **dst, const char *s)
{
	if (!s || (*dst && strcmp(*dst, s) == 0))
		return;
	char *copy = strdup(s);
	if (copy) {
		free(*dst);
		*dst = copy;
	}
}

static void note_name(struct rp_reader *r, uint64_t key, const char *name, bool cmdline)
{
	struct name_entry *e = find_slot(&r->names, &r->names_mask, &r->nnames, sizeof(*e), key);
	if (e)
		set_string(cmdline ? &e->cmdline : &e->name, name);
}

static void note_rate(struct rp_reader *r, const struct rp_event *ev)
{
	/* Every chunk repeats the rate: keep its changes only. */
	const struct rate_point *last = r->nrates ? &r->rates[r->nrates - 1] : NULL;
	if (last && last->hz == ev->u.counter.value && last->ts <= ev->ts)
		return;
	if (rp_array_reserve(&r->rates, &r->rates_cap, r->nrates + 1, sizeof(*r->rates)) < 0)
		return; /* the rates read so far still serve */
	r->rates[r->nrates++] = (struct rate_point){ ev->ts, ev->u.counter.value };
}

/* Names, command lines, mappings and the sampling rate are taken from
 * anywhere in the session's chunks, not only the window: they are what
 * the window's events need. */
static void note_metadata(struct rp_reader *r, const struct rp_event *ev)
{
	switch (ev->kind) {
	case RP_EV_MAPPING:
		/* a mapping not kept leaves its frames as addresses */
		(void)rp_symbolizer_add_mapping(r->sym, ev->pid, ev->u.mapping.start, ev->u.mapping.end,
						ev->u.mapping.offset, ev->name ? ev->name : "",
						ev->u.mapping.build_id, ev->u.mapping.build_id_len);
		break;
	case RP_EV_PY_CODE:
		/* a code location not kept leaves its frames "[unknown python frame]" */
		(void)rp_symbolizer_add_py_code(r->sym, ev->pid, ev->u.py_code.code,
						ev->u.py_code.lasti, ev->u.py_code.line,
						ev->name ? ev->name : "");
		break;
	case RP_EV_PROCESS_NAME:
		note_name(r, name_key(ev->pid, 0), ev->name, false);
		break;
	case RP_EV_PROCESS_CMDLINE:
		note_name(r, name_key(ev->pid, 0), ev->name, true);
		break;
	case RP_EV_THREAD_NAME:
		/* The main thread's name is the process's until one is given. */
		note_name(r, name_key(ev->pid, ev->tid), ev->name, false);
		break;
	case RP_EV_COUNTER:
		if (ev->name && strcmp(ev->name, "cpu_sampler_hz") == 0 && ev->u.counter.value > 0)
			note_rate(r, ev);
		break;
	default:
		break;
	}
}

static bool is_metadata(uint8_t kind)
{
	return kind == RP_EV_MAPPING || kind == RP_EV_PROCESS_NAME ||
	       kind == RP_EV_PROCESS_CMDLINE || kind == RP_EV_THREAD_NAME || kind == RP_EV_PY_CODE ||
	       kind == RP_EV_DEVICE_INFO;
}

/* Per chunk of one device's file: fn(ctx, event).  Corrupt chunks are
 * counted and skipped. */
static int each_chunk_event(struct rp_reader *r, size_t device,
			    int (*fn)(struct rp_reader *, size_t, const struct rp_event *, void *),
			    void *ctx, struct rp_err *err)
{
	struct rp_session_chunks *sc;
	struct rp_chunk_reader *cr;
	int rc = rp_session_chunks_open(r->device_paths[device], &sc, err);
	if (rc < 0)
		return rc;
	if ((rc = rp_chunk_reader_new(&cr)) < 0) {
		rp_session_chunks_close(sc);
		return rp_err_set(err, rc, "out of memory reading %s", r->device_paths[device]);
	}
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	struct rp_err cerr;
	while ((rc = rp_session_chunks_next(sc, &chunk, &len, &hdr, &cerr)) != 0) {
		if (rc < 0 || rp_chunk_reader_load(cr, chunk, len, &cerr) < 0) {
			r->corrupt++;
			continue;
		}
		struct rp_event ev;
		while ((rc = rp_chunk_reader_next(cr, &ev, &cerr)) == 1)
			if ((rc = fn(r, device, &ev, ctx)) < 0)
				goto out;
		if (rc < 0)
			r->corrupt++;
	}
out:
	rp_chunk_reader_free(cr);
	rp_session_chunks_close(sc);
	return rc < 0 ? rc : 0;
}

static int metadata_event(struct rp_reader *r, size_t device, const struct rp_event *ev, void *ctx)
{
	(void)ctx;
	note_metadata(r, ev);
	(void)rp_device_identity_note(&r->device_ids[device], ev);
	return 0;
}

static int by_ts(const void *a, const void *b)
{
	const struct rate_point *x = a, *y = b;
	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

void rp_reader_free(struct rp_reader *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->ndevices; i++) {
		free(r->device_names[i]);
		free(r->device_paths[i]);
	}
	free(r->device_names);
	free(r->device_paths);
	free(r->device_ids);
	for (size_t i = 0; r->names && i <= r->names_mask; i++) {
		free(r->names[i].name);
		free(r->names[i].cmdline);
	}
	free(r->names);
	free(r->rates);
	free(r->keep);
	for (size_t i = 0; r->stacks && i <= r->stacks_mask; i++)
		free(r->stacks[i].open);
	free(r->stacks);
	rp_symbolizer_free(r->sym);
	json_decref(r->manifest);
	free(r->dir);
	free(r);
}

static int add_devices(struct rp_reader *r, struct rp_err *err)
{
	json_t *devs = json_object_get(r->manifest, "devices");
	size_t n = json_array_size(devs);
	r->device_names = calloc(n ? n : 1, sizeof(char *));
	r->device_paths = calloc(n ? n : 1, sizeof(char *));
	r->device_ids = calloc(n ? n : 1, sizeof(*r->device_ids));
	if (!r->device_names || !r->device_paths || !r->device_ids)
		return rp_err_set(err, -ENOMEM, "out of memory");
	size_t i;
	json_t *dev;
	json_array_foreach(devs, i, dev) {
		const char *name = json_string_value(json_object_get(dev, "device"));
		const char *file = json_string_value(json_object_get(dev, "file"));
		if (!name || !file)
			continue; /* a device without data in the window */
		if (strchr(file, '/') || strcmp(file, "..") == 0)
			return rp_err_set(err, -EINVAL, "%s: manifest of host %s names chunk file '%s' "
					  "outside the session directory: the manifest is damaged",
					  r->dir, rp_reader_host(r), file);
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", r->dir, file) >= sizeof(path))
			return rp_err_set(err, -ENAMETOOLONG, "%s/%s: path too long", r->dir, file);
		if (!(r->device_names[r->ndevices] = strdup(name)) ||
		    !(r->device_paths[r->ndevices] = strdup(path)))
			return rp_err_set(err, -ENOMEM, "out of memory");
		r->ndevices++;
	}
	return 0;
}

int rp_reader_open(const char *session_dir, json_t *manifest, const struct rp_symbolizer_opts *sym,
		   struct rp_reader **out, struct rp_err *err)
{
	struct rp_reader *r = calloc(1, sizeof(*r));
	if (!r || !(r->dir = strdup(session_dir))) {
		free(r);
		return rp_err_set(err, -ENOMEM, "out of memory");
	}
	r->manifest = json_incref(manifest);
	json_t *req = json_object_get(manifest, "requested");
	json_t *start = json_object_get(req, "start_ns"), *end = json_object_get(req, "end_ns");
	int rc;
	if (!json_is_integer(start) || !json_is_integer(end) || json_integer_value(start) < 0 ||
	    json_integer_value(end) < json_integer_value(start)) {
		rc = rp_err_set(err, -EINVAL, "%s: manifest of host %s has no closed requested "
				"window: is the session still open?", session_dir, rp_reader_host(r));
		goto fail;
	}
	r->t0 = (uint64_t)json_integer_value(start);
	r->t1 = (uint64_t)json_integer_value(end);
	r->wall_offset = json_integer_value(json_object_get(manifest, "wall_offset_ns"));
	if ((rc = add_devices(r, err)) < 0 || (rc = rp_symbolizer_new(sym, &r->sym, err)) < 0)
		goto fail;
	for (size_t d = 0; d < r->ndevices; d++)
		if ((rc = each_chunk_event(r, d, metadata_event, NULL, err)) < 0)
			goto fail;
	for (size_t d = 0; d < r->ndevices; d++)
		if (!r->device_ids[d].kind) /* recorded before device_info events */
			(void)rp_device_identify(r->device_names[d], &r->device_ids[d]);
	if (r->nrates)
		qsort(r->rates, r->nrates, sizeof(*r->rates), by_ts);
	r->corrupt = 0; /* counted again by rp_reader_each */
	*out = r;
	return 0;
fail:
	rp_reader_free(r);
	return rc;
}

json_t *rp_reader_manifest(const struct rp_reader *r)
{
	return r->manifest;
}

const char *rp_reader_host(const struct rp_reader *r)
{
	const char *h = json_string_value(json_object_get(r->manifest, "host"));
	return h ? h : "unknown";
}

uint64_t rp_reader_start_ns(const struct rp_reader *r)
{
	return r->t0;
}

uint64_t rp_reader_end_ns(const struct rp_reader *r)
{
	return r->t1;
}

int64_t rp_reader_wall_offset_ns(const struct rp_reader *r)
{
	return r->wall_offset;
}

size_t rp_reader_device_count(const struct rp_reader *r)
{
	return r->ndevices;
}

const char *rp_reader_device_name(const struct rp_reader *r, size_t device)
{
	return device < r->ndevices ? r->device_names[device] : NULL;
}

const struct rp_device_identity *rp_reader_device_identity(const struct rp_reader *r,
							   size_t device)
{
	return device < r->ndevices ? &r->device_ids[device] : NULL;
}

static const struct name_entry *names_of(const struct rp_reader *r, uint32_t pid, uint32_t tid)
{
	return lookup(r->names, r->names_mask, sizeof(*r->names), name_key(pid, tid));
}

const char *rp_reader_process_name(const struct rp_reader *r, uint32_t pid)
{
	const struct name_entry *e = names_of(r, pid, 0);
	return e ? e->name : NULL;
}

const char *rp_reader_process_cmdline(const struct rp_reader *r, uint32_t pid)
{
	const struct name_entry *e = names_of(r, pid, 0);
	return e ? e->cmdline : NULL;
}

const char *rp_reader_thread_name(const struct rp_reader *r, uint32_t pid, uint32_t tid)
{
	const struct name_entry *e = tid ? names_of(r, pid, tid) : NULL;
	if (e && e->name)
		return e->name;
	return tid == pid ? rp_reader_process_name(r, pid) : NULL;
}

double rp_reader_sample_hz_at(const struct rp_reader *r, uint64_t ts)
{
	if (!r->nrates)
		return 0;
	size_t lo = 0, hi = r->nrates; /* points [0, lo) are at or before ts */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->rates[mid].ts <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	return r->rates[lo ? lo - 1 : 0].hz;
}

struct rp_symbolizer *rp_reader_symbolizer(struct rp_reader *r)
{
	return r->sym;
}

uint64_t rp_reader_corrupt_chunks(const struct rp_reader *r)
{
	return r->corrupt;
}

/* ---- looking at one job ------------------------------------------------ */

int rp_reader_filter_add_pids(struct rp_reader_filter *f, const char *list, struct rp_err *err)
{
	const char *p = list;
	do {
		char *end;
		errno = 0;
		unsigned long pid = strtoul(p, &end, 10);
		if (end == p || (*end && *end != ',') || errno || pid > UINT32_MAX || *p == '-')
			return rp_err_set(err, -EINVAL, "'%s' is not a pid or a comma-separated list of "
					  "pids (4242 or 4242,4243)", list);
		if (f->npids == RP_FILTER_MAX)
			return rp_err_set(err, -EINVAL, "more than %d pids: look at fewer processes at "
					  "once", RP_FILTER_MAX);
		f->pids[f->npids++] = (uint32_t)pid;
		p = *end ? end + 1 : end;
	} while (*p);
	return 0;
}

int rp_reader_filter_add_comm(struct rp_reader_filter *f, const char *name, struct rp_err *err)
{
	if (!*name)
		return rp_err_set(err, -EINVAL, "an empty process name: give the name ps shows in "
				  "its COMMAND column (comm)");
	if (f->ncomms == RP_FILTER_MAX)
		return rp_err_set(err, -EINVAL, "more than %d process names: look at fewer processes "
				  "at once", RP_FILTER_MAX);
	f->comms[f->ncomms++] = name;
	return 0;
}

const char *rp_reader_filter_text(const struct rp_reader_filter *f, char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = 0;
	for (unsigned i = 0; f && i < f->npids + f->ncomms && n < len; i++) {
		int w = i < f->npids ? snprintf(buf + n, len - n, "%spid %u", i ? ", " : "", f->pids[i])
				     : snprintf(buf + n, len - n, "%scomm %s", i ? ", " : "",
						f->comms[i - f->npids]);
		n += w > 0 ? (size_t)w : 0;
	}
	return buf;
}

/* The kernel keeps 15 bytes of a process's name (comm): a longer name
 * given matches it by those. */
#define COMM_LEN 15

static bool comm_matches(const struct rp_reader_filter *f, const char *name)
{
	for (unsigned i = 0; name && i < f->ncomms; i++)
		if (strcmp(f->comms[i], name) == 0 ||
		    (strlen(name) == COMM_LEN && strncmp(f->comms[i], name, COMM_LEN) == 0))
			return true;
	return false;
}

static int by_pid(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Sorts r->keep and drops repeats (a pid given and matched by name
 * counts once). */
static void sort_keep(struct rp_reader *r)
{
	qsort(r->keep, r->nkeep, sizeof(*r->keep), by_pid);
	size_t n = 0;
	for (size_t i = 0; i < r->nkeep; i++)
		if (!n || r->keep[n - 1] != r->keep[i])
			r->keep[n++] = r->keep[i];
	r->nkeep = n;
}

/* The session's own filter, the manifest's "filter": {"pids": [...]}
 * (ringprof run's process tree, a request's pids and cgroup), as many
 * pids as it lists; none when it has none. */
static int session_filter(struct rp_reader *r)
{
	const json_t *pids = json_object_get(json_object_get(r->manifest, "filter"), "pids"), *v;
	size_t i, n = json_array_size(pids);
	if (!n)
		return 0;
	if (!(r->keep = malloc(n * sizeof(*r->keep))))
		return -ENOMEM;
	json_array_foreach(pids, i, v)
		if (json_is_integer(v) && json_integer_value(v) > 0 &&
		    json_integer_value(v) <= UINT32_MAX)
			r->keep[r->nkeep++] = (uint32_t)json_integer_value(v);
	r->filtered = r->nkeep > 0;
	sort_keep(r);
	/* The filter in words names the first of them. */
	r->filter = (struct rp_reader_filter){ 0 };
	for (i = 0; i < r->nkeep && i < RP_FILTER_MAX; i++)
		r->filter.pids[r->filter.npids++] = r->keep[i];
	return 0;
}

int rp_reader_set_filter(struct rp_reader *r, const struct rp_reader_filter *f)
{
	free(r->keep);
	r->keep = NULL;
	r->nkeep = 0;
	r->filtered = false;
	if (!f || !(f->npids || f->ncomms))
		return session_filter(r);
	r->filtered = true;
	r->filter = *f;
	size_t cap = f->npids;
	for (size_t i = 0; r->names && i <= r->names_mask; i++)
		cap += r->names[i].used && !(uint32_t)r->names[i].key;
	if (!(r->keep = malloc((cap ? cap : 1) * sizeof(*r->keep))))
		return -ENOMEM;
	memcpy(r->keep, f->pids, f->npids * sizeof(*r->keep));
	r->nkeep = f->npids;
	for (size_t i = 0; r->names && i <= r->names_mask; i++) {
		const struct name_entry *e = &r->names[i];
		if (e->used && !(uint32_t)e->key && comm_matches(f, e->name))
			r->keep[r->nkeep++] = (uint32_t)(e->key >> 32);
	}
	sort_keep(r);
	return 0;
}

const struct rp_reader_filter *rp_reader_filter(const struct rp_reader *r, const uint32_t **pids,
						size_t *npids)
{
	*pids = r->keep;
	*npids = r->nkeep;
	return r->filtered ? &r->filter : NULL;
}

/* Whether the filter lets ev pass (see struct rp_reader_filter). */
static bool passes(const struct rp_reader *r, const struct rp_event *ev)
{
	if (!r->filtered)
		return true;
	if (r->nkeep && bsearch(&ev->pid, r->keep, r->nkeep, sizeof(*r->keep), by_pid))
		return true;
	return ev->pid == 0 && ev->kind != RP_EV_CPU_SAMPLE;
}

struct each_ctx {
	rp_reader_fn fn;
	void *ctx;
};

static int push_range(struct thread_stack *st, const struct rp_event *ev)
{
	if (rp_array_reserve(&st->open, &st->cap, st->depth + 1, sizeof(*st->open)) < 0)
		return -ENOMEM;
	struct open_range *o = &st->open[st->depth++];
	o->ts = ev->ts;
	snprintf(o->name, sizeof(o->name), "%s", ev->name ? ev->name : "");
	return 0;
}

/* Pops st's innermost range, handing its end (at ts) to the callback. */
static int pop_range(struct thread_stack *st, const struct rp_event *ev, size_t device,
		     bool truncated, struct each_ctx *e)
{
	const struct open_range *o = &st->open[--st->depth];
	struct rp_reader_event re = {
		.ev = ev, .device = device, .depth = (unsigned)st->depth, .begin_ts = o->ts,
		.range_name = o->name, .truncated = truncated,
	};
	return e->fn(e->ctx, &re);
}

static int window_event(struct rp_reader *r, size_t device, const struct rp_event *ev, void *ctx)
{
	struct each_ctx *e = ctx;
	if (is_metadata(ev->kind) || ev->ts < r->t0 || ev->ts > r->t1 || !passes(r, ev))
		return 0;
	if (ev->kind == RP_EV_CPU_SAMPLE && !ev->u.sample.frames) {
		/* A sample without a stack: writers may copy its frames. */
		static const uint64_t no_frames[1];
		struct rp_event copy = *ev;
		copy.u.sample.frames = no_frames;
		struct rp_reader_event re = { .ev = &copy, .device = device };
		return e->fn(e->ctx, &re);
	}
	if (ev->kind != RP_EV_RANGE_BEGIN && ev->kind != RP_EV_RANGE_END) {
		struct rp_reader_event re = { .ev = ev, .device = device };
		return e->fn(e->ctx, &re);
	}
	uint64_t key = name_key(ev->pid, ev->tid);
	struct thread_stack *st;
	if (ev->kind == RP_EV_RANGE_END) {
		st = (struct thread_stack *)lookup(r->stacks, r->stacks_mask, sizeof(*st), key);
		if (!st || !st->depth)
			return 0; /* its begin lies before the window */
		return pop_range(st, ev, device, false, e);
	}
	st = find_slot(&r->stacks, &r->stacks_mask, &r->nstacks, sizeof(*st), key);
	if (!st || push_range(st, ev) < 0) {
		r->out_of_memory = true;
		return -ENOMEM;
	}
	struct rp_reader_event re = { .ev = ev, .device = device, .depth = (unsigned)st->depth - 1 };
	return e->fn(e->ctx, &re);
}

/* Closes every range still open on device at the window's end. */
static int close_open_ranges(struct rp_reader *r, size_t device, struct each_ctx *e)
{
	int rc = 0;
	for (size_t i = 0; r->stacks && i <= r->stacks_mask; i++) {
		struct thread_stack *st = &r->stacks[i];
		while (st->used && st->depth) {
			struct rp_event end = {
				.kind = RP_EV_RANGE_END, .ts = r->t1,
				.pid = (uint32_t)(st->key >> 32), .tid = (uint32_t)st->key,
			};
			if (rc == 0)
				rc = pop_range(st, &end, device, true, e);
			else
				st->depth--;
		}
	}
	return rc;
}

int rp_reader_each(struct rp_reader *r, rp_reader_fn fn, void *ctx, struct rp_err *err)
{
	struct each_ctx e = { fn, ctx };
	r->corrupt = 0;
	r->out_of_memory = false;
	for (size_t d = 0; d < r->ndevices; d++) {
		int rc = each_chunk_event(r, d, window_event, &e, err);
		int closed = close_open_ranges(r, d, &e);
		if (rc == 0)
			rc = closed;
		if (rc < 0 && r->out_of_memory)
			return rp_err_set(err, rc, "out of memory reading %s", r->device_paths[d]);
		if (rc < 0)
			return rc; /* err is set, or fn's own */
	}
	return 0;
}
