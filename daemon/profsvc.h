/* XProf's side of the profiler protocol: ringprofd serves
 * tensorflow.ProfilerService (gRPC over cleartext HTTP/2, nghttp2's server
 * session) so that XProf's CAPTURE PROFILE and its Python client capture
 * from the rings.  Profile and GetSnapshot answer with the XSpace of a
 * window (tool_data "xplane.pb", and ProfileResponse.xspace when asked);
 * the continuous-profiling calls and Terminate are accepted (ringprof is
 * always on); anything else is UNIMPLEMENTED.
 *
 * One thread runs the event loop; each Profile/GetSnapshot waits for its
 * window and writes it on a worker thread of its own (a few at a time).
 * Peers are untrusted and unauthenticated: connections, request size,
 * the time to send a request and the response size are all bounded. */
#ifndef RINGPROF_PROFSVC_H
#define RINGPROF_PROFSVC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Produces the XSpace of [start_ns, end_ns] (host clock; the end has
 * passed): 0 and *buf (malloc'ed) or a negative errno with err set. */
typedef int (*rp_profsvc_window_fn)(void *ctx, uint64_t start_ns, uint64_t end_ns,
				    const char *reason, uint8_t **buf, size_t *len,
				    struct rp_err *err);

/* The largest XSpace served (in memory while it is sent); a longer
 * window stays in the log directory. */
#define RP_PROFSVC_MAX_XSPACE ((size_t)256 << 20)

struct rp_profsvc_opts {
	const char *listen;          /* "host:port", "[v6]:port" */
	bool allow_unauthenticated;  /* else only a loopback address is served */
	uint64_t snapshot_ns;        /* GetSnapshot's window: the last snapshot_ns */
	uint64_t max_duration_ns;    /* longest Profile window accepted */
	uint64_t request_timeout_ns; /* a connection without a complete request is closed */
	rp_profsvc_window_fn window;
	void *ctx;
};

struct rp_profsvc;

/* Binds and starts the thread.  -EACCES for a non-loopback address
 * without allow_unauthenticated (the message names the key). */
RP_MUST_CHECK int rp_profsvc_start(const struct rp_profsvc_opts *o, struct rp_profsvc **out,
				   struct rp_err *err);
/* Stops the loop, cancels waiting windows and joins every thread.
 * NULL: nothing. */
void rp_profsvc_stop(struct rp_profsvc *s);

#endif
