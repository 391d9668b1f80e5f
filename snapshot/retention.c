/* Retention (retention.h).  Everything below the log directory is reached
 * with *at() calls relative to directories opened with O_NOFOLLOW, so no
 * symbolic link, however planted, leads a deletion out of it. */
#include "retention.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "parse.h"
#include "session.h"

/* Sessions are flat; a tree deeper than this is not one of ours. */
#define MAX_DEPTH 16
/* A session being removed; readers skip names starting with '.'. */
#define DELETING_PREFIX ".ringprof-deleting."

struct entry {
	char *run, *id;
	int64_t age_ns;   /* wall ns: earliest manifest trigger.created_wall_ns, else mtime */
	uint64_t bytes;
	bool protect;     /* being written, or kept */
};

struct pass {
	const struct rp_retention_opts *o;
	int64_t now_ns;
	struct entry *e;
	size_t n;
	int rc;           /* first error */
	struct rp_err *err;
};

static int64_t wall_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n > k && !strcmp(s + n - k, suffix);
}

static void note_error(struct pass *p, const struct rp_err *why)
{
	if (p->rc == 0) {
		p->rc = why->code;
		if (p->err)
			*p->err = *why;
	}
}

/* du -s, or with remove rm -r, of `name` in directory `parent`: never
 * follows a link, never enters a file system other than dev.  Adds the
 * bytes found (or freed) to *bytes.  `top` names the session in errors. */
static int walk(int parent, const char *name, dev_t dev, int depth, bool remove,
		uint64_t *bytes, const char *top, struct rp_err *err)
{
	struct stat st;
	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : rp_err_set(err, -errno, "cannot examine %s in %s: %s",
							name, top, strerror(errno));
	if (!S_ISDIR(st.st_mode)) {
		if (remove && unlinkat(parent, name, 0) < 0 && errno != ENOENT)
			return rp_err_set(err, -errno, "cannot delete %s in %s: %s: check the "
					  "permissions of the log directory", name, top, strerror(errno));
		*bytes += (uint64_t)st.st_blocks * 512;
		return 0;
	}
	if (depth >= MAX_DEPTH)
		return rp_err_set(err, -ELOOP, "%s holds directories nested deeper than %d: not a "
				  "ringprof session; remove it by hand", top, MAX_DEPTH);
	int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : rp_err_set(err, -errno, "cannot open %s in %s: %s",
							name, top, strerror(errno));
	if (fstat(fd, &st) < 0 || st.st_dev != dev) {
		close(fd);
		return rp_err_set(err, -EXDEV, "%s in %s is another file system mounted inside "
				  "the log directory: unmount it; retention never enters it", name, top);
	}
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return rp_err_set(err, -errno, "cannot read %s in %s: %s", name, top, strerror(errno));
	}
	int rc = 0;
	struct dirent *e;
	while (rc == 0 && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			rc = walk(dirfd(d), e->d_name, dev, depth + 1, remove, bytes, top, err);
	closedir(d);
	if (rc == 0 && remove && unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		rc = rp_err_set(err, -errno, "cannot delete %s in %s: %s", name, top, strerror(errno));
	if (rc == 0)
		*bytes += (uint64_t)st.st_blocks * 512;
	return rc;
}

/* Age and protection of the session directory `name` in profile dir pfd:
 * markers, manifests and KEEP are all at its top. */
static int inspect(int pfd, const char *name, int64_t now, struct entry *en)
{
	int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat dst;
	DIR *d = fd >= 0 && fstat(fd, &dst) == 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return -e;
	}
	int64_t created = INT64_MAX;
	bool busy = false, kept = false, manifest = false;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (!strcmp(e->d_name, RP_RETENTION_KEEP_FILE)) {
			kept = true;
		} else if (ends_with(e->d_name, RP_SESSION_OPEN_SUFFIX)) {
			if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    now - wall_ns(&st.st_mtim) < (int64_t)RP_SESSION_OPEN_FRESH_NS)
				busy = true;
		} else if (ends_with(e->d_name, RP_SESSION_MANIFEST_SUFFIX)) {
			int mfd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			json_t *m = mfd >= 0 ? json_loadfd(mfd, 0, NULL) : NULL;
			json_t *c = json_object_get(json_object_get(m, "trigger"), "created_wall_ns");
			manifest = manifest || json_is_object(m);
			if (json_is_integer(c) && json_integer_value(c) < created)
				created = json_integer_value(c);
			json_decref(m);
			if (mfd >= 0)
				close(mfd);
		}
	}
	closedir(d);
	int64_t mtime = wall_ns(&dst.st_mtim);
	/* No manifest yet: a writer (of any host) may be about to claim it. */
	if (!manifest && now - mtime < (int64_t)RP_SESSION_OPEN_FRESH_NS)
		busy = true;
	en->age_ns = created != INT64_MAX ? created : mtime;
	en->protect = busy || kept;
	return 0;
}

/* <run>/plugins/profile under the log directory, without following links;
 * -errno (ENOENT, ELOOP, ENOTDIR: not a run directory). */
static int open_profile(int logfd, const char *run)
{
	const char *parts[] = { run, "plugins", "profile" };
	int fd = logfd;
	for (size_t i = 0; i < 3; i++) {
		int next = openat(fd, parts[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		if (fd != logfd)
			close(fd);
		if (next < 0)
			return -e;
		fd = next;
	}
	return fd;
}

static char *session_path(const struct pass *p, const char *run, const char *id)
{
	char *path;
	return asprintf(&path, "%s/%s/plugins/profile/%s", p->o->logdir, run, id) < 0 ? NULL : path;
}

static void report(struct pass *p, const char *run, const char *id, uint64_t bytes,
		   const struct rp_err *why)
{
	if (why)
		note_error(p, why);
	char *path = session_path(p, run, id);
	if (p->o->report && path)
		p->o->report(p->o->ctx, path, bytes, why);
	free(path);
}

static int add_entry(struct pass *p, const char *run, const char *id, const struct entry *en)
{
	struct entry *grown = realloc(p->e, (p->n + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	p->e = grown;
	grown[p->n] = *en;
	grown[p->n].run = strdup(run);
	grown[p->n].id = strdup(id);
	if (!grown[p->n].run || !grown[p->n].id) {
		free(grown[p->n].run);
		free(grown[p->n].id);
		return -ENOMEM;
	}
	p->n++;
	return 0;
}

/* Every session of one run; leftovers of removals cut short are finished. */
static void scan_run(struct pass *p, int logfd, const char *run)
{
	int pfd = open_profile(logfd, run);
	struct stat pst;
	DIR *d = pfd >= 0 && fstat(pfd, &pst) == 0 ? fdopendir(pfd) : NULL;
	if (!d) {
		if (pfd >= 0)
			close(pfd);
		return; /* not a run directory of ours */
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *id = de->d_name;
		struct rp_err why = { 0 };
		uint64_t bytes = 0;
		if (!strncmp(id, DELETING_PREFIX, strlen(DELETING_PREFIX))) {
			if (walk(dirfd(d), id, pst.st_dev, 0, true, &bytes, id, &why) < 0)
				report(p, run, id, bytes, &why);
			continue;
		}
		struct stat st;
		if (id[0] == '.' || fstatat(dirfd(d), id, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) || st.st_dev != pst.st_dev)
			continue; /* links, files and mount points are no sessions */
		struct entry en = { 0 };
		char *path = session_path(p, run, id);
		int rc = inspect(dirfd(d), id, p->now_ns, &en);
		if (rc == -ENOENT) {
			free(path);
			continue; /* deleted meanwhile, by another daemon */
		}
		if (rc < 0)
			rp_err_set(&why, rc, "cannot read session %s: %s", path ? path : id,
				   strerror(-rc));
		else
			rc = walk(dirfd(d), id, pst.st_dev, 0, false, &en.bytes, path ? path : id, &why);
		free(path);
		if (rc == 0 && add_entry(p, run, id, &en) < 0)
			rc = rp_err_set(&why, -ENOMEM, "out of memory listing sessions");
		if (rc < 0)
			note_error(p, &why);
	}
	closedir(d);
}

static int oldest_first(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;
	if (x->age_ns != y->age_ns)
		return x->age_ns < y->age_ns ? -1 : 1;
	int c = strcmp(x->run, y->run);
	return c ? c : strcmp(x->id, y->id);
}

enum outcome { DELETED, GONE, NOW_PROTECTED };

/* Hide the session under a dot name, check again that no writer or KEEP
 * arrived meanwhile (putting it back if one did), then remove it. */
static int delete_session(struct pass *p, int logfd, const struct entry *en, uint64_t *freed,
			  struct rp_err *err)
{
	char *path = session_path(p, en->run, en->id);
	char hidden[NAME_MAX + 1];
	snprintf(hidden, sizeof(hidden), DELETING_PREFIX "%s", en->id);
	int pfd = open_profile(logfd, en->run);
	int rc = 0;
	struct stat pst;
	if (!path)
		rc = rp_err_set(err, -ENOMEM, "out of memory deleting a session");
	else if (pfd < 0 || fstat(pfd, &pst) < 0)
		rc = pfd == -ENOENT ? GONE : rp_err_set(err, pfd < 0 ? pfd : -errno,
							"cannot open the run directory of %s: %s", path,
							strerror(pfd < 0 ? -pfd : errno));
	else if (renameat(pfd, en->id, pfd, hidden) < 0)
		rc = errno == ENOENT ? GONE : rp_err_set(err, -errno, "cannot delete %s: renaming "
							 "it to %s failed: %s", path, hidden,
							 strerror(errno));
	if (rc == 0) {
		struct entry now = { 0 };
		if (inspect(pfd, hidden, p->now_ns, &now) == 0 && now.protect) {
			rc = renameat(pfd, hidden, pfd, en->id) < 0
				     ? rp_err_set(err, -errno, "session %s became busy while being "
						  "deleted and cannot be put back from %s: %s: rename "
						  "it back by hand", path, hidden, strerror(errno))
				     : NOW_PROTECTED;
		} else {
			rc = walk(pfd, hidden, pst.st_dev, 0, true, freed, path, err);
		}
	}
	if (pfd >= 0)
		close(pfd);
	free(path);
	return rc;
}

static bool over(const struct rp_retention_opts *o, const struct rp_retention_stats *st)
{
	return (o->max_count && st->sessions > o->max_count) ||
	       (o->max_bytes && st->bytes > o->max_bytes);
}

int rp_retention_enforce(const struct rp_retention_opts *o, struct rp_retention_stats *st,
			 struct rp_err *err)
{
	*st = (struct rp_retention_stats){ 0 };
	int logfd = open(o->logdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (logfd < 0)
		return errno == ENOENT ? 0 : rp_err_set(err, -errno, "cannot read log directory %s: "
							"%s: check its permissions", o->logdir,
							strerror(errno));
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct pass p = { .o = o, .now_ns = wall_ns(&now), .err = err };
	DIR *runs = fdopendir(dup(logfd));
	if (!runs) {
		close(logfd);
		return rp_err_set(err, -errno, "cannot read log directory %s: %s", o->logdir,
				  strerror(errno));
	}
	struct dirent *r;
	while ((r = readdir(runs)))
		if (r->d_name[0] != '.')
			scan_run(&p, logfd, r->d_name);
	closedir(runs);

	if (p.n) /* p.e is NULL when there are none */
		qsort(p.e, p.n, sizeof(*p.e), oldest_first);
	for (size_t i = 0; i < p.n; i++) {
		st->sessions++;
		st->bytes += p.e[i].bytes;
	}
	/* The newest of the sessions not protected otherwise stays whatever
	 * the quota: it may be the snapshot just taken. */
	size_t newest = p.n;
	while (newest > 0 && p.e[newest - 1].protect)
		newest--;
	for (size_t i = 0; i + 1 < newest && over(o, st); i++) {
		const struct entry *en = &p.e[i];
		if (en->protect)
			continue;
		uint64_t freed = 0;
		struct rp_err why = { 0 };
		int rc = delete_session(&p, logfd, en, &freed, &why);
		if (rc < 0) {
			report(&p, en->run, en->id, freed, &why);
			st->bytes -= freed < en->bytes ? freed : en->bytes;
			continue;
		}
		if (rc == NOW_PROTECTED)
			continue;
		st->sessions--;
		st->bytes -= en->bytes;
		if (rc == DELETED) {
			st->deleted++;
			st->deleted_bytes += en->bytes;
			report(&p, en->run, en->id, en->bytes, NULL);
		}
	}
	st->over_quota = over(o, st);
	for (size_t i = 0; i < p.n; i++) {
		free(p.e[i].run);
		free(p.e[i].id);
	}
	free(p.e);
	close(logfd);
	return p.rc;
}

int rp_retention_keep(const char *session_dir, struct rp_err *err)
{
	char path[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s/" RP_RETENTION_KEEP_FILE, session_dir) >=
	    sizeof(path))
		return rp_err_set(err, -ENAMETOOLONG, "session path too long: %s", session_dir);
	int fd = open(path, O_CREAT | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (fd < 0)
		return rp_err_set(err, -errno, "cannot create %s: %s: check that the session "
				  "exists and the log directory is writable", path, strerror(errno));
	close(fd);
	return 0;
}

bool rp_retention_kept(const char *session_dir)
{
	char path[PATH_MAX];
	struct stat st;
	return (size_t)snprintf(path, sizeof(path), "%s/" RP_RETENTION_KEEP_FILE, session_dir) <
		       sizeof(path) &&
	       lstat(path, &st) == 0;
}

/* ---- the check at start ---- */

/* The file system of path, or of its nearest existing parent (a log
 * directory is created with its first session). */
static int file_system(const char *path, struct statvfs *vfs, dev_t *dev)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", path);
	for (;;) {
		struct stat st;
		if (stat(p, &st) == 0 && statvfs(p, vfs) == 0) {
			*dev = st.st_dev;
			return 0;
		}
		if (errno != ENOENT)
			return -errno;
		char *slash = strrchr(p, '/');
		if (!slash)
			snprintf(p, sizeof(p), ".");
		else
			slash[slash == p] = '\0'; /* "/a" -> "/" */
	}
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

int rp_retention_check_space(const struct rp_disk_plan *p, char *msg, size_t len)
{
	struct statvfs rv, lv;
	dev_t rdev, ldev;
	int rc = file_system(p->state_dir, &rv, &rdev);
	if (rc == 0)
		rc = file_system(p->logdir, &lv, &ldev);
	if (rc < 0)
		return rc;
	uint64_t rfree = (uint64_t)rv.f_bavail * rv.f_frsize;
	uint64_t lfree = (uint64_t)lv.f_bavail * lv.f_frsize;
	/* Without a quota, sessions grow until the disk is full: nothing to
	 * weigh up. */
	uint64_t quota = p->max_bytes, held = quota ? p->logdir_bytes : 0;
	char budgets[32], q[32], have[32];
	rp_format_size(p->ring_budgets, budgets, sizeof(budgets));
	rp_format_size(quota, q, sizeof(q));
	msg[0] = '\0';
	if (rdev == ldev) {
		uint64_t avail = add_sat(add_sat(rfree, p->ring_held), held);
		if (add_sat(p->ring_budgets, quota) <= avail)
			return 0;
		rp_format_size(avail, have, sizeof(have));
		snprintf(msg, len, "ring budgets (%s)%s%s%s exceed the %s free on the file system of "
			 "%s and %s (counting what they hold there now): lower [rings] budget%s", budgets,
			 quota ? " + session quota (" : "", quota ? q : "", quota ? ")" : "", have,
			 p->state_dir, p->logdir, quota ? " or [sessions] max_bytes" : "");
		return 1;
	}
	uint64_t ravail = add_sat(rfree, p->ring_held), lavail = add_sat(lfree, held);
	size_t n = 0;
	if (p->ring_budgets > ravail) {
		rp_format_size(ravail, have, sizeof(have));
		n = (size_t)snprintf(msg, len, "ring budgets (%s) exceed the %s free on the file "
				     "system of %s (counting what the rings hold now): lower [rings] "
				     "budget", budgets, have, p->state_dir);
	}
	if (quota > lavail && n < len) {
		rp_format_size(lavail, have, sizeof(have));
		snprintf(msg + n, len - n, "%ssession quota (%s) exceeds the %s free on the file "
			 "system of %s (counting what sessions hold now): lower [sessions] max_bytes",
			 n ? "; " : "", q, have, p->logdir);
	}
	return msg[0] ? 1 : 0;
}
