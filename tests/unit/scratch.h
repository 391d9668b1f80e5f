/* A scratch directory for a group of unit tests, removed with everything
 * in it (links removed, never followed). */
#ifndef RINGPROF_TEST_SCRATCH_H
#define RINGPROF_TEST_SCRATCH_H

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int scratch_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

/* /tmp/rp-<name>-XXXXXX into dir; 0 or -1. */
static inline int scratch_make(char *dir, size_t len, const char *name)
{
	snprintf(dir, len, "/tmp/rp-%s-XXXXXX", name);
	return mkdtemp(dir) ? 0 : -1;
}

/* snprintf that fails the test rather than cut a path short (cmocka.h
 * comes first). */
static inline void scratch_pathf(char *out, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline void scratch_pathf(char *out, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, len, fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < len);
}

static inline int scratch_remove(const char *dir)
{
	return nftw(dir, scratch_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* What an attacker with write access to a log directory plants: in
 * <dir>/<name> (made 0770) the link linkrun to <dir>/<name>-secret (made
 * 0700).  Both paths out, each len bytes; 0 or -1. */
static inline int scratch_linked_logdir(const char *dir, const char *name, char *logdir,
					char *secret, size_t len)
{
	char link[4096];
	if ((size_t)snprintf(logdir, len, "%s/%s", dir, name) >= len ||
	    (size_t)snprintf(secret, len, "%s/%s-secret", dir, name) >= len ||
	    (size_t)snprintf(link, sizeof(link), "%s/linkrun", logdir) >= sizeof(link))
		return -1;
	return mkdir(logdir, 0770) == 0 && mkdir(secret, 0700) == 0 && symlink(secret, link) == 0
		       ? 0 : -1;
}

#endif
