/* The producer client: the lifecycle of one producer ring, for
 * libringprof and in-workload collectors (a CUPTI injection library, a
 * runtime interposer).  It asks the daemon for a ring with a hello (device
 * name, thread name, clock), maps it, watches the consumer heartbeat, and
 * reconnects with back-off.  A ring whose daemon died stays in use (it
 * fills, then drops) and is offered to the next daemon, which drains it
 * from where the last one stopped (docs/api.md, "Producer client").
 *
 * One client serves one thread: the ring is single-producer.  The caller
 * writes records with the rp_shm_* functions into the ring these calls
 * hand out; all calls here are the slow path. */
#ifndef RINGPROF_PRODUCER_H
#define RINGPROF_PRODUCER_H

#include <stdint.h>

#include "err.h"
#include "shmring.h"

struct rp_producer;

struct rp_producer_opts {
	const char *device;      /* ring name: "host", "gpu0", ...; NULL: "host" */
	/* The device's stable id (a GPU UUID), printable ASCII, at most 63
	 * bytes; NULL or "": none.  One that does not fit is left out rather
	 * than cut into another id. */
	const char *device_uid;
	const char *socket;      /* the daemon's control socket; NULL: the default */
	uint32_t ring_size;      /* data bytes; 0: the daemon's default */
	/* 0: the daemon's choice of the host clocks (TSC or monotonic);
	 * RP_SHM_CLOCK_FOREIGN: timestamps in the caller's clock, with
	 * host CLOCK_MONOTONIC ns = ts + clock_offset_ns. */
	enum rp_shm_clock clock;
	int64_t clock_offset_ns;
};

/* A client, not yet connected.  -EINVAL: a device name or socket path
 * that cannot be right. */
RP_MUST_CHECK int rp_producer_new(const struct rp_producer_opts *opts, struct rp_producer **out,
		    struct rp_err *err);
/* Closes the ring (a daemon holding it drains what is left). */
void rp_producer_free(struct rp_producer *p);

/* The ring to write to, connecting when due: at once the first time, then
 * at most once a second while no daemon answers (longer for a daemon that
 * hangs).  NULL while there is none; a ring whose daemon is gone is still
 * returned.  A daemon that refuses says why on stderr, once per process
 * (RINGPROF_QUIET=1 silences it). */
struct rp_shmring *rp_producer_connect(struct rp_producer *p);
/* The heartbeat check, every few thousand records and when the ring is
 * full: a daemon that stopped draining for 2 s is taken as gone, and the
 * ring offered to the next one.  Returns the ring to write to, as
 * rp_producer_connect. */
struct rp_shmring *rp_producer_check(struct rp_producer *p);
/* When rp_producer_connect next tries the daemon, in CLOCK_MONOTONIC_COARSE
 * ns: a hot path without a ring skips calling it until then. */
uint64_t rp_producer_next_try_ns(const struct rp_producer *p);
/* Whether a live daemon drains the ring (as of the last check). */
bool rp_producer_connected(const struct rp_producer *p);

/* The thread name for later hellos ("" or NULL: the thread's comm). */
void rp_producer_set_thread_name(struct rp_producer *p, const char *name);
/* A foreign clock's new offset, for the ring and later hellos. */
void rp_producer_set_clock_offset(struct rp_producer *p, int64_t offset_ns);
/* Records dropped because a ring was full, over every ring it had. */
uint64_t rp_producer_dropped(const struct rp_producer *p);

#endif
