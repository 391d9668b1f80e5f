/* The control API: HTTP/1.1 + JSON (libmicrohttpd + jansson) on a Unix
 * socket and optionally TCP with a bearer token.  This module parses and
 * validates requests, calls the daemon through rp_api_ops, and turns their
 * results into responses.  Contract: docs/api.md. */
#ifndef RINGPROF_API_H
#define RINGPROF_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "err.h"
#include "names.h"

#define RP_API_BODY_MAX (64 * 1024)

struct rp_alert_batch; /* alerts.h */

/* Looking at one job: the processes whose events a session keeps (its
 * "filter" in the manifest; none: every process), by pid and by cgroup
 * (see job.h).  Fields "pids" and "cgroup" of a snapshot, a session's
 * start and its stop. */
#define RP_API_PIDS_MAX 64
#define RP_API_CGROUP_LEN 256
struct rp_job_filter {
	uint32_t pids[RP_API_PIDS_MAX];
	unsigned npids;
	char cgroup[RP_API_CGROUP_LEN]; /* "" none; below the cgroup2 mount */
};

struct rp_snapshot_req {
	uint64_t last_ns;          /* 0: the daemon's default */
	bool has_end;
	int64_t end_wall_ns;       /* window end, wall clock; checked not in the future */
	char name[RP_NAME_LEN];    /* "" = generated id */
	char run[RP_NAME_LEN];     /* "" = default run */
	char reason[256];
	char source[32];           /* "api", or X-Ringprof-Client: cli, library, python */
	struct rp_job_filter filter;
};

struct rp_session_req {
	uint64_t duration_ns;      /* 0: open until stopped; else a capture */
	unsigned cpu_sample_hz;    /* 0: the configured rate; else 1..RP_CPU_SAMPLE_HZ_MAX */
	char name[RP_NAME_LEN];
	char run[RP_NAME_LEN];
	char reason[256];
	char source[32];
	struct rp_job_filter filter;
};

/* POST /v1/sessions/ID/stop: more of the job, added to what the session's
 * start named. */
struct rp_stop_req {
	struct rp_job_filter filter;
};

/* Implemented by the daemon.  Each returns 0 and a new JSON reference in
 * *out (the API takes ownership), or a negative errno with err filled:
 * -EINVAL 400, -ENOENT 404, -EEXIST/-EALREADY 409, -E2BIG 413,
 * -ENOSPC/-EROFS/-EACCES/-EAGAIN/-ESHUTDOWN 503, others 500. */
struct rp_api_ops {
	int (*status)(void *ctx, json_t **out, struct rp_err *err);
	int (*snapshot)(void *ctx, const struct rp_snapshot_req *req, json_t **out,
			struct rp_err *err);
	int (*session_start)(void *ctx, const struct rp_session_req *req, json_t **out,
			     struct rp_err *err);
	int (*session_stop)(void *ctx, const char *id, const struct rp_stop_req *req, json_t **out,
			    struct rp_err *err);
	/* Marks the session kept: retention never deletes it. */
	int (*session_keep)(void *ctx, const char *id, json_t **out, struct rp_err *err);
	int (*session_list)(void *ctx, json_t **out, struct rp_err *err);
	int (*session_get)(void *ctx, const char *id, json_t **out, struct rp_err *err);
	/* Prometheus text; *text is malloc'ed, the API frees it. */
	int (*metrics)(void *ctx, char **text, struct rp_err *err);
	/* An Alertmanager notification: {"snapshots": [...], "skipped": [...]}. */
	int (*alertmanager)(void *ctx, const struct rp_alert_batch *alerts, json_t **out,
			    struct rp_err *err);
	/* A workload's XLA profiler server (address "HOST:PORT") for the XLA
	 * collector to pull from until process pid exits. */
	int (*xla_register)(void *ctx, const char *address, uint32_t pid, json_t **out,
			    struct rp_err *err);
	/* POST /v1/xla/endpoints/PID/detach: process pid is about to exit;
	 * {"pid": N, "detached": [collectors that had something of it]}. */
	int (*xla_detach)(void *ctx, uint32_t pid, json_t **out, struct rp_err *err);
	/* POST /v1/collectors/NAME/pause and /resume. */
	int (*collector_pause)(void *ctx, const char *name, bool paused, json_t **out,
			       struct rp_err *err);
};

struct rp_api_opts {
	const char *socket_path;   /* created with mode 0660; a stale socket is replaced */
	const char *tcp_listen;    /* "host:port" or NULL */
	const char *token;         /* required when tcp_listen is set */
	uint64_t max_duration_ns;  /* upper bound for durations in requests */
	/* 0: the RP_API_ default (config.h).  Over max_connections connections wait in
	 * the kernel's accept queue; over max_requests (or max_snapshots for
	 * snapshots, session starts and stops, Alertmanager batches) requests
	 * are answered 503 with Retry-After.  header_timeout_ns bounds the
	 * time from a connect (or the previous answer) to complete headers. */
	unsigned max_connections;
	unsigned max_connections_per_peer;
	uint64_t header_timeout_ns;
	unsigned max_requests;
	unsigned max_snapshots;
	/* POST /v1/shutdown (Unix socket, root or the daemon's own user):
	 * called once the answer is queued; NULL: the route answers 404. */
	void (*shutdown)(void *ctx);
	void *shutdown_ctx;
};

struct rp_api;

RP_MUST_CHECK int rp_api_start(const struct rp_api_opts *opts, const struct rp_api_ops *ops,
		 void *ctx, struct rp_api **out, struct rp_err *err);
/* Stops accepting, finishes requests in progress (queued ones get 503),
 * removes the socket. */
void rp_api_stop(struct rp_api *api);

#endif
