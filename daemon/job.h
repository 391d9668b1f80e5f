/* Looking at one job: the processes a session keeps the events of, from
 * the pids and the cgroup a snapshot or session request names.
 *
 * A cgroup is read when the session is taken (a snapshot: once; a session:
 * at its start and at its stop): its processes and those of the cgroups
 * below it then.  A process that ran in the window but left the cgroup or
 * exited before either reading is not in the filter; name it by pid. */
#ifndef RINGPROF_JOB_H
#define RINGPROF_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Processes one job filter may hold: bounds the daemon's memory. */
#define RP_JOB_PIDS_MAX 65536

/* A sorted set of pids, without repeats. */
struct rp_pidset {
	uint32_t *pids;
	size_t n, cap;
};

/* -E2BIG past RP_JOB_PIDS_MAX, -ENOMEM. */
RP_MUST_CHECK int rp_pidset_add(struct rp_pidset *s, uint32_t pid, struct rp_err *err);
void rp_pidset_free(struct rp_pidset *s);

/* Where the cgroup2 hierarchy is mounted (/sys/fs/cgroup, or
 * /sys/fs/cgroup/unified on a hybrid host), from mountinfo, a file like
 * /proc/self/mountinfo.  -ENOENT when none is. */
RP_MUST_CHECK int rp_job_cgroup_root(const char *mountinfo, char *out, size_t len,
				     struct rp_err *err);

/* Adds the processes of cgroup `path` and of every cgroup below it.  path
 * is either as /proc/PID/cgroup shows it ("/system.slice/x.service",
 * relative to cgroup_root, the cgroup2 mount) or the directory's full
 * path below cgroup_root.  Components are opened without following links;
 * "." and ".." are refused.  -ENOENT (no such cgroup), -EINVAL, -E2BIG. */
RP_MUST_CHECK int rp_job_add_cgroup(struct rp_pidset *s, const char *cgroup_root, const char *path,
				    struct rp_err *err);

#endif
