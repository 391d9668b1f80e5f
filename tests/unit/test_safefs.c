/* safefs: what an attacker with write access to the log directory plants
 * (links at every level, a FIFO, a huge file, a directory of another
 * owner) is refused, never followed or waited on. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefs.h"
#include "scratch.h"

static char base[64];

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	(void)state;
	umask(022);
	return scratch_make(base, sizeof(base), "safefs");
}

static int teardown(void **state)
{
	(void)state;
	scratch_remove(base);
	return 0;
}

static void test_creates_nested_dirs(void **state)
{
	(void)state;
	struct rp_err err = { 0 };
	char root[256];
	scratch_pathf(root, sizeof(root), "%s/made/logs", base);
	int rfd = rp_safefs_open_root(root, 0750, true, &err);
	assert_true(rfd >= 0);
	int fd = rp_safefs_open_dir(rfd, "run/plugins/profile", 0750,
				    RP_SAFEFS_CREATE | RP_SAFEFS_OWNED, root, &err);
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0750);
	close(fd);
	/* "..", however spelled, never leaves the root. */
	assert_int_equal(rp_safefs_open_dir(rfd, "run/../..", 0750, 0, root, &err), -EINVAL);
	close(rfd);
}

/* A link at any level is refused, with or without creating. */
static void test_link_refused(void **state)
{
	(void)state;
	struct rp_err err = { 0 };
	char root[256], secret[256], link[256];
	assert_int_equal(scratch_linked_logdir(base, "links", root, secret, sizeof(root)), 0);
	int rfd = rp_safefs_open_root(root, 0750, false, &err);
	assert_true(rfd >= 0);
	for (unsigned flags = 0; flags < 4; flags++) {
		err = (struct rp_err){ 0 };
		assert_int_equal(rp_safefs_open_dir(rfd, "linkrun/plugins", 0750, flags, root, &err),
				 -ELOOP);
		assert_non_null(strstr(err.msg, "linkrun is a symbolic link"));
	}
	/* Nothing was made in the link's target. */
	char made[256];
	scratch_pathf(made, sizeof(made), "%s/plugins", secret);
	assert_int_equal(access(made, F_OK), -1);
	/* Deeper down too. */
	scratch_pathf(made, sizeof(made), "%s/run", root);
	assert_int_equal(mkdir(made, 0750), 0);
	scratch_pathf(made, sizeof(made), "%s/run/plugins", root);
	assert_int_equal(mkdir(made, 0750), 0);
	scratch_pathf(link, sizeof(link), "%s/run/plugins/profile", root);
	assert_int_equal(symlink(secret, link), 0);
	assert_int_equal(rp_safefs_open_dir(rfd, "run/plugins/profile/x", 0750, RP_SAFEFS_CREATE,
					    root, &err), -ELOOP);
	scratch_pathf(made, sizeof(made), "%s/x", secret);
	assert_int_equal(access(made, F_OK), -1);
	close(rfd);
}

/* A directory of another owner: refused with RP_SAFEFS_OWNED only. */
static void test_owner_refused(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	struct rp_err err = { 0 };
	char root[256], other[256];
	scratch_pathf(root, sizeof(root), "%s/owners", base);
	scratch_pathf(other, sizeof(other), "%s/theirs", root);
	assert_int_equal(mkdir(root, 0770), 0);
	assert_int_equal(mkdir(other, 0770), 0);
	assert_int_equal(chown(other, 65534, 65534), 0);
	int rfd = rp_safefs_open_root(root, 0750, false, &err);
	assert_int_equal(rp_safefs_open_dir(rfd, "theirs", 0750, RP_SAFEFS_OWNED, root, &err),
			 -EPERM);
	assert_non_null(strstr(err.msg, "owned by neither uid 0"));
	int fd = rp_safefs_open_dir(rfd, "theirs", 0750, 0, root, &err);
	assert_true(fd >= 0);
	close(fd);
	close(rfd);
	/* The trusted directory's owner may own what is below it (NFS with
	 * root_squash makes root's directories another uid's). */
	assert_int_equal(chown(root, 65534, 65534), 0);
	rfd = rp_safefs_open_root(root, 0750, false, &err);
	fd = rp_safefs_open_dir(rfd, "theirs", 0750, RP_SAFEFS_OWNED, root, &err);
	assert_true(fd >= 0);
	close(fd);
	close(rfd);
}

/* Read back: links, FIFOs and oversized files refused without blocking. */
static void test_read_regular_only(void **state)
{
	(void)state;
	struct rp_err err = { 0 };
	char root[256], p[256];
	scratch_pathf(root, sizeof(root), "%s/reads", base);
	assert_int_equal(mkdir(root, 0750), 0);
	scratch_pathf(p, sizeof(p), "%s/ok.json", root);
	put(p, "{\"a\": 1}");
	scratch_pathf(p, sizeof(p), "%s/fifo.json", root);
	assert_int_equal(mkfifo(p, 0600), 0);
	scratch_pathf(p, sizeof(p), "%s/big.json", root);
	int big = open(p, O_CREAT | O_WRONLY, 0600);
	assert_int_equal(ftruncate(big, 200 << 20), 0);
	close(big);
	scratch_pathf(p, sizeof(p), "%s/link.json", root);
	assert_int_equal(symlink("ok.json", p), 0);
	int rfd = rp_safefs_open_root(root, 0750, false, &err);
	char *text;
	size_t len;
	assert_int_equal(rp_safefs_read(rfd, "ok.json", RP_SAFEFS_META_MAX, &text, &len, root, &err), 0);
	assert_string_equal(text, "{\"a\": 1}");
	assert_int_equal(len, 8);
	free(text);
	assert_int_equal(rp_safefs_read(rfd, "fifo.json", RP_SAFEFS_META_MAX, &text, &len, root,
					&err), -EINVAL);
	assert_non_null(strstr(err.msg, "not a regular file"));
	assert_int_equal(rp_safefs_read(rfd, "big.json", RP_SAFEFS_META_MAX, &text, &len, root,
					&err), -EFBIG);
	assert_null(text);
	assert_int_equal(rp_safefs_read(rfd, "link.json", RP_SAFEFS_META_MAX, &text, &len, root,
					&err), -ELOOP);
	assert_int_equal(rp_safefs_open_regular(rfd, "ok.json", 4, root, &err), -EFBIG);
	close(rfd);
}

/* A temporary file replaces a planted link at the final name, never
 * writing through it, and its name cannot be guessed ahead. */
static void test_tmp_publish(void **state)
{
	(void)state;
	struct rp_err err = { 0 };
	char root[256], target[256], p[256];
	scratch_pathf(root, sizeof(root), "%s/tmps", base);
	scratch_pathf(target, sizeof(target), "%s/target", base);
	assert_int_equal(mkdir(root, 0750), 0);
	put(target, "precious");
	scratch_pathf(p, sizeof(p), "%s/out.txt", root);
	assert_int_equal(symlink(target, p), 0);
	int rfd = rp_safefs_open_root(root, 0750, false, &err);
	struct rp_safefs_tmp a, b;
	assert_int_equal(rp_safefs_tmp_open(rfd, "out.txt", 0640, &a, root, &err), 0);
	assert_int_equal(rp_safefs_tmp_open(rfd, "out.txt", 0640, &b, root, &err), 0);
	assert_string_not_equal(a.name, b.name);
	assert_true(rp_safefs_is_tmp_name(a.name));
	assert_false(rp_safefs_is_tmp_name("out.txt"));
	rp_safefs_tmp_discard(&b);
	rp_safefs_tmp_discard(&b);
	assert_int_equal(faccessat(rfd, b.name, F_OK, AT_SYMLINK_NOFOLLOW), -1);
	assert_int_equal(write(a.fd, "new", 3), 3);
	assert_int_equal(rp_safefs_tmp_publish(&a, "out.txt", root, &err), 0);
	char *text;
	assert_int_equal(rp_safefs_read(rfd, "out.txt", 64, &text, NULL, root, &err), 0);
	assert_string_equal(text, "new");
	free(text);
	int tfd = open(target, O_RDONLY);
	char buf[16] = { 0 };
	assert_int_equal(read(tfd, buf, sizeof(buf)), 8);
	assert_string_equal(buf, "precious");
	close(tfd);
	close(rfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_creates_nested_dirs),
		cmocka_unit_test(test_link_refused),
		cmocka_unit_test(test_owner_refused),
		cmocka_unit_test(test_read_regular_only),
		cmocka_unit_test(test_tmp_publish),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
