/* ProfilerService requests and responses (see profiler.h), encoded with
 * protobuf-c from proto/profiler_service.proto. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "grpc.h"
#include "pballoc.h"
#include "profiler.h"
#include "profiler_service.pb-c.h"

#define SERVICE "/tensorflow.ProfilerService/"
/* The tool whose data is an XSpace, for servers that answer with
 * tool_data instead of the inline field. */
#define XSPACE_TOOL "xplane.pb"
/* A response holds a handful of fields around one large bytes field:
 * twice its size bounds what decoding it may allocate. */
#define RESPONSE_MEMORY_FACTOR 2

void rp_xla_profile_opts_default(struct rp_xla_profile_opts *o)
{
	*o = (struct rp_xla_profile_opts){
		.duration_ms = 1000,
		.host_tracer_level = 1,
		.device_tracer_level = 1,
		.python_tracer_level = 0,
	};
}

void rp_xla_window_free(struct rp_xla_window *w)
{
	free(w->xspace);
	*w = (struct rp_xla_window){0};
}

/* Encode msg, call method, hand back the response bytes. */
static int call(const char *addr, const char *method, const ProtobufCMessage *msg,
		unsigned timeout_ms, size_t max_bytes, uint8_t **resp, size_t *resp_len,
		struct rp_err *err)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *req = malloc(len ? len : 1);
	if (!req)
		return rp_err_set(err, -ENOMEM, "out of memory");
	protobuf_c_message_pack(msg, req);
	char path[96];
	snprintf(path, sizeof(path), SERVICE "%s", method);
	int r = rp_grpc_unary(addr, path, req, len, timeout_ms, max_bytes, resp, resp_len, err);
	free(req);
	return r;
}

/* Take the XSpace out of a ProfileResponse. */
static int window_from_response(const uint8_t *buf, size_t len, const char *addr,
				struct rp_xla_window *out, struct rp_err *err)
{
	struct rp_pb_arena arena;
	rp_pb_arena_init(&arena, len * RESPONSE_MEMORY_FACTOR + (4u << 20));
	Tensorflow__ProfileResponse *resp = tensorflow__profile_response__unpack(&arena.alloc,
										 len, buf);
	if (!resp) {
		rp_pb_arena_free(&arena);
		return rp_err_set(err, -EBADMSG, "%s answered with %zu bytes that are not a "
				  "ProfileResponse", addr, len);
	}
	const ProtobufCBinaryData *xs = &resp->xspace;
	for (size_t i = 0; !xs->len && i < resp->n_tool_data; i++)
		if (resp->tool_data[i]->name && !strcmp(resp->tool_data[i]->name, XSPACE_TOOL))
			xs = &resp->tool_data[i]->data;
	int r = 0;
	*out = (struct rp_xla_window){
		.empty_trace = resp->empty_trace,
		.wall_offset_ns = rp_clock_wall_offset_ns(),
		.len = xs->len,
	};
	if (xs->len && !(out->xspace = malloc(xs->len)))
		r = rp_err_set(err, -ENOMEM, "out of memory for a %zu-byte XSpace", xs->len);
	else if (xs->len)
		memcpy(out->xspace, xs->data, xs->len);
	else if (!resp->empty_trace)
		r = rp_err_set(err, -EBADMSG, "%s answered without an XSpace (neither the xspace "
			       "field nor tool_data " XSPACE_TOOL ")", addr);
	rp_pb_arena_free(&arena);
	if (r)
		rp_xla_window_free(out);
	return r;
}

static int window_call(const char *addr, const char *method, const ProtobufCMessage *msg,
		       unsigned timeout_ms, size_t max_bytes, struct rp_xla_window *out,
		       struct rp_err *err)
{
	*out = (struct rp_xla_window){0};
	uint8_t *resp;
	size_t len;
	int r = call(addr, method, msg, timeout_ms, max_bytes, &resp, &len, err);
	if (r)
		return r;
	r = window_from_response(resp, len, addr, out, err);
	free(resp);
	return r;
}

/* The request both Profile and StartContinuousProfiling take; opts is
 * the caller's storage for its options. */
static void profile_request(const struct rp_xla_profile_opts *o, Tensorflow__ProfileRequest *req,
			    Tensorflow__ProfileOptions *opts)
{
	tensorflow__profile_options__init(opts);
	opts->version = 1;
	opts->host_tracer_level = o->host_tracer_level;
	opts->device_tracer_level = o->device_tracer_level;
	opts->python_tracer_level = o->python_tracer_level;
	opts->duration_ms = o->duration_ms;
	tensorflow__profile_request__init(req);
	req->duration_ms = o->duration_ms;
	req->max_events = o->max_events;
	req->opts = opts;
	req->session_id = (char *)(o->session_id ? o->session_id : "ringprof");
	req->emit_xspace = true;
}

int rp_xla_profile(const char *addr, const struct rp_xla_profile_opts *o, unsigned timeout_ms,
		   size_t max_bytes, struct rp_xla_window *out, struct rp_err *err)
{
	Tensorflow__ProfileRequest req;
	Tensorflow__ProfileOptions opts;
	profile_request(o, &req, &opts);
	return window_call(addr, "Profile", &req.base, timeout_ms, max_bytes, out, err);
}

int rp_xla_get_snapshot(const char *addr, unsigned timeout_ms, size_t max_bytes,
			struct rp_xla_window *out, struct rp_err *err)
{
	Tensorflow__GetSnapshotRequest req;
	tensorflow__get_snapshot_request__init(&req);
	return window_call(addr, "GetSnapshot", &req.base, timeout_ms, max_bytes, out, err);
}

/* Methods whose response carries nothing: only the status matters. */
static int empty_call(const char *addr, const char *method, const ProtobufCMessage *msg,
		      unsigned timeout_ms, struct rp_err *err)
{
	uint8_t *resp;
	size_t len;
	int r = call(addr, method, msg, timeout_ms, 1u << 16, &resp, &len, err);
	free(resp);
	return r;
}

int rp_xla_start_continuous(const char *addr, const struct rp_xla_profile_opts *o,
			    unsigned timeout_ms, struct rp_err *err)
{
	Tensorflow__ProfileRequest req;
	Tensorflow__ProfileOptions opts;
	profile_request(o, &req, &opts);
	return empty_call(addr, "StartContinuousProfiling", &req.base, timeout_ms, err);
}

int rp_xla_stop_continuous(const char *addr, unsigned timeout_ms, struct rp_err *err)
{
	Tensorflow__StopContinuousProfilingRequest req;
	tensorflow__stop_continuous_profiling_request__init(&req);
	return empty_call(addr, "StopContinuousProfiling", &req.base, timeout_ms, err);
}
