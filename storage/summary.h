/* A session summarised for the terminal: its window and coverage, events
 * and drops per device, annotation ranges per name (count, mean, p50,
 * p99, max: step times at a glance), counters and instants.
 *
 * Reads the session's manifest and chunk files as a stream: memory
 * depends on the number of distinct names and threads, not on the
 * session's size. */
#ifndef RINGPROF_SUMMARY_H
#define RINGPROF_SUMMARY_H

#include <stdio.h>

#include "err.h"

int rp_summary_write(const char *session_dir, FILE *out, struct rp_err *err);

#endif
