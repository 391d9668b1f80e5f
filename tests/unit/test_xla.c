/* The XLA collector's lower layers: the XSpace decoder on hand-built
 * XSpaces (packed with protobuf-c from storage/proto/xplane.proto, the
 * upstream field numbers) and on malformed and hostile ones, and the gRPC
 * response framing fed in every split. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grpc.h"
#include "xplane.pb-c.h"
#include "xspace.h"

typedef Tensorflow__Profiler__XSpace XSpace;
typedef Tensorflow__Profiler__XPlane XPlane;
typedef Tensorflow__Profiler__XLine XLine;
typedef Tensorflow__Profiler__XEvent XEvent;
typedef Tensorflow__Profiler__XStat XStat;

#define APPEND(arr, n, item)                                              \
	do {                                                              \
		(arr) = realloc((arr), ((n) + 1) * sizeof(*(arr)));       \
		assert_non_null(arr);                                     \
		(arr)[(n)++] = (item);                                    \
	} while (0)

/* The session start of the hand-built spaces (CLOCK_REALTIME ns) and the
 * wall offset handed to the decoder: host times are their difference
 * plus line and event offsets. */
#define SESSION_START 1795717608000000000ll
#define WALL_OFFSET 1795710000000000000ll

static XStat *stat_new(int64_t md)
{
	XStat *s = malloc(sizeof(*s));
	assert_non_null(s);
	tensorflow__profiler__xstat__init(s);
	s->metadata_id = md;
	return s;
}

/* One constructor per scalar value type of XStat. */
#define STAT_CTOR(fn, type, field, which)                 \
	static XStat *fn(int64_t md, type v)              \
	{                                                 \
		XStat *s = stat_new(md);                  \
		s->value_case = which;                    \
		s->field = v;                             \
		return s;                                 \
	}
STAT_CTOR(stat_int, int64_t, int64_value, TENSORFLOW__PROFILER__XSTAT__VALUE_INT64_VALUE)
STAT_CTOR(stat_uint, uint64_t, uint64_value, TENSORFLOW__PROFILER__XSTAT__VALUE_UINT64_VALUE)
STAT_CTOR(stat_double, double, double_value, TENSORFLOW__PROFILER__XSTAT__VALUE_DOUBLE_VALUE)
STAT_CTOR(stat_ref, uint64_t, ref_value, TENSORFLOW__PROFILER__XSTAT__VALUE_REF_VALUE)

static XStat *stat_str(int64_t md, const char *v)
{
	XStat *s = stat_new(md);
	s->value_case = TENSORFLOW__PROFILER__XSTAT__VALUE_STR_VALUE;
	s->str_value = strdup(v);
	return s;
}

static XPlane *add_plane(XSpace *xs, const char *name)
{
	XPlane *p = malloc(sizeof(*p));
	assert_non_null(p);
	tensorflow__profiler__xplane__init(p);
	p->name = strdup(name);
	APPEND(xs->planes, xs->n_planes, p);
	return p;
}

static void add_stat_md(XPlane *p, int64_t id, const char *name)
{
	Tensorflow__Profiler__XPlane__StatMetadataEntry *e = malloc(sizeof(*e));
	Tensorflow__Profiler__XStatMetadata *m = malloc(sizeof(*m));
	assert_true(e && m);
	tensorflow__profiler__xplane__stat_metadata_entry__init(e);
	tensorflow__profiler__xstat_metadata__init(m);
	m->id = id;
	m->name = strdup(name);
	e->key = id;
	e->value = m;
	APPEND(p->stat_metadata, p->n_stat_metadata, e);
}

static Tensorflow__Profiler__XEventMetadata *add_event_md(XPlane *p, int64_t id, const char *name)
{
	Tensorflow__Profiler__XPlane__EventMetadataEntry *e = malloc(sizeof(*e));
	Tensorflow__Profiler__XEventMetadata *m = malloc(sizeof(*m));
	assert_true(e && m);
	tensorflow__profiler__xplane__event_metadata_entry__init(e);
	tensorflow__profiler__xevent_metadata__init(m);
	m->id = id;
	m->name = strdup(name);
	e->key = id;
	e->value = m;
	APPEND(p->event_metadata, p->n_event_metadata, e);
	return m;
}

static XLine *add_line(XPlane *p, int64_t id, const char *name, const char *display, int64_t ts)
{
	XLine *l = malloc(sizeof(*l));
	assert_non_null(l);
	tensorflow__profiler__xline__init(l);
	l->id = id;
	l->name = strdup(name);
	if (display)
		l->display_name = strdup(display);
	l->timestamp_ns = ts;
	APPEND(p->lines, p->n_lines, l);
	return l;
}

static XEvent *add_event(XLine *l, int64_t md, int64_t offset_ps, int64_t duration_ps)
{
	XEvent *e = malloc(sizeof(*e));
	assert_non_null(e);
	tensorflow__profiler__xevent__init(e);
	e->metadata_id = md;
	e->data_case = TENSORFLOW__PROFILER__XEVENT__DATA_OFFSET_PS;
	e->offset_ps = offset_ps;
	e->duration_ps = duration_ps;
	APPEND(l->events, l->n_events, e);
	return e;
}

/* The plane TSL keeps the session start in. */
static void add_task_env(XSpace *xs, int64_t start)
{
	XPlane *p = add_plane(xs, "Task Environment");
	add_stat_md(p, 7, "profile_start_time");
	APPEND(p->stats, p->n_stats, stat_uint(7, (uint64_t)start));
}

static uint8_t *pack(XSpace *xs, size_t *len)
{
	*len = tensorflow__profiler__xspace__get_packed_size(xs);
	uint8_t *buf = malloc(*len ? *len : 1);
	assert_non_null(buf);
	tensorflow__profiler__xspace__pack(xs, buf);
	tensorflow__profiler__xspace__free_unpacked(xs, NULL);
	return buf;
}

static XSpace *new_space(void)
{
	XSpace *xs = malloc(sizeof(*xs));
	assert_non_null(xs);
	tensorflow__profiler__xspace__init(xs);
	return xs;
}

/* What the callback saw, copied out (the decoder's strings die with it). */
struct seen {
	char plane[32], line[32], name[32], hlo_op[32], hlo_module[32];
	int64_t line_id;
	uint64_t start_ns, duration_ns;
	uint32_t has;
	int64_t program_id, step_num;
	double flops, bytes_accessed;
	size_t nstats;
	char stat0[32];
};

struct collect {
	struct seen ev[16];
	int n;
	int stop_after; /* return -ECANCELED after this many; 0: never */
};

static void copy_str(char *dst, const char *src, size_t len)
{
	len = len < 31 ? len : 31;
	memcpy(dst, src ? src : "", src ? len : 0);
	dst[src ? len : 0] = 0;
}

static int collect_event(const struct rp_xla_event *ev, void *arg)
{
	struct collect *c = arg;
	if (c->stop_after && c->n == c->stop_after)
		return -ECANCELED;
	if (c->n == 16)
		return 0;
	struct seen *s = &c->ev[c->n++];
	copy_str(s->plane, ev->plane, strlen(ev->plane));
	copy_str(s->line, ev->line_name, strlen(ev->line_name));
	copy_str(s->name, ev->name, strlen(ev->name));
	copy_str(s->hlo_op, ev->hlo_op, ev->hlo_op_len);
	copy_str(s->hlo_module, ev->hlo_module, ev->hlo_module_len);
	s->line_id = ev->line_id;
	s->start_ns = ev->start_ns;
	s->duration_ns = ev->duration_ns;
	s->has = ev->has;
	s->program_id = ev->program_id;
	s->step_num = ev->step_num;
	s->flops = ev->flops;
	s->bytes_accessed = ev->bytes_accessed;
	s->nstats = ev->nstats;
	if (ev->nstats)
		copy_str(s->stat0, ev->stats[0].name, strlen(ev->stats[0].name));
	return 0;
}

static int64_t decode(uint8_t *buf, size_t len, struct collect *c, struct rp_xspace_counts *counts,
		      struct rp_err *err)
{
	int64_t n = rp_xspace_decode(buf, len, WALL_OFFSET, collect_event, c, counts, err);
	free(buf);
	return n;
}

#define BIT(k) (1u << (k))

/* A device plane as XLA GPU/TPU runtimes write it: op events whose
 * hlo_op is a ref_value, module a string, costs in the metadata. */
static void device_ops_with_stats_and_host_times(void **state)
{
	(void)state;
	XSpace *xs = new_space();
	XPlane *p = add_plane(xs, "/device:TPU:0");
	add_stat_md(p, 1, "hlo_op");
	add_stat_md(p, 2, "hlo_module");
	add_stat_md(p, 3, "program_id");
	add_stat_md(p, 4, "flops");
	add_stat_md(p, 5, "bytes_accessed");
	add_stat_md(p, 6, "fusion.3");  /* the name a ref_value points at */
	add_stat_md(p, 8, "step_num");
	Tensorflow__Profiler__XEventMetadata *md = add_event_md(p, 1, "fusion.3");
	APPEND(md->stats, md->n_stats, stat_double(4, 2.5e9));
	APPEND(md->stats, md->n_stats, stat_uint(5, 4096));
	APPEND(md->stats, md->n_stats, stat_int(3, 99)); /* the event's own wins */
	add_event_md(p, 2, "train");
	XLine *l = add_line(p, 5, "XLA Ops", "XLA Ops (stream 0)", 1000);
	XEvent *e = add_event(l, 1, 2500000, 7000000); /* +2.5 us, 7 us */
	APPEND(e->stats, e->n_stats, stat_ref(1, 6));
	APPEND(e->stats, e->n_stats, stat_str(2, "jit_train_step"));
	APPEND(e->stats, e->n_stats, stat_int(3, 42));
	XLine *steps = add_line(p, 6, "Steps", NULL, 0);
	add_event(steps, 2, 0, 1000000);
	XEvent *step = add_event(steps, 2, 0, 1000000);
	APPEND(step->stats, step->n_stats, stat_int(8, 17));
	add_task_env(xs, SESSION_START);
	size_t len;
	uint8_t *buf = pack(xs, &len);
	struct collect c = {0};
	struct rp_xspace_counts counts;
	struct rp_err err = {0};
	assert_int_equal(decode(buf, len, &c, &counts, &err), 3);
	assert_int_equal(counts.planes, 2);
	assert_int_equal(counts.events, 3);
	struct seen *op = &c.ev[0];
	assert_string_equal(op->plane, "/device:TPU:0");
	assert_string_equal(op->line, "XLA Ops (stream 0)");
	assert_int_equal(op->line_id, 5);
	assert_string_equal(op->name, "fusion.3");
	assert_int_equal(op->start_ns, SESSION_START - WALL_OFFSET + 1000 + 2500);
	assert_int_equal(op->duration_ns, 7000);
	assert_int_equal(op->has, BIT(RP_XLA_HLO_OP) | BIT(RP_XLA_HLO_MODULE) |
			 BIT(RP_XLA_PROGRAM_ID) | BIT(RP_XLA_FLOPS) | BIT(RP_XLA_BYTES_ACCESSED));
	assert_string_equal(op->hlo_op, "fusion.3");
	assert_string_equal(op->hlo_module, "jit_train_step");
	assert_int_equal(op->program_id, 42);
	assert_true(op->flops == 2.5e9);
	assert_true(op->bytes_accessed == 4096);
	assert_int_equal(op->nstats, 6); /* 3 own, then 3 from the metadata */
	assert_string_equal(op->stat0, "hlo_op");
	/* The steps: line name without a display name; the second carries
	 * a step_num, the first none. */
	assert_string_equal(c.ev[1].line, "Steps");
	assert_string_equal(c.ev[1].name, "train");
	assert_int_equal(c.ev[1].has, 0);
	assert_int_equal(c.ev[2].has, BIT(RP_XLA_STEP_NUM));
	assert_int_equal(c.ev[2].step_num, 17);
}

/* Without a Task Environment plane (older servers), line times are
 * absolute CLOCK_REALTIME. */
static void absolute_times_without_task_environment(void **state)
{
	(void)state;
	XSpace *xs = new_space();
	XPlane *p = add_plane(xs, "/host:CPU");
	add_event_md(p, 3, "PjitFunction(train_step)");
	add_event(add_line(p, 77, "python3", NULL, SESSION_START), 3, 1000, 2000);
	size_t len;
	uint8_t *buf = pack(xs, &len);
	struct collect c = {0};
	assert_int_equal(decode(buf, len, &c, NULL, NULL), 1);
	assert_int_equal(c.ev[0].start_ns, SESSION_START - WALL_OFFSET + 1);
	assert_int_equal(c.ev[0].duration_ns, 2);
	assert_string_equal(c.ev[0].name, "PjitFunction(train_step)");
	assert_int_equal(c.ev[0].line_id, 77);
}

/* Ids that resolve to nothing give empty names, never a crash; sparse
 * ids (searched, not tabled) resolve; a duplicated id keeps its first. */
static void unknown_sparse_and_duplicate_ids(void **state)
{
	(void)state;
	XSpace *xs = new_space();
	XPlane *p = add_plane(xs, "/host:CPU");
	add_stat_md(p, 1ll << 40, "hlo_module");
	add_event_md(p, 1ll << 41, "sparse");
	add_event_md(p, 5, "first");
	add_event_md(p, 5, "second");
	XLine *l = add_line(p, 1, "t", NULL, 0);
	XEvent *e = add_event(l, 1ll << 41, 0, 0);
	APPEND(e->stats, e->n_stats, stat_str(1ll << 40, "m"));
	APPEND(e->stats, e->n_stats, stat_ref(12345, 999)); /* unknown id, dangling ref */
	add_event(l, 5, 0, 0);
	add_event(l, 424242, 0, 0);
	add_task_env(xs, SESSION_START);
	size_t len;
	uint8_t *buf = pack(xs, &len);
	struct collect c = {0};
	struct rp_err err = {0};
	assert_int_equal(decode(buf, len, &c, NULL, &err), 3);
	assert_string_equal(c.ev[0].name, "sparse");
	assert_string_equal(c.ev[0].hlo_module, "m");
	assert_int_equal(c.ev[0].nstats, 2);
	assert_string_equal(c.ev[1].name, "first");
	assert_string_equal(c.ev[2].name, "");
}

/* Aggregated events (num_occurrences), negative durations and times out
 * of range are counted as skipped, not delivered. */
static void untimed_and_out_of_range_events_are_skipped(void **state)
{
	(void)state;
	XSpace *xs = new_space();
	XPlane *p = add_plane(xs, "/host:CPU");
	add_event_md(p, 1, "op");
	XLine *l = add_line(p, 1, "t", NULL, 0);
	XEvent *agg = add_event(l, 1, 0, 5);
	agg->data_case = TENSORFLOW__PROFILER__XEVENT__DATA_NUM_OCCURRENCES;
	agg->num_occurrences = 3;
	add_event(l, 1, 0, -1);
	add_event(add_line(p, 2, "u", NULL, INT64_MAX), 1, INT64_MAX, 1);
	add_event(add_line(p, 3, "v", NULL, INT64_MIN), 1, 0, 1);
	add_event(l, 1, 1000, 1000);
	add_task_env(xs, SESSION_START);
	size_t len;
	uint8_t *buf = pack(xs, &len);
	struct collect c = {0};
	struct rp_xspace_counts counts;
	assert_int_equal(decode(buf, len, &c, &counts, NULL), 1);
	assert_int_equal(counts.skipped, 4);
}

/* The server's own errors are reported; fields the decoder does not know
 * (newer XLA versions) are skipped. */
static void server_errors_and_unknown_fields(void **state)
{
	(void)state;
	XSpace *xs = new_space();
	APPEND(xs->errors, xs->n_errors, strdup("No trace event was collected"));
	XPlane *p = add_plane(xs, "/host:CPU");
	add_event_md(p, 1, "op");
	add_event(add_line(p, 1, "t", NULL, SESSION_START), 1, 0, 0);
	size_t len;
	uint8_t *packed = pack(xs, &len);
	/* Field 99 (varint) and field 100 (length-delimited) at the top. */
	static const uint8_t unknown[] = {0x98, 0x06, 0x01, 0xa2, 0x06, 0x02, 'h', 'i'};
	uint8_t *buf = malloc(len + sizeof(unknown));
	assert_non_null(buf);
	memcpy(buf, unknown, sizeof(unknown));
	memcpy(buf + sizeof(unknown), packed, len);
	free(packed);
	struct collect c = {0};
	struct rp_xspace_counts counts;
	assert_int_equal(decode(buf, len + sizeof(unknown), &c, &counts, NULL), 1);
	assert_int_equal(counts.errors, 1);
	assert_string_equal(counts.first_error, "No trace event was collected");
}

static void callback_stops_the_decoding(void **state)
{
	(void)state;
	XSpace *xs = new_space();
	XPlane *p = add_plane(xs, "/host:CPU");
	add_event_md(p, 1, "op");
	XLine *l = add_line(p, 1, "t", NULL, SESSION_START);
	for (int i = 0; i < 5; i++)
		add_event(l, 1, i, 0);
	size_t len;
	uint8_t *buf = pack(xs, &len);
	struct collect c = {.stop_after = 2};
	assert_int_equal(decode(buf, len, &c, NULL, NULL), -ECANCELED);
	assert_int_equal(c.n, 2);
}

static void malformed_input_is_refused(void **state)
{
	(void)state;
	struct rp_err err = {0};
	struct collect c = {0};
	/* A plane (field 1) announcing 100 bytes, then 2. */
	static const uint8_t truncated[] = {0x0a, 0x64, 0x12, 0x00};
	assert_int_equal(rp_xspace_decode(truncated, sizeof(truncated), 0, collect_event, &c, NULL,
					  &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "not a serialized XSpace"));
	/* A wire type that does not exist (7). */
	static const uint8_t bad_wire[] = {0x0f, 0x00};
	assert_int_equal(rp_xspace_decode(bad_wire, sizeof(bad_wire), 0, collect_event, &c, NULL,
					  &err), -EBADMSG);
	/* Larger than the decoder takes: refused before reading. */
	assert_int_equal(rp_xspace_decode(truncated, RP_XSPACE_MAX_BYTES + 1, 0, collect_event, &c,
					  NULL, &err), -E2BIG);
	assert_non_null(strstr(err.msg, "shorter window"));
	/* Empty input: an empty XSpace, no events. */
	assert_int_equal(rp_xspace_decode(NULL, 0, 0, collect_event, &c, NULL, &err), 0);
	assert_int_equal(c.n, 0);
}

/* 2 bytes per empty event on the wire, tens of bytes unpacked: a space
 * of nothing but empty events exceeds the memory budget. */
static void amplification_is_refused(void **state)
{
	(void)state;
	enum { EVENTS = 1 << 19 }; /* lengths fit 3-byte varints */
	size_t line_len = 2 * (size_t)EVENTS;
	/* XSpace{planes: XPlane{lines: XLine{events: {} x EVENTS}}} */
	uint8_t *buf = malloc(line_len + 32);
	assert_non_null(buf);
	size_t o = 0;
	size_t plane_len = 1 + 3 + line_len;  /* tag, 3-byte varint, line */
	buf[o++] = 0x0a; /* XSpace.planes */
	buf[o++] = (uint8_t)(0x80 | (plane_len & 0x7f));
	buf[o++] = (uint8_t)(0x80 | ((plane_len >> 7) & 0x7f));
	buf[o++] = (uint8_t)(plane_len >> 14);
	buf[o++] = 0x1a; /* XPlane.lines */
	buf[o++] = (uint8_t)(0x80 | (line_len & 0x7f));
	buf[o++] = (uint8_t)(0x80 | ((line_len >> 7) & 0x7f));
	buf[o++] = (uint8_t)(line_len >> 14);
	for (int i = 0; i < EVENTS; i++) {
		buf[o++] = 0x22; /* XLine.events, empty */
		buf[o++] = 0x00;
	}
	struct collect c = {0};
	struct rp_err err = {0};
	assert_int_equal(rp_xspace_decode(buf, o, 0, collect_event, &c, NULL, &err), -ENOMEM);
	assert_non_null(strstr(err.msg, "hostile"));
	free(buf);
}

static const uint8_t framed_hello[] = {0, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'};

/* Every split of a framed message into two pieces gives the message. */
static void deframer_takes_any_split(void **state)
{
	(void)state;
	for (size_t cut = 0; cut <= sizeof(framed_hello); cut++) {
		struct rp_grpc_deframer d;
		rp_grpc_deframer_init(&d, 100);
		assert_int_equal(rp_grpc_deframe(&d, framed_hello, cut, NULL), 0);
		assert_int_equal(rp_grpc_deframe(&d, framed_hello + cut,
						 sizeof(framed_hello) - cut, NULL), 0);
		assert_int_equal(rp_grpc_deframe_end(&d, NULL), 0);
		assert_int_equal(d.have, 5);
		assert_memory_equal(d.msg, "hello", 5);
		rp_grpc_deframer_free(&d);
	}
	/* An empty message is a message. */
	struct rp_grpc_deframer d;
	rp_grpc_deframer_init(&d, 0);
	assert_int_equal(rp_grpc_deframe(&d, framed_hello, 4, NULL), 0);
	assert_int_equal(rp_grpc_deframe(&d, (const uint8_t[]){0}, 1, NULL), 0);
	assert_int_equal(rp_grpc_deframe_end(&d, NULL), 0);
	rp_grpc_deframer_free(&d);
}

static int deframe_all(const uint8_t *data, size_t len, size_t max, struct rp_err *err)
{
	struct rp_grpc_deframer d;
	rp_grpc_deframer_init(&d, max);
	int r = rp_grpc_deframe(&d, data, len, err);
	if (!r)
		r = rp_grpc_deframe_end(&d, err);
	rp_grpc_deframer_free(&d);
	return r;
}

static void deframer_refuses_bad_framing(void **state)
{
	(void)state;
	struct rp_err err = {0};
	/* Over the cap, judged by the prefix alone: 2 GB announced. */
	static const uint8_t huge[] = {0, 0x80, 0, 0, 0};
	assert_int_equal(deframe_all(huge, sizeof(huge), 1 << 20, &err), -EMSGSIZE);
	assert_non_null(strstr(err.msg, "2147483648"));
	assert_int_equal(deframe_all(framed_hello, sizeof(framed_hello), 4, &err), -EMSGSIZE);
	/* Compressed, which we never ask for. */
	static const uint8_t compressed[] = {1, 0, 0, 0, 1, 'x'};
	assert_int_equal(deframe_all(compressed, sizeof(compressed), 100, &err), -EBADMSG);
	/* Two messages on a unary call. */
	uint8_t two[2 * sizeof(framed_hello)];
	memcpy(two, framed_hello, sizeof(framed_hello));
	memcpy(two + sizeof(framed_hello), framed_hello, sizeof(framed_hello));
	assert_int_equal(deframe_all(two, sizeof(two), 100, &err), -EBADMSG);
	/* Cut short: inside the prefix, inside the body, nothing at all. */
	assert_int_equal(deframe_all(framed_hello, 3, 100, &err), -EBADMSG);
	assert_int_equal(deframe_all(framed_hello, 7, 100, &err), -ECONNRESET);
	assert_non_null(strstr(err.msg, "after 2 of the 5 bytes"));
	assert_int_equal(deframe_all(NULL, 0, 100, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "without a message"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(device_ops_with_stats_and_host_times),
		cmocka_unit_test(absolute_times_without_task_environment),
		cmocka_unit_test(unknown_sparse_and_duplicate_ids),
		cmocka_unit_test(untimed_and_out_of_range_events_are_skipped),
		cmocka_unit_test(server_errors_and_unknown_fields),
		cmocka_unit_test(callback_stops_the_decoding),
		cmocka_unit_test(malformed_input_is_refused),
		cmocka_unit_test(amplification_is_refused),
		cmocka_unit_test(deframer_takes_any_split),
		cmocka_unit_test(deframer_refuses_bad_framing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
