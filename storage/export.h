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

enum rp_export_format {
	RP_EXPORT_XPLANE = 0,
	RP_EXPORT_PERFETTO = 1,
	RP_EXPORT_PPROF = 2,
	RP_EXPORT_JSON = 3,
	RP_EXPORT_SUMMARY = 4,
	RP_EXPORT_FLAMEGRAPH = 5,
	RP_EXPORT_FOLDED = 6,
	RP_EXPORT_NFORMATS = 7,
};
#define RP_EXPORT_ALL ((1u << RP_EXPORT_NFORMATS) - 1)
/* What a session gets unless told otherwise: the flame graphs, which
 * another CPU pass would cost every session, are written on demand
 * (ringprof export --format flamegraph). */
#define RP_EXPORT_DEFAULT ((1u << RP_EXPORT_FLAMEGRAPH) - 1)

/* "xplane", "perfetto", "pprof", "json", "summary", "flamegraph",
 * "folded". */
const char *rp_export_format_name(enum rp_export_format f);
/* The file name after "<host>": ".xplane.pb", ... */
const char *rp_export_suffix(enum rp_export_format f);
/* A comma-separated list of format names, "all" or "none", into a mask
 * of (1 << format).  -EINVAL with a message naming the known formats. */
RP_MUST_CHECK int rp_export_parse_formats(const char *list, unsigned *mask, struct rp_err *err);

/* What the Perfetto trace's tracks hang under (see perfetto.c): */
enum rp_perfetto_grouping {
	RP_PERFETTO_BY_PROCESS = 0, /* process -> thread; device -> stream */
	RP_PERFETTO_BY_DEVICE = 1,  /* the recording ring -> process -> thread; its streams */
	RP_PERFETTO_BY_THREAD = 2,  /* each thread on its own; device -> stream */
	RP_PERFETTO_NGROUPINGS = 3,
};

/* "process", "device", "thread". */
const char *rp_export_grouping_name(enum rp_perfetto_grouping g);
/* One of those names into *g.  -EINVAL with a message naming them. */
RP_MUST_CHECK int rp_export_parse_grouping(const char *name, enum rp_perfetto_grouping *g,
			     struct rp_err *err);

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
