#include "drain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"

#define DEFAULT_SEAL_INTERVAL_NS 1000000000ull
/* Producer timestamps are trusted only this close to the drain's now: a
 * producer event is drained within moments of being written, so one far
 * off is corrupt and would stretch every window it lands in.  GPU
 * activity may be reported late (CUPTI buffers), hence the hour. */
#define PRODUCER_PAST_NS (3600 * 1000000000ull)
#define PRODUCER_FUTURE_NS (60 * 1000000000ull)
/* More drops than records a producer could have tried to write between
 * two drains (2^32 at 10 ns each is 43 s): a larger count is corrupt. */
#define PRODUCER_DROPS_MAX (1ull << 32)
#define CALIBRATION_REFRESH_NS 1000000000ull
/* Bounds of the remembered metadata: names and command lines, sticky
 * events, and (executable) mappings.  When full, the oldest entries make
 * room. */
#define MAX_NAMES 1024
#define MAX_MAPPINGS 4096
/* Python code locations (RP_EV_PY_CODE) remembered, all processes. */
#define MAX_PY_CODES 8192
/* Buckets of a metadata set, by process (a thread name: by thread). */
#define META_BUCKETS 1024
#define NO_ENTRY UINT32_MAX

/* Metadata written again into every chunk that needs it: ev as added,
 * with its name copied (ev.name is re-pointed at name when replayed). */
struct meta {
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
	uint32_t prev, next; /* in the list of its bucket */
};

/* Entries of one kind of metadata; grown on demand up to cap. */
struct meta_set {
	struct meta *e;
	size_t n, alloc, cap, next_evict;
	uint32_t head[META_BUCKETS];
};

/* Processes or threads whose metadata the open chunk holds: open
 * addressing, emptied at every chunk by a new generation. */
struct seen {
	struct seen_slot {
		uint64_t key;
		uint32_t gen;
	} *slot;
	uint32_t mask, n, gen;
	uint64_t last; /* the key found last, in front of the table */
	uint32_t last_gen;
};

/* Whose each event of the open chunk is, should a split seal carry it
 * over into the next chunk. */
struct placed {
	uint32_t pid, tid;
	bool meta;
};

struct producer {
	struct rp_shmring *ring;
	uint64_t dropped_seen; /* producer drop counter already recorded */
	uint64_t dropped;      /* drops recorded, saturated */
	uint64_t corrupt;      /* records discarded as impossible */
};

struct rp_drain {
	struct rp_ringfile *rf;
	struct rp_chunk_builder *builder;
	uint64_t seal_interval_ns;
	uint64_t chunk_opened_ns; /* host time the open chunk got its first event */

	struct producer *producers;
	size_t nproducers, cap;
	uint32_t *pids_seen;      /* for status: which processes wrote here */
	size_t npids_seen;

	struct rp_tsc_calib calib;
	bool have_calib;
	uint64_t calib_refreshed_ns;

	void *chunk_buf;
	size_t chunk_cap;
	struct rp_drain_stats st;
	struct rp_err *poll_err; /* where the drain callback reports */
	struct producer *draining; /* the producer the drain callback serves */
	uint64_t draining_now_ns;  /* the host clock when its drain began */
	int64_t draining_offset_ns; /* its foreign clock's offset, read once */
	rp_drain_detach_fn on_detach;
	void *detach_ctx;

	/* Names, command lines and mappings are recorded once, when a
	 * thread or process is first seen; writing them again into every
	 * chunk that holds events of the process (names of threads: of the
	 * thread) keeps any window (and so any snapshot) able to name its
	 * threads and symbolize its stacks.  Sticky events go into every
	 * chunk. */
	struct meta_set names, maps, py_codes, sticky;
	struct seen procs, threads;
	struct placed *placed;
	size_t nplaced, placed_cap;
	size_t chunk_events;          /* in the open chunk, metadata not counted */
	size_t meta_used, meta_budget; /* raw bytes of replayed metadata in it */

	rp_drain_observer observer;
	void *observer_ctx;
};

static void meta_set_init(struct meta_set *s, size_t cap)
{
	s->cap = cap;
	memset(s->head, 0xff, sizeof(s->head));
}

int rp_drain_new(struct rp_ringfile *rf, const struct rp_drain_opts *opts,
		 struct rp_drain **out, struct rp_err *err)
{
	struct rp_drain *d = calloc(1, sizeof(*d));
	if (!d)
		return rp_err_set(err, -ENOMEM, "out of memory creating a drain");
	struct rp_ringfile_stats rst;
	rp_ringfile_stats(rf, &rst);
	d->rf = rf;
	d->seal_interval_ns = opts && opts->seal_interval_ns ? opts->seal_interval_ns
							     : DEFAULT_SEAL_INTERVAL_NS;
	if (opts) {
		d->on_detach = opts->on_detach;
		d->detach_ctx = opts->detach_ctx;
	}
	d->chunk_cap = rp_ringfile_max_chunk(rf);
	d->chunk_buf = malloc(d->chunk_cap);
	meta_set_init(&d->names, MAX_NAMES);
	meta_set_init(&d->maps, MAX_MAPPINGS);
	meta_set_init(&d->py_codes, MAX_PY_CODES);
	meta_set_init(&d->sticky, MAX_NAMES);
	d->procs.gen = d->threads.gen = 1;
	int rc = d->chunk_buf ? rp_chunk_builder_new(rst.device_id, d->chunk_cap, &d->builder)
			      : -ENOMEM;
	if (rc < 0) {
		free(d->chunk_buf);
		free(d);
		return rp_err_set(err, rc, "cannot create a chunk builder for ring %s: %s",
				  rst.device, strerror(-rc));
	}
	/* 20 ms bounds the rate error to a few ppm of read noise; refreshes
	 * while running refine it further. */
	d->have_calib = rp_tsc_calibrate(&d->calib, 20) == 0;
	d->calib_refreshed_ns = rp_clock_now_ns();
	*out = d;
	return 0;
}

/* ---- remembered metadata ---- */

/* Names and process metadata are remembered on their own; other kinds
 * only when added with rp_drain_add_sticky. */
static bool is_metadata(const struct rp_event *ev)
{
	return ev->kind == RP_EV_PROCESS_NAME || ev->kind == RP_EV_THREAD_NAME ||
	       ev->kind == RP_EV_PROCESS_CMDLINE || ev->kind == RP_EV_MAPPING ||
	       ev->kind == RP_EV_PY_CODE;
}

static struct meta_set *meta_set_of(struct rp_drain *d, const struct rp_event *ev)
{
	return ev->kind == RP_EV_MAPPING ? &d->maps
	       : ev->kind == RP_EV_PY_CODE ? &d->py_codes
					   : &d->names;
}

static uint32_t bucket(uint32_t pid, uint32_t tid)
{
	uint64_t h = ((uint64_t)pid * 0x9e3779b97f4a7c15ull ^ tid) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(h >> 54); /* META_BUCKETS = 2^10 */
}

static uint32_t bucket_of(const struct rp_event *ev)
{
	return bucket(ev->pid, ev->kind == RP_EV_THREAD_NAME ? ev->tid : 0);
}

static void meta_link(struct meta_set *s, uint32_t i)
{
	uint32_t *head = &s->head[bucket_of(&s->e[i].ev)];
	s->e[i].prev = NO_ENTRY;
	s->e[i].next = *head;
	if (*head != NO_ENTRY)
		s->e[*head].prev = i;
	*head = i;
}

/* Link i after entry after of its bucket (NO_ENTRY: first). */
static void meta_link_after(struct meta_set *s, uint32_t i, uint32_t after)
{
	if (after == NO_ENTRY) {
		meta_link(s, i);
		return;
	}
	struct meta *e = &s->e[i];
	e->prev = after;
	e->next = s->e[after].next;
	if (e->next != NO_ENTRY)
		s->e[e->next].prev = i;
	s->e[after].next = i;
}

static void meta_unlink(struct meta_set *s, uint32_t i)
{
	struct meta *e = &s->e[i];
	if (e->prev != NO_ENTRY)
		s->e[e->prev].next = e->next;
	else
		s->head[bucket_of(&e->ev)] = e->next;
	if (e->next != NO_ENTRY)
		s->e[e->next].prev = e->prev;
}

/* Remove entry i; the last entry moves into its place. */
static void meta_remove(struct meta_set *s, uint32_t i)
{
	meta_unlink(s, i);
	uint32_t last = (uint32_t)--s->n;
	if (i == last)
		return;
	struct meta *e = &s->e[i];
	*e = s->e[last];
	if (e->prev != NO_ENTRY)
		s->e[e->prev].next = i;
	else
		s->head[bucket_of(&e->ev)] = i;
	if (e->next != NO_ENTRY)
		s->e[e->next].prev = i;
}

/* Whether a replaces b: a mapping replaces the mappings of its process it
 * overlaps (the process mapped something else there); a name, the name of
 * its thread; a device_info, the ring's earlier one; any other sticky
 * event, the one of the same name. */
static bool replaces(const struct rp_event *a, const struct meta *old)
{
	const struct rp_event *b = &old->ev;
	if (a->kind != b->kind || a->pid != b->pid)
		return false;
	if (a->kind == RP_EV_DEVICE_INFO)
		return true; /* a ring holds one device */
	if (a->kind == RP_EV_MAPPING)
		return a->u.mapping.start < b->u.mapping.end && b->u.mapping.start < a->u.mapping.end;
	if (a->kind == RP_EV_PY_CODE)
		return a->u.py_code.code == b->u.py_code.code && a->u.py_code.lasti == b->u.py_code.lasti;
	if (a->tid != b->tid)
		return false;
	if (a->kind == RP_EV_PROCESS_NAME || a->kind == RP_EV_THREAD_NAME ||
	    a->kind == RP_EV_PROCESS_CMDLINE)
		return true;
	return strcmp(a->name ? a->name : "", old->name) == 0;
}

/* Returns -ENOMEM when the set cannot grow (the event is then not
 * repeated, but still recorded once). */
static int remember(struct meta_set *s, const struct rp_event *ev)
{
	/* What ev replaces shares its bucket. */
	for (uint32_t i = s->head[bucket_of(ev)], next; i != NO_ENTRY; i = next) {
		next = s->e[i].next;
		if (replaces(ev, &s->e[i])) {
			uint32_t last = (uint32_t)s->n - 1;
			meta_remove(s, i);
			if (next == last)
				next = i;
		}
	}
	uint32_t i;
	if (s->n < s->cap) {
		if (s->n == s->alloc) {
			size_t alloc = s->alloc ? 2 * s->alloc : 16;
			if (alloc > s->cap)
				alloc = s->cap;
			struct meta *grown = realloc(s->e, alloc * sizeof(*grown));
			if (!grown)
				return -ENOMEM;
			s->e = grown;
			s->alloc = alloc;
		}
		i = (uint32_t)s->n++;
	} else {
		i = (uint32_t)(s->next_evict++ % s->cap); /* full: the oldest entries make room */
		meta_unlink(s, i);
	}
	struct meta *e = &s->e[i];
	e->ev = *ev;
	snprintf(e->name, sizeof(e->name), "%s", ev->name ? ev->name : "");
	e->ev.name = NULL;
	meta_link(s, i);
	return 0;
}

void rp_drain_forget(struct rp_drain *d, uint32_t pid)
{
	struct meta_set *sets[] = {&d->names, &d->maps, &d->py_codes, &d->sticky};
	for (size_t k = 0; k < sizeof(sets) / sizeof(sets[0]); k++)
		for (uint32_t i = 0; i < sets[k]->n;)
			if (sets[k]->e[i].ev.pid == pid)
				meta_remove(sets[k], i);
			else
				i++;
}

/* ---- what the open chunk holds ---- */

static void seen_clear(struct seen *s)
{
	s->n = 0;
	if (++s->gen == 0) {
		/* After 2^32 chunks the generation wraps: clear for real once. */
		if (s->slot)
			memset(s->slot, 0, (s->mask + 1) * sizeof(*s->slot));
		s->gen = 1;
		s->last_gen = 0;
	}
}

/* The open chunk holds no metadata as far as the drain knows: the next
 * event of each process and thread gets theirs. */
static void seen_clear_all(struct rp_drain *d)
{
	seen_clear(&d->procs);
	seen_clear(&d->threads);
}

static uint32_t seen_hash(uint64_t key, uint32_t mask)
{
	return (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & mask;
}

static int seen_grow(struct seen *s)
{
	uint32_t size = s->slot ? 2 * (s->mask + 1) : 64;
	struct seen_slot *slot = calloc(size, sizeof(*slot));
	if (!slot)
		return -ENOMEM;
	for (uint32_t i = 0; s->slot && i <= s->mask; i++) {
		if (s->slot[i].gen != s->gen)
			continue;
		uint32_t j = seen_hash(s->slot[i].key, size - 1);
		while (slot[j].gen == s->gen)
			j = (j + 1) & (size - 1);
		slot[j] = s->slot[i];
	}
	free(s->slot);
	s->slot = slot;
	s->mask = size - 1;
	return 0;
}

/* Whether key is new to the open chunk; it is then added.  Should the
 * table not grow, everything is new: metadata is written again, never
 * left out.  Inline, like chunk_add and introduce: they run for every
 * event, and for most a call would cost more than what they do. */
static inline bool seen_first(struct seen *s, uint64_t key)
{
	if (s->last == key && s->last_gen == s->gen)
		return false;
	if ((!s->slot || s->n >= (s->mask + 1) / 2) && seen_grow(s) < 0)
		return true;
	s->last = key;
	s->last_gen = s->gen;
	for (uint32_t i = seen_hash(key, s->mask);; i = (i + 1) & s->mask) {
		if (s->slot[i].gen != s->gen) {
			s->slot[i] = (struct seen_slot){ key, s->gen };
			s->n++;
			return true;
		}
		if (s->slot[i].key == key)
			return false;
	}
}

/* Add ev to the open chunk, noting whose it is. */
static inline int chunk_add(struct rp_drain *d, const struct rp_event *ev, bool meta)
{
	if (d->nplaced == d->placed_cap) {
		size_t cap = d->placed_cap ? 2 * d->placed_cap : 1024;
		struct placed *grown = realloc(d->placed, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		d->placed = grown;
		d->placed_cap = cap;
	}
	int rc = rp_chunk_builder_add(d->builder, ev);
	if (rc == 0) {
		d->placed[d->nplaced++] = (struct placed){ ev->pid, ev->tid, meta };
		d->chunk_events += !meta;
	}
	return rc;
}

/* Write a remembered entry into the open chunk, stamped ts, within the
 * chunk's metadata budget; -ENOSPC when it does not fit. */
static int replay_one(struct rp_drain *d, const struct meta *e, uint64_t ts)
{
	if (d->meta_used >= d->meta_budget)
		return -ENOSPC;
	struct rp_event ev = e->ev;
	ev.ts = ts;
	ev.name = e->name;
	size_t room = rp_chunk_builder_room(d->builder);
	int rc = chunk_add(d, &ev, true);
	if (rc == 0)
		d->meta_used += room - rp_chunk_builder_room(d->builder);
	return rc;
}

/* A new chunk: replayed metadata may take half of the room it has, so
 * that events always find some; the sticky events come first. */
static void open_chunk(struct rp_drain *d, uint64_t ts)
{
	d->chunk_events = 0;
	d->meta_used = 0;
	d->meta_budget = rp_chunk_builder_room(d->builder) / 2;
	for (size_t i = 0; i < d->sticky.n; i++)
		if (replay_one(d, &d->sticky.e[i], ts) < 0)
			break;
}

static bool belongs(const struct rp_event *ev, uint32_t pid, uint32_t tid, bool thread)
{
	return ev->pid == pid && (ev->kind == RP_EV_THREAD_NAME) == thread &&
	       (!thread || ev->tid == tid);
}

/* Replay the entries of s of process pid (thread: the name of thread tid
 * only), but those skip replaces (it follows them).  Returns -ENOSPC when
 * they do not all fit and the chunk holds events already: seal it and
 * start over in a new one.  In a chunk without events what does not fit
 * is left out, and comes first the next time. */
static int replay_entries(struct rp_drain *d, struct meta_set *s, uint32_t pid, uint32_t tid,
			  bool thread, const struct rp_event *skip, uint64_t ts)
{
	for (uint32_t i = s->head[bucket(pid, thread ? tid : 0)], next; i != NO_ENTRY; i = next) {
		next = s->e[i].next;
		if (!belongs(&s->e[i].ev, pid, tid, thread) || (skip && replaces(skip, &s->e[i])))
			continue;
		if (replay_one(d, &s->e[i], ts) == 0)
			continue;
		if (d->chunk_events)
			return -ENOSPC;
		/* To the front of the bucket, in order: over a few chunks
		 * every entry is written. */
		for (uint32_t after = NO_ENTRY; i != NO_ENTRY; i = next) {
			next = s->e[i].next;
			if (belongs(&s->e[i].ev, pid, tid, thread)) {
				meta_unlink(s, i);
				meta_link_after(s, i, after);
				after = i;
			}
		}
		return 0;
	}
	return 0;
}

/* Write the metadata of process pid (and of thread tid, unless
 * process_only) that the open chunk does not hold yet: names first, the
 * mappings and then the Python code locations, which may not all fit,
 * last. */
static inline int introduce(struct rp_drain *d, uint32_t pid, uint32_t tid,
			    bool process_only, const struct rp_event *skip, uint64_t ts)
{
	bool thread = !process_only && seen_first(&d->threads, (uint64_t)pid << 32 | tid);
	if (!process_only && !thread)
		return 0; /* the thread is there, so is its process */
	bool process = seen_first(&d->procs, pid);
	int rc = 0;
	if (process)
		rc = replay_entries(d, &d->names, pid, 0, false, skip, ts);
	if (rc == 0 && thread)
		rc = replay_entries(d, &d->names, pid, tid, true, skip, ts);
	if (rc == 0 && process)
		rc = replay_entries(d, &d->maps, pid, 0, false, skip, ts);
	if (rc == 0 && process)
		rc = replay_entries(d, &d->py_codes, pid, 0, false, skip, ts);
	return rc;
}

/* The builder sealed a chunk: the next one holds no metadata yet.  Events
 * a split seal carried over open it; their metadata follows them, as far
 * as it fits. */
static void carry_over(struct rp_drain *d)
{
	seen_clear_all(d);
	size_t carried = rp_chunk_builder_count(d->builder);
	size_t first = d->nplaced > carried ? d->nplaced - carried : 0;
	memmove(d->placed, d->placed + first, (d->nplaced - first) * sizeof(*d->placed));
	d->nplaced -= first;
	size_t n = d->nplaced;
	if (!n)
		return;
	uint64_t ts = rp_chunk_builder_opened_ts(d->builder);
	open_chunk(d, ts);
	for (size_t i = 0; i < n; i++)
		d->chunk_events += !d->placed[i].meta;
	for (size_t i = 0; i < n; i++) {
		if (!d->placed[i].meta &&
		    introduce(d, d->placed[i].pid, d->placed[i].tid, false, NULL, ts) < 0) {
			/* No room left: the next event that needs metadata
			 * seals this chunk and opens one of its own. */
			seen_clear_all(d);
			return;
		}
	}
}

static int seal_one(struct rp_drain *d, struct rp_err *err)
{
	size_t len;
	int rc = rp_chunk_builder_seal(d->builder, rp_ringfile_next_seq(d->rf),
				       rp_clock_wall_offset_ns(), d->chunk_buf, d->chunk_cap, &len);
	if (rc < 0) {
		/* What the open chunk holds is not known for sure any more:
		 * metadata is written again. */
		seen_clear_all(d);
		return rp_err_set(err, rc, "sealing a chunk failed: %s", strerror(-rc));
	}
	carry_over(d);
	struct rp_chunk_header hdr;
	rc = rp_chunk_header_check(d->chunk_buf, len, &hdr, err);
	if (rc < 0)
		return rc;
	rc = rp_ringfile_append(d->rf, d->chunk_buf, len, err);
	if (rc < 0)
		return rc;
	d->st.chunks++;
	d->st.raw_bytes += hdr.raw_size;
	d->st.comp_bytes += len;
	d->chunk_opened_ns = rp_chunk_builder_count(d->builder) ? rp_clock_now_ns() : 0;
	return 0;
}

/* Add one event in host ns, after the metadata the chunk needs for it,
 * sealing as often as the builder asks. */
static int add_event(struct rp_drain *d, const struct rp_event *ev, struct rp_err *err)
{
	bool meta = is_metadata(ev);
	if (meta)
		remember(meta_set_of(d, ev), ev);
	for (int tries = 0;; tries++) {
		if (rp_chunk_builder_count(d->builder) == 0)
			open_chunk(d, ev->ts);
		/* Metadata goes before the events that need it, so that the
		 * prefix a split seals holds what its events need. */
		int rc = introduce(d, ev->pid, ev->tid, meta && ev->kind != RP_EV_THREAD_NAME,
				   meta ? ev : NULL, ev->ts);
		if (rc == 0)
			rc = chunk_add(d, ev, meta);
		if (rc == 0)
			break;
		if (rc != -ENOSPC || tries > 8)
			return rp_err_set(err, rc, "cannot encode a %s event: %s",
					  rp_event_kind_name(ev->kind), strerror(-rc));
		rc = seal_one(d, err);
		if (rc < 0)
			return rc;
	}
	if (!d->chunk_opened_ns)
		d->chunk_opened_ns = rp_clock_now_ns();
	d->st.events++;
	if (d->observer)
		d->observer(d->observer_ctx, ev);
	return 0;
}

int rp_drain_add(struct rp_drain *d, const struct rp_event *ev, struct rp_err *err)
{
	return add_event(d, ev, err);
}

int rp_drain_add_sticky(struct rp_drain *d, const struct rp_event *ev, struct rp_err *err)
{
	if (ev->kind == RP_EV_CPU_SAMPLE)
		return rp_err_set(err, -EINVAL, "a CPU sample cannot be repeated in every chunk");
	int rc = add_event(d, ev, err);
	if (rc == 0 && !is_metadata(ev) && remember(&d->sticky, ev) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory remembering a %s event",
				  rp_event_kind_name(ev->kind));
	return rc;
}

static uint64_t to_host_ns(const struct rp_drain *d, const struct rp_shmring *r, uint64_t t)
{
	switch (rp_shmring_clock(r)) {
	case RP_SHM_CLOCK_TSC:
		return d->have_calib ? rp_tsc_to_ns(&d->calib, t) : t;
	case RP_SHM_CLOCK_FOREIGN:
		/* Wraps on a nonsense offset: plausible_ts then rejects it. */
		return t + (uint64_t)d->draining_offset_ns;
	default:
		return t;
	}
}

static uint64_t add_saturated(uint64_t a, uint64_t b)
{
	return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Whether a producer's timestamp (host ns) is near enough to now. */
static bool plausible_ts(uint64_t ts, uint64_t now)
{
	return ts + PRODUCER_PAST_NS >= now && ts <= now + PRODUCER_FUTURE_NS;
}

/* A producer record as an event it may send: its own pid (proven at the
 * hello: a pid in the record is ignored), timestamps near now, a sane
 * drop count.  false: the record is corrupt. */
static bool producer_event(const struct rp_drain *d, const struct rp_shmring *r,
			   struct rp_event *ev)
{
	/* Read once per drain, not per event: the bounds are far wider than
	 * a drain lasts. */
	uint64_t now = d->draining_now_ns;
	/* The daemon's own rings (pid 0: collectors') may name the process
	 * an event belongs to; a workload's ring is its proven pid. */
	if (rp_shmring_pid(r) || ev->kind != RP_EV_DEVICE_OP)
		ev->pid = rp_shmring_pid(r);
	ev->ts = to_host_ns(d, r, ev->ts);
	if (!plausible_ts(ev->ts, now))
		return false;
	if (ev->kind == RP_EV_DEVICE_OP) {
		ev->u.op.end = to_host_ns(d, r, ev->u.op.end);
		return ev->u.op.end >= ev->ts && plausible_ts(ev->u.op.end, now);
	}
	if (ev->kind == RP_EV_GPU_ACTIVITY) {
		ev->u.gpu.end = to_host_ns(d, r, ev->u.gpu.end);
		if (ev->u.gpu.end < ev->ts || !plausible_ts(ev->u.gpu.end, now))
			return false;
	}
	return ev->kind != RP_EV_DROPS || ev->u.drops.count <= PRODUCER_DROPS_MAX;
}

static int take_record(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct rp_drain *d = ctx;
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
	if (rp_rec_to_event(r, rec, &ev, name) < 0 || !producer_event(d, r, &ev)) {
		d->st.corrupt_records++;
		d->draining->corrupt++;
		return 0;
	}
	return add_event(d, &ev, d->poll_err);
}

/* Attaches are rare (a thread's first event): a linear look is enough. */
static void note_pid(struct rp_drain *d, uint32_t pid)
{
	for (size_t i = 0; i < d->npids_seen; i++)
		if (d->pids_seen[i] == pid)
			return;
	if (d->npids_seen == RP_DRAIN_PIDS_SEEN_MAX)
		return;
	if (!d->pids_seen && !(d->pids_seen = malloc(RP_DRAIN_PIDS_SEEN_MAX * sizeof(uint32_t))))
		return; /* status shows 0 rather than failing an attach */
	d->pids_seen[d->npids_seen++] = pid;
}

int rp_drain_attach(struct rp_drain *d, struct rp_shmring *ring)
{
	if (rp_shmring_clock(ring) == RP_SHM_CLOCK_TSC && !d->have_calib)
		return -ENOTSUP; /* the creator should have chosen MONOTONIC */
	if (d->nproducers == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 8;
		struct producer *p = realloc(d->producers, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		d->producers = p;
		d->cap = cap;
	}
	d->producers[d->nproducers++] = (struct producer){ .ring = ring };
	rp_shmring_hold(ring);
	note_pid(d, rp_shmring_pid(ring));
	return 0;
}

/* Record drops the producer counted since we last looked as one event,
 * so they show up in the window they happened in.  The counter lives in
 * memory the producer writes: a jump past PRODUCER_DROPS_MAX is corrupt
 * and counted as such, its drops as the most that could be true. */
static int record_drops(struct rp_drain *d, struct producer *p, struct rp_err *err)
{
	uint64_t total = rp_shmring_dropped(p->ring);
	if (total <= p->dropped_seen)
		return 0;
	struct rp_event ev = {
		.kind = RP_EV_DROPS,
		.ts = rp_clock_now_ns(),
		.pid = rp_shmring_pid(p->ring),
		.tid = rp_shmring_tid(p->ring),
		.u.drops.count = total - p->dropped_seen,
	};
	if (ev.u.drops.count > PRODUCER_DROPS_MAX) {
		ev.u.drops.count = PRODUCER_DROPS_MAX;
		d->st.corrupt_records++;
		p->corrupt++;
	}
	d->st.producer_drops = add_saturated(d->st.producer_drops, ev.u.drops.count);
	p->dropped = add_saturated(p->dropped, ev.u.drops.count);
	p->dropped_seen = total;
	return add_event(d, &ev, err);
}

static long drain_producer(struct rp_drain *d, struct producer *p, struct rp_err *err)
{
	uint64_t corrupt = 0;
	d->poll_err = err;
	d->draining = p;
	d->draining_now_ns = rp_clock_now_ns();
	d->draining_offset_ns = rp_shmring_clock_offset(p->ring);
	long n = rp_shmring_drain(p->ring, take_record, d, 0, &corrupt);
	d->st.corrupt_records += corrupt;
	p->corrupt += corrupt;
	if (n < 0)
		return n;
	/* A ring half full of what the open chunk holds: freed now, or the
	 * producer would drop; a daemon killed before the seal loses it. */
	if (rp_shmring_held(p->ring) > rp_shmring_capacity(p->ring) / 2)
		(void)rp_shmring_release(p->ring);
	int rc = record_drops(d, p, err);
	return rc < 0 ? rc : n;
}

/* Producer records stay in their rings until the chunk holding them is
 * handed to the ring file, so that a daemon killed before that leaves
 * them to the next daemon, which the producer offers its ring to.  Only
 * once no event is carried over into the open chunk: then every record
 * read so far is in a sealed chunk. */
static void release_sealed(struct rp_drain *d)
{
	if (rp_chunk_builder_count(d->builder) > 0)
		return;
	for (size_t i = 0; i < d->nproducers; i++)
		(void)rp_shmring_release(d->producers[i].ring);
}

long rp_drain_poll(struct rp_drain *d, struct rp_err *err)
{
	uint64_t now = rp_clock_now_ns();
	if (d->have_calib && now - d->calib_refreshed_ns >= CALIBRATION_REFRESH_NS) {
		rp_tsc_refresh(&d->calib);
		d->calib_refreshed_ns = now;
	}
	long total = 0;
	for (size_t i = 0; i < d->nproducers; i++) {
		long n = drain_producer(d, &d->producers[i], err);
		if (n < 0)
			return n;
		total += n;
	}
	if (d->chunk_opened_ns && rp_clock_now_ns() - d->chunk_opened_ns >= d->seal_interval_ns) {
		int rc = seal_one(d, err);
		if (rc < 0)
			return rc;
		release_sealed(d);
	}
	int rc = rp_ringfile_poll(d->rf, err);
	return rc < 0 ? rc : total;
}

int rp_drain_flush(struct rp_drain *d, struct rp_err *err)
{
	long n = rp_drain_poll(d, err);
	if (n < 0)
		return (int)n;
	while (rp_chunk_builder_count(d->builder) > 0) {
		int rc = seal_one(d, err);
		if (rc < 0)
			return rc;
	}
	release_sealed(d);
	return rp_ringfile_sync(d->rf, false, err);
}

static bool pid_attached(const struct rp_drain *d, uint32_t pid)
{
	for (size_t i = 0; i < d->nproducers; i++)
		if (rp_shmring_pid(d->producers[i].ring) == pid)
			return true;
	return false;
}

int rp_drain_reap(struct rp_drain *d, bool (*gone)(const struct rp_shmring *ring, void *ctx),
		  void *ctx)
{
	int reaped = 0;
	for (size_t i = 0; i < d->nproducers;) {
		struct producer *p = &d->producers[i];
		if (!gone(p->ring, ctx)) {
			i++;
			continue;
		}
		/* Take what the producer committed before it went away. */
		if (drain_producer(d, p, NULL) < 0) {
			i++;
			continue;
		}
		struct rp_shmring *ring = p->ring;
		d->producers[i] = d->producers[--d->nproducers];
		if (!pid_attached(d, rp_shmring_pid(ring)))
			rp_drain_forget(d, rp_shmring_pid(ring));
		if (d->on_detach)
			d->on_detach(d->detach_ctx, ring);
		rp_shmring_close(ring);
		reaped++;
	}
	return reaped;
}

void rp_drain_stats(const struct rp_drain *d, struct rp_drain_stats *st)
{
	*st = d->st;
	st->producers = (unsigned)d->nproducers;
	st->processes_seen = (unsigned)d->npids_seen;
}

size_t rp_drain_producers(const struct rp_drain *d, size_t from,
			  struct rp_drain_producer_stats *out, size_t max)
{
	size_t n = 0;
	for (size_t i = from; i < d->nproducers && n < max; i++) {
		const struct producer *p = &d->producers[i];
		out[n++] = (struct rp_drain_producer_stats){
			.pid = rp_shmring_pid(p->ring), .tid = rp_shmring_tid(p->ring),
			.dropped = p->dropped, .corrupt = p->corrupt,
		};
	}
	return n;
}

void rp_drain_set_observer(struct rp_drain *d, rp_drain_observer fn, void *ctx)
{
	d->observer = fn;
	d->observer_ctx = ctx;
}

void rp_drain_free(struct rp_drain *d)
{
	if (!d)
		return;
	(void)rp_drain_flush(d, NULL); /* a ring that cannot be written has said why */
	for (size_t i = 0; i < d->nproducers; i++)
		rp_shmring_close(d->producers[i].ring);
	free(d->producers);
	free(d->pids_seen);
	rp_chunk_builder_free(d->builder);
	free(d->chunk_buf);
	free(d->names.e);
	free(d->maps.e);
	free(d->py_codes.e);
	free(d->sticky.e);
	free(d->procs.slot);
	free(d->threads.slot);
	free(d->placed);
	free(d);
}
