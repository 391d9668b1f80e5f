/* daemon/rules: slow_range and counter_above rules fed synthetic events
 * (as the ingest thread's observer would see them), their requests, the
 * shared cool-down and rate limit, and the range histograms. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rules.h"

#define MS 1000000ull
#define SEC (1000 * MS)

/* Rules from configuration text, through the real loader and checks. */
static struct rp_rules *rules_from(const char *text)
{
	static struct rp_config c;
	struct rp_err err = { 0 };
	char path[] = "/tmp/test-rules-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	rp_config_defaults(&c);
	int rc = rp_config_load(&c, path, &err);
	unlink(path);
	if (rc || rp_config_check(&c, &err))
		fail_msg("%s", err.msg);
	struct rp_rules *r;
	if (rp_rules_new(c.rules, c.nrules, &r, &err))
		fail_msg("%s", err.msg);
	return r;
}

static void ev(struct rp_rules *r, uint8_t kind, uint64_t ts, uint32_t tid, const char *name)
{
	struct rp_event e = { .kind = kind, .ts = ts, .pid = 100, .tid = tid, .name = name };
	rp_rules_observe(r, &e);
}

/* One range on thread tid, [begin, begin + dur]. */
static void range(struct rp_rules *r, uint32_t tid, const char *name, uint64_t begin, uint64_t dur)
{
	ev(r, RP_EV_RANGE_BEGIN, begin, tid, name);
	ev(r, RP_EV_RANGE_END, begin + dur, tid, NULL);
}

static void counter(struct rp_rules *r, uint32_t pid, const char *name, uint64_t ts, double v)
{
	struct rp_event e = { .kind = RP_EV_COUNTER, .ts = ts, .pid = pid, .tid = pid, .name = name,
			      .u.counter.value = v };
	rp_rules_observe(r, &e);
}

/* The metrics hold each of the NULL-terminated lines, and none of the
 * lines of `absent` (each a prefix, NULL-terminated, may be NULL). */
static void expect_metrics(struct rp_rules *r, const char *const *lines, const char *const *absent)
{
	char *text = NULL;
	size_t len;
	FILE *f = open_memstream(&text, &len);
	rp_rules_write_metrics(r, f);
	fclose(f);
	for (; *lines; lines++) {
		char want[512];
		snprintf(want, sizeof(want), "\n%s\n", *lines);
		if (!strstr(text, want))
			fail_msg("no line %s in the metrics:\n%s", *lines, text);
	}
	for (; absent && *absent; absent++)
		if (strstr(text, *absent))
			fail_msg("%s in the metrics:\n%s", *absent, text);
	free(text);
}

static const char slow_rule[] = "[rule.slow_steps]\ntype = slow_range\nrange = train_step\n";

static void slow_range_fires(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from(slow_rule); /* defaults: factor 3, window 50 */
	uint64_t t = 10 * SEC;
	for (int i = 0; i < 50; i++, t += SEC)
		range(r, 7, "train_step", t, 100 * MS + (i % 3) * MS); /* median 101 ms */
	struct rp_rule_fire f;
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	range(r, 7, "train_step", t, 300 * MS); /* 2.97x: not slow enough */
	t += SEC;
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	range(r, 7, "train_step", t, 412 * MS);
	uint64_t fired = t + 412 * MS;
	/* Not before its window (60 s before, 5 s after) has ended. */
	assert_int_equal(rp_rules_take(r, fired + 5 * SEC - 1, &f), 0);
	assert_int_equal(rp_rules_take(r, fired + 5 * SEC, &f), 1);
	assert_string_equal(f.rule, "slow_steps");
	assert_string_equal(f.reason, "train_step took 412 ms, 4.1x its rolling median of 101 ms");
	assert_int_equal(f.fired_ns, fired);
	assert_int_equal(f.start_ns, fired - 60 * SEC);
	assert_int_equal(f.end_ns, fired + 5 * SEC);
	assert_string_equal(json_string_value(json_object_get(f.extra, "type")), "slow_range");
	assert_string_equal(json_string_value(json_object_get(f.extra, "range")), "train_step");
	assert_int_equal(json_integer_value(json_object_get(f.extra, "duration_ns")), 412 * MS);
	assert_int_equal(json_integer_value(json_object_get(f.extra, "median_ns")), 101 * MS);
	assert_int_equal(json_integer_value(json_object_get(f.extra, "tid")), 7);
	json_t *w = json_object_get(f.extra, "window");
	assert_int_equal(json_integer_value(json_object_get(w, "anchor_ns")), fired);
	assert_int_equal(json_integer_value(json_object_get(w, "after_ns")), 5 * SEC);
	json_decref(f.extra);
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	rp_rules_free(r);
}

/* Fewer than `window` completed ranges: no median yet, no firing. */
static void needs_full_window(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from("[rule.s]\ntype = slow_range\nrange = step\nwindow = 10\n");
	uint64_t t = SEC;
	for (int i = 0; i < 9; i++, t += SEC)
		range(r, 1, "step", t, 10 * MS);
	range(r, 1, "step", t, 900 * MS); /* the 10th: fills the window, judged by nothing */
	t += SEC;
	struct rp_rule_fire f;
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	range(r, 1, "step", t, 900 * MS); /* median of 9x10 ms and 900 ms: 10 ms */
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 1);
	json_decref(f.extra);
	rp_rules_free(r);
}

/* An even window's median is the mean of the middle two. */
static void even_median(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from("[rule.s]\ntype = slow_range\nrange = step\nwindow = 4\n"
					"cooldown = 1ns\n");
	uint64_t t = SEC, durs[] = { 40, 10, 30, 20 };
	for (int i = 0; i < 4; i++, t += SEC)
		range(r, 1, "step", t, durs[i] * MS); /* median 25 ms: fires above 75 ms */
	struct rp_rule_fire f;
	range(r, 1, "step", t, 75 * MS);
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	/* The window is now 10, 30, 20, 75: median still 25 ms. */
	range(r, 1, "step", t + SEC, 76 * MS);
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 1);
	assert_int_equal(json_integer_value(json_object_get(f.extra, "median_ns")), 25 * MS);
	json_decref(f.extra);
	rp_rules_free(r);
}

/* Ends close the innermost open range of their own thread. */
static void nesting_per_thread(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from("[rule.s]\ntype = slow_range\nrange = train_step\nwindow = 3\n");
	uint64_t t = SEC;
	for (int i = 0; i < 4; i++, t += SEC) {
		/* thread 1: train_step { forward {} } ; thread 2's ranges interleave */
		ev(r, RP_EV_RANGE_BEGIN, t, 1, "train_step");
		ev(r, RP_EV_RANGE_BEGIN, t + 1 * MS, 2, "train_step");
		ev(r, RP_EV_RANGE_BEGIN, t + 2 * MS, 1, "forward");
		ev(r, RP_EV_RANGE_END, t + 5 * MS, 2, NULL);   /* thread 2's step: 4 ms */
		ev(r, RP_EV_RANGE_END, t + 50 * MS, 1, NULL);  /* forward: 48 ms */
		ev(r, RP_EV_RANGE_END, t + 100 * MS, 1, NULL); /* thread 1's step: 100 ms */
	}
	/* An end with nothing open (its begin came before) is ignored. */
	ev(r, RP_EV_RANGE_END, t, 3, NULL);
	expect_metrics(r, (const char *[]){
		"ringprof_range_duration_seconds_count{name=\"train_step\"} 8",
		"ringprof_range_duration_seconds_sum{name=\"train_step\"} 0.416",
		"ringprof_range_duration_seconds_count{name=\"forward\"} 4",
		"ringprof_range_duration_seconds_bucket{name=\"forward\",le=\"0.025\"} 0",
		"ringprof_range_duration_seconds_bucket{name=\"forward\",le=\"0.05\"} 4",
		"ringprof_range_duration_seconds_bucket{name=\"train_step\",le=\"0.005\"} 4",
		"ringprof_range_duration_seconds_bucket{name=\"train_step\",le=\"+Inf\"} 8", NULL }, NULL);
	/* Steps of 4 ms (thread 2) and 100 ms (thread 1) alternate: three
	 * 100 ms steps meet a median of 4 ms; the first fires, the cool-down
	 * holds the other two. */
	struct rp_rule_fire f;
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 1);
	json_decref(f.extra);
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	assert_int_equal(rp_rules_skipped(r, RP_GATE_COOLDOWN), 2);
	rp_rules_free(r);
}

static void cooldown_and_rate_limit(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from("[rule.s]\ntype = slow_range\nrange = step\nwindow = 1\n"
					"cooldown = 10s\nmax_per_hour = 2\nbefore = 1s\nafter = 1s\n");
	uint64_t t = 100 * SEC;
	range(r, 1, "step", t, 10 * MS);
	int fired = 0;
	/* A slow step every 4 s; in between a fast one resets the median. */
	for (int i = 0; i < 10; i++) {
		t += 4 * SEC;
		range(r, 1, "step", t, 100 * MS);
		range(r, 1, "step", t + SEC, 10 * MS);
		struct rp_rule_fire f;
		while (rp_rules_take(r, UINT64_MAX, &f)) {
			fired++;
			json_decref(f.extra);
		}
	}
	/* 104 s fires; 108, 112 cool down; 116 fires; 120, 124 cool down;
	 * 128 .. 140: the hour is full (refusals start no cool-down). */
	assert_int_equal(fired, 2);
	assert_int_equal(rp_rules_skipped(r, RP_GATE_COOLDOWN), 4);
	assert_int_equal(rp_rules_skipped(r, RP_GATE_RATE_LIMIT), 4);
	rp_rules_free(r);
}

static void counter_above(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from("[rule.hot]\ntype = counter_above\ncounter = gpu_temp\n"
					"threshold = 90\nfor = 10s\ncooldown = 1s\n");
	struct rp_rule_fire f;
	uint64_t t = 1000 * SEC;
	counter(r, 1, "gpu_temp", t, 95);
	counter(r, 1, "gpu_temp", t + 5 * SEC, 95);
	counter(r, 1, "gpu_temp", t + 6 * SEC, 90); /* not above: starts over */
	for (int s = 7; s < 17; s++)
		counter(r, 1, "gpu_temp", t + s * SEC, 91);
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	/* Another process's counter of the same name has its own state. */
	counter(r, 2, "gpu_temp", t + 17 * SEC, 20);
	counter(r, 1, "other", t + 17 * SEC, 1000);
	counter(r, 1, "gpu_temp", t + 17 * SEC, 93.5); /* above since 7 s: 10 s */
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 1);
	assert_string_equal(f.reason, "gpu_temp has been above 90 for 10s (now 93.5)");
	assert_int_equal(f.fired_ns, t + 17 * SEC);
	assert_int_equal(json_integer_value(json_object_get(f.extra, "above_since_ns")), t + 7 * SEC);
	assert_int_equal(json_integer_value(json_object_get(f.extra, "pid")), 1);
	json_decref(f.extra);
	/* Still above: the same excursion fires once. */
	counter(r, 1, "gpu_temp", t + 40 * SEC, 99);
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 0);
	counter(r, 1, "gpu_temp", t + 41 * SEC, 50);
	counter(r, 1, "gpu_temp", t + 42 * SEC, 99);
	counter(r, 1, "gpu_temp", t + 52 * SEC, 99);
	assert_int_equal(rp_rules_take(r, UINT64_MAX, &f), 1);
	json_decref(f.extra);
	rp_rules_free(r);
}

/* The histograms keep the first 64 names (rule ranges among them
 * whatever comes first); the rest count under "_other_".  Label values
 * are escaped and valid UTF-8. */
static void bounded_names(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from("[rule.s]\ntype = slow_range\nrange = late_rule_range\n");
	char name[32];
	for (int i = 0; i < 70; i++) {
		snprintf(name, sizeof(name), "n%d", i);
		range(r, 1, name, SEC, MS);
	}
	range(r, 1, "late_rule_range", SEC, MS);
	range(r, 1, "q\"uote\\d\n\xff\xc3\xa9", SEC, MS);
	expect_metrics(r, (const char *[]){
		"ringprof_range_duration_seconds_count{name=\"n0\"} 1",
		"ringprof_range_duration_seconds_count{name=\"n62\"} 1",
		"ringprof_range_duration_seconds_count{name=\"late_rule_range\"} 1",
		"ringprof_range_duration_seconds_count{name=\"_other_\"} 8", NULL },
		(const char *[]){ "{name=\"n63\"", NULL });
	rp_rules_free(r);

	r = rules_from("");
	range(r, 1, "q\"uote\\d\n\xff\xc3\xa9", SEC, MS);
	expect_metrics(r, (const char *[]){
		"ringprof_range_duration_seconds_count{name=\"q\\\"uote\\\\d\\n?\xc3\xa9\"} 1", NULL }, NULL);
	rp_rules_free(r);
}

/* Deep nesting beyond what is timed still pairs begins and ends. */
static void deep_nesting(void **state)
{
	(void)state;
	struct rp_rules *r = rules_from("");
	for (int i = 0; i < 100; i++)
		ev(r, RP_EV_RANGE_BEGIN, SEC + (uint64_t)i, 1, i == 0 ? "outer" : "inner");
	for (int i = 0; i < 100; i++)
		ev(r, RP_EV_RANGE_END, 2 * SEC + (uint64_t)i, 1, NULL);
	expect_metrics(r, (const char *[]){ "ringprof_range_duration_seconds_count{name=\"outer\"} 1",
					    "ringprof_range_duration_seconds_count{name=\"inner\"} 63", NULL },
		       NULL);
	rp_rules_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(slow_range_fires),   cmocka_unit_test(needs_full_window),
		cmocka_unit_test(even_median),        cmocka_unit_test(nesting_per_thread),
		cmocka_unit_test(cooldown_and_rate_limit), cmocka_unit_test(counter_above),
		cmocka_unit_test(bounded_names),      cmocka_unit_test(deep_nesting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
