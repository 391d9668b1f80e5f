/* libringprof through its public API, against no daemon and against a
 * fake one (the handshake and rings of util/ and ringbuf/, so the test
 * decides when the consumer drains, refuses or dies).  Every case
 * annotates from threads of its own: the library's state is per thread.
 * Tests against the real daemon are in tests/integration. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ringprof/ringprof.h>

#include "clock.h"
#include "hello.h"
#include "shmring.h"
#include "scratch.h"

#define NO_DAEMON "/nonexistent/ringprofd.sock"
#define MAX_RINGS 16

static void run_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&ts, NULL);
}

/* ---- a fake daemon: answers hellos on <socket>.producers ---- */

struct fake {
	char dir[64], sock[128], producers[160];
	int lfd;
	pthread_t thread;
	atomic_bool stop;
	atomic_bool refuse;            /* reply -EBUSY instead of a ring */
	size_t ring_size;
	pthread_mutex_t lock;          /* guards what follows */
	int hellos;
	int nrings;
	struct rp_shmring *rings[MAX_RINGS];
	struct rp_hello got[MAX_RINGS];
	atomic_bool draining;          /* a drain thread keeps rings beating */
	pthread_t drainer;
	uint64_t drained;
};

static int count_rec(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	(void)r;
	(void)rec;
	(*(uint64_t *)ctx)++;
	return 0;
}

static void *fake_serve(void *arg)
{
	struct fake *f = arg;
	while (!atomic_load(&f->stop)) {
		struct pollfd p = { .fd = f->lfd, .events = POLLIN };
		if (poll(&p, 1, 50) <= 0)
			continue;
		int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		struct rp_hello h = { 0 };
		struct ucred peer;
		struct rp_err err = { 0 };
		struct rp_shmring *ring = NULL;
		int rc = rp_hello_receive(c, &h, &peer, &err);
		if (rc == 0 && atomic_load(&f->refuse))
			rc = rp_err_set(&err, -EBUSY, "refused by the test");
		else if (rc == 0)
			rc = rp_shmring_create(f->ring_size, (uint32_t)peer.pid, h.tid,
					       RP_SHM_CLOCK_MONOTONIC, &ring, &err);
		/* Recorded before the reply, so a producer that got its
		 * answer finds itself counted. */
		pthread_mutex_lock(&f->lock);
		if (f->hellos < MAX_RINGS)
			f->got[f->hellos] = h;
		f->hellos++;
		if (ring && f->nrings < MAX_RINGS)
			f->rings[f->nrings++] = ring;
		pthread_mutex_unlock(&f->lock);
		(void)rp_hello_reply(c, rc, err.msg, ring ? rp_shmring_fd(ring) : -1);
		close(c);
	}
	return NULL;
}

static void *fake_drain(void *arg)
{
	struct fake *f = arg;
	while (atomic_load(&f->draining)) {
		pthread_mutex_lock(&f->lock);
		for (int i = 0; i < f->nrings; i++)
			rp_shmring_drain(f->rings[i], count_rec, &f->drained, 0, NULL);
		pthread_mutex_unlock(&f->lock);
		/* Polls like a daemon: a spinning consumer would bounce the
		 * producer's cache lines on every record. */
		sleep_ms(1);
	}
	return NULL;
}

static struct fake *fake_start(size_t ring_size, bool drain)
{
	struct fake *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	assert_int_equal(scratch_make(f->dir, sizeof(f->dir), "lib"), 0);
	snprintf(f->sock, sizeof(f->sock), "%s/ringprofd.sock", f->dir);
	/* The producer socket as docs/api.md names it. */
	snprintf(f->producers, sizeof(f->producers), "%s.producers", f->sock);
	f->ring_size = ring_size;
	pthread_mutex_init(&f->lock, NULL);
	f->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, f->producers);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 16), 0);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_serve, f), 0);
	atomic_store(&f->draining, drain);
	if (drain)
		assert_int_equal(pthread_create(&f->drainer, NULL, fake_drain, f), 0);
	assert_int_equal(setenv("RINGPROF_SOCKET", f->sock, 1), 0);
	return f;
}

static int fake_hellos(struct fake *f)
{
	pthread_mutex_lock(&f->lock);
	int n = f->hellos;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static void fake_stop(struct fake *f)
{
	if (atomic_exchange(&f->draining, false))
		pthread_join(f->drainer, NULL);
	atomic_store(&f->stop, true);
	pthread_join(f->thread, NULL);
	close(f->lfd);
	(void)scratch_remove(f->dir);
	for (int i = 0; i < f->nrings; i++)
		rp_shmring_close(f->rings[i]);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* Decoded records of one ring. */
struct got {
	uint8_t kind;
	uint32_t tid;
	double value;
	char name[RP_NAME_MAX + 1];
};
struct sink {
	struct got v[64];
	int n;
};

static int collect(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct sink *s = ctx;
	struct rp_event ev;
	char nb[RP_NAME_MAX + 1];
	if (rp_rec_to_event(r, rec, &ev, nb) < 0 || s->n == 64)
		return -EBADMSG;
	struct got *g = &s->v[s->n++];
	g->kind = ev.kind;
	g->tid = ev.tid;
	g->value = ev.kind == RP_EV_COUNTER ? ev.u.counter.value : 0;
	snprintf(g->name, sizeof(g->name), "%s", ev.name ? ev.name : "");
	return 0;
}

/* ---- without a daemon ---- */

struct timing {
	uint64_t pairs;
	double ns_per_call;
	int connected;
	uint64_t dropped;
};

static void *annotate_pairs(void *arg)
{
	struct timing *t = arg;
	ringprof_range_begin("warm-up");
	ringprof_range_end();
	uint64_t t0 = rp_clock_now_ns();
	for (uint64_t i = 0; i < t->pairs; i++) {
		ringprof_range_begin("step");
		ringprof_range_end();
	}
	t->ns_per_call = (double)(rp_clock_now_ns() - t0) / (double)(2 * t->pairs);
	t->connected = ringprof_connected();
	t->dropped = ringprof_dropped();
	return NULL;
}

static void disconnected_annotations_are_cheap(void **state)
{
	(void)state;
	assert_int_equal(setenv("RINGPROF_SOCKET", NO_DAEMON, 1), 0);
	struct timing t = { .pairs = 10000000 };
	run_thread(annotate_pairs, &t);
	printf("# no daemon: %.1f ns per annotation\n", t.ns_per_call);
	assert_int_equal(t.connected, 0);
	assert_int_equal(t.dropped, 0);
	/* Catches blocking or a syscall per event; speed targets are benchmarks. */
	assert_true(t.ns_per_call < 200);
}

static void expect_failure(int rc, int code, const char *words)
{
	assert_int_equal(rc, code);
	if (!strstr(ringprof_last_error(), words))
		fail_msg("last error \"%s\" does not mention \"%s\"", ringprof_last_error(), words);
}

static void session_calls_name_the_socket(void **state)
{
	(void)state;
	assert_int_equal(setenv("RINGPROF_SOCKET", NO_DAEMON, 1), 0);
	char id[64] = "untouched";
	assert_string_equal(ringprof_last_error(), "");
	int rc = ringprof_session_start("mine", id, sizeof(id));
	assert_true(rc < 0);
	assert_non_null(strstr(ringprof_last_error(), NO_DAEMON));
	assert_string_equal(id, "untouched");
	rc = ringprof_snapshot(5000000000ull, id, sizeof(id));
	assert_true(rc < 0);
	assert_non_null(strstr(ringprof_last_error(), NO_DAEMON));
	rc = ringprof_session_stop("2026_11_22_14_03_07");
	assert_true(rc < 0);
	assert_non_null(strstr(ringprof_last_error(), NO_DAEMON));

	expect_failure(ringprof_session_stop("../etc"), -EINVAL, "session id");
	expect_failure(ringprof_session_stop(NULL), -EINVAL, "session id");
	expect_failure(ringprof_snapshot(UINT64_MAX, id, sizeof(id)), -EINVAL, "too large");
}

/* ---- against a fake daemon ---- */

struct named {
	uint32_t tid;
	int connected;
};

static void *annotate_some(void *arg)
{
	struct named *n = arg;
	n->tid = (uint32_t)gettid();
	ringprof_thread_name("probe-worker");
	n->connected = ringprof_connected();
	ringprof_range_begin("outer");
	ringprof_range_begin("inner");
	ringprof_instant("tick");
	ringprof_counter("loss", 0.25);
	ringprof_range_end();
	ringprof_range_end();
	ringprof_thread_name("renamed");
	return NULL;
}

static void *annotate_with_comm(void *arg)
{
	pthread_setname_np(pthread_self(), "comm-name");
	ringprof_instant("x");
	*(int *)arg = ringprof_connected();
	return NULL;
}

static void events_reach_the_daemon_ring(void **state)
{
	(void)state;
	struct fake *f = fake_start(1 << 16, false);
	struct named n = { 0 };
	unsetenv("RINGPROF_DEVICE_UID");
	run_thread(annotate_some, &n);
	assert_int_equal(n.connected, 1);
	assert_int_equal(f->hellos, 1);
	assert_int_equal(f->got[0].pid, getpid());
	assert_int_equal(f->got[0].tid, n.tid);
	assert_int_equal(f->got[0].ring_size, 0);
	assert_string_equal(f->got[0].device, "host");
	assert_string_equal(f->got[0].thread_name, "probe-worker");
	assert_string_equal(f->got[0].device_uid, "");

	struct sink s = { .n = 0 };
	assert_int_equal(rp_shmring_drain(f->rings[0], collect, &s, 0, NULL), 7);
	static const struct { uint8_t kind; const char *name; } want[] = {
		{ RP_EV_RANGE_BEGIN, "outer" }, { RP_EV_RANGE_BEGIN, "inner" },
		{ RP_EV_INSTANT, "tick" }, { RP_EV_COUNTER, "loss" },
		{ RP_EV_RANGE_END, "" }, { RP_EV_RANGE_END, "" },
		{ RP_EV_THREAD_NAME, "renamed" },
	};
	for (int i = 0; i < 7; i++) {
		assert_int_equal(s.v[i].kind, want[i].kind);
		assert_string_equal(s.v[i].name, want[i].name);
		assert_int_equal(s.v[i].tid, n.tid);
	}
	assert_true(s.v[3].value == 0.25);

	/* The device's stable id, when the workload names it. */
	setenv("RINGPROF_DEVICE_UID", "host-uid-1", 1);
	int connected = 0;
	run_thread(annotate_with_comm, &connected);
	unsetenv("RINGPROF_DEVICE_UID");
	assert_int_equal(connected, 1);
	assert_int_equal(f->hellos, 2);
	assert_string_equal(f->got[1].thread_name, "comm-name");
	assert_string_equal(f->got[1].device_uid, "host-uid-1");
	fake_stop(f);
}

static void connected_annotations_are_cheap(void **state)
{
	(void)state;
	/* Room for every record: this times writes, not drops. */
	struct fake *f = fake_start(1 << 26, true);
	struct timing t = { .pairs = 1000000 };
	run_thread(annotate_pairs, &t);
	printf("# fake daemon draining: %.1f ns per annotation, %llu dropped\n",
	       t.ns_per_call, (unsigned long long)t.dropped);
	assert_int_equal(t.connected, 1);
	fake_stop(f);
	assert_true(t.ns_per_call < 1000);
}

struct retry {
	struct fake *f;
	int refused_hellos;
	int connected_refused;
	double reconnect_s;
	int connected;
};

static int fake_rings(struct fake *f)
{
	pthread_mutex_lock(&f->lock);
	int n = f->nrings;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static void *annotate_while_refused(void *arg)
{
	struct retry *r = arg;
	uint64_t t0 = rp_clock_now_ns();
	while (rp_clock_now_ns() - t0 < 2500000000ull) {
		ringprof_instant("spin");
		/* A test-sized pause: fast enough to retry as often as allowed. */
		sleep_ms(1);
	}
	r->refused_hellos = fake_hellos(r->f);
	r->connected_refused = ringprof_connected();

	/* The daemon accepts from now on: the annotations alone reconnect. */
	atomic_store(&r->f->refuse, false);
	t0 = rp_clock_now_ns();
	while (fake_rings(r->f) == 0 && rp_clock_now_ns() - t0 < 3000000000ull) {
		ringprof_instant("spin");
		sleep_ms(1);
	}
	r->reconnect_s = (double)(rp_clock_now_ns() - t0) / 1e9;
	r->connected = ringprof_connected();
	return NULL;
}

static void reconnects_at_most_once_a_second(void **state)
{
	(void)state;
	struct fake *f = fake_start(1 << 16, false);
	atomic_store(&f->refuse, true);
	struct retry r = { .f = f };
	run_thread(annotate_while_refused, &r);
	printf("# %d hellos in 2.5 s while refused, reconnected after %.2f s\n",
	       r.refused_hellos, r.reconnect_s);
	/* t = 0, ~1, ~2 s; coarse-clock rounding may add one. */
	assert_true(r.refused_hellos >= 2 && r.refused_hellos <= 4);
	assert_int_equal(r.connected_refused, 0);
	assert_int_equal(r.connected, 1);
	assert_true(r.reconnect_s < 1.5);
	fake_stop(f);
}

struct stalls {
	int n;
	double at[8], took[8]; /* seconds since the first annotation */
};

static void *annotate_into_a_hung_daemon(void *arg)
{
	struct stalls *st = arg;
	uint64_t t0 = rp_clock_now_ns();
	while (rp_clock_now_ns() - t0 < 5600000000ull) {
		uint64_t a = rp_clock_now_ns();
		ringprof_instant("spin");
		uint64_t b = rp_clock_now_ns();
		if (b - a > 500000000ull && st->n < 8) {
			st->at[st->n] = (double)(a - t0) / 1e9;
			st->took[st->n++] = (double)(b - a) / 1e9;
		}
		sleep_ms(1);
	}
	return NULL;
}

/* A daemon that takes connections but never answers costs the thread the
 * hello's timeout at each retry: retries back off, 1 s, then 2 s, ... */
static void hung_daemon_is_retried_ever_less_often(void **state)
{
	(void)state;
	char dir[64], sock[96];
	assert_int_equal(scratch_make(dir, sizeof(dir), "hung"), 0);
	snprintf(sock, sizeof(sock), "%s/d.sock", dir);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.producers", sock);
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 16), 0); /* and never accept */
	assert_int_equal(setenv("RINGPROF_SOCKET", sock, 1), 0);

	struct stalls st = { .n = 0 };
	run_thread(annotate_into_a_hung_daemon, &st);
	for (int i = 0; i < st.n; i++)
		printf("# stalled at %.2f s for %.2f s\n", st.at[i], st.took[i]);
	/* At 0 s, 2 s (1 s after the first timeout) and 5 s (2 s after the
	 * second); a fixed 1 s would stall a fourth time at 4 s. */
	assert_int_equal(st.n, 3);
	for (int i = 0; i < 3; i++)
		assert_true(st.took[i] < 1.5);
	assert_true(st.at[1] - st.at[0] - st.took[0] > 0.9);
	assert_true(st.at[2] - st.at[1] - st.took[1] > 1.9);
	close(lfd);
	unlink(sa.sun_path);
	(void)scratch_remove(dir);
}

struct beat {
	struct fake *f;
	uint64_t dropped_full, dropped_after;
	int hellos_before, hellos_after;
	int connected;
};

static void *fill_then_wait(void *arg)
{
	struct beat *b = arg;
	/* 4 KiB ring, never drained: fills after a few hundred records. */
	for (int i = 0; i < 1000; i++)
		ringprof_range_end();
	b->dropped_full = ringprof_dropped();
	b->hellos_before = fake_hellos(b->f);
	sleep_ms(2200);
	/* A full ring has its beat checked within 64 writes (not on every
	 * one, which would cost a clock read per dropped event): that check
	 * sees the stale beat and moves to a new ring. */
	for (int i = 0; i < 64; i++)
		ringprof_range_end();
	b->hellos_after = fake_hellos(b->f);
	b->dropped_after = ringprof_dropped();
	b->connected = ringprof_connected();
	return NULL;
}

static void full_ring_of_a_dead_consumer_is_replaced(void **state)
{
	(void)state;
	struct fake *f = fake_start(4096, false);
	struct beat b = { .f = f };
	run_thread(fill_then_wait, &b);
	assert_true(b.dropped_full > 0);
	assert_int_equal(b.hellos_before, 1);
	assert_int_equal(b.hellos_after, 2);
	/* Drops of the old ring still count. */
	assert_true(b.dropped_after >= b.dropped_full);
	assert_int_equal(b.connected, 1);
	fake_stop(f);
}

static void *quiet_then_burst(void *arg)
{
	struct beat *b = arg;
	ringprof_instant("first");
	b->hellos_before = fake_hellos(b->f);
	sleep_ms(2200);
	/* Not full: only the periodic check (every 4096 events) notices. */
	for (int i = 0; i < 5000; i++)
		ringprof_instant("burst");
	b->hellos_after = fake_hellos(b->f);
	return NULL;
}

static void idle_ring_of_a_dead_consumer_is_replaced(void **state)
{
	(void)state;
	struct fake *f = fake_start(1 << 20, false);
	struct beat b = { .f = f };
	run_thread(quiet_then_burst, &b);
	assert_int_equal(b.hellos_before, 1);
	assert_int_equal(b.hellos_after, 2);
	fake_stop(f);

	/* The same with a live consumer keeps its ring. */
	f = fake_start(1 << 20, true);
	b = (struct beat){ .f = f };
	run_thread(quiet_then_burst, &b);
	assert_int_equal(b.hellos_after, 1);
	fake_stop(f);
}

static void *fork_and_annotate(void *arg)
{
	int *status = arg;
	ringprof_range_begin("parent");
	pid_t pid = fork();
	if (pid == 0) {
		ringprof_range_begin("child");
		_exit(ringprof_connected() ? 0 : 3);
	}
	ringprof_range_end();
	waitpid(pid, status, 0);
	return NULL;
}

static void fork_child_gets_its_own_ring(void **state)
{
	(void)state;
	struct fake *f = fake_start(1 << 16, false);
	int status = -1;
	run_thread(fork_and_annotate, &status);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(f->hellos, 2);
	assert_int_equal(f->got[0].pid, getpid());
	assert_int_not_equal(f->got[1].pid, getpid());

	struct sink parent = { .n = 0 }, child = { .n = 0 };
	assert_int_equal(rp_shmring_drain(f->rings[0], collect, &parent, 0, NULL), 2);
	assert_string_equal(parent.v[0].name, "parent");
	assert_int_equal(parent.v[1].kind, RP_EV_RANGE_END);
	assert_int_equal(rp_shmring_drain(f->rings[1], collect, &child, 0, NULL), 1);
	assert_string_equal(child.v[0].name, "child");
	assert_int_equal(rp_shmring_pid(f->rings[1]), f->got[1].pid);
	fake_stop(f);
}

static int ring_mappings(void)
{
	FILE *m = fopen("/proc/self/maps", "re");
	assert_non_null(m);
	char line[512];
	int n = 0;
	while (fgets(line, sizeof(line), m))
		n += strstr(line, "memfd:ringprof-ring") != NULL;
	fclose(m);
	return n;
}

static void *annotate_once(void *arg)
{
	*(int *)arg = ringprof_connected();
	ringprof_instant("short-lived");
	return NULL;
}

static void exiting_threads_release_their_rings(void **state)
{
	(void)state;
	struct fake *f = fake_start(1 << 16, false);
	int before = ring_mappings();
	for (int i = 0; i < 3; i++) {
		int connected = 0;
		run_thread(annotate_once, &connected);
		assert_int_equal(connected, 1);
	}
	/* Only the fake daemon's own mappings remain. */
	assert_int_equal(fake_hellos(f), 3);
	assert_int_equal(ring_mappings(), before + 3);
	fake_stop(f);
}

static void drain_stamps_the_consumer_beat(void **state)
{
	(void)state;
	struct rp_shmring *r = NULL;
	struct rp_err err = { 0 };
	uint64_t t0 = rp_clock_now_ns();
	assert_int_equal(rp_shmring_create(4096, 1, 2, RP_SHM_CLOCK_MONOTONIC, &r, &err), 0);
	uint64_t created = rp_shmring_consumer_beat_ns(r);
	assert_true(created >= t0 && created <= rp_clock_now_ns());
	sleep_ms(20);
	assert_int_equal(rp_shmring_consumer_beat_ns(r), created);
	uint64_t n = 0;
	assert_int_equal(rp_shmring_drain(r, count_rec, &n, 0, NULL), 0);
	assert_true(rp_shmring_consumer_beat_ns(r) >= created + 20000000);
	rp_shmring_close(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(drain_stamps_the_consumer_beat),
		cmocka_unit_test(disconnected_annotations_are_cheap),
		cmocka_unit_test(session_calls_name_the_socket),
		cmocka_unit_test(events_reach_the_daemon_ring),
		cmocka_unit_test(connected_annotations_are_cheap),
		cmocka_unit_test(reconnects_at_most_once_a_second),
		cmocka_unit_test(hung_daemon_is_retried_ever_less_often),
		cmocka_unit_test(full_ring_of_a_dead_consumer_is_replaced),
		cmocka_unit_test(idle_ring_of_a_dead_consumer_is_replaced),
		cmocka_unit_test(fork_child_gets_its_own_ring),
		cmocka_unit_test(exiting_threads_release_their_rings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
