/* libringprof (ringprof.h): the public API over the producer client
 * (producer/producer.h), which owns each thread's ring: its hello, its
 * heartbeat check, its reconnects.
 *
 * Each thread owns one producer ring, asked from the daemon with a hello
 * on its first annotation.  Without a daemon the thread stays
 * disconnected and retries at most once a second, judged by the vDSO
 * coarse clock, so annotations then cost a clock read and a compare.
 *
 * The thread checks the consumer heartbeat every CHECK_EVERY events
 * (within FULL_CHECK_EVERY once the ring is full): a daemon that died
 * leaves the ring to the next daemon, which the client offers it to.
 *
 * Built with RINGPROF_NO_SESSIONS (the Python extension, python/setup.py)
 * it is the annotations alone: no session calls, so no jansson and no
 * libcurl to build or load. */
#include "ringprof/ringprof.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef RINGPROF_NO_SESSIONS
#include <jansson.h>

#include "client.h"
#include "parse.h"
#endif
#include "hello.h"
#include "producer.h"
#include "shmring.h"

#define CHECK_EVERY 4096u
#define FULL_CHECK_EVERY 64u

struct thread_state {
	struct rp_shmring *ring;     /* NULL: disconnected */
	struct rp_producer *client;  /* NULL: none yet */
	uint64_t retry_at_ns;        /* CLOCK_MONOTONIC_COARSE, while disconnected */
	uint32_t until_check;        /* events until the heartbeat check */
	char name[RP_HELLO_THREAD_LEN]; /* ringprof_thread_name; "": comm */
};

static __thread struct thread_state self;

static uint64_t coarse_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Closes an exiting thread's ring, so short-lived threads do not leak
 * their rings. */
static pthread_key_t exit_key;

static void on_thread_exit(void *client)
{
	if (client == self.client) {
		rp_producer_free(self.client);
		self.client = NULL;
		self.ring = NULL;
	}
}

/* The child of fork() must not write into its parent's single-producer
 * ring: it gets a ring of its own on its next annotation.  The old client
 * and mapping are leaked, not freed: fork() may come from a signal
 * handler that interrupted an annotation of this very thread. */
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

/* exit() runs no thread-exit destructors: the exiting thread's client
 * (the main thread's, mostly) is freed here, so that a ring its daemon
 * left is handed to a daemon that is back (rp_producer_free). */
__attribute__((destructor)) static void fini(void)
{
	on_thread_exit(self.client);
}

/* The ring the client hands out, set up for the heartbeat countdown. */
static struct rp_shmring *use_ring(struct thread_state *t, struct rp_shmring *ring)
{
	t->ring = ring;
	t->until_check = CHECK_EVERY;
	return ring;
}

__attribute__((noinline, cold)) static struct rp_shmring *
connect_ring(struct thread_state *t)
{
	if (!t->client) {
		/* The device's stable id, for a workload that knows it. */
		struct rp_producer_opts opts = { .device = "host",
						 .device_uid = getenv("RINGPROF_DEVICE_UID") };
		if (rp_producer_new(&opts, &t->client, NULL) < 0)
			return NULL;
		rp_producer_set_thread_name(t->client, t->name);
		pthread_setspecific(exit_key, t->client);
	}
	struct rp_shmring *ring = use_ring(t, rp_producer_connect(t->client));
	t->retry_at_ns = rp_producer_next_try_ns(t->client);
	return ring;
}

static inline struct rp_shmring *connect_if_due(struct thread_state *t)
{
	if (__builtin_expect(coarse_now_ns() < t->retry_at_ns, 1))
		return NULL;
	return connect_ring(t);
}

/* Whether the daemon still drains t's ring; if not, the client offers it
 * to the next daemon (when due) and the thread writes on into it. */
__attribute__((noinline, cold)) static struct rp_shmring *
check_beat(struct thread_state *t)
{
	return use_ring(t, rp_producer_check(t->client));
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
	if (t->client)
		rp_producer_set_thread_name(t->client, t->name);
	if (t->ring)
		written(t, rp_shm_thread_name(t->ring, rp_shmring_now(t->ring), t->name));
}

uint64_t ringprof_dropped(void)
{
	struct thread_state *t = &self;
	return t->client ? rp_producer_dropped(t->client) : 0;
}

int ringprof_connected(void)
{
	struct thread_state *t = &self;
	if (t->ring)
		check_beat(t);
	else
		connect_if_due(t);
	return t->client && rp_producer_connected(t->client);
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
