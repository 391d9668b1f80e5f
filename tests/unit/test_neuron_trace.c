/* The Neuron system-trace parser (collectors/neuron/systrace.h) on the
 * JSON a runtime hands out: the fields Neuron Profiler 2.0 names, the
 * shapes it may take, and input that is not such JSON. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "systrace.h"

#define MAX_EVENTS 8

struct got {
	size_t n;
	struct rp_event ev[MAX_EVENTS];
	char names[MAX_EVENTS][RP_NAME_MAX + 1];
};

static int keep(void *ctx, const struct rp_event *ev)
{
	struct got *g = ctx;
	assert_true(g->n < MAX_EVENTS);
	g->ev[g->n] = *ev;
	strcpy(g->names[g->n], ev->name);
	g->n++;
	return 0;
}

/* With offset: host ns = epoch ns + offset. */
static int parse_at(const char *json, int64_t offset, struct got *g, size_t *skipped,
		    struct rp_err *err)
{
	memset(g, 0, sizeof(*g));
	*skipped = 0;
	return rp_neuron_trace_parse(json, strlen(json), offset, keep, g, skipped, err);
}

static int parse(const char *json, struct got *g, size_t *skipped, struct rp_err *err)
{
	return parse_at(json, 0, g, skipped, err);
}

static void every_field_lands(void **state)
{
	(void)state;
	struct got g;
	size_t skipped;
	struct rp_err err = { 0 };
	assert_int_equal(parse("[{\"name\":\"nc_exec\",\"timestamp\":1764180000000000001,"
			       "\"duration\":2000000,\"group\":\"nrt-nc-003\",\"lnc_idx\":3,"
			       "\"instance_id\":7,\"process_id\":42,\"thread_id\":43},"
			       "{\"name\":\"dma_h2d\",\"timestamp\":\"1764180000000000002\","
			       "\"duration\":500,\"lnc_idx\":1,\"tensor_name\":\"input0\","
			       "\"size\":4096}]", &g, &skipped, &err), 2);
	assert_int_equal(skipped, 0);
	assert_string_equal(g.names[0], "nc_exec");
	assert_int_equal(g.ev[0].kind, RP_EV_GPU_ACTIVITY);
	assert_int_equal(g.ev[0].u.gpu.kind, RP_GPU_KERNEL);
	assert_true(g.ev[0].ts == 1764180000000000001ull);
	assert_true(g.ev[0].u.gpu.end == 1764180000002000001ull);
	assert_int_equal(g.ev[0].u.gpu.device, 3);
	assert_int_equal(g.ev[0].u.gpu.stream, 3);
	assert_int_equal(g.ev[0].u.gpu.correlation, 7);
	assert_int_equal(g.ev[0].pid, 42);
	assert_int_equal(g.ev[0].tid, 43);
	/* An epoch in a string stays exact; the core from lnc_idx. */
	assert_string_equal(g.names[1], "dma_h2d tensor=input0");
	assert_int_equal(g.ev[1].u.gpu.kind, RP_GPU_MEMCPY);
	assert_true(g.ev[1].ts == 1764180000000000002ull);
	assert_int_equal(g.ev[1].u.gpu.device, 1);
	assert_int_equal(g.ev[1].u.gpu.bytes, 4096);
}

static void object_with_events_and_skips(void **state)
{
	(void)state;
	struct got g;
	size_t skipped;
	struct rp_err err = { 0 };
	/* No name, no timestamp, a negative one, no core, not an object. */
	assert_int_equal(parse("{\"events\":[{\"timestamp\":1,\"group\":\"nrt-nc-0\"},"
			       "{\"name\":\"a\",\"group\":\"nrt-nc-0\"},"
			       "{\"name\":\"b\",\"timestamp\":-5,\"group\":\"nrt-nc-0\"},"
			       "{\"name\":\"c\",\"timestamp\":5,\"group\":\"nrt-nc-x\"},7,"
			       "{\"name\":\"d\",\"timestamp\":9,\"group\":\"nrt-nc-12\"}]}",
			       &g, &skipped, &err), 1);
	assert_int_equal(skipped, 5);
	assert_string_equal(g.names[0], "d");
	assert_int_equal(g.ev[0].u.gpu.device, 12);
	assert_true(g.ev[0].u.gpu.end == 9);
}

/* Times come into the host clock by the offset; those that cannot
 * (before its zero, past INT64_MAX, a duration that wraps) are skipped, as
 * are cores written with a sign or blanks. */
static void times_and_cores_that_do_not_fit_are_skipped(void **state)
{
	(void)state;
	struct got g;
	size_t skipped;
	struct rp_err err = { 0 };
	const int64_t boot = 1764180000000000000;
	assert_int_equal(parse_at("[{\"name\":\"max\",\"timestamp\":\"18446744073709551615\","
				  "\"lnc_idx\":0},"
				  "{\"name\":\"wraps\",\"timestamp\":\"9223372036854775807\","
				  "\"duration\":1,\"lnc_idx\":0},"
				  "{\"name\":\"long\",\"timestamp\":1764180000000000000,"
				  "\"duration\":\"18446744073709551615\",\"lnc_idx\":0},"
				  "{\"name\":\"before\",\"timestamp\":5,\"lnc_idx\":0},"
				  "{\"name\":\"neg\",\"timestamp\":1764180000000000001,"
				  "\"group\":\"nrt-nc--1\"},"
				  "{\"name\":\"blank\",\"timestamp\":1764180000000000001,"
				  "\"group\":\"nrt-nc- 3\"},"
				  "{\"name\":\"plus\",\"timestamp\":1764180000000000100,"
				  "\"duration\":50,\"group\":\"nrt-nc-+3\",\"lnc_idx\":2}]",
				  -boot, &g, &skipped, &err), 1);
	assert_int_equal(skipped, 6);
	assert_string_equal(g.names[0], "plus");
	assert_true(g.ev[0].ts == 100 && g.ev[0].u.gpu.end == 150);
	assert_int_equal(g.ev[0].u.gpu.device, 2);
	/* The far end of the clock still fits. */
	assert_int_equal(parse_at("[{\"name\":\"top\",\"timestamp\":\"9223372036854775806\","
				  "\"duration\":1,\"lnc_idx\":0}]", 0, &g, &skipped, &err), 1);
	assert_true(g.ev[0].u.gpu.end == INT64_MAX);
	assert_int_equal(parse_at("[{\"name\":\"late\",\"timestamp\":5,\"lnc_idx\":0}]",
				  INT64_MAX, &g, &skipped, &err), 0);
	assert_int_equal(skipped, 1);
}

static void not_a_trace_is_an_error(void **state)
{
	(void)state;
	struct got g;
	size_t skipped;
	static const char *const bad[] = { "", "[{\"name\":", "{\"events\":3}", "\"x\"",
					   "[1,2]}" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct rp_err err = { 0 };
		int rc = parse(bad[i], &g, &skipped, &err);
		assert_int_equal(rc, -EINVAL);
		assert_non_null(strstr(err.msg, "Neuron system trace"));
		assert_int_equal(g.n, 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_field_lands),
		cmocka_unit_test(object_with_events_and_skips),
		cmocka_unit_test(times_and_cores_that_do_not_fit_are_skipped),
		cmocka_unit_test(not_a_trace_is_an_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
