/* Which snapshots a trigger may take: one per key (an alert's
 * fingerprint, a rule) within a cool-down, and at most max_per_hour in
 * any sliding hour, so that an alert storm cannot fill the disk.  Shared
 * by the Alertmanager endpoint and the built-in rules.
 *
 * Not thread-safe: each gate has one caller at a time. */
#ifndef RINGPROF_GATE_H
#define RINGPROF_GATE_H

#include <stdint.h>

#include "err.h"

enum rp_gate_verdict {
	RP_GATE_PASS = 0,
	RP_GATE_COOLDOWN,    /* the key took a snapshot less than cooldown ago */
	RP_GATE_RATE_LIMIT,  /* max_per_hour snapshots in the last hour */
	RP_GATE_NVERDICTS,
};

struct rp_gate;

RP_MUST_CHECK int rp_gate_new(uint64_t cooldown_ns, unsigned max_per_hour, struct rp_gate **out,
		struct rp_err *err);
void rp_gate_free(struct rp_gate *g);

/* The verdict for key at now_ns (a monotonic clock).  A pass is recorded:
 * it starts the key's cool-down and counts toward the hour; refusals
 * change nothing. */
enum rp_gate_verdict rp_gate_check(struct rp_gate *g, uint64_t key, uint64_t now_ns);

/* "cool-down", "rate limit" (the API's and the metrics' words). */
const char *rp_gate_verdict_name(enum rp_gate_verdict v);

#endif
