/* A session summarised for the terminal: its window and coverage, events
 * and drops per device, annotation ranges per name (count, mean, p50,
 * p99, max: step times at a glance), counters and instants, per device
 * ring its busy share and its API calls and device activities by name
 * (count, total, p50, p99, max: docs/neuron.md), the top
 * functions of the CPU samples (self and total, symbolized here: see
 * symbolize.h) and CPU time per process (each sample stands for
 * 1 / cpu_sampler_hz of a second, the rate in force when it was taken), the
 * XLA ops (modules, steps) with the most time per device;
 * for a session several hosts wrote, each host's part in turn.  A process
 * whose stacks look cut short (most of its samples one or two user frames
 * deep) gets a warning naming the likely cause.
 *
 * Reads the session's manifest and chunk files as a stream, twice (the
 * processes' metadata first): memory depends on the number of distinct
 * names, threads, processes and sampled addresses, and on the symbol
 * tables of the files they fall in, not on the session's size. */
#ifndef RINGPROF_SUMMARY_H
#define RINGPROF_SUMMARY_H

#include <stdio.h>

#include "err.h"

struct rp_reader_filter; /* reader.h */

/* filter: only those processes' events (NULL: all), said in the header. */
RP_MUST_CHECK int rp_summary_write(const char *session_dir, const struct rp_reader_filter *filter, FILE *out,
		     struct rp_err *err);

#endif
