#include "job.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safefs.h"

/* cgroup.procs of a large cgroup: a few bytes per pid. */
#define PROCS_MAX (16u * RP_JOB_PIDS_MAX)
/* Deepest cgroup tree walked: the kernel's default limit is far deeper,
 * but no job nests this far. */
#define DEPTH_MAX 32

int rp_pidset_add(struct rp_pidset *s, uint32_t pid, struct rp_err *err)
{
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->pids[mid] < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->n && s->pids[lo] == pid)
		return 0;
	if (s->n == RP_JOB_PIDS_MAX)
		return rp_err_set(err, -E2BIG, "the job has more than %d processes, as many as one "
				  "session filter holds: name a smaller cgroup", RP_JOB_PIDS_MAX);
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		uint32_t *grown = realloc(s->pids, cap * sizeof(*grown));
		if (!grown)
			return rp_err_set(err, -ENOMEM, "out of memory for the job's processes");
		s->pids = grown;
		s->cap = cap;
	}
	memmove(s->pids + lo + 1, s->pids + lo, (s->n - lo) * sizeof(*s->pids));
	s->pids[lo] = pid;
	s->n++;
	return 0;
}

void rp_pidset_free(struct rp_pidset *s)
{
	free(s->pids);
	*s = (struct rp_pidset){ 0 };
}

/* The pids in dirfd's cgroup.procs, one per line. */
static int add_procs(struct rp_pidset *s, int dirfd, const char *shown, struct rp_err *err)
{
	char *text;
	int rc = rp_safefs_read(dirfd, "cgroup.procs", PROCS_MAX, &text, NULL, shown, err);
	if (rc < 0)
		return rc;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line && rc == 0;
	     line = strtok_r(NULL, "\n", &save)) {
		char *end;
		errno = 0;
		unsigned long pid = strtoul(line, &end, 10);
		if (errno || end == line || *end || pid == 0 || pid > UINT32_MAX)
			rc = rp_err_set(err, -EINVAL, "%s/cgroup.procs holds '%s', not a process id: "
					"is %s a cgroup?", shown, line, shown);
		else
			rc = rp_pidset_add(s, (uint32_t)pid, err);
	}
	free(text);
	return rc;
}

/* cgfd's processes and those of the cgroups below it (cgfd is closed). */
static int add_tree(struct rp_pidset *s, int cgfd, const char *shown, unsigned depth,
		    struct rp_err *err)
{
	int rc = add_procs(s, cgfd, shown, err);
	DIR *dir = rc == 0 ? fdopendir(cgfd) : NULL;
	if (!dir) {
		if (rc == 0)
			rc = rp_err_set(err, -errno, "cannot list %s: %s", shown, strerror(errno));
		close(cgfd);
		return rc;
	}
	struct dirent *e;
	while (rc == 0 && (e = readdir(dir))) {
		if (e->d_type != DT_DIR || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (depth == DEPTH_MAX) {
			rc = rp_err_set(err, -EINVAL, "%s nests cgroups more than %d deep: name a "
					"cgroup further down", shown, DEPTH_MAX);
			break;
		}
		char below[4096];
		if ((size_t)snprintf(below, sizeof(below), "%s/%s", shown, e->d_name) >= sizeof(below)) {
			rc = rp_err_set(err, -ENAMETOOLONG, "cgroup path too long under %s", shown);
			break;
		}
		int fd = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		/* A cgroup removed while walked held no processes any more. */
		if (fd < 0 && errno == ENOENT)
			continue;
		rc = fd < 0 ? rp_err_set(err, -errno, "cannot open %s: %s", below, strerror(errno))
			    : add_tree(s, fd, below, depth + 1, err);
	}
	closedir(dir);
	return rc;
}

int rp_job_cgroup_root(const char *mountinfo, char *out, size_t len, struct rp_err *err)
{
	/* From "/", so that messages name the file as given. */
	int top = mountinfo[0] == '/' ? open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : AT_FDCWD;
	char *text;
	int rc = rp_safefs_read(top, mountinfo + (mountinfo[0] == '/'), RP_SAFEFS_META_MAX, &text,
				NULL, "", err);
	if (top >= 0)
		close(top);
	if (rc < 0)
		return rc;
	rc = rp_err_set(err, -ENOENT, "this host has no cgroup v2 hierarchy mounted (%s lists "
			"none): filtering by cgroup needs one", mountinfo);
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		/* id parent dev root MOUNT_POINT options [tags] - TYPE source super */
		char *sep = strstr(line, " - "), *f[5], *fsave = NULL;
		if (!sep || strncmp(sep, " - cgroup2 ", 11) != 0)
			continue;
		*sep = '\0';
		unsigned n = 0;
		for (char *t = strtok_r(line, " ", &fsave); t && n < 5; t = strtok_r(NULL, " ", &fsave))
			f[n++] = t;
		/* A mount point with spaces comes escaped (\040): not one to guess at. */
		if (n == 5 && f[4][0] == '/' && !strchr(f[4], '\\') &&
		    (size_t)snprintf(out, len, "%s", f[4]) < len) {
			rc = 0;
			break;
		}
	}
	free(text);
	return rc;
}

int rp_job_add_cgroup(struct rp_pidset *s, const char *cgroup_root, const char *path,
		      struct rp_err *err)
{
	size_t rootlen = strlen(cgroup_root);
	if (!strncmp(path, cgroup_root, rootlen) && (path[rootlen] == '/' || !path[rootlen]))
		path += rootlen;
	while (*path == '/')
		path++;
	char shown[4096];
	if ((size_t)snprintf(shown, sizeof(shown), "%s/%s", cgroup_root, path) >= sizeof(shown))
		return rp_err_set(err, -ENAMETOOLONG, "cgroup path too long: %s", path);
	int root = rp_safefs_open_root(cgroup_root, 0, false, err);
	if (root < 0)
		return root;
	int fd = *path ? rp_safefs_open_dir(root, path, 0, 0, cgroup_root, err) : dup(root);
	close(root);
	if (fd == -EINVAL)
		return rp_err_set(err, -EINVAL, "cgroup '%s': give a path below %s without '.' or "
				  "'..' components, e.g. /system.slice/train.service", path, cgroup_root);
	if (fd == -ENOENT)
		return rp_err_set(err, -ENOENT, "no cgroup %s: `cat /proc/PID/cgroup` shows a "
				  "process's cgroup", shown);
	if (fd < 0)
		return fd;
	return add_tree(s, fd, shown, 0, err);
}
