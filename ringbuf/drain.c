#include "drain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"

#define DEFAULT_SEAL_INTERVAL_NS 1000000000ull
#define CALIBRATION_REFRESH_NS 1000000000ull
/* Bounds of the metadata repeated in every chunk: names, command lines
 * and sticky events, and (executable) mappings.  When full, the oldest
 * entries make room. */
#define MAX_NAMES 1024
#define MAX_MAPPINGS 4096

/* Metadata repeated at the start of every chunk: ev as added, with its
 * name copied (ev.name is re-pointed at name when replayed). */
struct sticky {
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
};

/* Entries of one kind of metadata; grown on demand up to cap. */
struct sticky_set {
	struct sticky *e;
	size_t n, alloc, cap, next_evict;
};

struct producer {
	struct rp_shmring *ring;
	uint64_t dropped_seen; /* producer drop counter already recorded */
};

struct rp_drain {
	struct rp_ringfile *rf;
	struct rp_chunk_builder *builder;
	uint64_t seal_interval_ns;
	uint64_t chunk_opened_ns; /* host time the open chunk got its first event */

	struct producer *producers;
	size_t nproducers, cap;

	struct rp_tsc_calib calib;
	bool have_calib;
	uint64_t calib_refreshed_ns;

	void *chunk_buf;
	size_t chunk_cap;
	struct rp_drain_stats st;
	struct rp_err *poll_err; /* where the drain callback reports */

	/* Names, command lines and mappings are recorded once, when a
	 * thread or process is first seen; repeating them in every chunk
	 * keeps any window (and so any snapshot) able to name its threads
	 * and symbolize its stacks. */
	struct sticky_set names, maps;
	size_t maps_replayed; /* where the next replay of maps starts */

	rp_drain_observer observer;
	void *observer_ctx;
};

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
	d->chunk_cap = rp_ringfile_max_chunk(rf);
	d->chunk_buf = malloc(d->chunk_cap);
	d->names.cap = MAX_NAMES;
	d->maps.cap = MAX_MAPPINGS;
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

static bool replay_metadata(struct rp_drain *d, uint64_t ts);

static int seal_one(struct rp_drain *d, struct rp_err *err)
{
	size_t len;
	int rc = rp_chunk_builder_seal(d->builder, rp_ringfile_next_seq(d->rf),
				       rp_clock_wall_offset_ns(), d->chunk_buf, d->chunk_cap, &len);
	if (rc < 0)
		return rp_err_set(err, rc, "sealing a chunk failed: %s", strerror(-rc));
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
	/* A split seal carried events over into the next chunk: it gets the
	 * metadata after them. */
	if (rp_chunk_builder_count(d->builder))
		replay_metadata(d, rp_chunk_builder_opened_ts(d->builder));
	return 0;
}

/* Names and process metadata are repeated in every chunk on their own;
 * other kinds only when added with rp_drain_add_sticky. */
static bool is_metadata(const struct rp_event *ev)
{
	return ev->kind == RP_EV_PROCESS_NAME || ev->kind == RP_EV_THREAD_NAME ||
	       ev->kind == RP_EV_PROCESS_CMDLINE || ev->kind == RP_EV_MAPPING;
}

/* Whether a replaces b: a mapping replaces the mappings of its process it
 * overlaps (the process mapped something else there); a name, the name of
 * its thread; any other sticky event, the one of the same name. */
static bool replaces(const struct rp_event *a, const struct sticky *old)
{
	const struct rp_event *b = &old->ev;
	if (a->kind != b->kind || a->pid != b->pid)
		return false;
	if (a->kind == RP_EV_MAPPING)
		return a->u.mapping.start < b->u.mapping.end && b->u.mapping.start < a->u.mapping.end;
	if (a->tid != b->tid)
		return false;
	if (a->kind == RP_EV_PROCESS_NAME || a->kind == RP_EV_THREAD_NAME ||
	    a->kind == RP_EV_PROCESS_CMDLINE)
		return true;
	return strcmp(a->name ? a->name : "", old->name) == 0;
}

static void sticky_remove(struct sticky_set *s, size_t i)
{
	s->e[i] = s->e[--s->n];
}

/* Returns -ENOMEM when the set cannot grow (the event is then not
 * repeated, but still recorded once). */
static int remember(struct rp_drain *d, const struct rp_event *ev)
{
	struct sticky_set *s = ev->kind == RP_EV_MAPPING ? &d->maps : &d->names;
	for (size_t i = 0; i < s->n;)
		if (replaces(ev, &s->e[i]))
			sticky_remove(s, i);
		else
			i++;
	struct sticky *e;
	if (s->n < s->cap) {
		if (s->n == s->alloc) {
			size_t alloc = s->alloc ? 2 * s->alloc : 16;
			if (alloc > s->cap)
				alloc = s->cap;
			struct sticky *grown = realloc(s->e, alloc * sizeof(*grown));
			if (!grown)
				return -ENOMEM;
			s->e = grown;
			s->alloc = alloc;
		}
		e = &s->e[s->n++];
	} else {
		e = &s->e[s->next_evict++ % s->cap]; /* full: the oldest entries make room */
	}
	e->ev = *ev;
	snprintf(e->name, sizeof(e->name), "%s", ev->name ? ev->name : "");
	e->ev.name = NULL;
	return 0;
}

void rp_drain_forget(struct rp_drain *d, uint32_t pid)
{
	struct sticky_set *sets[] = {&d->names, &d->maps};
	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; i < sets[k]->n;)
			if (sets[k]->e[i].ev.pid == pid)
				sticky_remove(sets[k], i);
			else
				i++;
}

static bool replay_one(struct rp_drain *d, const struct sticky *e, uint64_t ts)
{
	struct rp_event ev = e->ev;
	ev.ts = ts;
	ev.name = e->name;
	return rp_chunk_builder_add(d->builder, &ev) == 0;
}

/* Open a new chunk with the remembered metadata, stamped at ts, in at
 * most half of the chunk so that events always find room.  Names come
 * first; mappings that do not fit are replayed first in the next chunk,
 * so over a few chunks every one is.  Returns whether everything fit. */
static bool replay_metadata(struct rp_drain *d, uint64_t ts)
{
	size_t keep = rp_chunk_builder_room(d->builder) / 2;
	for (size_t i = 0; i < d->names.n; i++)
		if (rp_chunk_builder_room(d->builder) < keep || !replay_one(d, &d->names.e[i], ts))
			return false;
	for (size_t k = 0; k < d->maps.n; k++) {
		size_t i = (d->maps_replayed + k) % d->maps.n;
		if (rp_chunk_builder_room(d->builder) < keep || !replay_one(d, &d->maps.e[i], ts)) {
			d->maps_replayed = i;
			return false;
		}
	}
	return true;
}

/* Add one event in host ns, sealing as often as the builder asks. */
static int add_event(struct rp_drain *d, const struct rp_event *ev, struct rp_err *err)
{
	bool remembered = is_metadata(ev) && remember(d, ev) == 0;
	for (int tries = 0;; tries++) {
		if (rp_chunk_builder_count(d->builder) == 0 && replay_metadata(d, ev->ts) && remembered)
			break; /* the replay included it */
		int rc = rp_chunk_builder_add(d->builder, ev);
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
	if (rc == 0 && !is_metadata(ev) && remember(d, ev) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory remembering a %s event",
				  rp_event_kind_name(ev->kind));
	return rc;
}

static uint64_t to_host_ns(const struct rp_drain *d, const struct rp_shmring *r, uint64_t t)
{
	if (rp_shmring_clock(r) == RP_SHM_CLOCK_TSC && d->have_calib)
		return rp_tsc_to_ns(&d->calib, t);
	return t;
}

static int take_record(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct rp_drain *d = ctx;
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
	if (rp_rec_to_event(r, rec, &ev, name) < 0) {
		d->st.corrupt_records++;
		return 0;
	}
	ev.ts = to_host_ns(d, r, ev.ts);
	if (ev.kind == RP_EV_GPU_ACTIVITY)
		ev.u.gpu.end = to_host_ns(d, r, ev.u.gpu.end);
	return add_event(d, &ev, d->poll_err);
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
	return 0;
}

/* Record drops the producer counted since we last looked as one event,
 * so they show up in the window they happened in. */
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
	d->st.producer_drops += ev.u.drops.count;
	p->dropped_seen = total;
	return add_event(d, &ev, err);
}

static long drain_producer(struct rp_drain *d, struct producer *p, struct rp_err *err)
{
	uint64_t corrupt = 0;
	d->poll_err = err;
	long n = rp_shmring_drain(p->ring, take_record, d, 0, &corrupt);
	d->st.corrupt_records += corrupt;
	if (n < 0)
		return n;
	int rc = record_drops(d, p, err);
	return rc < 0 ? rc : n;
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
	return rp_ringfile_sync(d->rf, false, err);
}

int rp_drain_reap(struct rp_drain *d, bool (*gone)(uint32_t pid, void *ctx), void *ctx)
{
	int reaped = 0;
	for (size_t i = 0; i < d->nproducers;) {
		struct producer *p = &d->producers[i];
		if (!gone(rp_shmring_pid(p->ring), ctx)) {
			i++;
			continue;
		}
		/* Take what the producer committed before it went away. */
		if (drain_producer(d, p, NULL) < 0) {
			i++;
			continue;
		}
		rp_drain_forget(d, rp_shmring_pid(p->ring));
		rp_shmring_close(p->ring);
		d->producers[i] = d->producers[--d->nproducers];
		reaped++;
	}
	return reaped;
}

void rp_drain_stats(const struct rp_drain *d, struct rp_drain_stats *st)
{
	*st = d->st;
	st->producers = (unsigned)d->nproducers;
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
	rp_drain_flush(d, NULL);
	for (size_t i = 0; i < d->nproducers; i++)
		rp_shmring_close(d->producers[i].ring);
	free(d->producers);
	rp_chunk_builder_free(d->builder);
	free(d->chunk_buf);
	free(d->names.e);
	free(d->maps.e);
	free(d);
}
