/* LTTng-UST snapshot sessions for the benchmarks that compare with LTTng
 * (bench/append, bench/snapshot): run lttng commands, start a session
 * daemon when none runs, record the ringprof_bench tracepoints
 * (append_tp.h) of this process into a snapshot-mode session and time
 * `lttng snapshot record`.  Needs lttng-tools; starting a session daemon
 * needs root. */
#ifndef RINGPROF_BENCH_LTTNG_SESSION_H
#define RINGPROF_BENCH_LTTNG_SESSION_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct bench_lttng {
	char name[32];          /* session name */
	char dir[PATH_MAX];     /* snapshot output directory */
	pid_t sessiond;         /* the session daemon started here; 0: one ran already */
};

/* Runs cmd through the shell; returns its exit status, with the start of
 * its output (stdout and stderr) in out. */
int bench_sh(const char *cmd, char *out, size_t cap);

/* Creates snapshot session `name` writing into a new directory under
 * parent, with a channel made with channel_opts (lttng enable-channel
 * options; NULL: LTTng's default channel), enables the ringprof_bench
 * events, starts it and waits until this process's probes are armed.
 * Returns 0, or -1 with the reason in why (nothing is left behind). */
int bench_lttng_start(struct bench_lttng *l, const char *name, const char *parent,
		      const char *channel_opts, char *why, size_t why_cap);

/* `lttng snapshot record`: the command's wall time and the bytes it
 * wrote, which are then removed again.  With durable_seconds, also the
 * time until the output is on disk: LTTng does not sync it, so this adds
 * an fsync of each file and directory it wrote.  Returns 0, or -1 with
 * why. */
int bench_lttng_snapshot(struct bench_lttng *l, double *seconds, double *durable_seconds,
			 uint64_t *bytes, char *why, size_t why_cap);

/* Destroys the session and its output, and stops the session daemon if
 * bench_lttng_start started it. */
void bench_lttng_end(struct bench_lttng *l);

#endif
