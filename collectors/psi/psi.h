/* Pressure stall information (/proc/pressure/{cpu,memory,io}): the share
 * of time tasks stalled on a resource.  Each file holds a "some" line
 * (some tasks stalled) and, except cpu before Linux 5.13, a "full" line
 * (all non-idle tasks stalled):
 *
 *   some avg10=1.53 avg60=0.87 avg300=0.26 total=1234567
 *
 * avg10: percent of the last 10 s; total: stall time in microseconds
 * since boot. */
#ifndef RINGPROF_PSI_H
#define RINGPROF_PSI_H

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

struct rp_psi_line {
	bool present;
	double avg10;        /* percent, 0..100 */
	uint64_t total_us;
};

struct rp_psi {
	struct rp_psi_line some, full;
};

/* Parse the text of one pressure file.  -EBADMSG, naming what and where,
 * for anything else: an unknown line, a missing or malformed field, an
 * avg10 outside 0..100, no "some" line. */
RP_MUST_CHECK int rp_psi_parse(const char *text, struct rp_psi *out, struct rp_err *err);

/* Read and parse path; errors name the file. */
RP_MUST_CHECK int rp_psi_read(const char *path, struct rp_psi *out, struct rp_err *err);

#endif
