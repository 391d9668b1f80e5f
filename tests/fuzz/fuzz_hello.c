/* Fuzz the daemon's side of the producer handshake: the input is one
 * message as a producer would send it on the producer socket, over a
 * SOCK_SEQPACKET socket pair, with an fd attached when its length is odd
 * or it sets the offer-a-ring flag (a producer may pass fds; they must be
 * closed, never kept, but for the one ring a valid hello offers).  A pid field
 * of 0 stands for this process, so that hellos can also pass the pid
 * check.  Whatever the bytes: no crash, no fd leaked, a hello accepted
 * only when well-formed, and the reply always a well-formed reply. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hello.h"
#include "parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PID_OFFSET 12
#define FLAGS_OFFSET 148
#define MESSAGE_MAX 4096

static void send_input(int fd, const uint8_t *data, size_t size)
{
	uint8_t buf[MESSAGE_MAX];
	memcpy(buf, data, size);
	uint32_t pid = (uint32_t)getpid(), zero = 0;
	if (size >= PID_OFFSET + 4 && !memcmp(buf + PID_OFFSET, &zero, 4))
		memcpy(buf + PID_OFFSET, &pid, 4); /* little-endian hosts only, like the tests */
	struct iovec iov = { .iov_base = buf, .iov_len = size };
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cb;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	bool offer = size > FLAGS_OFFSET && (data[FLAGS_OFFSET] & 1);
	int passed = size % 2 || offer ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
	if (passed >= 0) {
		memset(&cb, 0, sizeof(cb));
		m.msg_control = cb.buf;
		m.msg_controllen = sizeof(cb.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &passed, sizeof(int));
	}
	if (sendmsg(fd, &m, MSG_NOSIGNAL) < 0)
		abort();
	if (passed >= 0)
		close(passed);
}

static void check_hello(int rc, const struct rp_hello *h, const struct ucred *peer)
{
	if (rc == -EAGAIN || rc > 0)
		abort(); /* a message was waiting */
	if (rc < 0)
		return;
	if (!memchr(h->device, 0, sizeof(h->device)) ||
	    !memchr(h->thread_name, 0, sizeof(h->thread_name)) ||
	    rp_check_name(h->device, RP_HELLO_DEVICE_LEN - 1, "device name", NULL) != 0 ||
	    peer->pid != getpid())
		abort();
}

static void check_reply(int fd)
{
	uint8_t buf[RP_REPLY_SIZE + 1];
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	int32_t status;
	memcpy(&status, buf + 8, sizeof(status));
	if (n != RP_REPLY_SIZE || memcmp(buf, "RPREPLY1", 8) != 0 || status >= 0 ||
	    !memchr(buf + 16, 0, RP_REPLY_MESSAGE_LEN))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MESSAGE_MAX)
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		return 0;
	send_input(sv[0], data, size);
	int before = dup(0); /* the lowest free fd: a leaked fd would take it */
	close(before);
	struct rp_hello hello;
	struct ucred peer;
	struct rp_err err = { 0 };
	int rc = rp_hello_receive(sv[1], &hello, &peer, &err);
	check_hello(rc, &hello, &peer);
	if (rc == 0 && hello.offer_ring)
		close(hello.ring_fd); /* the receiver's: kept only with a valid offer */
	/* Nothing more is waiting: -EAGAIN, not a block. */
	if (rp_hello_receive(sv[1], &hello, &peer, &err) != -EAGAIN)
		abort();
	int after = dup(0);
	close(after);
	if (after != before)
		abort();
	/* Every refusal's message fits a reply. */
	if (rc < 0) {
		if (rp_hello_reply(sv[1], rc, err.msg, -1) != 0)
			abort();
		check_reply(sv[0]);
	}
	close(sv[0]);
	close(sv[1]);
	return 0;
}
