/* Sessions: windows frozen out of a ring file into a session directory,
 * exactly (events counted and read back by window), across wrap-around,
 * and the errors a user can run into.  Events are counters whose value is
 * their number i, stamped BASE_NS + i * 1000 ns. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "drain.h"
#include "parse.h"
#include "ringfile.h"
#include "scratch.h"
#include "session.h"

#define BASE_NS 1000000000000ull
#define WALL_OFFSET 1700000000000000000ll
#define HOST "trainer:07"
#define CHUNKS_FILE "trainer_07.host.chunks"
#define MANIFEST_FILE "trainer_07.manifest.json"
#define MARKER_FILE "trainer_07.open"
#define SLOT 4096u
#define PATH_LEN 512

static uint64_t ts_of(uint64_t i) { return BASE_NS + i * 1000; }

/* Short enough that every path built from it fits PATH_LEN. */
static char base[64];

struct ring {
	char path[PATH_LEN];
	struct rp_ringfile *rf;
	struct rp_drain *drain;
	uint64_t next;         /* number of the next counter event */
};

static void ring_open(struct ring *r, const char *name, uint32_t slots)
{
	snprintf(r->path, sizeof(r->path), "%s/%s.ring", base, name);
	struct rp_ringfile_opts o = { .device = "host", .budget_bytes = 4096 + (uint64_t)slots * SLOT,
				      .slot_size = SLOT };
	struct rp_err err = { 0 };
	int rc = rp_ringfile_open(r->path, &o, &r->rf, &err);
	if (rc < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(rp_drain_new(r->rf, NULL, &r->drain, &err), 0);
	r->next = 0;
}

static void ring_close(struct ring *r)
{
	rp_drain_free(r->drain);
	rp_ringfile_close(r->rf);
	unlink(r->path);
}

/* n more counter events, sealed into the ring. */
static void feed(struct ring *r, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++, r->next++) {
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ts_of(r->next), .pid = 1,
				       .tid = 2, .name = "step", .u.counter.value = (double)r->next };
		assert_int_equal(rp_drain_add(r->drain, &ev, NULL), 0);
	}
	assert_int_equal(rp_drain_flush(r->drain, NULL), 0);
}

static void add_drops(struct ring *r, uint64_t ts, uint64_t count)
{
	struct rp_event ev = { .kind = RP_EV_DROPS, .ts = ts, .pid = 1, .tid = 3,
			       .u.drops.count = count };
	assert_int_equal(rp_drain_add(r->drain, &ev, NULL), 0);
}

static uint64_t ring_chunks(struct ring *r)
{
	struct rp_ringfile_stats st;
	rp_ringfile_stats(r->rf, &st);
	return st.chunks;
}

static uint64_t ring_written(struct ring *r)
{
	struct rp_ringfile_stats st;
	rp_ringfile_stats(r->rf, &st);
	return st.written_chunks;
}

/* cache and exports: see struct rp_session_opts (NULL: none). */
static struct rp_session *open_shared(const char *logdir, const char *id,
				      enum rp_session_kind kind, uint64_t start, uint64_t end,
				      struct rp_session_cache *cache, const char *const *exports)
{
	json_t *extra = json_pack("{s:s}", "step", "1200");
	struct rp_session_opts o = {
		.logdir = logdir, .run = "default", .id = id, .host = HOST, .kind = kind,
		.start_ns = start, .end_ns = end, .wall_offset_ns = WALL_OFFSET,
		.source = "test", .reason = "unit test", .trigger_extra = extra,
		.cache = cache, .exports = exports,
	};
	struct rp_session *s = NULL;
	struct rp_err err = { 0 };
	int rc = rp_session_open(&o, &s, &err);
	json_decref(extra);
	if (rc < 0)
		fail_msg("%s", err.msg);
	return s;
}

static struct rp_session *open_session(const char *logdir, const char *id,
				       enum rp_session_kind kind, uint64_t start, uint64_t end)
{
	return open_shared(logdir, id, kind, start, end, NULL, NULL);
}

static void add_ring(struct rp_session *s, struct ring *r)
{
	struct rp_err err = { 0 };
	int rc = rp_session_add_ring(s, "host", r->rf, &err);
	if (rc < 0)
		fail_msg("%s", err.msg);
}

static void close_ok(struct rp_session *s, uint64_t end)
{
	struct rp_err err = { 0 };
	int rc = rp_session_close(s, end, &err);
	if (rc < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(rp_session_state_of(s), RP_SESSION_COMPLETE);
}

/* What a session's chunks file holds inside [t0, t1]. */
struct readback {
	uint64_t events, counters, drops, chunks, outside_chunks;
	uint64_t first, last;  /* counter values */
	uint64_t chunk_first_ts, chunk_last_ts;
};

static void read_back(const char *file, uint64_t t0, uint64_t t1, struct readback *rb)
{
	memset(rb, 0, sizeof(*rb));
	struct rp_session_chunks *c;
	struct rp_chunk_reader *r;
	struct rp_err err = { 0 };
	assert_int_equal(rp_session_chunks_open(file, &c, &err), 0);
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	const void *chunk;
	size_t len;
	struct rp_chunk_header h;
	int rc;
	uint64_t prev_seq = 0;
	while ((rc = rp_session_chunks_next(c, &chunk, &len, &h, &err)) == 1) {
		if (rb->chunks)
			assert_true(h.seq > prev_seq);
		prev_seq = h.seq;
		if (!rb->chunks || h.first_ts < rb->chunk_first_ts)
			rb->chunk_first_ts = h.first_ts;
		if (h.last_ts > rb->chunk_last_ts)
			rb->chunk_last_ts = h.last_ts;
		rb->chunks++;
		if (h.last_ts < t0 || h.first_ts > t1)
			rb->outside_chunks++;
		assert_int_equal(rp_chunk_reader_load(r, chunk, len, &err), 0);
		struct rp_event ev;
		int erc;
		while ((erc = rp_chunk_reader_next(r, &ev, &err)) == 1) {
			if (ev.ts < t0 || ev.ts > t1)
				continue;
			rb->events++;
			if (ev.kind == RP_EV_DROPS) {
				rb->drops += ev.u.drops.count;
				continue;
			}
			assert_int_equal(ev.kind, RP_EV_COUNTER);
			uint64_t v = (uint64_t)ev.u.counter.value;
			assert_int_equal(ev.ts, ts_of(v));
			/* Every event of the window, once, in order. */
			if (rb->counters)
				assert_int_equal(v, rb->last + 1);
			else
				rb->first = v;
			rb->last = v;
			rb->counters++;
		}
		assert_int_equal(erc, 0);
	}
	assert_int_equal(rc, 0);
	rp_chunk_reader_free(r);
	rp_session_chunks_close(c);
}

static void chunks_path(const struct rp_session *s, char *out, size_t len)
{
	snprintf(out, len, "%s/" CHUNKS_FILE, rp_session_path(s));
}

static json_t *load_manifest(const struct rp_session *s)
{
	char path[PATH_LEN];
	snprintf(path, sizeof(path), "%s/" MANIFEST_FILE, rp_session_path(s));
	json_error_t jerr;
	json_t *m = json_load_file(path, 0, &jerr);
	if (!m)
		fail_msg("%s: %s", path, jerr.text);
	return m;
}

static uint64_t get_u64(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	assert_true(json_is_integer(v));
	return (uint64_t)json_integer_value(v);
}

static json_t *device0(json_t *m)
{
	json_t *devs = json_object_get(m, "devices");
	assert_int_equal(json_array_size(devs), 1);
	return json_array_get(devs, 0);
}

/* A window in the past holds exactly the events stamped inside it, and
 * the manifest says so. */
static void test_snapshot_past_window(void **state)
{
	(void)state;
	struct ring r;
	ring_open(&r, "past", 64);
	feed(&r, 1000);
	add_drops(&r, ts_of(1000) + 500, 5);  /* inside */
	feed(&r, 1000);
	add_drops(&r, ts_of(2000) + 500, 7);  /* after */
	feed(&r, 1000);
	assert_true(ring_chunks(&r) >= 5);
	uint64_t start = ts_of(1000) + 1, end = ts_of(2000);

	struct rp_session *s = open_session(base, NULL, RP_SESSION_SNAPSHOT, start, end);
	char id[32];
	rp_session_id_from_time((int64_t)start + WALL_OFFSET, id);
	assert_string_equal(rp_session_name(s), id);
	add_ring(s, &r);
	close_ok(s, end);

	char file[PATH_LEN];
	chunks_path(s, file, sizeof(file));
	struct readback rb;
	read_back(file, start, end, &rb);
	assert_int_equal(rb.counters, 1000);
	assert_int_equal(rb.first, 1001);
	assert_int_equal(rb.last, 2000);
	assert_int_equal(rb.drops, 5);
	assert_int_equal(rb.outside_chunks, 0);
	/* Edge chunks are kept whole. */
	assert_true(rb.chunk_first_ts < start);
	assert_true(rb.chunk_last_ts > end);

	json_t *m = load_manifest(s);
	assert_int_equal(get_u64(m, "schema_version"), 1);
	assert_string_equal(json_string_value(json_object_get(m, "id")), id);
	assert_string_equal(json_string_value(json_object_get(m, "kind")), "snapshot");
	assert_string_equal(json_string_value(json_object_get(m, "state")), "complete");
	assert_string_equal(json_string_value(json_object_get(m, "host")), HOST);
	assert_string_equal(json_string_value(json_object_get(m, "clock")), "CLOCK_MONOTONIC");
	assert_string_equal(json_string_value(json_object_get(m, "path")), rp_session_path(s));
	assert_true(json_is_true(json_object_get(m, "complete_coverage")));
	json_t *req = json_object_get(m, "requested"), *cov = json_object_get(m, "covered");
	assert_int_equal(get_u64(req, "start_ns"), start);
	assert_int_equal(get_u64(req, "end_ns"), end);
	assert_int_equal(get_u64(req, "start_wall_ns"), start + WALL_OFFSET);
	assert_int_equal(get_u64(req, "end_wall_ns"), end + WALL_OFFSET);
	assert_true(json_equal(req, cov));
	json_t *d = device0(m);
	assert_string_equal(json_string_value(json_object_get(d, "file")), CHUNKS_FILE);
	assert_int_equal(get_u64(d, "events"), 1001); /* 1000 counters + 1 drops event */
	assert_int_equal(get_u64(d, "dropped"), 5);
	assert_int_equal(get_u64(d, "chunks"), rb.chunks);
	assert_int_equal(get_u64(d, "lost_chunks"), 0);
	assert_int_equal(get_u64(d, "first_ns"), rb.chunk_first_ts);
	assert_int_equal(get_u64(d, "last_ns"), rb.chunk_last_ts);
	struct stat st;
	assert_int_equal(stat(file, &st), 0);
	assert_int_equal(get_u64(d, "bytes"), (uint64_t)st.st_size);
	json_t *trig = json_object_get(m, "trigger");
	assert_string_equal(json_string_value(json_object_get(trig, "source")), "test");
	assert_string_equal(json_string_value(json_object_get(trig, "reason")), "unit test");
	assert_string_equal(json_string_value(json_object_get(trig, "step")), "1200");
	assert_true(get_u64(trig, "created_wall_ns") > 0);
	assert_null(json_object_get(m, "error"));

	/* The API object shares the manifest's fields. */
	json_t *o = rp_session_to_json(s);
	const char *keys[] = { "id", "run", "kind", "state", "path", "host", "requested",
			       "covered", "trigger" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		assert_true(json_equal(json_object_get(o, keys[i]), json_object_get(m, keys[i])));
	json_t *od = json_array_get(json_object_get(o, "devices"), 0);
	assert_int_equal(get_u64(od, "events"), 1001);
	assert_true(json_is_real(json_object_get(od, "horizon_s")));
	assert_null(json_object_get(o, "schema_version"));
	json_decref(o);
	json_decref(m);

	struct rp_err err = { 0 };
	assert_int_equal(rp_session_close(s, end, &err), -EALREADY);
	rp_session_free(s);
	ring_close(&r);
}

/* A window reaching further back than the ring: covered says how much of
 * it the ring still held. */
static void test_window_beyond_horizon(void **state)
{
	(void)state;
	struct ring r;
	ring_open(&r, "horizon", 8);
	feed(&r, 20000);
	assert_true(ring_written(&r) > 2 * 8);
	uint64_t start = ts_of(0), end = ts_of(r.next - 1);
	struct rp_session *s = open_session(base, "beyond", RP_SESSION_SNAPSHOT, start, end);
	add_ring(s, &r);
	close_ok(s, end);

	char file[PATH_LEN];
	chunks_path(s, file, sizeof(file));
	struct readback rb;
	read_back(file, start, end, &rb);
	assert_int_equal(rb.last, r.next - 1);
	assert_int_equal(rb.counters, r.next - rb.first);
	assert_true(rb.first > 0);

	json_t *m = load_manifest(s);
	assert_true(json_is_false(json_object_get(m, "complete_coverage")));
	json_t *cov = json_object_get(m, "covered");
	assert_int_equal(get_u64(cov, "start_ns"), ts_of(rb.first));
	assert_int_equal(get_u64(cov, "end_ns"), end);
	assert_int_equal(get_u64(cov, "start_wall_ns"), ts_of(rb.first) + WALL_OFFSET);
	json_t *d = device0(m);
	assert_int_equal(get_u64(d, "events"), rb.counters);
	/* Chunks gone before the session began were never its to lose. */
	assert_int_equal(get_u64(d, "lost_chunks"), 0);
	json_decref(m);
	rp_session_free(s);
	ring_close(&r);
}

/* A start/stop session while the ring wraps three times over: pumped as it
 * goes, or only at close (then the pin's saves hold everything).  Chunks
 * copied past the end it finally gets are re-counted. */
static void manual_session(bool pump)
{
	struct ring r;
	ring_open(&r, pump ? "manual-pump" : "manual-close", 16);
	feed(&r, 777);
	uint64_t first = r.next, start = ts_of(first);
	struct rp_session *s = open_session(base, pump ? "pumped" : "unpumped", RP_SESSION_MANUAL,
					    start, UINT64_MAX);
	add_ring(s, &r);
	json_t *o = rp_session_to_json(s);
	assert_string_equal(json_string_value(json_object_get(o, "state")), "open");
	assert_true(json_is_null(json_object_get(json_object_get(o, "requested"), "end_ns")));
	json_decref(o);

	uint64_t written0 = ring_written(&r);
	struct rp_err err = { 0 };
	while (ring_written(&r) - written0 < 3 * 16 + 2) {
		feed(&r, 150);
		if (pump)
			assert_int_equal(rp_session_pump(s, &err), 0);
	}
	uint64_t last = r.next - 1;
	feed(&r, 300); /* copied while open, past the end given at close */
	if (pump)
		assert_int_equal(rp_session_pump(s, &err), 0);
	close_ok(s, ts_of(last));

	char file[PATH_LEN];
	chunks_path(s, file, sizeof(file));
	struct readback rb;
	read_back(file, start, ts_of(last), &rb);
	assert_int_equal(rb.first, first);
	assert_int_equal(rb.last, last);
	assert_int_equal(rb.counters, last - first + 1);
	json_t *m = load_manifest(s);
	assert_string_equal(json_string_value(json_object_get(m, "kind")), "session");
	assert_int_equal(get_u64(json_object_get(m, "requested"), "end_ns"), ts_of(last));
	json_t *d = device0(m);
	assert_int_equal(get_u64(d, "events"), last - first + 1);
	assert_int_equal(get_u64(d, "lost_chunks"), 0);
	assert_true(json_is_true(json_object_get(m, "complete_coverage")));
	json_decref(m);
	rp_session_free(s);
	ring_close(&r);
}

static void test_manual_session_pumped(void **state)
{
	(void)state;
	manual_session(true);
}

static void test_manual_session_pins_only(void **state)
{
	(void)state;
	manual_session(false);
}

struct writer {
	struct ring *r;
	uint64_t n;
	atomic_bool done;
};

/* The ring's writer thread: chunks sealed as they fill, written async. */
static void *write_events(void *arg)
{
	struct writer *w = arg;
	for (uint64_t k = 0; k < w->n; k++, w->r->next++) {
		struct rp_event ev = { .kind = RP_EV_COUNTER, .ts = ts_of(w->r->next), .pid = 1,
				       .tid = 2, .name = "step", .u.counter.value = (double)w->r->next };
		if (rp_drain_add(w->r->drain, &ev, NULL) < 0 ||
		    (k % 500 == 0 && rp_drain_poll(w->r->drain, NULL) < 0))
			break;
	}
	(void)rp_drain_flush(w->r->drain, NULL);
	atomic_store(&w->done, true);
	return NULL;
}

/* Pumps racing the ring's writer (writes in flight, slots overwritten
 * under the pump) copy every event once and lose nothing. */
static void test_pump_races_writer(void **state)
{
	(void)state;
	struct ring r;
	ring_open(&r, "race", 16);
	feed(&r, 100);
	uint64_t first = r.next;
	struct rp_session *s = open_session(base, "race", RP_SESSION_MANUAL, ts_of(first), UINT64_MAX);
	add_ring(s, &r);
	struct writer w = { .r = &r, .n = 400000 };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, write_events, &w), 0);
	struct rp_err err = { 0 };
	while (!atomic_load(&w.done))
		assert_int_equal(rp_session_pump(s, &err), 0);
	pthread_join(t, NULL);
	assert_int_equal(r.next, first + w.n);
	assert_true(ring_written(&r) > 10 * 16);
	uint64_t last = r.next - 1;
	close_ok(s, ts_of(last));
	char file[PATH_LEN];
	chunks_path(s, file, sizeof(file));
	struct readback rb;
	read_back(file, ts_of(first), ts_of(last), &rb);
	assert_int_equal(rb.first, first);
	assert_int_equal(rb.counters, w.n);
	json_t *m = load_manifest(s);
	assert_int_equal(get_u64(device0(m), "events"), w.n);
	assert_int_equal(get_u64(device0(m), "lost_chunks"), 0);
	json_decref(m);
	rp_session_free(s);
	ring_close(&r);
}

/* Two sessions over the same ring at once, overlapping in time. */
static void test_overlapping_sessions(void **state)
{
	(void)state;
	struct ring r;
	ring_open(&r, "overlap", 16);
	feed(&r, 500);
	uint64_t a_first = r.next;
	struct rp_session *a = open_session(base, "outer", RP_SESSION_MANUAL, ts_of(a_first), UINT64_MAX);
	add_ring(a, &r);
	feed(&r, 3000);
	uint64_t b_first = r.next;
	struct rp_session *b = open_session(base, "inner", RP_SESSION_CAPTURE, ts_of(b_first), UINT64_MAX);
	add_ring(b, &r);
	struct rp_err err = { 0 };
	for (int i = 0; i < 40; i++) {
		feed(&r, 400);
		assert_int_equal(rp_session_pump(b, &err), 0);
		if (i % 3 == 0)
			assert_int_equal(rp_session_pump(a, &err), 0);
	}
	uint64_t b_last = r.next - 1;
	close_ok(b, ts_of(b_last));
	feed(&r, 20000);
	uint64_t a_last = r.next - 1;
	close_ok(a, ts_of(a_last));
	assert_true(ring_written(&r) > 3 * 16);

	struct { struct rp_session *s; uint64_t first, last; } want[] = {
		{ a, a_first, a_last }, { b, b_first, b_last },
	};
	for (int i = 0; i < 2; i++) {
		char file[PATH_LEN];
		chunks_path(want[i].s, file, sizeof(file));
		struct readback rb;
		read_back(file, ts_of(want[i].first), ts_of(want[i].last), &rb);
		assert_int_equal(rb.first, want[i].first);
		assert_int_equal(rb.last, want[i].last);
		assert_int_equal(rb.counters, want[i].last - want[i].first + 1);
		json_t *m = load_manifest(want[i].s);
		assert_int_equal(get_u64(device0(m), "events"), want[i].last - want[i].first + 1);
		json_decref(m);
		rp_session_free(want[i].s);
	}
	ring_close(&r);
}

/* Sessions open together share one read of each new chunk: with four of
 * them, the ring is read about once, not four times, and each session
 * still gets exactly its window. */
static void test_sessions_share_reads(void **state)
{
	(void)state;
	enum { N = 4 };
	struct ring r;
	ring_open(&r, "shared", 64);
	feed(&r, 500);
	struct rp_session_cache *cache;
	assert_int_equal(rp_session_cache_new(&cache), 0);
	uint64_t first = r.next;
	struct rp_session *s[N];
	for (int i = 0; i < N; i++) {
		char id[16];
		snprintf(id, sizeof(id), "shared%d", i);
		s[i] = open_shared(base, id, RP_SESSION_MANUAL, ts_of(first), UINT64_MAX, cache, NULL);
		add_ring(s[i], &r);
	}
	struct rp_err err = { 0 };
	for (int pass = 0; pass < 30; pass++) {
		feed(&r, 400);
		rp_session_cache_begin(cache);
		/* The session that lags behind (pumped every third pass) reads
		 * the ring itself when the cache no longer reaches back to it. */
		for (int i = 0; i < N; i++)
			if (i < N - 1 || pass % 3 == 0)
				assert_int_equal(rp_session_pump(s[i], &err), 0);
		rp_session_cache_end(cache);
	}
	uint64_t last = r.next - 1;
	for (int i = 0; i < N; i++)
		close_ok(s[i], ts_of(last));
	uint64_t copied = 0;
	for (int i = 0; i < N; i++) {
		char file[PATH_LEN];
		chunks_path(s[i], file, sizeof(file));
		struct readback rb;
		read_back(file, ts_of(first), ts_of(last), &rb);
		assert_int_equal(rb.first, first);
		assert_int_equal(rb.last, last);
		assert_int_equal(rb.counters, last - first + 1);
		json_t *m = load_manifest(s[i]);
		assert_int_equal(get_u64(device0(m), "events"), last - first + 1);
		assert_int_equal(get_u64(device0(m), "lost_chunks"), 0);
		copied = get_u64(device0(m), "bytes");
		json_decref(m);
		rp_session_free(s[i]);
	}
	/* Once for the three in step, and once more by the laggard on its
	 * own: about two copies' worth, where unshared reads would be four. */
	uint64_t read = rp_session_cache_read_bytes(cache);
	assert_true(read >= copied);
	assert_true(read < 5 * copied / 2);
	rp_session_cache_free(cache);
	ring_close(&r);
}

/* A complete session's manifest lists its exports as pending; each is
 * then recorded as written or failed, and the rest of the manifest stays. */
static void test_export_states(void **state)
{
	(void)state;
	struct ring r;
	ring_open(&r, "exports", 16);
	feed(&r, 100);
	static const char *const formats[] = { "json", "summary", NULL };
	struct rp_session *s = open_shared(base, "exported", RP_SESSION_SNAPSHOT, ts_of(0),
					   ts_of(99), NULL, formats);
	add_ring(s, &r);
	close_ok(s, ts_of(99));
	json_t *m = load_manifest(s);
	json_t *want = json_pack("{s:{s:s}, s:{s:s}}", "json", "state", "pending", "summary",
				 "state", "pending");
	assert_true(json_equal(json_object_get(m, "exports"), want));
	json_t *api = rp_session_to_json(s);
	assert_true(json_equal(json_object_get(api, "exports"), want));
	json_decref(api);
	json_decref(m);

	struct rp_err err = { 0 };
	json_t *written = json_pack("{s:s, s:I}", "state", "written", "bytes", (json_int_t)42);
	json_t *failed = json_pack("{s:s, s:s}", "state", "failed", "error", "disk full");
	int dirfd = open(rp_session_path(s), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dirfd >= 0);
	const char *dir = rp_session_path(s);
	assert_int_equal(rp_session_set_export(dirfd, dir, HOST, "json", written, &err), 0);
	assert_int_equal(rp_session_set_export(dirfd, dir, HOST, "summary", failed, &err), 0);
	m = load_manifest(s);
	json_object_set(want, "json", written);
	json_object_set(want, "summary", failed);
	assert_true(json_equal(json_object_get(m, "exports"), want));
	assert_string_equal(json_string_value(json_object_get(m, "state")), "complete");
	assert_int_equal(get_u64(device0(m), "events"), 100);
	json_decref(m);
	/* Another host's part of the session has no manifest here. */
	assert_int_equal(rp_session_set_export(dirfd, dir, "other", "json", written, &err), -ENOENT);
	close(dirfd);
	json_decref(written);
	json_decref(failed);
	json_decref(want);
	rp_session_free(s);
	ring_close(&r);
}

/* Generated ids that are taken get a suffix; a given one is refused. */
static void test_id_collision(void **state)
{
	(void)state;
	char logdir[96];
	snprintf(logdir, sizeof(logdir), "%s/ids", base);
	uint64_t t = ts_of(42);
	char id[32], want[48];
	rp_session_id_from_time((int64_t)t + WALL_OFFSET, id);
	struct rp_session *s[3];
	for (int i = 0; i < 3; i++) {
		s[i] = open_session(logdir, NULL, RP_SESSION_SNAPSHOT, t, t);
		if (i)
			snprintf(want, sizeof(want), "%s_%d", id, i);
		else
			snprintf(want, sizeof(want), "%s", id);
		assert_string_equal(rp_session_name(s[i]), want);
		char path[PATH_LEN];
		snprintf(path, sizeof(path), "%s/default/plugins/profile/%s", logdir, want);
		assert_string_equal(rp_session_path(s[i]), path);
	}
	for (int i = 0; i < 3; i++) {
		close_ok(s[i], t);
		rp_session_free(s[i]);
	}

	struct rp_session *mine = open_session(logdir, "mine", RP_SESSION_SNAPSHOT, t, t);
	struct rp_session_opts o = { .logdir = logdir, .run = "default", .id = "mine", .host = HOST,
				     .kind = RP_SESSION_SNAPSHOT, .start_ns = t, .end_ns = t,
				     .source = "test" };
	struct rp_session *dup = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_session_open(&o, &dup, &err), -EEXIST);
	assert_null(dup);
	assert_non_null(strstr(err.msg, "session 'mine' already exists in run 'default'"));
	assert_non_null(strstr(err.msg, "choose another name"));
	/* A session dropped while open is left failed, with the reason. */
	rp_session_free(mine);
	char path[PATH_LEN];
	snprintf(path, sizeof(path), "%s/default/plugins/profile/mine/" MANIFEST_FILE, logdir);
	json_t *m = json_load_file(path, 0, NULL);
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(m, "state")), "failed");
	assert_non_null(strstr(json_string_value(json_object_get(m, "error")),
			       "daemon stopped before the session was closed"));
	json_decref(m);
}

static bool exists(const char *dir, const char *name)
{
	char path[PATH_LEN];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return stat(path, &st) == 0;
}

static struct rp_session *open_as(const char *logdir, const char *host, struct rp_err *err)
{
	struct rp_session_opts o = { .logdir = logdir, .run = "job", .id = "shared", .host = host,
				     .kind = RP_SESSION_SNAPSHOT, .start_ns = ts_of(0),
				     .end_ns = ts_of(99), .source = "test" };
	struct rp_session *s = NULL;
	int rc = rp_session_open(&o, &s, err);
	assert_int_equal(rc < 0, s == NULL);
	return s;
}

/* Hosts share a session directory, one set of files each; a host joins
 * once.  The .open marker lasts while the session is written. */
static void test_hosts_share_a_session(void **state)
{
	(void)state;
	char logdir[96];
	snprintf(logdir, sizeof(logdir), "%s/shared", base);
	struct ring r;
	ring_open(&r, "sharedring", 8);
	feed(&r, 100);
	struct rp_err err = { 0 };
	struct rp_session *a = open_as(logdir, "node-b", &err);
	struct rp_session *b = open_as(logdir, "node-a", &err);
	assert_non_null(a);
	assert_non_null(b);
	const char *dir = rp_session_path(a);
	assert_string_equal(rp_session_path(b), dir);
	assert_true(exists(dir, "node-b.open") && exists(dir, "node-a.open"));
	/* Open on node-b: node-b cannot join again. */
	assert_null(open_as(logdir, "node-b", &err));
	assert_int_equal(err.code, -EEXIST);
	assert_non_null(strstr(err.msg, "with the files of host node-b: choose another name"));
	for (struct rp_session *s = a;; s = b) {
		struct rp_err e = { 0 };
		assert_int_equal(rp_session_add_ring(s, "host", r.rf, &e), 0);
		close_ok(s, ts_of(99));
		if (s == b)
			break;
	}
	assert_true(exists(dir, "node-a.manifest.json") && exists(dir, "node-b.manifest.json"));
	assert_true(exists(dir, "node-a.host.chunks") && exists(dir, "node-b.host.chunks"));
	assert_false(exists(dir, "node-a.open") || exists(dir, "node-b.open"));
	/* Closed on node-a: still taken. */
	assert_null(open_as(logdir, "node-a", &err));
	assert_int_equal(err.code, -EEXIST);
	assert_false(exists(dir, "node-a.open"));

	json_t *list = NULL;
	assert_int_equal(rp_session_manifests(dir, &list, &err), 0);
	assert_int_equal(json_array_size(list), 2);
	static const char *const hosts[] = { "node-a", "node-b" };
	for (size_t i = 0; i < 2; i++) {
		json_t *m = json_array_get(list, i);
		assert_string_equal(json_string_value(json_object_get(m, "host")), hosts[i]);
		assert_string_equal(json_string_value(json_object_get(m, "path")), dir);
		assert_int_equal(get_u64(device0(m), "events"), 100);
	}
	json_decref(list);
	rp_session_free(a);
	rp_session_free(b);
	ring_close(&r);
	char missing[PATH_LEN];
	snprintf(missing, sizeof(missing), "%s/nowhere", logdir);
	assert_int_equal(rp_session_manifests(missing, &list, &err), -ENOENT);
	assert_non_null(strstr(err.msg, missing));
}

/* A ring that cannot join fails the session, which says why on disk. */
static void test_ring_that_cannot_join(void **state)
{
	(void)state;
	struct ring r;
	ring_open(&r, "twice", 8);
	feed(&r, 100);
	struct rp_session *s = open_session(base, "twice", RP_SESSION_SNAPSHOT, ts_of(0), ts_of(99));
	add_ring(s, &r);
	struct rp_err err = { 0 };
	assert_int_equal(rp_session_add_ring(s, "host", r.rf, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "add each device once"));
	assert_int_equal(rp_session_state_of(s), RP_SESSION_FAILED);
	struct rp_err cerr = { 0 };
	assert_int_equal(rp_session_close(s, ts_of(99), &cerr), -EEXIST);
	assert_string_equal(cerr.msg, err.msg);
	json_t *m = load_manifest(s);
	assert_string_equal(json_string_value(json_object_get(m, "state")), "failed");
	assert_string_equal(json_string_value(json_object_get(m, "error")), err.msg);
	json_decref(m);
	rp_session_free(s);
	ring_close(&r);
}

static int open_error(const char *logdir, struct rp_err *err)
{
	struct rp_session_opts o = { .logdir = logdir, .run = "default", .host = HOST,
				     .kind = RP_SESSION_SNAPSHOT, .start_ns = 1, .end_ns = 2,
				     .source = "test" };
	struct rp_session *s = NULL;
	memset(err, 0, sizeof(*err));
	int rc = rp_session_open(&o, &s, err);
	assert_null(s);
	return rc;
}

/* Links planted in the log directory (group-writable in deployments) are
 * never followed: a run or session directory that is a link is refused,
 * and in a session joined by name a link at the manifest's, the marker's,
 * the chunks' or the old temporary names is replaced or refused, never
 * written through. */
static void test_planted_links(void **state)
{
	(void)state;
	char logdir[PATH_LEN], target[PATH_LEN], dir[PATH_LEN + 64], link[PATH_LEN + 128];
	assert_int_equal(scratch_linked_logdir(base, "links", logdir, target, PATH_LEN), 0);
	struct rp_session_opts o = { .logdir = logdir, .run = "linkrun", .id = "x", .host = HOST,
				     .kind = RP_SESSION_SNAPSHOT, .start_ns = 1, .end_ns = 2,
				     .source = "test" };
	struct rp_session *s = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_session_open(&o, &s, &err), -ELOOP);
	assert_non_null(strstr(err.msg, "linkrun is a symbolic link"));
	assert_non_null(strstr(err.msg, "remove it"));
	/* A session directory that is a link. */
	snprintf(dir, sizeof(dir), "%s/default/plugins/profile", logdir);
	s = open_session(logdir, "first", RP_SESSION_SNAPSHOT, 1, 2);
	rp_session_free(s);
	snprintf(link, sizeof(link), "%s/linked", dir);
	assert_int_equal(symlink(target, link), 0);
	o.run = "default";
	o.id = "linked";
	assert_int_equal(rp_session_open(&o, &s, &err), -ELOOP);
	assert_null(s);
	/* Inside a session joined by name: every name the daemon writes, and
	 * its old predictable temporary names, links to a file of its own. */
	snprintf(dir, sizeof(dir), "%s/default/plugins/profile/joined", logdir);
	assert_int_equal(mkdir(dir, 0750), 0);
	const char *names[] = { MANIFEST_FILE ".tmp", CHUNKS_FILE, "." MANIFEST_FILE ".tmp" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char t[PATH_LEN + 16];
		snprintf(t, sizeof(t), "%s/t%zu", target, i);
		FILE *f = fopen(t, "w");
		assert_non_null(f);
		fputs("precious", f);
		fclose(f);
		snprintf(link, sizeof(link), "%s/%s", dir, names[i]);
		assert_int_equal(symlink(t, link), 0);
	}
	struct ring r;
	ring_open(&r, "links", 64);
	feed(&r, 100);
	s = open_session(logdir, "joined", RP_SESSION_SNAPSHOT, ts_of(0), ts_of(r.next));
	/* The chunks file's name is taken by a link: refused, not followed. */
	assert_int_equal(rp_session_add_ring(s, "host", r.rf, &err), -EEXIST);
	/* The session failed with that; its manifest still lands safely. */
	assert_int_equal(rp_session_close(s, ts_of(r.next), &err), -EEXIST);
	rp_session_free(s);
	json_t *m;
	assert_int_equal(rp_session_manifests(dir, &m, &err), 0);
	assert_int_equal(json_array_size(m), 1);
	json_decref(m);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char t[PATH_LEN + 16], buf[16] = { 0 };
		snprintf(t, sizeof(t), "%s/t%zu", target, i);
		FILE *f = fopen(t, "r");
		assert_non_null(f);
		assert_int_equal(fread(buf, 1, sizeof(buf), f), 8);
		fclose(f);
		assert_string_equal(buf, "precious");
	}
	ring_close(&r);
}

/* A log directory that cannot be written names itself and the fix. */
static void test_unwritable_logdir(void **state)
{
	(void)state;
	char file[PATH_LEN], logdir[PATH_LEN + 8];
	snprintf(file, sizeof(file), "%s/plain-file", base);
	int fd = open(file, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	close(fd);
	snprintf(logdir, sizeof(logdir), "%s/x", file);
	struct rp_err err;
	assert_int_equal(open_error(logdir, &err), -ENOTDIR);
	assert_non_null(strstr(err.msg, logdir));
	assert_non_null(strstr(err.msg, "choose another --logdir"));

	char dir[PATH_LEN];
	snprintf(dir, sizeof(dir), "%s/locked", base);
	assert_int_equal(mkdir(dir, 0700), 0);
	if (geteuid() != 0) {
		assert_int_equal(chmod(dir, 0500), 0);
		assert_int_equal(open_error(dir, &err), -EACCES);
		assert_non_null(strstr(err.msg, "is not writable by uid"));
		assert_non_null(strstr(err.msg, dir));
	} else if (mount("tmpfs", dir, "tmpfs", MS_RDONLY, "size=64k") == 0) {
		/* Root writes through permissions: use a read-only mount. */
		assert_int_equal(open_error(dir, &err), -EROFS);
		assert_non_null(strstr(err.msg, "read-only"));
		assert_non_null(strstr(err.msg, dir));
		umount2(dir, MNT_DETACH);
	}
}

/* A full log directory fails the session with the fix, and the ring
 * keeps its data. */
static void test_full_disk(void **state)
{
	(void)state;
	char dir[PATH_LEN];
	snprintf(dir, sizeof(dir), "%s/tiny", base);
	assert_int_equal(mkdir(dir, 0700), 0);
	if (geteuid() != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=256k") < 0)
		skip();
	struct ring r;
	ring_open(&r, "full", 160);
	feed(&r, 120000);
	struct rp_ringfile_stats st;
	rp_ringfile_stats(r.rf, &st);
	assert_true(st.bytes_used > 300 << 10);
	assert_int_equal(st.written_chunks, st.chunks);

	struct rp_session *s = open_session(dir, "big", RP_SESSION_SNAPSHOT, ts_of(0), ts_of(r.next));
	add_ring(s, &r);
	struct rp_err err = { 0 };
	assert_int_equal(rp_session_close(s, ts_of(r.next), &err), -ENOSPC);
	assert_int_equal(rp_session_state_of(s), RP_SESSION_FAILED);
	assert_non_null(strstr(err.msg, "log directory full while writing"));
	assert_non_null(strstr(err.msg, CHUNKS_FILE));
	assert_non_null(strstr(err.msg, "free space or lower retention"));
	json_t *o = rp_session_to_json(s);
	assert_string_equal(json_string_value(json_object_get(o, "state")), "failed");
	assert_string_equal(json_string_value(json_object_get(o, "error")), err.msg);
	json_decref(o);
	rp_session_free(s);
	umount2(dir, MNT_DETACH);

	/* Every chunk and event is still in the ring. */
	struct rp_ringfile_iter *it;
	assert_int_equal(rp_ringfile_iter_new(r.rf, 0, UINT64_MAX, &it), 0);
	const void *chunk;
	size_t len;
	struct rp_chunk_header h;
	uint64_t n = 0, events = 0;
	while (rp_ringfile_iter_next(it, &chunk, &len, &h) == 1) {
		n++;
		events += h.event_count;
	}
	rp_ringfile_iter_free(it);
	assert_int_equal(n, st.chunks);
	assert_int_equal(events, 120000);
	ring_close(&r);
}

/* The reader of a chunks file skips damage once and carries on. */
static void test_chunks_reader_resyncs(void **state)
{
	(void)state;
	struct ring r;
	ring_open(&r, "reader", 16);
	feed(&r, 6000);
	unsigned char *chunks[5];
	size_t lens[5];
	uint64_t seqs[5];
	struct rp_ringfile_iter *it;
	assert_int_equal(rp_ringfile_iter_new(r.rf, 0, UINT64_MAX, &it), 0);
	for (int i = 0; i < 5; i++) {
		const void *c;
		struct rp_chunk_header h;
		assert_int_equal(rp_ringfile_iter_next(it, &c, &lens[i], &h), 1);
		chunks[i] = malloc(lens[i]);
		memcpy(chunks[i], c, lens[i]);
		seqs[i] = h.seq;
	}
	rp_ringfile_iter_free(it);

	char file[PATH_LEN];
	snprintf(file, sizeof(file), "%s/damaged.chunks", base);
	FILE *f = fopen(file, "w");
	assert_non_null(f);
	fwrite(chunks[0], 1, lens[0], f);
	chunks[1][lens[1] / 2] ^= 0x40;                  /* bit flip */
	fwrite(chunks[1], 1, lens[1], f);
	fwrite(chunks[2], 1, lens[2], f);
	fwrite("RPCK\x01garbage", 1, 12, f);             /* a false magic */
	fwrite(chunks[3], 1, lens[3], f);
	fwrite(chunks[4], 1, lens[4] - 10, f);           /* cut short */
	fclose(f);

	struct rp_session_chunks *c;
	struct rp_err err = { 0 };
	assert_int_equal(rp_session_chunks_open(file, &c, &err), 0);
	const void *chunk;
	size_t len;
	struct rp_chunk_header h;
	int want[] = { 1, -EBADMSG, 1, -EBADMSG, 1, -EBADMSG, 0, 0 };
	uint64_t want_seq[] = { seqs[0], 0, seqs[2], 0, seqs[3] };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		int rc = rp_session_chunks_next(c, &chunk, &len, &h, &err);
		assert_int_equal(rc, want[i]);
		if (rc == 1) {
			assert_int_equal(h.seq, want_seq[i]);
			assert_memory_equal(chunk, chunks[i == 0 ? 0 : i == 2 ? 2 : 3], len);
		} else if (rc < 0) {
			assert_non_null(strstr(err.msg, file));
		}
	}
	assert_non_null(strstr(err.msg, "cut short"));
	rp_session_chunks_close(c);
	for (int i = 0; i < 5; i++)
		free(chunks[i]);
	ring_close(&r);
}

static int group_setup(void **state)
{
	(void)state;
	return scratch_make(base, sizeof(base), "session");
}

/* A session directory without manifests (one being written) reads back
 * as an empty list; nothing is sorted (qsort of NULL is undefined). */
static void test_manifests_of_empty_dir(void **state)
{
	(void)state;
	char dir[PATH_LEN];
	snprintf(dir, sizeof(dir), "%s/empty-session", base);
	assert_int_equal(mkdir(dir, 0750), 0);
	json_t *all = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_session_manifests(dir, &all, &err), 0);
	assert_true(json_is_array(all));
	assert_int_equal(json_array_size(all), 0);
	json_decref(all);
	assert_int_equal(rmdir(dir), 0);
}

static int group_teardown(void **state)
{
	(void)state;
	return scratch_remove(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_snapshot_past_window),
		cmocka_unit_test(test_window_beyond_horizon),
		cmocka_unit_test(test_manual_session_pumped),
		cmocka_unit_test(test_manual_session_pins_only),
		cmocka_unit_test(test_overlapping_sessions),
		cmocka_unit_test(test_sessions_share_reads),
		cmocka_unit_test(test_export_states),
		cmocka_unit_test(test_pump_races_writer),
		cmocka_unit_test(test_id_collision),
		cmocka_unit_test(test_hosts_share_a_session),
		cmocka_unit_test(test_ring_that_cannot_join),
		cmocka_unit_test(test_planted_links),
		cmocka_unit_test(test_unwritable_logdir),
		cmocka_unit_test(test_full_disk),
		cmocka_unit_test(test_chunks_reader_resyncs),
		cmocka_unit_test(test_manifests_of_empty_dir),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
