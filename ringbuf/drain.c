#include "drain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk.h"

#define DEFAULT_SEAL_INTERVAL_NS 1000000000ull
#define CALIBRATION_REFRESH_NS 1000000000ull
#define MAX_NAMES 1024

/* A process or thread name, repeated at the start of every chunk. */
struct name_entry {
	uint8_t kind;
	uint32_t pid, tid;
	char name[RP_NAME_MAX + 1];
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

	/* Names are recorded once, when a thread starts; repeating them in
	 * every chunk keeps any window (and so any snapshot) able to name
	 * its threads. */
	struct name_entry *names;
	size_t nnames, next_evict;
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
	d->names = malloc(MAX_NAMES * sizeof(*d->names));
	int rc = d->chunk_buf && d->names ? rp_chunk_builder_new(rst.device_id, d->chunk_cap, &d->builder)
			      : -ENOMEM;
	if (rc < 0) {
		free(d->chunk_buf);
		free(d->names);
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
	return 0;
}

static bool is_name_event(const struct rp_event *ev)
{
	return ev->kind == RP_EV_PROCESS_NAME || ev->kind == RP_EV_THREAD_NAME;
}

static void remember_name(struct rp_drain *d, const struct rp_event *ev)
{
	struct name_entry *e = NULL;
	for (size_t i = 0; i < d->nnames && !e; i++)
		if (d->names[i].kind == ev->kind && d->names[i].pid == ev->pid &&
		    d->names[i].tid == ev->tid)
			e = &d->names[i];
	if (!e && d->nnames < MAX_NAMES)
		e = &d->names[d->nnames++];
	if (!e) /* full: the oldest entries make room */
		e = &d->names[d->next_evict++ % MAX_NAMES];
	*e = (struct name_entry){ .kind = ev->kind, .pid = ev->pid, .tid = ev->tid };
	snprintf(e->name, sizeof(e->name), "%s", ev->name ? ev->name : "");
}

static void forget_names(struct rp_drain *d, uint32_t pid)
{
	for (size_t i = 0; i < d->nnames;)
		if (d->names[i].pid == pid)
			d->names[i] = d->names[--d->nnames];
		else
			i++;
}

/* Open a new chunk with every known name, stamped at ts. */
static void replay_names(struct rp_drain *d, uint64_t ts)
{
	for (size_t i = 0; i < d->nnames; i++) {
		const struct name_entry *e = &d->names[i];
		struct rp_event ev = { .kind = e->kind, .ts = ts, .pid = e->pid, .tid = e->tid,
				       .name = e->name };
		if (rp_chunk_builder_add(d->builder, &ev) < 0)
			break; /* a chunk too small for all names keeps what fits */
	}
}

/* Add one event in host ns, sealing as often as the builder asks. */
static int add_event(struct rp_drain *d, const struct rp_event *ev, struct rp_err *err)
{
	bool name = is_name_event(ev);
	if (name)
		remember_name(d, ev);
	for (int tries = 0;; tries++) {
		if (rp_chunk_builder_count(d->builder) == 0) {
			replay_names(d, ev->ts);
			if (name)
				break; /* the replay included it */
		}
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
	return 0;
}

int rp_drain_add(struct rp_drain *d, const struct rp_event *ev, struct rp_err *err)
{
	return add_event(d, ev, err);
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
		forget_names(d, rp_shmring_pid(p->ring));
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
	free(d->names);
	free(d);
}
