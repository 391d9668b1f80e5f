/* The producer handshake (hello.h).
 *
 * hello (224): magic[8] "RPHELLO1" | version u32 | pid u32 | tid u32 |
 *              ring_size u32 | device[64] | thread_name[56] |
 *              clock u32 | flags u32 | clock_offset i64 | device_uid[64]
 *   (version 1: the first 144 bytes alone)
 *   flags bit 0: the producer offers a ring, its memfd attached
 * reply (264): magic[8] "RPREPLY1" | status i32 | reserved u32 | message[248]
 *
 * Fields are encoded byte by byte (little-endian), never by casting a
 * struct, so the layout does not depend on the compiler or the host. */
#include "hello.h"

#include <endian.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "parse.h"

static const char hello_magic[8] = "RPHELLO1";
static const char reply_magic[8] = "RPREPLY1";

enum {
	H_VERSION = 8, H_PID = 12, H_TID = 16, H_RING_SIZE = 20, H_DEVICE = 24,
	H_THREAD = H_DEVICE + RP_HELLO_DEVICE_LEN,
	/* Version 2: one block, after everything of version 1. */
	H_CLOCK = H_THREAD + RP_HELLO_THREAD_LEN, H_FLAGS = H_CLOCK + 4,
	H_CLOCK_OFFSET = H_FLAGS + 4, H_DEVICE_UID = H_CLOCK_OFFSET + 8,
	R_STATUS = 8, R_MESSAGE = 16,
};
#define FLAG_OFFER_RING 1u
_Static_assert(H_CLOCK == RP_HELLO_V1_SIZE && H_DEVICE_UID + RP_HELLO_DEVICE_UID_LEN == RP_HELLO_SIZE,
	       "hello layout");
_Static_assert(R_MESSAGE + RP_REPLY_MESSAGE_LEN == RP_REPLY_SIZE, "reply layout");

/* Bound on every blocking step of the producer side. */
#define REQUEST_TIMEOUT_S 1
/* fds accepted in one message; more are truncated away by the kernel. */
#define MAX_FDS 4

static void put32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, sizeof(v));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return le32toh(v);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

union cmsg_buf {
	struct cmsghdr align;
	char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
};

/* Receive one message with any fds passed along (MSG_CMSG_CLOEXEC);
 * returns the byte count, or -errno.  *truncated: the message was longer
 * than len. */
static ssize_t recv_msg(int fd, void *buf, size_t len, int fds[MAX_FDS],
			int *nfds, bool *truncated)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	union cmsg_buf cb;
	struct msghdr m = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cb.buf, .msg_controllen = sizeof(cb.buf),
	};
	ssize_t n;
	do
		n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	*nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && *nfds < MAX_FDS; i++)
			memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	*truncated = m.msg_flags & MSG_TRUNC;
	return n;
}

static void close_fds(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* Copy a C string into a fixed NUL-padded field; false if it does not fit. */
static bool put_str(uint8_t *field, size_t len, const char *s)
{
	size_t n = strnlen(s, len);
	if (n == len)
		return false;
	memset(field, 0, len);
	memcpy(field, s, n);
	return true;
}

static int connect_error(const char *path, int e, struct rp_err *err)
{
	switch (e) {
	case ENOENT:
		return rp_err_set(err, -e, "no producer socket at %s: is ringprofd "
				  "running? (ringprofd, or systemctl start ringprofd)", path);
	case ECONNREFUSED:
		return rp_err_set(err, -e, "nobody listens on the producer socket %s: "
				  "ringprofd is not running (a stale socket is left)", path);
	case EAGAIN:
		return rp_err_set(err, -e, "ringprofd does not accept producers on %s "
				  "within %d s: it is overloaded or hung", path,
				  REQUEST_TIMEOUT_S);
	default:
		return rp_err_set(err, -e, "cannot connect to the producer socket %s: %s",
				  path, strerror(e));
	}
}

/* Send one message on fd with pass_fd (>= 0) as SCM_RIGHTS. */
static ssize_t send_msg(int fd, const void *buf, size_t len, int pass_fd)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	union cmsg_buf cb;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (pass_fd >= 0) {
		memset(&cb, 0, sizeof(cb));
		m.msg_control = cb.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	ssize_t n;
	do
		n = sendmsg(fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n;
}

/* Send the encoded hello on fd and wait for the reply; fd stays open. */
static int exchange(int fd, const char *path, const uint8_t *msg, int offered_fd,
		    int *ring_fd, struct rp_err *err)
{
	ssize_t n = send_msg(fd, msg, RP_HELLO_SIZE, offered_fd);
	if (n < 0)
		return rp_err_set(err, (int)n, "cannot send the hello to ringprofd on %s: %s",
				  path, strerror((int)-n));

	uint8_t buf[RP_REPLY_SIZE] = { 0 };
	int fds[MAX_FDS], nfds = 0;
	bool trunc = false;
	n = recv_msg(fd, buf, sizeof(buf), fds, &nfds, &trunc);
	if (n == -EAGAIN)
		return rp_err_set(err, -EAGAIN, "ringprofd did not answer the hello on %s "
				  "within %d s: it is overloaded or hung", path,
				  REQUEST_TIMEOUT_S);
	if (n < 0)
		return rp_err_set(err, (int)n, "no reply from ringprofd on %s: %s", path,
				  strerror((int)-n));
	int rc = 0;
	int32_t status = (int32_t)get32(buf + R_STATUS);
	char message[RP_REPLY_MESSAGE_LEN];
	if (n == 0)
		rc = rp_err_set(err, -ECONNRESET, "ringprofd on %s hung up without "
				"answering the hello", path);
	else if (n != RP_REPLY_SIZE || trunc || memcmp(buf, reply_magic, sizeof(reply_magic)))
		rc = rp_err_set(err, -EPROTO, "the reply on %s is not a ringprof producer "
				"reply (%zd bytes); is %s a ringprofd of the same version?",
				path, n, path);
	else if (status > 0 || status < -4095)
		rc = rp_err_set(err, -EPROTO, "ringprofd on %s replied with status %d, "
				"which is not 0 or -errno", path, (int)status);
	else if (status < 0) {
		memcpy(message, buf + R_MESSAGE, sizeof(message));
		message[sizeof(message) - 1] = 0;
		rc = rp_err_set(err, status, "ringprofd refused the producer ring: %s",
				message[0] ? message : strerror(-status));
	} else if (nfds != 1)
		rc = rp_err_set(err, -EPROTO, "ringprofd on %s accepted the hello but "
				"passed %d fds instead of the ring's", path, nfds);
	if (rc < 0) {
		close_fds(fds, nfds);
		return rc;
	}
	*ring_fd = fds[0];
	return 0;
}

int rp_hello_request(const char *producer_socket, const struct rp_hello *hello,
		     int *ring_fd, struct rp_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(producer_socket) >= sizeof(sa.sun_path))
		return rp_err_set(err, -ENAMETOOLONG, "the producer socket path %s is "
				  "longer than %zu bytes; choose a shorter socket path",
				  producer_socket, sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, producer_socket);

	uint8_t msg[RP_HELLO_SIZE] = { 0 };
	memcpy(msg, hello_magic, sizeof(hello_magic));
	put32(msg + H_VERSION, RP_HELLO_VERSION);
	put32(msg + H_PID, hello->pid);
	put32(msg + H_TID, hello->tid);
	put32(msg + H_RING_SIZE, hello->ring_size);
	put32(msg + H_CLOCK, hello->clock);
	put32(msg + H_FLAGS, hello->offer_ring ? FLAG_OFFER_RING : 0);
	put64(msg + H_CLOCK_OFFSET, (uint64_t)hello->clock_offset_ns);
	if (!put_str(msg + H_DEVICE, RP_HELLO_DEVICE_LEN, hello->device) ||
	    !put_str(msg + H_THREAD, RP_HELLO_THREAD_LEN, hello->thread_name) ||
	    !put_str(msg + H_DEVICE_UID, RP_HELLO_DEVICE_UID_LEN, hello->device_uid))
		return rp_err_set(err, -ENAMETOOLONG, "device name, thread name or device uid in "
				  "the hello is not NUL-terminated within its field (%d, %d and %d "
				  "bytes)", RP_HELLO_DEVICE_LEN, RP_HELLO_THREAD_LEN,
				  RP_HELLO_DEVICE_UID_LEN);

	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return rp_err_set(err, -errno, "cannot create a Unix socket: %s",
				  strerror(errno));
	/* Unix-socket connect waits on the send timeout when the daemon's
	 * backlog is full, so these two bound every step. */
	struct timeval tv = { .tv_sec = REQUEST_TIMEOUT_S };
	int rc = 0;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		rc = rp_err_set(err, -errno, "cannot set socket timeouts: %s",
				strerror(errno));
	else if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		rc = connect_error(producer_socket, errno, err);
	else
		rc = exchange(fd, producer_socket, msg, hello->offer_ring ? hello->ring_fd : -1,
			      ring_fd, err);
	close(fd);
	return rc;
}

/* Whether claimed is pid's number in its own (innermost) pid namespace:
 * the last field of NSpid in /proc/PID/status. */
static bool pid_in_own_ns(pid_t pid, uint32_t claimed)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	bool ok = false;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		const char *last = strrchr(line, '\t');
		ok = last && strtoul(last + 1, NULL, 10) == claimed;
		break;
	}
	fclose(f);
	return ok;
}

/* Check the message n bytes long in buf and decode it into h; the fds
 * are the receiver's business. */
static int parse_hello(const uint8_t *buf, ssize_t n, bool trunc, int nfds,
		       struct rp_hello *h, struct rp_err *err)
{
	if (n == -EAGAIN)
		return rp_err_set(err, -EAGAIN, "no hello from the producer yet");
	if (n < 0)
		return rp_err_set(err, (int)n, "cannot read the producer's hello: %s",
				  strerror((int)-n));
	if (n == 0)
		return rp_err_set(err, -ECONNRESET, "the producer hung up before its hello");
	if (n < 12 || memcmp(buf, hello_magic, sizeof(hello_magic)) != 0)
		return rp_err_set(err, -EPROTO, "the hello does not start with \"RPHELLO1\": "
				  "the peer is not a ringprof producer");
	uint32_t version = get32(buf + H_VERSION);
	if (version != 1 && version != RP_HELLO_VERSION)
		return rp_err_set(err, -EPROTO, "hello version %u is not supported (this "
				  "ringprofd speaks versions 1 and %d): use matching ringprof "
				  "versions", version, RP_HELLO_VERSION);
	ssize_t want = version == 1 ? RP_HELLO_V1_SIZE : RP_HELLO_SIZE;
	if (n != want || trunc)
		return rp_err_set(err, -EPROTO, "the version-%u hello is %s%zd bytes, "
				  "expected %zd", version, trunc ? "more than " : "", n, want);
	if (!memchr(buf + H_DEVICE, 0, RP_HELLO_DEVICE_LEN) ||
	    !memchr(buf + H_THREAD, 0, RP_HELLO_THREAD_LEN) ||
	    (version >= 2 && !memchr(buf + H_DEVICE_UID, 0, RP_HELLO_DEVICE_UID_LEN)))
		return rp_err_set(err, -EPROTO, "the hello's device name, thread name or device "
				  "uid is not NUL-terminated within its field");
	*h = (struct rp_hello){
		.pid = get32(buf + H_PID),
		.tid = get32(buf + H_TID),
		.ring_size = get32(buf + H_RING_SIZE),
		.ring_fd = -1,
	};
	memcpy(h->device, buf + H_DEVICE, RP_HELLO_DEVICE_LEN);
	memcpy(h->thread_name, buf + H_THREAD, RP_HELLO_THREAD_LEN);
	uint32_t flags = 0;
	if (version >= 2) {
		h->clock = get32(buf + H_CLOCK);
		flags = get32(buf + H_FLAGS);
		h->clock_offset_ns = (int64_t)get64(buf + H_CLOCK_OFFSET);
		memcpy(h->device_uid, buf + H_DEVICE_UID, RP_HELLO_DEVICE_UID_LEN);
	}
	/* It names the device in logs, manifests and exports. */
	for (const char *c = h->device_uid; *c; c++)
		if (*c < 0x21 || *c > 0x7e)
			return rp_err_set(err, -EINVAL, "the hello's device uid has byte 0x%02x at %zu: "
					  "a device uid is printable ASCII without spaces "
					  "(\"GPU-8f6e...\")", (unsigned char)*c,
					  (size_t)(c - h->device_uid));
	if (h->clock > RP_HELLO_CLOCK_MAX)
		return rp_err_set(err, -EPROTO, "the hello's clock %u is unknown (0 to %d)",
				  h->clock, RP_HELLO_CLOCK_MAX);
	if (flags & ~FLAG_OFFER_RING)
		return rp_err_set(err, -EPROTO, "the hello sets unknown flags %#x", flags);
	h->offer_ring = flags & FLAG_OFFER_RING;
	if (nfds != (h->offer_ring ? 1 : 0))
		return rp_err_set(err, -EPROTO, "the hello %s a ring but passes %d fds",
				  h->offer_ring ? "offers" : "does not offer", nfds);
	return rp_check_name(h->device, RP_HELLO_DEVICE_LEN - 1, "device name", err);
}

int rp_hello_receive(int conn_fd, struct rp_hello *hello, struct ucred *peer,
		     struct rp_err *err)
{
	uint8_t buf[RP_HELLO_SIZE];
	int fds[MAX_FDS], nfds = 0;
	bool trunc = false;
	ssize_t n = recv_msg(conn_fd, buf, sizeof(buf), fds, &nfds, &trunc);
	struct rp_hello h;
	int rc = parse_hello(buf, n, trunc, n < 0 ? 0 : nfds, &h, err);
	struct ucred cred = { 0 };
	socklen_t len = sizeof(cred);
	if (rc == 0 && getsockopt(conn_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		rc = rp_err_set(err, -errno, "cannot get the producer's credentials: %s",
				strerror(errno));
	/* A producer in a container knows its pid in its own namespace only. */
	else if (rc == 0 && h.pid != (uint32_t)cred.pid && !pid_in_own_ns(cred.pid, h.pid))
		rc = rp_err_set(err, -EPERM, "the hello claims pid %u but comes from "
				"pid %d", h.pid, (int)cred.pid);
	/* Keep the one fd of a valid offer; drop any other, never leak. */
	if (rc == 0 && h.offer_ring)
		h.ring_fd = fds[0];
	else if (n >= 0)
		close_fds(fds, nfds);
	if (rc < 0)
		return rc;
	*hello = h;
	if (peer)
		*peer = cred;
	return 0;
}

int rp_hello_reply(int conn_fd, int status, const char *message, int ring_fd)
{
	if (status > 0 || (status == 0 && ring_fd < 0))
		return -EINVAL;
	uint8_t buf[RP_REPLY_SIZE] = { 0 };
	memcpy(buf, reply_magic, sizeof(reply_magic));
	put32(buf + R_STATUS, (uint32_t)status);
	if (message)
		memcpy(buf + R_MESSAGE, message, strnlen(message, RP_REPLY_MESSAGE_LEN - 1));
	ssize_t n = send_msg(conn_fd, buf, sizeof(buf), status == 0 ? ring_fd : -1);
	return n < 0 ? (int)n : 0;
}
