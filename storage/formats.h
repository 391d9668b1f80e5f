/* Export formats and Perfetto groupings by name: what users type
 * ([sessions] exports, ringprof export --format/--group) and what the
 * files are called.  A library of its own, apart from the exporters, so
 * the configuration parses and prints these names without linking them. */
#ifndef RINGPROF_FORMATS_H
#define RINGPROF_FORMATS_H

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

#endif
