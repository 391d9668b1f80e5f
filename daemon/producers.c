#include "producers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "hello.h"
#include "paths.h"
#include "shmring.h"

/* Connections waiting for their hello.  A peer that connects and says
 * nothing holds a slot until HELLO_DEADLINE_NS; when every slot is taken,
 * or its uid holds MAX_PENDING_PER_UID, a new connection takes the slot of
 * the oldest (of that uid): idle peers cannot keep real producers, which
 * send their hello at once, out. */
#define MAX_PENDING 64
#define MAX_PENDING_PER_UID 16
#define HELLO_DEADLINE_NS (2 * 1000000000ull)
/* Connections accepted per round, so that hellos waiting are served too. */
#define ACCEPT_BATCH 32

struct conn {
	int fd;
	uid_t uid;
	uint64_t deadline_ns;
};

struct rp_producers {
	const struct rp_config *cfg;
	struct rp_rings *rings;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	int stop_pipe[2];
	enum rp_shm_clock clock;
	uint64_t consumer_id;  /* this run's, in the rings it drains */
	pthread_t thread;
	struct conn conns[MAX_PENDING]; /* oldest first; the thread's alone */
	unsigned nconns;
};

/* A new ring for hello, in the clock it asks for. */
static int new_ring(struct rp_producers *p, const struct rp_hello *hello,
		    const struct ucred *peer, struct rp_shmring **out, struct rp_err *err)
{
	uint32_t size = hello->ring_size ? hello->ring_size : p->cfg->producer_ring_size;
	enum rp_shm_clock clock = hello->clock ? (enum rp_shm_clock)hello->clock : p->clock;
	/* The pid as this daemon sees it: a containerised producer knows its own
	 * namespace's pid, which would mislabel its events and break reaping. */
	int rc = rp_shmring_create(size, (uint32_t)peer->pid, hello->tid, clock, out, err);
	if (rc == 0)
		rp_shmring_set_clock_offset(*out, hello->clock_offset_ns);
	return rc;
}

/* The ring an earlier daemon gave the producer, with what it left unread:
 * untrusted, checked as any ring (rp_shmring_map) and bounded as a new
 * one would be; it keeps its clock.  -EALREADY: this daemon drains it
 * already. */
static int adopt_ring(struct rp_producers *p, const struct rp_hello *hello,
		      const struct ucred *peer, struct rp_shmring **out, struct rp_err *err)
{
	int rc = rp_shmring_adopt(hello->ring_fd, (uint32_t)peer->pid, hello->tid,
				  p->consumer_id, out, err);
	if (rc == 0 && rp_shmring_capacity(*out) > RP_PRODUCER_RING_MAX) {
		rc = rp_err_set(err, -EFBIG, "the offered ring holds %zu MiB; a producer "
				"ring is at most %u MiB: ask for a new ring",
				rp_shmring_capacity(*out) >> 20, RP_PRODUCER_RING_MAX >> 20);
		rp_shmring_close(*out);
	}
	return rc;
}

/* Make, or take over, the ring hello asks for and attach it; 0 or the
 * refusal, with its message in err. */
static int attach_ring(struct rp_producers *p, const struct rp_hello *hello,
		       const struct ucred *peer, int *ring_fd, struct rp_err *err)
{
	if (hello->ring_size > RP_PRODUCER_RING_MAX)
		return rp_err_set(err, -EFBIG, "the hello asks for a %u MiB ring; a producer "
				  "ring is at most %u MiB (the bound of [producers] ring_size): "
				  "ask for less, or 0 for the daemon's default",
				  hello->ring_size >> 20, RP_PRODUCER_RING_MAX >> 20);
	struct rp_shmring *ring;
	int rc = hello->offer_ring ? adopt_ring(p, hello, peer, &ring, err)
				   : new_ring(p, hello, peer, &ring, err);
	if (rc == -EALREADY) {
		/* Still drained here: the producer carries on with it. */
		*ring_fd = dup(hello->ring_fd);
		return *ring_fd < 0 ? rp_err_set(err, -errno, "cannot dup a ring fd: %s",
						 strerror(errno)) : 0;
	}
	if (rc < 0)
		return rc;
	rp_shmring_set_consumer(ring, p->consumer_id);
	/* Attach before replying, so a producer never writes into a ring
	 * nobody drains.  Should the reply fail, the ring stays attached and
	 * is reaped with the producer's process.  The daemon keeps the ring's
	 * mapping, not its fd: rings cost no fds. */
	*ring_fd = rp_shmring_take_fd(ring);
	/* A pid the producer sees as the daemon does: so are its tids. */
	bool own_tid = hello->pid == (uint32_t)peer->pid;
	rc = rp_rings_attach(p->rings, hello->device, hello->device_uid, ring, own_tid,
			     hello->thread_name, err);
	if (rc < 0) {
		rp_shmring_close(ring);
		close(*ring_fd);
		*ring_fd = -1;
	}
	return rc;
}

/* Answer the hello waiting on conn.  -EAGAIN: none yet. */
static int serve_one(struct rp_producers *p, int conn)
{
	struct rp_hello hello;
	struct ucred peer;
	struct rp_err err = { 0 };
	int fd = -1;
	int rc = rp_hello_receive(conn, &hello, &peer, &err);
	if (rc == -EAGAIN)
		return rc;
	if (rc == 0) {
		rc = attach_ring(p, &hello, &peer, &fd, &err);
		if (hello.offer_ring)
			close(hello.ring_fd);
	}
	(void)rp_hello_reply(conn, rc, rc == 0 ? "ok" : err.msg, fd);
	if (fd >= 0)
		close(fd);
	return rc;
}

static void drop_conn(struct rp_producers *p, unsigned i)
{
	close(p->conns[i].fd);
	memmove(&p->conns[i], &p->conns[i + 1], (p->nconns - i - 1) * sizeof(p->conns[0]));
	p->nconns--;
}

/* The slot a new connection of uid takes: a free one, or the oldest
 * connection's (of uid, when uid holds its share), told why first. */
static void make_room(struct rp_producers *p, uid_t uid)
{
	unsigned mine = 0, oldest_mine = 0;
	for (unsigned i = p->nconns; i-- > 0;)
		if (p->conns[i].uid == uid) {
			mine++;
			oldest_mine = i;
		}
	unsigned victim;
	if (mine >= MAX_PENDING_PER_UID)
		victim = oldest_mine;
	else if (p->nconns == MAX_PENDING)
		victim = 0;
	else
		return;
	(void)rp_hello_reply(p->conns[victim].fd, -EBUSY, "too many connections wait for "
			     "their hello: send the hello right after connecting", -1);
	drop_conn(p, victim);
}

static void accept_conns(struct rp_producers *p)
{
	for (int n = 0; n < ACCEPT_BATCH; n++) {
		int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		struct ucred cred;
		socklen_t len = sizeof(cred);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			close(fd);
			continue;
		}
		make_room(p, cred.uid);
		p->conns[p->nconns++] = (struct conn){
			.fd = fd, .uid = cred.uid,
			.deadline_ns = rp_clock_now_ns() + HELLO_DEADLINE_NS,
		};
	}
}

static void *accept_main(void *arg)
{
	struct rp_producers *p = arg;
	struct pollfd fds[2 + MAX_PENDING];
	for (;;) {
		uint64_t now = rp_clock_now_ns();
		int timeout_ms = -1;
		fds[0] = (struct pollfd){ p->listen_fd, POLLIN, 0 };
		fds[1] = (struct pollfd){ p->stop_pipe[0], POLLIN, 0 };
		for (unsigned i = 0; i < p->nconns; i++) {
			fds[2 + i] = (struct pollfd){ p->conns[i].fd, POLLIN, 0 };
			uint64_t left = p->conns[i].deadline_ns > now ? p->conns[i].deadline_ns - now : 0;
			int ms = (int)((left + 999999) / 1000000);
			if (timeout_ms < 0 || ms < timeout_ms)
				timeout_ms = ms;
		}
		unsigned polled = p->nconns;
		if (poll(fds, 2 + polled, timeout_ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[1].revents)
			break;
		now = rp_clock_now_ns();
		/* Backwards, so that dropping one leaves the rest in place. */
		for (unsigned i = polled; i-- > 0;) {
			bool ready = fds[2 + i].revents != 0;
			if ((ready && serve_one(p, p->conns[i].fd) != -EAGAIN) ||
			    now >= p->conns[i].deadline_ns)
				drop_conn(p, i);
		}
		if (fds[0].revents)
			accept_conns(p);
	}
	for (unsigned i = p->nconns; i-- > 0;)
		drop_conn(p, i);
	return NULL;
}

int rp_producers_start(const struct rp_config *cfg, struct rp_rings *rings,
		       struct rp_producers **out, struct rp_err *err)
{
	struct rp_producers *p = calloc(1, sizeof(*p));
	if (!p)
		return rp_err_set(err, -ENOMEM, "out of memory");
	p->cfg = cfg;
	p->rings = rings;
	p->clock = rp_tsc_usable() ? RP_SHM_CLOCK_TSC : RP_SHM_CLOCK_MONOTONIC;
	/* Unique to this run: the pid alone repeats across restarts in a
	 * container; the clock does not. */
	p->consumer_id = rp_clock_now_ns() ^ ((uint64_t)getpid() << 48);
	rp_producer_socket_path(cfg->socket, p->path, sizeof(p->path));
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(p->path) >= sizeof(addr.sun_path)) {
		rp_err_set(err, -ENAMETOOLONG, "producer socket path too long: %s", p->path);
		free(p);
		return -ENAMETOOLONG;
	}
	strcpy(addr.sun_path, p->path);
	p->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (p->listen_fd < 0 || pipe2(p->stop_pipe, O_CLOEXEC) < 0) {
		int e = errno;
		free(p);
		return rp_err_set(err, -e, "cannot create the producer socket: %s", strerror(e));
	}
	/* The control socket was checked for a live daemon first, so a file
	 * left here is stale. */
	unlink(p->path);
	mode_t old = umask(0117);
	int rc = bind(p->listen_fd, (struct sockaddr *)&addr, sizeof(addr));
	umask(old);
	if (rc < 0 || listen(p->listen_fd, 128) < 0) {
		int e = errno;
		close(p->listen_fd);
		close(p->stop_pipe[0]);
		close(p->stop_pipe[1]);
		free(p);
		return rp_err_set(err, -e, "cannot listen on producer socket %s: %s", addr.sun_path,
				  strerror(e));
	}
	rc = -pthread_create(&p->thread, NULL, accept_main, p);
	if (rc < 0) {
		close(p->listen_fd);
		unlink(p->path);
		free(p);
		return rp_err_set(err, rc, "cannot start the producer thread: %s", strerror(-rc));
	}
	*out = p;
	return 0;
}

void rp_producers_stop(struct rp_producers *p)
{
	if (!p)
		return;
	char c = 1;
	if (write(p->stop_pipe[1], &c, 1) == 1)
		pthread_join(p->thread, NULL);
	close(p->listen_fd);
	close(p->stop_pipe[0]);
	close(p->stop_pipe[1]);
	unlink(p->path);
	free(p);
}
