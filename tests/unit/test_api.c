/* The control API server (daemon/api.c) against fake ops, driven through
 * the client library (util/client.c) and with raw bytes over the socket. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "alerts.h"
#include "api.h"
#include "client.h"
#include "scratch.h"

#define HOUR_NS 3600000000000ull

/* The test double: records what the API parsed and answers with a canned
 * document or the error the test chose. */
struct fake {
	pthread_mutex_t lock;
	int calls;
	struct rp_snapshot_req snap;
	struct rp_session_req sess;
	char id[128];
	size_t alerts;        /* alerts in the last Alertmanager notification */
	char fingerprint[64]; /* of its first alert */
	char xla_address[128]; /* of the last XLA registration */
	uint32_t xla_pid;
	int next_rc;          /* returned by the next op, then reset */
	bool null_result;     /* return 0 without a document */
	unsigned delay_ms;    /* how long an op takes */
};

struct fixture {
	char dir[64];
	char sock[96];
	struct fake fake;
	struct rp_api *api;
	struct rp_client *client;
};

static int finish(struct fake *f, const char *doc, json_t **out, struct rp_err *err)
{
	pthread_mutex_lock(&f->lock);
	f->calls++;
	int rc = f->next_rc;
	bool null_result = f->null_result;
	unsigned delay = f->delay_ms;
	f->next_rc = 0;
	pthread_mutex_unlock(&f->lock);
	if (delay)
		usleep(delay * 1000);
	if (rc)
		return rp_err_set(err, rc, "fake failure %d", rc);
	*out = null_result ? NULL : json_loads(doc, 0, NULL);
	return 0;
}

static int fake_status(void *ctx, json_t **out, struct rp_err *err)
{
	return finish(ctx, "{\"version\": \"0.1.0\", \"rings\": []}", out, err);
}

static int fake_snapshot(void *ctx, const struct rp_snapshot_req *req, json_t **out,
			 struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	f->snap = *req;
	pthread_mutex_unlock(&f->lock);
	return finish(f, "{\"id\": \"snap1\", \"kind\": \"snapshot\"}", out, err);
}

static int fake_start(void *ctx, const struct rp_session_req *req, json_t **out,
		      struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	f->sess = *req;
	pthread_mutex_unlock(&f->lock);
	return finish(f, "{\"id\": \"sess1\", \"state\": \"open\"}", out, err);
}

static int record_id(struct fake *f, const char *id, const char *doc, json_t **out,
		     struct rp_err *err)
{
	pthread_mutex_lock(&f->lock);
	snprintf(f->id, sizeof(f->id), "%s", id);
	pthread_mutex_unlock(&f->lock);
	return finish(f, doc, out, err);
}

static int fake_stop(void *ctx, const char *id, const struct rp_stop_req *req, json_t **out,
		     struct rp_err *err)
{
	(void)req;
	return record_id(ctx, id, "{\"state\": \"complete\"}", out, err);
}

static int fake_keep(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	return record_id(ctx, id, "{\"keep\": true}", out, err);
}

static int fake_get(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	return record_id(ctx, id, "{\"state\": \"open\"}", out, err);
}

static int fake_list(void *ctx, json_t **out, struct rp_err *err)
{
	return finish(ctx, "{\"sessions\": []}", out, err);
}

static int fake_metrics(void *ctx, char **text, struct rp_err *err)
{
	json_t *unused = NULL;
	int rc = finish(ctx, "{}", &unused, err);
	json_decref(unused);
	if (rc == 0)
		*text = strdup("ringprof_sessions_open 0\n");
	return rc;
}

static int fake_alertmanager(void *ctx, const struct rp_alert_batch *alerts, json_t **out,
			     struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	f->alerts = alerts->n;
	snprintf(f->fingerprint, sizeof(f->fingerprint), "%s", alerts->n ? alerts->alerts[0].fingerprint : "");
	pthread_mutex_unlock(&f->lock);
	return finish(f, "{\"snapshots\": [], \"skipped\": []}", out, err);
}

static int fake_xla_register(void *ctx, const char *address, uint32_t pid, json_t **out,
			     struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	snprintf(f->xla_address, sizeof(f->xla_address), "%s", address);
	f->xla_pid = pid;
	pthread_mutex_unlock(&f->lock);
	return finish(f, "{}", out, err);
}

static const struct rp_api_ops fake_ops = {
	.status = fake_status,
	.snapshot = fake_snapshot,
	.session_start = fake_start,
	.session_stop = fake_stop,
	.session_keep = fake_keep,
	.session_list = fake_list,
	.session_get = fake_get,
	.metrics = fake_metrics,
	.alertmanager = fake_alertmanager,
	.xla_register = fake_xla_register,
};

static int start_api(struct fixture *fx, const char *tcp, const char *token, struct rp_api **out,
		     struct rp_err *err)
{
	struct rp_api_opts o = { .socket_path = fx->sock, .tcp_listen = tcp, .token = token,
				 .max_duration_ns = HOUR_NS };
	return rp_api_start(&o, &fake_ops, &fx->fake, out, err);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));
	if (scratch_make(fx->dir, sizeof(fx->dir), "api") < 0)
		return -1;
	snprintf(fx->sock, sizeof(fx->sock), "%s/ringprofd.sock", fx->dir);
	pthread_mutex_init(&fx->fake.lock, NULL);
	struct rp_err err = { 0 };
	if (start_api(fx, NULL, NULL, &fx->api, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	struct rp_client_opts co = { .socket_path = fx->sock, .client_name = "cli" };
	if (rp_client_new(&co, &fx->client, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;
	rp_client_free(fx->client);
	rp_api_stop(fx->api);
	(void)scratch_remove(fx->dir);
	pthread_mutex_destroy(&fx->fake.lock);
	free(fx);
	return 0;
}

/* A request through the client; body is JSON text or NULL. */
static int call(struct fixture *fx, const char *method, const char *path, const char *body,
		json_t **resp, struct rp_err *err)
{
	json_t *b = NULL;
	if (body) {
		b = json_loads(body, JSON_DECODE_ANY, NULL);
		assert_non_null(b);
	}
	memset(err, 0, sizeof(*err));
	int rc = rp_client_call(fx->client, method, path, b, resp, err);
	json_decref(b);
	return rc;
}

/* Expects a 400 whose message contains each of the NULL-terminated words. */
static void expect_400(struct fixture *fx, const char *path, const char *body, ...)
{
	struct rp_err err;
	json_t *resp = NULL;
	int rc = call(fx, "POST", path, body, &resp, &err);
	if (rc != -EINVAL)
		fail_msg("%s %s: got %d (%s), expected 400", path, body, rc, err.msg);
	assert_null(resp);
	va_list ap;
	va_start(ap, body);
	for (const char *w; (w = va_arg(ap, const char *));)
		if (!strstr(err.msg, w))
			fail_msg("%s: message '%s' does not mention '%s'", body, err.msg, w);
	va_end(ap);
}

static struct sockaddr_un unix_addr(const struct fixture *fx)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx->sock);
	return sa;
}

/* Raw bytes over the socket; returns the status, the whole answer in out. */
static int raw(struct fixture *fx, const char *req, size_t len, char *out, size_t out_len)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = unix_addr(fx);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	for (size_t off = 0; off < len;) {
		ssize_t n = write(fd, req + off, len - off);
		assert_true(n > 0);
		off += (size_t)n;
	}
	size_t got = 0;
	ssize_t n;
	while (got + 1 < out_len && (n = read(fd, out + got, out_len - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(fd);
	int status = 0;
	sscanf(out, "HTTP/1.%*d %d", &status);
	return status;
}

static int raw_str(struct fixture *fx, const char *req, char *out, size_t out_len)
{
	return raw(fx, req, strlen(req), out, out_len);
}

/* A POST with body text and Connection: close, over raw bytes. */
static int raw_post(struct fixture *fx, const char *path, const char *body, char *out, size_t out_len)
{
	char req[1024];
	snprintf(req, sizeof(req),
		 "POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
		 path, strlen(body), body);
	return raw_str(fx, req, out, out_len);
}

/* ---- routes ---- */

static void test_status(void **state)
{
	struct fixture *fx = *state;
	struct rp_err err;
	json_t *resp = NULL;
	assert_int_equal(call(fx, "GET", "/v1/status", NULL, &resp, &err), 0);
	assert_string_equal(json_string_value(json_object_get(resp, "version")), "0.1.0");
	json_decref(resp);

	char out[4096];
	assert_int_equal(raw_str(fx, "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
				 out, sizeof(out)), 200);
	assert_non_null(strcasestr(out, "Content-Type: application/json"));
}

static void test_snapshot_fields(void **state)
{
	struct fixture *fx = *state;
	struct rp_err err;
	json_t *resp = NULL;
	assert_int_equal(call(fx, "POST", "/v1/snapshot",
			      "{\"last\": \"30s\", \"name\": \"warmup\", \"run\": \"exp-1\", \"reason\": \"slow step\"}",
			      &resp, &err), 0);
	assert_string_equal(json_string_value(json_object_get(resp, "id")), "snap1");
	json_decref(resp);
	assert_int_equal(fx->fake.snap.last_ns, 30000000000ull);
	assert_false(fx->fake.snap.has_end);
	assert_string_equal(fx->fake.snap.name, "warmup");
	assert_string_equal(fx->fake.snap.run, "exp-1");
	assert_string_equal(fx->fake.snap.reason, "slow step");
	assert_string_equal(fx->fake.snap.source, "cli");

	assert_int_equal(call(fx, "POST", "/v1/snapshot", "{\"last\": 0.5}", NULL, &err), 0);
	assert_int_equal(fx->fake.snap.last_ns, 500000000ull);
	assert_string_equal(fx->fake.snap.name, "");
	assert_int_equal(call(fx, "POST", "/v1/snapshot", "{\"last_ns\": 1000}", NULL, &err), 0);
	assert_int_equal(fx->fake.snap.last_ns, 1000);
	/* No body at all: every field is optional. */
	assert_int_equal(call(fx, "POST", "/v1/snapshot", NULL, NULL, &err), 0);
	assert_int_equal(fx->fake.snap.last_ns, 0);

	char out[4096];
	assert_int_equal(raw_post(fx, "/v1/snapshot", "{}", out, sizeof(out)), 201);
}

static void test_snapshot_end(void **state)
{
	struct fixture *fx = *state;
	struct rp_err err;
	const int64_t want = 1577934245500000000ll; /* 2020-01-02T03:04:05.5Z */
	assert_int_equal(call(fx, "POST", "/v1/snapshot", "{\"end\": \"2020-01-02T03:04:05.5Z\"}",
			      NULL, &err), 0);
	assert_true(fx->fake.snap.has_end);
	assert_int_equal(fx->fake.snap.end_wall_ns, want);
	fx->fake.snap.end_wall_ns = 0;
	assert_int_equal(call(fx, "POST", "/v1/snapshot",
			      "{\"end\": \"2020-01-02T04:04:05.500+01:00\"}", NULL, &err), 0);
	assert_int_equal(fx->fake.snap.end_wall_ns, want);
	fx->fake.snap.end_wall_ns = 0;
	assert_int_equal(call(fx, "POST", "/v1/snapshot", "{\"end\": 1577934245500000000}", NULL, &err), 0);
	assert_int_equal(fx->fake.snap.end_wall_ns, want);

	/* Less than a second ahead is clock skew, allowed; a minute is not. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	char body[64];
	snprintf(body, sizeof(body), "{\"end\": %lld}", (long long)(now + 500000000));
	assert_int_equal(call(fx, "POST", "/v1/snapshot", body, NULL, &err), 0);
	snprintf(body, sizeof(body), "{\"end\": %lld}", (long long)(now + 60000000000ll));
	expect_400(fx, "/v1/snapshot", body, "'end'", "future", NULL);
	expect_400(fx, "/v1/snapshot", "{\"end\": \"2200-01-01T00:00:00Z\"}", "future", NULL);
	expect_400(fx, "/v1/snapshot", "{\"end\": \"2999-01-01T00:00:00Z\"}", "'end'", "range", NULL);
	expect_400(fx, "/v1/snapshot", "{\"end\": \"yesterday\"}", "'end'", "RFC 3339", NULL);
	expect_400(fx, "/v1/snapshot", "{\"end\": 1.5}", "'end'", "not a number", NULL);
	/* The ends that overflowed the daemon's wall-to-host arithmetic. */
	expect_400(fx, "/v1/snapshot", "{\"end\": -9223372036854775808}", "'end'", "1970", NULL);
	expect_400(fx, "/v1/snapshot", "{\"end\": -1}", "'end'", "1970", NULL);
	expect_400(fx, "/v1/snapshot", "{\"end\": \"1900-01-01T00:00:00Z\"}", "'end'", NULL);
}

/* Framings a proxy and the daemon could read differently (smuggling). */
static void test_ambiguous_framing(void **state)
{
	struct fixture *fx = *state;
	static const char *const requests[] = {
		"POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}",
		"POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		"Content-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		"Transfer-Encoding: chunked\r\nContent-Length: 7\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(requests) / sizeof(requests[0]); i++) {
		char out[4096];
		int status = raw_str(fx, requests[i], out, sizeof(out));
		if (status != 400 || !strstr(out, "Content-Length"))
			fail_msg("request %zu: status %d: %s", i, status, out);
	}
	assert_int_equal(fx->fake.calls, 0);
}

static void test_durations(void **state)
{
	struct fixture *fx = *state;
	expect_400(fx, "/v1/snapshot", "{\"last\": \"0s\"}", "'last'", "zero", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": \"-5s\"}", "'last'", "negative", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": 0}", "'last'", "zero", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": -1}", "'last'", "negative", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": \"2h\"}", "'last'", "limit of 1h", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": 1e300}", "'last'", "limit of 1h", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": \"30\"}", "'last'", "unit", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": true}", "'last'", "not a boolean", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last_ns\": 0}", "'last_ns'", "zero", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last_ns\": -3}", "'last_ns'", "negative", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last_ns\": 7200000000000}", "'last_ns'", "limit of 1h", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last_ns\": \"5s\"}", "'last_ns'", "integer", NULL);
	expect_400(fx, "/v1/snapshot", "{\"last\": \"5s\", \"last_ns\": 5}", "'last_ns'", NULL);
	expect_400(fx, "/v1/sessions", "{\"duration\": \"0ms\"}", "'duration'", "zero", NULL);
	expect_400(fx, "/v1/sessions", "{\"duration\": \"90m\"}", "'duration'", "limit of 1h", NULL);
	expect_400(fx, "/v1/sessions", "{\"cpu_sample_hz\": 0}", "'cpu_sample_hz'", "0 is out of range",
		   "1 to 10000", NULL);
	expect_400(fx, "/v1/sessions", "{\"cpu_sample_hz\": 10001}", "'cpu_sample_hz'",
		   "10001 is out of range", NULL);
	expect_400(fx, "/v1/sessions", "{\"cpu_sample_hz\": -99}", "'cpu_sample_hz'", "out of range",
		   NULL);
	expect_400(fx, "/v1/sessions", "{\"cpu_sample_hz\": \"999\"}", "'cpu_sample_hz'",
		   "must be an integer", "not a string", NULL);
	expect_400(fx, "/v1/sessions", "{\"cpu_sample_hz\": 99.5}", "'cpu_sample_hz'",
		   "must be an integer", NULL);
	assert_int_equal(fx->fake.calls, 0);
}

static void test_names(void **state)
{
	struct fixture *fx = *state;
	expect_400(fx, "/v1/snapshot", "{\"name\": \"../x\"}", "session name", "'/'", NULL);
	expect_400(fx, "/v1/snapshot", "{\"name\": \"..\"}", "session name", NULL);
	expect_400(fx, "/v1/snapshot", "{\"name\": \"a\\nb\"}", "session name", "\\x0a", NULL);
	expect_400(fx, "/v1/snapshot", "{\"name\": \"\"}", "session name", "empty", NULL);
	expect_400(fx, "/v1/sessions", "{\"run\": \"a/b\"}", "run name", NULL);
	expect_400(fx, "/v1/sessions",
		   "{\"name\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
		   "session name", "64 characters", NULL);
	expect_400(fx, "/v1/sessions", "{\"name\": 5}", "'name'", "must be a string", NULL);

	char reason[300], body[400];
	memset(reason, 'r', 256);
	reason[256] = '\0';
	snprintf(body, sizeof(body), "{\"reason\": \"%s\"}", reason);
	expect_400(fx, "/v1/snapshot", body, "'reason'", "255", NULL);
	reason[255] = '\0';
	snprintf(body, sizeof(body), "{\"reason\": \"%s\"}", reason);
	struct rp_err err;
	assert_int_equal(call(fx, "POST", "/v1/snapshot", body, NULL, &err), 0);
	assert_int_equal(strlen(fx->fake.snap.reason), 255);
	assert_int_equal(fx->fake.calls, 1);
}

static void test_body_shape(void **state)
{
	struct fixture *fx = *state;
	expect_400(fx, "/v1/snapshot", "{\"lst\": \"30s\"}", "unknown field 'lst'", "last, last_ns, end",
		   NULL);
	expect_400(fx, "/v1/sessions", "{\"last\": \"30s\"}", "unknown field 'last'", "duration", NULL);
	expect_400(fx, "/v1/snapshot", "[1, 2]", "an array", "JSON object", NULL);
	expect_400(fx, "/v1/snapshot", "\"30s\"", "a string", NULL);
	expect_400(fx, "/v1/sessions/abc/stop", "{\"now\": true}", "unknown field 'now'",
		   "the fields are pids", NULL);
	expect_400(fx, "/v1/sessions/abc/stop", "{\"pids\": [-1]}", "pids[0] is not a process id", NULL);
	expect_400(fx, "/v1/sessions/abc/keep", "{\"why\": 1}", "unknown field 'why'",
		   "POST /v1/sessions/ID/keep", "no fields", NULL);

	char out[4096];
	assert_int_equal(raw_post(fx, "/v1/snapshot", "{\"last\": ", out, sizeof(out)), 400);
	assert_non_null(strstr(out, "malformed JSON"));
	assert_int_equal(raw_post(fx, "/v1/snapshot", "{\"last\": \"1s\"} x", out, sizeof(out)), 400);
	assert_int_equal(raw_post(fx, "/v1/snapshot", "{\"name\": \"a\", \"name\": \"b\"}", out,
				  sizeof(out)), 400);
	assert_non_null(strstr(out, "duplicate"));
	assert_int_equal(raw_post(fx, "/v1/snapshot", "\xff\xfe", out, sizeof(out)), 400);
	/* The answer is JSON too. */
	json_t *j = json_loads(strstr(out, "\r\n\r\n") + 4, 0, NULL);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "error"), "status")), 400);
	json_decref(j);
	assert_int_equal(fx->fake.calls, 0);
}

static void test_too_big(void **state)
{
	struct fixture *fx = *state;
	size_t n = 100 << 10;
	char *big = malloc(n + 64);
	int len = snprintf(big, 64, "{\"reason\": \"");
	memset(big + len, 'x', n);
	strcpy(big + len + n, "\"}");
	/* Declared with Content-Length (the client's way). */
	json_t *body = json_loads(big, 0, NULL);
	assert_non_null(body);
	struct rp_err err = { 0 };
	int rc = rp_client_call(fx->client, "POST", "/v1/snapshot", body, NULL, &err);
	if (rc != -E2BIG || !strstr(err.msg, "64 KiB"))
		fail_msg("100 KiB body: %d, %s", rc, err.msg);
	json_decref(body);

	/* Chunked, so only the accumulated size tells. */
	size_t rl = n + 256;
	char *req = malloc(rl);
	int h = snprintf(req, rl,
			 "POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			 "Transfer-Encoding: chunked\r\n\r\n%zx\r\n", strlen(big));
	size_t off = (size_t)h;
	memcpy(req + off, big, strlen(big));
	off += strlen(big);
	memcpy(req + off, "\r\n0\r\n\r\n", 7);
	off += 7;
	char out[4096];
	assert_int_equal(raw(fx, req, off, out, sizeof(out)), 413);
	free(req);
	free(big);
	assert_int_equal(fx->fake.calls, 0);
}

static void test_paths_methods(void **state)
{
	struct fixture *fx = *state;
	struct rp_err err;
	json_t *resp = NULL;
	assert_int_equal(call(fx, "GET", "/v1/nothing", NULL, &resp, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/v1/nothing"));
	assert_int_equal(call(fx, "GET", "/v1/status/", NULL, &resp, &err), -ENOENT);
	assert_int_equal(call(fx, "POST", "/v1/sessions/abc/pause", NULL, &resp, &err), -ENOENT);
	assert_int_equal(call(fx, "GET", "/v1/sessions/", NULL, &resp, &err), -ENOENT);

	char out[4096];
	assert_int_equal(raw_str(fx, "POST /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
				 "Content-Length: 0\r\n\r\n", out, sizeof(out)), 405);
	assert_non_null(strcasestr(out, "\r\nAllow: GET\r\n"));
	assert_non_null(strstr(out, "\"status\":405"));
	assert_int_equal(raw_str(fx, "GET /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
				 out, sizeof(out)), 405);
	assert_non_null(strcasestr(out, "\r\nAllow: POST\r\n"));
	assert_int_equal(raw_str(fx, "DELETE /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
				 out, sizeof(out)), 405);
	assert_non_null(strcasestr(out, "\r\nAllow: GET, POST\r\n"));
	assert_int_equal(fx->fake.calls, 0);
}

static void test_sessions(void **state)
{
	struct fixture *fx = *state;
	struct rp_err err;
	json_t *resp = NULL;
	char out[4096];
	assert_int_equal(raw_post(fx, "/v1/sessions", "{\"duration\": \"2s\", \"name\": \"cap\"}", out,
				  sizeof(out)), 201);
	assert_int_equal(fx->fake.sess.duration_ns, 2000000000ull);
	assert_string_equal(fx->fake.sess.name, "cap");
	assert_string_equal(fx->fake.sess.source, "api");
	assert_int_equal(call(fx, "POST", "/v1/sessions", "{\"duration\": 1.5, \"reason\": \"r\"}", NULL,
			      &err), 0);
	assert_int_equal(fx->fake.sess.duration_ns, 1500000000ull);
	assert_string_equal(fx->fake.sess.reason, "r");
	assert_int_equal(fx->fake.sess.cpu_sample_hz, 0);
	assert_int_equal(call(fx, "POST", "/v1/sessions", "{\"cpu_sample_hz\": 999}", NULL, &err), 0);
	assert_int_equal(fx->fake.sess.cpu_sample_hz, 999);
	assert_int_equal(call(fx, "POST", "/v1/sessions", "{\"cpu_sample_hz\": 10000}", NULL, &err), 0);
	assert_int_equal(fx->fake.sess.cpu_sample_hz, 10000);

	assert_int_equal(call(fx, "GET", "/v1/sessions", NULL, &resp, &err), 0);
	assert_true(json_is_array(json_object_get(resp, "sessions")));
	json_decref(resp);
	assert_int_equal(call(fx, "GET", "/v1/sessions/2026_11_22_14_03_07", NULL, &resp, &err), 0);
	assert_string_equal(fx->fake.id, "2026_11_22_14_03_07");
	assert_string_equal(json_string_value(json_object_get(resp, "state")), "open");
	json_decref(resp);
	assert_int_equal(raw_post(fx, "/v1/sessions/abc/stop", "", out, sizeof(out)), 200);
	assert_string_equal(fx->fake.id, "abc");
	assert_non_null(strstr(out, "complete"));
	assert_int_equal(call(fx, "POST", "/v1/sessions/def/stop", "{}", NULL, &err), 0);
	assert_string_equal(fx->fake.id, "def");
	assert_int_equal(call(fx, "POST", "/v1/sessions/ghi/keep", NULL, &resp, &err), 0);
	assert_string_equal(fx->fake.id, "ghi");
	assert_true(json_is_true(json_object_get(resp, "keep")));
	json_decref(resp);
	assert_int_equal(raw_str(fx, "GET /v1/sessions/ghi/keep HTTP/1.1\r\nHost: x\r\n"
				 "Connection: close\r\n\r\n", out, sizeof(out)), 405);
	assert_non_null(strstr(out, "Allow: POST"));

	/* Ids go through the name rule before they reach the daemon. */
	int calls = fx->fake.calls;
	assert_int_equal(call(fx, "GET", "/v1/sessions/.hidden", NULL, &resp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "session id"));
	assert_int_equal(call(fx, "GET", "/v1/sessions/a%0Ab", NULL, &resp, &err), -EINVAL);
	assert_int_equal(call(fx, "GET", "/v1/sessions/..%2Fx", NULL, &resp, &err), -ENOENT);
	assert_int_equal(raw_str(fx, "GET /v1/sessions/%FF HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
				 out, sizeof(out)), 400);
	json_t *j = json_loads(strstr(out, "\r\n\r\n") + 4, 0, NULL);
	assert_non_null(j);
	json_decref(j);
	assert_int_equal(fx->fake.calls, calls);
}

static void test_source(void **state)
{
	struct fixture *fx = *state;
	char out[4096];
	const char *fmt = "POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			  "X-Ringprof-Client: %s\r\nContent-Length: 0\r\n\r\n";
	char req[512];
	snprintf(req, sizeof(req), fmt, "python");
	assert_int_equal(raw_str(fx, req, out, sizeof(out)), 201);
	assert_string_equal(fx->fake.snap.source, "python");
	snprintf(req, sizeof(req), fmt, "alertmanager");
	assert_int_equal(raw_str(fx, req, out, sizeof(out)), 201);
	assert_string_equal(fx->fake.snap.source, "alertmanager");
	snprintf(req, sizeof(req), fmt, "../../etc");
	assert_int_equal(raw_str(fx, req, out, sizeof(out)), 201);
	assert_string_equal(fx->fake.snap.source, "api");
}

static void test_op_errors(void **state)
{
	struct fixture *fx = *state;
	static const struct {
		int op_rc, client_rc, status;
	} cases[] = {
		{ -EINVAL, -EINVAL, 400 }, { -ENOENT, -ENOENT, 404 }, { -EALREADY, -EEXIST, 409 },
		{ -EEXIST, -EEXIST, 409 }, { -E2BIG, -E2BIG, 413 }, { -ENOSPC, -EAGAIN, 503 },
		{ -EROFS, -EAGAIN, 503 }, { -ESHUTDOWN, -EAGAIN, 503 }, { -EIO, -EIO, 500 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rp_err err;
		char want[64];
		snprintf(want, sizeof(want), "fake failure %d", cases[i].op_rc);
		fx->fake.next_rc = cases[i].op_rc;
		assert_int_equal(call(fx, "POST", "/v1/sessions/x/stop", NULL, NULL, &err), cases[i].client_rc);
		assert_string_equal(err.msg, want);
		fx->fake.next_rc = cases[i].op_rc;
		char out[4096];
		assert_int_equal(raw_str(fx, "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
					 out, sizeof(out)), cases[i].status);
		assert_non_null(strstr(out, want));
	}
	struct rp_err err;
	fx->fake.null_result = true;
	assert_int_equal(call(fx, "GET", "/v1/sessions", NULL, NULL, &err), -EIO);
	assert_non_null(strstr(err.msg, "bug"));
}

/* Alertmanager's payload: unknown fields are fine there (and only
 * there); a malformed one is a 400 naming the field. */
/* POST /v1/xla/endpoints: an address and a pid, checked before the op. */
static void test_xla_register(void **state)
{
	struct fixture *fx = *state;
	char out[4096];
	assert_int_equal(raw_post(fx, "/v1/xla/endpoints",
				  "{\"address\": \"127.0.0.1:9012\", \"pid\": 4242}", out, sizeof(out)),
			 201);
	assert_string_equal(fx->fake.xla_address, "127.0.0.1:9012");
	assert_int_equal(fx->fake.xla_pid, 4242);
	int calls = fx->fake.calls;
	expect_400(fx, "/v1/xla/endpoints", "{\"pid\": 1}", "'address' is required", NULL);
	expect_400(fx, "/v1/xla/endpoints", "{\"address\": \"nohost\", \"pid\": 1}",
		   "HOST:PORT", NULL);
	expect_400(fx, "/v1/xla/endpoints", "{\"address\": \"h:1,h:2\", \"pid\": 1}",
		   "HOST:PORT", NULL);
	expect_400(fx, "/v1/xla/endpoints", "{\"address\": \"h:1\", \"pid\": 0}", "'pid'", NULL);
	expect_400(fx, "/v1/xla/endpoints", "{\"address\": \"h:1\"}", "'pid'", NULL);
	expect_400(fx, "/v1/xla/endpoints", "{\"address\": \"h:1\", \"pid\": 1, \"x\": 2}", "x",
		   NULL);
	assert_int_equal(fx->fake.calls, calls);
}

static void test_alertmanager(void **state)
{
	struct fixture *fx = *state;
	char out[4096];
	assert_int_equal(raw_post(fx, "/v1/alertmanager",
				  "{\"version\": \"4\", \"receiver\": \"r\", \"groupKey\": \"k\", \"new\": 1,"
				  " \"alerts\": [{\"status\": \"firing\", \"labels\": {\"job\": \"j\"},"
				  " \"startsAt\": \"2026-01-01T00:00:00Z\", \"fingerprint\": \"f00\", \"extra\": []},"
				  " {\"status\": \"resolved\"}]}", out, sizeof(out)), 200);
	assert_non_null(strstr(out, "\"snapshots\""));
	assert_int_equal(fx->fake.alerts, 2);
	assert_string_equal(fx->fake.fingerprint, "f00");
	int calls = fx->fake.calls;
	expect_400(fx, "/v1/alertmanager", "{\"alerts\": [{\"status\": \"firing\"}]}",
		   "alerts[0].startsAt is missing", NULL);
	expect_400(fx, "/v1/alertmanager", "{\"receiver\": \"r\"}", "no 'alerts' array", "version", NULL);
	assert_int_equal(raw_post(fx, "/v1/alertmanager", "{\"alerts\": [", out, sizeof(out)), 400);
	assert_non_null(strstr(out, "malformed JSON"));
	assert_int_equal(raw_post(fx, "/v1/alertmanager", "", out, sizeof(out)), 400);
	assert_non_null(strstr(out, "body is empty"));
	assert_int_equal(fx->fake.calls, calls); /* none reached the daemon */
	assert_int_equal(raw_str(fx, "GET /v1/alertmanager HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
				 out, sizeof(out)), 405);
	fx->fake.next_rc = -ENOSPC;
	assert_int_equal(raw_post(fx, "/v1/alertmanager", "{\"alerts\": []}", out, sizeof(out)), 503);
}

static void test_metrics(void **state)
{
	struct fixture *fx = *state;
	char *text = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_client_get_text(fx->client, "/metrics", &text, &err), 0);
	assert_string_equal(text, "ringprof_sessions_open 0\n");
	free(text);
	char out[4096];
	assert_int_equal(raw_str(fx, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", out,
				 sizeof(out)), 200);
	assert_non_null(strcasestr(out, "Content-Type: text/plain; version=0.0.4"));
	fx->fake.next_rc = -EAGAIN;
	assert_int_equal(rp_client_get_text(fx->client, "/metrics", &text, &err), -EAGAIN);
}

/* ---- the socket ---- */

static void test_socket_mode(void **state)
{
	struct fixture *fx = *state;
	struct stat st;
	assert_int_equal(stat(fx->sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0660);
}

static void test_second_daemon(void **state)
{
	struct fixture *fx = *state;
	struct rp_api *second = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(start_api(fx, NULL, NULL, &second, &err), -EADDRINUSE);
	assert_null(second);
	assert_non_null(strstr(err.msg, "another ringprofd is already listening on"));
	assert_non_null(strstr(err.msg, fx->sock));
	/* The first one is untouched. */
	assert_int_equal(call(fx, "GET", "/v1/status", NULL, NULL, &err), 0);
}

static void test_stale_socket(void **state)
{
	struct fixture *fx = *state;
	rp_api_stop(fx->api);
	fx->api = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(call(fx, "GET", "/v1/status", NULL, NULL, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "no such socket: is the daemon running?"));
	assert_non_null(strstr(err.msg, "RINGPROF_SOCKET"));

	/* What a crashed daemon leaves: a socket file nobody listens on. */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = unix_addr(fx);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_int_equal(call(fx, "GET", "/v1/status", NULL, NULL, &err), -ECONNREFUSED);
	assert_non_null(strstr(err.msg, "nobody is listening"));
	assert_int_equal(start_api(fx, NULL, NULL, &fx->api, &err), 0);
	assert_int_equal(call(fx, "GET", "/v1/status", NULL, NULL, &err), 0);

	/* A regular file is not ours to delete. */
	rp_api_stop(fx->api);
	fx->api = NULL;
	FILE *f = fopen(fx->sock, "w");
	fclose(f);
	assert_int_equal(start_api(fx, NULL, NULL, &fx->api, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "not a socket"));
	unlink(fx->sock);
}

static void test_stop_removes_socket(void **state)
{
	struct fixture *fx = *state;
	rp_api_stop(fx->api);
	fx->api = NULL;
	struct stat st;
	assert_int_equal(lstat(fx->sock, &st), -1);
	assert_int_equal(errno, ENOENT);
}

static void *snapshot_thread(void *arg)
{
	struct fixture *fx = arg;
	struct rp_err err;
	intptr_t rc = call(fx, "POST", "/v1/snapshot", NULL, NULL, &err);
	return (void *)rc;
}

/* rp_api_stop lets a request in progress (a slow snapshot) finish. */
static void test_stop_finishes_requests(void **state)
{
	struct fixture *fx = *state;
	fx->fake.delay_ms = 400;
	pthread_t t;
	pthread_create(&t, NULL, snapshot_thread, fx);
	for (int i = 0; i < 200; i++) {
		pthread_mutex_lock(&fx->fake.lock);
		int calls = fx->fake.calls;
		pthread_mutex_unlock(&fx->fake.lock);
		if (calls)
			break;
		usleep(5000);
	}
	rp_api_stop(fx->api);
	fx->api = NULL;
	void *rc;
	pthread_join(t, &rc);
	assert_int_equal((intptr_t)rc, 0);
}

/* ---- limits against slow and flooding clients ---- */

static void restart(struct fixture *fx, struct rp_api_opts o, const char *tcp, const char *token)
{
	rp_api_stop(fx->api);
	o.socket_path = fx->sock;
	o.tcp_listen = tcp;
	o.token = token;
	o.max_duration_ns = HOUR_NS;
	struct rp_err err = { 0 };
	if (rp_api_start(&o, &fake_ops, &fx->fake, &fx->api, &err) < 0)
		fail_msg("%s", err.msg);
}

struct raw_call {
	struct fixture *fx;
	const char *request;
	int status;
	char out[2048];
};

static void *raw_thread(void *arg)
{
	struct raw_call *rc = arg;
	rc->status = raw_str(rc->fx, rc->request, rc->out, sizeof(rc->out));
	return NULL;
}

/* n copies of request at once; counts the answers with status ok, checks
 * that the rest are 503 with Retry-After naming `limit`. */
static int concurrent(struct fixture *fx, const char *request, int n, int ok, const char *limit)
{
	struct raw_call calls[16];
	pthread_t t[16];
	assert_true(n <= 16);
	for (int i = 0; i < n; i++) {
		calls[i] = (struct raw_call){ .fx = fx, .request = request };
		pthread_create(&t[i], NULL, raw_thread, &calls[i]);
	}
	int served = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(t[i], NULL);
		if (calls[i].status == ok) {
			served++;
			continue;
		}
		if (calls[i].status != 503 || !strstr(calls[i].out, "Retry-After: 1\r\n") ||
		    !strstr(calls[i].out, limit))
			fail_msg("expected %d or 503 naming %s: %s", ok, limit, calls[i].out);
	}
	return served;
}

/* Over max_snapshots, or over max_requests, the answer is 503 with
 * Retry-After at once: no reset, no queue without end. */
static void test_busy_answers_503(void **state)
{
	struct fixture *fx = *state;
	restart(fx, (struct rp_api_opts){ .max_requests = 3, .max_snapshots = 2 }, NULL, NULL);
	/* Each op takes 1.5 s, so all 8 requests arrive while the first run. */
	fx->fake.delay_ms = 1500;
	static const char snapshot[] = "POST /v1/snapshot HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
				       "Content-Length: 2\r\n\r\n{}";
	assert_int_equal(concurrent(fx, snapshot, 8, 201, "max_snapshots"), 2);
	static const char status[] = "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	assert_int_equal(concurrent(fx, status, 8, 200, "max_requests"), 3);
	fx->fake.delay_ms = 0;
	char out[2048];
	assert_int_equal(raw_str(fx, status, out, sizeof(out)), 200);
}

/* Stopping answers the requests still queued 503, and lets the running
 * ones finish. */
static void test_stop_answers_queued_requests(void **state)
{
	struct fixture *fx = *state;
	/* Five workers: one for snapshots, four more for any op. */
	restart(fx, (struct rp_api_opts){ .max_snapshots = 1 }, NULL, NULL);
	fx->fake.delay_ms = 1500;
	static const char status[] = "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	struct raw_call calls[8];
	pthread_t t[8];
	for (int i = 0; i < 8; i++) {
		calls[i] = (struct raw_call){ .fx = fx, .request = status };
		pthread_create(&t[i], NULL, raw_thread, &calls[i]);
	}
	/* The 5 workers are busy, 3 requests wait. */
	for (int i = 0, calls = 0; i < 200 && calls < 5; i++) {
		usleep(5000);
		pthread_mutex_lock(&fx->fake.lock);
		calls = fx->fake.calls;
		pthread_mutex_unlock(&fx->fake.lock);
	}
	usleep(100000);
	rp_api_stop(fx->api);
	fx->api = NULL;
	int ok = 0, refused = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		ok += calls[i].status == 200;
		refused += calls[i].status == 503 && strstr(calls[i].out, "shutting down") &&
			   strstr(calls[i].out, "Retry-After: 1\r\n");
	}
	assert_int_equal(ok, 5);
	assert_int_equal(refused, 3);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds until the daemon closes fd, sending a header line every 100 ms
 * meanwhile; -1 if it is still open after limit seconds. */
static double trickle_until_closed(int fd, double limit)
{
	double t0 = now_s();
	assert_true(write(fd, "GET /v1/status HTTP/1.1\r\n", 25) == 25);
	while (now_s() - t0 < limit) {
		usleep(100000);
		char buf[64];
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			return now_s() - t0;
		if (send(fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL) < 0)
			return now_s() - t0;
	}
	return -1;
}

static int unix_connect(struct fixture *fx)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = unix_addr(fx);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* The whole headers must come within header_timeout, however steadily
 * they trickle (the idle timeout alone never fires on these). */
static void test_header_deadline(void **state)
{
	struct fixture *fx = *state;
	restart(fx, (struct rp_api_opts){ .header_timeout_ns = 500000000 }, NULL, NULL);
	int fd = unix_connect(fx);
	double t = trickle_until_closed(fd, 5);
	close(fd);
	/* 0.5 s; up to 2.5 s for a loaded machine. */
	if (t < 0.4 || t > 2.5)
		fail_msg("a trickling client was closed after %.2f s, not about 0.5 s", t);
	assert_int_equal(fx->fake.calls, 0);
}

/* A full listener closes the connections that wait longest for their
 * headers, so that a client that sends its request gets in. */
static void test_full_listener_makes_room(void **state)
{
	struct fixture *fx = *state;
	restart(fx, (struct rp_api_opts){ .max_connections = 3, .header_timeout_ns = 60000000000ull },
		NULL, NULL);
	int idle[3];
	for (int i = 0; i < 3; i++)
		idle[i] = unix_connect(fx);
	usleep(400000);
	double t0 = now_s();
	char out[2048];
	assert_int_equal(raw_str(fx, "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
				 out, sizeof(out)), 200);
	/* The wait is 250 ms; up to 3 s for a loaded machine. */
	if (now_s() - t0 > 3)
		fail_msg("the request waited %.2f s for room", now_s() - t0);
	int closed = 0;
	for (int i = 0; i < 3; i++) {
		struct timeval tv = { .tv_sec = 3 };
		setsockopt(idle[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		char c;
		closed += recv(idle[i], &c, 1, 0) <= 0 && errno != EAGAIN;
		close(idle[i]);
	}
	assert_true(closed >= 1);
}

/* ---- TCP ---- */

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

static int tcp_call(const char *url, const char *token, struct rp_err *err)
{
	struct rp_client *c;
	struct rp_client_opts o = { .base_url = url, .token = token, .client_name = "cli" };
	assert_int_equal(rp_client_new(&o, &c, err), 0);
	json_t *resp = NULL;
	int rc = rp_client_call(c, "GET", "/v1/status", NULL, &resp, err);
	if (rc == 0)
		assert_string_equal(json_string_value(json_object_get(resp, "version")), "0.1.0");
	json_decref(resp);
	rp_client_free(c);
	return rc;
}

static void test_tcp_token(void **state)
{
	struct fixture *fx = *state;
	rp_api_stop(fx->api);
	fx->api = NULL;
	struct rp_err err = { 0 };
	char listen[64], url[64];
	int port = free_port();
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	assert_int_equal(start_api(fx, listen, NULL, &fx->api, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "token"));
	assert_int_equal(start_api(fx, "nonsense", "s3cret", &fx->api, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "host:port"));
	assert_int_equal(start_api(fx, listen, "s3cret", &fx->api, &err), 0);

	assert_int_equal(tcp_call(url, NULL, &err), -EACCES);
	assert_non_null(strstr(err.msg, "no bearer token"));
	assert_int_equal(tcp_call(url, "s3cre", &err), -EACCES);
	assert_non_null(strstr(err.msg, "wrong bearer token"));
	assert_int_equal(tcp_call(url, "s3cret!", &err), -EACCES);
	assert_int_equal(tcp_call(url, "s3cret", &err), 0);
	assert_int_equal(fx->fake.calls, 1);
	/* The Unix socket needs no token. */
	assert_int_equal(call(fx, "GET", "/v1/status", NULL, NULL, &err), 0);

	rp_api_stop(fx->api);
	fx->api = NULL;
	assert_int_equal(tcp_call(url, "s3cret", &err), -ECONNREFUSED);
	assert_non_null(strstr(err.msg, "tcp_listen"));
}

static int tcp_connect_from(const char *source, int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in src = { .sin_family = AF_INET };
	inet_pton(AF_INET, source, &src.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* One address gets max_connections_per_peer connections over TCP; the
 * next from it is closed at once, another address still gets in. */
static void test_tcp_peer_limit(void **state)
{
	struct fixture *fx = *state;
	int port = free_port();
	char listen[64], url[64];
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	restart(fx, (struct rp_api_opts){ .max_connections_per_peer = 2 }, listen, "s3cret");
	int held[2] = { tcp_connect_from("127.0.0.3", port), tcp_connect_from("127.0.0.3", port) };
	usleep(100000);
	int third = tcp_connect_from("127.0.0.3", port);
	struct timeval tv = { .tv_sec = 3 };
	setsockopt(third, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char c;
	ssize_t n = recv(third, &c, 1, 0);
	assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
	close(third);
	struct rp_err err = { 0 };
	assert_int_equal(tcp_call(url, "s3cret", &err), 0);
	close(held[0]);
	close(held[1]);
}

int main(void)
{
	/* The usual umask, which would leave the socket without group write. */
	umask(022);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_status, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_fields, setup, teardown),
		cmocka_unit_test_setup_teardown(test_snapshot_end, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ambiguous_framing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_durations, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_body_shape, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_big, setup, teardown),
		cmocka_unit_test_setup_teardown(test_paths_methods, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sessions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_source, setup, teardown),
		cmocka_unit_test_setup_teardown(test_op_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_alertmanager, setup, teardown),
		cmocka_unit_test_setup_teardown(test_xla_register, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metrics, setup, teardown),
		cmocka_unit_test_setup_teardown(test_socket_mode, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_daemon, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_removes_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_finishes_requests, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp_token, setup, teardown),
		cmocka_unit_test_setup_teardown(test_busy_answers_503, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_answers_queued_requests, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_listener_makes_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tcp_peer_limit, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
