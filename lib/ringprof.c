/* libringprof (ringprof.h).
 *
 * Each thread owns one producer ring, asked from the daemon with a hello
 * on its first annotation.  Without a daemon the thread stays
 * disconnected and retries at most once a second, judged by the vDSO
 * coarse clock, so annotations then cost a clock read and a compare.
 *
 * A dead daemon stops draining, and nothing else tells the producer: the
 * thread checks the consumer heartbeat in the ring header every
 * CHECK_EVERY events (within FULL_CHECK_EVERY once the ring is full), and
 * a beat older than STALE_NS drops the ring, so the thread reconnects to
 * the next daemon.
 *
 * Built with RINGPROF_NO_SESSIONS (the Python extension, python/setup.py)
 * it is the annotations alone: no session calls, so no jansson and no
 * libcurl to build or load. */
#include "ringprof/ringprof.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef RINGPROF_NO_SESSIONS
#include <jansson.h>

#include "client.h"
#endif
#include "clock.h"
#include "hello.h"
#include "parse.h"
#include "paths.h"
#include "shmring.h"

#define CHECK_EVERY 4096u
#define FULL_CHECK_EVERY 64u
#define STALE_NS (2 * 1000000000ull)
#define RETRY_NS 1000000000ull
/* A daemon that times out the hello is hung: back off up to this, so a
 * thread does not sit in the hello's 1 s timeout every other second. */
#define RETRY_MAX_NS (64 * RETRY_NS)

struct thread_state {
	struct rp_shmring *ring;     /* NULL: disconnected */
	uint64_t retry_at_ns;        /* CLOCK_MONOTONIC_COARSE */
	uint64_t hung_wait_ns;       /* after the next hello timeout; 0: RETRY_NS */
	uint64_t dropped_before;     /* by the rings this thread had before */
	uint32_t until_check;        /* events until the heartbeat check */
	char name[RP_HELLO_THREAD_LEN]; /* ringprof_thread_name; "": comm */
};

static __thread struct thread_state self;

/* Closes an exiting thread's ring, so short-lived threads do not leak
 * their rings. */
static pthread_key_t exit_key;

static uint64_t coarse_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void disconnect(struct thread_state *t)
{
	t->dropped_before += rp_shmring_dropped(t->ring);
	rp_shmring_close(t->ring);
	t->ring = NULL;
	pthread_setspecific(exit_key, NULL);
}

static void on_thread_exit(void *ring)
{
	if (ring == self.ring)
		disconnect(&self);
}

/* The child of fork() must not write into its parent's single-producer
 * ring: it gets a ring of its own on its next annotation.  The old
 * mapping is leaked, not unmapped: fork() may come from a signal handler
 * that interrupted an annotation of this very thread. */
static void after_fork_child(void)
{
	char name[sizeof(self.name)];
	memcpy(name, self.name, sizeof(name));
	self = (struct thread_state){ 0 };
	memcpy(self.name, name, sizeof(name));
	pthread_setspecific(exit_key, NULL);
}

__attribute__((constructor)) static void init(void)
{
	pthread_key_create(&exit_key, on_thread_exit);
	pthread_atfork(NULL, NULL, after_fork_child);
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

/* A daemon that is there but refuses this process (the socket's
 * permissions, its limits) silently loses all of the process's
 * annotations: say so on stderr, once per process, with the fix.  No
 * daemon at all (ENOENT, ECONNREFUSED) stays silent, as annotating
 * without a daemon is harmless by design, and so does a daemon that does
 * not answer in time (EAGAIN: retried).  RINGPROF_QUIET=1 silences it. */
static void warn_refused(int rc, const char *socket, const struct rp_err *err)
{
	static atomic_bool warned;
	if (rc == -ENOENT || rc == -ECONNREFUSED || rc == -EAGAIN)
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

__attribute__((noinline, cold)) static struct rp_shmring *
connect_ring(struct thread_state *t)
{
	char sock[PATH_MAX], producers[PATH_MAX] = "";
	struct rp_hello h = {
		.pid = (uint32_t)getpid(),
		.tid = (uint32_t)gettid(),
		.device = "host",
	};
	/* The device's stable id, for a workload that knows it; one that
	 * does not fit is left out rather than cut into another id. */
	const char *uid = getenv("RINGPROF_DEVICE_UID");
	if (uid && strlen(uid) < sizeof(h.device_uid))
		memcpy(h.device_uid, uid, strlen(uid));
	if (t->name[0])
		memcpy(h.thread_name, t->name, sizeof(h.thread_name));
	else
		prctl(PR_GET_NAME, h.thread_name);

	struct rp_err err = { 0 };
	struct rp_shmring *ring = NULL;
	int fd = -1;
	int rc = -ENAMETOOLONG;
	if (rp_default_socket_path(sock, sizeof(sock)) &&
	    rp_producer_socket_path(sock, producers, sizeof(producers)))
		rc = rp_hello_request(producers, &h, &fd, &err);
	if (rc == 0) {
		rc = rp_shmring_map(fd, &ring, &err);
		close(fd);
	}
	uint64_t wait = RETRY_NS;
	if (rc == -EAGAIN) {
		wait = t->hung_wait_ns ? t->hung_wait_ns : RETRY_NS;
		t->hung_wait_ns = wait < RETRY_MAX_NS ? 2 * wait : RETRY_MAX_NS;
	} else {
		t->hung_wait_ns = 0;
	}
	if (rc < 0) {
		warn_refused(rc, producers, &err);
		/* From now, not from before the attempt, which may have spent
		 * the hello's whole timeout. */
		t->retry_at_ns = coarse_now_ns() + wait;
		return NULL;
	}
	t->ring = ring;
	t->until_check = CHECK_EVERY;
	pthread_setspecific(exit_key, ring);
	return ring;
}

static inline struct rp_shmring *connect_if_due(struct thread_state *t)
{
	if (__builtin_expect(coarse_now_ns() < t->retry_at_ns, 1))
		return NULL;
	return connect_ring(t);
}

/* Whether the daemon still drains t's ring; if not, goes disconnected
 * and tries the next daemon at once. */
__attribute__((noinline, cold)) static struct rp_shmring *
check_beat(struct thread_state *t)
{
	t->until_check = CHECK_EVERY;
	uint64_t beat = rp_shmring_consumer_beat_ns(t->ring);
	if ((int64_t)(rp_clock_now_ns() - beat) <= (int64_t)STALE_NS)
		return t->ring;
	disconnect(t);
	t->retry_at_ns = 0;
	return connect_if_due(t);
}

/* The ring an event goes to, or NULL to drop it silently. */
static inline struct rp_shmring *ring_for_event(struct thread_state *t)
{
	if (__builtin_expect(t->ring == NULL, 0))
		return connect_if_due(t);
	if (__builtin_expect(--t->until_check == 0, 0))
		return check_beat(t);
	return t->ring;
}

/* A full ring is either a burst or a daemon that stopped draining: the
 * heartbeat check comes within FULL_CHECK_EVERY events, not at once.  A
 * burst drops every event until the next drain, and a clock read per
 * drop would triple its cost (bench/append). */
static inline void written(struct thread_state *t, bool ok)
{
	if (__builtin_expect(!ok, 0) && t->until_check > FULL_CHECK_EVERY)
		t->until_check = FULL_CHECK_EVERY;
}

void ringprof_range_begin(const char *name)
{
	struct thread_state *t = &self;
	struct rp_shmring *r = ring_for_event(t);
	if (r)
		written(t, rp_shm_range_begin_now(r, name));
}

void ringprof_range_end(void)
{
	struct thread_state *t = &self;
	struct rp_shmring *r = ring_for_event(t);
	if (r)
		written(t, rp_shm_range_end_now(r));
}

void ringprof_instant(const char *name)
{
	struct thread_state *t = &self;
	struct rp_shmring *r = ring_for_event(t);
	if (r)
		written(t, rp_shm_instant_now(r, name));
}

void ringprof_counter(const char *name, double value)
{
	struct thread_state *t = &self;
	struct rp_shmring *r = ring_for_event(t);
	if (r)
		written(t, rp_shm_counter_now(r, name, value));
}

/* Kept for the hellos of later connections; a connected ring gets a
 * record now. */
void ringprof_thread_name(const char *name)
{
	struct thread_state *t = &self;
	snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
	if (t->ring)
		written(t, rp_shm_thread_name(t->ring, rp_shmring_now(t->ring), t->name));
}

uint64_t ringprof_dropped(void)
{
	struct thread_state *t = &self;
	return t->dropped_before + (t->ring ? rp_shmring_dropped(t->ring) : 0);
}

int ringprof_connected(void)
{
	struct thread_state *t = &self;
	struct rp_shmring *r = t->ring ? check_beat(t) : connect_if_due(t);
	return r != NULL;
}

#ifndef RINGPROF_NO_SESSIONS
static __thread char last_error[sizeof(((struct rp_err *)0)->msg)];

const char *ringprof_last_error(void)
{
	return last_error;
}

static int fail(const struct rp_err *err)
{
	snprintf(last_error, sizeof(last_error), "%s", err->msg);
	return err->code;
}

/* One control API call; takes body.  On success *resp is the answer. */
static int call(const char *method, const char *path, json_t *body, json_t **resp)
{
	struct rp_client_opts opts = { .client_name = "library" };
	struct rp_client *c = NULL;
	struct rp_err err = { 0 };
	int rc = rp_client_new(&opts, &c, &err);
	if (rc == 0) {
		rc = rp_client_call(c, method, path, body, resp, &err);
		rp_client_free(c);
	}
	json_decref(body);
	if (rc < 0) {
		if (!err.code)
			rp_err_set(&err, rc, "%s %s failed: %s", method, path, strerror(-rc));
		return fail(&err);
	}
	return 0;
}

/* Copies the session id from a session object; takes resp. */
static int copy_id(json_t *resp, char *out, size_t len)
{
	struct rp_err err = { 0 };
	const char *id = json_string_value(json_object_get(resp, "id"));
	if (!id)
		rp_err_set(&err, -EPROTO, "ringprofd answered without a session id");
	else if (out && strlen(id) >= len)
		rp_err_set(&err, -ENAMETOOLONG, "session %s needs a %zu-byte id buffer, "
			   "got %zu bytes", id, strlen(id) + 1, len);
	else if (out)
		memcpy(out, id, strlen(id) + 1);
	json_decref(resp);
	return err.code ? fail(&err) : 0;
}

int ringprof_session_start(const char *name, char *id_out, size_t len)
{
	json_t *body = json_object();
	if (name)
		json_object_set_new(body, "name", json_string(name));
	json_t *resp = NULL;
	int rc = call("POST", "/v1/sessions", body, &resp);
	return rc < 0 ? rc : copy_id(resp, id_out, len);
}

int ringprof_session_stop(const char *id)
{
	struct rp_err err = { 0 };
	char path[128];
	int rc = rp_check_name(id ? id : "", 63, "session id", &err);
	if (rc < 0)
		return fail(&err);
	snprintf(path, sizeof(path), "/v1/sessions/%s/stop", id);
	json_t *resp = NULL;
	rc = call("POST", path, NULL, &resp);
	json_decref(resp);
	return rc;
}

int ringprof_snapshot(uint64_t last_ns, char *session_out, size_t len)
{
	if (last_ns > INT64_MAX) {
		struct rp_err err = { 0 };
		rp_err_set(&err, -EINVAL, "snapshot length %llu ns is too large; give at "
			   "most the daemon's max_duration", (unsigned long long)last_ns);
		return fail(&err);
	}
	json_t *body = json_object();
	if (last_ns)
		json_object_set_new(body, "last_ns", json_integer((json_int_t)last_ns));
	json_t *resp = NULL;
	int rc = call("POST", "/v1/snapshot", body, &resp);
	return rc < 0 ? rc : copy_id(resp, session_out, len);
}
#endif
