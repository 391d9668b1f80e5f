/* The consumer pipeline of one device ring: drain producer rings, convert
 * their clocks to host ns, encode events into chunks and append sealed
 * chunks to the device's ring file.
 *
 * A drain is single-threaded: one thread (the device's consumer) calls
 * every function here.  Other threads that want "everything up to now"
 * sealed ask that thread to call rp_drain_flush. */
#ifndef RINGPROF_DRAIN_H
#define RINGPROF_DRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "err.h"
#include "event.h"
#include "ringfile.h"
#include "shmring.h"

/* Called on the drain's thread for each producer ring detached by
 * rp_drain_reap, just before it is closed. */
typedef void (*rp_drain_detach_fn)(void *ctx, const struct rp_shmring *ring);

struct rp_drain_opts {
	uint64_t seal_interval_ns; /* seal a chunk once it is this old; 0: 1 s */
	rp_drain_detach_fn on_detach; /* may be NULL */
	void *detach_ctx;
};

struct rp_drain_stats {
	uint64_t events;          /* events encoded */
	uint64_t chunks;          /* chunks sealed */
	uint64_t raw_bytes;       /* encoded bytes before compression */
	uint64_t comp_bytes;      /* chunk bytes handed to the ring file */
	uint64_t producer_drops;  /* drops reported by producer rings (saturates at INT64_MAX) */
	uint64_t corrupt_records; /* records discarded as impossible: bad
				     layout, a timestamp far from now, a drop
				     count past 2^32 */
	unsigned producers;       /* producer rings attached now */
	unsigned processes_seen;  /* distinct producer pids since start (saturates
				     at RP_DRAIN_PIDS_SEEN_MAX) */
};
#define RP_DRAIN_PIDS_SEEN_MAX 4096

struct rp_drain;

/* The drain writes into rf (borrowed: it must outlive the drain). */
RP_MUST_CHECK int rp_drain_new(struct rp_ringfile *rf, const struct rp_drain_opts *opts,
		 struct rp_drain **out, struct rp_err *err);
/* Seals what is pending, syncs the ring file and frees the drain (the
 * attached producer rings are closed). */
void rp_drain_free(struct rp_drain *d);

/* Attach a producer ring; the drain takes ownership. */
RP_MUST_CHECK int rp_drain_attach(struct rp_drain *d, struct rp_shmring *ring);
/* Detach (and close) rings whose producer is gone, after draining them
 * one last time; `gone` decides from the ring (its pid, its tid).  The
 * names and mappings of a process are forgotten with its last ring.
 * Returns how many were detached. */
RP_MUST_CHECK int rp_drain_reap(struct rp_drain *d, bool (*gone)(const struct rp_shmring *ring, void *ctx),
		  void *ctx);

/* Add an event produced inside this process (ts in host ns).  Process
 * and thread names, command lines and mappings are also remembered: every
 * later chunk holding an event of a process gets its command line, name
 * and mappings, and the name of each of its threads with events there,
 * ahead of the first such event, so that any window can name threads and
 * symbolize stacks; a mapping replaces the ones of its process it
 * overlaps.  Bounded: 1024 names, 4096 mappings (the oldest make room);
 * the repeats take at most half of a chunk: when they do not fit, the
 * chunk is sealed and the event opens the next one, and a process whose
 * metadata alone passes half a chunk gets what fits, the rest first the
 * next time.  Events a split seal carries over get theirs after them, as
 * far as it fits. */
RP_MUST_CHECK int rp_drain_add(struct rp_drain *d, const struct rp_event *ev,
		 struct rp_err *err);
/* Add ev and repeat it at the start of every later chunk, whatever its
 * events, until an event of the same kind, pid, tid and name replaces it
 * (e.g. the sampling frequency).  Not for CPU samples (-EINVAL). */
RP_MUST_CHECK int rp_drain_add_sticky(struct rp_drain *d, const struct rp_event *ev,
			struct rp_err *err);
/* Stop repeating the names, mappings and sticky events of process pid
 * (it exited: chunks holding its events already hold them). */
void rp_drain_forget(struct rp_drain *d, uint32_t pid);

/* Drain every attached ring, seal full or old chunks, append them.
 * Producer records are checked first: each event carries its ring's pid
 * (the one its creator proved, whatever a record says), and a record
 * stamped more than an hour before or a minute after now is corrupt.
 * Returns the number of events taken in, or a negative errno. */
long rp_drain_poll(struct rp_drain *d, struct rp_err *err);

/* Force-seal: drain, seal the open chunk even if small, and wait until
 * every chunk is written, so a window read includes everything up to
 * now. */
RP_MUST_CHECK int rp_drain_flush(struct rp_drain *d, struct rp_err *err);

void rp_drain_stats(const struct rp_drain *d, struct rp_drain_stats *st);

/* One attached producer ring, as its drain sees it. */
struct rp_drain_producer_stats {
	uint32_t pid, tid;
	uint64_t dropped;   /* saturates at INT64_MAX */
	uint64_t corrupt;
};
/* Copy the stats of attached producers from, from + 1, ... into out (at
 * most max); returns how many. */
size_t rp_drain_producers(const struct rp_drain *d, size_t from,
			  struct rp_drain_producer_stats *out, size_t max);

/* Called on the drain's thread with every event as it is added, in host
 * ns (names borrowed for the call only).  It must be quick and must not
 * call back into the drain: it runs inside the ingest loop.  fn NULL
 * removes it. */
typedef void (*rp_drain_observer)(void *ctx, const struct rp_event *ev);
void rp_drain_set_observer(struct rp_drain *d, rp_drain_observer fn, void *ctx);

#endif
