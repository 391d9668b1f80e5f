/* Host metrics against a fake /proc: utilisation from /proc/stat deltas,
 * memory from /proc/meminfo, the interval, and malformed files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostmetrics.h"
#include "scratch.h"

#define SEC 1000000000ull

static char root[64];

static void write_file(const char *name, const char *text)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", root, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	(void)state;
	return scratch_make(root, sizeof(root), "hostmetrics");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_remove(root);
}

struct got {
	int n;
	char name[16][32];
	double value[16];
	uint64_t ts[16];
};

static int collect(void *ctx, const struct rp_event *ev)
{
	struct got *g = ctx;
	assert_int_equal(ev->kind, RP_EV_COUNTER);
	assert_int_equal(ev->pid, 0);
	assert_int_equal(ev->tid, 0);
	assert_true(g->n < 16);
	snprintf(g->name[g->n], sizeof(g->name[0]), "%s", ev->name);
	g->value[g->n] = ev->u.counter.value;
	g->ts[g->n++] = ev->ts;
	return 0;
}

static double value_of(const struct got *g, const char *name)
{
	for (int i = 0; i < g->n; i++)
		if (!strcmp(g->name[i], name))
			return g->value[i];
	fail_msg("no counter %s", name);
	return 0;
}

static const char meminfo[] = "MemTotal:       16000000 kB\n"
			      "MemFree:         1000000 kB\n"
			      "MemAvailable:   12000000 kB\n"
			      "Buffers:          100000 kB\n";

static void utilisation_and_memory(void **state)
{
	(void)state;
	/* user nice system idle iowait irq softirq steal guest guest_nice */
	write_file("stat", "cpu  100 0 100 800 0 0 0 0 0 0\n"
			   "cpu0 50 0 50 400 0 0 0 0 0 0\n"
			   "cpu1 50 0 50 400 0 0 0 0 0 0\n"
			   "intr 12345 1 2 3\nctxt 999\n");
	write_file("meminfo", meminfo);
	struct rp_hostmetrics *h;
	struct rp_err err = { 0 };
	assert_int_equal(rp_hostmetrics_new(root, SEC, &h, &err), 0);

	struct got g = { 0 };
	assert_int_equal(rp_hostmetrics_due_ns(h), 0); /* due at once */
	/* The first reading: memory, and only the baseline of the CPUs. */
	assert_int_equal(rp_hostmetrics_poll(h, 10 * SEC, collect, &g, &err), 2);
	assert_int_equal(rp_hostmetrics_due_ns(h), 11 * SEC);
	assert_true(value_of(&g, "host_mem_used") == 4000000.0 * 1024);
	assert_true(value_of(&g, "host_mem_available") == 12000000.0 * 1024);
	assert_true(g.ts[0] == 10 * SEC);

	/* cpu0: 60 busy of 100 (20 user, 10 system, 10 irq, 10 softirq, 10
	 * steal; 30 idle, 10 iowait); cpu1: idle only; guest time is part
	 * of user and not counted twice. */
	write_file("stat", "cpu  120 0 110 930 10 10 10 10 50 0\n"
			   "cpu0 70 0 60 430 10 10 10 10 50 0\n"
			   "cpu1 50 0 50 500 0 0 0 0 0 0\n"
			   "cpu2 5 0 5 10 0 0 0 0 0 0\n");
	g.n = 0;
	assert_int_equal(rp_hostmetrics_poll(h, 10 * SEC + SEC / 2, collect, &g, &err), 0);
	assert_int_equal(g.n, 0);
	assert_int_equal(rp_hostmetrics_due_ns(h), 11 * SEC); /* not read: still due then */
	assert_int_equal(rp_hostmetrics_poll(h, 11 * SEC, collect, &g, &err), 5);
	assert_true(value_of(&g, "cpu_util/cpu0") == 60.0);
	assert_true(value_of(&g, "cpu_util/cpu1") == 0.0);
	assert_true(value_of(&g, "cpu_util") == 30.0); /* 60 of 200 */
	for (int i = 0; i < g.n; i++) /* cpu2 came online: baseline only */
		assert_string_not_equal(g.name[i], "cpu_util/cpu2");

	/* iowait may go backwards: that CPU skips a reading. */
	write_file("stat", "cpu  145 0 115 1040 5 10 10 10 50 0\n"
			   "cpu0 80 0 60 430 5 10 10 10 50 0\n"
			   "cpu1 50 0 50 600 0 0 0 0 0 0\n"
			   "cpu2 15 0 5 10 0 0 0 0 0 0\n");
	g.n = 0;
	assert_int_equal(rp_hostmetrics_poll(h, 12 * SEC, collect, &g, &err), 5);
	assert_true(value_of(&g, "cpu_util/cpu1") == 0.0);
	assert_true(value_of(&g, "cpu_util/cpu2") == 100.0);
	assert_true(value_of(&g, "cpu_util") == 100.0 * 30 / 135);
	for (int i = 0; i < g.n; i++)
		assert_string_not_equal(g.name[i], "cpu_util/cpu0");
	rp_hostmetrics_free(h);
}

static int refuse(void *ctx, const struct rp_event *ev)
{
	(void)ctx;
	(void)ev;
	return -EPIPE;
}

static void bad_files(void **state)
{
	(void)state;
	struct rp_hostmetrics *h;
	struct rp_err err = { 0 };
	assert_int_equal(rp_hostmetrics_new("/nonexistent-proc", SEC, &h, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent-proc/stat"));
	assert_non_null(strstr(err.msg, "is proc mounted?"));

	write_file("stat", "cpu  1 2 3 4\n");
	write_file("meminfo", "MemTotal: 100 kB\n");
	assert_int_equal(rp_hostmetrics_new(root, SEC, &h, &err), 0);
	struct got g = { 0 };
	assert_int_equal(rp_hostmetrics_poll(h, 0, collect, &g, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "lacks MemTotal or MemAvailable"));

	write_file("meminfo", meminfo);
	write_file("stat", "cpu  1 2 3 4\ncpu0 1 2\n");
	assert_int_equal(rp_hostmetrics_poll(h, 2 * SEC, collect, &g, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "line 2 is not a cpu line"));

	write_file("stat", "intr 1 2 3\n");
	assert_int_equal(rp_hostmetrics_poll(h, 4 * SEC, collect, &g, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "has no cpu lines"));

	write_file("stat", "cpu  1 2 3 4\n");
	assert_int_equal(rp_hostmetrics_poll(h, 6 * SEC, refuse, NULL, &err), -EPIPE);
	assert_non_null(strstr(err.msg, "handing on a counter failed"));
	rp_hostmetrics_free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(utilisation_and_memory, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_files, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
