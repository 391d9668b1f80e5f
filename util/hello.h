/* The producer handshake (docs/api.md, "Producer socket"): a producer
 * sends one fixed-size hello over the daemon's SOCK_SEQPACKET producer
 * socket; the daemon answers with one reply carrying the new ring's memfd
 * as SCM_RIGHTS.  Both sides live here so they cannot drift apart. */
#ifndef RINGPROF_HELLO_H
#define RINGPROF_HELLO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "err.h"
#include "names.h"

/* Wire sizes, little-endian, fixed.  A version-1 hello (144 bytes, no
 * clock or offered ring: a producer linked against an older libringprof)
 * is still accepted. */
#define RP_HELLO_SIZE 224
#define RP_HELLO_V1_SIZE 144
#define RP_REPLY_SIZE 264
#define RP_HELLO_VERSION 2
#define RP_HELLO_DEVICE_LEN RP_NAME_LEN /* incl. the NUL; 64 on the wire */
#define RP_HELLO_THREAD_LEN 56   /* incl. the NUL */
/* A thread name ending in this says that the producer's collector stood
 * aside for another tool (libringprof-cupti.so for another CUPTI
 * subscriber): ringprof status lists such producers per ring. */
#define RP_HELLO_STOOD_ASIDE " (stood aside)"
#define RP_REPLY_MESSAGE_LEN 248 /* incl. the NUL */
#define RP_HELLO_CLOCK_MAX 3     /* the last enum rp_shm_clock */
#define RP_HELLO_DEVICE_UID_LEN 64 /* incl. the NUL */

struct rp_hello {
	uint32_t pid, tid;     /* as the producer sees them */
	uint32_t ring_size;    /* data bytes wanted; 0: the daemon's default */
	char device[RP_HELLO_DEVICE_LEN];      /* ring name: "host", "gpu0", ... */
	char thread_name[RP_HELLO_THREAD_LEN]; /* may be empty */
	/* Version 2: how the producer stamps (0: the daemon's choice of the
	 * host clocks, else enum rp_shm_clock) and, for a foreign clock, its
	 * offset to host CLOCK_MONOTONIC ns. */
	uint32_t clock;
	int64_t clock_offset_ns;
	/* Version 2: the producer offers ring_fd, the ring an earlier daemon
	 * gave it, with what that daemon left unread, instead of asking for
	 * a new one.  Received, ring_fd is the caller's to close. */
	bool offer_ring;
	int ring_fd;
	/* Version 2: the device's stable id (a GPU UUID), printable ASCII;
	 * may be empty.  The ring keeps the first one it is given. */
	char device_uid[RP_HELLO_DEVICE_UID_LEN];
};

/* Producer: connect to the producer socket, send hello and wait for the
 * reply, each step bounded by about a second so that a hung daemon cannot
 * stall the program for long.  On success *ring_fd is the ring's memfd
 * (O_CLOEXEC, the caller owns it): the offered one's when the hello
 * offers a ring.  The daemon's refusal comes back as its
 * status with its message in err; no daemon gives -ENOENT/-ECONNREFUSED,
 * a daemon that does not answer -EAGAIN. */
RP_MUST_CHECK int rp_hello_request(const char *producer_socket, const struct rp_hello *hello,
		     int *ring_fd, struct rp_err *err);

/* Daemon: read one hello from an accepted connection and validate it
 * (size, magic, version, NUL-terminated strings, device name) and its
 * sender: *peer gets SO_PEERCRED, and a pid that is not the sender's (in
 * the daemon's or the sender's own pid namespace) is -EPERM.  Blocks
 * unless conn_fd is non-blocking (then -EAGAIN) or has a receive timeout;
 * fds sent along are closed, except the one ring a valid hello offers.  Errors: -EPROTO for a malformed hello,
 * -EINVAL for a bad device name, -ECONNRESET when the peer hung up. */
RP_MUST_CHECK int rp_hello_receive(int conn_fd, struct rp_hello *hello, struct ucred *peer,
		     struct rp_err *err);

/* Daemon: answer a hello.  status is 0 or a negative errno; message
 * (may be NULL, truncated to fit) tells the producer why; ring_fd is sent
 * only with status 0 and then must be >= 0.  Returns 0 or -errno (-EPIPE:
 * the producer is gone). */
RP_MUST_CHECK int rp_hello_reply(int conn_fd, int status, const char *message, int ring_fd);

#endif
