#include "producers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "hello.h"
#include "paths.h"
#include "shmring.h"

struct rp_producers {
	const struct rp_config *cfg;
	struct rp_rings *rings;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int listen_fd;
	int stop_pipe[2];
	enum rp_shm_clock clock;
	pthread_t thread;
};

static void serve_one(struct rp_producers *p, int conn)
{
	/* A producer that connects and says nothing must not hold up the
	 * others for long. */
	struct timeval tv = { .tv_sec = 1 };
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct rp_hello hello;
	struct ucred peer;
	struct rp_err err = { 0 };
	int rc = rp_hello_receive(conn, &hello, &peer, &err);
	if (rc < 0) {
		rp_hello_reply(conn, rc, err.msg, -1);
		return;
	}
	uint32_t size = hello.ring_size ? hello.ring_size : p->cfg->producer_ring_size;
	struct rp_shmring *ring;
	/* The pid as this daemon sees it: a containerised producer knows its own
	 * namespace's pid, which would mislabel its events and break reaping. */
	rc = rp_shmring_create(size, (uint32_t)peer.pid, hello.tid, p->clock, &ring, &err);
	if (rc == 0) {
		/* Attach before replying, so a producer never writes into a ring
		 * nobody drains.  Should the reply fail, the ring stays attached
		 * and is reaped with the producer's process. */
		int dupfd = dup(rp_shmring_fd(ring));
		rc = rp_rings_attach(p->rings, hello.device, ring, hello.thread_name, &err);
		if (rc == 0) {
			rp_hello_reply(conn, 0, "ok", dupfd);
		} else {
			rp_shmring_close(ring);
			rp_hello_reply(conn, rc, err.msg, -1);
		}
		if (dupfd >= 0)
			close(dupfd);
		return;
	}
	rp_hello_reply(conn, rc, err.msg, -1);
}

static void *accept_main(void *arg)
{
	struct rp_producers *p = arg;
	for (;;) {
		struct pollfd fds[2] = { { p->listen_fd, POLLIN, 0 }, { p->stop_pipe[0], POLLIN, 0 } };
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[1].revents)
			break;
		int conn = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (conn < 0)
			continue;
		serve_one(p, conn);
		close(conn);
	}
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
	rp_producer_socket_path(cfg->socket, p->path, sizeof(p->path));
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(p->path) >= sizeof(addr.sun_path)) {
		rp_err_set(err, -ENAMETOOLONG, "producer socket path too long: %s", p->path);
		free(p);
		return -ENAMETOOLONG;
	}
	strcpy(addr.sun_path, p->path);
	p->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
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
	if (rc < 0 || listen(p->listen_fd, 64) < 0) {
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
