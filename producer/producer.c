/* The producer client (producer.h).
 *
 * A dead daemon stops draining, and nothing else tells the producer: the
 * heartbeat the consumer stamps in the ring header at every drain is
 * older than STALE_NS then.  The ring is kept, not dropped: the producer
 * goes on writing into it while it has room, and its next hello offers
 * it, so a restarted daemon drains what the old one left unread.  A
 * daemon that refuses the offered ring (another version, a bad header)
 * gets a hello for a new ring at once, and the old ring's events are
 * lost. */
#include "producer.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "hello.h"
#include "paths.h"

#define STALE_NS (2 * 1000000000ull)
#define RETRY_NS 1000000000ull
/* A daemon that times out the hello is hung: back off up to this, so a
 * thread does not sit in the hello's 1 s timeout every other second. */
#define RETRY_MAX_NS (64 * RETRY_NS)

struct rp_producer {
	struct rp_shmring *ring;     /* NULL: none yet */
	bool drained;                /* a live daemon drains ring */
	uint64_t retry_at_ns;        /* CLOCK_MONOTONIC_COARSE */
	uint64_t hung_wait_ns;       /* after the next hello timeout; 0: RETRY_NS */
	uint64_t dropped_before;     /* by the rings this client had before */
	uint32_t ring_size;
	enum rp_shm_clock clock;
	int64_t clock_offset_ns;
	char device[RP_HELLO_DEVICE_LEN];
	char device_uid[RP_HELLO_DEVICE_UID_LEN];
	char thread_name[RP_HELLO_THREAD_LEN]; /* "": comm */
	char socket[PATH_MAX];       /* the control socket; "": the default */
};

static uint64_t coarse_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int rp_producer_new(const struct rp_producer_opts *opts, struct rp_producer **out,
		    struct rp_err *err)
{
	const char *device = opts->device ? opts->device : "host";
	const char *socket = opts->socket ? opts->socket : "";
	if (strlen(device) >= RP_HELLO_DEVICE_LEN || strlen(socket) >= PATH_MAX)
		return rp_err_set(err, -EINVAL, "device name %.64s or socket path is too "
				  "long (%d and %d bytes at most)", device,
				  RP_HELLO_DEVICE_LEN - 1, PATH_MAX - 1);
	if (opts->clock != 0 && !rp_shm_clock_valid(opts->clock))
		return rp_err_set(err, -EINVAL, "unknown producer clock %d; use 0 (the "
				  "daemon's choice) or an enum rp_shm_clock", (int)opts->clock);
	struct rp_producer *p = calloc(1, sizeof(*p));
	if (!p)
		return rp_err_set(err, -ENOMEM, "out of memory for a producer client");
	p->ring_size = opts->ring_size;
	p->clock = opts->clock;
	p->clock_offset_ns = opts->clock_offset_ns;
	strcpy(p->device, device);
	if (opts->device_uid && strlen(opts->device_uid) < sizeof(p->device_uid))
		strcpy(p->device_uid, opts->device_uid);
	strcpy(p->socket, socket);
	*out = p;
	return 0;
}

static void drop_ring(struct rp_producer *p)
{
	if (!p->ring)
		return;
	p->dropped_before += rp_shmring_dropped(p->ring);
	rp_shmring_close(p->ring);
	p->ring = NULL;
	p->drained = false;
}

static bool beat_fresh(const struct rp_producer *p)
{
	uint64_t beat = rp_shmring_consumer_beat_ns(p->ring);
	return (int64_t)(rp_clock_now_ns() - beat) <= (int64_t)STALE_NS;
}

void rp_producer_free(struct rp_producer *p)
{
	if (!p)
		return;
	/* What an orphaned ring holds is lost with it: a daemon that is back
	 * by now gets it first, and drains it after the producer is gone. */
	if (p->ring && !beat_fresh(p)) {
		p->drained = false;
		p->retry_at_ns = 0;
		(void)rp_producer_connect(p);
	}
	drop_ring(p);
	free(p);
}

/* The fix for a refusal the daemon's message cannot know: this process
 * may not open the socket at all. */
static void socket_fix(int rc, const char *socket, char *buf, size_t len)
{
	buf[0] = 0;
	if (rc != -EACCES)
		return;
	struct stat st;
	struct group gr, *res = NULL;
	char grbuf[1024];
	if (stat(socket, &st) == 0 &&
	    getgrgid_r(st.st_gid, &gr, grbuf, sizeof(grbuf), &res) == 0 && res)
		snprintf(buf, len, "; %s belongs to group '%s': add the user to it (sudo "
			 "usermod -aG %s $USER, then log in again) or run as root",
			 socket, res->gr_name, res->gr_name);
	else
		snprintf(buf, len, "; the user needs to be in the socket's group (sudo "
			 "usermod -aG ringprof $USER, then log in again) or run as root");
}

/* No daemon at all, or one that does not answer in time: retried. */
static bool daemon_absent(int rc)
{
	return rc == -ENOENT || rc == -ECONNREFUSED || rc == -EAGAIN;
}

/* A daemon that is there but refuses this process (the socket's
 * permissions, its limits) silently loses all of the process's
 * annotations: say so on stderr, once per process, with the fix.  No
 * daemon stays silent, as annotating without a daemon is harmless by
 * design.  RINGPROF_QUIET=1 silences it. */
static void warn_refused(int rc, const char *socket, const struct rp_err *err)
{
	static atomic_bool warned;
	if (daemon_absent(rc))
		return;
	const char *quiet = getenv("RINGPROF_QUIET");
	if ((quiet && quiet[0] && strcmp(quiet, "0") != 0) || atomic_exchange(&warned, true))
		return;
	char fix[512];
	socket_fix(rc, socket, fix, sizeof(fix));
	/* One call on the unbuffered stderr: one write, so lines of threads
	 * and processes do not interleave. */
	(void)fprintf(stderr, "ringprof: this process's annotations are not recorded: "
		      "%s%s (RINGPROF_QUIET=1 silences this warning)\n",
		      err->msg[0] ? err->msg : strerror(-rc), fix);
}

/* One hello: offering p->ring when there is one.  On success p->ring is
 * drained by the daemon that answered. */
static int hello(struct rp_producer *p, const char *socket, struct rp_err *err)
{
	struct rp_hello h = {
		.pid = (uint32_t)getpid(),
		.tid = (uint32_t)gettid(),
		.ring_size = p->ring_size,
		.clock = (uint32_t)p->clock,
		.clock_offset_ns = p->clock_offset_ns,
		.offer_ring = p->ring != NULL,
		.ring_fd = p->ring ? rp_shmring_fd(p->ring) : -1,
	};
	memcpy(h.device, p->device, sizeof(h.device));
	memcpy(h.device_uid, p->device_uid, sizeof(h.device_uid));
	if (p->thread_name[0])
		memcpy(h.thread_name, p->thread_name, sizeof(h.thread_name));
	else
		prctl(PR_GET_NAME, h.thread_name);
	int fd = -1;
	int rc = rp_hello_request(socket, &h, &fd, err);
	if (rc < 0)
		return rc;
	if (!p->ring) {
		struct rp_shmring *ring;
		rc = rp_shmring_map(fd, &ring, err);
		if (rc == 0)
			p->ring = ring;
	}
	close(fd); /* the offered ring's own, or dup'ed by the mapping */
	p->drained = rc == 0;
	return rc;
}

struct rp_shmring *rp_producer_connect(struct rp_producer *p)
{
	if (p->drained || coarse_now_ns() < p->retry_at_ns)
		return p->ring;
	char sock[PATH_MAX], producers[PATH_MAX] = "";
	struct rp_err err = { 0 };
	int rc = -ENAMETOOLONG;
	bool have_sock = p->socket[0] ? (strcpy(sock, p->socket), true)
				      : rp_default_socket_path(sock, sizeof(sock)) != NULL;
	if (have_sock && rp_producer_socket_path(sock, producers, sizeof(producers)))
		rc = hello(p, producers, &err);
	/* A daemon that will not drain the offered ring gives a new one. */
	if (rc < 0 && p->ring && !daemon_absent(rc)) {
		drop_ring(p);
		err = (struct rp_err){ 0 };
		rc = hello(p, producers, &err);
	}
	uint64_t wait = RETRY_NS;
	if (rc == -EAGAIN) {
		wait = p->hung_wait_ns ? p->hung_wait_ns : RETRY_NS;
		p->hung_wait_ns = wait < RETRY_MAX_NS ? 2 * wait : RETRY_MAX_NS;
	} else {
		p->hung_wait_ns = 0;
	}
	if (rc < 0) {
		warn_refused(rc, producers, &err);
		/* From now, not from before the attempt, which may have spent
		 * the hello's whole timeout. */
		p->retry_at_ns = coarse_now_ns() + wait;
	}
	return p->ring;
}

struct rp_shmring *rp_producer_check(struct rp_producer *p)
{
	if (!p->ring)
		return rp_producer_connect(p);
	if (beat_fresh(p))
		return p->ring;
	/* Newly orphaned: look for the next daemon at once. */
	if (p->drained)
		p->retry_at_ns = 0;
	p->drained = false;
	return rp_producer_connect(p);
}

uint64_t rp_producer_next_try_ns(const struct rp_producer *p)
{
	return p->retry_at_ns;
}

bool rp_producer_connected(const struct rp_producer *p)
{
	return p->drained;
}

void rp_producer_set_thread_name(struct rp_producer *p, const char *name)
{
	snprintf(p->thread_name, sizeof(p->thread_name), "%s", name ? name : "");
}

void rp_producer_set_clock_offset(struct rp_producer *p, int64_t offset_ns)
{
	p->clock_offset_ns = offset_ns;
	if (p->ring)
		rp_shmring_set_clock_offset(p->ring, offset_ns);
}

uint64_t rp_producer_dropped(const struct rp_producer *p)
{
	return p->dropped_before + (p->ring ? rp_shmring_dropped(p->ring) : 0);
}
