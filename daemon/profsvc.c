/* tensorflow.ProfilerService for XProf (see profsvc.h): nghttp2's server
 * session does HTTP/2, grpc.h's deframer reads the request message, and
 * protobuf-c (collectors/xla/proto) decodes requests and encodes replies. */
#include "profsvc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "grpc.h"
#include "profiler_service.pb-c.h"

#define MAX_CONNECTIONS 16
#define MAX_STREAMS 4            /* per connection, announced in SETTINGS */
#define MAX_WINDOWS 4            /* Profile/GetSnapshot being served at once */
#define MAX_REQUEST (64 * 1024)  /* the largest request message */
#define MAX_HEADER_BYTES 8192    /* a stream's header names and values */
#define MAX_RESPONSE (2 * RP_PROFSVC_MAX_XSPACE + 4096) /* tool_data and xspace */
#define READ_CHUNK 16384
#define REFUSAL_LOG_NS 10000000000ull  /* refused connections: one line per 10 s */
#define GRPC_PREFIX 5

struct call;

enum grpc_code {
	G_OK = 0, G_INVALID_ARGUMENT = 3, G_RESOURCE_EXHAUSTED = 8, G_UNIMPLEMENTED = 12,
	G_INTERNAL = 13, G_UNAVAILABLE = 14,
};

struct rp_profsvc {
	struct rp_profsvc_opts o;
	char listen[64];
	uint64_t request_timeout_ns;
	int listen_fd, wake_fd;
	pthread_t loop;
	struct conn *conns[MAX_CONNECTIONS];
	unsigned nconns;
	uint64_t refused, refusal_logged_ns;

	/* Shared with the window workers. */
	pthread_mutex_t lock;
	pthread_cond_t cond;     /* workers wait on it for their window's end; stop wakes them */
	bool stopping;
	unsigned workers;        /* running */
	struct job *done;        /* finished, for the loop to answer */
};

struct conn {
	struct rp_profsvc *svc;
	int fd;
	nghttp2_session *h2;
	char peer[64];
	uint64_t deadline_ns;    /* for a complete request; 0 while windows are pending */
	unsigned pending;        /* calls waiting for a worker */
	struct call *calls;      /* its open streams (nghttp2_session_del does not close them) */
};

/* A method of the service; NULL serve: UNIMPLEMENTED. */
struct method {
	const char *name;
	void (*serve)(struct call *c, const uint8_t *msg, size_t len);
};

/* One RPC: an HTTP/2 stream. */
struct call {
	struct conn *conn;
	struct call *prev, *next;
	int32_t stream_id;
	const struct method *method;
	bool not_grpc;           /* POST with application/grpc, or not */
	size_t header_bytes;
	struct rp_grpc_deframer in;
	bool answered;
	struct job *job;         /* while a worker has it */
	uint8_t *body;           /* the framed response message */
	size_t body_len, sent;
};

/* A window to wait for and write, on a worker thread. */
struct job {
	struct job *next;
	struct rp_profsvc *svc;
	struct call *call;       /* loop thread only; NULL once the call is gone */
	atomic_bool cancelled;
	uint64_t start_ns, end_ns;
	bool emit_xspace;
	char reason[128];
	int rc;
	struct rp_err err;
	uint8_t *body;
	size_t body_len;
};

static void log_peer(const struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_peer(const struct conn *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ringprofd: profiler service: %s: %s\n", c->peer, msg);
}

/* ---- answers ---- */

static uint8_t *frame(size_t len)
{
	uint8_t *b = malloc(GRPC_PREFIX + len);
	if (b) {
		b[0] = 0;
		for (int i = 0; i < 4; i++)
			b[1 + i] = (uint8_t)(len >> (24 - 8 * i));
	}
	return b;
}

/* grpc-message is percent-encoded: printable ASCII but '%' as is. */
static void percent_encode(const char *in, char *out, size_t size)
{
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)in; *p && n + 4 < size; p++) {
		if (*p >= 0x20 && *p < 0x7f && *p != '%')
			out[n++] = (char)*p;
		else
			n += (size_t)snprintf(out + n, size - n, "%%%02X", *p);
	}
	out[n] = 0;
}

#define NV(n, v) { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }

static ssize_t read_body(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t length,
			 uint32_t *flags, nghttp2_data_source *src, void *user)
{
	(void)user;
	struct call *c = src->ptr;
	size_t n = c->body_len - c->sent;
	n = n < length ? n : length;
	memcpy(buf, c->body + c->sent, n);
	c->sent += n;
	if (c->sent == c->body_len) {
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		const nghttp2_nv trailers[] = { NV("grpc-status", "0") };
		if (nghttp2_submit_trailer(h2, stream_id, trailers, 1) != 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	return (ssize_t)n;
}

/* OK with body (framed, taken over), or a Trailers-Only error. */
static void answer(struct call *c, int code, const char *msg, uint8_t *body, size_t body_len)
{
	c->answered = true;
	struct conn *conn = c->conn;
	if (!conn->pending)
		conn->deadline_ns = rp_clock_now_ns() + conn->svc->request_timeout_ns;
	int rc;
	if (code == G_OK) {
		c->body = body, c->body_len = body_len, c->sent = 0;
		const nghttp2_nv hdrs[] = { NV(":status", "200"), NV("content-type", "application/grpc") };
		nghttp2_data_provider dp = { .source.ptr = c, .read_callback = read_body };
		rc = nghttp2_submit_response(conn->h2, c->stream_id, hdrs, 2, &dp);
	} else {
		free(body);
		char status[16], text[1024];
		snprintf(status, sizeof(status), "%d", code);
		percent_encode(msg, text, sizeof(text));
		const nghttp2_nv hdrs[] = { NV(":status", "200"), NV("content-type", "application/grpc"),
					    NV("grpc-status", status), NV("grpc-message", text) };
		rc = nghttp2_submit_response(conn->h2, c->stream_id, hdrs, 4, NULL);
	}
	if (rc != 0)
		log_peer(conn, "cannot answer stream %d: %s", c->stream_id, nghttp2_strerror(rc));
}

/* An empty message, the reply of the calls that only acknowledge. */
static void answer_empty(struct call *c)
{
	uint8_t *b = frame(0);
	if (b)
		answer(c, G_OK, NULL, b, GRPC_PREFIX);
	else
		answer(c, G_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
}

/* ---- windows, on worker threads ---- */

/* ProfileResponse{tool_data {name "xplane.pb", data}, empty_trace,
 * xspace (when asked)}, framed. */
static int encode_profile(struct job *j, uint8_t *xspace, size_t len)
{
	Tensorflow__ProfileToolData td = TENSORFLOW__PROFILE_TOOL_DATA__INIT;
	td.name = "xplane.pb";
	td.data = (ProtobufCBinaryData){ len, xspace };
	Tensorflow__ProfileToolData *tds[] = { &td };
	Tensorflow__ProfileResponse r = TENSORFLOW__PROFILE_RESPONSE__INIT;
	r.n_tool_data = 1, r.tool_data = tds;
	r.empty_trace = len == 0;
	if (j->emit_xspace)
		r.xspace = td.data;
	size_t n = tensorflow__profile_response__get_packed_size(&r);
	if (n > MAX_RESPONSE)
		return rp_err_set(&j->err, -EFBIG, "the response would be %zu bytes, more than "
				  "the %zu served; ask for a shorter window (the session is in "
				  "ringprofd's log directory)", n, MAX_RESPONSE);
	if (!(j->body = frame(n)))
		return rp_err_set(&j->err, -ENOMEM, "out of memory for a %zu-byte response", n);
	j->body_len = GRPC_PREFIX + tensorflow__profile_response__pack(&r, j->body + GRPC_PREFIX);
	return 0;
}

static void *window_main(void *arg)
{
	struct job *j = arg;
	struct rp_profsvc *s = j->svc;
	pthread_mutex_lock(&s->lock);
	for (;;) {
		uint64_t now = rp_clock_now_ns();
		if (s->stopping || atomic_load(&j->cancelled) || now >= j->end_ns)
			break;
		uint64_t wait = j->end_ns - now;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)(wait / 1000000000u);
		ts.tv_nsec += (long)(wait % 1000000000u);
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		(void)pthread_cond_timedwait(&s->cond, &s->lock, &ts);
	}
	bool go = !s->stopping && !atomic_load(&j->cancelled);
	pthread_mutex_unlock(&s->lock);
	if (!go) {
		j->rc = rp_err_set(&j->err, -ECANCELED, "cancelled");
	} else {
		uint8_t *xspace = NULL;
		size_t len = 0;
		j->rc = s->o.window(s->o.ctx, j->start_ns, j->end_ns, j->reason, &xspace, &len, &j->err);
		if (j->rc == 0)
			j->rc = encode_profile(j, xspace, len);
		free(xspace);
	}
	pthread_mutex_lock(&s->lock);
	j->next = s->done;
	s->done = j;
	s->workers--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	uint64_t one = 1;
	(void)!write(s->wake_fd, &one, sizeof(one));
	return NULL;
}

/* Serve [start_ns, start_ns + duration_ns] once it has ended. */
static void start_window(struct call *c, uint64_t start_ns, uint64_t duration_ns, bool emit_xspace)
{
	struct conn *conn = c->conn;
	struct rp_profsvc *s = conn->svc;
	struct job *j = calloc(1, sizeof(*j));
	if (!j) {
		answer(c, G_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
		return;
	}
	j->svc = s, j->call = c;
	j->start_ns = start_ns, j->end_ns = start_ns + duration_ns;
	j->emit_xspace = emit_xspace;
	snprintf(j->reason, sizeof(j->reason), "%s from %s", c->method->name, conn->peer);
	pthread_mutex_lock(&s->lock);
	bool room = s->workers < MAX_WINDOWS;
	s->workers += room;
	pthread_mutex_unlock(&s->lock);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int e = room ? pthread_create(&t, &attr, window_main, j) : 0;
	pthread_attr_destroy(&attr);
	if (!room || e) {
		if (room) {
			pthread_mutex_lock(&s->lock);
			s->workers--;
			pthread_mutex_unlock(&s->lock);
		}
		free(j);
		char msg[128];
		if (room)
			snprintf(msg, sizeof(msg), "cannot start a thread: %s", strerror(e));
		else
			snprintf(msg, sizeof(msg), "%d windows are being served already; try "
				 "again when one is done", MAX_WINDOWS);
		log_peer(conn, "%s refused: %s", c->method->name, msg);
		answer(c, G_RESOURCE_EXHAUSTED, msg, NULL, 0);
		return;
	}
	c->job = j;
	conn->pending++;
	conn->deadline_ns = 0;
}

/* ---- the methods ---- */

static uint64_t ms_to_ns(uint64_t ms)
{
	return ms > UINT64_MAX / 1000000 ? UINT64_MAX : ms * 1000000;
}

static void do_profile(struct call *c, const uint8_t *msg, size_t len)
{
	struct rp_profsvc *s = c->conn->svc;
	Tensorflow__ProfileRequest *r = tensorflow__profile_request__unpack(NULL, len, msg);
	if (!r) {
		answer(c, G_INVALID_ARGUMENT, "the request is not a tensorflow.ProfileRequest", NULL, 0);
		return;
	}
	uint64_t duration_ms = r->duration_ms ? r->duration_ms : r->opts ? r->opts->duration_ms : 0;
	uint64_t start_wall = r->opts ? r->opts->start_timestamp_ns : 0;
	bool emit = r->emit_xspace;
	tensorflow__profile_request__free_unpacked(r, NULL);
	uint64_t duration = ms_to_ns(duration_ms), now = rp_clock_now_ns();
	char msg_buf[256];
	if (!duration || duration > s->o.max_duration_ns) {
		snprintf(msg_buf, sizeof(msg_buf), "duration_ms %llu: give 1 to %llu ms ([sessions] "
			 "max_duration)", (unsigned long long)duration_ms,
			 (unsigned long long)(s->o.max_duration_ns / 1000000));
		answer(c, G_INVALID_ARGUMENT, msg_buf, NULL, 0);
		return;
	}
	uint64_t start = now;
	if (start_wall) {
		/* A start in the past reaches back into the rings. */
		int64_t host = (int64_t)(start_wall > INT64_MAX ? INT64_MAX : start_wall) -
			       rp_clock_wall_offset_ns();
		if (host < 0 || (uint64_t)host > now + s->o.max_duration_ns) {
			snprintf(msg_buf, sizeof(msg_buf), "start_timestamp_ns %llu lies before this "
				 "host booted or more than max_duration ahead",
				 (unsigned long long)start_wall);
			answer(c, G_INVALID_ARGUMENT, msg_buf, NULL, 0);
			return;
		}
		start = (uint64_t)host;
	}
	start_window(c, start, duration, emit);
}

static void do_get_snapshot(struct call *c, const uint8_t *msg, size_t len)
{
	Tensorflow__GetSnapshotRequest *r = tensorflow__get_snapshot_request__unpack(NULL, len, msg);
	if (!r) {
		answer(c, G_INVALID_ARGUMENT, "the request is not a tensorflow.GetSnapshotRequest", NULL, 0);
		return;
	}
	tensorflow__get_snapshot_request__free_unpacked(r, NULL);
	uint64_t last = c->conn->svc->o.snapshot_ns, now = rp_clock_now_ns();
	start_window(c, now > last ? now - last : 0, now > last ? last : now, false);
}

/* Ringprof records all the time: starting and stopping continuous
 * profiling, and Terminate, have nothing to do once the request parses. */
static void do_start_continuous(struct call *c, const uint8_t *msg, size_t len)
{
	Tensorflow__ProfileRequest *r = tensorflow__profile_request__unpack(NULL, len, msg);
	if (!r) {
		answer(c, G_INVALID_ARGUMENT, "the request is not a tensorflow.ProfileRequest", NULL, 0);
		return;
	}
	tensorflow__profile_request__free_unpacked(r, NULL);
	answer_empty(c);
}

static void do_stop_continuous(struct call *c, const uint8_t *msg, size_t len)
{
	Tensorflow__StopContinuousProfilingRequest *r =
		tensorflow__stop_continuous_profiling_request__unpack(NULL, len, msg);
	if (!r) {
		answer(c, G_INVALID_ARGUMENT, "the request is not a "
		       "tensorflow.StopContinuousProfilingRequest", NULL, 0);
		return;
	}
	tensorflow__stop_continuous_profiling_request__free_unpacked(r, NULL);
	answer_empty(c);
}

static void do_terminate(struct call *c, const uint8_t *msg, size_t len)
{
	Tensorflow__TerminateRequest *r = tensorflow__terminate_request__unpack(NULL, len, msg);
	if (!r) {
		answer(c, G_INVALID_ARGUMENT, "the request is not a tensorflow.TerminateRequest", NULL, 0);
		return;
	}
	tensorflow__terminate_request__free_unpacked(r, NULL);
	answer_empty(c);
}

static const struct method methods[] = {
	{ "Profile", do_profile },
	{ "GetSnapshot", do_get_snapshot },
	{ "StartContinuousProfiling", do_start_continuous },
	{ "StopContinuousProfiling", do_stop_continuous },
	{ "Terminate", do_terminate },
	{ "Monitor", NULL }, /* no monitoring counters to give */
};
#define NMETHODS (sizeof(methods) / sizeof(methods[0]))
#define SERVICE_PREFIX "/tensorflow.ProfilerService/"

static void dispatch(struct call *c)
{
	struct rp_err err = { 0 };
	if (c->not_grpc) {
		answer(c, G_INVALID_ARGUMENT, "not a gRPC request: POST with content-type "
		       "application/grpc expected", NULL, 0);
	} else if (!c->method || !c->method->serve) {
		answer(c, G_UNIMPLEMENTED, "ringprofd serves tensorflow.ProfilerService/{Profile,"
		       "GetSnapshot,StartContinuousProfiling,StopContinuousProfiling,Terminate}",
		       NULL, 0);
	} else if (rp_grpc_deframe_end(&c->in, &err) < 0) {
		log_peer(c->conn, "%s request: %s", c->method->name, err.msg);
		answer(c, G_INVALID_ARGUMENT, err.msg, NULL, 0);
	} else {
		c->method->serve(c, c->in.msg ? c->in.msg : (const uint8_t *)"", c->in.have);
	}
}

/* ---- nghttp2 callbacks ---- */

static ssize_t on_send(nghttp2_session *h2, const uint8_t *data, size_t len, int flags, void *user)
{
	(void)h2, (void)flags;
	struct conn *c = user;
	ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? NGHTTP2_ERR_WOULDBLOCK
							       : NGHTTP2_ERR_CALLBACK_FAILURE;
	/* A reader that keeps reading keeps its connection. */
	if (n > 0 && !c->pending)
		c->deadline_ns = rp_clock_now_ns() + c->svc->request_timeout_ns;
	return n;
}

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	struct call *c = calloc(1, sizeof(*c));
	if (!c)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	c->conn = user;
	c->next = c->conn->calls;
	if (c->next)
		c->next->prev = c;
	c->conn->calls = c;
	c->stream_id = f->hd.stream_id;
	c->not_grpc = true; /* until content-type says otherwise */
	rp_grpc_deframer_init(&c->in, MAX_REQUEST);
	c->in.what = "request";
	return nghttp2_session_set_stream_user_data(h2, f->hd.stream_id, c);
}

static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *user)
{
	(void)flags, (void)user;
	struct call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (!c || f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	c->header_bytes += namelen + valuelen;
	if (c->header_bytes > MAX_HEADER_BYTES) {
		log_peer(c->conn, "stream %d reset: headers over %d bytes", c->stream_id, MAX_HEADER_BYTES);
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	}
	static const char ct[] = "application/grpc";
	size_t plen = sizeof(SERVICE_PREFIX) - 1;
	if (namelen == 5 && !memcmp(name, ":path", 5) && valuelen > plen &&
	    !memcmp(value, SERVICE_PREFIX, plen))
		for (size_t i = 0; i < NMETHODS; i++)
			if (strlen(methods[i].name) == valuelen - plen &&
			    !memcmp(value + plen, methods[i].name, valuelen - plen))
				c->method = &methods[i];
	if (namelen == 12 && !memcmp(name, "content-type", 12))
		c->not_grpc = !(valuelen >= sizeof(ct) - 1 && !memcmp(value, ct, sizeof(ct) - 1) &&
				(valuelen == sizeof(ct) - 1 || value[sizeof(ct) - 1] == '+' ||
				 value[sizeof(ct) - 1] == ';'));
	return 0;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data,
		   size_t len, void *user)
{
	(void)flags, (void)user;
	struct call *c = nghttp2_session_get_stream_user_data(h2, stream_id);
	if (!c || c->answered)
		return 0;
	struct rp_err err = { 0 };
	int rc = rp_grpc_deframe(&c->in, data, len, &err);
	if (rc < 0) {
		log_peer(c->conn, "%s request refused: %s", c->method ? c->method->name : "unknown",
			 err.msg);
		answer(c, rc == -EBADMSG ? G_INVALID_ARGUMENT : G_RESOURCE_EXHAUSTED, err.msg, NULL, 0);
	}
	return 0;
}

static int on_frame(nghttp2_session *h2, const nghttp2_frame *f, void *user)
{
	(void)user;
	if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) ||
	    !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	struct call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
	if (c && !c->answered && !c->job)
		dispatch(c);
	return 0;
}

static void free_call(struct call *c)
{
	if (c->job) { /* the worker stops waiting, or goes on unwatched */
		struct rp_profsvc *s = c->conn->svc;
		c->job->call = NULL;
		atomic_store(&c->job->cancelled, true);
		c->conn->pending--;
		pthread_mutex_lock(&s->lock);
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
	}
	if (c->prev)
		c->prev->next = c->next;
	else
		c->conn->calls = c->next;
	if (c->next)
		c->next->prev = c->prev;
	rp_grpc_deframer_free(&c->in);
	free(c->body);
	free(c);
}

static int on_close(nghttp2_session *h2, int32_t stream_id, uint32_t code, void *user)
{
	(void)code, (void)user;
	struct call *c = nghttp2_session_get_stream_user_data(h2, stream_id);
	if (c)
		free_call(c);
	return 0;
}

static nghttp2_session_callbacks *callbacks(void)
{
	nghttp2_session_callbacks *cb;
	if (nghttp2_session_callbacks_new(&cb) != 0)
		return NULL;
	nghttp2_session_callbacks_set_send_callback(cb, on_send);
	nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame);
	nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
	return cb;
}

/* ---- connections ---- */

static void close_conn(struct rp_profsvc *s, size_t i)
{
	struct conn *c = s->conns[i];
	while (c->calls)
		free_call(c->calls);
	nghttp2_session_del(c->h2);
	close(c->fd);
	free(c);
	s->conns[i] = s->conns[--s->nconns];
}

static void refuse(struct rp_profsvc *s, int fd, const char *peer)
{
	close(fd);
	s->refused++;
	uint64_t now = rp_clock_now_ns();
	if (!s->refusal_logged_ns || now - s->refusal_logged_ns >= REFUSAL_LOG_NS) {
		fprintf(stderr, "ringprofd: profiler service: %s: refused, %d connections are open "
			"(%llu refused so far)\n", peer, MAX_CONNECTIONS, (unsigned long long)s->refused);
		s->refusal_logged_ns = now;
	}
}

static void format_peer(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN] = "?", port[8] = "?";
	(void)getnameinfo((const struct sockaddr *)ss, sizeof(*ss), host, sizeof(host), port,
			  sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(buf, len, ss->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

static void accept_all(struct rp_profsvc *s, nghttp2_session_callbacks *cb)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		char peer[64];
		format_peer(&ss, peer, sizeof(peer));
		struct conn *c = s->nconns < MAX_CONNECTIONS ? calloc(1, sizeof(*c)) : NULL;
		if (!c) {
			refuse(s, fd, peer);
			continue;
		}
		c->svc = s, c->fd = fd;
		snprintf(c->peer, sizeof(c->peer), "%s", peer);
		c->deadline_ns = rp_clock_now_ns() + s->request_timeout_ns;
		int one = 1;
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		const nghttp2_settings_entry settings[] = {
			{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MAX_STREAMS },
			{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_BYTES },
		};
		if (nghttp2_session_server_new(&c->h2, cb, c) != 0 ||
		    nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, settings, 2) != 0) {
			if (c->h2)
				nghttp2_session_del(c->h2);
			free(c);
			close(fd);
			continue;
		}
		s->conns[s->nconns++] = c;
	}
}

/* Read and write what the socket allows: false when the connection ends. */
static bool serve_conn(struct conn *c, short revents)
{
	if (revents & (POLLIN | POLLHUP | POLLERR)) {
		uint8_t buf[READ_CHUNK];
		ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return false;
		ssize_t used = n > 0 ? nghttp2_session_mem_recv(c->h2, buf, (size_t)n) : 0;
		if (used < 0) {
			log_peer(c, "closed: not HTTP/2 gRPC (nghttp2: %s)", nghttp2_strerror((int)used));
			return false;
		}
	}
	int rc = nghttp2_session_send(c->h2);
	if (rc != 0) {
		log_peer(c, "closed: %s", nghttp2_strerror(rc));
		return false;
	}
	return nghttp2_session_want_read(c->h2) || nghttp2_session_want_write(c->h2);
}

/* Finished windows: answer the calls still there. */
static void deliver(struct rp_profsvc *s)
{
	uint64_t v;
	(void)!read(s->wake_fd, &v, sizeof(v));
	pthread_mutex_lock(&s->lock);
	struct job *done = s->done;
	s->done = NULL;
	pthread_mutex_unlock(&s->lock);
	while (done) {
		struct job *j = done;
		done = j->next;
		struct call *c = j->call;
		if (c) {
			c->job = NULL;
			c->conn->pending--;
			if (j->rc < 0)
				log_peer(c->conn, "%s failed: %s", c->method->name, j->err.msg);
			answer(c, j->rc == 0 ? G_OK : j->rc == -EFBIG ? G_RESOURCE_EXHAUSTED
						  : G_UNAVAILABLE, j->err.msg, j->body, j->body_len);
			(void)nghttp2_session_send(c->conn->h2);
		} else {
			free(j->body);
		}
		free(j);
	}
}

static void *loop_main(void *arg)
{
	struct rp_profsvc *s = arg;
	nghttp2_session_callbacks *cb = callbacks();
	struct pollfd pfd[2 + MAX_CONNECTIONS];
	while (cb) {
		pthread_mutex_lock(&s->lock);
		bool stop = s->stopping;
		pthread_mutex_unlock(&s->lock);
		if (stop)
			break;
		uint64_t now = rp_clock_now_ns(), next = UINT64_MAX;
		pfd[0] = (struct pollfd){ .fd = s->wake_fd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = s->listen_fd, .events = POLLIN };
		for (size_t i = 0; i < s->nconns; i++) {
			struct conn *c = s->conns[i];
			pfd[2 + i] = (struct pollfd){ .fd = c->fd, .events = POLLIN };
			if (nghttp2_session_want_write(c->h2))
				pfd[2 + i].events |= POLLOUT;
			if (c->deadline_ns && c->deadline_ns < next)
				next = c->deadline_ns;
		}
		uint64_t wait_ms = next == UINT64_MAX ? 1000 : next > now ? (next - now) / 1000000 + 1 : 0;
		int n = poll(pfd, 2 + s->nconns, wait_ms > 1000 ? 1000 : (int)wait_ms);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && pfd[0].revents)
			deliver(s);
		/* Back to front: close_conn moves the last one into the gap. */
		size_t served = s->nconns;
		now = rp_clock_now_ns();
		for (size_t i = served; i-- > 0;) {
			struct conn *c = s->conns[i];
			bool keep = true;
			if (n > 0 && pfd[2 + i].revents)
				keep = serve_conn(c, pfd[2 + i].revents);
			if (keep && c->deadline_ns && now >= c->deadline_ns && !c->pending) {
				log_peer(c, "closed: no complete request within %llu ms",
					 (unsigned long long)(s->request_timeout_ns / 1000000));
				/* GOAWAY first, best effort: a gRPC client reconnects. */
				if (nghttp2_session_terminate_session(c->h2, NGHTTP2_NO_ERROR) == 0)
					(void)nghttp2_session_send(c->h2);
				keep = false;
			}
			if (!keep)
				close_conn(s, i);
		}
		if (n > 0 && pfd[1].revents)
			accept_all(s, cb);
	}
	while (s->nconns)
		close_conn(s, s->nconns - 1);
	nghttp2_session_callbacks_del(cb);
	return NULL;
}

/* ---- start and stop ---- */

static bool is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	return sa->sa_family == AF_INET6 &&
	       (IN6_IS_ADDR_LOOPBACK(a) ||
		(IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127));
}

static int bind_listener(struct rp_profsvc *s, struct rp_err *err)
{
	char host[256];
	const char *port;
	int rc = rp_grpc_split_addr(s->listen, host, sizeof(host), &port, err);
	if (rc < 0)
		return rp_err_prefix(err, "[profiler_service] listen");
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int g = getaddrinfo(host, port, &hints, &res);
	if (g)
		return rp_err_set(err, -EINVAL, "[profiler_service] listen %s: %s", s->listen,
				  gai_strerror(g));
	int e = 0;
	for (struct addrinfo *ai = res; ai && s->listen_fd < 0 && !rc; ai = ai->ai_next) {
		if (!is_loopback(ai->ai_addr) && !s->o.allow_unauthenticated) {
			rc = rp_err_set(err, -EACCES, "[profiler_service] listen %s is not a loopback "
					"address, and XProf's client sends no credentials: listen on "
					"127.0.0.1 and reach it through an SSH tunnel, or set "
					"[profiler_service] allow_unauthenticated = true", s->listen);
			break;
		}
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
				ai->ai_protocol);
		int on = 1;
		if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) < 0 ||
				bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0)) {
			e = errno;
			close(fd);
			fd = -1;
		} else if (fd < 0) {
			e = errno;
		}
		s->listen_fd = fd;
	}
	freeaddrinfo(res);
	if (!rc && s->listen_fd < 0)
		rc = rp_err_set(err, -e, "cannot listen on [profiler_service] listen %s: %s%s",
				s->listen, strerror(e), e == EADDRINUSE ? ": choose another port" : "");
	return rc;
}

void rp_profsvc_stop(struct rp_profsvc *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	uint64_t one = 1;
	(void)!write(s->wake_fd, &one, sizeof(one));
	(void)pthread_join(s->loop, NULL);
	/* Workers are detached: wait until each has handed its job back. */
	pthread_mutex_lock(&s->lock);
	while (s->workers)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	for (struct job *j = s->done, *next; j; j = next) {
		next = j->next;
		free(j->body);
		free(j);
	}
	close(s->listen_fd);
	close(s->wake_fd);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

int rp_profsvc_start(const struct rp_profsvc_opts *o, struct rp_profsvc **out, struct rp_err *err)
{
	struct rp_profsvc *s = calloc(1, sizeof(*s));
	if (!s)
		return rp_err_set(err, -ENOMEM, "out of memory");
	s->o = *o;
	snprintf(s->listen, sizeof(s->listen), "%s", o->listen);
	s->o.listen = s->listen;
	s->request_timeout_ns = o->request_timeout_ns;
	s->listen_fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int rc = s->wake_fd < 0 ? rp_err_set(err, -errno, "eventfd: %s", strerror(errno))
				: bind_listener(s, err);
	if (rc == 0 && (rc = -pthread_create(&s->loop, NULL, loop_main, s)) < 0)
		(void)rp_err_set(err, rc, "cannot start the profiler service's thread: %s", strerror(-rc));
	if (rc < 0) {
		if (s->listen_fd >= 0)
			close(s->listen_fd);
		if (s->wake_fd >= 0)
			close(s->wake_fd);
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->lock);
		free(s);
		return rc;
	}
	if (o->allow_unauthenticated)
		fprintf(stderr, "ringprofd: WARNING: the profiler service on %s takes requests "
			"from anyone who can reach it ([profiler_service] allow_unauthenticated): "
			"each can read every ring of this host\n", s->listen);
	*out = s;
	return 0;
}
