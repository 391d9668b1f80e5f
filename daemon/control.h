/* What the control API does: status, snapshots, start/stop sessions and
 * metrics over the daemon's rings.  Owns the open sessions and the thread
 * that keeps copying their chunks and ends captures on time. */
#ifndef RINGPROF_CONTROL_H
#define RINGPROF_CONTROL_H

#include "api.h"
#include "config.h"
#include "err.h"
#include "rings.h"
#include "rules.h"

struct rp_control;

/* rules (borrowed, may be NULL): their firings become snapshots, taken
 * by the session thread once each window has ended, and their range
 * histograms go into /metrics. */
RP_MUST_CHECK int rp_control_new(const struct rp_config *cfg, struct rp_rings *rings, struct rp_rules *rules,
		   struct rp_control **out, struct rp_err *err);
/* Close every open session (complete, window ending now) and free. */
void rp_control_free(struct rp_control *c);

/* The watchdog's check of the session thread (struct rp_notify_check,
 * ctx the struct rp_control *): 0 once it completed a pass over the open
 * sessions, -ETIMEDOUT when none within timeout_ns. */
RP_MUST_CHECK int rp_control_alive(void *ctx, uint64_t timeout_ns, struct rp_err *err);

/* A snapshot of a window from every ring, kept in the log directory like
 * any other, with its XSpace (the exporter's <host>.xplane.pb) written
 * into it and read back for serving. */
struct rp_xspace_req {
	uint64_t start_ns, end_ns; /* host clock; an end in the future is cut to now */
	const char *source;        /* in the manifest: who asked */
	const char *reason;
	size_t max_bytes;          /* a larger XSpace: -EFBIG (the session stays) */
};
/* *xspace: malloc'ed, the caller frees.  Thread-safe. */
RP_MUST_CHECK int rp_control_xspace(struct rp_control *c, const struct rp_xspace_req *req,
				    uint8_t **xspace, size_t *len, struct rp_err *err);

/* The rp_api_ops to serve with a struct rp_control * as context. */
extern const struct rp_api_ops rp_control_ops;

#endif
