/* A scratch directory for a group of unit tests, removed with everything
 * in it (links removed, never followed). */
#ifndef RINGPROF_TEST_SCRATCH_H
#define RINGPROF_TEST_SCRATCH_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

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

static inline int scratch_remove(const char *dir)
{
	return nftw(dir, scratch_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
