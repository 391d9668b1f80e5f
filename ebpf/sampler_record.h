/* The record the BPF program writes into its ring buffer, shared by the
 * BPF side (types from vmlinux.h) and the loader (types from
 * <linux/types.h>). */
#ifndef RINGPROF_SAMPLER_RECORD_H
#define RINGPROF_SAMPLER_RECORD_H

/* Deepest stack, kernel + user frames; equals RP_STACK_MAX in event.h,
 * which the BPF side cannot include (no libc headers for -target bpf). */
#define RP_SAMPLER_DEPTH_MAX 127

struct rp_sampler_record {
	__u64 ts;            /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 pid, tid;      /* tgid and thread id */
	__u32 cpu;
	__u16 nkernel, nuser;
	char comm[16];
	/* nkernel kernel frames, then nuser user frames, leaf first.  Twice
	 * the deepest stack so the verifier can bound the user stack written
	 * after a kernel stack of unknown length; only the used part is
	 * submitted. */
	__u64 frames[2 * RP_SAMPLER_DEPTH_MAX];
};

#endif
