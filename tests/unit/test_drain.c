/* The consumer pipeline: producer rings -> chunks -> ring file -> window. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunk.h"
#include "clock.h"
#include "drain.h"
#include "ringfile.h"
#include "shmring.h"

struct fixture {
	char dir[64];
	char path[128];
	struct rp_ringfile *rf;
	struct rp_drain *drain;
};

static int open_fixture(struct fixture *f, uint64_t budget, uint64_t seal_ns)
{
	snprintf(f->dir, sizeof(f->dir), "/tmp/rp-drain-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/host.ring", f->dir);
	struct rp_err err = { 0 };
	struct rp_ringfile_opts ro = { .device = "host", .budget_bytes = budget, .slot_size = 64 << 10 };
	if (rp_ringfile_open(f->path, &ro, &f->rf, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	struct rp_drain_opts dopts = { .seal_interval_ns = seal_ns };
	if (rp_drain_new(f->rf, &dopts, &f->drain, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	return 0;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	if (open_fixture(f, 32 << 20, 1000000000) < 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	rp_drain_free(f->drain);
	rp_ringfile_close(f->rf);
	unlink(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

typedef void (*event_fn)(void *ctx, const struct rp_event *ev);

/* Decode every event in chunks overlapping [t0, t1]; returns the count. */
static uint64_t read_window(struct rp_ringfile *rf, uint64_t t0, uint64_t t1, event_fn fn, void *ctx)
{
	struct rp_ringfile_iter *it;
	struct rp_chunk_reader *r;
	assert_int_equal(rp_ringfile_iter_new(rf, t0, t1, &it), 0);
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	uint64_t n = 0;
	struct rp_err err = { 0 };
	while (rp_ringfile_iter_next(it, &chunk, &len, &hdr) == 1) {
		assert_int_equal(rp_chunk_reader_load(r, chunk, len, &err), 0);
		struct rp_event ev;
		int rc;
		while ((rc = rp_chunk_reader_next(r, &ev, &err)) == 1) {
			if (ev.ts >= t0 && ev.ts <= t1) {
				fn(ctx, &ev);
				n++;
			}
		}
		assert_int_equal(rc, 0);
	}
	rp_chunk_reader_free(r);
	rp_ringfile_iter_free(it);
	return n;
}

struct seq_check {
	uint32_t tid;
	double next;      /* next expected counter value */
	uint64_t last_ts;
	uint64_t drops;
	uint64_t other;
};

static void check_sequence(void *ctx, const struct rp_event *ev)
{
	struct seq_check *c = ctx;
	if (ev->kind == RP_EV_DROPS) {
		c->drops += ev->u.drops.count;
		return;
	}
	if (ev->kind != RP_EV_COUNTER || ev->tid != c->tid) {
		c->other++;
		return;
	}
	assert_string_equal(ev->name, "seq");
	assert_true(ev->u.counter.value == c->next);
	assert_true(ev->ts >= c->last_ts);
	c->next += 1;
	c->last_ts = ev->ts;
}

/* Every event a producer commits reaches the ring file, in order, with its
 * clock converted to host ns. */
static void test_producer_to_window(void **state)
{
	struct fixture *f = *state;
	enum rp_shm_clock clocks[] = { RP_SHM_CLOCK_MONOTONIC, RP_SHM_CLOCK_TSC };
	for (unsigned k = 0; k < 2; k++) {
		if (clocks[k] == RP_SHM_CLOCK_TSC && !rp_tsc_usable())
			continue;
		struct rp_shmring *ring;
		uint32_t tid = 500 + k;
		assert_int_equal(rp_shmring_create(1 << 20, (uint32_t)getpid(), tid, clocks[k], &ring, NULL), 0);
		assert_int_equal(rp_drain_attach(f->drain, ring), 0);
		uint64_t before = rp_clock_now_ns();
		for (int i = 0; i < 100000; i++) {
			assert_true(rp_shm_counter(ring, rp_shmring_now(ring), "seq", i));
			if (i % 10000 == 9999)
				assert_true(rp_drain_poll(f->drain, NULL) >= 0);
		}
		assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
		uint64_t after = rp_clock_now_ns();
		struct seq_check c = { .tid = tid };
		read_window(f->rf, before, after, check_sequence, &c);
		assert_true(c.next == 100000);
		assert_true(c.last_ts <= after);
		assert_int_equal(c.drops, 0);
	}
}

/* A full producer ring drops and counts; the count lands in the window. */
static void test_drops_recorded(void **state)
{
	struct fixture *f = *state;
	struct rp_shmring *ring;
	assert_int_equal(rp_shmring_create(4096, (uint32_t)getpid(), 77, RP_SHM_CLOCK_MONOTONIC, &ring, NULL), 0);
	assert_int_equal(rp_drain_attach(f->drain, ring), 0);
	uint64_t before = rp_clock_now_ns();
	int written = 0, dropped = 0;
	for (int i = 0; i < 1000; i++) {
		if (rp_shm_counter(ring, rp_shmring_now(ring), "seq", written))
			written++;
		else
			dropped++;
	}
	assert_true(dropped > 0);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	struct seq_check c = { .tid = 77 };
	read_window(f->rf, before, rp_clock_now_ns(), check_sequence, &c);
	assert_true(c.next == written);
	assert_int_equal(c.drops, dropped);
	struct rp_drain_stats st;
	rp_drain_stats(f->drain, &st);
	assert_int_equal(st.producer_drops, dropped);
}

/* Unsealed events become visible only when a chunk is sealed: by age
 * (seal interval) or on demand (flush). */
static void test_seal_by_age_and_flush(void **state)
{
	(void)state;
	struct fixture f;
	assert_int_equal(open_fixture(&f, 8 << 20, 50000000), 0);
	struct rp_event ev = { .kind = RP_EV_INSTANT, .pid = 1, .tid = 1, .name = "tick" };
	ev.ts = rp_clock_now_ns();
	assert_int_equal(rp_drain_add(f.drain, &ev, NULL), 0);
	assert_true(rp_drain_poll(f.drain, NULL) >= 0);
	struct rp_ringfile_stats st;
	assert_int_equal(rp_ringfile_sync(f.rf, false, NULL), 0);
	rp_ringfile_stats(f.rf, &st);
	assert_int_equal(st.chunks, 0); /* younger than the seal interval */
	usleep(60000);
	assert_true(rp_drain_poll(f.drain, NULL) >= 0);
	assert_int_equal(rp_ringfile_sync(f.rf, false, NULL), 0);
	rp_ringfile_stats(f.rf, &st);
	assert_int_equal(st.chunks, 1);
	assert_int_equal(st.events, 1);

	ev.ts = rp_clock_now_ns();
	assert_int_equal(rp_drain_add(f.drain, &ev, NULL), 0);
	assert_int_equal(rp_drain_flush(f.drain, NULL), 0);
	rp_ringfile_stats(f.rf, &st);
	assert_int_equal(st.chunks, 2);
	assert_int_equal(st.events, 2);
	rp_drain_free(f.drain);
	rp_ringfile_close(f.rf);
	unlink(f.path);
	rmdir(f.dir);
}

static bool pid_is_gone(uint32_t pid, void *ctx)
{
	return pid == *(uint32_t *)ctx;
}

/* A ring whose producer is gone is drained one last time, then detached. */
static void test_reap_drains_first(void **state)
{
	struct fixture *f = *state;
	struct rp_shmring *ring;
	uint32_t dead_pid = 999999;
	assert_int_equal(rp_shmring_create(1 << 16, dead_pid, 88, RP_SHM_CLOCK_MONOTONIC, &ring, NULL), 0);
	assert_int_equal(rp_drain_attach(f->drain, ring), 0);
	uint64_t before = rp_clock_now_ns();
	for (int i = 0; i < 100; i++)
		assert_true(rp_shm_counter(ring, rp_shmring_now(ring), "seq", i));
	uint32_t alive_pid = 1;
	assert_int_equal(rp_drain_reap(f->drain, pid_is_gone, &alive_pid), 0);
	assert_int_equal(rp_drain_reap(f->drain, pid_is_gone, &dead_pid), 1);
	struct rp_drain_stats st;
	rp_drain_stats(f->drain, &st);
	assert_int_equal(st.producers, 0);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	struct seq_check c = { .tid = 88 };
	read_window(f->rf, before, rp_clock_now_ns(), check_sequence, &c);
	assert_true(c.next == 100);
}

/* A thread named once is named again in every later chunk, so any window
 * (and so any snapshot) can name it. */
static void test_names_repeat_in_every_chunk(void **state)
{
	struct fixture *f = *state;
	uint64_t ts = rp_clock_now_ns();
	struct rp_event name = { .kind = RP_EV_THREAD_NAME, .ts = ts, .pid = 9, .tid = 10,
				 .name = "trainer-rank0" };
	assert_int_equal(rp_drain_add(f->drain, &name, NULL), 0);
	for (int i = 0; i < 200000; i++) {
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ++ts, .pid = 9, .tid = 10,
				       .name = "seq", .u.counter.value = i };
		assert_int_equal(rp_drain_add(f->drain, &ev, NULL), 0);
	}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);

	struct rp_ringfile_iter *it;
	struct rp_chunk_reader *r;
	assert_int_equal(rp_ringfile_iter_new(f->rf, 0, UINT64_MAX, &it), 0);
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	int chunks = 0;
	while (rp_ringfile_iter_next(it, &chunk, &len, &hdr) == 1) {
		assert_int_equal(rp_chunk_reader_load(r, chunk, len, NULL), 0);
		struct rp_event ev;
		int named = 0;
		while (rp_chunk_reader_next(r, &ev, NULL) == 1)
			if (ev.kind == RP_EV_THREAD_NAME && ev.tid == 10 &&
			    strcmp(ev.name, "trainer-rank0") == 0)
				named++;
		assert_int_equal(named, 1);
		chunks++;
	}
	assert_true(chunks > 2);
	rp_chunk_reader_free(r);
	rp_ringfile_iter_free(it);
}

/* What one chunk repeats of the process metadata below. */
struct chunk_meta {
	int cmdlines, hz, map_a, map_b, map_c, counters;
};

static void scan_chunks(struct rp_ringfile *rf, void (*fn)(void *ctx, int chunk,
							    const struct rp_event *ev),
			void *ctx)
{
	struct rp_ringfile_iter *it;
	struct rp_chunk_reader *r;
	assert_int_equal(rp_ringfile_iter_new(rf, 0, UINT64_MAX, &it), 0);
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	const void *chunk;
	size_t len;
	struct rp_chunk_header hdr;
	for (int n = 0; rp_ringfile_iter_next(it, &chunk, &len, &hdr) == 1; n++) {
		assert_int_equal(rp_chunk_reader_load(r, chunk, len, NULL), 0);
		struct rp_event ev;
		int rc;
		while ((rc = rp_chunk_reader_next(r, &ev, NULL)) == 1)
			fn(ctx, n, &ev);
		assert_int_equal(rc, 0);
	}
	rp_chunk_reader_free(r);
	rp_ringfile_iter_free(it);
}

static void count_meta(void *ctx, int chunk, const struct rp_event *ev)
{
	struct chunk_meta *m = &((struct chunk_meta *)ctx)[chunk];
	m->cmdlines += ev->kind == RP_EV_PROCESS_CMDLINE && ev->pid == 9 &&
		       !strcmp(ev->name, "python3 train.py");
	m->hz += ev->kind == RP_EV_COUNTER && !strcmp(ev->name, "cpu_sampler_hz") &&
		 ev->u.counter.value == 99;
	m->counters += ev->kind == RP_EV_COUNTER && !strcmp(ev->name, "seq");
	if (ev->kind != RP_EV_MAPPING)
		return;
	m->map_a += ev->pid == 9 && ev->u.mapping.start == 0x1000;
	m->map_b += ev->pid == 9 && ev->u.mapping.start == 0x1800 && ev->u.mapping.end == 0x3000 &&
		    ev->u.mapping.offset == 0x800 && ev->u.mapping.build_id_len == 2 &&
		    ev->u.mapping.build_id[1] == 0xcd && !strcmp(ev->name, "/usr/lib/libb.so");
	m->map_c += ev->pid == 11;
}

/* Command lines, mappings and sticky events are repeated in every chunk
 * like names; a mapping replaces the ones it overlaps; forgetting a
 * process stops its repeats. */
static void test_process_metadata_repeats(void **state)
{
	struct fixture *f = *state;
	uint64_t ts = rp_clock_now_ns();
	struct rp_event meta[] = {
		{ .kind = RP_EV_PROCESS_CMDLINE, .ts = ts, .pid = 9, .tid = 9, .name = "python3 train.py" },
		{ .kind = RP_EV_MAPPING, .ts = ts, .pid = 9, .tid = 9, .name = "/usr/lib/liba.so",
		  .u.mapping = { .start = 0x1000, .end = 0x2000 } },
		{ .kind = RP_EV_MAPPING, .ts = ts, .pid = 9, .tid = 9, .name = "/usr/lib/libb.so",
		  .u.mapping = { .start = 0x1800, .end = 0x3000, .offset = 0x800,
				 .build_id = { 0xab, 0xcd }, .build_id_len = 2 } },
		{ .kind = RP_EV_MAPPING, .ts = ts, .pid = 11, .tid = 11, .name = "/usr/bin/other",
		  .u.mapping = { .start = 0x1000, .end = 0x2000 } },
	};
	for (size_t i = 0; i < sizeof(meta) / sizeof(meta[0]); i++)
		assert_int_equal(rp_drain_add(f->drain, &meta[i], NULL), 0);
	struct rp_event hz = { .kind = RP_EV_COUNTER, .ts = ts, .name = "cpu_sampler_hz",
			       .u.counter.value = 50 };
	assert_int_equal(rp_drain_add_sticky(f->drain, &hz, NULL), 0);
	hz.u.counter.value = 99; /* replaces the 50 */
	assert_int_equal(rp_drain_add_sticky(f->drain, &hz, NULL), 0);
	struct rp_event sample = { .kind = RP_EV_CPU_SAMPLE, .ts = ts };
	assert_int_equal(rp_drain_add_sticky(f->drain, &sample, NULL), -EINVAL);
	int forgot_at = -1;
	for (int i = 0; i < 200000; i++) {
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ++ts, .pid = 9, .tid = 10,
				       .name = "seq", .u.counter.value = i };
		assert_int_equal(rp_drain_add(f->drain, &ev, NULL), 0);
		if (i == 100000) {
			struct rp_drain_stats st;
			rp_drain_stats(f->drain, &st);
			forgot_at = (int)st.chunks; /* the chunk open now still holds pid 11 */
			rp_drain_forget(f->drain, 11);
		}
	}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	struct rp_drain_stats st;
	rp_drain_stats(f->drain, &st);
	assert_true(st.chunks > 4 && forgot_at > 1 && forgot_at + 2 < (int)st.chunks);

	struct chunk_meta *m = calloc(st.chunks, sizeof(*m));
	scan_chunks(f->rf, count_meta, m);
	for (int c = 0; c < (int)st.chunks; c++) {
		assert_int_equal(m[c].cmdlines, 1);
		assert_int_equal(m[c].map_b, 1);
		assert_int_equal(m[c].map_a, c == 0); /* only where it was added */
		assert_int_equal(m[c].hz, 1);
		assert_int_equal(m[c].map_c, c <= forgot_at);
		assert_true(m[c].counters > 0);
	}
	free(m);
}

struct rotation {
	int meta[1024], counters[1024], chunks;
	uint8_t *seen[1024]; /* by chunk: mapping i appeared in it */
};

static void count_rotation(void *ctx, int chunk, const struct rp_event *ev)
{
	struct rotation *r = ctx;
	assert_true(chunk < 1024);
	if (chunk >= r->chunks) {
		r->chunks = chunk + 1;
		r->seen[chunk] = calloc(3000, 1);
	}
	if (ev->kind == RP_EV_MAPPING) {
		r->meta[chunk]++;
		r->seen[chunk][ev->pid - 1000] = 1;
	}
	r->counters[chunk] += ev->kind == RP_EV_COUNTER;
}

/* More mappings than half a chunk holds: each chunk repeats what fits in
 * half of it, and the next chunk goes on where it stopped, so every
 * mapping keeps coming back and events always find room. */
static void test_metadata_replay_is_bounded(void **state)
{
	struct fixture *f = *state;
	enum { N = 3000 };
	uint64_t ts = rp_clock_now_ns();
	char path[RP_NAME_MAX + 1];
	for (int i = 0; i < N; i++) {
		snprintf(path, sizeof(path), "/opt/a/long/path/to/library/number/%d/%0180d.so", i, i);
		struct rp_event ev = { .kind = RP_EV_MAPPING, .ts = ts, .pid = 1000 + (uint32_t)i,
				       .tid = 1000 + (uint32_t)i, .name = path,
				       .u.mapping = { .start = 0x400000, .end = 0x500000 } };
		assert_int_equal(rp_drain_add(f->drain, &ev, NULL), 0);
	}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	for (int i = 0; i < 400000; i++) {
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ++ts, .pid = 9, .tid = 10,
				       .name = "seq", .u.counter.value = i };
		assert_int_equal(rp_drain_add(f->drain, &ev, NULL), 0);
	}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	static struct rotation r;
	scan_chunks(f->rf, count_rotation, &r);
	/* The chunks after the one the counters start in, but the last
	 * (flushed early), hold repeats only. */
	int first = 0;
	while (first < r.chunks && !r.counters[first])
		first++;
	assert_true(first > 0 && r.chunks - first > 10);
	uint8_t seen[N] = { 0 };
	int without = 0;
	for (int c = first + 1; c < r.chunks - 1; c++) {
		assert_true(r.meta[c] < N / 4);    /* a part of them */
		assert_true(r.counters[c] > 1000); /* and room for events */
		without += r.meta[c] == 0;         /* only events carried over from a split */
		for (int i = 0; i < N; i++)
			seen[i] |= r.seen[c][i];
	}
	assert_true(without * 10 < r.chunks - first);
	for (int i = 0; i < N; i++)
		assert_int_equal(seen[i], 1);
	for (int c = 0; c < r.chunks; c++)
		free(r.seen[c]);
}

struct writer_arg {
	struct rp_drain *drain;
	struct rp_shmring *ring;
	atomic_bool stop;
	atomic_uint_fast64_t sealed_through; /* counter values flushed so far */
	atomic_int failures;                  /* cmocka asserts only on the main thread */
};

static void *writer_thread(void *p)
{
	struct writer_arg *w = p;
	uint64_t i = 0;
	while (!atomic_load(&w->stop)) {
		for (int k = 0; k < 1000; k++, i++)
			rp_shm_counter(w->ring, rp_shmring_now(w->ring), "seq", (double)i);
		if (i % 20000 == 0) {
			if (rp_drain_flush(w->drain, NULL) < 0)
				atomic_fetch_add(&w->failures, 1);
			atomic_store(&w->sealed_through, i);
		} else if (rp_drain_poll(w->drain, NULL) < 0) {
			atomic_fetch_add(&w->failures, 1);
		}
	}
	return NULL;
}

/* Under wrap-around a chunk may be overwritten while the reader gets to
 * it (it is then skipped, never returned torn), so a window can have gaps
 * but never a duplicate or a value out of order. */
static void count_seq(void *ctx, const struct rp_event *ev)
{
	struct seq_check *c = ctx;
	if (ev->kind == RP_EV_COUNTER && ev->tid == c->tid) {
		assert_true(c->other == 0 || ev->u.counter.value >= c->next);
		c->other = 1;
		c->next = ev->u.counter.value + 1;
	}
}

/* A reader reads windows while the writer keeps sealing and wrapping;
 * what it gets is always whole and in order. */
static void test_concurrent_reader(void **state)
{
	(void)state;
	struct fixture f;
	assert_int_equal(open_fixture(&f, 1 << 20, 1000000), 0); /* 15 slots: wraps fast */
	struct writer_arg w = { .drain = f.drain };
	assert_int_equal(rp_shmring_create(1 << 20, (uint32_t)getpid(), 42, RP_SHM_CLOCK_MONOTONIC, &w.ring, NULL), 0);
	assert_int_equal(rp_drain_attach(f.drain, w.ring), 0);
	pthread_t t;
	pthread_create(&t, NULL, writer_thread, &w);
	uint64_t reads = 0, events = 0;
	uint64_t end = rp_clock_now_ns() + 1500000000u;
	while (rp_clock_now_ns() < end) {
		uint64_t now = rp_clock_now_ns();
		struct seq_check c = { .tid = 42 };
		events += read_window(f.rf, now - 50000000u, now, count_seq, &c);
		reads++;
	}
	atomic_store(&w.stop, true);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&w.failures), 0);
	assert_true(reads > 10);
	assert_true(events > 0);
	assert_true(atomic_load(&w.sealed_through) > 0);
	rp_drain_free(f.drain);
	rp_ringfile_close(f.rf);
	unlink(f.path);
	rmdir(f.dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_producer_to_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drops_recorded, setup, teardown),
		cmocka_unit_test(test_seal_by_age_and_flush),
		cmocka_unit_test_setup_teardown(test_reap_drains_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_repeat_in_every_chunk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_process_metadata_repeats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metadata_replay_is_bounded, setup, teardown),
		cmocka_unit_test(test_concurrent_reader),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
