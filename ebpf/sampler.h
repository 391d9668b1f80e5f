/* The eBPF CPU sampler: a BPF program on a perf event per online CPU that
 * records, for every sample of a non-idle task, the time, pid, tid, cpu,
 * comm and the kernel and user stacks (frame-pointer walk) into a BPF ring
 * buffer, which the caller drains with rp_sampler_poll on a timer.
 *
 * Needs CAP_BPF and CAP_PERFMON (or root).  Single threaded: one thread
 * calls every function on a sampler.  libbpf reports a program the kernel
 * rejects (the verifier's log) on stderr, through its default printer.
 * CPUs brought online after rp_sampler_open are not sampled. */
#ifndef RINGPROF_SAMPLER_H
#define RINGPROF_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "event.h"

#define RP_SAMPLER_HZ_MAX 10000

struct rp_sampler_opts {
	unsigned frequency_hz;   /* samples per second per CPU, 1..RP_SAMPLER_HZ_MAX; 0: 99 */
	unsigned max_depth;      /* frames per stack, kernel + user, 1..RP_STACK_MAX; 0: RP_STACK_MAX */
	const uint32_t *pids;    /* when npids > 0: sample only these processes (tgids) */
	size_t npids;            /* at most 65536 */
	const char *cgroup_path; /* when set: sample only tasks in this cgroup v2 directory or below */
	unsigned ringbuf_bytes;  /* BPF ring buffer: a power of two, 4 KiB..1 GiB; 0: 4 MiB */
	/* When to copy the user stack for a CFI unwind (x86-64):
	 * enum rp_sampler_stack_copy in sampler_record.h; 0: when the
	 * frame-pointer walk looks cut short. */
	unsigned stack_copy;
};

/* A sample's user registers and the top of its user stack, copied by the
 * BPF program: bytes holds [sp, sp + len). */
struct rp_user_stack {
	uint64_t ip, sp, bp;
	const uint8_t *bytes;
	size_t len;
};

struct rp_sampler_stats {
	uint64_t samples;        /* handed to poll callbacks */
	uint64_t lost;           /* dropped in BPF: the ring buffer was full */
	uint64_t polls;
	/* Run time of the BPF program, counted only while BPF statistics are
	 * on (sysctl kernel.bpf_stats_enabled=1 or a BPF_ENABLE_STATS fd). */
	uint64_t bpf_run_ns, bpf_run_count;
	unsigned frequency_hz;
	bool hardware_event;     /* cycles; false: the cpu-clock software event */
};

struct rp_sampler;

RP_MUST_CHECK int rp_sampler_open(const struct rp_sampler_opts *opts, struct rp_sampler **out,
		    struct rp_err *err);
/* Re-opens the perf events at hz; on failure the old ones stay. */
RP_MUST_CHECK int rp_sampler_set_frequency(struct rp_sampler *s, unsigned hz, struct rp_err *err);

/* A CPU sample: ts in host-clock (CLOCK_MONOTONIC) ns, name = the thread's
 * comm, u.sample.frames leaf first with the kernel frames first.  User
 * frames come from a frame-pointer walk: past code built without frame
 * pointers the last ones can be garbage.  Borrowed: valid during the call
 * only.  Return 0 to go on, a negative errno to stop the poll, which then
 * returns it (that sample is consumed). */
typedef int (*rp_sample_fn)(void *ctx, const struct rp_event *ev);

/* Hands every sample the ring buffer holds to fn, without blocking.
 * Returns how many, or a negative errno. */
long rp_sampler_poll(struct rp_sampler *s, rp_sample_fn fn, void *ctx);

/* During a poll callback: the Python frames of the sample handed to it,
 * leaf first, as the BPF program read them (sampler_record.h: RP_PY_FRAME
 * with bit 0 marking the outermost frame of each interpreter loop run);
 * returns how many.  Only processes given to rp_sampler_set_python have
 * any. */
unsigned rp_sampler_python_frames(const struct rp_sampler *s, const uint64_t **frames);

/* During a poll callback: the user stack copied with the sample handed to
 * it, or NULL (none copied: see rp_sampler_opts.stack_copy). */
const struct rp_user_stack *rp_sampler_user_stack(const struct rp_sampler *s);

/* Process pid's frame-pointer walks are whole although they look cut
 * short: copy no stack of it (stack_copy 0) until until_ns (host clock).
 * 0 or a negative errno. */
RP_MUST_CHECK int rp_sampler_trust_fp(struct rp_sampler *s, uint32_t pid, uint64_t until_ns);

/* Walk the Python frames of process pid's samples as py says (NULL: stop
 * walking them).  0 or a negative errno (-E2BIG: 4096 processes already). */
struct rp_py_proc;
RP_MUST_CHECK int rp_sampler_set_python(struct rp_sampler *s, uint32_t pid, const struct rp_py_proc *py);

void rp_sampler_stats(const struct rp_sampler *s, struct rp_sampler_stats *st);
void rp_sampler_close(struct rp_sampler *s);

#endif
