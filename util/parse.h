/* Parsing and validation of what users type: durations, sizes, times and
 * names.  Every failure fills rp_err with the offending text and the fix. */
#ifndef RINGPROF_PARSE_H
#define RINGPROF_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* "500ms", "30s", "5m", "1h", "250us", "10ns", "1.5s".  A bare number is
 * refused (say which unit).  Zero, negative, and overflow are errors. */
RP_MUST_CHECK int rp_parse_duration(const char *text, uint64_t *ns, struct rp_err *err);
/* "64MiB", "1GiB", "512KiB", "4096" (bytes), also "64M"/"64MB" as MiB. */
RP_MUST_CHECK int rp_parse_size(const char *text, uint64_t *bytes, struct rp_err *err);
/* RFC 3339 ("2026-11-22T14:03:07Z", fractional seconds and +hh:mm
 * offsets allowed) or Unix ns as a decimal integer -> wall-clock ns. */
RP_MUST_CHECK int rp_parse_time(const char *text, int64_t *wall_ns, struct rp_err *err);
/* A whole number in min..max, decimal, no sign: "99", "10000". */
RP_MUST_CHECK int rp_parse_uint(const char *text, unsigned min, unsigned max, unsigned *out,
		  struct rp_err *err);
/* "30s", "1.5s", "250ms", "2m30s"-style rendering for humans. */
void rp_format_duration(uint64_t ns, char *out, size_t len);
/* Bytes for humans: "512 B", "1.0 KiB", "4.2 GiB" (one decimal). */
void rp_format_size(uint64_t bytes, char *out, size_t len);
/* RFC 3339 UTC with nanoseconds: "2026-11-22T14:03:07.123456789Z". */
void rp_format_time(int64_t wall_ns, char *out, size_t len);

/* A session, run or device name: 1..max_len bytes of [A-Za-z0-9_.-], not
 * "." or "..", no leading '.'.  `what` names it in the message
 * ("session name"). */
RP_MUST_CHECK int rp_check_name(const char *name, size_t max_len, const char *what,
		  struct rp_err *err);

/* Session id from a wall-clock time, local-time free: UTC
 * "YYYY_MM_DD_HH_MM_SS" (the JAX/TF layout). */
void rp_session_id_from_time(int64_t wall_ns, char out[32]);

#endif
