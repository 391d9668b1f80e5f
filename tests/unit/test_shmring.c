/* Producer rings: round trips of every kind, wrap-around, drops, threads,
 * processes (including a producer killed mid-stream), consumer death,
 * corrupt records and hostile fds. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"
#include "shmring.h"

/* A decoded event with its name and frames copied out. */
struct got {
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
	uint64_t frames[RP_STACK_MAX];
};

struct sink {
	struct got *v;
	size_t n, cap;
};

static int collect(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct sink *s = ctx;
	assert_true(s->n < s->cap);
	struct got *g = &s->v[s->n];
	char nb[RP_NAME_MAX + 1];
	int rc = rp_rec_to_event(r, rec, &g->ev, nb);
	if (rc < 0)
		return rc;
	if (g->ev.name) {
		memcpy(g->name, nb, sizeof(nb));
		g->ev.name = g->name;
	}
	if (g->ev.kind == RP_EV_CPU_SAMPLE) {
		memcpy(g->frames, g->ev.u.sample.frames, g->ev.u.sample.nframes * sizeof(uint64_t));
		g->ev.u.sample.frames = g->frames;
	}
	s->n++;
	return 0;
}

static struct sink sink_new(size_t cap)
{
	struct sink s = { calloc(cap, sizeof(struct got)), 0, cap };
	assert_non_null(s.v);
	return s;
}

static struct rp_shmring *ring_new(size_t size, enum rp_shm_clock clock)
{
	struct rp_shmring *r = NULL;
	struct rp_err err = { 0 };
	int rc = rp_shmring_create(size, 1234, 5678, clock, &r, &err);
	if (rc)
		fail_msg("create: %s", err.msg);
	return r;
}

static void fill_name(char *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (char)('a' + (seed + i * 7) % 26);
	buf[len] = 0;
}

static void test_create_args(void **state)
{
	(void)state;
	struct rp_shmring *r = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_shmring_create(3000, 1, 1, RP_SHM_CLOCK_TSC, &r, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "power of two"));
	assert_int_equal(rp_shmring_create(2048, 1, 1, RP_SHM_CLOCK_TSC, &r, &err), -EINVAL);
	assert_int_equal(rp_shmring_create((size_t)2 << 30, 1, 1, RP_SHM_CLOCK_TSC, &r, &err),
			 -EINVAL);
	assert_int_equal(rp_shmring_create(4096, 1, 1, (enum rp_shm_clock)7, &r, &err), -EINVAL);
	assert_null(r);

	r = ring_new(1 << 16, RP_SHM_CLOCK_MONOTONIC);
	assert_int_equal(rp_shmring_pid(r), 1234);
	assert_int_equal(rp_shmring_tid(r), 5678);
	assert_int_equal(rp_shmring_clock(r), RP_SHM_CLOCK_MONOTONIC);
	assert_int_equal(rp_shmring_capacity(r), 1 << 16);
	assert_true(rp_shmring_fd(r) >= 0);
	uint64_t a = rp_clock_now_ns(), b = rp_shmring_now(r), c = rp_clock_now_ns();
	assert_true(a <= b && b <= c);
	rp_shmring_close(r);

	r = ring_new(4096, RP_SHM_CLOCK_TSC);
	a = rp_rdtsc();
	b = rp_shmring_now(r);
	c = rp_rdtsc();
	assert_true(a <= b && b <= c);
	rp_shmring_close(r);
}

static void test_roundtrip_all_kinds(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(1 << 16, RP_SHM_CLOCK_MONOTONIC);
	static const size_t lens[] = { 0, 1, 255, 300 };
	char names[4][301];
	for (int i = 0; i < 4; i++)
		fill_name(names[i], lens[i], (unsigned)i);

	uint64_t frames[RP_STACK_MAX + 20];
	for (size_t i = 0; i < RP_STACK_MAX + 20; i++)
		frames[i] = 0xffffffff81000000ull + i * 0x1111;

	uint64_t ts = 1000;
	for (int i = 0; i < 4; i++) {
		assert_true(rp_shm_range_begin(r, ts++, names[i]));
		assert_true(rp_shm_instant(r, ts++, names[i]));
		assert_true(rp_shm_counter(r, ts++, names[i], -2.5 * i));
		assert_true(rp_shm_thread_name(r, ts++, names[i]));
		assert_true(rp_shm_process_name(r, ts++, names[i]));
	}
	assert_true(rp_shm_range_end(r, ts++));

	struct rp_event evs[] = {
		{ .kind = RP_EV_GPU_ACTIVITY, .ts = 10, .pid = 4242, .tid = 77, .name = names[2],
		  .u.gpu = { .end = 20, .correlation = 99, .bytes = 1 << 20, .device = 3,
			     .stream = 7, .kind = RP_GPU_MEMCPY } },
		{ .kind = RP_EV_GPU_ACTIVITY, .ts = 11, .name = names[1],
		  .u.gpu = { .end = 12, .kind = RP_GPU_KERNEL } },
		{ .kind = RP_EV_API_CALL, .ts = 30, .tid = 88, .name = names[3],
		  .u.api = { .duration = 555, .device = 2, .correlation = 0xfedcba98u } },
		{ .kind = RP_EV_CPU_SAMPLE, .ts = 40, .pid = 31, .tid = 32,
		  .u.sample = { .cpu = 5, .nframes = 1, .nkernel = 0, .frames = frames } },
		{ .kind = RP_EV_CPU_SAMPLE, .ts = 41, .tid = 33,
		  .u.sample = { .cpu = 1, .nframes = RP_STACK_MAX, .nkernel = 10, .frames = frames } },
		{ .kind = RP_EV_CPU_SAMPLE, .ts = 42,
		  .u.sample = { .cpu = 0, .nframes = RP_STACK_MAX + 20, .nkernel = 200,
				.frames = frames } },
		{ .kind = RP_EV_RANGE_BEGIN, .ts = 50, .tid = 9, .name = names[1] },
		{ .kind = RP_EV_COUNTER, .ts = 51, .tid = 9, .name = names[0],
		  .u.counter.value = 1e300 },
		{ .kind = RP_EV_RANGE_END, .ts = 52, .tid = 9, .name = names[1] },
		{ .kind = RP_EV_DROPS, .ts = 53, .u.drops.count = 12345 },
	};
	size_t nevs = sizeof(evs) / sizeof(evs[0]);
	for (size_t i = 0; i < nevs; i++)
		assert_true(rp_shm_write_event(r, &evs[i]));
	struct rp_event bad = { .kind = 0 };
	assert_false(rp_shm_write_event(r, &bad));
	bad.kind = RP_EV_PRODUCER_KIND_MAX + 1;
	assert_false(rp_shm_write_event(r, &bad));
	assert_int_equal(rp_shmring_dropped(r), 0);

	struct sink s = sink_new(64);
	uint64_t corrupt = 0;
	assert_int_equal(rp_shmring_drain(r, collect, &s, 0, &corrupt), 21 + (long)nevs);
	assert_int_equal(corrupt, 0);
	assert_int_equal(rp_shmring_drain(r, collect, &s, 0, &corrupt), 0);

	static const uint8_t named_kinds[] = { RP_EV_RANGE_BEGIN, RP_EV_INSTANT, RP_EV_COUNTER,
					       RP_EV_THREAD_NAME, RP_EV_PROCESS_NAME };
	size_t k = 0;
	ts = 1000;
	for (int i = 0; i < 4; i++) {
		for (int j = 0; j < 5; j++, k++) {
			const struct rp_event *e = &s.v[k].ev;
			assert_int_equal(e->kind, named_kinds[j]);
			assert_int_equal(e->ts, ts++);
			assert_int_equal(e->pid, 1234);
			assert_int_equal(e->tid, 5678);
			assert_non_null(e->name);
			size_t want = lens[i] > RP_NAME_MAX ? RP_NAME_MAX : lens[i];
			assert_int_equal(strlen(e->name), want);
			assert_memory_equal(e->name, names[i], want);
			if (e->kind == RP_EV_COUNTER)
				assert_true(e->u.counter.value == -2.5 * i);
		}
	}
	assert_int_equal(s.v[k].ev.kind, RP_EV_RANGE_END);
	assert_int_equal(s.v[k].ev.ts, ts);
	assert_null(s.v[k].ev.name);
	k++;

	const struct rp_event *e = &s.v[k++].ev;
	assert_int_equal(e->kind, RP_EV_GPU_ACTIVITY);
	assert_int_equal(e->ts, 10);
	assert_int_equal(e->pid, 4242);
	assert_int_equal(e->tid, 77);
	assert_string_equal(e->name, names[2]);
	assert_int_equal(e->u.gpu.end, 20);
	assert_int_equal(e->u.gpu.correlation, 99);
	assert_int_equal(e->u.gpu.bytes, 1 << 20);
	assert_int_equal(e->u.gpu.device, 3);
	assert_int_equal(e->u.gpu.stream, 7);
	assert_int_equal(e->u.gpu.kind, RP_GPU_MEMCPY);

	e = &s.v[k++].ev; /* pid 0 and tid 0 fall back to the ring's */
	assert_int_equal(e->pid, 1234);
	assert_int_equal(e->tid, 5678);
	assert_string_equal(e->name, "b");
	assert_int_equal(e->u.gpu.end, 12);
	assert_int_equal(e->u.gpu.kind, RP_GPU_KERNEL);

	e = &s.v[k++].ev;
	assert_int_equal(e->kind, RP_EV_API_CALL);
	assert_int_equal(e->ts, 30);
	assert_int_equal(e->pid, 1234);
	assert_int_equal(e->tid, 88);
	assert_int_equal(strlen(e->name), RP_NAME_MAX);
	assert_memory_equal(e->name, names[3], RP_NAME_MAX);
	assert_int_equal(e->u.api.duration, 555);
	assert_int_equal(e->u.api.device, 2);
	/* In what was the record's reserved pad: old producers' 0 reads as none. */
	assert_int_equal(e->u.api.correlation, 0xfedcba98u);

	e = &s.v[k++].ev;
	assert_int_equal(e->kind, RP_EV_CPU_SAMPLE);
	assert_int_equal(e->ts, 40);
	assert_int_equal(e->pid, 31);
	assert_int_equal(e->tid, 32);
	assert_null(e->name);
	assert_int_equal(e->u.sample.cpu, 5);
	assert_int_equal(e->u.sample.nframes, 1);
	assert_int_equal(e->u.sample.nkernel, 0);
	assert_int_equal(e->u.sample.frames[0], frames[0]);

	e = &s.v[k++].ev;
	assert_int_equal(e->pid, 1234);
	assert_int_equal(e->tid, 33);
	assert_int_equal(e->u.sample.cpu, 1);
	assert_int_equal(e->u.sample.nframes, RP_STACK_MAX);
	assert_int_equal(e->u.sample.nkernel, 10);
	assert_memory_equal(e->u.sample.frames, frames, RP_STACK_MAX * sizeof(uint64_t));

	e = &s.v[k++].ev; /* too deep: truncated, leaf end kept */
	assert_int_equal(e->u.sample.nframes, RP_STACK_MAX);
	assert_int_equal(e->u.sample.nkernel, RP_STACK_MAX);
	assert_memory_equal(e->u.sample.frames, frames, RP_STACK_MAX * sizeof(uint64_t));

	e = &s.v[k++].ev;
	assert_int_equal(e->kind, RP_EV_RANGE_BEGIN);
	assert_int_equal(e->tid, 9);
	assert_string_equal(e->name, "b");
	e = &s.v[k++].ev;
	assert_int_equal(e->kind, RP_EV_COUNTER);
	assert_string_equal(e->name, "");
	assert_true(e->u.counter.value == 1e300);
	e = &s.v[k++].ev; /* a name on a nameless kind is not written */
	assert_int_equal(e->kind, RP_EV_RANGE_END);
	assert_int_equal(e->ts, 52);
	assert_null(e->name);
	e = &s.v[k++].ev;
	assert_int_equal(e->kind, RP_EV_DROPS);
	assert_int_equal(e->u.drops.count, 12345);
	assert_int_equal(k, s.n);

	free(s.v);
	rp_shmring_close(r);
}

/* The wrap-around test writes record i with these parameters and checks
 * them on the way out. */
static size_t wrap_name_len(unsigned i)
{
	return (i * 37u) % 80u;
}

static bool wrap_write(struct rp_shmring *r, unsigned i, size_t *size)
{
	char name[RP_NAME_MAX + 1];
	fill_name(name, wrap_name_len(i), i);
	if (i % 5 == 4) {
		uint64_t frames[RP_STACK_MAX];
		for (unsigned f = 0; f < RP_STACK_MAX; f++)
			frames[f] = i * 1000ull + f;
		struct rp_event ev = { .kind = RP_EV_CPU_SAMPLE, .ts = i,
				       .u.sample = { .nframes = (uint16_t)(i % 40),
						     .frames = frames } };
		*size = 32 + (i % 40) * 8;
		return rp_shm_write_event(r, &ev);
	}
	*size = (16 + 8 + wrap_name_len(i) + 7) & ~(size_t)7;
	return rp_shm_counter(r, i, name, i);
}

struct wrap_check {
	unsigned next;
};

static int wrap_check(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct wrap_check *c = ctx;
	struct rp_event ev;
	char nb[RP_NAME_MAX + 1], want[RP_NAME_MAX + 1];
	assert_int_equal(rp_rec_to_event(r, rec, &ev, nb), 0);
	unsigned i = c->next++;
	assert_int_equal(ev.ts, i);
	if (i % 5 == 4) {
		assert_int_equal(ev.kind, RP_EV_CPU_SAMPLE);
		assert_int_equal(ev.u.sample.nframes, i % 40);
		for (unsigned f = 0; f < ev.u.sample.nframes; f++)
			assert_int_equal(ev.u.sample.frames[f], i * 1000ull + f);
	} else {
		assert_int_equal(ev.kind, RP_EV_COUNTER);
		assert_true(ev.u.counter.value == (double)i);
		fill_name(want, wrap_name_len(i), i);
		assert_string_equal(ev.name, want);
	}
	return 0;
}

static void test_wraparound(void **state)
{
	(void)state;
	const size_t size = 4096;
	struct rp_shmring *r = ring_new(size, RP_SHM_CLOCK_TSC);
	struct wrap_check c = { 0 };
	uint64_t pos = 0, corrupt = 0;
	unsigned written = 0, failed = 0, pads = 0, skips = 0;
	/* Model the producer's position to prove both gap kinds occur. */
	while (pos < 300 * size) {
		unsigned burst = 1 + written % 23;
		for (unsigned b = 0; b < burst; b++) {
			size_t rs;
			uint64_t gap = size - pos % size;
			if (!wrap_write(r, written, &rs)) {
				failed++;
				break;
			}
			if (rs > gap) {
				pads += gap >= 16;
				skips += gap == 8;
				pos += gap;
			}
			pos += rs;
			written++;
		}
		/* Drain in pieces too, to exercise max. */
		size_t max = written % 3 ? 0 : 2;
		while (rp_shmring_drain(r, wrap_check, &c, max, &corrupt) > 0)
			;
		assert_int_equal(c.next, written);
	}
	assert_int_equal(corrupt, 0);
	assert_int_equal(rp_shmring_dropped(r), failed);
	assert_true(pads > 10);
	assert_true(skips > 0);
	rp_shmring_close(r);
}

static void test_drops(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	struct rp_shmring *consumer = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_shmring_map(rp_shmring_fd(r), &consumer, &err), 0);

	unsigned ok = 0, failed = 0;
	for (unsigned i = 0; i < 1000; i++) {
		if (rp_shm_range_end(r, i))
			ok++;
		else
			failed++;
	}
	assert_int_equal(ok, 4096 / 16);
	assert_int_equal(failed, 1000 - 4096 / 16);
	assert_int_equal(rp_shmring_dropped(r), failed);
	assert_int_equal(rp_shmring_dropped(consumer), failed);

	/* Any record drops while full. */
	assert_false(rp_shm_instant(r, 0, "longer than the space left"));
	assert_int_equal(rp_shmring_dropped(consumer), failed + 1);

	struct sink s = sink_new(512);
	assert_int_equal(rp_shmring_drain(consumer, collect, &s, 0, NULL), ok);
	for (unsigned i = 0; i < ok; i++)
		assert_int_equal(s.v[i].ev.ts, i);
	/* Space is back: writing works again and the counter stays. */
	assert_true(rp_shm_instant(r, 7, "again"));
	assert_int_equal(rp_shmring_dropped(consumer), failed + 1);
	s.n = 0;
	assert_int_equal(rp_shmring_drain(consumer, collect, &s, 0, NULL), 1);
	assert_string_equal(s.v[0].ev.name, "again");
	free(s.v);
	rp_shmring_close(consumer);
	rp_shmring_close(r);
}

/* The _now writers stamp a record that fits with the ring's clock, in
 * either clock, and a dropped one is counted like any other. */
static void test_now_writers(void **state)
{
	(void)state;
	const enum rp_shm_clock clocks[] = { RP_SHM_CLOCK_MONOTONIC, RP_SHM_CLOCK_TSC };
	for (size_t c = 0; c < sizeof(clocks) / sizeof(clocks[0]); c++) {
		struct rp_shmring *r = ring_new(4096, clocks[c]);
		uint64_t before = rp_shmring_now(r);
		assert_true(rp_shm_range_begin_now(r, "step"));
		assert_true(rp_shm_instant_now(r, "mark"));
		assert_true(rp_shm_counter_now(r, "loss", 0.5));
		assert_true(rp_shm_range_end_now(r));
		uint64_t after = rp_shmring_now(r);
		while (rp_shm_range_end_now(r))
			;
		assert_int_equal(rp_shmring_dropped(r), 1);

		struct sink s = sink_new(512);
		assert_true(rp_shmring_drain(r, collect, &s, 4, NULL) == 4);
		for (size_t i = 0; i < 4; i++) {
			assert_true(s.v[i].ev.ts >= before && s.v[i].ev.ts <= after);
			assert_true(i == 0 || s.v[i].ev.ts >= s.v[i - 1].ev.ts);
		}
		assert_string_equal(s.v[0].ev.name, "step");
		assert_true(s.v[2].ev.u.counter.value == 0.5);
		free(s.v);
		rp_shmring_close(r);
	}
}

/* Sequence-numbered stream: record i carries ts i and a name of i % 41
 * letters derived from i. */
static bool seq_write(struct rp_shmring *r, uint64_t i)
{
	char name[64];
	fill_name(name, i % 41, (unsigned)i);
	return rp_shm_instant(r, i, name);
}

struct seq_check {
	uint64_t next;
	uint64_t bad;
};

static int seq_check(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct seq_check *c = ctx;
	struct rp_event ev;
	char nb[RP_NAME_MAX + 1], want[64];
	uint64_t i = c->next++;
	fill_name(want, i % 41, (unsigned)i);
	if (rp_rec_to_event(r, rec, &ev, nb) != 0 || ev.kind != RP_EV_INSTANT || ev.ts != i ||
	    strcmp(ev.name, want) != 0)
		c->bad++;
	return 0;
}

#define THREAD_EVENTS 2000000u

struct producer_arg {
	struct rp_shmring *r;
	uint64_t retries;
};

static void *producer_thread(void *p)
{
	struct producer_arg *a = p;
	for (uint64_t i = 0; i < THREAD_EVENTS; i++)
		while (!seq_write(a->r, i))
			a->retries++;
	return NULL;
}

static void test_threads(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(1 << 16, RP_SHM_CLOCK_MONOTONIC);
	struct producer_arg a = { r, 0 };
	struct seq_check c = { 0 };
	uint64_t corrupt = 0;
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, producer_thread, &a), 0);
	while (c.next < THREAD_EVENTS) {
		assert_true(rp_shmring_drain(r, seq_check, &c, 0, &corrupt) >= 0);
		assert_int_equal(c.bad, 0);
	}
	pthread_join(t, NULL);
	assert_int_equal(rp_shmring_drain(r, seq_check, &c, 0, &corrupt), 0);
	assert_int_equal(c.next, THREAD_EVENTS);
	assert_int_equal(c.bad, 0);
	assert_int_equal(corrupt, 0);
	/* A producer that retries loses nothing; each refusal was counted. */
	assert_int_equal(rp_shmring_dropped(r), a.retries);
	rp_shmring_close(r);
}

/* Child: map the ring from fd and write events from 0 to n (forever when
 * n is 0), retrying while the ring is full. */
static void child_produce(int fd, uint64_t n)
{
	/* Should the parent fail an assertion, do not spin on forever. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	struct rp_shmring *r = NULL;
	if (rp_shmring_map(fd, &r, NULL) != 0)
		_exit(2);
	for (uint64_t i = 0; n == 0 || i < n; i++)
		while (!seq_write(r, i))
			;
	rp_shmring_close(r);
	_exit(0);
}

static void test_two_processes(void **state)
{
	(void)state;
	const uint64_t n = 300000;
	struct rp_shmring *r = ring_new(1 << 15, RP_SHM_CLOCK_TSC);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child_produce(rp_shmring_fd(r), n);
	struct seq_check c = { 0 };
	uint64_t corrupt = 0;
	int status = 0;
	bool exited = false;
	while (!exited) {
		exited = waitpid(pid, &status, WNOHANG) == pid;
		while (rp_shmring_drain(r, seq_check, &c, 0, &corrupt) > 0)
			;
	}
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(c.next, n);
	assert_int_equal(c.bad, 0);
	assert_int_equal(corrupt, 0);
	rp_shmring_close(r);
}

static void test_producer_killed(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(1 << 14, RP_SHM_CLOCK_MONOTONIC);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child_produce(rp_shmring_fd(r), 0);
	struct seq_check c = { 0 };
	uint64_t corrupt = 0;
	while (c.next < 100000)
		assert_true(rp_shmring_drain(r, seq_check, &c, 0, &corrupt) >= 0);
	assert_int_equal(kill(pid, SIGKILL), 0);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	while (rp_shmring_drain(r, seq_check, &c, 0, &corrupt) > 0)
		;
	assert_true(c.next >= 100000);
	assert_int_equal(c.bad, 0);
	assert_int_equal(corrupt, 0);
	rp_shmring_close(r);
}

static void test_consumer_dies(void **state)
{
	(void)state;
	struct rp_shmring *consumer = ring_new(1 << 16, RP_SHM_CLOCK_MONOTONIC);
	struct rp_shmring *producer = NULL;
	assert_int_equal(rp_shmring_map(rp_shmring_fd(consumer), &producer, NULL), 0);
	assert_true(rp_shm_range_begin(producer, 1, "before"));
	rp_shmring_close(consumer);

	unsigned ok = 0, failed = 0;
	uint64_t t0 = rp_clock_now_ns();
	for (unsigned i = 0; i < 1000000; i++) {
		if (rp_shm_range_end(producer, i))
			ok++;
		else
			failed++;
	}
	uint64_t ns = rp_clock_now_ns() - t0;
	/* "before" took 24 bytes; the rest filled up, then every write
	 * returned at once (a blocked producer never gets here). */
	assert_int_equal(ok, ((1 << 16) - 24) / 16);
	assert_int_equal(failed, 1000000 - ok);
	assert_int_equal(rp_shmring_dropped(producer), failed);
	assert_true(ns < 5000000000ull);
	rp_shmring_close(producer);
}

/* Offset of the n-th record in a fresh ring holding 16-byte range ends
 * and nothing else, in the memfd. */
#define END_AT(n) (RP_SHM_HDR_SIZE + 16 * (n))

struct poke {
	size_t off;    /* byte of the memfd */
	uint64_t value;
	size_t width;
	long want;     /* records handed over before the corruption */
};

static void test_corrupt(void **state)
{
	(void)state;
	static const struct poke pokes[] = {
		{ END_AT(1), 12, 2, 1 },            /* size not a multiple of 8 */
		{ END_AT(1), 0, 2, 1 },             /* size 0 */
		{ END_AT(1), 8, 2, 1 },             /* size below a header */
		{ END_AT(0), 24, 2, 0 },            /* size != kind's size */
		{ END_AT(2), 4096, 2, 2 },          /* beyond the data area */
		{ END_AT(3), 32, 2, 3 },            /* beyond head */
		{ END_AT(1) + 2, 0, 1, 1 },         /* kind 0 */
		{ END_AT(1) + 2, RP_EV_PRODUCER_KIND_MAX + 1, 1, 1 }, /* unknown kind */
		{ END_AT(1) + 2, RP_REC_PAD, 1, 1 }, /* pad not reaching the end */
		{ END_AT(1) + 3, 5, 1, 1 },         /* name on a nameless kind */
		{ RP_SHM_OFF_HEAD, 4096 + 64, 8, 0 }, /* head too far ahead */
		{ RP_SHM_OFF_TAIL, 128, 8, 0 },     /* tail beyond head */
	};
	for (size_t p = 0; p < sizeof(pokes) / sizeof(pokes[0]); p++) {
		struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
		for (unsigned i = 0; i < 4; i++)
			assert_true(rp_shm_range_end(r, i));
		uint8_t *m = mmap(NULL, RP_SHM_HDR_SIZE + 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
				  rp_shmring_fd(r), 0);
		assert_true(m != MAP_FAILED);
		memcpy(m + pokes[p].off, &pokes[p].value, pokes[p].width);

		struct sink s = sink_new(8);
		uint64_t corrupt = 0;
		assert_int_equal(rp_shmring_drain(r, collect, &s, 0, &corrupt), pokes[p].want);
		assert_int_equal(corrupt, 1);
		assert_int_equal(rp_shmring_drain(r, collect, &s, 0, &corrupt), 0);
		assert_int_equal(corrupt, 1);
		munmap(m, RP_SHM_HDR_SIZE + 4096);
		free(s.v);
		rp_shmring_close(r);
	}

	/* A ring recovers: after a corruption new records drain again. */
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	assert_true(rp_shm_instant(r, 1, "abc"));
	uint8_t *m = mmap(NULL, RP_SHM_HDR_SIZE + 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
			  rp_shmring_fd(r), 0);
	assert_true(m != MAP_FAILED);
	m[RP_SHM_HDR_SIZE + 3] = 200; /* name longer than the record */
	struct sink s = sink_new(8);
	uint64_t corrupt = 0;
	assert_int_equal(rp_shmring_drain(r, collect, &s, 0, &corrupt), 0);
	assert_int_equal(corrupt, 1);
	assert_true(rp_shm_instant(r, 2, "def"));
	assert_int_equal(rp_shmring_drain(r, collect, &s, 0, &corrupt), 1);
	assert_string_equal(s.v[0].ev.name, "def");

	/* A sample claiming more frames than allowed. */
	uint64_t frames[4] = { 1, 2, 3, 4 };
	struct rp_event ev = { .kind = RP_EV_CPU_SAMPLE, .u.sample = { .nframes = 4, .frames = frames } };
	assert_true(rp_shm_write_event(r, &ev));
	uint16_t many = RP_STACK_MAX + 1;
	memcpy(m + RP_SHM_HDR_SIZE + 48 + 16 + 8, &many, sizeof(many)); /* after two 24-byte instants */
	assert_int_equal(rp_shmring_drain(r, collect, &s, 0, &corrupt), 0);
	assert_int_equal(corrupt, 2);
	munmap(m, RP_SHM_HDR_SIZE + 4096);
	free(s.v);
	rp_shmring_close(r);

	/* rp_rec_to_event checks records it is handed, too. */
	uint64_t buf[8] = { 0 };
	struct rp_rec *rec = (struct rp_rec *)buf;
	*rec = (struct rp_rec){ .size = 24, .kind = RP_EV_INSTANT, .name_len = 9 };
	struct rp_event out;
	char nb[RP_NAME_MAX + 1];
	r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	assert_int_equal(rp_rec_to_event(r, rec, &out, nb), -EBADMSG);
	rec->name_len = 8;
	memcpy(rec + 1, "12345678", 8);
	assert_int_equal(rp_rec_to_event(r, rec, &out, nb), 0);
	assert_string_equal(out.name, "12345678");
	rec->kind = RP_REC_PAD;
	assert_int_equal(rp_rec_to_event(r, rec, &out, nb), -EBADMSG);
	rp_shmring_close(r);
}

/* Writes ev into r, whose memfd m maps (4 KiB of data), then overwrites
 * len bytes of its payload at off with bytes, as a hostile producer
 * would after publishing. */
static void write_poked(struct rp_shmring *r, uint8_t *m, const struct rp_event *ev, size_t off,
			const void *bytes, size_t len)
{
	uint64_t head;
	memcpy(&head, m + RP_SHM_OFF_HEAD, sizeof(head));
	assert_true(rp_shm_write_event(r, ev));
	memcpy(m + RP_SHM_HDR_SIZE + (head & 4095) + sizeof(struct rp_rec) + off, bytes, len);
}

static int check_op(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	unsigned *n = ctx;
	struct rp_event ev;
	char nb[RP_NAME_MAX + 1];
	assert_int_equal(rp_rec_to_event(r, rec, &ev, nb), 0);
	assert_int_equal(ev.kind, RP_EV_DEVICE_OP);
	if ((*n)++ == 0) {
		assert_int_equal(ev.ts, 100);
		assert_int_equal(ev.pid, 4242); /* the record's pid */
		assert_int_equal(ev.tid, 3);
		assert_string_equal(ev.name, "dot.3");
		assert_string_equal(ev.u.op.hlo_op, "dot.3");
		assert_string_equal(ev.u.op.hlo_module, "jit_train_step");
		assert_int_equal(ev.u.op.end, 250);
		assert_int_equal(ev.u.op.program_id, 9);
		assert_int_equal(ev.u.op.flops, 1 << 20);
		assert_int_equal(ev.u.op.bytes_accessed, 4096);
		assert_int_equal(ev.u.op.device, 2);
		assert_int_equal(ev.u.op.line, 3);
	} else {
		assert_int_equal(ev.pid, 1234); /* pid 0: the ring's */
		assert_null(ev.u.op.hlo_op);
		assert_null(ev.u.op.hlo_module);
		assert_int_equal(strlen(ev.name), RP_NAME_MAX);
		assert_int_equal(ev.u.op.device, RP_OP_HOST);
	}
	return 0;
}

/* Device ops carry two strings of their own, each with its NUL: a record
 * whose string lengths run past it, or whose string lacks its NUL, is
 * corrupt. */
static void test_device_op(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	char longname[RP_NAME_MAX + 20];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	struct rp_event op = { .kind = RP_EV_DEVICE_OP, .ts = 100, .pid = 4242, .tid = 3,
			       .name = "dot.3",
			       .u.op = { .end = 250, .hlo_op = "dot.3", .hlo_module = "jit_train_step",
					 .program_id = 9, .flops = 1 << 20, .bytes_accessed = 4096,
					 .device = 2, .line = 3 } };
	struct rp_event host = { .kind = RP_EV_DEVICE_OP, .ts = 300, .name = longname,
				 .u.op = { .end = 300, .device = RP_OP_HOST } };
	assert_true(rp_shm_write_event(r, &op));
	assert_true(rp_shm_write_event(r, &host));
	unsigned n = 0;
	uint64_t corrupt = 0;
	assert_int_equal(rp_shmring_drain(r, check_op, &n, 0, &corrupt), 2);
	assert_int_equal(corrupt, 0);

	uint8_t *m = mmap(NULL, RP_SHM_HDR_SIZE + 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
			  rp_shmring_fd(r), 0);
	assert_true(m != MAP_FAILED);
	struct { uint16_t op_len, module_len; } hostile[] = {
		{ 300, 15 },  /* beyond RP_NAME_MAX + 1 */
		{ 6, 200 },   /* past the record */
		{ 5, 15 },    /* hlo_op without its NUL */
	};
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		write_poked(r, m, &op, offsetof(struct rp_rec_op, op_len), &hostile[i],
			    sizeof(hostile[i]));
		assert_int_equal(rp_shmring_drain(r, check_op, &n, 0, &corrupt), 0);
		assert_int_equal(corrupt, i + 1);
	}
	assert_int_equal(n, 2);
	munmap(m, RP_SHM_HDR_SIZE + 4096);
	rp_shmring_close(r);
}

static int check_launch(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	unsigned *n = ctx;
	struct rp_event ev;
	char nb[RP_NAME_MAX + 1];
	assert_int_equal(rp_rec_to_event(r, rec, &ev, nb), 0);
	assert_int_equal(ev.kind, RP_EV_GPU_ACTIVITY);
	const struct rp_gpu_launch *l = &ev.u.gpu.launch;
	if ((*n)++ == 0) {
		assert_string_equal(ev.name, "gemm");
		assert_int_equal(ev.u.gpu.correlation, 42);
		assert_int_equal(l->grid[0], 1u << 31);
		assert_int_equal(l->grid[1], 65535);
		assert_int_equal(l->grid[2], 3);
		assert_int_equal(l->block[0], 1024);
		assert_int_equal(l->block[1], 1);
		assert_int_equal(l->block[2], 64);
		assert_int_equal(l->registers, 255);
		assert_int_equal(l->static_shared, 48 << 10);
		assert_int_equal(l->dynamic_shared, UINT32_MAX);
	} else {
		/* The layout of producers that predate launch blocks. */
		assert_string_equal(ev.name, "copy");
		assert_int_equal(ev.u.gpu.bytes, 4096);
		assert_memory_equal(l, &(struct rp_gpu_launch){ 0 }, sizeof(*l));
	}
	return 0;
}

/* A kernel's launch configuration follows its GPU payload when the flag
 * says so; a flag this build does not know, or a size that does not
 * match the flag, is corrupt. */
static void test_gpu_launch(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	struct rp_event kernel = {
		.kind = RP_EV_GPU_ACTIVITY, .ts = 100, .name = "gemm",
		.u.gpu = { .end = 200, .correlation = 42, .kind = RP_GPU_KERNEL,
			   .launch = { .grid = { 1u << 31, 65535, 3 }, .block = { 1024, 1, 64 },
				       .registers = 255, .static_shared = 48 << 10,
				       .dynamic_shared = UINT32_MAX } } };
	struct rp_event copy = { .kind = RP_EV_GPU_ACTIVITY, .ts = 300, .name = "copy",
				 .u.gpu = { .end = 400, .bytes = 4096, .kind = RP_GPU_MEMCPY } };
	assert_true(rp_shm_write_event(r, &kernel));
	assert_true(rp_shm_write_event(r, &copy));
	unsigned n = 0;
	uint64_t corrupt = 0;
	assert_int_equal(rp_shmring_drain(r, check_launch, &n, 0, &corrupt), 2);
	assert_int_equal(corrupt, 0);

	uint8_t *m = mmap(NULL, RP_SHM_HDR_SIZE + 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
			  rp_shmring_fd(r), 0);
	assert_true(m != MAP_FAILED);
	struct { const struct rp_event *ev; uint8_t flags; } hostile[] = {
		{ &kernel, RP_REC_GPU_LAUNCH | 0x02 }, /* a flag from the future */
		{ &kernel, 0 },                        /* launch block not announced */
		{ &copy, RP_REC_GPU_LAUNCH },          /* announced, not there */
	};
	for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++) {
		write_poked(r, m, hostile[i].ev, offsetof(struct rp_rec_gpu, flags),
			    &hostile[i].flags, 1);
		assert_int_equal(rp_shmring_drain(r, check_launch, &n, 0, &corrupt), 0);
		assert_int_equal(corrupt, i + 1);
	}
	assert_int_equal(n, 2);
	munmap(m, RP_SHM_HDR_SIZE + 4096);
	rp_shmring_close(r);
}

static void test_padding_zeroed(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	uint8_t *m = mmap(NULL, RP_SHM_HDR_SIZE + 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
			  rp_shmring_fd(r), 0);
	assert_true(m != MAP_FAILED);
	uint8_t *data = m + RP_SHM_HDR_SIZE;
	memset(data, 0xaa, 4096);
	assert_true(rp_shm_instant(r, 1, "abc"));              /* 16 + 3 -> 24 */
	assert_true(rp_shm_counter(r, 2, "0123456789", 1.0)); /* 16 + 8 + 10 -> 40 */
	static const uint8_t zeros[8] = { 0 };
	assert_memory_equal(data + 16, "abc", 3);
	assert_memory_equal(data + 19, zeros, 5);
	assert_memory_equal(data + 24 + 24, "0123456789", 10);
	assert_memory_equal(data + 24 + 34, zeros, 6);
	assert_int_equal(data[64], 0xaa); /* nothing written beyond */
	munmap(m, RP_SHM_HDR_SIZE + 4096);
	rp_shmring_close(r);
}

static int fail_second(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	(void)r;
	int *calls = ctx;
	if (++*calls == 2)
		return -ENOSPC;
	return rec->kind == RP_EV_RANGE_END ? 0 : -EIO;
}

static void test_callback_error(void **state)
{
	(void)state;
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	for (unsigned i = 0; i < 3; i++)
		assert_true(rp_shm_range_end(r, i));
	int calls = 0;
	assert_int_equal(rp_shmring_drain(r, fail_second, &calls, 0, NULL), -ENOSPC);
	/* The failed record stays: it and the third come next. */
	struct sink s = sink_new(8);
	assert_int_equal(rp_shmring_drain(r, collect, &s, 0, NULL), 2);
	assert_int_equal(s.v[0].ev.ts, 1);
	assert_int_equal(s.v[1].ev.ts, 2);
	free(s.v);
	rp_shmring_close(r);
}

static void test_consumer_beat(void **state)
{
	(void)state;
	uint64_t before = rp_clock_now_ns();
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_MONOTONIC);
	uint64_t created = rp_shmring_consumer_beat_ns(r);
	assert_true(created >= before && created <= rp_clock_now_ns());
	struct rp_shmring *producer = NULL;
	assert_int_equal(rp_shmring_map(rp_shmring_fd(r), &producer, NULL), 0);
	assert_int_equal(rp_shmring_consumer_beat_ns(producer), created);
	/* Mapping (the producer's side) does not beat; every drain does,
	 * empty or not. */
	usleep(1000);
	assert_int_equal(rp_shmring_consumer_beat_ns(producer), created);
	assert_int_equal(rp_shmring_drain(r, fail_second, NULL, 0, NULL), 0);
	uint64_t drained = rp_shmring_consumer_beat_ns(producer);
	assert_true(drained >= created + 1000000);
	assert_true(drained <= rp_clock_now_ns());
	rp_shmring_close(producer);
	rp_shmring_close(r);
}

static void expect_map_fails(int fd, const char *why)
{
	struct rp_shmring *r = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_shmring_map(fd, &r, &err), -EINVAL);
	assert_null(r);
	assert_int_equal(err.code, -EINVAL);
	if (!strstr(err.msg, why))
		fail_msg("message \"%s\" does not say \"%s\"", err.msg, why);
}

static void test_map_rejects(void **state)
{
	(void)state;
	expect_map_fails(-1, "not an open file descriptor");

	FILE *tmp = tmpfile();
	assert_non_null(tmp);
	assert_int_equal(ftruncate(fileno(tmp), RP_SHM_HDR_SIZE + 4096), 0);
	expect_map_fails(fileno(tmp), "not a ringprof producer ring");
	fclose(tmp);

	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	expect_map_fails(pfd[0], "not a ringprof producer ring");
	close(pfd[0]);
	close(pfd[1]);

	/* The right size but unsealed. */
	int fd = memfd_create("t", MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, RP_SHM_HDR_SIZE + 4096), 0);
	expect_map_fails(fd, "sealed");
	/* Sealed, but zeros. */
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	expect_map_fails(fd, "magic");
	/* Write-sealed: no ring is, and it could not be mapped writable. */
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
	expect_map_fails(fd, "not a ringprof producer ring (not a memfd");
	close(fd);

	/* Sealed but of a size no ring has. */
	fd = memfd_create("t", MFD_ALLOW_SEALING);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 100), 0);
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	expect_map_fails(fd, "size");
	close(fd);

	/* A real ring whose header was damaged. */
	struct rp_shmring *r = ring_new(4096, RP_SHM_CLOCK_TSC);
	uint8_t *m = mmap(NULL, RP_SHM_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			  rp_shmring_fd(r), 0);
	assert_true(m != MAP_FAILED);
	m[8] = 9; /* version */
	expect_map_fails(rp_shmring_fd(r), "version");
	m[8] = 1;
	m[16] = 0x10; /* data size 4112 */
	expect_map_fails(rp_shmring_fd(r), "data size");
	m[16] = 0;
	struct rp_shmring *ok = NULL;
	assert_int_equal(rp_shmring_map(rp_shmring_fd(r), &ok, NULL), 0);
	assert_int_equal(rp_shmring_clock(ok), RP_SHM_CLOCK_TSC);
	assert_int_equal(rp_shmring_pid(ok), 1234);
	assert_int_equal(rp_shmring_tid(ok), 5678);
	assert_int_equal(rp_shmring_capacity(ok), 4096);
	assert_true(rp_shmring_fd(ok) != rp_shmring_fd(r));
	rp_shmring_close(ok);
	munmap(m, RP_SHM_HDR_SIZE);
	rp_shmring_close(r);
}

/* A holding consumer frees nothing until it releases: a consumer that
 * takes the ring over before that (a restarted daemon) reads the same
 * records again from tail, as its own, and never what was released. */
static void test_hold_and_adopt(void **state)
{
	(void)state;
	struct rp_shmring *old = ring_new(1 << 16, RP_SHM_CLOCK_FOREIGN);
	rp_shmring_set_consumer(old, 1);
	struct rp_shmring *producer = NULL;
	assert_int_equal(rp_shmring_map(rp_shmring_fd(old), &producer, NULL), 0);
	rp_shmring_set_clock_offset(producer, -5);
	assert_true(rp_shmring_clock_offset(old) == -5);
	assert_true(rp_shm_instant(producer, 10, "sealed"));
	rp_shmring_hold(old);
	struct sink s = sink_new(8);
	assert_int_equal(rp_shmring_drain(old, collect, &s, 0, NULL), 1);
	assert_int_equal(rp_shmring_release(old), 24);
	assert_true(rp_shm_instant(producer, 11, "read"));
	assert_int_equal(rp_shmring_drain(old, collect, &s, 0, NULL), 1);
	assert_int_equal(rp_shmring_held(old), 24);
	size_t free_before = rp_shmring_free_bytes(producer);
	assert_int_equal(free_before, (1 << 16) - 24); /* "read" is not freed */

	struct rp_err err = { 0 };
	struct rp_shmring *again = NULL;
	assert_int_equal(rp_shmring_adopt(rp_shmring_fd(producer), 9, 99, 1, &again, &err),
			 -EALREADY);
	assert_int_equal(rp_shmring_adopt(rp_shmring_fd(producer), 9, 99, 2, &again, &err), 0);
	assert_int_equal(rp_shmring_pid(again), 9);
	assert_int_equal(rp_shmring_tid(again), 99);
	assert_int_equal(rp_shmring_clock(again), RP_SHM_CLOCK_FOREIGN);
	rp_shmring_hold(again);
	s.n = 0;
	assert_int_equal(rp_shmring_drain(again, collect, &s, 0, NULL), 1);
	assert_string_equal(s.v[0].ev.name, "read");
	assert_int_equal(s.v[0].ev.pid, 9);
	rp_shmring_release(again);
	assert_int_equal(rp_shmring_free_bytes(producer), 1 << 16);
	free(s.v);
	rp_shmring_close(again);
	rp_shmring_close(producer);
	rp_shmring_close(old);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_args),
		cmocka_unit_test(test_roundtrip_all_kinds),
		cmocka_unit_test(test_wraparound),
		cmocka_unit_test(test_drops),
		cmocka_unit_test(test_now_writers),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_two_processes),
		cmocka_unit_test(test_producer_killed),
		cmocka_unit_test(test_consumer_dies),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_gpu_launch),
		cmocka_unit_test(test_padding_zeroed),
		cmocka_unit_test(test_callback_error),
		cmocka_unit_test(test_consumer_beat),
		cmocka_unit_test(test_map_rejects),
		cmocka_unit_test(test_hold_and_adopt),
		cmocka_unit_test(test_device_op),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
