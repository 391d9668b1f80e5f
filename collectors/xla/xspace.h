/* Decoder of XSpace, the profile an XLA runtime's profiler server returns
 * (tensorflow.profiler.XSpace, upstream xplane.proto): planes (/host:CPU,
 * /device:TPU:0, /device:GPU:0, ...) of lines (threads, streams) of
 * events, whose names and stats hang off per-plane metadata tables.
 *
 * The input is untrusted (a workload's server): its size is bounded by
 * the caller, unpacking allocates from a budget, ids that resolve to
 * nothing give empty names, and times that overflow skip the event.
 * Unknown fields are skipped (they differ between XLA versions).
 *
 * Clock: the TSL profiler stamps events with CLOCK_REALTIME ns and, since
 * 2023, stores them relative to the session start, which the plane "Task
 * Environment" holds as stat profile_start_time.  The decoder adds that
 * start (when present) and subtracts the caller's wall offset
 * (CLOCK_REALTIME - CLOCK_MONOTONIC, rp_clock_wall_offset_ns()) to hand out
 * host-clock (CLOCK_MONOTONIC) times. */
#ifndef RINGPROF_XLA_XSPACE_H
#define RINGPROF_XLA_XSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* The largest XSpace the decoder accepts; unpacking may use at most
 * RP_XSPACE_MEMORY_FACTOR times the input in memory. */
#define RP_XSPACE_MAX_BYTES ((size_t)512 << 20)
#define RP_XSPACE_MEMORY_FACTOR 16

enum rp_xla_stat_type {
	RP_XLA_STAT_INT,
	RP_XLA_STAT_UINT,
	RP_XLA_STAT_DOUBLE,
	RP_XLA_STAT_STR,  /* str_value, bytes_value and ref_value (the name
			     of the referenced stat metadata) */
};

struct rp_xla_stat {
	const char *name;   /* "" when its metadata id is unknown */
	enum rp_xla_stat_type type;
	union {
		int64_t i;
		uint64_t u;
		double d;
		struct {
			const char *ptr; /* not NUL-terminated for bytes */
			size_t len;
		} str;
	} value;
};

/* The stats other layers look for by name, resolved for every event from
 * its own stats, then its metadata's.  A bit per stat in `has`. */
enum rp_xla_known {
	RP_XLA_HLO_OP,         /* string */
	RP_XLA_HLO_MODULE,     /* string */
	RP_XLA_PROGRAM_ID,     /* int */
	RP_XLA_FLOPS,          /* number */
	RP_XLA_BYTES_ACCESSED, /* number */
	RP_XLA_STEP_NUM,       /* int: StepTraceAnnotation's step */
	RP_XLA_GROUP_ID,       /* int: the step a device event belongs to */
	RP_XLA_KNOWN_COUNT
};

/* The stat's name in XSpace ("hlo_op", ...). */
const char *rp_xla_known_name(enum rp_xla_known k);

struct rp_xla_event {
	const char *plane;      /* "/host:CPU", "/device:GPU:0", ... */
	int64_t line_id;        /* thread id on host planes */
	const char *line_name;  /* display name, else name */
	const char *name;       /* the event metadata's name */
	uint64_t start_ns;      /* CLOCK_MONOTONIC */
	uint64_t duration_ns;
	uint32_t has;           /* 1u << enum rp_xla_known */
	const char *hlo_op;
	size_t hlo_op_len;
	const char *hlo_module;
	size_t hlo_module_len;
	int64_t program_id, step_num, group_id;
	double flops, bytes_accessed;
	const struct rp_xla_stat *stats; /* all of them, event's first */
	size_t nstats;
};

/* Called once per event; strings and stats live until it returns.  A
 * non-zero return stops the decoding, which returns that value. */
typedef int (*rp_xla_event_fn)(const struct rp_xla_event *ev, void *arg);

struct rp_xspace_counts {
	uint64_t planes, events;
	uint64_t skipped;        /* aggregated or out-of-range events */
	uint64_t errors;         /* XSpace.errors entries (server-side) */
	char first_error[160];   /* the first of them, truncated */
};

/* Decode one serialized XSpace of len bytes (at most RP_XSPACE_MAX_BYTES)
 * and call fn for each timed event.  wall_offset_ns is CLOCK_REALTIME -
 * CLOCK_MONOTONIC when the peer's clock was read.  Returns the number of
 * events delivered, or a negative errno (-EBADMSG: not an XSpace, -E2BIG:
 * too large, -ENOMEM: over the memory budget) with err filled.  counts
 * may be NULL. */
int64_t rp_xspace_decode(const uint8_t *buf, size_t len, int64_t wall_offset_ns,
			 rp_xla_event_fn fn, void *arg, struct rp_xspace_counts *counts,
			 struct rp_err *err);

#endif
