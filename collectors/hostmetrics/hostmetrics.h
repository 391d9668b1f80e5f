/* Host metrics: CPU utilisation from /proc/stat and memory from
 * /proc/meminfo, read at an interval and handed on as counter events of
 * pid 0, tid 0:
 *
 *   cpu_util          percent of the whole host busy since the last reading
 *   cpu_util/cpuN     the same for CPU N (a "family/member" name: exporters
 *                     group counters by the part before the '/')
 *   host_mem_used     bytes, MemTotal - MemAvailable
 *   host_mem_available bytes, MemAvailable
 *
 * Utilisation needs two readings, so the first poll gives memory only.
 * Single threaded. */
#ifndef RINGPROF_HOSTMETRICS_H
#define RINGPROF_HOSTMETRICS_H

#include <stdint.h>

#include "err.h"
#include "event.h"

struct rp_hostmetrics;

/* proc_root is where proc is mounted ("/proc"; another directory in
 * tests); interval_ns how often poll reads it.  Fails when stat or
 * meminfo cannot be read there. */
RP_MUST_CHECK int rp_hostmetrics_new(const char *proc_root, uint64_t interval_ns,
		       struct rp_hostmetrics **out, struct rp_err *err);
void rp_hostmetrics_free(struct rp_hostmetrics *h);

/* When interval_ns has passed since the last reading (or at the first
 * call), read and hand each counter, stamped now_ns, to fn.  Returns how
 * many counters, 0 when not due, or a negative errno (a file unreadable
 * or malformed; the error from fn). */
RP_MUST_CHECK int rp_hostmetrics_poll(struct rp_hostmetrics *h, uint64_t now_ns, rp_event_fn fn,
			void *ctx, struct rp_err *err);
/* When poll reads next (host clock ns; 0 before the first poll), so that
 * a caller waiting between polls does not sleep past it. */
uint64_t rp_hostmetrics_due_ns(const struct rp_hostmetrics *h);

#endif
