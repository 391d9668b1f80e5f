/* daemon/gate: one snapshot per key within the cool-down, at most
 * max_per_hour in any sliding hour; refusals leave no trace. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "gate.h"

#define SEC 1000000000ull
#define MIN (60 * SEC)

static void cooldown_per_key(void **state)
{
	(void)state;
	struct rp_gate *g;
	assert_int_equal(rp_gate_new(10 * MIN, 100, &g, NULL), 0);
	uint64_t t0 = 5 * SEC;
	assert_int_equal(rp_gate_check(g, 1, t0), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 1, t0 + 1), RP_GATE_COOLDOWN);
	assert_int_equal(rp_gate_check(g, 2, t0 + 1), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 1, t0 + 10 * MIN - 1), RP_GATE_COOLDOWN);
	/* The cool-down runs from the snapshot, not from the repeats. */
	assert_int_equal(rp_gate_check(g, 1, t0 + 10 * MIN), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 1, t0 + 10 * MIN + 1), RP_GATE_COOLDOWN);
	assert_int_equal(rp_gate_check(g, 2, t0 + 10 * MIN + 1), RP_GATE_PASS);
	rp_gate_free(g);
}

static void sliding_hour(void **state)
{
	(void)state;
	struct rp_gate *g;
	assert_int_equal(rp_gate_new(SEC, 3, &g, NULL), 0);
	uint64_t t0 = 1000 * SEC;
	assert_int_equal(rp_gate_check(g, 1, t0), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 2, t0 + 10 * MIN), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 3, t0 + 20 * MIN), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 4, t0 + 59 * MIN), RP_GATE_RATE_LIMIT);
	/* The first snapshot leaves the hour: room for exactly one. */
	assert_int_equal(rp_gate_check(g, 4, t0 + 60 * MIN), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 5, t0 + 61 * MIN), RP_GATE_RATE_LIMIT);
	assert_int_equal(rp_gate_check(g, 5, t0 + 70 * MIN), RP_GATE_PASS);
	rp_gate_free(g);
}

/* A key refused by the rate limit took no snapshot, so it has no
 * cool-down either: it gets one as soon as the hour has room. */
static void refusals_not_recorded(void **state)
{
	(void)state;
	struct rp_gate *g;
	assert_int_equal(rp_gate_new(10 * MIN, 1, &g, NULL), 0);
	assert_int_equal(rp_gate_check(g, 1, 0), RP_GATE_PASS);
	assert_int_equal(rp_gate_check(g, 2, 1), RP_GATE_RATE_LIMIT);
	assert_int_equal(rp_gate_check(g, 2, 2), RP_GATE_RATE_LIMIT);
	assert_int_equal(rp_gate_check(g, 2, 60 * MIN), RP_GATE_PASS);
	/* Cooling down is checked first: a repeat is "cool-down", not "rate limit". */
	assert_int_equal(rp_gate_check(g, 2, 60 * MIN + 1), RP_GATE_COOLDOWN);
	rp_gate_free(g);
}

/* Many keys: the table of cooling keys grows and shrinks as they expire. */
static void many_keys(void **state)
{
	(void)state;
	struct rp_gate *g;
	assert_int_equal(rp_gate_new(SEC, 3600, &g, NULL), 0);
	for (uint64_t k = 0; k < 1000; k++)
		assert_int_equal(rp_gate_check(g, k, k), RP_GATE_PASS);
	for (uint64_t k = 0; k < 1000; k++)
		assert_int_equal(rp_gate_check(g, k, 1000 + k), RP_GATE_COOLDOWN);
	assert_int_equal(rp_gate_check(g, 0, 2 * SEC), RP_GATE_PASS);
	rp_gate_free(g);
}

static void names_and_errors(void **state)
{
	(void)state;
	assert_string_equal(rp_gate_verdict_name(RP_GATE_COOLDOWN), "cool-down");
	assert_string_equal(rp_gate_verdict_name(RP_GATE_RATE_LIMIT), "rate limit");
	struct rp_gate *g = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_gate_new(SEC, 0, &g, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "max_per_hour"));
	assert_null(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(cooldown_per_key),      cmocka_unit_test(sliding_hour),
		cmocka_unit_test(refusals_not_recorded), cmocka_unit_test(many_keys),
		cmocka_unit_test(names_and_errors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
