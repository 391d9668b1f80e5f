/* The producer socket: workload threads (libringprof, device shims) ask
 * for a shared-memory ring here and get its memfd back (docs/api.md,
 * "Producer socket").  One thread serves every connection, non-blocking:
 * a peer that connects and says nothing holds one of a bounded number of
 * slots (in total and per uid) for 2 s at most, and never delays others. */
#ifndef RINGPROF_PRODUCERS_H
#define RINGPROF_PRODUCERS_H

#include "config.h"
#include "err.h"
#include "rings.h"

struct rp_producers;

/* Listen on "<cfg->socket>.producers" (mode 0660). */
RP_MUST_CHECK int rp_producers_start(const struct rp_config *cfg, struct rp_rings *rings,
		       struct rp_producers **out, struct rp_err *err);
void rp_producers_stop(struct rp_producers *p);

#endif
