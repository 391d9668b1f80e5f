/* Fuzz target for ringprofd's profiler service (daemon/profsvc.c): each
 * input, after the HTTP/2 client preface, is sent as raw bytes to the
 * real server on loopback TCP, with a window that answers at once, so
 * nghttp2's server session, the gRPC deframing, the header checks and the
 * request decoding all see it.  Whatever comes back must start with the
 * server's SETTINGS frame, and the server must go on answering. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "exchange.h"
#include "profiler.h"
#include "profsvc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
static struct sockaddr_in addr = { .sin_family = AF_INET };
static char addr_text[32];

static void check(int ok, const char *what)
{
	if (!ok) {
		fprintf(stderr, "fuzz-profsvc: %s\n", what);
		abort();
	}
}

static int window(void *ctx, uint64_t start_ns, uint64_t end_ns, const char *reason,
		  uint8_t **buf, size_t *len, struct rp_err *err)
{
	(void)ctx, (void)start_ns, (void)end_ns, (void)reason, (void)err;
	*buf = (uint8_t *)strdup("XSPACE");
	*len = 6;
	return *buf ? 0 : -12;
}

/* The server lives for the whole run, as in the daemon. */
static void start_server(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(addr);
	check(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
	      getsockname(fd, (struct sockaddr *)&addr, &len) == 0, "no free port");
	close(fd);
	snprintf(addr_text, sizeof(addr_text), "127.0.0.1:%d", ntohs(addr.sin_port));
	struct rp_profsvc_opts o = { .listen = addr_text, .snapshot_ns = 1000000,
				     .max_duration_ns = 1000000000, .request_timeout_ns = 2000000000,
				     .window = window };
	struct rp_profsvc *s;
	struct rp_err err = { 0 };
	if (rp_profsvc_start(&o, &s, &err) < 0) {
		fprintf(stderr, "fuzz-profsvc: %s\n", err.msg);
		abort();
	}
}

/* Sends the preface and the input, ends the writing side, and reads
 * until the server closes or is quiet for 30 ms. */
static size_t exchange(const uint8_t *data, size_t size, uint8_t *out, size_t cap)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	check(fd >= 0, "socket failed");
	check(connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "the server is gone");
	(void)!send(fd, preface, sizeof(preface) - 1, MSG_NOSIGNAL);
	return fuzz_exchange(fd, data, size, out, cap, 30);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int started;
	if (!started) {
		start_server();
		started = 1;
	}
	uint8_t out[9];
	size_t got = exchange(data, size, out, sizeof(out));
	check(got == 0 || (got == sizeof(out) && out[3] == 4 /* SETTINGS */),
	      "an answer that is not HTTP/2");
	/* Still serving: a call of the project's own client is answered. */
	struct rp_err err = { 0 };
	if (rp_xla_stop_continuous(addr_text, 10000, &err) < 0) {
		fprintf(stderr, "fuzz-profsvc: the server stopped answering: %s\n", err.msg);
		abort();
	}
	return 0;
}
