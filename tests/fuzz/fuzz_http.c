/* Fuzz target for the control API's request handling: each input is sent
 * as raw bytes to the real server (daemon/api.c over libmicrohttpd) on a
 * Unix socket, with ops that answer canned documents, so the parser,
 * the router, the token-free checks, the framing rules, the body limits
 * and the JSON field parsers all see it.  Whatever comes back must be an
 * HTTP/1.1 answer (or nothing, when the input is not a request), and the
 * server must go on answering. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "alerts.h"
#include "api.h"
#include "exchange.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int canned(json_t **out, struct rp_err *err)
{
	*out = json_pack("{s:s}", "id", "fuzz");
	return *out ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
}

static int op_status(void *ctx, json_t **out, struct rp_err *err)
{
	(void)ctx;
	return canned(out, err);
}

static int op_snapshot(void *ctx, const struct rp_snapshot_req *req, json_t **out,
		       struct rp_err *err)
{
	(void)ctx;
	(void)req;
	return canned(out, err);
}

static int op_start(void *ctx, const struct rp_session_req *req, json_t **out,
		    struct rp_err *err)
{
	(void)ctx;
	(void)req;
	return canned(out, err);
}

static int op_id(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	(void)ctx;
	(void)id;
	return canned(out, err);
}

static int op_stop(void *ctx, const char *id, const struct rp_stop_req *req, json_t **out,
		   struct rp_err *err)
{
	(void)req;
	return op_id(ctx, id, out, err);
}

static int op_metrics(void *ctx, char **text, struct rp_err *err)
{
	(void)ctx;
	*text = strdup("ringprof_up 1\n");
	return *text ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
}

static int op_alertmanager(void *ctx, const struct rp_alert_batch *alerts, json_t **out,
			   struct rp_err *err)
{
	(void)ctx;
	(void)alerts;
	return canned(out, err);
}

static int op_xla_register(void *ctx, const char *address, uint32_t pid, json_t **out,
			   struct rp_err *err)
{
	(void)ctx;
	(void)address;
	(void)pid;
	return canned(out, err);
}

static const struct rp_api_ops ops = {
	.status = op_status,
	.snapshot = op_snapshot,
	.session_start = op_start,
	.session_stop = op_stop,
	.session_keep = op_id,
	.session_list = op_status,
	.session_get = op_id,
	.metrics = op_metrics,
	.alertmanager = op_alertmanager,
	.xla_register = op_xla_register,
};

static struct sockaddr_un addr = { .sun_family = AF_UNIX };

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz-http: %s\n", what);
		abort();
	}
}

/* The server lives for the whole run, as in the daemon. */
static void start_server(void)
{
	static char dir[] = "/tmp/rp-fuzz-http-XXXXXX";
	check(mkdtemp(dir) != NULL, "cannot make a directory for the socket");
	snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/api.sock", dir);
	struct rp_api_opts o = { .socket_path = addr.sun_path,
				 .max_duration_ns = 3600 * 1000000000ull,
				 .header_timeout_ns = 2 * 1000000000ull };
	struct rp_api *api;
	struct rp_err err = { 0 };
	if (rp_api_start(&o, &ops, NULL, &api, &err) < 0) {
		fprintf(stderr, "fuzz-http: %s\n", err.msg);
		abort();
	}
}

/* Sends the input, ends the writing side, reads until the server closes
 * or is quiet for wait_ms: a request whose body is shorter than its
 * Content-Length is left for the server's idle timeout to end. */
static size_t exchange(const uint8_t *data, size_t size, char *out, size_t cap, int wait_ms)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	check(fd >= 0, "socket failed");
	check(connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "the server is gone");
	return fuzz_exchange(fd, data, size, out, cap, wait_ms);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int started;
	if (!started) {
		start_server();
		started = 1;
	}
	char out[16];
	size_t got = exchange(data, size, out, sizeof(out), 30);
	check(got == 0 || (got >= 9 && !memcmp(out, "HTTP/1.1 ", 9)) ||
	      (got >= 9 && !memcmp(out, "HTTP/1.0 ", 9)), "an answer that is not HTTP");
	/* Still serving: a status request gets its 200. */
	static const char status[] = "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	got = exchange((const uint8_t *)status, sizeof(status) - 1, out, sizeof(out), 10000);
	check(got >= 12 && !memcmp(out, "HTTP/1.1 200", 12), "the server stopped answering");
	return 0;
}
