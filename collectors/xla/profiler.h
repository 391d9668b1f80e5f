/* Client of tensorflow.ProfilerService, the profiler server of XLA
 * runtimes (jax.profiler.start_server, torch_xla, TensorFlow): one
 * profiling window per Profile call with the XSpace inline (emit_xspace),
 * and the continuous-profiling calls.  Transport and errors: grpc.h. */
#ifndef RINGPROF_XLA_PROFILER_H
#define RINGPROF_XLA_PROFILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct rp_xla_profile_opts {
	uint64_t duration_ms;
	uint64_t max_events;          /* 0: the server's default */
	unsigned host_tracer_level;   /* 0 off .. 3 verbose */
	unsigned device_tracer_level; /* 0 off, 1 on */
	unsigned python_tracer_level; /* 0 off, 1 on */
	const char *session_id;       /* NULL: "ringprof" */
};

/* ringprof's defaults: a 1 s window, host level 1, device on, Python off. */
void rp_xla_profile_opts_default(struct rp_xla_profile_opts *o);

struct rp_xla_window {
	uint8_t *xspace;        /* serialized XSpace (xspace.h decodes it) */
	size_t len;
	bool empty_trace;       /* the server says it recorded nothing */
	int64_t wall_offset_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC on arrival */
};

/* Profile for o->duration_ms and return the window.  timeout_ms bounds the
 * whole call and must exceed the duration; max_bytes caps the response. */
RP_MUST_CHECK int rp_xla_profile(const char *addr, const struct rp_xla_profile_opts *o, unsigned timeout_ms,
		   size_t max_bytes, struct rp_xla_window *out, struct rp_err *err);

/* Continuous profiling: start it, then GetSnapshot returns what was
 * recorded since the start or the last snapshot.  -ENOSYS when the server
 * lacks the method. */
RP_MUST_CHECK int rp_xla_start_continuous(const char *addr, const struct rp_xla_profile_opts *o,
			    unsigned timeout_ms, struct rp_err *err);
RP_MUST_CHECK int rp_xla_get_snapshot(const char *addr, unsigned timeout_ms, size_t max_bytes,
			struct rp_xla_window *out, struct rp_err *err);
RP_MUST_CHECK int rp_xla_stop_continuous(const char *addr, unsigned timeout_ms, struct rp_err *err);

void rp_xla_window_free(struct rp_xla_window *w);

#endif
