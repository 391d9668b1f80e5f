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
#include <sys/mman.h>
#include <unistd.h>

#include "chunk.h"
#include "clock.h"
#include "drain.h"
#include "ringfile.h"
#include "shmring.h"
#include "scratch.h"

struct fixture {
	char dir[64];
	char path[128];
	struct rp_ringfile *rf;
	struct rp_drain *drain;
};

static int open_fixture(struct fixture *f, uint64_t budget, uint64_t seal_ns)
{
	if (scratch_make(f->dir, sizeof(f->dir), "drain") < 0)
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
	(void)scratch_remove(f->dir);
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

#define CLOCK_MARGIN_NS 20000000ull

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
		/* TSC ticks become host ns through a calibration a loaded machine
		 * (the sanitized pass) makes less exact: a margin keeps the first
		 * and last events inside the window. */
		read_window(f->rf, before - CLOCK_MARGIN_NS, after + CLOCK_MARGIN_NS, check_sequence, &c);
		assert_true(c.next == 100000);
		assert_true(c.last_ts <= after + CLOCK_MARGIN_NS);
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

/* A foreign clock's records land at ts + the declared offset; they stay
 * in the producer ring, for a daemon restarted after a crash, until the
 * chunk holding them is sealed. */
static void test_foreign_clock_and_records_freed_once_sealed(void **state)
{
	struct fixture *f = *state;
	struct rp_shmring *ring;
	assert_int_equal(rp_shmring_create(1 << 16, (uint32_t)getpid(), 90, RP_SHM_CLOCK_FOREIGN,
					   &ring, NULL), 0);
	const int64_t offset = 7000000000; /* the producer's clock runs 7 s behind */
	rp_shmring_set_clock_offset(ring, offset);
	assert_int_equal(rp_drain_attach(f->drain, ring), 0);
	uint64_t before = rp_clock_now_ns(), last = 0;
	for (int i = 0; i < 10; i++) {
		uint64_t ts = rp_shmring_now(ring);
		assert_true(ts + (uint64_t)offset >= before);
		assert_true(rp_shm_counter(ring, ts, "seq", i));
		last = ts + (uint64_t)offset;
	}
	assert_int_equal(rp_drain_poll(f->drain, NULL), 10);
	/* Read into the open chunk (1 s seal interval): not freed yet. */
	assert_true(rp_shmring_free_bytes(ring) < rp_shmring_capacity(ring));
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	assert_int_equal(rp_shmring_free_bytes(ring), rp_shmring_capacity(ring));
	struct seq_check c = { .tid = 90 };
	read_window(f->rf, before, rp_clock_now_ns(), check_sequence, &c);
	assert_true(c.next == 10);
	assert_int_equal(c.last_ts, last);
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
	(void)scratch_remove(f.dir);
}

static bool pid_is_gone(const struct rp_shmring *ring, void *ctx)
{
	return rp_shmring_pid(ring) == *(uint32_t *)ctx;
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

static bool tid_is_gone(const struct rp_shmring *ring, void *ctx)
{
	return rp_shmring_tid(ring) == *(uint32_t *)ctx;
}

struct name_check {
	uint32_t pid;
	uint64_t names, counters;
};

static void count_names(void *ctx, const struct rp_event *ev)
{
	struct name_check *c = ctx;
	c->names += ev->kind == RP_EV_PROCESS_NAME && ev->pid == c->pid;
	c->counters += ev->kind == RP_EV_COUNTER && ev->pid == c->pid;
}

/* The ring of a thread that exited goes; its process's name stays for the
 * rings of its other threads. */
static void test_reap_one_thread_keeps_its_process(void **state)
{
	struct fixture *f = *state;
	uint32_t pid = 777777, gone_tid = 1, live_tid = 2;
	struct rp_shmring *gone, *live;
	assert_int_equal(rp_shmring_create(1 << 16, pid, gone_tid, RP_SHM_CLOCK_MONOTONIC, &gone, NULL), 0);
	assert_int_equal(rp_shmring_create(1 << 16, pid, live_tid, RP_SHM_CLOCK_MONOTONIC, &live, NULL), 0);
	assert_int_equal(rp_drain_attach(f->drain, gone), 0);
	assert_int_equal(rp_drain_attach(f->drain, live), 0);
	struct rp_event name = { .kind = RP_EV_PROCESS_NAME, .ts = rp_clock_now_ns(), .pid = pid,
				 .tid = pid, .name = "trainer" };
	assert_int_equal(rp_drain_add(f->drain, &name, NULL), 0);
	assert_true(rp_shm_counter(gone, rp_shmring_now(gone), "seq", 0));
	assert_int_equal(rp_drain_reap(f->drain, tid_is_gone, &gone_tid), 1);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	uint64_t later = rp_clock_now_ns();
	assert_true(rp_shm_counter(live, rp_shmring_now(live), "seq", 1));
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	struct name_check c = { .pid = pid };
	read_window(f->rf, later, UINT64_MAX, count_names, &c);
	assert_int_equal(c.counters, 1);
	assert_int_equal(c.names, 1);
}

struct pid_check {
	uint32_t sample_pid;
	uint64_t samples, drops, max_ts;
};

static void check_pids(void *ctx, const struct rp_event *ev)
{
	struct pid_check *c = ctx;
	if (ev->kind == RP_EV_CPU_SAMPLE) {
		c->samples++;
		c->sample_pid = ev->pid;
	}
	if (ev->kind == RP_EV_DROPS)
		c->drops += ev->u.drops.count;
	if (ev->ts > c->max_ts)
		c->max_ts = ev->ts;
}

/* What a hostile producer writes into its own ring: a CPU sample naming
 * another process, a timestamp of 2^64-1, a drop counter of 2^63.  The
 * sample carries the ring's pid, the timestamp is counted as corrupt and
 * the drops are clamped, in the totals and per producer. */
static void test_hostile_producer(void **state)
{
	struct fixture *f = *state;
	struct rp_shmring *ring;
	uint32_t pid = (uint32_t)getpid();
	assert_int_equal(rp_shmring_create(1 << 16, pid, 91, RP_SHM_CLOCK_MONOTONIC, &ring, NULL), 0);
	assert_int_equal(rp_drain_attach(f->drain, ring), 0);
	uint64_t before = rp_clock_now_ns();
	uint64_t frames[2] = { 0x401000, 0x402000 };
	struct rp_event sample = { .kind = RP_EV_CPU_SAMPLE, .ts = rp_shmring_now(ring), .pid = 1,
				   .tid = 92, .u.sample = { .nframes = 2, .frames = frames } };
	assert_true(rp_shm_write_event(ring, &sample));
	assert_true(rp_shm_counter(ring, UINT64_MAX, "future", 1));
	assert_true(rp_shm_counter(ring, rp_shmring_now(ring) + 120000000000ull, "ahead", 1));
	struct rp_event drops = { .kind = RP_EV_DROPS, .ts = rp_shmring_now(ring),
				  .u.drops.count = UINT64_MAX };
	assert_true(rp_shm_write_event(ring, &drops));
	void *hdr = mmap(NULL, RP_SHM_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			 rp_shmring_fd(ring), 0);
	assert_true(hdr != MAP_FAILED);
	uint64_t huge = 1ull << 63;
	memcpy((char *)hdr + RP_SHM_OFF_DROPPED, &huge, sizeof(huge));
	munmap(hdr, RP_SHM_HDR_SIZE);

	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	struct rp_drain_stats st;
	rp_drain_stats(f->drain, &st);
	assert_int_equal(st.corrupt_records, 4); /* 2 timestamps, 2 drop counts */
	assert_true(st.producer_drops <= INT64_MAX);
	assert_int_equal(st.producer_drops, 1ull << 32);
	struct rp_drain_producer_stats ps[2];
	assert_int_equal(rp_drain_producers(f->drain, 0, ps, 2), 1);
	assert_int_equal(ps[0].pid, pid);
	assert_int_equal(ps[0].corrupt, 4);
	assert_int_equal(ps[0].dropped, 1ull << 32);

	struct pid_check c = { 0 };
	read_window(f->rf, 0, UINT64_MAX, check_pids, &c);
	assert_int_equal(c.samples, 1);
	assert_int_equal(c.sample_pid, pid);
	assert_int_equal(c.drops, 1ull << 32);
	assert_true(c.max_ts >= before && c.max_ts <= rp_clock_now_ns());
	/* Saturates rather than wraps, however often the counter jumps. */
	for (int i = 0; i < 3; i++) {
		hdr = mmap(NULL, RP_SHM_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			   rp_shmring_fd(ring), 0);
		assert_true(hdr != MAP_FAILED);
		huge = UINT64_MAX - (uint64_t)(2 - i);
		memcpy((char *)hdr + RP_SHM_OFF_DROPPED, &huge, sizeof(huge));
		munmap(hdr, RP_SHM_HDR_SIZE);
		assert_true(rp_drain_poll(f->drain, NULL) >= 0);
	}
	rp_drain_stats(f->drain, &st);
	assert_true(st.producer_drops <= INT64_MAX);
}

/* A thread named once is named again in every later chunk with its
 * events, so any window (and so any snapshot) can name it. */
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

static bool is_meta_kind(uint8_t kind)
{
	return kind == RP_EV_PROCESS_NAME || kind == RP_EV_THREAD_NAME ||
	       kind == RP_EV_PROCESS_CMDLINE || kind == RP_EV_MAPPING;
}

/* What one chunk holds of processes A (pid 20, thread 21) and B (pid 30,
 * threads 31 and 32), and whether each one's metadata came before its
 * first event there. */
struct two_procs {
	struct {
		int name, cmdline, map, thread, thread2, events;
		bool late; /* metadata after an event of the process */
	} p[2];
	int hz;
};

static void count_two(void *ctx, int chunk, const struct rp_event *ev)
{
	assert_true(chunk < 64);
	struct two_procs *c = &((struct two_procs *)ctx)[chunk];
	c->hz += ev->kind == RP_EV_COUNTER && !strcmp(ev->name, "cpu_sampler_hz");
	if (ev->pid != 20 && ev->pid != 30)
		return;
	int k = ev->pid == 30;
	uint32_t tid = k ? 31 : 21;
	c->p[k].late |= is_meta_kind(ev->kind) && c->p[k].events > 0;
	c->p[k].name += ev->kind == RP_EV_PROCESS_NAME && !strcmp(ev->name, k ? "b" : "a");
	c->p[k].cmdline += ev->kind == RP_EV_PROCESS_CMDLINE;
	c->p[k].map += ev->kind == RP_EV_MAPPING && !strcmp(ev->name, k ? "/usr/bin/b" : "/usr/bin/a");
	c->p[k].thread += ev->kind == RP_EV_THREAD_NAME && ev->tid == tid;
	c->p[k].thread2 += ev->kind == RP_EV_THREAD_NAME && ev->tid == 32;
	c->p[k].events += ev->kind == RP_EV_COUNTER;
}

static void add_counters(struct rp_drain *d, uint32_t pid, uint32_t tid, int n, uint64_t *ts)
{
	for (int i = 0; i < n; i++) {
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ++*ts, .pid = pid, .tid = tid,
				       .name = "seq", .u.counter.value = i };
		assert_int_equal(rp_drain_add(d, &ev, NULL), 0);
	}
}

/* A chunk holds the metadata of the processes and threads it has events
 * of, ahead of their first event there, and no other's: A's alone where
 * only A has events, A's and B's where both have, and a long-lived
 * process's in every chunk of its events. */
static void test_metadata_only_where_needed(void **state)
{
	struct fixture *f = *state;
	uint64_t ts = rp_clock_now_ns();
	struct rp_event meta[] = {
		{ .kind = RP_EV_PROCESS_NAME, .ts = ts, .pid = 20, .tid = 20, .name = "a" },
		{ .kind = RP_EV_PROCESS_CMDLINE, .ts = ts, .pid = 20, .tid = 20, .name = "a --x" },
		{ .kind = RP_EV_MAPPING, .ts = ts, .pid = 20, .tid = 20, .name = "/usr/bin/a",
		  .u.mapping = { .start = 0x1000, .end = 0x2000 } },
		{ .kind = RP_EV_THREAD_NAME, .ts = ts, .pid = 20, .tid = 21, .name = "a-main" },
		{ .kind = RP_EV_PROCESS_NAME, .ts = ts, .pid = 30, .tid = 30, .name = "b" },
		{ .kind = RP_EV_PROCESS_CMDLINE, .ts = ts, .pid = 30, .tid = 30, .name = "b --y" },
		{ .kind = RP_EV_MAPPING, .ts = ts, .pid = 30, .tid = 30, .name = "/usr/bin/b",
		  .u.mapping = { .start = 0x1000, .end = 0x2000 } },
		{ .kind = RP_EV_THREAD_NAME, .ts = ts, .pid = 30, .tid = 31, .name = "b-1" },
		{ .kind = RP_EV_THREAD_NAME, .ts = ts, .pid = 30, .tid = 32, .name = "b-2" },
	};
	for (size_t i = 0; i < sizeof(meta) / sizeof(meta[0]); i++)
		assert_int_equal(rp_drain_add(f->drain, &meta[i], NULL), 0);
	struct rp_event hz = { .kind = RP_EV_COUNTER, .ts = ts, .name = "cpu_sampler_hz",
			       .u.counter.value = 99 };
	assert_int_equal(rp_drain_add_sticky(f->drain, &hz, NULL), 0);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);         /* chunk 0 */
	add_counters(f->drain, 20, 21, 10, &ts);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);         /* 1: A */
	add_counters(f->drain, 20, 21, 10, &ts);
	add_counters(f->drain, 30, 31, 10, &ts);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);         /* 2: A and B */
	add_counters(f->drain, 30, 31, 10, &ts);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);         /* 3: B */
	add_counters(f->drain, 20, 21, 200000, &ts);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);         /* 4...: A */
	struct rp_drain_stats st;
	rp_drain_stats(f->drain, &st);
	assert_true(st.chunks > 6 && st.chunks < 64);

	struct two_procs c[64] = { 0 };
	scan_chunks(f->rf, count_two, c);
	for (int k = 0; k < 2; k++) { /* recorded once, where added */
		assert_int_equal(c[0].p[k].name + c[0].p[k].cmdline + c[0].p[k].map, 3);
		assert_int_equal(c[0].p[k].thread, 1);
	}
	for (int i = 1; i < (int)st.chunks; i++) {
		assert_int_equal(c[i].hz, 1);
		for (int k = 0; k < 2; k++) {
			bool has = c[i].p[k].events > 0;
			assert_true(has == (k == 0 ? i != 3 : i == 2 || i == 3));
			assert_int_equal(c[i].p[k].name, has);
			assert_int_equal(c[i].p[k].cmdline, has);
			assert_int_equal(c[i].p[k].map, has);
			assert_int_equal(c[i].p[k].thread, has);
			assert_int_equal(c[i].p[k].thread2, 0); /* a thread without events */
			assert_false(c[i].p[k].late);
		}
	}
}

/* What each chunk says of its device: device_info events, the uid of
 * the last, and whether one came first in the chunk. */
struct chunk_device {
	int infos, events;
	bool first;
	char uid[RP_DEVICE_UID_MAX + 1];
	uint8_t kind;
	uint32_t index;
};

static void count_device(void *ctx, int chunk, const struct rp_event *ev)
{
	assert_true(chunk < 16);
	struct chunk_device *c = &((struct chunk_device *)ctx)[chunk];
	if (ev->kind == RP_EV_DEVICE_INFO) {
		c->first |= c->events == 0;
		c->infos++;
		snprintf(c->uid, sizeof(c->uid), "%s", ev->name ? ev->name : "");
		c->kind = ev->u.device.kind;
		c->index = ev->u.device.index;
	}
	c->events++;
}

/* A ring's device_info opens every chunk, so that any window says which
 * device it holds; a later one (the uid a producer brought) replaces it
 * instead of joining it. */
static void test_device_info_opens_every_chunk(void **state)
{
	struct fixture *f = *state;
	uint64_t ts = rp_clock_now_ns();
	struct rp_event info = { .kind = RP_EV_DEVICE_INFO, .ts = ts,
				 .u.device = { .kind = RP_DEVICE_NEURON_CORE, .index = 2 } };
	assert_int_equal(rp_drain_add_sticky(f->drain, &info, NULL), 0);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);  /* chunk 0 */
	add_counters(f->drain, 20, 21, 10, &ts);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);  /* 1 */
	info.ts = ++ts;
	info.name = "nc-uid-7";
	assert_int_equal(rp_drain_add_sticky(f->drain, &info, NULL), 0);
	add_counters(f->drain, 20, 21, 10, &ts);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);  /* 2: both */
	add_counters(f->drain, 20, 21, 10, &ts);
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);  /* 3 */

	struct chunk_device c[16] = { 0 };
	scan_chunks(f->rf, count_device, c);
	assert_int_equal(c[0].infos, 1);
	assert_int_equal(c[1].infos, 1);
	assert_string_equal(c[1].uid, "");
	assert_int_equal(c[2].infos, 2); /* the old one opens it, the new one follows */
	assert_string_equal(c[2].uid, "nc-uid-7");
	assert_int_equal(c[3].infos, 1);
	assert_string_equal(c[3].uid, "nc-uid-7");
	for (int i = 0; i < 4; i++) {
		assert_true(c[i].first);
		assert_int_equal(c[i].kind, RP_DEVICE_NEURON_CORE);
		assert_int_equal(c[i].index, 2);
	}
}

/* What one chunk repeats of the process metadata below. */
struct chunk_meta {
	int cmdlines, hz, map_a, map_b, map_c, counters;
};

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

/* Command lines and mappings are repeated like names, sticky events in
 * every chunk; a mapping replaces the ones it overlaps; forgetting a
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
		/* Both processes have events in every chunk. */
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ++ts, .pid = i % 2 ? 11 : 9,
				       .tid = i % 2 ? 12 : 10, .name = "seq", .u.counter.value = i };
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
		r->seen[chunk][(ev->u.mapping.start - 0x400000) >> 12] = 1;
	}
	r->counters[chunk] += ev->kind == RP_EV_COUNTER;
}

/* A process with more mappings than half a chunk holds: each chunk of its
 * events repeats what fits in half of it, and the next one starts with
 * those left out, so every mapping keeps coming back and events always
 * find room. */
static void test_metadata_replay_is_bounded(void **state)
{
	struct fixture *f = *state;
	enum { N = 3000 };
	uint64_t ts = rp_clock_now_ns();
	char path[RP_NAME_MAX + 1];
	for (int i = 0; i < N; i++) {
		snprintf(path, sizeof(path), "/opt/a/long/path/to/library/number/%d/%0180d.so", i, i);
		uint64_t start = 0x400000 + ((uint64_t)i << 12);
		struct rp_event ev = { .kind = RP_EV_MAPPING, .ts = ts, .pid = 9, .tid = 9,
				       .name = path,
				       .u.mapping = { .start = start, .end = start + 0x1000 } };
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
		assert_true(r.meta[c] < N / 2);    /* a part of them */
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

enum { NPROCS = 400, NMAPS = 6 };

/* Per chunk: which of the processes below it has described so far. */
struct described {
	int chunk, chunks, events;
	uint8_t name[NPROCS], thread[NPROCS], maps[NPROCS];
};

static void check_described(void *ctx, int chunk, const struct rp_event *ev)
{
	struct described *d = ctx;
	if (chunk != d->chunk) {
		memset(d->name, 0, sizeof(d->name));
		memset(d->thread, 0, sizeof(d->thread));
		memset(d->maps, 0, sizeof(d->maps));
		d->chunk = chunk;
		d->chunks++;
	}
	assert_true(ev->pid >= 1000 && ev->pid < 1000 + NPROCS);
	uint32_t k = ev->pid - 1000;
	d->name[k] |= ev->kind == RP_EV_PROCESS_NAME;
	d->thread[k] |= ev->kind == RP_EV_THREAD_NAME && ev->tid == ev->pid + 5000;
	d->maps[k] += ev->kind == RP_EV_MAPPING;
	if (ev->kind == RP_EV_COUNTER) {
		assert_true(d->name[k] && d->thread[k] && d->maps[k] >= NMAPS);
		d->events++;
	}
}

/* When the metadata of the processes a chunk has events of passes half
 * of it, the chunk is sealed early: every chunk still names, ahead of
 * them, every process and thread it has events of. */
static void test_every_chunk_describes_its_events(void **state)
{
	struct fixture *f = *state;
	uint64_t ts = rp_clock_now_ns();
	char path[RP_NAME_MAX + 1];
	for (uint32_t p = 1000; p < 1000 + NPROCS; p++) {
		struct rp_event name = { .kind = RP_EV_PROCESS_NAME, .ts = ts, .pid = p, .tid = p,
					 .name = "worker" };
		struct rp_event thread = { .kind = RP_EV_THREAD_NAME, .ts = ts, .pid = p,
					   .tid = p + 5000, .name = "worker-main" };
		assert_int_equal(rp_drain_add(f->drain, &name, NULL), 0);
		assert_int_equal(rp_drain_add(f->drain, &thread, NULL), 0);
		for (int i = 0; i < NMAPS; i++) {
			snprintf(path, sizeof(path), "/opt/a/long/path/to/%u/library/%d/%0160u.so",
				 p, i, p * 7 + (uint32_t)i);
			uint64_t start = 0x400000 + ((uint64_t)i << 20);
			struct rp_event ev = { .kind = RP_EV_MAPPING, .ts = ts, .pid = p, .tid = p,
					       .name = path,
					       .u.mapping = { .start = start, .end = start + 0x1000 } };
			assert_int_equal(rp_drain_add(f->drain, &ev, NULL), 0);
		}
	}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	for (int round = 0; round < 100; round++)
		for (uint32_t p = 1000; p < 1000 + NPROCS; p++) {
			struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ++ts, .pid = p,
					       .tid = p + 5000, .name = "seq",
					       .u.counter.value = round };
			assert_int_equal(rp_drain_add(f->drain, &ev, NULL), 0);
		}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	static struct described d = { .chunk = -1 };
	scan_chunks(f->rf, check_described, &d);
	assert_int_equal(d.events, 100 * NPROCS);
	assert_true(d.chunks > 100); /* each holds what fits of the processes */
}

/* Per chunk: whether it began with events a split seal carried over,
 * and which of the processes below it has events of but does not
 * describe. */
struct carried {
	int chunk, carried, undescribed;
	bool first;
	uint8_t events[10], described[10];
};

static void end_chunk(struct carried *c)
{
	for (int k = 0; k < 10; k++)
		c->undescribed += c->events[k] && c->described[k] != 7;
	memset(c->events, 0, sizeof(c->events));
	memset(c->described, 0, sizeof(c->described));
}

static void check_carried(void *ctx, int chunk, const struct rp_event *ev)
{
	struct carried *c = ctx;
	if (chunk != c->chunk) {
		end_chunk(c);
		c->chunk = chunk;
		c->first = true;
	}
	/* Otherwise a chunk starts with the metadata of its first event. */
	c->carried += c->first && ev->kind == RP_EV_COUNTER;
	c->first = false;
	uint32_t k = ev->pid - 1000;
	assert_true(k < 10);
	c->described[k] |= (ev->kind == RP_EV_PROCESS_NAME) | (ev->kind == RP_EV_MAPPING) << 1 |
			   (ev->kind == RP_EV_THREAD_NAME) << 2;
	c->events[k] |= ev->kind == RP_EV_COUNTER;
}

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Events that compress worse than the chunk before them split the seal:
 * the events that did not fit are carried over into the next chunk, which
 * gets their metadata after them.  Here the split is in the flush, so no
 * later event brings that metadata instead. */
static void test_split_keeps_metadata(void **state)
{
	struct fixture *f = *state;
	uint64_t ts = rp_clock_now_ns();
	for (uint32_t p = 1000; p < 1010; p++) {
		struct rp_event meta[] = {
			{ .kind = RP_EV_PROCESS_NAME, .ts = ts, .pid = p, .tid = p, .name = "w" },
			{ .kind = RP_EV_THREAD_NAME, .ts = ts, .pid = p, .tid = p + 1, .name = "wt" },
			{ .kind = RP_EV_MAPPING, .ts = ts, .pid = p, .tid = p, .name = "/usr/lib/x.so",
			  .u.mapping = { .start = 0x1000, .end = 0x2000 } },
		};
		for (size_t i = 0; i < 3; i++)
			assert_int_equal(rp_drain_add(f->drain, &meta[i], NULL), 0);
	}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	/* A run of one name, then every other name random. */
	uint64_t x = 88172645463325252ull;
	char name[40];
	for (int i = 0; i < 103000; i++) {
		bool random = i >= 100000 && xorshift(&x) % 2 == 0;
		if (random) {
			uint64_t a = xorshift(&x);
			snprintf(name, sizeof(name), "%016llx%016llx", (unsigned long long)a,
				 (unsigned long long)xorshift(&x));
		}
		uint32_t p = 1000 + (uint32_t)(i / 7 % 10);
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ++ts, .pid = p, .tid = p + 1,
				       .name = random ? name : "seq", .u.counter.value = i };
		assert_int_equal(rp_drain_add(f->drain, &ev, NULL), 0);
	}
	assert_int_equal(rp_drain_flush(f->drain, NULL), 0);
	struct carried c = { .chunk = -1 };
	scan_chunks(f->rf, check_carried, &c);
	end_chunk(&c);
	assert_true(c.carried > 0);
	assert_int_equal(c.undescribed, 0);
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
	(void)scratch_remove(f.dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_producer_to_window, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drops_recorded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_clock_and_records_freed_once_sealed,
						setup, teardown),
		cmocka_unit_test(test_seal_by_age_and_flush),
		cmocka_unit_test_setup_teardown(test_reap_drains_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reap_one_thread_keeps_its_process, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hostile_producer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_names_repeat_in_every_chunk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metadata_only_where_needed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_process_metadata_repeats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_metadata_replay_is_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_every_chunk_describes_its_events, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split_keeps_metadata, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device_info_opens_every_chunk, setup, teardown),
		cmocka_unit_test(test_concurrent_reader),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
