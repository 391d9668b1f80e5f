/* Retention: keeps the log directory within a quota of bytes and of
 * sessions, deleting the oldest sessions first (by the earliest
 * trigger.created_wall_ns of their manifests; a directory without one by
 * its modification time).
 *
 * Sessions are the directories <logdir>/<run>/plugins/profile/<id>.
 * Never deleted: a session being written (a <host>.open marker younger
 * than RP_SESSION_OPEN_FRESH_NS, or no manifest yet and the directory
 * itself younger than that), one holding a KEEP file, and the newest of
 * the other sessions, so that a snapshot just taken stays readable even
 * when kept sessions fill the quota.  They all count against the quota.
 *
 * The walk never follows a symbolic link (a link inside a session is
 * deleted, not what it points to) and never enters another file system.
 * A session is renamed to a hidden name before its files go, so readers
 * see it whole or not at all; a removal cut short is finished by the next
 * pass.  Several daemons may enforce the same quota on a shared log
 * directory. */
#ifndef RINGPROF_RETENTION_H
#define RINGPROF_RETENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

#define RP_RETENTION_KEEP_FILE "KEEP"

struct rp_retention_opts {
	const char *logdir;
	uint64_t max_bytes;  /* disk usage, as du counts it; 0: no limit */
	uint64_t max_count;  /* sessions; 0: no limit */
	/* Called for every session deleted (err NULL) or that could not be
	 * deleted (err says why); path is the session directory. */
	void (*report)(void *ctx, const char *path, uint64_t bytes, const struct rp_err *err);
	void *ctx;
};

struct rp_retention_stats {
	uint64_t sessions, bytes;        /* in the log directory after the pass */
	uint64_t deleted, deleted_bytes; /* by this pass */
	bool over_quota;                 /* still over: what is left may not be deleted */
};

/* One pass.  A log directory that does not exist yet holds nothing.  Goes
 * on past a session it cannot delete and returns the first such error
 * (-errno with the message), stats filled all the same. */
RP_MUST_CHECK int rp_retention_enforce(const struct rp_retention_opts *o, struct rp_retention_stats *st,
			 struct rp_err *err);

/* Mark session directory session_dir, beneath logdir, as kept (its KEEP
 * file); idempotent.  Nothing below logdir is followed if a link. */
RP_MUST_CHECK int rp_retention_keep(const char *logdir, const char *session_dir, struct rp_err *err);
bool rp_retention_kept(const char *session_dir);

/* Leftovers of this host's daemon that died, removed at start: its
 * temporary files (partial exports, manifests), and where it left no
 * manifest (it died, or the disk filled, while writing the session) its
 * .open marker and .chunks files, and the session directory once empty.
 * Other hosts' files are never touched.  Call once at start, before any
 * session of this host can be open (the ring files' locks keep a second
 * daemon of this state directory out).  o->report is called for each file
 * removed (or not); the limits are not used.  Returns the number removed
 * or the first error (-errno), going on past it. */
RP_MUST_CHECK int rp_retention_clean_leftovers(const struct rp_retention_opts *o, const char *host,
				 struct rp_err *err);

/* What the daemon will hold on disk, for the check at start. */
struct rp_disk_plan {
	const char *state_dir;
	uint64_t ring_budgets;  /* every ring's budget, open or configured */
	uint64_t ring_held;     /* what the open ring files hold now */
	const char *logdir;
	uint64_t max_bytes;     /* the session quota; 0: none */
	uint64_t logdir_bytes;  /* what sessions hold now */
};

/* 1 with a warning naming sizes, file system and fix in msg when ring
 * budgets plus the session quota exceed the free space plus what they
 * hold now; 0 when they fit; -errno when no file system can be asked. */
RP_MUST_CHECK int rp_retention_check_space(const struct rp_disk_plan *p, char *msg, size_t len);

#endif
