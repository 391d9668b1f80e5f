/* The producer handshake: both sides over a real socket, the ring's fd
 * really passed (and mapped), every way a hello or a reply can be wrong,
 * and the producer's bounds on a missing or hung daemon. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "hello.h"
#include "shmring.h"
#include "scratch.h"

/* A hello encoded by hand from docs/api.md, independently of hello.c. */
struct wire_hello {
	uint8_t b[RP_HELLO_SIZE];
};

static void le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static struct wire_hello wire_hello_uid(uint32_t pid, const char *device, const char *thread,
				       const char *uid)
{
	struct wire_hello w = { { 0 } };
	memcpy(w.b, "RPHELLO1", 8);
	le32(w.b + 8, 2);
	le32(w.b + 12, pid);
	le32(w.b + 16, 77);
	le32(w.b + 20, 8192);
	memcpy(w.b + 24, device, strlen(device));
	memcpy(w.b + 88, thread, strlen(thread));
	le32(w.b + 144, 3); /* a foreign clock */
	/* Its offset, -0x12345678, as an i64. */
	le32(w.b + 152, (uint32_t)-0x12345678);
	le32(w.b + 156, 0xffffffffu);
	memcpy(w.b + 160, uid, strlen(uid));
	return w;
}

static struct wire_hello wire_hello(uint32_t pid, const char *device, const char *thread)
{
	return wire_hello_uid(pid, device, thread, "");
}

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

/* Sends bytes on one end of a pair and runs rp_hello_receive on the other. */
static int receive_bytes(const void *buf, size_t len, struct rp_hello *h, struct rp_err *err)
{
	int sv[2];
	pair(sv);
	assert_int_equal(send(sv[0], buf, len, 0), (ssize_t)len);
	int rc = rp_hello_receive(sv[1], h, NULL, err);
	close(sv[0]);
	close(sv[1]);
	return rc;
}

static void receive_decodes_the_wire_format(void **state)
{
	(void)state;
	struct wire_hello w = wire_hello_uid((uint32_t)getpid(), "gpu0", "trainer",
					     "GPU-8f6e1c2a-0b7d-4c11-9e55-3a1f0c9d2b4e");
	int sv[2];
	pair(sv);
	assert_int_equal(send(sv[0], w.b, sizeof(w.b), 0), (ssize_t)sizeof(w.b));
	struct rp_hello h;
	struct ucred peer;
	struct rp_err err = { 0 };
	int rc = rp_hello_receive(sv[1], &h, &peer, &err);
	if (rc)
		fail_msg("receive: %s", err.msg);
	assert_int_equal(h.pid, getpid());
	assert_int_equal(h.tid, 77);
	assert_int_equal(h.ring_size, 8192);
	assert_string_equal(h.device, "gpu0");
	assert_string_equal(h.thread_name, "trainer");
	assert_string_equal(h.device_uid, "GPU-8f6e1c2a-0b7d-4c11-9e55-3a1f0c9d2b4e");
	assert_int_equal(h.clock, 3);
	assert_true(h.clock_offset_ns == -0x12345678);
	assert_false(h.offer_ring);
	assert_int_equal(peer.pid, getpid());
	assert_int_equal(peer.uid, getuid());

	/* Version 1, from an older libringprof: its 144 bytes alone. */
	le32(w.b + 8, 1);
	assert_int_equal(send(sv[0], w.b, RP_HELLO_V1_SIZE, 0), RP_HELLO_V1_SIZE);
	assert_int_equal(rp_hello_receive(sv[1], &h, &peer, &err), 0);
	assert_string_equal(h.device, "gpu0");
	assert_int_equal(h.clock, 0);
	assert_true(h.clock_offset_ns == 0);
	close(sv[0]);
	close(sv[1]);
}

static void expect_rejected(const void *buf, size_t len, int code, const char *words)
{
	struct rp_hello h;
	struct rp_err err = { 0 };
	int rc = receive_bytes(buf, len, &h, &err);
	assert_int_equal(rc, code);
	if (!strstr(err.msg, words))
		fail_msg("message \"%s\" does not mention \"%s\"", err.msg, words);
}

static void receive_rejects_malformed_hellos(void **state)
{
	(void)state;
	uint32_t pid = (uint32_t)getpid();
	struct wire_hello w = wire_hello(pid, "host", "t");

	expect_rejected(w.b, 100, -EPROTO, "100 bytes, expected 224");
	uint8_t big[RP_HELLO_SIZE + 8] = { 0 };
	memcpy(big, w.b, sizeof(w.b));
	expect_rejected(big, sizeof(big), -EPROTO, "more than 224 bytes");

	w = wire_hello(pid, "host", "t");
	memcpy(w.b, "GETHTTP/", 8);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "not a ringprof producer");

	w = wire_hello(pid, "host", "t");
	le32(w.b + 8, 3);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "version 3");
	w = wire_hello(pid, "host", "t");
	le32(w.b + 144, 4);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "clock 4");
	w = wire_hello(pid, "host", "t");
	le32(w.b + 148, 2);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "unknown flags");
	w = wire_hello(pid, "host", "t");
	le32(w.b + 148, 1);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "offers a ring but passes 0 fds");

	w = wire_hello(pid, "host", "t");
	memset(w.b + 24, 'a', 64);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "NUL-terminated");
	w = wire_hello(pid, "host", "t");
	memset(w.b + 88, 'a', 56);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "NUL-terminated");

	w = wire_hello(pid, "host", "t");
	memset(w.b + 160, 'a', 64);
	expect_rejected(w.b, sizeof(w.b), -EPROTO, "NUL-terminated");
	w = wire_hello_uid(pid, "gpu0", "t", "GPU 1");
	expect_rejected(w.b, sizeof(w.b), -EINVAL, "device uid has byte 0x20 at 3");
	w = wire_hello_uid(pid, "gpu0", "t", "GPU\x1b[31m");
	expect_rejected(w.b, sizeof(w.b), -EINVAL, "printable ASCII");

	w = wire_hello(pid, "../etc", "t");
	expect_rejected(w.b, sizeof(w.b), -EINVAL, "device name");
	w = wire_hello(pid, "", "t");
	expect_rejected(w.b, sizeof(w.b), -EINVAL, "device name");
	w = wire_hello(pid, "gpu 0", "t");
	expect_rejected(w.b, sizeof(w.b), -EINVAL, "device name");

	/* pid 1 is not us in any namespace (we are not init). */
	w = wire_hello(1, "host", "t");
	expect_rejected(w.b, sizeof(w.b), -EPERM, "claims pid 1");
}

/* fds a producer sends along with its hello must not leak into the
 * daemon; the one of an offered ring is handed over. */
static void send_with_fd(int sv[2], bool offer, int *watch)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	struct wire_hello w = wire_hello((uint32_t)getpid(), "host", "t");
	le32(w.b + 148, offer);
	struct iovec iov = { w.b, sizeof(w.b) };
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } cb;
	memset(&cb, 0, sizeof(cb));
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = cb.b, .msg_controllen = sizeof(cb.b) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &p[1], sizeof(int));
	pair(sv);
	assert_int_equal(sendmsg(sv[0], &m, 0), (ssize_t)sizeof(w.b));
	close(p[1]);
	*watch = p[0];
}

static void receive_closes_fds_sent_along(void **state)
{
	(void)state;
	int sv[2], watch;
	send_with_fd(sv, false, &watch);
	struct rp_hello h;
	struct rp_err err = { 0 };
	assert_int_equal(rp_hello_receive(sv[1], &h, NULL, &err), -EPROTO);
	/* The received copy was the last write end: the pipe reads EOF. */
	char byte;
	assert_int_equal(read(watch, &byte, 1), 0);
	close(watch);
	close(sv[0]);
	close(sv[1]);

	send_with_fd(sv, true, &watch);
	assert_int_equal(rp_hello_receive(sv[1], &h, NULL, &err), 0);
	assert_true(h.offer_ring);
	assert_int_equal(read(watch, &byte, 1), -1); /* kept open: EAGAIN */
	close(h.ring_fd);
	assert_int_equal(read(watch, &byte, 1), 0);
	close(watch);
	close(sv[0]);
	close(sv[1]);
}

static void receive_reports_hangup_and_no_data(void **state)
{
	(void)state;
	int sv[2];
	struct rp_hello h;
	struct rp_err err = { 0 };
	pair(sv);
	assert_int_equal(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(rp_hello_receive(sv[1], &h, NULL, &err), -EAGAIN);
	close(sv[0]);
	assert_int_equal(rp_hello_receive(sv[1], &h, NULL, &err), -ECONNRESET);
	assert_non_null(strstr(err.msg, "hung up"));
	close(sv[1]);
}

static void reply_checks_its_arguments(void **state)
{
	(void)state;
	int sv[2];
	pair(sv);
	assert_int_equal(rp_hello_reply(sv[1], 0, NULL, -1), -EINVAL);
	assert_int_equal(rp_hello_reply(sv[1], 5, NULL, -1), -EINVAL);
	close(sv[0]);
	assert_int_equal(rp_hello_reply(sv[1], -EBUSY, "busy", -1), -EPIPE);
	close(sv[1]);
}

/* A one-connection daemon on a temporary path, run in a thread (which
 * records failures in rc: cmocka asserts belong to the main thread). */
enum behaviour {
	SERVE_RING,     /* receive, create a ring, reply with its fd */
	SERVE_REFUSE,   /* receive, reply -EBUSY with a message */
	SERVE_NO_FD,    /* a well-formed status-0 reply without an fd */
	SERVE_GARBAGE,  /* a reply that is not one */
	SERVE_HANG_UP,  /* close without a reply */
	SERVE_NOTHING,  /* never accept: a hung daemon */
};

struct server {
	char dir[64], path[128];
	int lfd;
	enum behaviour how;
	pthread_t thread;
	bool joined;
	int rc;
	struct rp_hello got;
	struct ucred peer;
	struct rp_shmring *ring;
	struct rp_err err;
};

static void *serve(void *arg)
{
	struct server *s = arg;
	int c = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0) {
		s->rc = -errno;
		return NULL;
	}
	/* Read the hello first even when misbehaving: a Unix socket closed
	 * with unread data resets the connection instead of delivering. */
	if (s->how != SERVE_NOTHING)
		s->rc = rp_hello_receive(c, &s->got, &s->peer, &s->err);
	uint8_t reply[RP_REPLY_SIZE] = { 0 };
	memcpy(reply, "RPREPLY1", 8);
	switch (s->how) {
	case SERVE_RING:
		if (s->rc == 0)
			s->rc = rp_shmring_create(s->got.ring_size, s->peer.pid, s->got.tid,
						  RP_SHM_CLOCK_MONOTONIC, &s->ring, &s->err);
		if (s->rc == 0)
			s->rc = rp_hello_reply(c, 0, NULL, rp_shmring_fd(s->ring));
		break;
	case SERVE_REFUSE:
		s->rc = rp_hello_reply(c, -EBUSY, "too many producers on this host", -1);
		break;
	case SERVE_NO_FD:
		s->rc = send(c, reply, sizeof(reply), 0) == sizeof(reply) ? 0 : -EIO;
		break;
	case SERVE_GARBAGE:
		s->rc = send(c, "HTTP/1.1 400", 12, 0) == 12 ? 0 : -EIO;
		break;
	case SERVE_HANG_UP:
	case SERVE_NOTHING:
		break;
	}
	close(c);
	return NULL;
}

static struct server *server_start(enum behaviour how)
{
	struct server *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	assert_int_equal(scratch_make(s->dir, sizeof(s->dir), "hello"), 0);
	snprintf(s->path, sizeof(s->path), "%s/p.sock", s->dir);
	s->how = how;
	s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, s->path);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s->lfd, 4), 0);
	if (how != SERVE_NOTHING)
		assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
	return s;
}

static void server_join(struct server *s)
{
	if (s->how != SERVE_NOTHING && !s->joined)
		pthread_join(s->thread, NULL);
	s->joined = true;
}

static void server_stop(struct server *s)
{
	server_join(s);
	close(s->lfd);
	(void)scratch_remove(s->dir);
	rp_shmring_close(s->ring);
	free(s);
}

static const struct rp_hello hello_host = {
	.tid = 4321, .ring_size = 65536, .device = "host", .thread_name = "worker-3",
};

static int collect_name(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct rp_event ev;
	char nb[RP_NAME_MAX + 1];
	assert_int_equal(rp_rec_to_event(r, rec, &ev, nb), 0);
	assert_int_equal(ev.kind, RP_EV_RANGE_BEGIN);
	strcpy(ctx, nb);
	return 0;
}

static void request_gets_a_mappable_ring(void **state)
{
	(void)state;
	struct server *s = server_start(SERVE_RING);
	struct rp_hello h = hello_host;
	h.pid = (uint32_t)getpid();
	int fd = -1;
	struct rp_err err = { 0 };
	int rc = rp_hello_request(s->path, &h, &fd, &err);
	if (rc)
		fail_msg("request: %s", err.msg);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	struct rp_shmring *mine = NULL;
	rc = rp_shmring_map(fd, &mine, &err);
	if (rc)
		fail_msg("map: %s", err.msg);
	close(fd);
	server_join(s);
	assert_int_equal(s->rc, 0);
	assert_int_equal(s->got.tid, 4321);
	assert_int_equal(s->got.ring_size, 65536);
	assert_string_equal(s->got.device, "host");
	assert_string_equal(s->got.thread_name, "worker-3");
	assert_int_equal(rp_shmring_pid(mine), getpid());
	assert_int_equal(rp_shmring_tid(mine), 4321);
	assert_int_equal(rp_shmring_capacity(mine), 65536);

	/* The same memory on both sides: what we write, the server reads. */
	assert_true(rp_shm_range_begin(mine, rp_shmring_now(mine), "through the fd"));
	char name[RP_NAME_MAX + 1] = "";
	assert_int_equal(rp_shmring_drain(s->ring, collect_name, name, 0, NULL), 1);
	assert_string_equal(name, "through the fd");
	rp_shmring_close(mine);
	server_stop(s);
}

static void expect_request_fails(enum behaviour how, int code, const char *words)
{
	struct server *s = server_start(how);
	struct rp_hello h = hello_host;
	h.pid = (uint32_t)getpid();
	int fd = -1;
	struct rp_err err = { 0 };
	uint64_t t0 = rp_clock_now_ns();
	assert_int_equal(rp_hello_request(s->path, &h, &fd, &err), code);
	uint64_t took = rp_clock_now_ns() - t0;
	assert_int_equal(fd, -1);
	if (!strstr(err.msg, words))
		fail_msg("message \"%s\" does not mention \"%s\"", err.msg, words);
	/* Bounded even when the daemon never answers. */
	assert_true(took < 3000000000ull);
	if (how == SERVE_NOTHING)
		assert_true(took >= 900000000ull);
	server_stop(s);
}

static void request_reports_refusals_and_bad_replies(void **state)
{
	(void)state;
	expect_request_fails(SERVE_REFUSE, -EBUSY, "too many producers on this host");
	expect_request_fails(SERVE_NO_FD, -EPROTO, "passed 0 fds");
	expect_request_fails(SERVE_GARBAGE, -EPROTO, "not a ringprof producer reply");
	expect_request_fails(SERVE_HANG_UP, -ECONNRESET, "hung up");
	expect_request_fails(SERVE_NOTHING, -EAGAIN, "did not answer");
}

static void request_without_a_daemon(void **state)
{
	(void)state;
	struct rp_hello h = hello_host;
	int fd = -1;
	struct rp_err err = { 0 };
	assert_int_equal(rp_hello_request("/nonexistent/ringprofd.sock.producers", &h, &fd, &err),
			 -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent/ringprofd.sock.producers"));
	assert_non_null(strstr(err.msg, "is ringprofd running"));

	/* A socket file left behind by a dead daemon. */
	struct server *s = server_start(SERVE_NOTHING);
	close(s->lfd);
	s->lfd = -1;
	assert_int_equal(rp_hello_request(s->path, &h, &fd, &err), -ECONNREFUSED);
	assert_non_null(strstr(err.msg, s->path));
	server_stop(s);

	char longpath[200];
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = 0;
	assert_int_equal(rp_hello_request(longpath, &h, &fd, &err), -ENAMETOOLONG);
	assert_int_equal(fd, -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(receive_decodes_the_wire_format),
		cmocka_unit_test(receive_rejects_malformed_hellos),
		cmocka_unit_test(receive_closes_fds_sent_along),
		cmocka_unit_test(receive_reports_hangup_and_no_data),
		cmocka_unit_test(reply_checks_its_arguments),
		cmocka_unit_test(request_gets_a_mappable_ring),
		cmocka_unit_test(request_reports_refusals_and_bad_replies),
		cmocka_unit_test(request_without_a_daemon),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
