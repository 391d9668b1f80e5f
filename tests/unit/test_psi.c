/* PSI: the parser on the fixture files of tests/unit/psi (real files
 * from Linux 5.13+ and before, and malformed ones), and the collector
 * against a fake proc: disabled with the reason where there is no
 * pressure directory, else counters in its producer ring. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "collector.h"
#include "psi.h"

extern const struct rp_collector rp_psi_collector;

static const char *fixtures;

static int read_fixture(const char *name, struct rp_psi *v, struct rp_err *err)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", fixtures, name);
	return rp_psi_read(path, v, err);
}

static void test_real_files(void **state)
{
	(void)state;
	struct rp_psi v;
	struct rp_err err = { 0 };
	assert_int_equal(read_fixture("cpu", &v, &err), 0);
	assert_true(v.some.present && v.full.present);
	assert_float_equal(v.some.avg10, 62.85, 1e-9);
	assert_int_equal(v.some.total_us, 2498643054ull);
	assert_int_equal(v.full.total_us, 0);

	assert_int_equal(read_fixture("cpu_before_5_13", &v, &err), 0);
	assert_true(v.some.present && !v.full.present);
	assert_int_equal(v.some.total_us, 981);

	assert_int_equal(read_fixture("io", &v, &err), 0);
	assert_float_equal(v.full.avg10, 0.31, 1e-9);
	assert_int_equal(v.full.total_us, 147018031ull);

	/* No final newline; the largest total; 100 percent. */
	assert_int_equal(read_fixture("memory_no_newline", &v, &err), 0);
	assert_float_equal(v.some.avg10, 100.0, 1e-9);
	assert_int_equal(v.some.total_us, UINT64_MAX);
	assert_true(v.full.present);
}

static void test_malformed_files(void **state)
{
	(void)state;
	static const struct { const char *file, *msg; } cases[] = {
		{ "bad_no_some", "no \"some\" line" },
		{ "bad_empty", "no \"some\" line" },
		{ "bad_negative_total", "line 1 is not" },
		{ "bad_avg_over_100", "line 1: avg10=101 is not a percentage" },
		{ "bad_nan", "is not a percentage" },
		{ "bad_missing_field", "line 1 is not" },
		{ "bad_trailing", "line 1 is not" },
		{ "bad_kind", "line 1: 'most' is neither some nor full" },
		{ "bad_twice", "line 2: a second 'some' line" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rp_psi v;
		struct rp_err err = { 0 };
		assert_int_equal(read_fixture(cases[i].file, &v, &err), -EBADMSG);
		if (!strstr(err.msg, cases[i].msg) || !strstr(err.msg, cases[i].file))
			fail_msg("%s: '%s' lacks '%s' or the file name", cases[i].file, err.msg,
				 cases[i].msg);
	}
	struct rp_psi v;
	struct rp_err err = { 0 };
	assert_int_equal(read_fixture("absent", &v, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "cannot read"));
	/* A line too long for a pressure file. */
	char text[700];
	memset(text, 'x', sizeof(text) - 1);
	text[sizeof(text) - 1] = 0;
	assert_int_equal(rp_psi_parse(text, &v, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "longer than"));
}

/* The daemon's side of rp_collector_env.producer_ring: a ring this test
 * drains, as the ingest thread would. */
static struct rp_shmring *drained;

static int producer_ring(void *ctx, const char *device, size_t size, struct rp_shmring **out,
			 struct rp_err *err)
{
	(void)ctx;
	assert_string_equal(device, "host");
	int rc = rp_shmring_create(size, 0, 0, RP_SHM_CLOCK_MONOTONIC, &drained, err);
	return rc < 0 ? rc : rp_shmring_map(rp_shmring_fd(drained), out, err);
}

struct seen {
	unsigned counters;
	bool cpu_full, io_stall;
	double io_stall_us;
};

static int take(void *ctx, const struct rp_shmring *r, const struct rp_rec *rec)
{
	struct seen *s = ctx;
	struct rp_event ev;
	char name[RP_NAME_MAX + 1];
	assert_int_equal(rp_rec_to_event(r, rec, &ev, name), 0);
	assert_int_equal(ev.kind, RP_EV_COUNTER);
	assert_int_equal(ev.pid, 0);
	s->counters++;
	s->cpu_full |= !strcmp(ev.name, "psi_avg10/cpu_full");
	if (!strcmp(ev.name, "psi_stall_us/io_full")) {
		s->io_stall = true;
		s->io_stall_us = ev.u.counter.value;
	}
	return 0;
}

static void copy_fixture(const char *from, const char *dir, const char *to)
{
	char src[512], dst[512], buf[512];
	snprintf(src, sizeof(src), "%s/%s", fixtures, from);
	snprintf(dst, sizeof(dst), "%s/pressure/%s", dir, to);
	FILE *in = fopen(src, "r"), *out = fopen(dst, "w");
	assert_non_null(in);
	assert_non_null(out);
	size_t n = fread(buf, 1, sizeof(buf), in);
	assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	assert_int_equal(fclose(out), 0);
}

static void test_collector(void **state)
{
	(void)state;
	char dir[] = "/tmp/rp-psi-XXXXXX";
	assert_non_null(mkdtemp(dir));
	struct rp_config cfg = { .psi_enabled = true, .psi_interval_ns = 10000000 };
	struct rp_collector_env env = { .cfg = &cfg, .proc_root = dir,
					 .producer_ring = producer_ring };
	void *psi = NULL;
	struct rp_err why = { 0 };

	assert_null(rp_psi_collector.off(&cfg));
	assert_int_equal(rp_psi_collector.start(&env, &psi, &why), -ENOENT);
	assert_non_null(strstr(why.msg, "/pressure/cpu"));
	assert_non_null(strstr(why.msg, "CONFIG_PSI=y"));
	assert_non_null(strstr(why.msg, "[psi] enabled = false"));
	cfg.psi_enabled = false;
	assert_string_equal(rp_psi_collector.off(&cfg), "[psi] enabled = false");
	cfg.psi_enabled = true;

	char path[512];
	snprintf(path, sizeof(path), "%s/pressure", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	copy_fixture("cpu", dir, "cpu");
	copy_fixture("memory_no_newline", dir, "memory");
	copy_fixture("bad_trailing", dir, "io");
	/* A malformed file disables it at start, naming the file. */
	assert_int_equal(rp_psi_collector.start(&env, &psi, &why), -EBADMSG);
	assert_non_null(strstr(why.msg, "/pressure/io"));

	copy_fixture("io", dir, "io");
	assert_int_equal(rp_psi_collector.start(&env, &psi, &why), 0);
	/* 3 files, some and full, avg10 and the stall time: 12 a reading. */
	struct seen seen = { 0 };
	for (int i = 0; i < 1000 && seen.counters < 24; i++) {
		assert_true(rp_shmring_drain(drained, take, &seen, 0, NULL) >= 0);
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	}
	struct rp_collector_stats st = { 0 };
	rp_psi_collector.stats(psi, &st);
	rp_psi_collector.stop(psi);
	(void)rp_shmring_drain(drained, take, &seen, 0, NULL);
	rp_shmring_close(drained);
	assert_true(seen.counters >= 24);
	assert_int_equal(seen.counters % 12, 0);
	assert_true(st.events >= 24 && st.lost == 0);
	assert_true(seen.cpu_full && seen.io_stall);
	assert_float_equal(seen.io_stall_us, 147018031.0, 0.5);

	const char *files[] = { "cpu", "memory", "io" };
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/pressure/%s", dir, files[i]);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/pressure", dir);
	rmdir(path);
	rmdir(dir);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
		return 2;
	}
	fixtures = argv[1];
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_files),
		cmocka_unit_test(test_malformed_files),
		cmocka_unit_test(test_collector),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
