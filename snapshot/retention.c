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
#include "safefs.h"
#include "session.h"

/* Sessions are flat; a tree deeper than this is not one of ours. */
#define MAX_DEPTH 16
/* Listings of a directory being removed while writers may still add to it. */
#define REMOVE_LISTINGS 4
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
	/* A writer that opened its file before the session was hidden (the
	 * exporter, still writing a format) may add one after the listing:
	 * list again rather than fail on a directory that is not empty. */
	for (int listing = 0; rc == 0 && listing < REMOVE_LISTINGS; listing++) {
		struct dirent *e;
		rewinddir(d);
		while (rc == 0 && (e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				rc = walk(dirfd(d), e->d_name, dev, depth + 1, remove, bytes, top,
					  err);
		if (rc < 0 || !remove || unlinkat(parent, name, AT_REMOVEDIR) == 0 ||
		    errno == ENOENT)
			break;
		if (errno != ENOTEMPTY || listing + 1 == REMOVE_LISTINGS)
			rc = rp_err_set(err, -errno, "cannot delete %s in %s: %s", name, top,
					strerror(errno));
	}
	closedir(d);
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
			/* A FIFO or a huge file under a manifest's name is no
			 * manifest: never waited on, never read whole. */
			char *text = NULL;
			size_t len = 0;
			json_t *m = rp_safefs_read(dirfd(d), e->d_name, RP_SAFEFS_META_MAX, &text, &len,
						   name, NULL) == 0 ? json_loadb(text, len, 0, NULL)
								    : NULL;
			json_t *c = json_object_get(json_object_get(m, "trigger"), "created_wall_ns");
			manifest = manifest || json_is_object(m);
			if (json_is_integer(c) && json_integer_value(c) < created)
				created = json_integer_value(c);
			json_decref(m);
			free(text);
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

	if (p.n) /* qsort wants a non-null array even when empty */
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

int rp_retention_keep(const char *logdir, const char *session_dir, struct rp_err *err)
{
	/* Reached from the log directory without following a link, and
	 * O_NONBLOCK: a FIFO planted as KEEP is not waited on. */
	struct rp_err why = { 0 };
	int dfd = rp_safefs_open_beneath(logdir, session_dir, 0, &why);
	if (dfd < 0)
		return rp_err_set(err, dfd, "cannot mark %s as kept: %s%s", session_dir, why.msg,
				  dfd == -ENOENT ? ": check that the session exists" : "");
	/* Retention goes by the name alone: whatever is there keeps it. */
	struct stat st;
	bool there = fstatat(dfd, RP_RETENTION_KEEP_FILE, &st, AT_SYMLINK_NOFOLLOW) == 0;
	int fd = there ? -1 : openat(dfd, RP_RETENTION_KEEP_FILE,
				     O_CREAT | O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0640);
	int rc = 0;
	if (!there && fd < 0)
		rc = rp_err_set(err, -errno, "cannot create %s/" RP_RETENTION_KEEP_FILE ": %s: check "
				"that the session exists and the log directory is writable",
				session_dir, strerror(errno));
	if (fd >= 0)
		close(fd);
	close(dfd);
	return rc;
}

bool rp_retention_kept(const char *session_dir)
{
	char path[PATH_MAX];
	struct stat st;
	return (size_t)snprintf(path, sizeof(path), "%s/" RP_RETENTION_KEEP_FILE, session_dir) <
		       sizeof(path) &&
	       lstat(path, &st) == 0;
}

/* ---- leftovers at start ---- */

struct leftovers {
	const struct rp_retention_opts *o;
	const char *file_host;  /* this host as file names spell it */
	size_t hlen;
	int removed;
	int rc;
	struct rp_err *err;
};

/* "<file_host>.<rest>" (a leading '.' of a temporary name skipped) of
 * this host and no other: another host of the session whose name is
 * longer but starts the same ("vm" and "vm.b") owns what matches it. */
static bool of_this_host(const struct leftovers *l, const char *name, char **names, size_t n)
{
	const char *base = name + (name[0] == '.');
	if (strncmp(base, l->file_host, l->hlen) || base[l->hlen] != '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		const char *suffix = ends_with(names[i], RP_SESSION_OPEN_SUFFIX) ? RP_SESSION_OPEN_SUFFIX
				     : ends_with(names[i], RP_SESSION_MANIFEST_SUFFIX)
					     ? RP_SESSION_MANIFEST_SUFFIX : NULL;
		size_t other = suffix ? strlen(names[i]) - strlen(suffix) : 0;
		if (other > l->hlen && !strncmp(base, names[i], other) && base[other] == '.')
			return false;
	}
	return true;
}

/* A temporary file: safefs's, or the older "<name>.tmp<PID>" and
 * "<host>.manifest.json.tmp". */
static bool temporary(const char *name)
{
	const char *t = strstr(name, ".tmp");
	while (t && strstr(t + 1, ".tmp"))
		t = strstr(t + 1, ".tmp");
	return rp_safefs_is_tmp_name(name) || (t && strspn(t + 4, "0123456789") == strlen(t + 4));
}

static void remove_leftover(struct leftovers *l, int sfd, const char *dir, const char *name)
{
	struct stat st;
	char path[PATH_MAX + NAME_MAX + 2];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
		return;
	struct rp_err why = { 0 };
	if (unlinkat(sfd, name, 0) < 0 && errno != ENOENT) {
		rp_err_set(&why, -errno, "cannot remove leftover %s: %s", path, strerror(errno));
		if (l->rc == 0 && (l->rc = why.code) && l->err)
			*l->err = why;
	} else {
		l->removed++;
	}
	if (l->o->report)
		l->o->report(l->o->ctx, path, (uint64_t)st.st_blocks * 512, why.code ? &why : NULL);
}

/* This host's leftovers in session directory id of pfd: temporary files;
 * without this host's manifest (it died writing the session) also its
 * .open marker and .chunks files, and the directory once empty. */
static void clean_session(struct leftovers *l, int pfd, const char *run, const char *id)
{
	int sfd = openat(pfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = sfd >= 0 ? fdopendir(dup(sfd)) : NULL;
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char **grown = realloc(names, (n + 1) * sizeof(*names));
		if (!grown || !(grown[n] = strdup(e->d_name))) {
			names = grown ? grown : names;
			break; /* out of memory: what was listed is still cleaned */
		}
		names = grown;
		n++;
	}
	if (d)
		closedir(d);
	char dir[PATH_MAX], manifest[NAME_MAX + 1];
	snprintf(dir, sizeof(dir), "%s/%s/plugins/profile/%s", l->o->logdir, run, id);
	snprintf(manifest, sizeof(manifest), "%s" RP_SESSION_MANIFEST_SUFFIX, l->file_host);
	bool complete = false;
	for (size_t i = 0; i < n; i++)
		complete = complete || !strcmp(names[i], manifest);
	bool part = false;
	for (size_t i = 0; sfd >= 0 && i < n; i++) {
		if (!of_this_host(l, names[i], names, n))
			continue;
		bool crashed = !complete && (ends_with(names[i], RP_SESSION_OPEN_SUFFIX) ||
					     ends_with(names[i], ".chunks"));
		if (temporary(names[i]) || crashed)
			remove_leftover(l, sfd, dir, names[i]);
		part = part || crashed;
	}
	/* Left for other hosts' parts, if any remain. */
	if (part)
		(void)unlinkat(pfd, id, AT_REMOVEDIR);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (sfd >= 0)
		close(sfd);
}

int rp_retention_clean_leftovers(const struct rp_retention_opts *o, const char *host,
				 struct rp_err *err)
{
	char file_host[NAME_MAX + 1];
	snprintf(file_host, sizeof(file_host), "%s", host);
	rp_session_file_host(file_host);
	struct leftovers l = { .o = o, .file_host = file_host, .hlen = strlen(file_host),
			       .err = err };
	int logfd = open(o->logdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *runs = logfd >= 0 ? fdopendir(dup(logfd)) : NULL;
	if (!runs) {
		int e = errno;
		if (logfd >= 0)
			close(logfd);
		return e == ENOENT ? 0 : rp_err_set(err, -e, "cannot read log directory %s: %s: "
						    "check its permissions", o->logdir, strerror(e));
	}
	struct dirent *r;
	while ((r = readdir(runs))) {
		int pfd = r->d_name[0] == '.' ? -1 : open_profile(logfd, r->d_name);
		DIR *d = pfd >= 0 ? fdopendir(dup(pfd)) : NULL;
		struct dirent *s;
		while (d && (s = readdir(d)))
			if (s->d_name[0] != '.')
				clean_session(&l, pfd, r->d_name, s->d_name);
		if (d)
			closedir(d);
		if (pfd >= 0)
			close(pfd);
	}
	closedir(runs);
	close(logfd);
	return l.rc < 0 ? l.rc : l.removed;
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
