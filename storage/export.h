/* Sessions written in the formats people open them with, from their raw
 * chunks, one file per host in the session directory:
 *
 *   <host>.xplane.pb    XSpace: XProf / TensorBoard's Profile tab
 *   <host>.pftrace      Perfetto's native trace (ui.perfetto.dev)
 *   <host>.cpu.pb.gz    pprof CPU profile (go tool pprof)
 *   <host>.json         trace events, counters and CPU samples for scripts
 *   <host>.summary.txt  the text summary (see summary.h)
 *   <host>.flamegraph.svg  CPU samples as an interactive flame graph
 *   <host>.folded       CPU samples as collapsed stacks (flamegraph.pl,
 *                       inferno, speedscope)
 *
 * Each file is written under a temporary name and renamed into place, so
 * a reader never sees half a file and a failed export leaves no file.
 * Every format streams: memory does not grow with the session's size. */
#ifndef RINGPROF_EXPORT_H
#define RINGPROF_EXPORT_H

#include <jansson.h>
#include <stdbool.h>

#include "err.h"

#include "formats.h"

struct rp_reader_filter; /* reader.h */

/* How the formats are written; all zero: the defaults. */
struct rp_export_opts {
	enum rp_perfetto_grouping perfetto_grouping;
	/* Set (the daemon's log directory): rp_export_session reaches the
	 * session directory from it without following a link. */
	const char *beneath;
	/* Only these processes' events, in every format (see reader.h);
	 * NULL: every process. */
	const struct rp_reader_filter *filter;
	/* rp_export_session calls it after each format of each host, with
	 * the session directory's fd and the file written in it, or the
	 * error (err not NULL) when it was not; false stops before the next
	 * format.  NULL: none. */
	bool (*progress)(void *ctx, const char *host, enum rp_export_format f, int dirfd,
			 const char *file, const struct rp_err *err);
	void *progress_ctx;
};

/* One host's part (manifest: an element of rp_session_manifests) of the
 * session in session_dir, in format f, to path; opts NULL: the defaults. */
RP_MUST_CHECK int rp_export_host(const char *session_dir, json_t *manifest, enum rp_export_format f,
		   const char *path, const struct rp_export_opts *opts, struct rp_err *err);

/* Every format in mask for host's part of the session, written into
 * the session directory as <host><suffix>; host NULL: every host's;
 * opts NULL: the defaults.  Goes on past a format that fails; returns
 * the first error. */
RP_MUST_CHECK int rp_export_session(const char *session_dir, const char *host, unsigned mask,
		      const struct rp_export_opts *opts, struct rp_err *err);

#endif
