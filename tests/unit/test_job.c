/* Looking at one job (daemon/job.c): a cgroup tree read into a pid set,
 * against fake cgroup trees, and the cgroup2 mount found in mountinfo.
 * What a request may name is hostile: "..", links, garbage in
 * cgroup.procs, a tree too deep. */
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
#include <unistd.h>

#include "job.h"
#include "scratch.h"

static char base[64];

static void put(const char *rel, const char *text)
{
	char path[256];
	scratch_pathf(path, sizeof(path), "%s/%s", base, rel);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void dir(const char *rel)
{
	char path[256];
	scratch_pathf(path, sizeof(path), "%s/%s", base, rel);
	assert_int_equal(mkdir(path, 0755), 0);
}

static int setup(void **state)
{
	(void)state;
	return scratch_make(base, sizeof(base), "job");
}

static int teardown(void **state)
{
	(void)state;
	return scratch_remove(base);
}

static void test_pidset_sorted_unique(void **state)
{
	(void)state;
	struct rp_pidset s = { 0 };
	uint32_t in[] = { 40, 7, 40, 1, 9000, 7, 2 };
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
		assert_int_equal(rp_pidset_add(&s, in[i], NULL), 0);
	uint32_t want[] = { 1, 2, 7, 40, 9000 };
	assert_int_equal(s.n, 5);
	assert_memory_equal(s.pids, want, sizeof(want));
	rp_pidset_free(&s);
	assert_null(s.pids);
}

static void test_pidset_bounded(void **state)
{
	(void)state;
	struct rp_pidset s = { 0 };
	struct rp_err err = { 0 };
	for (uint32_t p = 1; p <= RP_JOB_PIDS_MAX; p++)
		assert_int_equal(rp_pidset_add(&s, p, &err), 0);
	assert_int_equal(rp_pidset_add(&s, 5, &err), 0); /* already in */
	assert_int_equal(rp_pidset_add(&s, RP_JOB_PIDS_MAX + 1, &err), -E2BIG);
	assert_non_null(strstr(err.msg, "smaller cgroup"));
	rp_pidset_free(&s);
}

/* root/cgroup.procs, root/job/{cgroup.procs, a/cgroup.procs, a/b/cgroup.procs} */
static void test_cgroup_tree(void **state)
{
	(void)state;
	put("cgroup.procs", "1\n");
	dir("job");
	put("job/cgroup.procs", "300\n100\n");
	dir("job/a");
	put("job/a/cgroup.procs", "");
	dir("job/a/b");
	put("job/a/b/cgroup.procs", "200\n100\n");
	put("job/memory.max", "max\n");
	struct rp_pidset s = { 0 };
	struct rp_err err = { 0 };
	/* As /proc/PID/cgroup shows it, and as the full path. */
	assert_int_equal(rp_job_add_cgroup(&s, base, "/job", &err), 0);
	uint32_t want[] = { 100, 200, 300 };
	assert_int_equal(s.n, 3);
	assert_memory_equal(s.pids, want, sizeof(want));
	char full[256];
	scratch_pathf(full, sizeof(full), "%s/job/a/b", base);
	assert_int_equal(rp_job_add_cgroup(&s, base, full, &err), 0);
	assert_int_equal(s.n, 3);
	/* The root itself: every process. */
	assert_int_equal(rp_job_add_cgroup(&s, base, "/", &err), 0);
	assert_int_equal(s.n, 4);
	assert_int_equal(s.pids[0], 1);
	rp_pidset_free(&s);
}

static void test_cgroup_refused(void **state)
{
	(void)state;
	dir("ok");
	put("ok/cgroup.procs", "12\n");
	dir("bad");
	put("bad/cgroup.procs", "12\nnot-a-pid\n");
	dir("zero");
	put("zero/cgroup.procs", "0\n");
	char target[256], link[256];
	scratch_pathf(target, sizeof(target), "%s/ok", base);
	scratch_pathf(link, sizeof(link), "%s/link", base);
	assert_int_equal(symlink(target, link), 0);
	struct rp_pidset s = { 0 };
	struct rp_err err = { 0 };
	assert_int_equal(rp_job_add_cgroup(&s, base, "/ok/../ok", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "'..'"));
	assert_int_equal(rp_job_add_cgroup(&s, base, "/nothere", &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/proc/PID/cgroup"));
	assert_int_equal(rp_job_add_cgroup(&s, base, "/link", &err), -ELOOP);
	assert_int_equal(rp_job_add_cgroup(&s, base, "/bad", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "not-a-pid"));
	assert_int_equal(rp_job_add_cgroup(&s, base, "/zero", &err), -EINVAL);
	assert_int_equal(rp_job_add_cgroup(&s, base, "/ok/cgroup.procs", &err), -ENOTDIR);
	rp_pidset_free(&s);
}

static void test_cgroup_too_deep(void **state)
{
	(void)state;
	char rel[1024] = "deep";
	dir(rel);
	put("deep/cgroup.procs", "");
	for (int i = 0; i < 40; i++) {
		size_t n = strlen(rel);
		snprintf(rel + n, sizeof(rel) - n, "/d");
		dir(rel);
		char procs[1100];
		scratch_pathf(procs, sizeof(procs), "%s/cgroup.procs", rel);
		put(procs, "");
	}
	struct rp_pidset s = { 0 };
	struct rp_err err = { 0 };
	assert_int_equal(rp_job_add_cgroup(&s, base, "deep", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "deep"));
	rp_pidset_free(&s);
}

static void test_cgroup_root_from_mountinfo(void **state)
{
	(void)state;
	char path[256], root[256];
	struct rp_err err = { 0 };
	scratch_pathf(path, sizeof(path), "%s/mountinfo", base);
	put("mountinfo",
	    "22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n"
	    "31 22 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
	    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n");
	assert_int_equal(rp_job_cgroup_root(path, root, sizeof(root), &err), 0);
	assert_string_equal(root, "/sys/fs/cgroup/unified");
	put("mountinfo", "22 1 0:21 / /sys rw - sysfs sysfs rw\n"
	    "40 31 0:37 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
	    "41 31 0:38 / /a\\040b rw - cgroup2 cgroup2 rw\n"
	    "garbage - cgroup2 x\n");
	assert_int_equal(rp_job_cgroup_root(path, root, sizeof(root), &err), -ENOENT);
	assert_non_null(strstr(err.msg, "no cgroup v2"));
	/* This machine's own. */
	int rc = rp_job_cgroup_root("/proc/self/mountinfo", root, sizeof(root), &err);
	assert_true(rc == 0 || rc == -ENOENT);
	if (rc == 0)
		assert_int_equal(root[0], '/');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pidset_sorted_unique),
		cmocka_unit_test(test_pidset_bounded),
		cmocka_unit_test_setup_teardown(test_cgroup_tree, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cgroup_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cgroup_too_deep, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cgroup_root_from_mountinfo, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
