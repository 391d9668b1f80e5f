/* Retention: the log directory kept within its quota by bytes and by
 * sessions, oldest first; sessions being written, kept or newest never
 * deleted; symbolic links never followed; errors reported; the disk check
 * at start. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "retention.h"
#include "scratch.h"

#define PATH_LEN 512
#define HOUR_NS 3600000000000ll

static char base[64];

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void mkdirs(const char *path)
{
	char p[PATH_LEN];
	scratch_pathf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			mkdir(p, 0750);
			*s = '/';
		}
	assert_true(mkdir(p, 0750) == 0 || errno == EEXIST);
}

static void write_file(const char *dir, const char *name, const char *text, size_t size)
{
	char path[PATH_LEN];
	scratch_pathf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	if (text)
		fputs(text, f);
	for (size_t i = 0; i < size; i++)
		fputc('x', f);
	assert_int_equal(fclose(f), 0);
}

static void set_mtime(const char *dir, const char *name, int64_t wall)
{
	char path[PATH_LEN];
	scratch_pathf(path, sizeof(path), "%s%s%s", dir, name ? "/" : "", name ? name : "");
	struct timespec t[2] = { { wall / 1000000000, wall % 1000000000 },
				 { wall / 1000000000, wall % 1000000000 } };
	assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* A fresh log directory under base. */
static void logdir_for(const char *name, char *out, size_t len)
{
	scratch_pathf(out, len, "%s/%s", base, name);
	mkdirs(out);
}

static void session_dir(const char *logdir, const char *run, const char *id, char *out, size_t len)
{
	scratch_pathf(out, len, "%s/%s/plugins/profile/%s", logdir, run, id);
}

/* A finished session of one host created `age_h` hours ago, with `size`
 * bytes of chunks. */
static void finished(const char *logdir, const char *run, const char *id, const char *host,
		     int age_h, size_t size)
{
	char dir[PATH_LEN], name[128], manifest[256];
	session_dir(logdir, run, id, dir, sizeof(dir));
	mkdirs(dir);
	snprintf(manifest, sizeof(manifest),
		 "{\"id\": \"%s\", \"host\": \"%s\", \"trigger\": {\"created_wall_ns\": %lld}}", id,
		 host, (long long)(now_ns() - age_h * HOUR_NS));
	scratch_pathf(name, sizeof(name), "%s.manifest.json", host);
	write_file(dir, name, manifest, 0);
	scratch_pathf(name, sizeof(name), "%s.host.chunks", host);
	write_file(dir, name, NULL, size);
}

static uint64_t du_total;
static int du_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path, (void)flag, (void)ftw;
	du_total += (uint64_t)st->st_blocks * 512;
	return 0;
}

/* Disk usage of a session, counted independently of retention.c. */
static uint64_t du(const char *logdir, const char *run, const char *id)
{
	char dir[PATH_LEN];
	session_dir(logdir, run, id, dir, sizeof(dir));
	du_total = 0;
	assert_int_equal(nftw(dir, du_entry, 16, FTW_PHYS), 0);
	return du_total;
}

static bool has(const char *logdir, const char *run, const char *id)
{
	char dir[PATH_LEN];
	session_dir(logdir, run, id, dir, sizeof(dir));
	return exists(dir);
}

/* What the report callback saw. */
struct seen {
	char deleted[16][PATH_LEN];
	unsigned ndeleted, nerrors;
	char error[256];
};

static void on_report(void *ctx, const char *path, uint64_t bytes, const struct rp_err *err)
{
	(void)bytes;
	struct seen *s = ctx;
	if (err) {
		if (!s->nerrors++)
			snprintf(s->error, sizeof(s->error), "%.200s", err->msg);
	} else if (s->ndeleted < 16) {
		scratch_pathf(s->deleted[s->ndeleted++], PATH_LEN, "%s", path);
	}
}

static int enforce(const char *logdir, uint64_t max_bytes, uint64_t max_count,
		   struct seen *seen, struct rp_retention_stats *st, struct rp_err *err)
{
	memset(seen, 0, sizeof(*seen));
	struct rp_retention_opts o = { .logdir = logdir, .max_bytes = max_bytes,
				       .max_count = max_count, .report = on_report, .ctx = seen };
	return rp_retention_enforce(&o, st, err);
}

/* Oldest first by creation time (not by id or run), down to max_count. */
static void test_quota_by_count(void **state)
{
	(void)state;
	char logdir[PATH_LEN];
	logdir_for("count", logdir, sizeof(logdir));
	finished(logdir, "b", "zz_oldest", "h1", 50, 4096);
	finished(logdir, "a", "mm_second", "h1", 40, 4096);
	finished(logdir, "a", "aa_third", "h1", 30, 4096);
	finished(logdir, "b", "bb_fourth", "h1", 20, 4096);
	finished(logdir, "a", "cc_newest", "h1", 10, 4096);
	uint64_t left = du(logdir, "a", "aa_third") + du(logdir, "b", "bb_fourth") +
			du(logdir, "a", "cc_newest");
	struct seen seen;
	struct rp_retention_stats st;
	struct rp_err err = { 0 };
	assert_int_equal(enforce(logdir, 0, 3, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 2);
	assert_int_equal(st.sessions, 3);
	assert_int_equal(st.bytes, left);
	assert_false(st.over_quota);
	assert_int_equal(seen.ndeleted, 2);
	char want[PATH_LEN];
	session_dir(logdir, "b", "zz_oldest", want, sizeof(want));
	assert_string_equal(seen.deleted[0], want);
	session_dir(logdir, "a", "mm_second", want, sizeof(want));
	assert_string_equal(seen.deleted[1], want);
	assert_false(has(logdir, "b", "zz_oldest") || has(logdir, "a", "mm_second"));
	assert_true(has(logdir, "a", "aa_third") && has(logdir, "b", "bb_fourth") &&
		    has(logdir, "a", "cc_newest"));
	/* Within quota: a second pass deletes nothing. */
	assert_int_equal(enforce(logdir, 0, 3, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 0);
	assert_int_equal(st.sessions, 3);
	/* No limits at all: nothing either. */
	assert_int_equal(enforce(logdir, 0, 0, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 0);
}

/* Down to max_bytes as du counts it, and no further. */
static void test_quota_by_bytes(void **state)
{
	(void)state;
	char logdir[PATH_LEN];
	logdir_for("bytes", logdir, sizeof(logdir));
	finished(logdir, "r", "s1", "h1", 40, 256 * 1024);
	finished(logdir, "r", "s2", "h1", 30, 64 * 1024);
	finished(logdir, "r", "s3", "h1", 20, 64 * 1024);
	finished(logdir, "r", "s4", "h1", 10, 64 * 1024);
	uint64_t b2 = du(logdir, "r", "s2"), b3 = du(logdir, "r", "s3"), b4 = du(logdir, "r", "s4");
	struct seen seen;
	struct rp_retention_stats st;
	struct rp_err err = { 0 };
	/* Room for s2..s4 only when s1 goes; s2 must then stay. */
	assert_int_equal(enforce(logdir, b2 + b3 + b4, 0, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 1);
	assert_false(has(logdir, "r", "s1"));
	assert_true(has(logdir, "r", "s2"));
	assert_int_equal(st.bytes, b2 + b3 + b4);
	/* One byte less: s2 goes too. */
	assert_int_equal(enforce(logdir, b2 + b3 + b4 - 1, 0, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 1);
	assert_int_equal(st.deleted_bytes, b2);
	assert_false(has(logdir, "r", "s2"));
	assert_int_equal(st.sessions, 2);
	/* A quota nothing fits: the newest session stays all the same. */
	assert_int_equal(enforce(logdir, 1, 0, &seen, &st, &err), 0);
	assert_false(has(logdir, "r", "s3"));
	assert_true(has(logdir, "r", "s4"));
	assert_int_equal(st.sessions, 1);
	assert_true(st.over_quota);
}

/* Being written (fresh marker, or young without a manifest) and kept
 * sessions stay and count; a stale marker or an old manifest-less
 * directory is an abandoned session. */
static void test_busy_and_kept_stay(void **state)
{
	(void)state;
	char logdir[PATH_LEN], dir[PATH_LEN];
	logdir_for("busy", logdir, sizeof(logdir));
	int64_t now = now_ns();
	finished(logdir, "r", "open_here", "h1", 60, 4096);
	session_dir(logdir, "r", "open_here", dir, sizeof(dir));
	write_file(dir, "h2.open", NULL, 0); /* h2 still writes its part */
	finished(logdir, "r", "kept", "h1", 59, 4096);
	session_dir(logdir, "r", "kept", dir, sizeof(dir));
	struct rp_err err = { 0 };
	assert_false(rp_retention_kept(dir));
	assert_int_equal(rp_retention_keep(logdir, dir, &err), 0);
	assert_int_equal(rp_retention_keep(logdir, dir, &err), 0);
	assert_true(rp_retention_kept(dir));
	session_dir(logdir, "r", "starting", dir, sizeof(dir));
	mkdirs(dir); /* no manifest, no marker yet, just made */
	finished(logdir, "r", "crashed", "h1", 58, 4096);
	session_dir(logdir, "r", "crashed", dir, sizeof(dir));
	write_file(dir, "h2.open", NULL, 0);
	set_mtime(dir, "h2.open", now - HOUR_NS);
	session_dir(logdir, "r", "abandoned", dir, sizeof(dir));
	mkdirs(dir);
	write_file(dir, "h1.host.chunks", NULL, 100);
	set_mtime(dir, NULL, now - 57 * HOUR_NS);
	finished(logdir, "r", "old", "h1", 56, 4096);
	finished(logdir, "r", "newest", "h1", 1, 4096);

	struct seen seen;
	struct rp_retention_stats st;
	assert_int_equal(enforce(logdir, 0, 1, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 3);
	assert_false(has(logdir, "r", "crashed") || has(logdir, "r", "abandoned") ||
		     has(logdir, "r", "old"));
	assert_true(has(logdir, "r", "open_here") && has(logdir, "r", "kept") &&
		    has(logdir, "r", "starting") && has(logdir, "r", "newest"));
	assert_int_equal(st.sessions, 4);
	assert_true(st.over_quota);

	session_dir(logdir, "r", "gone", dir, sizeof(dir));
	assert_int_equal(rp_retention_keep(logdir, dir, &err), -ENOENT);
	assert_non_null(strstr(err.msg, dir));
	assert_non_null(strstr(err.msg, "check that the session exists"));
}

/* Links inside a session are deleted, never what they point to; linked
 * sessions and runs are no sessions. */
static void test_symlinks_not_followed(void **state)
{
	(void)state;
	char logdir[PATH_LEN], outside[PATH_LEN], dir[PATH_LEN], link[PATH_LEN + 16], file[PATH_LEN + 16];
	logdir_for("links", logdir, sizeof(logdir));
	scratch_pathf(outside, sizeof(outside), "%s/outside", base);
	mkdirs(outside);
	write_file(outside, "precious", "data", 0);
	scratch_pathf(file, sizeof(file), "%s/precious", outside);

	finished(logdir, "r", "with_links", "h1", 30, 4096);
	session_dir(logdir, "r", "with_links", dir, sizeof(dir));
	scratch_pathf(link, sizeof(link), "%s/to_dir", dir);
	assert_int_equal(symlink(outside, link), 0);
	scratch_pathf(link, sizeof(link), "%s/to_file", dir);
	assert_int_equal(symlink(file, link), 0);
	scratch_pathf(link, sizeof(link), "%s/nested", dir);
	mkdirs(link);
	scratch_pathf(link, sizeof(link), "%s/nested/up", dir);
	assert_int_equal(symlink("../../../../../../outside", link), 0);
	/* A session directory that is a link, older than everything. */
	finished(base, "linked_src", "elsewhere", "h1", 90, 4096);
	session_dir(logdir, "r", "is_a_link", link, sizeof(link));
	session_dir(base, "linked_src", "elsewhere", dir, sizeof(dir));
	assert_int_equal(symlink(dir, link), 0);
	/* A run directory that is a link. */
	scratch_pathf(link, sizeof(link), "%s/linked_run", logdir);
	scratch_pathf(dir, sizeof(dir), "%s/linked_src", base);
	assert_int_equal(symlink(dir, link), 0);
	finished(logdir, "r", "newer", "h1", 10, 4096);

	struct seen seen;
	struct rp_retention_stats st;
	struct rp_err err = { 0 };
	assert_int_equal(enforce(logdir, 0, 1, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 1);
	assert_false(has(logdir, "r", "with_links"));
	assert_true(exists(file));
	assert_true(has(base, "linked_src", "elsewhere"));
	session_dir(logdir, "r", "is_a_link", link, sizeof(link));
	assert_true(exists(link));
	assert_int_equal(st.sessions, 1);
}

static void deep_tree(const char *dir, int depth)
{
	char path[PATH_LEN];
	scratch_pathf(path, sizeof(path), "%s", dir);
	for (int i = 0; i < depth; i++)
		strcat(path, "/d");
	mkdirs(path);
}

/* Failures are reported (callback and return) and the pass goes on. */
static void test_errors_reported(void **state)
{
	(void)state;
	char logdir[PATH_LEN], dir[PATH_LEN], hidden[PATH_LEN];
	logdir_for("errors", logdir, sizeof(logdir));
	/* Not ours: nested too deep to size. */
	finished(logdir, "r", "deep", "h1", 50, 4096);
	session_dir(logdir, "r", "deep", dir, sizeof(dir));
	deep_tree(dir, 20);
	/* A removal cut short earlier that cannot be finished blocks the
	 * deletion of the session of the same name. */
	finished(logdir, "r", "blocked", "h1", 40, 4096);
	session_dir(logdir, "r", ".ringprof-deleting.blocked", hidden, sizeof(hidden));
	deep_tree(hidden, 20);
	finished(logdir, "r", "old", "h1", 30, 4096);
	finished(logdir, "r", "newest", "h1", 1, 4096);

	struct seen seen;
	struct rp_retention_stats st;
	struct rp_err err = { 0 };
	int rc = enforce(logdir, 0, 1, &seen, &st, &err);
	assert_true(rc < 0);
	assert_int_equal(err.code, rc);
	assert_non_null(strstr(err.msg, "nested deeper than 16"));
	assert_int_equal(seen.nerrors, 2); /* the leftover, then "blocked" */
	assert_non_null(strstr(seen.error, "nested deeper than 16"));
	assert_false(has(logdir, "r", "old"));
	assert_true(has(logdir, "r", "blocked") && has(logdir, "r", "deep"));
	assert_int_equal(st.deleted, 1);
	assert_true(st.over_quota);

	/* A log directory that does not exist yet holds nothing. */
	char missing[PATH_LEN];
	scratch_pathf(missing, sizeof(missing), "%s/none", base);
	assert_int_equal(enforce(missing, 0, 1, &seen, &st, &err), 0);
	assert_int_equal(st.sessions, 0);
	/* One that is a file is an error naming it. */
	write_file(base, "plain", NULL, 1);
	scratch_pathf(missing, sizeof(missing), "%s/plain", base);
	assert_int_equal(enforce(missing, 0, 1, &seen, &st, &err), -ENOTDIR);
	assert_non_null(strstr(err.msg, missing));
}

/* A file system mounted inside a session is never entered. */
static void test_mount_inside_not_entered(void **state)
{
	(void)state;
	char logdir[PATH_LEN], dir[PATH_LEN], mnt[PATH_LEN + 8];
	logdir_for("mounts", logdir, sizeof(logdir));
	finished(logdir, "r", "mounted", "h1", 30, 4096);
	session_dir(logdir, "r", "mounted", dir, sizeof(dir));
	scratch_pathf(mnt, sizeof(mnt), "%s/mnt", dir);
	mkdirs(mnt);
	if (mount("none", mnt, "tmpfs", 0, "size=1m") < 0)
		skip(); /* needs root */
	write_file(mnt, "other_fs", NULL, 10);
	finished(logdir, "r", "newest", "h1", 1, 4096);
	struct seen seen;
	struct rp_retention_stats st;
	struct rp_err err = { 0 };
	int rc = enforce(logdir, 0, 1, &seen, &st, &err);
	char file[PATH_LEN + 16];
	scratch_pathf(file, sizeof(file), "%s/other_fs", mnt);
	bool kept = exists(file);
	umount(mnt);
	assert_int_equal(rc, -EXDEV);
	assert_non_null(strstr(err.msg, "another file system"));
	assert_true(kept);
}

/* The warning at start: sizes, where, and what to lower. */
static void test_check_space(void **state)
{
	(void)state;
	char logdir[PATH_LEN], state_dir[PATH_LEN];
	scratch_pathf(state_dir, sizeof(state_dir), "%s/space/rings", base);
	mkdirs(state_dir);
	/* Not created yet: its parent's file system counts. */
	scratch_pathf(logdir, sizeof(logdir), "%s/space/sessions/not/yet", base);
	char msg[512];
	struct rp_disk_plan p = { .state_dir = state_dir, .ring_budgets = 64ull << 20,
				  .ring_held = 64ull << 20, .logdir = logdir, .max_bytes = 1ull << 20 };
	assert_int_equal(rp_retention_check_space(&p, msg, sizeof(msg)), 0);
	p.max_bytes = 1ull << 60;
	assert_int_equal(rp_retention_check_space(&p, msg, sizeof(msg)), 1);
	assert_non_null(strstr(msg, "ring budgets (64.0 MiB) + session quota (1.0 EiB) exceed the "));
	assert_non_null(strstr(msg, state_dir));
	assert_non_null(strstr(msg, "lower [rings] budget or [sessions] max_bytes"));
	/* No quota: only the rings can be too big. */
	p.max_bytes = 0;
	p.ring_budgets = 1ull << 60;
	assert_int_equal(rp_retention_check_space(&p, msg, sizeof(msg)), 1);
	assert_non_null(strstr(msg, "ring budgets (1.0 EiB) exceed"));
	assert_null(strstr(msg, "max_bytes"));

	/* Sessions on a file system of their own are weighed on their own. */
	char mnt[PATH_LEN];
	scratch_pathf(mnt, sizeof(mnt), "%s/space/sessions", base);
	mkdirs(mnt);
	if (mount("none", mnt, "tmpfs", 0, "size=1m") < 0)
		skip(); /* needs root */
	p.ring_budgets = 64ull << 20;
	p.max_bytes = 16ull << 20;
	int rc = rp_retention_check_space(&p, msg, sizeof(msg));
	umount(mnt);
	assert_int_equal(rc, 1);
	assert_non_null(strstr(msg, "session quota (16.0 MiB) exceeds the "));
	assert_non_null(strstr(msg, mnt));
	assert_non_null(strstr(msg, "lower [sessions] max_bytes"));
	assert_null(strstr(msg, "ring budgets"));
}

static int group_setup(void **state)
{
	(void)state;
	return scratch_make(base, sizeof(base), "retention");
}

static int group_teardown(void **state)
{
	(void)state;
	return scratch_remove(base);
}

/* A FIFO or a huge file under a manifest's name, and a FIFO as KEEP:
 * the pass neither waits on them nor reads them whole, and they make no
 * session's manifest. */
static void test_fifo_and_huge_manifest(void **state)
{
	(void)state;
	char logdir[PATH_LEN], dir[PATH_LEN], path[PATH_LEN + 32];
	logdir_for("fifos", logdir, sizeof(logdir));
	finished(logdir, "r", "real", "h1", 2, 4096);
	finished(logdir, "r", "newest", "h1", 1, 4096);
	session_dir(logdir, "r", "planted", dir, sizeof(dir));
	mkdirs(dir);
	scratch_pathf(path, sizeof(path), "%s/x.manifest.json", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	scratch_pathf(path, sizeof(path), "%s/big.manifest.json", dir);
	int fd = open(path, O_CREAT | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 200 << 20), 0);
	close(fd);
	set_mtime(dir, NULL, now_ns() - 3 * HOUR_NS);
	session_dir(logdir, "r", "real", dir, sizeof(dir));
	scratch_pathf(path, sizeof(path), "%s/KEEP", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	struct rp_err err = { 0 };
	/* Already there (a FIFO): marking it kept does not wait either. */
	assert_int_equal(rp_retention_keep(logdir, dir, &err), 0);
	struct seen seen;
	struct rp_retention_stats st;
	/* The planted one is no manifest: aged by its directory, oldest. */
	assert_int_equal(enforce(logdir, 0, 1, &seen, &st, &err), 0);
	assert_int_equal(st.deleted, 1);
	assert_false(has(logdir, "r", "planted"));
	assert_true(has(logdir, "r", "real") && has(logdir, "r", "newest"));
}

/* A daemon of this host that died leaves temporary files, and sessions
 * with its marker and chunks but no manifest; at start they go, and
 * nothing of another host does, even one whose name starts the same. */
static void test_leftovers(void **state)
{
	(void)state;
	char logdir[PATH_LEN], done[PATH_LEN], crashed[PATH_LEN], shared[PATH_LEN],
		longer[PATH_LEN], path[PATH_LEN + 64];
	logdir_for("leftovers", logdir, sizeof(logdir));
	finished(logdir, "r", "done", "vm", 1, 4096);
	session_dir(logdir, "r", "done", done, sizeof(done));
	write_file(done, "vm.summary.txt.tmp4242", NULL, 10);
	write_file(done, ".vm.json.tmp-00112233aabbccdd", NULL, 10);
	write_file(done, "vm.manifest.json.tmp", NULL, 10);
	write_file(done, "vm.summary.txt", NULL, 10);
	write_file(done, "vm.tmp.chunks", NULL, 10);    /* a device named "tmp" */
	write_file(done, "other.json.tmp77", NULL, 10); /* another host's export */
	session_dir(logdir, "r", "crashed", crashed, sizeof(crashed));
	mkdirs(crashed);
	write_file(crashed, "vm.open", NULL, 0);
	write_file(crashed, "vm.host.chunks", NULL, 0); /* ENOSPC: empty */
	session_dir(logdir, "r", "shared", shared, sizeof(shared));
	mkdirs(shared);
	write_file(shared, "vm.open", NULL, 0);
	write_file(shared, "vm.host.chunks", NULL, 10);
	write_file(shared, "other.open", NULL, 0);
	write_file(shared, "other.host.chunks", NULL, 10);
	session_dir(logdir, "r", "longer", longer, sizeof(longer));
	mkdirs(longer);
	write_file(longer, "vm.b.open", NULL, 0);
	write_file(longer, "vm.b.host.chunks", NULL, 10);

	struct rp_retention_opts o = { .logdir = logdir };
	struct rp_err err = { 0 };
	assert_int_equal(rp_retention_clean_leftovers(&o, "vm", &err), 7);
	const char *gone[] = { "done/vm.summary.txt.tmp4242", "done/.vm.json.tmp-00112233aabbccdd",
			       "done/vm.manifest.json.tmp", "crashed", "shared/vm.open",
			       "shared/vm.host.chunks" };
	const char *kept[] = { "done/vm.manifest.json", "done/vm.host.chunks", "done/vm.summary.txt",
			       "done/vm.tmp.chunks", "done/other.json.tmp77", "shared/other.open",
			       "shared/other.host.chunks", "longer/vm.b.open",
			       "longer/vm.b.host.chunks" };
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
		scratch_pathf(path, sizeof(path), "%s/r/plugins/profile/%s", logdir, gone[i]);
		if (exists(path))
			fail_msg("%s is still there", path);
	}
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++) {
		scratch_pathf(path, sizeof(path), "%s/r/plugins/profile/%s", logdir, kept[i]);
		if (!exists(path))
			fail_msg("%s was removed", path);
	}
	/* Nothing left: a second start removes nothing. */
	assert_int_equal(rp_retention_clean_leftovers(&o, "vm", &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_quota_by_count),
		cmocka_unit_test(test_quota_by_bytes),
		cmocka_unit_test(test_busy_and_kept_stay),
		cmocka_unit_test(test_symlinks_not_followed),
		cmocka_unit_test(test_fifo_and_huge_manifest),
		cmocka_unit_test(test_leftovers),
		cmocka_unit_test(test_errors_reported),
		cmocka_unit_test(test_mount_inside_not_entered),
		cmocka_unit_test(test_check_space),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
