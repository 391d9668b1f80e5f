/* What ringprofd records about each sampled process so that its stacks
 * can be symbolized later, at export, even after it exited: its name,
 * command line, and executable mappings with the build-id of each file.
 *
 * Read from /proc when the sampler first sees a process, and again when a
 * sample's user-space leaf lies outside every mapping recorded (the
 * process mapped new code: dlopen).  Handed on as events:
 *
 *   RP_EV_PROCESS_NAME     /proc/PID/comm (the sample's comm when that
 *                          is gone and the sample is of the main thread)
 *   RP_EV_PROCESS_CMDLINE  /proc/PID/cmdline, arguments joined by spaces
 *   RP_EV_MAPPING          each executable mapping of a file (and [vdso]),
 *                          at most RP_PROCINFO_MAX_MAPPINGS a process; and
 *                          each function its JIT compiler registered through
 *                          GDB's JIT interface (a mapped file defines
 *                          __jit_debug_descriptor: LLVM's ORC JIT, XLA on
 *                          CPU), named RP_JIT_MAPPING_PREFIX "FUNCTION",
 *                          at most RP_PROCINFO_MAX_JIT
 *
 * Build-ids are read with libelf from the mapped file and cached per
 * (device, inode, mtime).  Single threaded. */
#ifndef RINGPROF_PROCINFO_H
#define RINGPROF_PROCINFO_H

#include <stdint.h>

#include "err.h"
#include "event.h"

#define RP_PROCINFO_MAX_MAPPINGS 256
/* JIT-compiled functions named a process, at most (jitreg.h). */
#define RP_PROCINFO_MAX_JIT 4096

struct rp_procinfo_stats {
	uint64_t processes;   /* described since creation */
	uint64_t scans;       /* reads of a maps file */
	uint64_t mappings;    /* mapping events handed on */
	uint64_t build_ids;   /* build-ids read from files (cache misses) */
	uint64_t jit_functions; /* JIT-compiled functions handed on */
};

struct rp_procinfo;

/* proc_root is where proc is mounted ("/proc"; another directory in
 * tests). */
RP_MUST_CHECK int rp_procinfo_new(const char *proc_root, struct rp_procinfo **out, struct rp_err *err);
void rp_procinfo_free(struct rp_procinfo *p);

/* For a CPU sample, before it is recorded: describe its process if it is
 * new, or re-read its mappings if the sample's user leaf lies outside all
 * of them (at most once a second per process, backing off to once a
 * minute while nothing new turns up).  Events are stamped with the
 * sample's time.  Returns 0, or the first error of fn. */
RP_MUST_CHECK int rp_procinfo_sample(struct rp_procinfo *p, const struct rp_event *sample, rp_event_fn fn,
		       void *ctx);

/* Forget the processes that exited (no <proc_root>/PID any more), calling
 * gone for each, so that a reused pid is described afresh. */
void rp_procinfo_reap(struct rp_procinfo *p, void (*gone)(void *ctx, uint32_t pid), void *ctx);

void rp_procinfo_stats(const struct rp_procinfo *p, struct rp_procinfo_stats *st);

#endif
