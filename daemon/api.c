/* Control API server (api.h, docs/api.md).  Each listener is one
 * libmicrohttpd daemon with epoll threads, so an idle or slow connection
 * costs a socket, not a thread.  Ops run on a small pool of worker threads
 * while their connection is suspended; when the pool's queue is full a
 * request is answered 503 with Retry-After at once, and connections beyond
 * the listener's limit wait in the kernel's accept queue, never reset.
 * A connection gets header_timeout to send a request's headers (the
 * bearer token is among them), counted from its connect or its previous
 * answer; while its listener is full, connections that have waited over
 * EVICT_AFTER_NS for their headers make room for new ones. */
#include "api.h"

#include <errno.h>
#include <libgen.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "alerts.h"
#include "clock.h"
#include "config.h"
#include "jsontype.h"
#include "parse.h"

/* A keep-alive connection between requests, or one whose client stopped
 * reading its answer: closed after this long without traffic. */
#define IDLE_TIMEOUT_S 30
/* How long rp_api_stop waits for requests in progress (a snapshot writes
 * a session to disk) before closing their connections. */
#define DRAIN_TIMEOUT_S 30
/* Connections per MHD thread.  libmicrohttpd 0.9.75 calls epoll_wait
 * again, with the full timeout and before handling anything, whenever
 * one call returned its maximum of 128 events; a thread with fewer than
 * 128 descriptors (connections, the listening socket, its wake-up pipe)
 * never gets there. */
#define CONNECTIONS_PER_THREAD 120u
/* Workers for ops other than snapshots, so that status and metrics are
 * answered while max_snapshots workers write sessions. */
#define FAST_WORKERS 4
#define RETRY_AFTER_S "1"
/* While a listener is full, its connections that have waited this long
 * for their headers are closed to make room: a client sends its request
 * as it connects, so only slow ones lose their place, not those of a
 * burst that MHD has yet to read. */
#define EVICT_AFTER_NS 250000000ull
/* Rejected and timed-out connections: one log line per this many seconds. */
#define LOG_INTERVAL_NS (10 * 1000000000ull)

enum op {
	OP_NONE = -1, OP_STATUS, OP_SNAPSHOT, OP_LIST, OP_START, OP_GET, OP_STOP, OP_METRICS,
	OP_ALERTMANAGER, OP_KEEP, OP_SHUTDOWN, OP_XLA_REGISTER, OP_XLA_DETACH, OP_PAUSE, OP_RESUME,
};

struct rp_api;

/* One MHD daemon; the TCP one demands the bearer token. */
struct listener {
	struct rp_api *api;
	struct MHD_Daemon *mhd;
	int fd;
	bool need_token;
	unsigned connections;      /* open now (api->lock) */
	unsigned max_connections;
};

/* A connection, from MHD's start notification to its close.  While it
 * waits for a request's headers it is listed in api->waiting, oldest
 * first, for the header deadline and for making room. */
struct conn {
	struct listener *l;
	MHD_socket fd;
	uint64_t waiting_since;    /* monotonic ns; 0: not listed */
	struct conn *prev, *next;
};

/* Log lines about a kind of event, at most one per LOG_INTERVAL_NS, each
 * saying how many were left out: a flood of bad clients must not flood
 * the journal. */
struct ratelog {
	pthread_mutex_t lock;
	uint64_t last_ns;
	unsigned skipped;
};

/* Complete requests waiting for a worker, and the ones running. */
struct work {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct request *head, *tail;
	unsigned pending;          /* queued or running */
	unsigned heavy;            /* of those, snapshot-class ops */
	bool stopping;
	pthread_t *threads;
	unsigned nthreads;
};

struct rp_api {
	const struct rp_api_ops *ops;
	void *ctx;
	uint64_t max_duration_ns;
	char *token;
	struct listener unix_l, tcp_l;
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t sock_dev;   /* so stop removes our socket, not a successor's */
	ino_t sock_ino;
	unsigned max_per_peer, max_requests, max_snapshots;
	uint64_t header_timeout_ns;
	pthread_mutex_t lock;
	pthread_cond_t idle;
	unsigned in_flight;  /* requests between their first byte and completion */
	struct conn *waiting, *waiting_tail;  /* by waiting_since */
	pthread_cond_t reap;                  /* monotonic clock */
	pthread_t reaper;
	bool reaper_started, reaper_stop;
	struct work work;
	struct ratelog mhd_log, slow_log;
	void (*shutdown)(void *ctx);
	void *shutdown_ctx;
};

/* Per-request state, from the headers to the completion callback. */
struct request {
	enum op op;
	char *id;
	char *body;
	size_t len;
	bool too_big;
	char source[32];           /* from X-Ringprof-Client */
	/* The answer, built wherever the request was handled and queued by
	 * the access handler, the only place MHD allows that. */
	unsigned status;
	struct MHD_Response *response;
	bool ran;                  /* a worker handled it */
	/* While queued for a worker: */
	struct MHD_Connection *c;
	bool heavy;
	struct request *next;
};

static void ratelog(struct ratelog *r, const char *fmt, va_list ap)
{
	uint64_t now = rp_clock_now_ns();
	pthread_mutex_lock(&r->lock);
	if (r->last_ns && now - r->last_ns < LOG_INTERVAL_NS) {
		r->skipped++;
		pthread_mutex_unlock(&r->lock);
		return;
	}
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	if (r->skipped)
		fprintf(stderr, "ringprofd: api: %s (and %u more like it in the last %llu s)\n", line,
			r->skipped, (unsigned long long)((now - r->last_ns) / 1000000000u));
	else
		fprintf(stderr, "ringprofd: api: %s\n", line);
	r->last_ns = now;
	r->skipped = 0;
	pthread_mutex_unlock(&r->lock);
}

static void ratelog_line(struct ratelog *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ratelog(r, fmt, ap);
	va_end(ap);
}

/* libmicrohttpd's messages: one per refused connection under a flood. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	struct rp_api *api = cls;
	ratelog(&api->mhd_log, fmt, ap);
}

/* ---- responses ---- */

/* Builds the answer into rq (see struct request). */
static enum MHD_Result send_text(struct request *rq, unsigned status, char *text,
				 const char *type, const char *header, const char *value)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text,
								  MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (header)
		MHD_add_response_header(r, header, value);
	if (rq->response)
		MHD_destroy_response(rq->response);
	rq->status = status;
	rq->response = r;
	return MHD_YES;
}

static enum MHD_Result queue_answer(struct MHD_Connection *c, struct request *rq)
{
	if (!rq->response)
		return MHD_NO;
	enum MHD_Result ret = MHD_queue_response(c, rq->status, rq->response);
	MHD_destroy_response(rq->response);
	rq->response = NULL;
	return ret;
}

/* Takes the reference to j. */
static enum MHD_Result send_json_with(struct request *rq, unsigned status, json_t *j,
				      const char *header, const char *value)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
	json_decref(j);
	size_t n = s ? strlen(s) : 0;
	char *line = s ? realloc(s, n + 2) : NULL;
	if (!line) {
		free(s);
		return MHD_NO;
	}
	memcpy(line + n, "\n", 2);
	return send_text(rq, status, line, "application/json", header, value);
}

/* Error messages can quote bytes from the URL, which need not be UTF-8;
 * jansson accepts only UTF-8, so anything else becomes '?'. */
static json_t *json_message(const char *msg)
{
	json_t *s = json_string(msg);
	if (s)
		return s;
	char clean[sizeof(((struct rp_err *)0)->msg)];
	size_t i;
	for (i = 0; msg[i] && i + 1 < sizeof(clean); i++)
		clean[i] = (unsigned char)msg[i] < 0x80 ? msg[i] : '?';
	clean[i] = '\0';
	return json_string(clean);
}

static enum MHD_Result send_error_with(struct request *rq, unsigned status, const char *msg,
				       const char *header, const char *value)
{
	json_t *j = json_pack("{s:{s:i,s:o}}", "error", "status", (int)status,
			      "message", json_message(msg));
	return send_json_with(rq, status, j, header, value);
}

static enum MHD_Result send_error(struct request *rq, unsigned status, const char *msg)
{
	return send_error_with(rq, status, msg, NULL, NULL);
}

/* The status for an op's (or our own validation's) negative errno. */
static unsigned status_for(int rc)
{
	switch (rc) {
	case -EINVAL:
		return MHD_HTTP_BAD_REQUEST;
	case -ENOENT:
		return MHD_HTTP_NOT_FOUND;
	case -EEXIST:
	case -EALREADY:
		return MHD_HTTP_CONFLICT;
	case -E2BIG:
		return MHD_HTTP_CONTENT_TOO_LARGE;
	case -ENOSPC:
	case -EROFS:
	case -EACCES:
	case -EAGAIN:
	case -ESHUTDOWN:
		return MHD_HTTP_SERVICE_UNAVAILABLE;
	default:
		return MHD_HTTP_INTERNAL_SERVER_ERROR;
	}
}

static enum MHD_Result send_failure(struct request *rq, int rc, const struct rp_err *err)
{
	return send_error(rq, status_for(rc), err->msg[0] ? err->msg : strerror(-rc));
}

static enum MHD_Result reply(struct request *rq, int rc, json_t *out,
			     const struct rp_err *err, unsigned ok_status)
{
	if (rc < 0) {
		json_decref(out);
		return send_failure(rq, rc, err);
	}
	if (!out)
		return send_error(rq, MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "the daemon produced no result: this is a bug in ringprofd, please report it");
	return send_json_with(rq, ok_status, out, NULL, NULL);
}

/* ---- request bodies ---- */

/* The body as an object whose keys are all in allowed (NULL-terminated).
 * An empty body is an empty object: every field is optional. */
static int parse_body(const struct request *rq, const char *resource, const char *const *allowed,
		      json_t **obj, struct rp_err *err)
{
	if (rq->len == 0) {
		*obj = json_object();
		return *obj ? 0 : rp_err_set(err, -ENOMEM, "out of memory parsing the request");
	}
	json_error_t je;
	json_t *j = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!j)
		return rp_err_set(err, -EINVAL,
				  "malformed JSON in the request body at line %d, column %d: %s: send a JSON object such as {\"name\": \"warmup\"}",
				  je.line, je.column, je.text);
	if (!json_is_object(j)) {
		rp_err_set(err, -EINVAL, "the request body is %s: send a JSON object such as {\"name\": \"warmup\"}",
			   rp_json_type_name(j));
		json_decref(j);
		return -EINVAL;
	}
	const char *key;
	json_t *v;
	json_object_foreach(j, key, v) {
		size_t i = 0;
		while (allowed[i] && strcmp(allowed[i], key))
			i++;
		if (allowed[i])
			continue;
		char list[256] = "";
		for (i = 0; allowed[i]; i++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				 i ? ", " : "", allowed[i]);
		if (allowed[0])
			rp_err_set(err, -EINVAL, "unknown field '%s' for %s: the fields are %s",
				   key, resource, list);
		else
			rp_err_set(err, -EINVAL, "unknown field '%s' for %s: it takes no fields",
				   key, resource);
		json_decref(j);
		return -EINVAL;
	}
	*obj = j;
	return 0;
}

/* 1 and the value of string field `field`, 0 when it is absent. */
static int string_field(const json_t *obj, const char *field, const char **s, struct rp_err *err)
{
	json_t *v = json_object_get(obj, field);
	if (!v)
		return 0;
	if (!json_is_string(v))
		return rp_err_set(err, -EINVAL, "field '%s' must be a string, not %s", field, rp_json_type_name(v));
	*s = json_string_value(v);
	return 1;
}

static int name_field(const json_t *obj, const char *field, const char *what,
		      char out[RP_NAME_LEN], struct rp_err *err)
{
	const char *s = NULL;
	int rc = string_field(obj, field, &s, err);
	if (rc <= 0)
		return rc;
	rc = rp_check_name(s, RP_NAME_LEN - 1, what, err);
	if (rc < 0)
		return rc;
	snprintf(out, RP_NAME_LEN, "%s", s);
	return 0;
}

static int reason_field(const json_t *obj, char out[256], struct rp_err *err)
{
	const char *s = NULL;
	int rc = string_field(obj, "reason", &s, err);
	if (rc <= 0)
		return rc;
	size_t n = strlen(s);
	if (n > 255)
		return rp_err_set(err, -EINVAL, "field 'reason' is %zu bytes long: keep it to 255 bytes", n);
	memcpy(out, s, n + 1);
	return 0;
}

/* given: the value as the user wrote it, for the message. */
static int over_max(const struct rp_api *api, const char *field, const char *given,
		    struct rp_err *err)
{
	char max[32];
	rp_format_duration(api->max_duration_ns, max, sizeof(max));
	return rp_err_set(err, -EINVAL,
			  "field '%s': %s is over the daemon's limit of %s: ask for at most %s (or raise [sessions] max_duration)",
			  field, given, max, max);
}

/* A value a parser refused: a 400 whatever errno the parser chose. */
static int refused(const char *field, struct rp_err *err)
{
	rp_err_prefix(err, "field '%s'", field);
	err->code = -EINVAL;
	return -EINVAL;
}

/* "30s" or a JSON number of seconds, positive and within the limit. */
static int duration_field(const struct rp_api *api, const json_t *obj, const char *field,
			  uint64_t *ns, struct rp_err *err)
{
	json_t *v = json_object_get(obj, field);
	if (!v)
		return 0;
	char given[48];
	if (json_is_string(v)) {
		if (rp_parse_duration(json_string_value(v), ns, err) < 0)
			return refused(field, err);
		if (*ns <= api->max_duration_ns)
			return 0;
		snprintf(given, sizeof(given), "%.40s", json_string_value(v));
		return over_max(api, field, given, err);
	}
	if (!json_is_number(v))
		return rp_err_set(err, -EINVAL,
				  "field '%s' must be a duration such as \"30s\" or a number of seconds, not %s",
				  field, rp_json_type_name(v));
	double s = json_number_value(v);
	if (!(s > 0))
		return rp_err_set(err, -EINVAL,
				  "field '%s': %g is %s: give a positive duration such as 30s",
				  field, s, s == 0 ? "zero" : "negative");
	/* Compare in double: a huge number does not fit in uint64 ns. */
	if (s * 1e9 > (double)api->max_duration_ns) {
		snprintf(given, sizeof(given), "%g s", s);
		return over_max(api, field, given, err);
	}
	*ns = (uint64_t)(s * 1e9 + 0.5);
	if (*ns == 0)
		return rp_err_set(err, -EINVAL,
				  "field '%s': duration %g s is shorter than 1ns: give a positive duration such as 30s",
				  field, s);
	return 0;
}

static int last_ns_field(const struct rp_api *api, const json_t *obj, uint64_t *ns,
			 struct rp_err *err)
{
	json_t *v = json_object_get(obj, "last_ns");
	if (!v)
		return 0;
	if (json_object_get(obj, "last"))
		return rp_err_set(err, -EINVAL, "both 'last' and 'last_ns' given: give one of them");
	if (!json_is_integer(v))
		return rp_err_set(err, -EINVAL, "field 'last_ns' must be an integer number of nanoseconds, not %s",
				  rp_json_type_name(v));
	json_int_t n = json_integer_value(v);
	if (n <= 0)
		return rp_err_set(err, -EINVAL,
				  "field 'last_ns': duration %lld ns is %s: give a positive duration",
				  (long long)n, n == 0 ? "zero" : "negative");
	*ns = (uint64_t)n;
	if (*ns <= api->max_duration_ns)
		return 0;
	char given[32];
	snprintf(given, sizeof(given), "%lld ns", (long long)n);
	return over_max(api, "last_ns", given, err);
}

/* RFC 3339 text or integer Unix ns, at most 1 s ahead of our clock. */
static int end_field(const json_t *obj, struct rp_snapshot_req *req, struct rp_err *err)
{
	json_t *v = json_object_get(obj, "end");
	if (!v)
		return 0;
	int64_t wall;
	if (json_is_string(v)) {
		if (rp_parse_time(json_string_value(v), &wall, err) < 0)
			return refused("end", err);
	} else if (json_is_integer(v)) {
		wall = json_integer_value(v);
	} else {
		return rp_err_set(err, -EINVAL,
				  "field 'end' must be an RFC 3339 time such as \"2026-11-22T14:03:07Z\" or integer Unix nanoseconds, not %s",
				  rp_json_type_name(v));
	}
	/* Before 1970 nothing was recorded; refusing it here also keeps the
	 * daemon's wall-to-host arithmetic within int64. */
	if (wall < 0)
		return rp_err_set(err, -EINVAL,
				  "field 'end': %lld ns lies before 1970: give a time while the daemon was recording",
				  (long long)wall);
	int64_t now = rp_clock_wall_ns();
	if (wall > now + 1000000000) {
		char end_s[48], now_s[48];
		rp_format_time(wall, end_s, sizeof(end_s));
		rp_format_time(now, now_s, sizeof(now_s));
		return rp_err_set(err, -EINVAL,
				  "field 'end': %s is in the future (the daemon's clock reads %s): a snapshot covers time that has passed",
				  end_s, now_s);
	}
	req->has_end = true;
	req->end_wall_ns = wall;
	return 0;
}

/* Who asked, from X-Ringprof-Client, for the session's trigger record. */
static void client_source(struct MHD_Connection *c, char out[32])
{
	static const char *const known[] = { "cli", "library", "python", "alertmanager", "rule" };
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Ringprof-Client");
	snprintf(out, 32, "api");
	for (size_t i = 0; h && i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(h, known[i]))
			snprintf(out, 32, "%s", known[i]);
}

/* The job a request names: "pids": [4242, ...] and "cgroup": "/path". */
static int filter_fields(const json_t *obj, struct rp_job_filter *f, struct rp_err *err)
{
	const json_t *pids = json_object_get(obj, "pids"), *v;
	const json_t *cgroup = json_object_get(obj, "cgroup");
	size_t i;
	int rc = 0;
	if (pids && !json_is_array(pids))
		rc = rp_err_set(err, -EINVAL, "pids is %s: send an array of process ids, "
				"e.g. [4242, 4243]", rp_json_type_name(pids));
	else if (json_array_size(pids) > RP_API_PIDS_MAX)
		rc = rp_err_set(err, -EINVAL, "pids holds %zu processes, over the limit of %d: send "
				"the first %d, or name the job's cgroup", json_array_size(pids),
				RP_API_PIDS_MAX, RP_API_PIDS_MAX);
	json_array_foreach(pids, i, v) {
		json_int_t pid = json_integer_value(v);
		if (rc == 0 && (!json_is_integer(v) || pid < 1 || pid > INT32_MAX))
			rc = rp_err_set(err, -EINVAL, "pids[%zu] is not a process id: send positive "
					"integers", i);
		if (rc == 0)
			f->pids[f->npids++] = (uint32_t)pid;
	}
	if (rc == 0 && cgroup && (!json_is_string(cgroup) || !json_string_length(cgroup) ||
				  json_string_length(cgroup) >= RP_API_CGROUP_LEN ||
				  strlen(json_string_value(cgroup)) != json_string_length(cgroup)))
		rc = rp_err_set(err, -EINVAL, "cgroup must be a path below the cgroup2 mount "
				"(/sys/fs/cgroup) of at most %d bytes, e.g. \"/system.slice/train.service\"",
				RP_API_CGROUP_LEN - 1);
	else if (rc == 0 && cgroup)
		snprintf(f->cgroup, sizeof(f->cgroup), "%s", json_string_value(cgroup));
	return rc;
}

static int parse_snapshot(const struct rp_api *api, const struct request *rq,
			  struct rp_snapshot_req *req, struct rp_err *err)
{
	static const char *const fields[] = { "last", "last_ns", "end", "name", "run", "reason",
					      "pids", "cgroup", NULL };
	json_t *obj;
	int rc = parse_body(rq, "POST /v1/snapshot", fields, &obj, err);
	if (rc < 0)
		return rc;
	rc = duration_field(api, obj, "last", &req->last_ns, err);
	if (rc == 0)
		rc = last_ns_field(api, obj, &req->last_ns, err);
	if (rc == 0)
		rc = end_field(obj, req, err);
	if (rc == 0)
		rc = name_field(obj, "name", "session name", req->name, err);
	if (rc == 0)
		rc = name_field(obj, "run", "run name", req->run, err);
	if (rc == 0)
		rc = reason_field(obj, req->reason, err);
	if (rc == 0)
		rc = filter_fields(obj, &req->filter, err);
	json_decref(obj);
	return rc;
}

/* The CPU sampling rate a session asks for: an integer of samples per
 * second per CPU. */
static int hz_field(const json_t *obj, unsigned *hz, struct rp_err *err)
{
	json_t *v = json_object_get(obj, "cpu_sample_hz");
	if (!v)
		return 0;
	if (!json_is_integer(v))
		return rp_err_set(err, -EINVAL,
				  "field 'cpu_sample_hz' must be an integer number of samples per second "
				  "per CPU (1 to %d), not %s", RP_CPU_SAMPLE_HZ_MAX, rp_json_type_name(v));
	json_int_t n = json_integer_value(v);
	if (n < 1 || n > RP_CPU_SAMPLE_HZ_MAX)
		return rp_err_set(err, -EINVAL,
				  "field 'cpu_sample_hz': %lld is out of range: give 1 to %d samples per "
				  "second per CPU", (long long)n, RP_CPU_SAMPLE_HZ_MAX);
	*hz = (unsigned)n;
	return 0;
}

static int parse_session(const struct rp_api *api, const struct request *rq,
			 struct rp_session_req *req, struct rp_err *err)
{
	static const char *const fields[] = { "name", "run", "reason", "duration", "cpu_sample_hz",
					      "pids", "cgroup", NULL };
	json_t *obj;
	int rc = parse_body(rq, "POST /v1/sessions", fields, &obj, err);
	if (rc < 0)
		return rc;
	rc = duration_field(api, obj, "duration", &req->duration_ns, err);
	if (rc == 0)
		rc = hz_field(obj, &req->cpu_sample_hz, err);
	if (rc == 0)
		rc = name_field(obj, "name", "session name", req->name, err);
	if (rc == 0)
		rc = name_field(obj, "run", "run name", req->run, err);
	if (rc == 0)
		rc = reason_field(obj, req->reason, err);
	if (rc == 0)
		rc = filter_fields(obj, &req->filter, err);
	json_decref(obj);
	return rc;
}

/* A body with no fields: empty or {}. */
static int parse_empty(const struct request *rq, const char *resource, struct rp_err *err)
{
	static const char *const none[] = { NULL };
	json_t *obj = NULL;
	int rc = parse_body(rq, resource, none, &obj, err);
	json_decref(obj);
	return rc;
}

/* POST /v1/sessions/ID/stop: {"pids": [4242, ...], "cgroup": "/path"} or nothing. */
static int parse_stop(const struct request *rq, struct rp_stop_req *req, struct rp_err *err)
{
	static const char *const fields[] = { "pids", "cgroup", NULL };
	json_t *obj = NULL;
	int rc = parse_body(rq, "POST /v1/sessions/ID/stop", fields, &obj, err);
	if (rc < 0)
		return rc;
	rc = filter_fields(obj, &req->filter, err);
	json_decref(obj);
	return rc;
}

/* POST /v1/xla/endpoints: {"address": "127.0.0.1:PORT", "pid": N}. */
static int parse_xla_register(const struct request *rq, char address[128], uint32_t *pid,
			      struct rp_err *err)
{
	static const char *const fields[] = { "address", "pid", NULL };
	json_t *obj = NULL;
	const char *s = NULL;
	int rc = parse_body(rq, "POST /v1/xla/endpoints", fields, &obj, err);
	if (rc == 0 && (rc = string_field(obj, "address", &s, err)) == 0)
		rc = rp_err_set(err, -EINVAL, "field 'address' is required: the profiler server's "
				"HOST:PORT, such as \"127.0.0.1:9012\"");
	if (rc > 0 && (strlen(s) >= 128 || !strchr(s, ':') || strpbrk(s, "/, \t\n")))
		rc = rp_err_set(err, -EINVAL, "field 'address' must be HOST:PORT of at most 127 bytes");
	json_t *p = rc > 0 ? json_object_get(obj, "pid") : NULL;
	if (rc > 0 && (!json_is_integer(p) || json_integer_value(p) < 1 ||
		       json_integer_value(p) > INT32_MAX))
		rc = rp_err_set(err, -EINVAL, "field 'pid' must be the workload's process id");
	if (rc > 0) {
		snprintf(address, 128, "%s", s);
		*pid = (uint32_t)json_integer_value(p);
		rc = 0;
	}
	json_decref(obj);
	return rc;
}

/* ---- routing ---- */

/* The ops a path offers for GET and POST (OP_NONE: method not allowed),
 * and the session id in it.  False for an unknown path. */
struct resource {
	enum op get, post;
	const char *id;
	size_t id_len;
};

static bool resolve(const char *url, struct resource *r)
{
	static const char sessions[] = "/v1/sessions/", collectors[] = "/v1/collectors/",
			  xla_endpoints[] = "/v1/xla/endpoints/";
	*r = (struct resource){ .get = OP_NONE, .post = OP_NONE };
	if (!strcmp(url, "/v1/status")) {
		r->get = OP_STATUS;
	} else if (!strcmp(url, "/v1/snapshot")) {
		r->post = OP_SNAPSHOT;
	} else if (!strcmp(url, "/v1/sessions")) {
		r->get = OP_LIST;
		r->post = OP_START;
	} else if (!strcmp(url, "/metrics")) {
		r->get = OP_METRICS;
	} else if (!strcmp(url, "/v1/alertmanager")) {
		r->post = OP_ALERTMANAGER;
	} else if (!strcmp(url, "/v1/shutdown")) {
		r->post = OP_SHUTDOWN;
	} else if (!strcmp(url, "/v1/xla/endpoints")) {
		r->post = OP_XLA_REGISTER;
	} else if (!strncmp(url, xla_endpoints, sizeof(xla_endpoints) - 1)) {
		/* /v1/xla/endpoints/PID/detach */
		r->id = url + sizeof(xla_endpoints) - 1;
		const char *slash = strchr(r->id, '/');
		r->id_len = slash ? (size_t)(slash - r->id) : 0;
		if (r->id_len == 0 || strcmp(slash, "/detach"))
			return false;
		r->post = OP_XLA_DETACH;
	} else if (!strncmp(url, collectors, sizeof(collectors) - 1)) {
		/* /v1/collectors/NAME/pause and /resume */
		r->id = url + sizeof(collectors) - 1;
		const char *slash = strchr(r->id, '/');
		r->id_len = slash ? (size_t)(slash - r->id) : 0;
		if (r->id_len == 0)
			return false;
		if (!strcmp(slash, "/pause"))
			r->post = OP_PAUSE;
		else if (!strcmp(slash, "/resume"))
			r->post = OP_RESUME;
		else
			return false;
	} else if (!strncmp(url, sessions, sizeof(sessions) - 1)) {
		r->id = url + sizeof(sessions) - 1;
		const char *slash = strchr(r->id, '/');
		r->id_len = slash ? (size_t)(slash - r->id) : strlen(r->id);
		if (r->id_len == 0)
			return false;
		if (!slash)
			r->get = OP_GET;
		else if (!strcmp(slash, "/stop"))
			r->post = OP_STOP;
		else if (!strcmp(slash, "/keep"))
			r->post = OP_KEEP;
		else
			return false;
	} else {
		return false;
	}
	return true;
}

/* Same time whatever the bytes, so the token cannot be guessed piecewise. */
static bool same_secret(const char *got, const char *want)
{
	size_t gl = strlen(got), wl = strlen(want);
	unsigned char diff = gl != wl;
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? got[i] : 0);
	return diff == 0;
}

static enum MHD_Result check_token(const struct rp_api *api, struct MHD_Connection *c,
				   struct request *rq, bool *ok)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	*ok = false;
	if (h && !strncasecmp(h, "Bearer ", 7)) {
		h += 7;
		while (*h == ' ')
			h++;
		*ok = same_secret(h, api->token);
	}
	if (*ok)
		return MHD_YES;
	return send_error_with(rq, MHD_HTTP_UNAUTHORIZED,
			       h ? "wrong bearer token: send the token from ringprofd's [api] token_file as 'Authorization: Bearer <token>'"
				 : "no bearer token: over TCP send 'Authorization: Bearer <token>' with the token from ringprofd's [api] token_file",
			       MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"ringprofd\"");
}

/* How the request frames its body: a second Content-Length, or one next
 * to Transfer-Encoding, lets a proxy in front of us and us disagree on
 * where the request ends (request smuggling), so both are refused. */
struct framing {
	unsigned content_lengths;
	bool transfer_encoding;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	(void)kind;
	(void)value;
	struct framing *f = cls;
	if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
		f->content_lengths++;
	else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING))
		f->transfer_encoding = true;
	return MHD_YES;
}

static const char *framing_problem(struct MHD_Connection *c)
{
	struct framing f = { 0 };
	(void)MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
	if (f.content_lengths > 1)
		return "the request has more than one Content-Length header: send exactly one";
	if (f.content_lengths && f.transfer_encoding)
		return "the request has both Content-Length and Transfer-Encoding: send one of them";
	return NULL;
}

/* Stopping the daemon is for its owner: only on the Unix socket (not the
 * TCP API, which any holder of the token reaches from afar), and only for
 * root or the daemon's own user, not every member of the socket's group.
 * 0, or -ENOENT (no shutdown hook) / -EPERM with the reason in e. */
static int shutdown_refusal(const struct listener *l, struct MHD_Connection *c, struct rp_err *e)
{
	if (!l->api->shutdown)
		return rp_err_set(e, -ENOENT, "this ringprofd cannot be stopped through its API: stop it "
				  "as it was started (systemctl stop ringprofd)");
	if (l->need_token)
		return rp_err_set(e, -EPERM, "POST /v1/shutdown is refused over TCP: run 'ringprof "
				  "shutdown' on the daemon's host, on its Unix socket");
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (!ci || getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return rp_err_set(e, -EPERM, "cannot tell who asks to stop the daemon (SO_PEERCRED "
				  "failed), so it keeps running: stop it as root");
	if (cred.uid != 0 && cred.uid != geteuid())
		return rp_err_set(e, -EPERM, "uid %u may not stop this ringprofd: only root and its own "
				  "user (uid %u) may; ask them, or stop your own daemon on its own socket "
				  "(--socket)", (unsigned)cred.uid, (unsigned)geteuid());
	return 0;
}

/* First call for a request: headers only.  Answers at once what needs no
 * body (bad token, unknown path, wrong method, declared body too big). */
static enum MHD_Result begin(struct listener *l, struct MHD_Connection *c, const char *url,
			     const char *method, struct request *rq, bool *answered)
{
	*answered = true;
	int rc_shutdown;
	if (l->need_token) {
		bool ok;
		enum MHD_Result ret = check_token(l->api, c, rq, &ok);
		if (!ok)
			return ret;
	}
	struct resource r;
	struct rp_err e;
	if (!resolve(url, &r)) {
		rp_err_set(&e, -ENOENT,
			   "no such resource %.200s: the API has /v1/status, /v1/snapshot, /v1/sessions, /v1/sessions/ID, /v1/sessions/ID/stop, /v1/sessions/ID/keep, /v1/alertmanager, /v1/collectors/NAME/pause, /v1/collectors/NAME/resume, /v1/xla/endpoints, /v1/xla/endpoints/PID/detach, /v1/shutdown and /metrics",
			   url);
		return send_error(rq, MHD_HTTP_NOT_FOUND, e.msg);
	}
	if (!strcmp(method, MHD_HTTP_METHOD_GET))
		rq->op = r.get;
	else if (!strcmp(method, MHD_HTTP_METHOD_POST))
		rq->op = r.post;
	else
		rq->op = OP_NONE;
	if (rq->op == OP_NONE) {
		const char *allow = r.get == OP_NONE ? "POST" : r.post == OP_NONE ? "GET" : "GET, POST";
		rp_err_set(&e, -EINVAL, "%.16s is not allowed on %.200s: use %s", method, url, allow);
		return send_error_with(rq, MHD_HTTP_METHOD_NOT_ALLOWED, e.msg, MHD_HTTP_HEADER_ALLOW, allow);
	}
	if (rq->op == OP_SHUTDOWN && (rc_shutdown = shutdown_refusal(l, c, &e)) != 0)
		return send_error(rq, rc_shutdown == -ENOENT ? MHD_HTTP_NOT_FOUND : MHD_HTTP_FORBIDDEN,
				  e.msg);
	const char *framing = framing_problem(c);
	if (framing)
		return send_error(rq, MHD_HTTP_BAD_REQUEST, framing);
	const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && strtoull(cl, NULL, 10) > RP_API_BODY_MAX) {
		rp_err_set(&e, -E2BIG, "the request body is %.20s bytes, over the limit of %d bytes (64 KiB)",
			   cl, RP_API_BODY_MAX);
		return send_error(rq, MHD_HTTP_CONTENT_TOO_LARGE, e.msg);
	}
	if (r.id && !(rq->id = strndup(r.id, r.id_len)))
		return MHD_NO;
	client_source(c, rq->source);
	*answered = false;
	return MHD_YES;
}

/* Collects the body, dropping it once over the limit (the answer is 413). */
static enum MHD_Result add_body(struct request *rq, const char *data, size_t n)
{
	if (rq->too_big || rq->len + n > RP_API_BODY_MAX) {
		rq->too_big = true;
		return MHD_YES;
	}
	char *b = realloc(rq->body, rq->len + n);
	if (!b)
		return MHD_NO;
	memcpy(b + rq->len, data, n);
	rq->body = b;
	rq->len += n;
	return MHD_YES;
}

static enum MHD_Result dispatch(struct rp_api *api, struct request *rq)
{
	const struct rp_api_ops *ops = api->ops;
	struct rp_err err = { 0 };
	json_t *out = NULL;
	int rc;

	switch (rq->op) {
	case OP_STATUS:
		rc = ops->status(api->ctx, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	case OP_LIST:
		rc = ops->session_list(api->ctx, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	case OP_GET:
		rc = rp_check_name(rq->id, RP_NAME_LEN - 1, "session id", &err);
		if (rc == 0)
			rc = ops->session_get(api->ctx, rq->id, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	case OP_STOP: {
		struct rp_stop_req req = { 0 };
		rc = parse_stop(rq, &req, &err);
		if (rc == 0)
			rc = rp_check_name(rq->id, RP_NAME_LEN - 1, "session id", &err);
		if (rc == 0)
			rc = ops->session_stop(api->ctx, rq->id, &req, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	}
	case OP_KEEP:
		rc = parse_empty(rq, "POST /v1/sessions/ID/keep", &err);
		if (rc == 0)
			rc = rp_check_name(rq->id, RP_NAME_LEN - 1, "session id", &err);
		if (rc == 0)
			rc = ops->session_keep(api->ctx, rq->id, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	case OP_PAUSE:
	case OP_RESUME:
		rc = parse_empty(rq, "POST /v1/collectors/NAME/pause or /resume", &err);
		if (rc == 0)
			rc = rp_check_name(rq->id, RP_NAME_LEN - 1, "collector name", &err);
		if (rc == 0)
			rc = ops->collector_pause(api->ctx, rq->id, rq->op == OP_PAUSE, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	case OP_SHUTDOWN: {
		rc = parse_empty(rq, "POST /v1/shutdown", &err);
		if (rc < 0)
			return reply(rq, rc, NULL, &err, MHD_HTTP_OK);
		enum MHD_Result ret = send_json_with(rq, MHD_HTTP_ACCEPTED,
						     json_pack("{s:b, s:I}", "stopping", 1, "pid",
							       (json_int_t)getpid()), NULL, NULL);
		/* The answer is queued: rp_api_stop, on the way out, waits for it. */
		fprintf(stderr, "ringprofd: shutdown requested through the API\n");
		api->shutdown(api->shutdown_ctx);
		return ret;
	}
	case OP_SNAPSHOT: {
		struct rp_snapshot_req req = { 0 };
		memcpy(req.source, rq->source, sizeof(req.source));
		rc = parse_snapshot(api, rq, &req, &err);
		if (rc == 0)
			rc = ops->snapshot(api->ctx, &req, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_CREATED);
	}
	case OP_START: {
		struct rp_session_req req = { 0 };
		memcpy(req.source, rq->source, sizeof(req.source));
		rc = parse_session(api, rq, &req, &err);
		if (rc == 0)
			rc = ops->session_start(api->ctx, &req, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_CREATED);
	}
	case OP_METRICS: {
		char *text = NULL;
		rc = ops->metrics(api->ctx, &text, &err);
		if (rc < 0) {
			free(text);
			return send_failure(rq, rc, &err);
		}
		if (!text)
			return send_error(rq, MHD_HTTP_INTERNAL_SERVER_ERROR,
					  "the daemon produced no metrics: this is a bug in ringprofd, please report it");
		return send_text(rq, MHD_HTTP_OK, text, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
	}
	case OP_ALERTMANAGER: {
		/* Alertmanager's payload, not ours: parsed leniently (alerts.h). */
		struct rp_alert_batch alerts;
		rc = rp_alerts_parse(rq->body, rq->len, &alerts, &err);
		if (rc == 0) {
			rc = ops->alertmanager(api->ctx, &alerts, &out, &err);
			rp_alerts_free(&alerts);
		}
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	}
	case OP_XLA_REGISTER: {
		char address[128];
		uint32_t pid = 0;
		rc = parse_xla_register(rq, address, &pid, &err);
		if (rc == 0)
			rc = ops->xla_register(api->ctx, address, pid, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_CREATED);
	}
	case OP_XLA_DETACH: {
		unsigned pid = 0;
		rc = parse_empty(rq, "POST /v1/xla/endpoints/PID/detach", &err);
		if (rc == 0 && rp_parse_uint(rq->id, 1, INT32_MAX, &pid, &err) < 0)
			rc = rp_err_set(&err, -EINVAL, "'%.32s' in /v1/xla/endpoints/PID/detach is not a "
					"process id", rq->id);
		if (rc == 0)
			rc = ops->xla_detach(api->ctx, pid, &out, &err);
		return reply(rq, rc, out, &err, MHD_HTTP_OK);
	}
	case OP_NONE:
		break;
	}
	return MHD_NO;
}

/* ---- connections: the header deadline ---- */

static struct conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

/* With api->lock held. */
static void start_waiting(struct rp_api *api, struct conn *k)
{
	k->waiting_since = rp_clock_now_ns();
	k->next = NULL;
	k->prev = api->waiting_tail;
	if (api->waiting_tail)
		api->waiting_tail->next = k;
	else
		api->waiting = k;
	api->waiting_tail = k;
	if (api->waiting == k)  /* the reaper slept without a deadline */
		pthread_cond_signal(&api->reap);
}

static void stop_waiting(struct rp_api *api, struct conn *k)
{
	if (!k->waiting_since)
		return;
	if (k->prev)
		k->prev->next = k->next;
	else
		api->waiting = k->next;
	if (k->next)
		k->next->prev = k->prev;
	else
		api->waiting_tail = k->prev;
	k->prev = k->next = NULL;
	k->waiting_since = 0;
}

/* Ends a connection that waits for headers.  MHD sees end of file and
 * closes it in its own thread; the socket is still open here, as MHD
 * announces the close (which takes api->lock) before closing it.  Should
 * MHD not look at the socket, the connection's own timeout, header_timeout
 * while it waits for headers (set_timeout), closes it: the shut socket
 * reads no more, so the client cannot renew it. */
static void drop_waiting(struct rp_api *api, struct conn *k)
{
	stop_waiting(api, k);
	(void)shutdown(k->fd, SHUT_RDWR);
}

/* MHD's idle timeout of c: header_timeout while it waits for headers,
 * IDLE_TIMEOUT_S while a request is read and answered.  Only from MHD's
 * thread (its callbacks), which owns the timeout lists. */
static void set_timeout(struct rp_api *api, struct MHD_Connection *c, bool waiting)
{
	unsigned s = waiting ? (unsigned)((api->header_timeout_ns + 999999999u) / 1000000000u)
			     : IDLE_TIMEOUT_S;
	(void)MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, s);
}

/* With api->lock held.  Whether l is full: then the reaper looks again
 * soon, as waiting connections pass EVICT_AFTER_NS. */
static bool make_room(struct rp_api *api, struct listener *l, uint64_t now)
{
	if (l->connections < l->max_connections)
		return false;
	for (struct conn *k = api->waiting, *next; k && now - k->waiting_since >= EVICT_AFTER_NS;
	     k = next) {
		next = k->next;
		if (k->l != l)
			continue;
		drop_waiting(api, k);
		ratelog_line(&api->slow_log,
			     "%u connections open on the %s listener, its limit ([api] max_connections): closed one that waited over 250ms for its request headers",
			     l->connections, l->need_token ? "TCP" : "Unix socket");
	}
	return true;
}

static void notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			      enum MHD_ConnectionNotificationCode why)
{
	struct listener *l = cls;
	struct rp_api *api = l->api;
	struct conn *k = *socket_context;
	if (why == MHD_CONNECTION_NOTIFY_CLOSED) {
		pthread_mutex_lock(&api->lock);
		l->connections--;
		if (k)
			stop_waiting(api, k);
		pthread_mutex_unlock(&api->lock);
		free(k);
		*socket_context = NULL;
		return;
	}
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	k = ci ? calloc(1, sizeof(*k)) : NULL;
	pthread_mutex_lock(&api->lock);
	l->connections++;
	if (k) {
		*k = (struct conn){ .l = l, .fd = ci->connect_fd };
		*socket_context = k;
		start_waiting(api, k);
	}
	if (make_room(api, l, rp_clock_now_ns()))
		pthread_cond_signal(&api->reap);
	pthread_mutex_unlock(&api->lock);
	set_timeout(api, c, true);
}

static void *reaper_main(void *arg)
{
	struct rp_api *api = arg;
	char limit[32];
	rp_format_duration(api->header_timeout_ns, limit, sizeof(limit));
	pthread_mutex_lock(&api->lock);
	while (!api->reaper_stop) {
		uint64_t now = rp_clock_now_ns();
		while (api->waiting && now - api->waiting->waiting_since >= api->header_timeout_ns) {
			drop_waiting(api, api->waiting);
			ratelog_line(&api->slow_log,
				     "closed a connection that sent no complete request headers within %s ([api] header_timeout): a slow client or an attack",
				     limit);
		}
		bool full = make_room(api, &api->unix_l, now);
		full = make_room(api, &api->tcp_l, now) || full;
		uint64_t due = api->waiting ? api->waiting->waiting_since + api->header_timeout_ns
					    : now + api->header_timeout_ns;
		if (full && due > now + EVICT_AFTER_NS / 4)
			due = now + EVICT_AFTER_NS / 4;
		struct timespec until = { .tv_sec = (time_t)(due / 1000000000u),
					  .tv_nsec = (long)(due % 1000000000u) };
		(void)pthread_cond_timedwait(&api->reap, &api->lock, &until);
	}
	pthread_mutex_unlock(&api->lock);
	return NULL;
}

/* ---- work: ops on worker threads ---- */

static const char shutting_down[] = "ringprofd is shutting down: retry when it is back";

/* Snapshot-class ops write sessions; they have their own, lower limit. */
static bool is_heavy(enum op op)
{
	return op == OP_SNAPSHOT || op == OP_START || op == OP_STOP || op == OP_ALERTMANAGER;
}

/* Hands a complete request to the workers, or refuses it at once when the
 * daemon is busy: a 503 with Retry-After, not a dropped connection. */
static enum MHD_Result submit(struct rp_api *api, struct MHD_Connection *c, struct request *rq)
{
	struct work *w = &api->work;
	char msg[256] = "";
	rq->heavy = is_heavy(rq->op);
	pthread_mutex_lock(&w->lock);
	if (w->stopping)
		snprintf(msg, sizeof(msg), "%s", shutting_down);
	else if (rq->heavy && w->heavy >= api->max_snapshots)
		snprintf(msg, sizeof(msg),
			 "%u snapshots or session changes are in progress, the daemon's limit ([api] max_snapshots): retry in a few seconds",
			 w->heavy);
	else if (w->pending >= api->max_requests)
		snprintf(msg, sizeof(msg),
			 "%u requests are in progress, the daemon's limit ([api] max_requests): retry in a second",
			 w->pending);
	if (!msg[0]) {
		MHD_suspend_connection(c);
		rq->c = c;
		w->pending++;
		w->heavy += rq->heavy;
		if (w->tail)
			w->tail->next = rq;
		else
			w->head = rq;
		w->tail = rq;
		pthread_cond_signal(&w->wake);
	}
	pthread_mutex_unlock(&w->lock);
	if (!msg[0])
		return MHD_YES;
	if (send_error_with(rq, MHD_HTTP_SERVICE_UNAVAILABLE, msg, MHD_HTTP_HEADER_RETRY_AFTER,
			    RETRY_AFTER_S) == MHD_NO)
		return MHD_NO;
	return queue_answer(c, rq);
}

/* The request has its answer: give its connection back to MHD, which
 * calls the handler again to queue it (and may free rq at once). */
static void finish_job(struct work *w, struct request *rq)
{
	struct MHD_Connection *c = rq->c;
	rq->ran = true;
	pthread_mutex_lock(&w->lock);
	w->pending--;
	w->heavy -= rq->heavy;
	pthread_mutex_unlock(&w->lock);
	MHD_resume_connection(c);
}

static void *worker_main(void *arg)
{
	struct rp_api *api = arg;
	struct work *w = &api->work;
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->head && !w->stopping)
			pthread_cond_wait(&w->wake, &w->lock);
		if (w->stopping)
			break;
		struct request *rq = w->head;
		if (!(w->head = rq->next))
			w->tail = NULL;
		pthread_mutex_unlock(&w->lock);
		(void)dispatch(api, rq);
		finish_job(w, rq);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static int start_work(struct rp_api *api, struct rp_err *err)
{
	struct work *w = &api->work;
	w->threads = calloc(api->max_snapshots + FAST_WORKERS, sizeof(*w->threads));
	if (!w->threads)
		return rp_err_set(err, -ENOMEM, "out of memory starting the API");
	for (unsigned i = 0; i < api->max_snapshots + FAST_WORKERS; i++) {
		int rc = pthread_create(&w->threads[i], NULL, worker_main, api);
		if (rc)
			return rp_err_set(err, -rc, "cannot start the API's worker threads: %s", strerror(rc));
		w->nthreads++;
	}
	return 0;
}

/* Queued requests are answered 503; running ones finish. */
static void stop_work(struct work *w)
{
	pthread_mutex_lock(&w->lock);
	w->stopping = true;
	struct request *q = w->head;
	w->head = w->tail = NULL;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	while (q) {
		struct request *next = q->next;
		(void)send_error_with(q, MHD_HTTP_SERVICE_UNAVAILABLE, shutting_down,
				      MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
		finish_job(w, q);
		q = next;
	}
	for (unsigned i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
	w->nthreads = 0;
}

/* ---- the access handler ---- */

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
			      const char *method, const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	(void)version;
	struct listener *l = cls;
	struct rp_api *api = l->api;
	struct request *rq = *con_cls;
	if (!rq) {
		if (!(rq = calloc(1, sizeof(*rq))))
			return MHD_NO;
		*con_cls = rq;
		struct conn *k = conn_of(c);
		pthread_mutex_lock(&api->lock);
		api->in_flight++;
		if (k)
			stop_waiting(api, k);
		pthread_mutex_unlock(&api->lock);
		set_timeout(api, c, false);
		bool answered;
		enum MHD_Result ret = begin(l, c, url, method, rq, &answered);
		if (!answered || ret == MHD_NO)
			return ret;
		rq->op = OP_NONE;
		return queue_answer(c, rq);
	}
	if (rq->ran)
		return queue_answer(c, rq);
	if (rq->op == OP_NONE)  /* answered already; MHD drops the rest */
		return MHD_YES;
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		return add_body(rq, upload, n);
	}
	if (rq->too_big) {
		struct rp_err e;
		rp_err_set(&e, -E2BIG, "the request body is over the limit of %d bytes (64 KiB)",
			   RP_API_BODY_MAX);
		if (send_failure(rq, e.code, &e) == MHD_NO)
			return MHD_NO;
		return queue_answer(c, rq);
	}
	return submit(api, c, rq);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode why)
{
	struct listener *l = cls;
	struct rp_api *api = l->api;
	struct request *rq = *con_cls;
	if (!rq)
		return;
	if (rq->response)
		MHD_destroy_response(rq->response);
	free(rq->id);
	free(rq->body);
	free(rq);
	*con_cls = NULL;
	struct conn *k = why == MHD_REQUEST_TERMINATED_COMPLETED_OK ? conn_of(c) : NULL;
	if (k)
		set_timeout(api, c, true);
	pthread_mutex_lock(&api->lock);
	if (k)  /* kept alive: the next request's headers are due in time too */
		start_waiting(api, k);
	if (--api->in_flight == 0)
		pthread_cond_broadcast(&api->idle);
	pthread_mutex_unlock(&api->lock);
}

/* ---- sockets ---- */

/* A socket file nobody answers on is left over from a crash: remove it.
 * A live one means another daemon: refuse rather than steal its clients. */
static int clear_stale(const struct sockaddr_un *sa, struct rp_err *err)
{
	const char *path = sa->sun_path;
	struct stat st;
	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		return rp_err_set(err, -errno, "cannot check %s: %s", path, strerror(errno));
	}
	if (!S_ISSOCK(st.st_mode))
		return rp_err_set(err, -EEXIST, "%s exists and is not a socket: remove it or set another socket path",
				  path);
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (probe < 0)
		return rp_err_set(err, -errno, "cannot create a socket: %s", strerror(errno));
	int rc = connect(probe, (const struct sockaddr *)sa, sizeof(*sa));
	int e = errno;
	close(probe);
	if (rc == 0 || e == EAGAIN)
		return rp_err_set(err, -EADDRINUSE,
				  "another ringprofd is already listening on %s: stop it first, or give this one another socket path",
				  path);
	if (e != ECONNREFUSED)
		return rp_err_set(err, -e, "cannot check whether %s is in use: %s", path, strerror(e));
	if (unlink(path) < 0 && errno != ENOENT)
		return rp_err_set(err, -errno, "cannot remove the stale socket %s: %s: remove it by hand",
				  path, strerror(errno));
	return 0;
}

static int unix_listen(struct rp_api *api, const char *path, struct rp_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return rp_err_set(err, -ENAMETOOLONG,
				  "socket path %s is %zu bytes, over the %zu a Unix socket allows: choose a shorter path",
				  path, strlen(path), sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int rc = clear_stale(&sa, err);
	if (rc < 0)
		return rc;
	/* The runtime directory (/run/ringprof, $XDG_RUNTIME_DIR/ringprof) may
	 * not exist yet after a reboot. */
	char dir[sizeof(sa.sun_path)];
	memcpy(dir, sa.sun_path, sizeof(dir));
	if (mkdir(dirname(dir), 0755) < 0 && errno != EEXIST)
		return rp_err_set(err, -errno, "cannot create the directory for socket %s: %s", path,
				  strerror(errno));

	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return rp_err_set(err, -errno, "cannot create a socket: %s", strerror(errno));
	/* 0660 lets the ringprof group in.  bind gives the file the socket
	 * inode's mode (fchmod sets it; Linux) less the umask, which may drop
	 * the group's write bit that chmod then restores: the file is never
	 * more open than 0660.  Setting umask instead would race with the
	 * daemon's other threads, which create files meanwhile. */
	rc = fchmod(fd, 0660);
	if (rc == 0)
		rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int e = errno;
	if (rc < 0) {
		close(fd);
		if (e == EADDRINUSE)
			return rp_err_set(err, -EADDRINUSE,
					  "another ringprofd is already listening on %s: stop it first, or give this one another socket path",
					  path);
		return rp_err_set(err, -e, "cannot create socket %s: %s: check that its directory is writable",
				  path, strerror(e));
	}
	struct stat st;
	if (chmod(path, 0660) < 0 || listen(fd, SOMAXCONN) < 0 || stat(path, &st) < 0) {
		e = errno;
		close(fd);
		unlink(path);
		return rp_err_set(err, -e, "cannot listen on %s: %s", path, strerror(e));
	}
	api->sock_dev = st.st_dev;
	api->sock_ino = st.st_ino;
	snprintf(api->socket_path, sizeof(api->socket_path), "%s", path);
	api->unix_l.fd = fd;
	return 0;
}

/* "host:port" or "[v6addr]:port". */
static int tcp_listen(struct rp_api *api, const char *spec, struct rp_err *err)
{
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || !colon[1])
		return rp_err_set(err, -EINVAL,
				  "tcp_listen '%s' is not host:port: write it like 127.0.0.1:9464 or [::1]:9464 (0.0.0.0:9464 for every interface)",
				  spec);
	char host[256];
	size_t hl = (size_t)(colon - spec);
	if (spec[0] == '[' && colon[-1] == ']') {
		spec++;
		hl -= 2;
	}
	if (hl == 0 || hl >= sizeof(host))
		return rp_err_set(err, -EINVAL, "tcp_listen '%s' has no usable host: write it like 127.0.0.1:9464",
				  spec);
	memcpy(host, spec, hl);
	host[hl] = '\0';

	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM }, *res;
	int g = getaddrinfo(host, colon + 1, &hints, &res);
	if (g)
		return rp_err_set(err, -EINVAL, "tcp_listen '%s': %s: write it like 127.0.0.1:9464", spec,
				  gai_strerror(g));
	int e = 0, fd = -1;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int on = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
			e = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return rp_err_set(err, -e, "cannot listen on tcp_listen %s: %s%s", spec, strerror(e),
				  e == EADDRINUSE ? ": choose another port" : "");
	api->tcp_l.fd = fd;
	return 0;
}

static int start_mhd(struct listener *l, struct rp_err *err)
{
	struct rp_api *api = l->api;
	/* One thread needs no pool (MHD warns about a pool of one). */
	unsigned threads = (l->max_connections + CONNECTIONS_PER_THREAD - 1) / CONNECTIONS_PER_THREAD;
	struct MHD_OptionItem pool[] = {
		{ threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, threads, NULL },
		{ MHD_OPTION_END, 0, NULL },
	};
	/* The logger comes first, so that start-up messages go through it. */
	l->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
				  MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
				  0, NULL, NULL, handle, l,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log, api,
				  MHD_OPTION_LISTEN_SOCKET, (MHD_socket)l->fd,
				  MHD_OPTION_NOTIFY_COMPLETED, completed, l,
				  MHD_OPTION_NOTIFY_CONNECTION, notify_connection, l,
				  MHD_OPTION_CONNECTION_LIMIT, l->max_connections,
				  MHD_OPTION_ARRAY, pool,
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT, l->need_token ? api->max_per_peer : 0u,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
				  MHD_OPTION_END);
	if (!l->mhd)
		return rp_err_set(err, -EIO, "cannot start the HTTP server (libmicrohttpd): see the messages above");
	return 0;
}

/* Stop accepting; the listening socket is then ours to close (else MHD's). */
static void quiesce(struct listener *l)
{
	if (l->mhd && MHD_quiesce_daemon(l->mhd) == MHD_INVALID_SOCKET)
		l->fd = -1;
}

static void shut(struct listener *l)
{
	if (l->mhd)
		MHD_stop_daemon(l->mhd);
	if (l->fd >= 0)
		close(l->fd);
}

int rp_api_start(const struct rp_api_opts *opts, const struct rp_api_ops *ops, void *ctx,
		 struct rp_api **out, struct rp_err *err)
{
	if (opts->tcp_listen && (!opts->token || !opts->token[0]))
		return rp_err_set(err, -EINVAL,
				  "tcp_listen %s needs a bearer token: set [api] token_file to a file holding one",
				  opts->tcp_listen);
	struct rp_api *api = calloc(1, sizeof(*api));
	if (!api)
		return rp_err_set(err, -ENOMEM, "out of memory starting the API");
	api->ops = ops;
	api->ctx = ctx;
	api->max_duration_ns = opts->max_duration_ns;
	unsigned max_connections = opts->max_connections ? opts->max_connections
							  : RP_API_MAX_CONNECTIONS;
	api->unix_l = (struct listener){ .api = api, .fd = -1, .max_connections = max_connections };
	api->tcp_l = (struct listener){ .api = api, .fd = -1, .need_token = true,
					.max_connections = max_connections };
	api->max_per_peer = opts->max_connections_per_peer ? opts->max_connections_per_peer
							    : RP_API_MAX_CONNECTIONS_PER_PEER;
	api->max_requests = opts->max_requests ? opts->max_requests : RP_API_MAX_REQUESTS;
	api->max_snapshots = opts->max_snapshots ? opts->max_snapshots : RP_API_MAX_SNAPSHOTS;
	api->shutdown = opts->shutdown;
	api->shutdown_ctx = opts->shutdown_ctx;
	api->header_timeout_ns = opts->header_timeout_ns ? opts->header_timeout_ns
							 : RP_API_HEADER_TIMEOUT_NS;
	pthread_mutex_init(&api->lock, NULL);
	pthread_cond_init(&api->idle, NULL);
	pthread_condattr_t monotonic;
	pthread_condattr_init(&monotonic);
	pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
	pthread_cond_init(&api->reap, &monotonic);
	pthread_condattr_destroy(&monotonic);
	pthread_mutex_init(&api->work.lock, NULL);
	pthread_cond_init(&api->work.wake, NULL);
	pthread_mutex_init(&api->mhd_log.lock, NULL);
	pthread_mutex_init(&api->slow_log.lock, NULL);

	int rc = start_work(api, err);
	if (rc == 0) {
		rc = -pthread_create(&api->reaper, NULL, reaper_main, api);
		if (rc < 0)
			rp_err_set(err, rc, "cannot start the API's header-deadline thread: %s", strerror(-rc));
		api->reaper_started = rc == 0;
	}
	if (rc == 0)
		rc = unix_listen(api, opts->socket_path, err);
	if (rc == 0 && opts->tcp_listen) {
		if (!(api->token = strdup(opts->token)))
			rc = rp_err_set(err, -ENOMEM, "out of memory starting the API");
		if (rc == 0)
			rc = tcp_listen(api, opts->tcp_listen, err);
	}
	if (rc == 0)
		rc = start_mhd(&api->unix_l, err);
	if (rc == 0 && api->tcp_l.fd >= 0)
		rc = start_mhd(&api->tcp_l, err);
	if (rc < 0) {
		rp_api_stop(api);
		return rc;
	}
	*out = api;
	return 0;
}

void rp_api_stop(struct rp_api *api)
{
	if (!api)
		return;
	quiesce(&api->unix_l);
	quiesce(&api->tcp_l);
	/* New clients now get "no such socket"; remove it only if it is still
	 * ours, not one a newer daemon put there. */
	struct stat st;
	if (api->socket_path[0] && lstat(api->socket_path, &st) == 0 &&
	    st.st_dev == api->sock_dev && st.st_ino == api->sock_ino)
		unlink(api->socket_path);

	stop_work(&api->work);
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += DRAIN_TIMEOUT_S;
	pthread_mutex_lock(&api->lock);
	while (api->in_flight && pthread_cond_timedwait(&api->idle, &api->lock, &deadline) == 0)
		;
	pthread_mutex_unlock(&api->lock);

	shut(&api->tcp_l);
	shut(&api->unix_l);
	if (api->reaper_started) {
		pthread_mutex_lock(&api->lock);
		api->reaper_stop = true;
		pthread_cond_signal(&api->reap);
		pthread_mutex_unlock(&api->lock);
		pthread_join(api->reaper, NULL);
	}
	free(api->work.threads);
	pthread_mutex_destroy(&api->slow_log.lock);
	pthread_mutex_destroy(&api->mhd_log.lock);
	pthread_cond_destroy(&api->work.wake);
	pthread_mutex_destroy(&api->work.lock);
	pthread_cond_destroy(&api->reap);
	pthread_cond_destroy(&api->idle);
	pthread_mutex_destroy(&api->lock);
	free(api->token);
	free(api);
}
