// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The CPU sampler: runs on a per-CPU perf event (cycles or cpu-clock, in
 * frequency mode) and writes one record per sample of a non-idle task:
 * time, pid, tid, cpu, comm, kernel stack then user stack.  Dual-licensed
 * because bpf_get_stack is a GPL-only helper. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "sampler_record.h"

#define FRAMES_BYTES (RP_SAMPLER_DEPTH_MAX * 8)

/* Set by the loader before load.  Read-only once loaded, so the verifier
 * knows them and drops the branches of filters that are off. */
const volatile __u32 max_bytes = FRAMES_BYTES; /* max_depth * 8 */
const volatile bool filter_pids = false;
const volatile bool filter_cgroup = false;

/* Samples the ring buffer had no room for. */
__u64 lost = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by the loader */
} events SEC(".maps");

/* tgids to sample when filter_pids is set; the value is unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u8);
	__uint(max_entries, 1); /* resized by the loader */
} pids SEC(".maps");

/* The cgroup (v2) whose tasks, descendants included, are sampled when
 * filter_cgroup is set. */
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} cgroup SEC(".maps");

/* A record is built here, then only its used part is copied into the
 * ring buffer: the reserve API would need the full size up front. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct rp_sampler_record);
	__uint(max_entries, 1);
} scratch SEC(".maps");

SEC("perf_event")
int rp_on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, pid = id >> 32;

	/* An idle CPU would otherwise yield a full sample stream. */
	if (tid == 0)
		return 0;
	if (filter_pids && !bpf_map_lookup_elem(&pids, &pid))
		return 0;
	if (filter_cgroup && bpf_current_task_under_cgroup(&cgroup, 0) != 1)
		return 0;

	__u32 zero = 0;
	struct rp_sampler_record *r = bpf_map_lookup_elem(&scratch, &zero);
	if (!r)
		return 0;
	r->ts = bpf_ktime_get_ns();
	r->pid = pid;
	r->tid = tid;
	r->cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(r->comm, sizeof(r->comm));

	/* Kernel frames first (none when the sample hit user mode), then the
	 * user stack in what is left of max_depth.  The clamps give the
	 * verifier bounds for the offset and size of the second call. */
	long kret = bpf_get_stack(ctx, r->frames, max_bytes, 0);
	__u64 kbytes = kret > 0 && kret <= FRAMES_BYTES ? kret : 0;
	__u64 room = max_bytes > kbytes ? max_bytes - kbytes : 0;
	if (room > FRAMES_BYTES)
		room = FRAMES_BYTES;
	long uret = bpf_get_stack(ctx, (char *)r->frames + kbytes, room, BPF_F_USER_STACK);
	__u64 ubytes = uret > 0 && uret <= FRAMES_BYTES ? uret : 0;
	r->nkernel = kbytes / 8;
	r->nuser = ubytes / 8;

	/* No wakeup: user space polls on a timer, a wakeup per sample would
	 * cost more than the sample. */
	__u64 size = __builtin_offsetof(struct rp_sampler_record, frames) + kbytes + ubytes;
	if (bpf_ringbuf_output(&events, r, size, BPF_RB_NO_WAKEUP))
		__sync_fetch_and_add(&lost, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
