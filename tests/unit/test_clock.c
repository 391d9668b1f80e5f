/* The host clock and TSC calibration: conversion arithmetic, calibration
 * against CLOCK_MONOTONIC, and refreshes that keep conversions monotonic
 * and steer out rate errors.  The TSC tests skip where the TSC is not
 * usable (no invariant TSC, or another clocksource). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <unistd.h>

#include "clock.h"

/* Tolerance of a conversion against CLOCK_MONOTONIC, in ns. */
#define TOLERANCE_NS 5000

/* Converted TSC minus CLOCK_MONOTONIC now, from the tightest of a few
 * readings so that a preempted reading does not count. */
static int64_t conversion_error(const struct rp_tsc_calib *c)
{
	uint64_t best = UINT64_MAX;
	int64_t err = 0;
	for (int i = 0; i < 50; i++) {
		uint64_t t0 = rp_rdtsc();
		uint64_t n = rp_clock_now_ns();
		uint64_t t1 = rp_rdtsc();
		if (t1 - t0 < best) {
			best = t1 - t0;
			err = (int64_t)(rp_tsc_to_ns(c, t0 + (t1 - t0) / 2) - n);
		}
	}
	return err;
}

static void calibrate_or_skip(struct rp_tsc_calib *c, unsigned ms)
{
	if (!rp_tsc_usable())
		skip();
	assert_int_equal(rp_tsc_calibrate(c, ms), 0);
}

static void test_conversion_arithmetic(void **state)
{
	(void)state;
	/* 0.5 ns per tick. */
	struct rp_tsc_calib c = { .anchor_tsc = 1000, .anchor_ns = 5000, .mult = 1ull << 31 };
	assert_int_equal(rp_tsc_to_ns(&c, 1000), 5000);
	assert_int_equal(rp_tsc_to_ns(&c, 3000), 6000);
	assert_int_equal(rp_tsc_to_ns(&c, 0), 4500);
	c.anchor_ns = 100; /* before the epoch clamps to 0 */
	assert_int_equal(rp_tsc_to_ns(&c, 0), 0);
	/* Large spans do not overflow: 2^40 ticks at 0.5 ns. */
	assert_int_equal(rp_tsc_to_ns(&c, 1000 + (1ull << 40)), 100 + (1ull << 39));
	/* 1/3 ns per tick rounds down, and stays monotonic tick by tick. */
	c = (struct rp_tsc_calib){ .anchor_tsc = 0, .anchor_ns = 0, .mult = (1ull << 32) / 3 };
	uint64_t last = 0;
	for (uint64_t t = 0; t < 100000; t++) {
		uint64_t ns = rp_tsc_to_ns(&c, t);
		assert_true(ns >= last);
		last = ns;
	}
	assert_true(last >= 33332 && last <= 33333);
}

static void test_wall_offset(void **state)
{
	(void)state;
	struct timespec rt;
	clock_gettime(CLOCK_REALTIME, &rt);
	int64_t wall = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec;
	int64_t expect = wall - (int64_t)rp_clock_now_ns();
	int64_t off = rp_clock_wall_offset_ns();
	assert_true(llabs(off - expect) < 1000000);
}

static void test_calibration_accuracy(void **state)
{
	(void)state;
	struct rp_tsc_calib c;
	calibrate_or_skip(&c, 200);
	/* A TSC is GHz-scale: between 0.1 and 10 ns per tick. */
	assert_true(c.mult > (1ull << 32) / 10 && c.mult < (10ull << 32));
	int64_t e0 = conversion_error(&c);
	usleep(200000);
	int64_t e1 = conversion_error(&c);
	print_message("calibration error: %lld ns now, %lld ns 200 ms later\n",
		      (long long)e0, (long long)e1);
	assert_true(llabs(e0) < TOLERANCE_NS);
	assert_true(llabs(e1) < TOLERANCE_NS);
}

static void test_refresh_monotonic(void **state)
{
	(void)state;
	struct rp_tsc_calib c;
	calibrate_or_skip(&c, 100);
	uint64_t last = 0, start = rp_clock_now_ns();
	unsigned refreshes = 0;
	while (rp_clock_now_ns() - start < 400000000u) {
		for (int i = 0; i < 1000; i++) {
			uint64_t ns = rp_tsc_to_ns(&c, rp_rdtsc());
			assert_true(ns >= last);
			last = ns;
		}
		/* A refresh re-anchors without moving converted time. */
		uint64_t t = rp_rdtsc();
		uint64_t before = rp_tsc_to_ns(&c, t);
		rp_tsc_refresh(&c);
		refreshes++;
		uint64_t after = rp_tsc_to_ns(&c, t);
		assert_true(llabs((int64_t)(after - before)) < 1000);
		usleep(1000);
	}
	assert_true(refreshes > 50);
	assert_true(llabs(conversion_error(&c)) < TOLERANCE_NS);
}

static void test_refresh_steers(void **state)
{
	(void)state;
	struct rp_tsc_calib c;
	calibrate_or_skip(&c, 200);
	/* Make the rate 100 ppm fast, as a drifting clock would. */
	c.mult += c.mult / 10000;
	usleep(150000);
	int64_t off = conversion_error(&c);
	/* Two refreshes over 150 ms spans: the first measures the error and
	 * aims to cancel it, the second takes the corrected rate. */
	for (int i = 0; i < 3; i++) {
		rp_tsc_refresh(&c);
		usleep(150000);
	}
	rp_tsc_refresh(&c);
	int64_t after = conversion_error(&c);
	print_message("steering: %lld ns off before refreshes, %lld ns after\n",
		      (long long)off, (long long)after);
	assert_true(off > 10000);
	assert_true(llabs(after) < TOLERANCE_NS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conversion_arithmetic),
		cmocka_unit_test(test_wall_offset),
		cmocka_unit_test(test_calibration_accuracy),
		cmocka_unit_test(test_refresh_monotonic),
		cmocka_unit_test(test_refresh_steers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
