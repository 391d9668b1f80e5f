/* Safe file operations beneath a trusted directory (safefs.h).  Every
 * openat below names one component (no '/'), with O_NOFOLLOW, relative to
 * a directory fd opened the same way: the walk cannot leave the tree nor
 * follow a link on any kernel, which is what openat2's
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS would give, plus the owner check
 * and mkdirat on the way that openat2 cannot do. */
#include "safefs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int rp_safefs_open_root(const char *path, mode_t mode, bool create, struct rp_err *err)
{
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof(p), "%s", path) >= sizeof(p))
		return rp_err_set(err, -ENAMETOOLONG, "directory path too long: %s", path);
	/* mkdir -p: the root and its parents are the administrator's. */
	for (char *s = p + 1; create; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			return rp_err_set(err, -errno, "cannot create %s: %s: create it or choose "
					  "another directory", p, strerror(errno));
		*s = c;
		if (!c)
			break;
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return rp_err_set(err, -errno, "cannot open directory %s: %s: check that it exists "
				  "and its permissions", path, strerror(errno));
	return fd;
}

/* Why component `name` of dirfd (shown as shown) cannot be used. */
static int refuse(int code, const char *shown, const char *name, uid_t owner,
		  struct rp_err *err)
{
	switch (-code) {
	case ELOOP:
		return rp_err_set(err, code, "%s/%s is a symbolic link: ringprof never follows links "
				  "in the log directory; remove it (someone with write access to "
				  "%s planted it?)", shown, name, shown);
	case EPERM:
		return rp_err_set(err, code, "%s/%s is owned by neither uid %u (the daemon's user) "
				  "nor uid %u (the owner of the directory it is in): ringprof only "
				  "writes into directories of its own; remove or chown it, or use "
				  "another name", shown, name, (unsigned)geteuid(), (unsigned)owner);
	case ENOTDIR:
		return rp_err_set(err, code, "%s/%s is not a directory: remove it or use another "
				  "name", shown, name);
	case EACCES:
	case EROFS:
		return rp_err_set(err, code, "cannot create or open %s/%s: %s: check the "
				  "permissions of %s", shown, name, strerror(-code), shown);
	case ENOSPC:
	case EDQUOT:
		return rp_err_set(err, code, "cannot create %s/%s: %s: free space on its file "
				  "system", shown, name, strerror(-code));
	default:
		return rp_err_set(err, code, "cannot open %s/%s: %s", shown, name, strerror(-code));
	}
}

/* One component: made when asked, opened without following a link,
 * owned by the daemon's user or `owner` when asked. */
static int step(int dirfd, const char *name, mode_t mode, unsigned flags, uid_t owner)
{
	if (!strcmp(name, ".") || !strcmp(name, "..") || !name[0])
		return -EINVAL;
	if ((flags & RP_SAFEFS_CREATE) && mkdirat(dirfd, name, mode) < 0 && errno != EEXIST)
		return -errno;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		struct stat st;
		/* O_DIRECTORY | O_NOFOLLOW on a link gives ENOTDIR: say ELOOP. */
		if (e == ENOTDIR && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(st.st_mode))
			e = ELOOP;
		return -e;
	}
	struct stat st;
	int e = fstat(fd, &st) < 0 ? errno
		: (flags & RP_SAFEFS_OWNED) && st.st_uid != geteuid() && st.st_uid != owner ? EPERM
		: 0;
	if (e) {
		close(fd);
		return -e;
	}
	return fd;
}

int rp_safefs_open_dir(int dirfd, const char *rel, mode_t mode, unsigned flags,
		       const char *shown, struct rp_err *err)
{
	char path[PATH_MAX], where[PATH_MAX];
	if ((size_t)snprintf(path, sizeof(path), "%s", rel) >= sizeof(path))
		return rp_err_set(err, -ENAMETOOLONG, "path too long: %s/%s", shown, rel);
	snprintf(where, sizeof(where), "%s", shown);
	/* The trusted directory's owner may own what is below it too: on NFS
	 * with root_squash, root's directories belong to the squashed uid. */
	struct stat top;
	if (fstat(dirfd, &top) < 0)
		return rp_err_set(err, -errno, "cannot examine %s: %s", shown, strerror(errno));
	int fd = dirfd;
	char *save = NULL;
	for (char *name = strtok_r(path, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
		int next = step(fd, name, mode, flags, top.st_uid);
		if (next < 0) {
			refuse(next, where, name, top.st_uid, err);
			if (fd != dirfd)
				close(fd);
			return next;
		}
		if (fd != dirfd)
			close(fd);
		fd = next;
		size_t n = strlen(where);
		snprintf(where + n, sizeof(where) - n, "/%s", name);
	}
	return fd == dirfd ? rp_err_set(err, -EINVAL, "empty directory path under %s", shown) : fd;
}

int rp_safefs_open_beneath(const char *root, const char *path, unsigned flags,
			   struct rp_err *err)
{
	size_t n = strlen(root);
	while (n > 1 && root[n - 1] == '/')
		n--;
	if (strncmp(path, root, n) != 0 || path[n] != '/')
		return rp_err_set(err, -EINVAL, "%s is not beneath %s", path, root);
	int rfd = rp_safefs_open_root(root, 0, false, err);
	if (rfd < 0)
		return rfd;
	int fd = rp_safefs_open_dir(rfd, path + n + 1, 0, flags, root, err);
	close(rfd);
	return fd;
}

int rp_safefs_open_regular(int dirfd, const char *name, uint64_t max, const char *shown,
			   struct rp_err *err)
{
	/* O_NONBLOCK: opening a FIFO for reading would wait for a writer. */
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? refuse(-ELOOP, shown, name, 0, err)
				      : rp_err_set(err, -errno, "cannot open %s/%s: %s", shown, name,
						   strerror(errno));
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) < 0)
		rc = rp_err_set(err, -errno, "cannot examine %s/%s: %s", shown, name, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = rp_err_set(err, -EINVAL, "%s/%s is not a regular file (a FIFO, device or "
				"directory): not written by ringprof; remove it", shown, name);
	else if ((uint64_t)st.st_size > max)
		rc = rp_err_set(err, -EFBIG, "%s/%s is %llu bytes, more than the %llu ringprof reads "
				"back: not written by ringprof; remove it", shown, name,
				(unsigned long long)st.st_size, (unsigned long long)max);
	else if (fcntl(fd, F_SETFL, 0) < 0)
		rc = rp_err_set(err, -errno, "cannot read %s/%s: %s", shown, name, strerror(errno));
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

int rp_safefs_read(int dirfd, const char *name, size_t max, char **out, size_t *len,
		   const char *shown, struct rp_err *err)
{
	*out = NULL;
	int fd = rp_safefs_open_regular(dirfd, name, max, shown, err);
	if (fd < 0)
		return fd;
	/* The size is checked again while reading: the file may grow. */
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap + 1);
	int rc = buf ? 0 : rp_err_set(err, -ENOMEM, "out of memory reading %s/%s", shown, name);
	while (rc == 0) {
		if (n == cap) {
			char *grown = cap < max ? realloc(buf, (cap = cap * 2 < max ? cap * 2 : max) + 1)
						: NULL;
			if (!grown) {
				rc = n >= max ? rp_err_set(err, -EFBIG, "%s/%s grew past %zu bytes while "
							   "read: not written by ringprof", shown,
							   name, max)
					      : rp_err_set(err, -ENOMEM, "out of memory reading %s/%s",
							   shown, name);
				break;
			}
			buf = grown;
		}
		ssize_t got = read(fd, buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			rc = rp_err_set(err, -errno, "cannot read %s/%s: %s", shown, name,
					strerror(errno));
		else if (got == 0)
			break;
		else
			n += (size_t)got;
	}
	close(fd);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return 0;
}

int rp_safefs_tmp_open(int dirfd, const char *final, mode_t mode, struct rp_safefs_tmp *t,
		       const char *shown, struct rp_err *err)
{
	t->dirfd = dirfd;
	t->fd = -1;
	for (int tries = 0; tries < 16; tries++) {
		uint64_t r;
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			return rp_err_set(err, -EIO, "cannot draw a random temporary name: %s",
					  strerror(errno));
		if ((size_t)snprintf(t->name, sizeof(t->name), ".%s" RP_SAFEFS_TMP_TAG "%016llx",
				     final, (unsigned long long)r) >= sizeof(t->name))
			return rp_err_set(err, -ENAMETOOLONG, "file name too long: %s/%s", shown, final);
		t->fd = openat(dirfd, t->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       mode);
		if (t->fd >= 0)
			return 0;
		if (errno != EEXIST)
			break;
	}
	int e = errno;
	return rp_err_set(err, -e, "cannot create a temporary file for %s/%s: %s%s", shown, final,
			  strerror(e), e == EACCES ? " (write access to the directory is needed)"
				       : e == ENOSPC ? " (free space on its file system)" : "");
}

int rp_safefs_tmp_publish(struct rp_safefs_tmp *t, const char *final, const char *shown,
			  struct rp_err *err)
{
	int rc = 0;
	if (t->fd >= 0) {
		rc = fsync(t->fd) < 0 ? -errno : 0;
		if (close(t->fd) < 0 && rc == 0)
			rc = -errno;
		t->fd = -1;
	}
	if (rc < 0)
		rp_err_set(err, rc, "cannot write %s/%s: %s%s", shown, final, strerror(-rc),
			   rc == -ENOSPC ? " (free space on its file system)" : "");
	else if (renameat(t->dirfd, t->name, t->dirfd, final) < 0)
		rc = rp_err_set(err, -errno, "cannot rename %s/%s to %s: %s", shown, t->name, final,
				strerror(errno));
	else {
		t->name[0] = '\0';
		return fsync(t->dirfd) < 0 ? rp_err_set(err, -errno, "cannot sync directory %s: %s",
							 shown, strerror(errno)) : 0;
	}
	rp_safefs_tmp_discard(t);
	return rc;
}

void rp_safefs_tmp_discard(struct rp_safefs_tmp *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	if (t->name[0])
		(void)unlinkat(t->dirfd, t->name, 0);
	t->name[0] = '\0';
}

bool rp_safefs_is_tmp_name(const char *name)
{
	return name[0] == '.' && strstr(name, RP_SAFEFS_TMP_TAG) != NULL;
}
