/* A synthetic session with known content, for the exporters' tests and
 * bench/export: steps of nested annotation ranges on two threads, host
 * and device counters, CPU samples 60/30/10 in three functions of this
 * program, GPU kernels, copies and runtime API calls; optionally a second
 * process whose samples fall in a C++ function and whose stacks are cut
 * short.  The content is spelled out in make_session.c. */
#ifndef RINGPROF_SYNTH_H
#define RINGPROF_SYNTH_H

#include <stddef.h>

#define SYNTH_T0 1000000000ull
#define SYNTH_WALL_OFFSET 1750000000000000000ll
#define SYNTH_MS 1000000ull

/* Samples per step of the worker process (pid 4244); 0, the default: no
 * worker. */
extern unsigned synth_worker_samples;
/* Its process name ("worker"): any bytes, to test how exports escape. */
extern const char *synth_worker_name;

/* Writes OUTDIR/plugins/profile/synth/<host>.{manifest.json,host.chunks,
 * gpu0.chunks}; the session directory goes to dir.  0 or -errno, with a
 * message on stderr. */
int synth_session(const char *outdir, const char *host, unsigned steps,
		  unsigned samples_per_step, char *dir, size_t dir_len);

#endif
