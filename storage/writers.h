/* The format writers behind export.h, one per file: each reads the
 * session through a reader and writes its format to out, with the
 * options (struct rp_export_opts) it has, if any.  Errors are a
 * negative errno with a message (-EIO when out fails). */
#ifndef RINGPROF_WRITERS_H
#define RINGPROF_WRITERS_H

#include <stdio.h>

#include "err.h"
#include "export.h"
#include "reader.h"

/* scratch_dir: where XSpace's sorted runs of events are spilled (an
 * unnamed file; about the size of the output). */
RP_MUST_CHECK int rp_write_xplane(struct rp_reader *r, FILE *out, const char *scratch_dir,
		    struct rp_err *err);
RP_MUST_CHECK int rp_write_perfetto(struct rp_reader *r, FILE *out, enum rp_perfetto_grouping grouping,
		      struct rp_err *err);
RP_MUST_CHECK int rp_write_pprof(struct rp_reader *r, FILE *out, struct rp_err *err);
RP_MUST_CHECK int rp_write_json(struct rp_reader *r, FILE *out, struct rp_err *err);
RP_MUST_CHECK int rp_write_summary(struct rp_reader *r, FILE *out, struct rp_err *err);
/* flamegraph.c: the CPU samples as an SVG flame graph and as folded
 * stacks. */
RP_MUST_CHECK int rp_write_flamegraph(struct rp_reader *r, FILE *out, struct rp_err *err);
RP_MUST_CHECK int rp_write_folded(struct rp_reader *r, FILE *out, struct rp_err *err);

#endif
