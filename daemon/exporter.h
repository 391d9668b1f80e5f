/* Session exports ([sessions] exports), written off the session thread.
 *
 * A complete session's manifest lists each format to export as pending
 * (session.h); the exporter writes them on a thread of its own, one
 * session at a time in the order queued, and records each format in the
 * manifest as written (with its size) or failed (with the error) as soon
 * as it is done (docs/export.md).  The queue in memory is bounded: a
 * session that finds it full stays pending on disk, as does every session
 * queued when the daemon stops or dies.  The exporter takes them up by
 * scanning the log directory for this host's pending exports: at start,
 * and whenever its queue ran empty after one was turned away. */
#ifndef RINGPROF_EXPORTER_H
#define RINGPROF_EXPORTER_H

#include <stdint.h>

#include "err.h"
#include "export.h"

struct rp_exporter_opts {
	const char *logdir;
	const char *host;            /* whose part of each session is exported */
	enum rp_perfetto_grouping perfetto_grouping;
	unsigned queue_max;          /* sessions queued in memory, at least 1 */
};

struct rp_exporter_stats {
	uint64_t written, failed;    /* sessions (failed: a format or more), since start */
	unsigned queued;             /* sessions waiting in memory */
};

struct rp_exporter;

/* Start the thread; its first job is the scan for pending exports, so
 * the start never waits for the log directory. */
RP_MUST_CHECK int rp_exporter_start(const struct rp_exporter_opts *opts, struct rp_exporter **out,
		      struct rp_err *err);
/* Queue the exports of the session in dir (those its manifest lists as
 * pending).  Never blocks: with the queue full it waits on disk. */
void rp_exporter_queue(struct rp_exporter *e, const char *dir);
/* Write the formats in mask of the session in dir now, on the calling
 * thread, each recorded in its manifest as the thread records its own:
 * a format the session does not list as pending (one it was opened
 * without) is then never written twice.  Returns the first error. */
RP_MUST_CHECK int rp_exporter_export_now(struct rp_exporter *e, const char *dir, unsigned mask,
					 struct rp_err *err);
void rp_exporter_stats(struct rp_exporter *e, struct rp_exporter_stats *st);
/* Stop without waiting for the exports queued (they stay pending on disk
 * for the next start): the format being written gets a short grace to
 * finish, then is left to the process's exit.  NULL is fine. */
void rp_exporter_stop(struct rp_exporter *e);

#endif
