/* The daemon's device rings: one ring file and drain per device ("host"
 * always, "gpu0", "nc3", ... when a producer registers them), and the
 * ingest thread that drains every producer ring into them.
 *
 * The ingest thread is the only caller of each drain.  Other threads
 * attach producer rings, ask for a flush ("seal everything up to now")
 * and read stats through this module. */
#ifndef RINGPROF_RINGS_H
#define RINGPROF_RINGS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "collector.h"
#include "config.h"
#include "drain.h"
#include "err.h"
#include "ringfile.h"
#include "shmring.h"
#include "names.h"

/* Producers with corrupt records shown per device ring. */
#define RP_RING_CORRUPT_SHOWN 8
/* Producers attached to say their collector stood aside (hello.h
 * RP_HELLO_STOOD_ASIDE) shown per device ring. */
#define RP_RING_ASIDE_SHOWN 8

struct rp_stood_aside {
	uint32_t pid, tid;
	char thread[64];  /* the thread name the producer gave */
};

struct rp_ring_info {
	char device[RP_NAME_LEN];
	char path[PATH_MAX];
	uint64_t budget_bytes;
	struct rp_ringfile *rf;          /* for sessions: iterate and pin */
	struct rp_ringfile_stats file;
	struct rp_drain_stats drain;     /* as of the last ingest pass */
	/* the first producers attached now that wrote corrupt records */
	struct rp_drain_producer_stats corrupt[RP_RING_CORRUPT_SHOWN];
	unsigned ncorrupt;
	/* the first producers attached now whose collector stood aside */
	struct rp_stood_aside aside[RP_RING_ASIDE_SHOWN];
	unsigned naside;
};

/* Producer rings and what limited them (see [producers]). */
struct rp_producer_stats {
	unsigned rings;          /* attached now */
	uint64_t shm_bytes;      /* their shared memory, headers included */
	uint64_t refused;        /* rings refused: a [producers] limit, a device name */
	unsigned quarantined;    /* bad ring files set aside at start */
};

/* A collector inside the daemon (collectors/registry.c). */
struct rp_collector_info {
	char name[32];
	char state[16];         /* "running", "disabled" (could not start), "off" */
	char reason[512];       /* why it is not running, and the fix */
	uint64_t events;        /* handed to the ring */
	uint64_t lost;          /* lost before reaching the ring */
	/* its own values, named by value_names (NULL-terminated; NULL: none) */
	const char *const *value_names;
	uint64_t values[RP_COLLECTOR_MAX_VALUES];
	char detail[1024];      /* its own account, "" for none */
};

struct rp_rings;

/* Open (recovering) every ring file in cfg->state_dir, create the host
 * ring, start the collectors of the registry as configured (one that
 * cannot start is fatal only when it is required, such as the CPU sampler
 * with [sampler] enabled = true), and start the ingest thread. */
RP_MUST_CHECK int rp_rings_start(const struct rp_config *cfg, struct rp_rings **out,
		   struct rp_err *err);
/* Stop the ingest thread after a last flush, sync and close every ring. */
void rp_rings_stop(struct rp_rings *r);

/* Hand a producer ring (ownership passes on success only) to the ingest
 * thread, creating the device's ring file first when it is new.
 * device_uid: the device's stable id from the hello, "" for none; the
 * device ring keeps the first it is given (a later different one is
 * logged).  thread_name may be "".  own_tid: the ring's tid is numbered in the
 * daemon's pid namespace, so the ring is reaped when that thread exits
 * (else when its process does).  Refused, with a message naming the limit and its
 * key: a device not in the table (host, gpuN, tpuN, ncN, [ring.NAME]
 * sections), more than [producers] max_devices device rings, max_rings,
 * max_rings_per_process or max_shm. */
RP_MUST_CHECK int rp_rings_attach(struct rp_rings *r, const char *device, const char *device_uid,
		    struct rp_shmring *ring, bool own_tid, const char *thread_name,
		    struct rp_err *err);
/* Have the ingest thread show every event it takes in, on every device
 * ring, to fn (see rp_drain_set_observer) from its next pass on.  ctx must
 * outlive the rings. */
void rp_rings_set_observer(struct rp_rings *r, rp_drain_observer fn, void *ctx);
/* Seal everything producers committed up to now and wait for it to be
 * written, so that a window read includes it. */
RP_MUST_CHECK int rp_rings_flush(struct rp_rings *r, struct rp_err *err);

/* Sample at hz per CPU, or at [sampler] frequency when that is higher
 * (hz 0: at [sampler] frequency), from the ingest thread's next pass on;
 * waits for it: the set_sample_hz of every running collector that has
 * one.  When the sampler cannot be re-armed at that rate it keeps the one
 * it had and this returns why.  Without a running sampler it does
 * nothing. */
RP_MUST_CHECK int rp_rings_set_sampler_hz(struct rp_rings *r, unsigned hz, struct rp_err *err);

unsigned rp_rings_count(struct rp_rings *r);
/* Stats of device i (0 .. count-1); -ENOENT past the end. */
RP_MUST_CHECK int rp_rings_info(struct rp_rings *r, unsigned i, struct rp_ring_info *info);
void rp_rings_producer_stats(struct rp_rings *r, struct rp_producer_stats *st);
/* The producer stats, and corrupt records per producer, as Prometheus
 * text lines for /metrics. */
void rp_rings_producer_metrics(struct rp_rings *r, FILE *f);
/* Collector i (0 ..); -ENOENT past the end. */
RP_MUST_CHECK int rp_rings_collector(struct rp_rings *r, unsigned i, struct rp_collector_info *info);
/* Process pid is about to exit: each running collector's detach
 * (collector.h), which may take seconds.  names gets those that had
 * something of it, comma-separated (size bytes at most). */
RP_MUST_CHECK int rp_rings_detach(struct rp_rings *r, uint32_t pid, char *names, size_t size,
				  struct rp_err *err);
/* Pause or resume the running collector name (collector.h pause). */
RP_MUST_CHECK int rp_rings_collector_pause(struct rp_rings *r, const char *name, bool paused,
					   struct rp_err *err);

#endif
