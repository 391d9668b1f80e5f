/* The contract between ringprofd and a collector that runs inside it.
 *
 * A collector is a const ops table in a folder of its own under
 * collectors/, listed once in collectors/registry.c.  ringprofd starts
 * every collector in the registry, polls those that run on its ingest
 * thread, shows their stats in `ringprof status` and /metrics, and stops
 * them; it names none of them.
 *
 * Two kinds:
 * - on the ingest thread (poll set): poll hands events to emit, which
 *   writes them into the drain of the collector's device.  Never block.
 * - on a thread of its own (poll NULL: a blocking client, a decode loop):
 *   it must not touch drains; it asks env->producer_ring for a
 *   shared-memory ring, writes with rp_shm_*, and the ingest thread drains
 *   that ring like any producer's. */
#ifndef RINGPROF_COLLECTOR_H
#define RINGPROF_COLLECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"
#include "event.h"
#include "shmring.h"

/* Where a collector on the ingest thread hands its events: the drain of
 * its device.  Only during poll and set_sample_hz. */
struct rp_emit {
	rp_event_fn event;
	/* Metadata repeated at the start of every chunk (rp_drain_add_sticky):
	 * what a reader of any one chunk needs, such as a sampling rate. */
	rp_event_fn sticky;
	/* Process pid exited: its metadata need not be repeated any more. */
	void (*forget)(void *ctx, uint32_t pid);
	void *ctx;
};

/* What ringprofd lends a collector at start; valid until its stop. */
struct rp_collector_env {
	const struct rp_config *cfg;
	const char *proc_root;   /* "/proc" */
	/* A producer ring of data_size bytes (a power of two, 4 KiB ..) into
	 * the ring of device, host clock, pid 0 (host-wide events, never
	 * reaped), drained by the ingest thread.  Not counted against the
	 * [producers] limits, which guard against workloads.  The caller
	 * writes to it from its own thread and closes it after that thread
	 * stopped. */
	int (*producer_ring)(void *ctx, const char *device, size_t data_size,
			     struct rp_shmring **out, struct rp_err *err);
	void *ctx;
};

/* Collector-specific values in the stats, named by rp_collector.values. */
#define RP_COLLECTOR_MAX_VALUES 5

struct rp_collector_stats {
	uint64_t events;     /* handed to the ring */
	uint64_t lost;       /* lost before reaching it */
	uint64_t values[RP_COLLECTOR_MAX_VALUES];
	/* Optional: what it is doing, in words, for status ("detail"): a
	 * collector of several peers says how each one fares. */
	char detail[1024];
};

struct rp_collector {
	const char *name;      /* in status and /metrics: "cpu_sampler" */
	const char *title;     /* in log lines: "CPU sampler" */
	const char *device;    /* the ring it feeds: "host" */
	const char *section;   /* its configuration section: "sampler" */
	/* Names of the values in its stats, NULL-terminated (NULL: none);
	 * status shows each as a field of the collector. */
	const char *const *values;

	/* Optional: when the configuration turns it off, the key that does
	 * ("[host_metrics] enabled = false"); NULL when on.  Status shows it
	 * "off" and start is not called. */
	const char *(*off)(const struct rp_config *cfg);
	/* Optional: whether failing to start stops the daemon (default no). */
	bool (*required)(const struct rp_config *cfg);
	/* 0 with *state set: running.  A negative errno: it cannot run here,
	 * why says why and the fix; the daemon runs on without it unless
	 * required. */
	int (*start)(const struct rp_collector_env *env, void **state, struct rp_err *why);
	/* Optional, ingest thread: when poll next needs to run (host clock
	 * ns); the ingest thread's idle wait ends then at the latest. */
	uint64_t (*due_ns)(void *state);
	/* Optional, ingest thread, every round: hand what is due to emit.  A
	 * negative errno with err: logged once a minute at most. */
	int (*poll)(void *state, uint64_t now_ns, const struct rp_emit *emit, struct rp_err *err);
	/* Optional, ingest thread, right after poll: an open session wants CPU
	 * samples at hz at least (0: none does any more).  On failure the
	 * collector keeps its rate and err says why. */
	int (*set_sample_hz)(void *state, unsigned hz, const struct rp_emit *emit,
			     struct rp_err *err);
	/* Ingest thread after each round (thread-safe for a collector with a
	 * thread of its own). */
	void (*stats)(void *state, struct rp_collector_stats *st);
	/* Optional, any thread (thread-safe): stop recording until resumed,
	 * releasing what others may want (POST /v1/collectors/NAME/pause and
	 * /resume). */
	int (*pause)(void *state, bool paused, struct rp_err *err);
	/* Optional, any thread (thread-safe): a snapshot or a session's end
	 * is about to seal the rings; hand them what the collector holds for
	 * later (a device buffer decoded every second), returning once it is
	 * in its producer rings.  Bounded: a few hundred ms at most. */
	int (*flush)(void *state, struct rp_err *err);
	/* Optional, any thread (thread-safe): process pid is about to exit and
	 * says so (POST /v1/xla/endpoints/PID/detach, which ringprof.xla
	 * sends at exit): take from it now what the collector would take later
	 * (a peer's last window), then let go of it.  1 when the collector had
	 * something of pid, 0 when not.  Bounded by a call's deadline: seconds
	 * at most. */
	int (*detach)(void *state, uint32_t pid, struct rp_err *err);
	void (*stop)(void *state);
};

/* The registry (collectors/registry.c), in the order status lists it. */
extern const struct rp_collector *const rp_collectors[];
extern const unsigned rp_ncollectors;

#endif
