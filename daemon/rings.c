#include "rings.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "collector.h"
#include "hello.h"
#include "parse.h"
#include "safefs.h"
#include "names.h"

#define REAP_INTERVAL_NS 1000000000ull
/* After a round that took in no producer event and served no request,
 * the ingest thread waits twice as long as the time before, up to 4 poll
 * intervals or IDLE_WAIT_MAX_NS, whichever is less, but never less than
 * one poll interval (40 ms at the 10 ms default); the first round that
 * takes in a producer event goes back to poll_interval.  New producers,
 * flushes and rate changes signal the thread: they are served at once
 * whatever the wait.  What the longer wait risks:
 * - a producer ring waking up from idle is drained at most one such wait
 *   after its first event: a 1 MiB ring (the ring_size default) fills in
 *   40 ms past 26 MB/s (in 10 ms, past 105 MB/s), and only in that first
 *   wait; a full ring drops and counts.
 * - collectors on this thread: the wait ends when their due_ns says (the
 *   CPU sampler, whose samples do not end the back-off, before they can
 *   fill half of its BPF ring buffer; host metrics at their interval). */
#define IDLE_WAIT_MAX_NS 50000000ull
#define IDLE_WAIT_FACTOR 4

struct device {
	char name[RP_NAME_LEN];
	char path[PATH_MAX];
	/* Kind and index from the name table; the uid is the first a
	 * producer gave (ingest thread only once the device is published). */
	struct rp_device_identity id;
	char uid_warned[RP_DEVICE_UID_MAX + 1]; /* the other uid logged last */
	uint64_t budget;
	struct rp_ringfile *rf;
	struct rp_drain *drain;          /* ingest thread only */
	pthread_mutex_t stats_lock;
	struct rp_drain_stats stats;     /* published by the ingest thread */
	struct rp_drain_producer_stats corrupt[RP_RING_CORRUPT_SHOWN]; /* likewise */
	unsigned ncorrupt;
	/* The daemon's own producer rings attached (ingest thread only): not
	 * in the producers status shows, which are the workloads'. */
	unsigned own_rings;
	struct rp_rings *rings;
	/* Attached producers that stood aside, and their rings (guarded by
	 * stats_lock). */
	struct rp_stood_aside aside[RP_RING_ASIDE_SHOWN];
	const struct rp_shmring *aside_ring[RP_RING_ASIDE_SHOWN];
	unsigned naside;
};

struct pending {
	struct pending *next;
	struct device *dev;
	struct rp_shmring *ring;
	bool own;                        /* the daemon's (rp_collector_env) */
	char thread_name[64];
	char process_name[64];
	char device_uid[RP_DEVICE_UID_MAX + 1];
};

/* A collector of the registry as this module runs it. */
struct collector {
	const struct rp_collector *ops;
	void *state;                     /* NULL: not running; else ingest thread only */
	struct rp_emit emit;             /* into its device's drain */
	uint64_t error_logged;
	struct rp_collector_info info;   /* guarded by rp_rings.lock */
};

/* Producer rings attached now, by process, for the limits of [producers]. */
struct proc_rings {
	uint32_t pid;
	unsigned rings;
	bool own_tids;   /* its rings' tids are numbered in this pid namespace */
};

struct rp_rings {
	const struct rp_config *cfg;
	pthread_mutex_t quota_lock;      /* guards the producer accounting */
	struct proc_rings *procs;        /* producer_max_rings entries at most */
	unsigned nprocs;
	unsigned producer_rings;
	uint64_t producer_shm_bytes;
	uint64_t refused;                /* attaches refused: a limit, a device name */
	unsigned quarantined;            /* ring files set aside at start */
	struct rp_collector_env env;     /* what collectors are lent */
	struct collector *collectors;    /* the registry's, in its order */
	unsigned ncollectors;
	unsigned rate_collectors;        /* running ones with set_sample_hz */
	pthread_mutex_t devices_lock;    /* serialises device creation */
	struct device *devices[RP_MAX_DEVICES];
	atomic_uint ndevices;            /* entries below it are immutable */

	pthread_t thread;
	pthread_mutex_t lock;            /* guards everything below */
	pthread_cond_t wake;             /* to the ingest thread */
	pthread_cond_t served;           /* a flush or a rate change done, the last detach */
	struct pending *pending;
	uint64_t flush_requested, flush_done;
	int flush_status;
	/* The sampling rate asked for (rp_rings_set_sampler_hz) and how the
	 * last request went. */
	unsigned sample_hz_wanted;
	uint64_t hz_requested, hz_done;
	struct rp_err hz_err;
	bool stop;
	unsigned detaching;              /* rp_rings_detach calls in progress */
	rp_drain_observer observer;      /* handed to every drain by the ingest thread */
	void *observer_ctx;
};

/* Device names producers may have rings for: squatted names would
 * preallocate ring files that persist.  "host", gpuN, tpuN or ncN (the
 * name table, rp_device_identify, which also says what the ring holds)
 * with N up to [producers] device_index_max, or a name with a [ring.NAME]
 * section. */
#define DEVICE_NAMES_HELP "host, gpuN, tpuN or ncN"

static bool device_allowed(const struct rp_config *cfg, const char *name)
{
	for (unsigned i = 0; i < cfg->nrings; i++)
		if (!strcmp(cfg->rings[i].device, name))
			return true;
	struct rp_device_identity id;
	switch (rp_device_identify(name, &id)) {
	case RP_DEVICE_HOST:
		return true;
	case RP_DEVICE_GPU:
	case RP_DEVICE_TPU:
	case RP_DEVICE_NEURON_CORE:
		return id.index <= cfg->producer_device_index_max;
	default:
		return false;
	}
}

static int check_device_name(const struct rp_config *cfg, const char *name, struct rp_err *err)
{
	if (device_allowed(cfg, name))
		return 0;
	return rp_err_set(err, -EPERM, "device '%s' is not one ringprofd keeps a ring for: "
			  "use " DEVICE_NAMES_HELP " (N up to [producers] device_index_max = %u), "
			  "or give it a [ring.%s] section in the configuration",
			  name, cfg->producer_device_index_max, name);
}

static uint64_t ring_bytes(const struct rp_shmring *ring)
{
	return RP_SHM_HDR_SIZE + rp_shmring_capacity(ring);
}

static struct proc_rings *find_proc(struct rp_rings *r, uint32_t pid)
{
	for (unsigned i = 0; i < r->nprocs; i++)
		if (r->procs[i].pid == pid)
			return &r->procs[i];
	return NULL;
}

/* Count a producer ring against the limits of [producers], or say which
 * one it would pass. */
static int account_ring(struct rp_rings *r, const struct rp_shmring *ring, bool own_tid,
			struct rp_err *err)
{
	const struct rp_config *c = r->cfg;
	uint32_t pid = rp_shmring_pid(ring);
	uint64_t bytes = ring_bytes(ring);
	int rc = 0;
	pthread_mutex_lock(&r->quota_lock);
	struct proc_rings *p = find_proc(r, pid);
	if (r->producer_rings >= c->producer_max_rings)
		rc = rp_err_set(err, -EMFILE, "ringprofd holds %u producer rings, the most "
				"[producers] max_rings allows; retry when producers exit",
				r->producer_rings);
	else if (p && p->rings >= c->producer_max_rings_per_process)
		rc = rp_err_set(err, -EMFILE, "process %u holds %u producer rings (one per "
				"thread), the most [producers] max_rings_per_process allows",
				pid, p->rings);
	else if (bytes > c->producer_max_shm - r->producer_shm_bytes)
		rc = rp_err_set(err, -ENOMEM, "producer rings hold %llu MiB of shared memory; "
				"%llu MiB more would pass [producers] max_shm = %llu MiB",
				(unsigned long long)(r->producer_shm_bytes >> 20),
				(unsigned long long)(bytes >> 20),
				(unsigned long long)(c->producer_max_shm >> 20));
	if (rc == 0) {
		if (!p) {
			p = &r->procs[r->nprocs++];
			*p = (struct proc_rings){ .pid = pid, .own_tids = own_tid };
		}
		p->rings++;
		r->producer_rings++;
		r->producer_shm_bytes += bytes;
	}
	pthread_mutex_unlock(&r->quota_lock);
	return rc;
}

static void unaccount_ring(struct rp_rings *r, const struct rp_shmring *ring)
{
	pthread_mutex_lock(&r->quota_lock);
	struct proc_rings *p = find_proc(r, rp_shmring_pid(ring));
	if (p) {
		if (--p->rings == 0)
			*p = r->procs[--r->nprocs];
		r->producer_rings--;
		r->producer_shm_bytes -= ring_bytes(ring);
	}
	pthread_mutex_unlock(&r->quota_lock);
}

static void ring_detached(void *ctx, const struct rp_shmring *ring)
{
	struct device *d = ctx;
	unaccount_ring(d->rings, ring);
	pthread_mutex_lock(&d->stats_lock);
	for (unsigned i = 0; i < d->naside; i++)
		if (d->aside_ring[i] == ring) {
			d->naside--;
			d->aside[i] = d->aside[d->naside];
			d->aside_ring[i] = d->aside_ring[d->naside];
			break;
		}
	pthread_mutex_unlock(&d->stats_lock);
}

/* A producer whose thread name says its collector stood aside: shown by
 * status while its ring is attached. */
static void note_stood_aside(struct device *d, const struct rp_shmring *ring, const char *thread)
{
	size_t n = strlen(thread), k = strlen(RP_HELLO_STOOD_ASIDE);
	if (n < k || strcmp(thread + n - k, RP_HELLO_STOOD_ASIDE))
		return;
	pthread_mutex_lock(&d->stats_lock);
	if (d->naside < RP_RING_ASIDE_SHOWN) {
		struct rp_stood_aside *a = &d->aside[d->naside];
		a->pid = rp_shmring_pid(ring);
		a->tid = rp_shmring_tid(ring);
		snprintf(a->thread, sizeof(a->thread), "%s", thread);
		d->aside_ring[d->naside++] = ring;
	}
	pthread_mutex_unlock(&d->stats_lock);
}

/* The ring's device_info, repeated in every chunk: what any window of
 * the ring needs to say which device it holds. */
static int record_identity(struct device *d, struct rp_err *err)
{
	struct rp_event ev = {
		.kind = RP_EV_DEVICE_INFO, .ts = rp_clock_now_ns(), .name = d->id.uid,
		.u.device = { .kind = d->id.kind, .index = d->id.index },
	};
	return rp_drain_add_sticky(d->drain, &ev, err);
}

/* uid: the stable id the first producer gave, "" when none. */
static int open_device(struct rp_rings *r, const char *name, const char *uid,
		       struct device **out, struct rp_err *err)
{
	struct device *d = calloc(1, sizeof(*d));
	if (!d)
		return rp_err_set(err, -ENOMEM, "out of memory opening ring %s", name);
	snprintf(d->name, sizeof(d->name), "%s", name);
	(void)rp_device_identify(name, &d->id);
	snprintf(d->id.uid, sizeof(d->id.uid), "%s", uid);
	if ((size_t)snprintf(d->path, sizeof(d->path), "%s/%s.ring", r->cfg->state_dir, name) >=
	    sizeof(d->path)) {
		free(d);
		return rp_err_set(err, -ENAMETOOLONG, "state directory path too long: %s",
				  r->cfg->state_dir);
	}
	uint32_t slot_size;
	rp_config_ring(r->cfg, name, &d->budget, &slot_size);
	struct rp_ringfile_opts ro = {
		.device = name,
		.device_id = atomic_load(&r->ndevices),
		.budget_bytes = d->budget,
		.slot_size = slot_size,
		.max_age_ns = rp_config_ring_max_age(r->cfg, name),
	};
	int rc = rp_ringfile_open(d->path, &ro, &d->rf, err);
	if (rc < 0) {
		free(d);
		return rc;
	}
	struct rp_ringfile_stats st;
	rp_ringfile_stats(d->rf, &st);
	if (st.converted)
		fprintf(stderr, "ringprofd: ring %s: %s was a format version 1 ring file: its %llu "
			"chunks were converted to version 2, which replaced it\n", name, d->path,
			(unsigned long long)st.converted_chunks);
	struct rp_drain_opts dopts = { .seal_interval_ns = r->cfg->seal_interval_ns,
				       .on_detach = ring_detached, .detach_ctx = d };
	d->rings = r;
	rc = rp_drain_new(d->rf, &dopts, &d->drain, err);
	/* Not published yet: the drain is still this thread's. */
	if (rc == 0 && (rc = record_identity(d, err)) < 0)
		rp_drain_free(d->drain);
	if (rc < 0) {
		rp_ringfile_close(d->rf);
		free(d);
		return rc;
	}
	pthread_mutex_init(&d->stats_lock, NULL);
	*out = d;
	return 0;
}

static struct device *find_device(struct rp_rings *r, const char *name)
{
	unsigned n = atomic_load_explicit(&r->ndevices, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (strcmp(r->devices[i]->name, name) == 0)
			return r->devices[i];
	return NULL;
}

/* Find or create the device; creation is published only once complete.
 * max: how many devices there may be with it (a producer's may not pass
 * [producers] max_devices). */
static int get_device(struct rp_rings *r, const char *name, const char *uid, unsigned max,
		      struct device **out, struct rp_err *err)
{
	int rc = rp_check_name(name, 63, "device name", err);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&r->devices_lock);
	struct device *d = find_device(r, name);
	rc = 0;
	if (!d) {
		unsigned n = atomic_load(&r->ndevices);
		if (n >= max)
			rc = rp_err_set(err, -ENOSPC, "too many device rings (%u): cannot add '%s'; "
					"raise [producers] max_devices", n, name);
		else if ((rc = open_device(r, name, uid, &d, err)) == 0) {
			r->devices[n] = d;
			atomic_store_explicit(&r->ndevices, n + 1, memory_order_release);
			fprintf(stderr, "ringprofd: ring %s: %s (%llu MiB)\n", name, d->path,
				(unsigned long long)(d->budget >> 20));
		}
	}
	pthread_mutex_unlock(&r->devices_lock);
	*out = d;
	return rc;
}

/* A ring goes with its process, or with its thread (libringprof: one ring
 * per thread, dropped when the thread exits) where its tid is one this
 * daemon can check: a containerised producer's tid is numbered in its own
 * pid namespace. */
static bool producer_gone(const struct rp_shmring *ring, void *ctx)
{
	struct rp_rings *r = ctx;
	uint32_t pid = rp_shmring_pid(ring), tid = rp_shmring_tid(ring);
	if (pid == 0)
		return false;
	if (kill((pid_t)pid, 0) < 0 && errno == ESRCH)
		return true;
	if (tid == 0 || tid == pid)
		return false;
	pthread_mutex_lock(&r->quota_lock);
	struct proc_rings *p = find_proc(r, pid);
	bool own_tids = p && p->own_tids;
	pthread_mutex_unlock(&r->quota_lock);
	return own_tids && syscall(SYS_tgkill, (pid_t)pid, (pid_t)tid, 0) < 0 && errno == ESRCH;
}

/* A ring keeps the first uid it is given: its recorded history is of that
 * device.  Another uid for the same device name is a producer that
 * disagrees about what gpuN is (another numbering, CUDA_VISIBLE_DEVICES):
 * its events still go to the ring, and the log says so. */
static void note_device_uid(struct device *d, const char *uid, uint32_t pid)
{
	if (!uid[0] || strcmp(uid, d->id.uid) == 0)
		return;
	if (d->id.uid[0]) {
		/* One line per other uid, not one per producer thread. */
		if (strcmp(uid, d->uid_warned) == 0)
			return;
		snprintf(d->uid_warned, sizeof(d->uid_warned), "%s", uid);
		fprintf(stderr, "ringprofd: ring %s: producer pid %u names device uid %s, but the "
			"ring holds device %s: its events go to the ring all the same; give each "
			"device its own ring name\n", d->name, pid, uid, d->id.uid);
		return;
	}
	snprintf(d->id.uid, sizeof(d->id.uid), "%s", uid);
	struct rp_err err = { 0 };
	if (record_identity(d, &err) < 0)
		fprintf(stderr, "ringprofd: ring %s: %s\n", d->name, err.msg);
}

static void attach_pending(struct rp_rings *r, struct pending *p)
{
	uint64_t now = rp_clock_now_ns();
	uint32_t pid = rp_shmring_pid(p->ring), tid = rp_shmring_tid(p->ring);
	note_device_uid(p->dev, p->device_uid, pid);
	if (p->process_name[0]) {
		struct rp_event ev = { .kind = RP_EV_PROCESS_NAME, .ts = now, .pid = pid,
				       .tid = pid, .name = p->process_name };
		(void)rp_drain_add(p->dev->drain, &ev, NULL); /* a name lost: the drain counts it */
	}
	if (p->thread_name[0]) {
		struct rp_event ev = { .kind = RP_EV_THREAD_NAME, .ts = now, .pid = pid,
				       .tid = tid, .name = p->thread_name };
		(void)rp_drain_add(p->dev->drain, &ev, NULL); /* a name lost: the drain counts it */
	}
	if (rp_drain_attach(p->dev->drain, p->ring) < 0) {
		if (!p->own)
			unaccount_ring(r, p->ring);
		rp_shmring_close(p->ring);
	} else {
		p->dev->own_rings += p->own;
		note_stood_aside(p->dev, p->ring, p->thread_name);
	}
}

static int flush_all(struct rp_rings *r, unsigned n)
{
	int status = 0;
	for (unsigned i = 0; i < n; i++) {
		struct rp_err err = { 0 };
		int rc = rp_drain_flush(r->devices[i]->drain, &err);
		if (rc < 0) {
			fprintf(stderr, "ringprofd: ring %s: %s\n", r->devices[i]->name, err.msg);
			status = rc;
		}
	}
	return status;
}

static int emit_event(void *ctx, const struct rp_event *ev)
{
	return rp_drain_add(ctx, ev, NULL);
}

static int emit_sticky(void *ctx, const struct rp_event *ev)
{
	return rp_drain_add_sticky(ctx, ev, NULL);
}

static void emit_forget(void *ctx, uint32_t pid)
{
	rp_drain_forget(ctx, pid);
}

/* Stats of a collector for other threads. */
static void publish_collector(struct rp_rings *r, struct collector *c)
{
	struct rp_collector_stats st = { 0 };
	if (c->state && c->ops->stats)
		c->ops->stats(c->state, &st);
	pthread_mutex_lock(&r->lock);
	c->info.events = st.events;
	c->info.lost = st.lost;
	memcpy(c->info.values, st.values, sizeof(st.values));
	memcpy(c->info.detail, st.detail, sizeof(st.detail));
	pthread_mutex_unlock(&r->lock);
}

/* Every running collector on this thread hands what is due to its
 * device's drain; a failing one is logged once a minute at most.
 * rate_request: a session's sampling rate hz to apply (see set_sample_hz),
 * its failure to hz_err. */
static void poll_collectors(struct rp_rings *r, bool rate_request, unsigned hz,
			    struct rp_err *hz_err)
{
	for (unsigned i = 0; i < r->ncollectors; i++) {
		struct collector *c = &r->collectors[i];
		const struct rp_collector *ops = c->ops;
		if (!c->state)
			continue;
		if (ops->poll) {
			uint64_t now = rp_clock_now_ns();
			struct rp_err err = { 0 };
			if (ops->poll(c->state, now, &c->emit, &err) < 0 &&
			    now - c->error_logged > 60000000000ull) {
				fprintf(stderr, "ringprofd: %s\n", err.msg);
				c->error_logged = now;
			}
		}
		if (rate_request && ops->set_sample_hz)
			(void)ops->set_sample_hz(c->state, hz, &c->emit, hz_err);
		publish_collector(r, c);
	}
}

/* A producer ring of the daemon's own (see rp_collector_env): attached
 * like a producer's, not counted against [producers]. */
static int attach_ring(struct rp_rings *r, const char *device, const char *device_uid,
		       struct rp_shmring *ring, bool own_tid, const char *thread_name, bool accounted,
		       struct rp_err *err);

static int own_producer_ring(void *ctx, const char *device, size_t data_size,
			     struct rp_shmring **out, struct rp_err *err)
{
	struct rp_rings *r = ctx;
	struct rp_shmring *drained, *written = NULL;
	int rc = rp_shmring_create(data_size, 0, 0, RP_SHM_CLOCK_MONOTONIC, &drained, err);
	if (rc < 0)
		return rc;
	rc = rp_shmring_map(rp_shmring_fd(drained), &written, err);
	if (rc == 0)
		rc = attach_ring(r, device, "", drained, false, "", false, err);
	if (rc < 0) {
		rp_shmring_close(written);
		rp_shmring_close(drained);
		return rc;
	}
	*out = written;
	return 0;
}

/* Start every collector of the registry that the configuration does not
 * turn off.  One that cannot start is logged and shown disabled in
 * status, or stops the daemon when it is required. */
static int start_collectors(struct rp_rings *r, struct rp_err *err)
{
	r->collectors = calloc(rp_ncollectors, sizeof(*r->collectors));
	if (!r->collectors)
		return rp_err_set(err, -ENOMEM, "out of memory");
	r->env = (struct rp_collector_env){ .cfg = r->cfg, .proc_root = "/proc",
					    .producer_ring = own_producer_ring, .ctx = r };
	for (unsigned i = 0; i < rp_ncollectors; i++) {
		const struct rp_collector *ops = rp_collectors[i];
		struct collector *c = &r->collectors[r->ncollectors++];
		struct rp_collector_info *info = &c->info;
		c->ops = ops;
		snprintf(info->name, sizeof(info->name), "%s", ops->name);
		info->value_names = ops->values;
		const char *off = ops->off ? ops->off(r->cfg) : NULL;
		if (off) {
			snprintf(info->state, sizeof(info->state), "off");
			snprintf(info->reason, sizeof(info->reason), "%s", off);
			continue;
		}
		struct rp_err why = { 0 };
		struct device *d;
		int rc = get_device(r, ops->device, "", RP_MAX_DEVICES, &d, &why);
		if (rc == 0)
			rc = ops->start(&r->env, &c->state, &why);
		if (rc == 0) {
			snprintf(info->state, sizeof(info->state), "running");
			c->emit = (struct rp_emit){ .event = emit_event, .sticky = emit_sticky,
						    .forget = emit_forget, .ctx = d->drain };
			r->rate_collectors += ops->set_sample_hz != NULL;
			publish_collector(r, c);
			continue;
		}
		c->state = NULL;
		snprintf(info->state, sizeof(info->state), "disabled");
		snprintf(info->reason, sizeof(info->reason), "%s", why.msg);
		if (ops->required && ops->required(r->cfg))
			return rp_err_set(err, rc, "%s: %s", ops->title, why.msg);
		fprintf(stderr, "ringprofd: %s disabled: %s\n", ops->title, why.msg);
	}
	return 0;
}

/* The wait after a round, the last one having been wait_ns (lock held):
 * back to poll_interval after a busy round, else twice as long up to
 * IDLE_WAIT_MAX_NS, but no later than a collector is due. */
static uint64_t next_wait(const struct rp_rings *r, uint64_t wait_ns, bool busy)
{
	uint64_t poll = r->cfg->poll_interval_ns;
	if (busy)
		return poll;
	uint64_t max = IDLE_WAIT_FACTOR * poll < IDLE_WAIT_MAX_NS ? IDLE_WAIT_FACTOR * poll
								 : IDLE_WAIT_MAX_NS;
	if (max < poll)
		max = poll;
	wait_ns = 2 * wait_ns < max ? 2 * wait_ns : max;
	uint64_t now = rp_clock_now_ns();
	for (unsigned i = 0; i < r->ncollectors && wait_ns > poll; i++) {
		const struct collector *c = &r->collectors[i];
		if (!c->state || !c->ops->due_ns)
			continue;
		uint64_t at = c->ops->due_ns(c->state);
		uint64_t due = at > now ? at - now : 0;
		if (due < wait_ns)
			wait_ns = due > poll ? due : poll;
	}
	return wait_ns;
}

/* The drain's stats for other threads, with the first producers that
 * wrote corrupt records. */
static void publish_stats(struct device *d)
{
	struct rp_drain_producer_stats batch[64], corrupt[RP_RING_CORRUPT_SHOWN];
	unsigned ncorrupt = 0;
	struct rp_drain_stats st;
	rp_drain_stats(d->drain, &st);
	st.producers -= d->own_rings;
	for (size_t from = 0, n; st.corrupt_records && ncorrupt < RP_RING_CORRUPT_SHOWN &&
	     (n = rp_drain_producers(d->drain, from, batch, 64)) > 0; from += n)
		for (size_t i = 0; i < n && ncorrupt < RP_RING_CORRUPT_SHOWN; i++)
			if (batch[i].corrupt)
				corrupt[ncorrupt++] = batch[i];
	pthread_mutex_lock(&d->stats_lock);
	d->stats = st;
	memcpy(d->corrupt, corrupt, ncorrupt * sizeof(corrupt[0]));
	d->ncorrupt = ncorrupt;
	pthread_mutex_unlock(&d->stats_lock);
}

static void *ingest_main(void *arg)
{
	struct rp_rings *r = arg;
	uint64_t last_reap = rp_clock_now_ns();
	uint64_t error_logged = 0;
	uint64_t wait_ns = r->cfg->poll_interval_ns;
	pthread_mutex_lock(&r->lock);
	while (!r->stop) {
		struct pending *pending = r->pending;
		r->pending = NULL;
		/* Only requests not served yet: the counters only grow. */
		uint64_t flush_wanted = r->flush_requested > r->flush_done ? r->flush_requested : 0;
		uint64_t hz_request = r->hz_requested > r->hz_done ? r->hz_requested : 0;
		unsigned want_hz = r->sample_hz_wanted;
		rp_drain_observer observer = r->observer;
		void *observer_ctx = r->observer_ctx;
		bool busy = pending || flush_wanted || hz_request;
		pthread_mutex_unlock(&r->lock);

		while (pending) {
			struct pending *next = pending->next;
			attach_pending(r, pending);
			free(pending);
			pending = next;
		}
		unsigned n = atomic_load_explicit(&r->ndevices, memory_order_acquire);
		uint64_t now = rp_clock_now_ns();
		bool reap = now - last_reap >= REAP_INTERVAL_NS;
		/* Drains are this thread's alone, so the observer is set here. */
		for (unsigned i = 0; i < n; i++)
			rp_drain_set_observer(r->devices[i]->drain, observer, observer_ctx);
		struct rp_err hz_err = { 0 };
		poll_collectors(r, hz_request, want_hz, &hz_err);
		for (unsigned i = 0; i < n; i++) {
			struct device *d = r->devices[i];
			struct rp_err err = { 0 };
			long taken = rp_drain_poll(d->drain, &err);
			busy |= taken > 0;
			/* A failing ring (disk error) must not flood the log. */
			if (taken < 0 && now - error_logged > 10000000000ull) {
				fprintf(stderr, "ringprofd: ring %s: %s\n", d->name, err.msg);
				error_logged = now;
			}
			if (reap)
				(void)rp_drain_reap(d->drain, producer_gone, r);
		}
		if (reap)
			last_reap = now;
		int flush_status = 0;
		if (flush_wanted)
			flush_status = flush_all(r, n);
		for (unsigned i = 0; i < n; i++) {
			struct device *d = r->devices[i];
			publish_stats(d);
		}

		pthread_mutex_lock(&r->lock);
		if (flush_wanted > r->flush_done) {
			r->flush_done = flush_wanted;
			r->flush_status = flush_status;
			pthread_cond_broadcast(&r->served);
		}
		if (hz_request > r->hz_done) {
			r->hz_done = hz_request;
			r->hz_err = hz_err;
			pthread_cond_broadcast(&r->served);
		}
		if (!r->stop && !r->pending && r->flush_requested == r->flush_done &&
		    r->hz_requested == r->hz_done) {
			wait_ns = next_wait(r, wait_ns, busy);
			rp_cond_wait_ns(&r->wake, &r->lock, wait_ns);
		}
	}
	pthread_mutex_unlock(&r->lock);
	flush_all(r, atomic_load(&r->ndevices));
	return NULL;
}

static bool is_ring_file(const char *name, char *device, size_t len)
{
	size_t n = strlen(name);
	if (n <= 5 || strcmp(name + n - 5, ".ring") != 0 || n - 5 >= len)
		return false;
	memcpy(device, name, n - 5);
	device[n - 5] = 0;
	return rp_check_name(device, 63, "device name", NULL) == 0;
}

/* Errors of the host rather than of a ring file: the file is left as it
 * is (another ringprofd holds it, the disk is full, ...). */
static bool host_error(int rc)
{
	switch (-rc) {
	case EBUSY: case EACCES: case EPERM: case EROFS: case ENOSPC: case EDQUOT:
	case ENOMEM: case EMFILE: case ENFILE:
		return true;
	default:
		return false;
	}
}

/* Set a bad ring file aside as "<file>.bad-<unix time>[-N]" (the link
 * itself, for a link), so that the daemon starts with a fresh ring and the
 * file stays for a post-mortem. */
static void quarantine(struct rp_rings *r, int dirfd, const char *file, const struct rp_err *why)
{
	char aside[NAME_MAX + 1];
	long now = (long)time(NULL);
	int rc = -1;
	for (int n = 0; n < 100 && rc < 0; n++) {
		int len = n ? snprintf(aside, sizeof(aside), "%s.bad-%ld-%d", file, now, n)
			    : snprintf(aside, sizeof(aside), "%s.bad-%ld", file, now);
		if (len < 0 || (size_t)len >= sizeof(aside))
			break;
		rc = renameat2(dirfd, file, dirfd, aside, RENAME_NOREPLACE);
		if (rc < 0 && errno != EEXIST)
			break;
	}
	if (rc < 0) {
		fprintf(stderr, "ringprofd: %s/%s: %s; cannot set it aside: %s\n",
			r->cfg->state_dir, file, why->msg, strerror(errno));
		return;
	}
	fprintf(stderr, "ringprofd: %s; set aside as %s/%s\n", why->msg,
		r->cfg->state_dir, aside);
	pthread_mutex_lock(&r->quota_lock);
	r->quarantined++;
	pthread_mutex_unlock(&r->quota_lock);
}

/* Reopen the ring of an earlier run in file so its history stays
 * available.  One bad file must not stop the daemon: a file that is not a
 * ring of an allowed device, or that cannot be opened as one, is set aside
 * (then an allowed device starts a fresh ring). */
static void recover_ring(struct rp_rings *r, int dirfd, const char *file)
{
	char device[RP_NAME_LEN];
	if (!is_ring_file(file, device, sizeof(device)))
		return;
	struct rp_err err = { 0 };
	struct device *d;
	bool allowed = device_allowed(r->cfg, device);
	int rc = allowed ? get_device(r, device, "", RP_MAX_DEVICES, &d, &err)
			 : rp_err_set(&err, -EPERM, "%s/%s is not the ring of a device ringprofd "
				      "keeps (" DEVICE_NAMES_HELP ", [ring.NAME] sections)",
				      r->cfg->state_dir, file);
	if (rc == 0)
		return;
	if (allowed && host_error(rc)) {
		fprintf(stderr, "ringprofd: ring %s: %s\n", device, err.msg);
		return;
	}
	quarantine(r, dirfd, file, &err);
	if (allowed && get_device(r, device, "", RP_MAX_DEVICES, &d, &err) < 0)
		fprintf(stderr, "ringprofd: ring %s: %s\n", device, err.msg);
}

static int recover_rings(struct rp_rings *r, struct rp_err *err)
{
	DIR *dir = opendir(r->cfg->state_dir);
	if (!dir)
		return rp_err_set(err, -errno, "cannot read state directory %s: %s",
				  r->cfg->state_dir, strerror(errno));
	/* Names first: quarantining renames entries under readdir. */
	char (*names)[NAME_MAX + 1] = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(dir))) {
		size_t len = strlen(e->d_name);
		if (len <= 5 || strcmp(e->d_name + len - 5, ".ring") != 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			void *grown = realloc(names, cap * sizeof(*names));
			if (!grown) {
				rc = rp_err_set(err, -ENOMEM, "out of memory");
				break;
			}
			names = grown;
		}
		snprintf(names[n++], sizeof(names[0]), "%s", e->d_name);
	}
	for (size_t i = 0; rc == 0 && i < n; i++)
		recover_ring(r, dirfd(dir), names[i]);
	free(names);
	closedir(dir);
	return rc;
}

/* Everything rp_rings_start set up, the ingest thread not running (never
 * started, or joined): collectors first (a collector's thread writes to
 * its producer ring until stopped), then the rings, synced. */
static void free_rings(struct rp_rings *r)
{
	for (unsigned i = 0; i < r->ncollectors; i++)
		if (r->collectors[i].state)
			r->collectors[i].ops->stop(r->collectors[i].state);
	free(r->collectors);
	for (struct pending *p = r->pending, *next; p; p = next) {
		next = p->next;
		rp_shmring_close(p->ring);
		free(p);
	}
	for (unsigned i = 0; i < atomic_load(&r->ndevices); i++) {
		struct device *d = r->devices[i];
		rp_drain_free(d->drain);
		struct rp_err err = { 0 };
		if (rp_ringfile_sync(d->rf, true, &err) < 0)
			fprintf(stderr, "ringprofd: ring %s: %s\n", d->name, err.msg);
		rp_ringfile_close(d->rf);
		pthread_mutex_destroy(&d->stats_lock);
		free(d);
	}
	free(r->procs);
	free(r);
}

int rp_rings_start(const struct rp_config *cfg, struct rp_rings **out, struct rp_err *err)
{
	struct rp_rings *r = calloc(1, sizeof(*r));
	if (!r)
		return rp_err_set(err, -ENOMEM, "out of memory");
	r->cfg = cfg;
	pthread_mutex_init(&r->quota_lock, NULL);
	pthread_mutex_init(&r->devices_lock, NULL);
	pthread_mutex_init(&r->lock, NULL);
	rp_cond_init_monotonic(&r->wake);
	pthread_cond_init(&r->served, NULL);
	struct device *host;
	r->procs = calloc(cfg->producer_max_rings, sizeof(*r->procs));
	int rc = r->procs ? rp_safefs_open_root(cfg->state_dir, 0750, true, err)
			  : rp_err_set(err, -ENOMEM, "out of memory");
	if (rc >= 0)
		rc = close(rc);
	if (rc == 0)
		rc = recover_rings(r, err);
	if (rc == 0)
		rc = get_device(r, "host", "", RP_MAX_DEVICES, &host, err);
	if (rc == 0 && strcmp(r->devices[0]->name, "host") != 0) {
		/* Status lists the host ring first. */
		for (unsigned i = 1; i < atomic_load(&r->ndevices); i++)
			if (r->devices[i] == host) {
				r->devices[i] = r->devices[0];
				r->devices[0] = host;
			}
	}
	if (rc == 0)
		rc = start_collectors(r, err);
	if (rc == 0 && (rc = -pthread_create(&r->thread, NULL, ingest_main, r)) < 0)
		rp_err_set(err, rc, "cannot start the ingest thread: %s", strerror(-rc));
	if (rc < 0) {
		free_rings(r);
		return rc;
	}
	*out = r;
	return 0;
}

void rp_rings_stop(struct rp_rings *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_signal(&r->wake);
	while (r->detaching)
		pthread_cond_wait(&r->served, &r->lock);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	free_rings(r);
}

static void read_comm(uint32_t pid, char *out, size_t len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	out[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(out, (int)len, f))
		out[strcspn(out, "\n")] = 0;
	fclose(f);
}

/* accounted: a workload's ring, counted against the [producers] limits;
 * else one of the daemon's own. */
static int attach_ring(struct rp_rings *r, const char *device, const char *device_uid,
		       struct rp_shmring *ring, bool own_tid, const char *thread_name, bool accounted,
		       struct rp_err *err)
{
	struct device *d = NULL;
	unsigned max_devices = accounted ? r->cfg->producer_max_devices : RP_MAX_DEVICES;
	int rc = check_device_name(r->cfg, device, err);
	if (rc == 0 && accounted)
		rc = account_ring(r, ring, own_tid, err);
	if (rc == 0 && (rc = get_device(r, device, device_uid, max_devices, &d, err)) < 0 &&
	    accounted)
		unaccount_ring(r, ring);
	struct pending *p = rc == 0 ? calloc(1, sizeof(*p)) : NULL;
	if (rc == 0 && !p) {
		if (accounted)
			unaccount_ring(r, ring);
		rc = rp_err_set(err, -ENOMEM, "out of memory");
	}
	if (rc < 0) {
		pthread_mutex_lock(&r->quota_lock);
		r->refused += accounted;
		pthread_mutex_unlock(&r->quota_lock);
		return rc;
	}
	p->dev = d;
	p->ring = ring;
	p->own = !accounted;
	snprintf(p->thread_name, sizeof(p->thread_name), "%s", thread_name ? thread_name : "");
	snprintf(p->device_uid, sizeof(p->device_uid), "%s", device_uid ? device_uid : "");
	read_comm(rp_shmring_pid(ring), p->process_name, sizeof(p->process_name));
	pthread_mutex_lock(&r->lock);
	p->next = r->pending;
	r->pending = p;
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

int rp_rings_attach(struct rp_rings *r, const char *device, const char *device_uid,
		    struct rp_shmring *ring, bool own_tid, const char *thread_name,
		    struct rp_err *err)
{
	return attach_ring(r, device, device_uid, ring, own_tid, thread_name, true, err);
}

void rp_rings_set_observer(struct rp_rings *r, rp_drain_observer fn, void *ctx)
{
	pthread_mutex_lock(&r->lock);
	r->observer = fn;
	r->observer_ctx = ctx;
	pthread_mutex_unlock(&r->lock);
}

int rp_rings_flush(struct rp_rings *r, struct rp_err *err)
{
	pthread_mutex_lock(&r->lock);
	/* What collectors hold back goes into their producer rings first,
	 * which the seal below drains.  A collector that fails is logged:
	 * the seal of everything else goes on. */
	for (unsigned i = 0; !r->stop && i < r->ncollectors; i++) {
		const struct collector *c = &r->collectors[i];
		struct rp_err why = { 0 };
		if (c->ops->flush && c->state && c->ops->flush(c->state, &why) < 0)
			fprintf(stderr, "ringprofd: %s: %s\n", c->ops->title, why.msg);
	}
	if (r->stop) {
		pthread_mutex_unlock(&r->lock);
		return rp_err_set(err, -ESHUTDOWN, "ringprofd is shutting down");
	}
	uint64_t mine = ++r->flush_requested;
	pthread_cond_signal(&r->wake);
	while (r->flush_done < mine)
		pthread_cond_wait(&r->served, &r->lock);
	int rc = r->flush_status;
	pthread_mutex_unlock(&r->lock);
	if (rc < 0)
		return rp_err_set(err, rc, "sealing the rings failed: %s (see the daemon log)",
				  strerror(-rc));
	return 0;
}

int rp_rings_set_sampler_hz(struct rp_rings *r, unsigned hz, struct rp_err *err)
{
	if (!r->rate_collectors) /* set before the ingest thread started; never changes */
		return 0;
	pthread_mutex_lock(&r->lock);
	if (r->stop) {
		pthread_mutex_unlock(&r->lock);
		return rp_err_set(err, -ESHUTDOWN, "ringprofd is shutting down");
	}
	r->sample_hz_wanted = hz;
	uint64_t mine = ++r->hz_requested;
	pthread_cond_signal(&r->wake);
	while (r->hz_done < mine)
		pthread_cond_wait(&r->served, &r->lock);
	struct rp_err result = r->hz_err;
	pthread_mutex_unlock(&r->lock);
	if (result.code < 0 && err)
		*err = result;
	return result.code < 0 ? result.code : 0;
}

unsigned rp_rings_count(struct rp_rings *r)
{
	return atomic_load_explicit(&r->ndevices, memory_order_acquire);
}

int rp_rings_info(struct rp_rings *r, unsigned i, struct rp_ring_info *info)
{
	if (i >= rp_rings_count(r))
		return -ENOENT;
	struct device *d = r->devices[i];
	snprintf(info->device, sizeof(info->device), "%s", d->name);
	snprintf(info->path, sizeof(info->path), "%s", d->path);
	info->budget_bytes = d->budget;
	info->rf = d->rf;
	rp_ringfile_stats(d->rf, &info->file);
	pthread_mutex_lock(&d->stats_lock);
	info->drain = d->stats;
	memcpy(info->corrupt, d->corrupt, d->ncorrupt * sizeof(d->corrupt[0]));
	info->ncorrupt = d->ncorrupt;
	memcpy(info->aside, d->aside, d->naside * sizeof(d->aside[0]));
	info->naside = d->naside;
	pthread_mutex_unlock(&d->stats_lock);
	return 0;
}

void rp_rings_producer_stats(struct rp_rings *r, struct rp_producer_stats *st)
{
	pthread_mutex_lock(&r->quota_lock);
	*st = (struct rp_producer_stats){
		.rings = r->producer_rings,
		.shm_bytes = r->producer_shm_bytes,
		.refused = r->refused,
		.quarantined = r->quarantined,
	};
	pthread_mutex_unlock(&r->quota_lock);
}

int rp_rings_collector(struct rp_rings *r, unsigned i, struct rp_collector_info *info)
{
	if (i >= r->ncollectors)
		return -ENOENT;
	pthread_mutex_lock(&r->lock);
	*info = r->collectors[i].info;
	pthread_mutex_unlock(&r->lock);
	return 0;
}

int rp_rings_collector_pause(struct rp_rings *r, const char *name, bool paused,
			     struct rp_err *err)
{
	int rc = rp_err_set(err, -ENOENT, "no collector %s: `ringprof status` lists them", name);
	pthread_mutex_lock(&r->lock);
	for (unsigned i = 0; i < r->ncollectors; i++) {
		const struct collector *c = &r->collectors[i];
		if (strcmp(c->ops->name, name))
			continue;
		if (!c->ops->pause)
			rc = rp_err_set(err, -EINVAL, "collector %s cannot be paused", name);
		else if (!c->state)
			rc = rp_err_set(err, -EINVAL, "collector %s is not running (%s: %s)", name,
					c->info.state, c->info.reason);
		else
			rc = c->ops->pause(c->state, paused, err);
	}
	pthread_mutex_unlock(&r->lock);
	return rc;
}

int rp_rings_detach(struct rp_rings *r, uint32_t pid, char *names, size_t size,
		    struct rp_err *err)
{
	/* Without the lock: a detach waits for a peer for seconds, which the
	 * ingest thread must not.  The collectors' table and states do not
	 * change while the daemon runs, and stop waits for the count. */
	pthread_mutex_lock(&r->lock);
	bool stopping = r->stop;
	r->detaching += !stopping;
	pthread_mutex_unlock(&r->lock);
	if (stopping)
		return rp_err_set(err, -ESHUTDOWN, "ringprofd is shutting down");
	size_t used = 0;
	names[0] = 0;
	for (unsigned i = 0; i < r->ncollectors; i++) {
		const struct collector *c = &r->collectors[i];
		struct rp_err why = { 0 };
		int rc = c->ops->detach && c->state ? c->ops->detach(c->state, pid, &why) : 0;
		if (rc < 0)
			fprintf(stderr, "ringprofd: %s: process %u: %s\n", c->ops->title, pid, why.msg);
		if (rc > 0 && used < size) {
			int n = snprintf(names + used, size - used, "%s%s", used ? "," : "",
					 c->ops->name);
			used += n > 0 ? (size_t)n : 0;
		}
	}
	pthread_mutex_lock(&r->lock);
	if (!--r->detaching)
		pthread_cond_broadcast(&r->served);
	pthread_mutex_unlock(&r->lock);
	return 0;
}

void rp_rings_producer_metrics(struct rp_rings *r, FILE *f)
{
	struct rp_producer_stats st;
	rp_rings_producer_stats(r, &st);
	static const struct {
		const char *name, *type, *help;
	} metrics[] = {
		{ "ringprof_producer_rings", "gauge", "Producer rings attached now." },
		{ "ringprof_producer_shm_bytes", "gauge", "Shared memory of the producer rings attached now." },
		{ "ringprof_producer_refused_total", "counter", "Producer hellos refused by a [producers] limit or an unknown device." },
		{ "ringprof_ring_files_quarantined_total", "counter", "Bad ring files set aside at start." },
	};
	double v[] = { st.rings, (double)st.shm_bytes, (double)st.refused, st.quarantined };
	for (size_t m = 0; m < sizeof(metrics) / sizeof(metrics[0]); m++)
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", metrics[m].name, metrics[m].help,
			metrics[m].name, metrics[m].type, metrics[m].name, v[m]);
	fprintf(f, "# HELP ringprof_producer_corrupt_records_total Records discarded as impossible, "
		   "by producer (the first %d with any, per device).\n"
		   "# TYPE ringprof_producer_corrupt_records_total counter\n", RP_RING_CORRUPT_SHOWN);
	struct rp_ring_info info;
	for (unsigned i = 0; rp_rings_info(r, i, &info) == 0; i++)
		for (unsigned k = 0; k < info.ncorrupt; k++)
			fprintf(f, "ringprof_producer_corrupt_records_total{device=\"%s\",pid=\"%u\","
				   "tid=\"%u\"} %llu\n", info.device, info.corrupt[k].pid,
				info.corrupt[k].tid, (unsigned long long)info.corrupt[k].corrupt);
}
