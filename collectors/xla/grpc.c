/* A unary gRPC call on nghttp2 (see grpc.h).  One connection per call:
 * the profiler server handles one session at a time anyway, and a fresh
 * connection leaves no state behind after a peer misbehaved. */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "grpc.h"

#define GRPC_PREFIX 5
/* Flow-control window offered to the server: large, so a big XSpace
 * streams without waiting for a WINDOW_UPDATE per 64 KiB. */
#define RECV_WINDOW (1 << 24)
#define READ_CHUNK 65536

static const char *const status_names[] = {
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
};
enum { GRPC_DEADLINE_EXCEEDED = 4, GRPC_UNIMPLEMENTED = 12 };

void rp_grpc_deframer_init(struct rp_grpc_deframer *d, size_t max)
{
	memset(d, 0, sizeof(*d));
	d->max = max;
	d->what = "response";
}

void rp_grpc_deframer_free(struct rp_grpc_deframer *d)
{
	free(d->msg);
	d->msg = NULL;
}

int rp_grpc_deframe(struct rp_grpc_deframer *d, const uint8_t *data, size_t len,
		    struct rp_err *err)
{
	while (len) {
		if (d->messages)
			return rp_err_set(err, -EBADMSG, "the %s holds more than one gRPC "
					  "message, but the method is unary", d->what);
		if (d->prefix_have < GRPC_PREFIX) {
			size_t n = GRPC_PREFIX - d->prefix_have;
			n = n < len ? n : len;
			memcpy(d->prefix + d->prefix_have, data, n);
			d->prefix_have += n, data += n, len -= n;
			if (d->prefix_have < GRPC_PREFIX)
				break;
			if (d->prefix[0] != 0)
				return rp_err_set(err, -EBADMSG, "the %s message is compressed "
						  "(flag %u), which was not asked for", d->what,
						  d->prefix[0]);
			d->want = (uint32_t)d->prefix[1] << 24 | (uint32_t)d->prefix[2] << 16 |
				  (uint32_t)d->prefix[3] << 8 | d->prefix[4];
			if (d->want > d->max)
				return rp_err_set(err, -EMSGSIZE, "the %s announces %u bytes, "
						  "more than the cap of %zu%s", d->what, d->want,
						  d->max, strcmp(d->what, "response") ? "" :
						  ": raise the cap or profile a shorter window");
		}
		size_t n = d->want - d->have;
		n = n < len ? n : len;
		if (d->have + n > d->cap) {
			/* Grow with what arrives, not with what the prefix claims. */
			size_t cap = d->cap ? d->cap * 2 : READ_CHUNK;
			cap = cap < d->have + n ? d->have + n : cap;
			cap = cap > d->want ? d->want : cap;
			uint8_t *m = realloc(d->msg, cap);
			if (!m)
				return rp_err_set(err, -ENOMEM, "out of memory for a %u-byte %s",
						  d->want, d->what);
			d->msg = m, d->cap = cap;
		}
		if (n)
			memcpy(d->msg + d->have, data, n);
		d->have += n, data += n, len -= n;
		if (d->have == d->want)
			d->messages++;
	}
	return 0;
}

int rp_grpc_deframe_end(const struct rp_grpc_deframer *d, struct rp_err *err)
{
	if (d->messages == 1)
		return 0;
	if (d->prefix_have < GRPC_PREFIX)
		return rp_err_set(err, -EBADMSG, "the %s ended %s", d->what,
				  d->prefix_have ? "inside a gRPC message prefix" :
				  "without a message");
	return rp_err_set(err, -ECONNRESET, "the %s ended after %zu of the %u bytes "
			  "its prefix announced", d->what, d->have, d->want);
}

struct call {
	int32_t stream_id;
	const uint8_t *req;
	size_t req_len, req_sent;
	struct rp_grpc_deframer body;
	int body_err;
	struct rp_err *err;
	int http_status;
	bool is_grpc;
	int grpc_status; /* -1 until the trailers (or a trailers-only reply) */
	char grpc_message[256];
	bool closed;
	uint32_t reset_code;
	char h2_error[160]; /* nghttp2's account of a connection error */
};

static ssize_t read_request(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t len,
			    uint32_t *flags, nghttp2_data_source *src, void *user)
{
	(void)s, (void)stream, (void)src;
	struct call *c = user;
	size_t n = c->req_len - c->req_sent;
	n = n < len ? n : len;
	memcpy(buf, c->req + c->req_sent, n);
	c->req_sent += n;
	if (c->req_sent == c->req_len)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

static int hex_digit(uint8_t c)
{
	return c >= '0' && c <= '9' ? c - '0' :
	       (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* grpc-message is percent-encoded; decode it for the error message. */
static void percent_decode(char *out, size_t cap, const uint8_t *in, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < len && o + 1 < cap; i++) {
		int hi = in[i] == '%' && i + 2 < len ? hex_digit(in[i + 1]) : -1;
		int lo = hi >= 0 ? hex_digit(in[i + 2]) : -1;
		if (lo >= 0) {
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = (char)in[i];
		}
	}
	out[o] = 0;
}

static bool header_is(const uint8_t *name, size_t len, const char *want)
{
	return len == strlen(want) && !memcmp(name, want, len);
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user)
{
	(void)s, (void)flags;
	struct call *c = user;
	if (f->hd.stream_id != c->stream_id)
		return 0;
	char v[32];
	snprintf(v, sizeof(v), "%.*s", (int)(valuelen < 31 ? valuelen : 31), (const char *)value);
	if (header_is(name, namelen, ":status"))
		c->http_status = atoi(v);
	else if (header_is(name, namelen, "content-type"))
		c->is_grpc = valuelen >= 16 && !memcmp(value, "application/grpc", 16);
	else if (header_is(name, namelen, "grpc-status"))
		c->grpc_status = atoi(v);
	else if (header_is(name, namelen, "grpc-message"))
		percent_decode(c->grpc_message, sizeof(c->grpc_message), value, valuelen);
	return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data,
		   size_t len, void *user)
{
	(void)s, (void)flags;
	struct call *c = user;
	if (stream != c->stream_id || c->body_err)
		return 0;
	c->body_err = rp_grpc_deframe(&c->body, data, len, c->err);
	/* Stop reading at once: a body over the cap is not downloaded. */
	return c->body_err ? NGHTTP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_close(nghttp2_session *s, int32_t stream, uint32_t code, void *user)
{
	(void)s;
	struct call *c = user;
	if (stream == c->stream_id) {
		c->closed = true;
		c->reset_code = code;
	}
	return 0;
}

static int on_error(nghttp2_session *s, int code, const char *msg, size_t len, void *user)
{
	(void)s, (void)code;
	struct call *c = user;
	if (!c->h2_error[0])
		snprintf(c->h2_error, sizeof(c->h2_error), "%.*s", (int)len, msg);
	return 0;
}

int rp_grpc_split_addr(const char *addr, char *host, size_t host_size, const char **port,
		       struct rp_err *err)
{
	const char *colon = strrchr(addr, ':');
	const char *h = addr;
	size_t hlen = colon ? (size_t)(colon - addr) : 0;
	if (hlen >= 2 && addr[0] == '[' && addr[hlen - 1] == ']')
		h++, hlen -= 2;
	if (!colon || !hlen || hlen >= host_size || !colon[1])
		return rp_err_set(err, -EINVAL, "\"%s\" is not HOST:PORT", addr);
	memcpy(host, h, hlen);
	host[hlen] = 0;
	*port = colon + 1;
	return 0;
}

/* Resolve "host:port" / "[v6]:port" and connect, non-blocking. */
static int start_connect(const char *addr, int *fd_out, struct rp_err *err)
{
	char host[256];
	const char *port;
	int r = rp_grpc_split_addr(addr, host, sizeof(host), &port, err);
	if (r < 0)
		return r;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai;
	r = getaddrinfo(host, port, &hints, &ai);
	if (r)
		return rp_err_set(err, r == EAI_SERVICE ? -EINVAL : -EHOSTUNREACH,
				  "cannot resolve %s: %s", addr, gai_strerror(r));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		freeaddrinfo(ai);
		return rp_err_set(err, r, "socket: %s", strerror(-r));
	}
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	r = connect(fd, ai->ai_addr, ai->ai_addrlen) ? -errno : 0;
	freeaddrinfo(ai);
	if (r && r != -EINPROGRESS) {
		close(fd);
		return rp_err_set(err, r, "cannot connect to %s: %s", addr, strerror(-r));
	}
	*fd_out = fd;
	return 0;
}

static int remaining_ms(uint64_t deadline)
{
	uint64_t now = rp_clock_now_ns();
	uint64_t ms = now >= deadline ? 0 : (deadline - now + 999999) / 1000000;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Wait for events on fd until the deadline: revents, or -ETIMEDOUT. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		int ms = remaining_ms(deadline);
		if (!ms)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, ms);
		if (r > 0)
			return p.revents;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int finish_connect(int fd, const char *addr, uint64_t deadline, struct rp_err *err)
{
	int r = wait_fd(fd, POLLOUT, deadline);
	if (r == -ETIMEDOUT)
		return rp_err_set(err, r, "connecting to %s timed out", addr);
	int so = 0;
	socklen_t sl = sizeof(so);
	if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl))
		so = r < 0 ? -r : errno;
	if (so == ECONNREFUSED)
		return rp_err_set(err, -ECONNREFUSED, "connection to %s refused: is the workload's "
				  "profiler server running (jax.profiler.start_server(PORT))?", addr);
	return so ? rp_err_set(err, -so, "cannot connect to %s: %s", addr, strerror(so)) : 0;
}

/* Write what nghttp2 has queued, then read one batch; until the stream
 * closes, the deadline passes, or an error. */
static int pump(nghttp2_session *s, int fd, struct call *c, const char *addr, uint64_t deadline)
{
	uint8_t *buf = malloc(READ_CHUNK);
	int r = buf ? 0 : -ENOMEM, h2_error = 0;
	while (!r && !c->closed && !c->body_err) {
		const uint8_t *out;
		ssize_t n;
		while (!r && (n = nghttp2_session_mem_send(s, &out)) > 0) {
			for (ssize_t off = 0; !r && off < n;) {
				ssize_t w = send(fd, out + off, (size_t)(n - off), MSG_NOSIGNAL);
				if (w > 0)
					off += w;
				else if (w < 0 && errno == EAGAIN)
					r = wait_fd(fd, POLLOUT, deadline) < 0 ? -ETIMEDOUT : 0;
				else
					r = -(w < 0 ? errno : EPIPE);
			}
		}
		if (!r && n < 0) {
			h2_error = (int)n;
			r = -EPROTO;
		}
		if (r)
			break;
		int ev = wait_fd(fd, POLLIN, deadline);
		if (ev < 0) {
			r = ev;
			break;
		}
		ssize_t got = recv(fd, buf, READ_CHUNK, 0);
		if (got < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (got <= 0) {
			r = got ? -errno : -ECONNRESET;
			break;
		}
		ssize_t used = nghttp2_session_mem_recv(s, buf, (size_t)got);
		if (used < 0 && !c->body_err) {
			h2_error = (int)used;
			r = -EPROTO;
		} else if (!c->closed && !nghttp2_session_want_read(s) &&
			   !nghttp2_session_want_write(s)) {
			r = -ECONNRESET; /* the session ended: GOAWAY or an error */
		}
	}
	free(buf);
	if (c->body_err)
		return c->body_err;
	if ((r == -ECONNRESET || r == -EPROTO) && c->h2_error[0])
		return rp_err_set(c->err, -EPROTO, "%s does not speak HTTP/2 (gRPC) as expected: "
				  "%s", addr, c->h2_error);
	switch (r) {
	case 0:
		return 0;
	case -ETIMEDOUT:
		return rp_err_set(c->err, r, "%s did not answer within the deadline", addr);
	case -EPROTO:
		return rp_err_set(c->err, r, "%s does not speak HTTP/2 (gRPC): the connection "
				  "broke down (%s)", addr, nghttp2_strerror(h2_error));
	case -ECONNRESET:
	case -EPIPE:
		return rp_err_set(c->err, -ECONNRESET, "%s closed the connection mid-response",
				  addr);
	default:
		return rp_err_set(c->err, r, "talking to %s: %s", addr, strerror(-r));
	}
}

/* What the finished call amounts to: the status first, then the body. */
static int call_result(struct call *c, const char *addr, const char *path)
{
	if (c->http_status && c->http_status != 200)
		return rp_err_set(c->err, -EBADMSG, "%s answered %s with HTTP status %d: not a "
				  "gRPC server?", addr, path, c->http_status);
	if (c->grpc_status > 0) {
		int code = c->grpc_status;
		const char *name = code < (int)(sizeof(status_names) / sizeof(*status_names)) ?
			status_names[code] : "(unknown code)";
		int e = code == GRPC_UNIMPLEMENTED ? -ENOSYS :
			code == GRPC_DEADLINE_EXCEEDED ? -ETIMEDOUT : -EREMOTEIO;
		return rp_err_set(c->err, e, "%s%s: grpc-status %d %s: %s", addr, path, code, name,
				  c->grpc_message[0] ? c->grpc_message : "(no grpc-message)");
	}
	if (c->reset_code)
		return rp_err_set(c->err, -ECONNRESET, "%s reset the stream of %s (HTTP/2 error %u)",
				  addr, path, c->reset_code);
	if (!c->http_status || !c->is_grpc)
		return rp_err_set(c->err, -EBADMSG, "%s did not answer %s as a gRPC server "
				  "(no application/grpc response)", addr, path);
	if (c->grpc_status < 0)
		return rp_err_set(c->err, -ECONNRESET, "%s ended %s without a grpc-status",
				  addr, path);
	return rp_grpc_deframe_end(&c->body, c->err);
}

static int run_call(int fd, struct call *c, const char *addr, const char *path,
		    unsigned timeout_ms, uint64_t deadline)
{
	nghttp2_session_callbacks *cb;
	if (nghttp2_session_callbacks_new(&cb))
		return rp_err_set(c->err, -ENOMEM, "out of memory");
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
	nghttp2_session_callbacks_set_error_callback2(cb, on_error);
	nghttp2_session *s;
	int r = nghttp2_session_client_new(&s, cb, c);
	nghttp2_session_callbacks_del(cb);
	if (r)
		return rp_err_set(c->err, -ENOMEM, "out of memory");
	nghttp2_settings_entry settings[] = {
		{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
		{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, RECV_WINDOW},
	};
	char timeout[24];
	snprintf(timeout, sizeof(timeout), "%um", timeout_ms);
#define HDR(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
	const nghttp2_nv headers[] = {
		HDR(":method", "POST"), HDR(":scheme", "http"), HDR(":path", path),
		HDR(":authority", addr), HDR("content-type", "application/grpc"),
		HDR("te", "trailers"), HDR("grpc-timeout", timeout),
		HDR("user-agent", "ringprof/" RINGPROF_VERSION),
	};
#undef HDR
	nghttp2_data_provider body = {.read_callback = read_request};
	r = nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, settings,
				    sizeof(settings) / sizeof(*settings));
	if (!r)
		r = nghttp2_session_set_local_window_size(s, NGHTTP2_FLAG_NONE, 0, RECV_WINDOW);
	if (!r) {
		c->stream_id = nghttp2_submit_request(s, NULL, headers,
						      sizeof(headers) / sizeof(*headers), &body, c);
		r = c->stream_id < 0 ? c->stream_id : 0;
	}
	r = r ? rp_err_set(c->err, -ENOMEM, "cannot queue the request: %s", nghttp2_strerror(r)) :
		pump(s, fd, c, addr, deadline);
	nghttp2_session_del(s);
	return r ? r : call_result(c, addr, path);
}

int rp_grpc_unary(const char *addr, const char *path, const uint8_t *req, size_t req_len,
		  unsigned timeout_ms, size_t max_response, uint8_t **resp, size_t *resp_len,
		  struct rp_err *err)
{
	*resp = NULL;
	*resp_len = 0;
	if (req_len > UINT32_MAX - GRPC_PREFIX)
		return rp_err_set(err, -EMSGSIZE, "request of %zu bytes is too large", req_len);
	uint64_t deadline = rp_clock_now_ns() + (uint64_t)timeout_ms * 1000000u;
	uint8_t *framed = malloc(req_len + GRPC_PREFIX);
	if (!framed)
		return rp_err_set(err, -ENOMEM, "out of memory");
	framed[0] = 0;
	for (int i = 0; i < 4; i++)
		framed[1 + i] = (uint8_t)(req_len >> (24 - 8 * i));
	if (req_len)
		memcpy(framed + GRPC_PREFIX, req, req_len);
	struct call c = {.req = framed, .req_len = req_len + GRPC_PREFIX, .err = err,
			 .grpc_status = -1};
	rp_grpc_deframer_init(&c.body, max_response);
	int fd = -1;
	int r = start_connect(addr, &fd, err);
	if (!r)
		r = finish_connect(fd, addr, deadline, err);
	if (!r)
		r = run_call(fd, &c, addr, path, timeout_ms, deadline);
	if (!r) {
		*resp = c.body.msg;
		*resp_len = c.body.have;
		c.body.msg = NULL;
	}
	if (fd >= 0)
		close(fd);
	rp_grpc_deframer_free(&c.body);
	free(framed);
	return r;
}
