/* Files under a directory that others may write to (the log directory is
 * group-writable): nothing below a trusted root is reached by a path
 * string.  Each directory is opened with openat(O_DIRECTORY | O_NOFOLLOW)
 * relative to its parent's fd, one component at a time, so a planted
 * symbolic link is refused instead of followed; new files are made with
 * O_CREAT | O_EXCL | O_NOFOLLOW under unpredictable names and renamed into
 * place; files read back are opened only when they are regular files,
 * without blocking on a FIFO, and up to a size.  Errors name the path and
 * the fix. */
#ifndef RINGPROF_SAFEFS_H
#define RINGPROF_SAFEFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

/* Largest manifest (or other small metadata file) read back: a bigger one
 * is not ours. */
#define RP_SAFEFS_META_MAX (16u << 20)

/* The trusted root: a path the administrator configured (links in it are
 * followed), created with its missing parents, mode `mode`, when create. */
RP_MUST_CHECK int rp_safefs_open_root(const char *path, mode_t mode, bool create, struct rp_err *err);

enum {
	RP_SAFEFS_CREATE = 1, /* make missing directories, mode `mode` */
	/* refuse a directory owned by neither the effective uid nor the
	 * owner of dirfd, the directory the walk starts from */
	RP_SAFEFS_OWNED = 2,
};

/* Directory rel ("a/b/c", no "." or "..") beneath dirfd, whose path
 * `shown` names dirfd in errors.  No component may be a symbolic link.
 * Returns the new fd or -errno (ELOOP for a link, EPERM for a directory
 * of another owner with RP_SAFEFS_OWNED, ENOTDIR, ENOENT, ...). */
RP_MUST_CHECK int rp_safefs_open_dir(int dirfd, const char *rel, mode_t mode, unsigned flags,
		       const char *shown, struct rp_err *err);

/* Directory path, which must lie beneath root (both as the configuration
 * spells them): root opened as trusted, the rest walked as above. */
RP_MUST_CHECK int rp_safefs_open_beneath(const char *root, const char *path, unsigned flags,
			   struct rp_err *err);

/* Regular file `name` in dirfd for reading, at most `max` bytes long:
 * never a link, a FIFO, a device or a directory, and the open never
 * blocks.  -ELOOP (a link), -EINVAL (not a regular file), -EFBIG (too big). */
RP_MUST_CHECK int rp_safefs_open_regular(int dirfd, const char *name, uint64_t max, const char *shown,
			   struct rp_err *err);
/* The whole of such a file into a new NUL-terminated buffer. */
RP_MUST_CHECK int rp_safefs_read(int dirfd, const char *name, size_t max, char **out, size_t *len,
		   const char *shown, struct rp_err *err);

/* A file being written under a temporary name beside its final one:
 * ".<final>.tmp-<random>", made with O_EXCL | O_NOFOLLOW. */
struct rp_safefs_tmp {
	int dirfd;  /* borrowed */
	int fd;     /* the caller may close it (set -1) before publishing */
	char name[256]; /* "" once published or discarded */
};
/* Temporary names start with "." and contain this: leftovers of a crash
 * are recognised by it. */
#define RP_SAFEFS_TMP_TAG ".tmp-"

RP_MUST_CHECK int rp_safefs_tmp_open(int dirfd, const char *final, mode_t mode, struct rp_safefs_tmp *t,
		       const char *shown, struct rp_err *err);
/* fsync and close t->fd (unless the caller did), rename the file to
 * `final` (replacing a file or link there, never writing through one),
 * fsync the directory.  On failure the temporary file is removed. */
RP_MUST_CHECK int rp_safefs_tmp_publish(struct rp_safefs_tmp *t, const char *final, const char *shown,
			  struct rp_err *err);
/* Remove an unpublished temporary file; safe to call twice. */
void rp_safefs_tmp_discard(struct rp_safefs_tmp *t);
/* Whether a name is one of those temporary names. */
bool rp_safefs_is_tmp_name(const char *name);

#endif
