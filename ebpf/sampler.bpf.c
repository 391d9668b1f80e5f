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
const volatile __u32 stack_copy = RP_STACK_COPY_CUT; /* enum rp_sampler_stack_copy */

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

/* Processes whose frame-pointer walks the daemon found whole, by tgid:
 * until when (bpf_ktime_get_ns) their stacks are not copied even when the
 * walk looks cut short (it stops in the C library's start code). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 4096);
} fp_whole SEC(".maps");

/* A record is built here, then only its used part is copied into the
 * ring buffer: the reserve API would need the full size up front. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct rp_sampler_record);
	__uint(max_entries, 1);
} scratch SEC(".maps");

#if defined(__TARGET_ARCH_x86)
/* On x86-64, user stacks are walked here, by frame pointer, as the
 * kernel's bpf_get_stack(BPF_F_USER_STACK) walks them, but from one copy
 * of the stack's top: the kernel reads each frame from user memory on its
 * own (two reads a frame, most of a deep stack's cost: 2.8 against 1.6 us
 * a sample of 24 frames in bench/overhead); frames beyond the copy are
 * read one by one.  32-bit tasks are walked as 64-bit ones: their frames
 * stop at the first that does not read. */
#define STACK_COPY 2048
#define STACK_WORDS (STACK_COPY / 8)

/* The walk's state lives here too, not on the stack: loaded afresh in
 * each step of bpf_loop, the verifier sees one step for all. */
struct stack_copy {
	__u64 words[STACK_WORDS];
	__u64 sp, copied; /* words holds [sp, sp + copied) */
	__u64 fp;
	__u32 at, end;    /* the next frame goes to r->frames[at], before end */
	/* For the stack copy: the user registers of this sample (valid),
	 * whether the walk stopped short of a thread's first frame (cut), and
	 * where the thread's stack ends (top, 0 when not known). */
	__u64 ip, bp, top;
	__u32 valid, cut;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct stack_copy);
	__uint(max_entries, 1);
} stack_copies SEC(".maps");

struct walk {
	struct stack_copy *w;
	struct rp_sampler_record *r;
};

/* One frame, {saved frame pointer, return address} at fp, into
 * r->frames[at]; 1 ends the walk. */
static long walk_frame(__u64 i, struct walk *c)
{
	struct stack_copy *w = c->w;
	__u64 next, ret, fp = w->fp, off = fp - w->sp;
	(void)i;
	/* A live frame lies above sp, 8-byte aligned: anything else is a
	 * register that code without frame pointers uses for its own ends,
	 * and reading there would cost a fault more often than not. */
	if (fp < w->sp || (fp & 7))
		return 1;
	if (off + 16 <= w->copied) {
		__u64 k = off / 8;
		next = w->words[k & (STACK_WORDS - 1)];
		ret = w->words[(k + 1) & (STACK_WORDS - 1)];
	} else {
		__u64 pair[2];
		if (bpf_probe_read_user(pair, sizeof(pair), (void *)fp))
			return 1;
		next = pair[0];
		ret = pair[1];
	}
	__u32 at = w->at;
	struct rp_sampler_record *r = c->r;
	if (!ret || at >= w->end || at >= 2 * RP_SAMPLER_DEPTH_MAX)
		return 1;
	r->frames[at] = ret;
	w->at = at + 1;
	/* A thread's first frame has a saved frame pointer of 0 (_start and
	 * clone clear it): the walk is whole there, or when the stack is full. */
	if (!next || at + 1 >= w->end)
		w->cut = 0;
	/* Callers' frames lie above: anything else is no frame chain. */
	if (next <= fp)
		return 1;
	w->fp = next;
	return 0;
}

/* Above the sampled thread's outermost frame: the main thread's first
 * frame (_start) lies right below its arguments (mm->start_stack, where
 * argc is), a glibc or musl thread's below its thread control block at the
 * top of its stack mapping (the fs base, pthread_self).  A copy of the
 * stack from sp up to here holds every frame, so the CFI unwind needs no
 * more: 1.4 KiB for the Python workload of bench/overhead, against 8 KiB. */
static __u64 stack_top(struct task_struct *task)
{
	if (task->pid == task->tgid) {
		struct mm_struct *mm = task->mm;
		/* Some of argv's pointers too: reads there are mapped. */
		return mm ? mm->start_stack + 64 : 0;
	}
	return task->thread.fsbase;
}

/* The user stack into frames[first..end): its ip, then the return
 * addresses up the frame-pointer chain.  Returns the frames written. */
static __u32 user_stack(struct bpf_perf_event_data *ctx, struct rp_sampler_record *r,
			__u32 first, __u32 end)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->flags & 0x00200000 /* PF_KTHREAD */ || first >= end ||
	    first >= 2 * RP_SAMPLER_DEPTH_MAX)
		return 0;
	/* The user registers: the sample's own, or those saved on entry to
	 * the kernel when it hit there. */
	__u64 ip, sp, fp;
	if ((*(volatile __u64 *)&ctx->regs.cs & 3) == 3) {
		ip = *(volatile __u64 *)&ctx->regs.ip;
		sp = *(volatile __u64 *)&ctx->regs.sp;
		fp = *(volatile __u64 *)&ctx->regs.bp;
	} else {
		struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(task);
		ip = u->ip;
		sp = u->sp;
		fp = u->bp;
	}
	r->frames[first] = ip;
	__u32 zero = 0;
	struct stack_copy *w = bpf_map_lookup_elem(&stack_copies, &zero);
	if (!w)
		return 1;
	w->sp = sp;
	w->fp = fp;
	w->at = first + 1;
	w->end = end;
	w->ip = ip;
	w->bp = fp;
	w->top = stack_top(task);
	w->valid = 1;
	w->cut = 1;
	/* A frame pointer that starts no walk (walk_frame) needs no copy:
	 * code without frame pointers mostly has one. */
	if (fp < sp || (fp & 7))
		return 1;
	/* Near the top of the stack the whole copy may not be mapped. */
	w->copied = 0;
	if (bpf_probe_read_user(w->words, STACK_COPY, (void *)sp) == 0)
		w->copied = STACK_COPY;
	else if (bpf_probe_read_user(w->words, STACK_COPY / 8, (void *)sp) == 0)
		w->copied = STACK_COPY / 8;
	struct walk c = { w, r };
	bpf_loop(RP_SAMPLER_DEPTH_MAX - 1, walk_frame, &c, 0);
	return w->at - first;
}

/* For the daemon's CFI unwinder (collectors/cpu/unwind.c): the user
 * registers and up to RP_SAMPLER_STACK_MAX bytes of the stack from sp at
 * byte off of r->frames, when stack_copy says so: up to the thread's
 * stack top when that lies within reach (stack_top), else the most that
 * reads, halving from RP_SAMPLER_STACK_MAX (a stack switched away from the
 * thread's own: signal stacks, coroutines).  Returns the stack bytes. */
static __u32 copy_stack(struct rp_sampler_record *r, __u32 pid, __u64 off)
{
	__u32 zero = 0;
	struct stack_copy *w = bpf_map_lookup_elem(&stack_copies, &zero);
	if (!w)
		return 0;
	__u32 valid = w->valid;
	w->valid = 0;
	if (!valid || stack_copy == RP_STACK_COPY_NEVER || off > sizeof(r->frames))
		return 0;
	if (stack_copy == RP_STACK_COPY_CUT) {
		__u64 *until = bpf_map_lookup_elem(&fp_whole, &pid);
		if (!w->cut || (until && bpf_ktime_get_ns() < *until))
			return 0;
	}
	struct rp_sampler_regs *regs = (struct rp_sampler_regs *)((__u8 *)r->frames + off);
	regs->ip = w->ip;
	regs->sp = w->sp;
	regs->bp = w->bp;
	__u8 *stack = (__u8 *)(regs + 1);
	__u64 len = w->top > w->sp ? (w->top - w->sp + 7) & ~7ull : 0;
	if (len && len <= RP_SAMPLER_STACK_MAX && bpf_probe_read_user(stack, len, (void *)w->sp) == 0)
		return len;
#pragma unroll
	for (__u32 n = RP_SAMPLER_STACK_MAX; n >= 512; n /= 2)
		if (bpf_probe_read_user(stack, n, (void *)w->sp) == 0)
			return n;
	return 0;
}
#else
/* Elsewhere the kernel walks it, into what is left of max_depth.  The
 * clamps give the verifier bounds for the offset and the size. */
static __u32 user_stack(struct bpf_perf_event_data *ctx, struct rp_sampler_record *r,
			__u32 first, __u32 end)
{
	__u64 kbytes = (__u64)first * 8;
	(void)end;
	if (kbytes > FRAMES_BYTES)
		return 0;
	__u64 room = max_bytes > kbytes ? max_bytes - kbytes : 0;
	if (room > FRAMES_BYTES)
		room = FRAMES_BYTES;
	long ret = bpf_get_stack(ctx, (char *)r->frames + kbytes, room, BPF_F_USER_STACK);
	return ret > 0 && ret <= FRAMES_BYTES ? (__u32)((__u64)ret / 8) : 0;
}

/* The registers are known on x86-64 only. */
static __u32 copy_stack(struct rp_sampler_record *r, __u32 pid, __u64 off)
{
	(void)r, (void)pid, (void)off;
	return 0;
}
#endif

/* Processes running CPython, by tgid: where their interpreter state is. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct rp_py_proc);
	__uint(max_entries, 4096);
} python SEC(".maps");

#if defined(__TARGET_ARCH_x86)
/* The Python walk's state, in a map (like stack_copies) so that the
 * frame read at once can be indexed by the version's offsets. */
struct py_walk {
	struct rp_py_proc py;
	__u64 ptr;       /* thread state while finding it, then the frame */
	__u64 self;      /* pthread_self of the sampled thread */
	__u64 lo;        /* window holds [lo, lo + len) of the data stack */
	__u32 len;
	__u32 first, at; /* Python frames go to r->frames[first..at) */
	__u32 found;     /* ptr is the sampled thread's state, in ts */
	__u8 ts[RP_PY_TS_READ];
	__u8 buf[RP_PY_FRAME_READ];
	__u8 window[RP_PY_WINDOW];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct py_walk);
	__uint(max_entries, 1);
} py_walks SEC(".maps");

struct py_ctx {
	struct py_walk *w;
	struct rp_sampler_record *r;
};

static __u64 read_u64(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

/* A field of the frame at f (RP_PY_FRAME_READ bytes); 0 past them. */
static __u64 frame_field(const __u8 *f, __u32 off, __u32 size)
{
	if (off > RP_PY_FRAME_READ - 8)
		return 0;
	__u64 v = *(const __u64 *)(f + off);
	return size == 8 ? v : size == 4 ? (__u32)v : (__u8)v;
}

/* A field of the thread state in ts; 0 past it. */
static __u64 ts_field(const struct py_walk *w, __u32 off)
{
	if (off > RP_PY_TS_READ - 8)
		return 0;
	return *(const __u64 *)(w->ts + off);
}

/* One thread state of the interpreter's list, read at once: stops at the
 * sampled thread's (found, ptr and ts on it) or at the list's end. */
static long py_find_thread(__u64 i, struct py_ctx *c)
{
	struct py_walk *w = c->w;
	__u32 n = w->py.ts_read;
	(void)i;
	if (n > RP_PY_TS_READ)
		n = RP_PY_TS_READ;
	if (bpf_probe_read_user(w->ts, n, (void *)w->ptr))
		return 1;
	if (ts_field(w, w->py.ts_thread_id) == w->self) {
		w->found = 1;
		return 1;
	}
	w->ptr = ts_field(w, w->py.ts_next);
	return w->ptr ? 0 : 1;
}

/* 3.11+: the top of the thread's data stack chunk, where its frames lie
 * one after another, into window with one read (up to RP_PY_WINDOW bytes
 * below the top, not below the chunk's start, and RP_PY_FRAME_READ above
 * it, for the last frame's fields, within the chunk): the frames there
 * cost no read of their own (docs/performance.md, "BPF time per Python
 * sample").  Frames elsewhere (generators', 3.12's shims on the C stack,
 * an older chunk's) are read one by one. */
static void py_window(struct py_walk *w)
{
	__u32 ds = w->py.ts_datastack;
	w->len = 0;
	if (!ds)
		return;
	__u64 chunk = ts_field(w, ds), top = ts_field(w, ds + 8), limit = ts_field(w, ds + 16);
	if (!chunk || chunk >= top || top > limit || limit >= 1ull << 56)
		return;
	__u64 hi = limit - top > RP_PY_FRAME_READ ? top + RP_PY_FRAME_READ : limit;
	__u64 lo = hi - chunk > RP_PY_WINDOW ? hi - RP_PY_WINDOW : chunk;
	__u64 len = hi - lo;
	if (len > RP_PY_WINDOW)
		return;
	if (bpf_probe_read_user(w->window, len, (void *)lo) == 0) {
		w->lo = lo;
		w->len = len;
	}
}

/* The frame at w->ptr: in the window, or read into buf. */
static const __u8 *py_frame_bytes(struct py_walk *w)
{
	__u64 off = w->ptr - w->lo;
	if (w->ptr >= w->lo && off <= RP_PY_WINDOW - RP_PY_FRAME_READ &&
	    off + RP_PY_FRAME_READ <= w->len)
		return w->window + off;
	if (bpf_probe_read_user(w->buf, RP_PY_FRAME_READ, (void *)w->ptr))
		return NULL;
	return w->buf;
}

/* One frame, leaf first, into r->frames[at]; 1 ends the walk. */
static long py_frame(__u64 i, struct py_ctx *c)
{
	struct py_walk *w = c->w;
	struct rp_sampler_record *r = c->r;
	(void)i;
	const __u8 *f = w->ptr ? py_frame_bytes(w) : NULL;
	if (!f)
		return 1;
	__u64 code = frame_field(f, w->py.fr_code, 8);
	__u32 at = w->at;
	if (w->py.entry_kind == RP_PY_ENTRY_SHIM &&
	    frame_field(f, w->py.fr_entry, 1) == RP_PY_OWNED_BY_CSTACK) {
		/* Below a run of the loop: the frame before was its outermost. */
		if (at > w->first && at - 1 < sizeof(r->frames) / 8)
			r->frames[at - 1] |= 1;
	} else if (code) {
		__u64 lasti, instr = frame_field(f, w->py.fr_instr, w->py.lasti_is_index ? 4 : 8);
		if (w->py.lasti_is_index)
			lasti = (__s32)instr < 0 ? 0 : instr;
		else
			lasti = instr > code + w->py.code_start ? (instr - code - w->py.code_start) / 2 : 0;
		if (lasti > RP_SAMPLER_PY_LASTI_MAX)
			lasti = RP_SAMPLER_PY_LASTI_MAX;
		bool entry = w->py.entry_kind == RP_PY_ENTRY_EVERY ||
			     (w->py.entry_kind == RP_PY_ENTRY_FLAG && frame_field(f, w->py.fr_entry, 1));
		if (at >= sizeof(r->frames) / 8 || at >= w->first + RP_SAMPLER_PY_MAX)
			return 1;
		r->frames[at] = RP_SAMPLER_PY_TAG | lasti << RP_SAMPLER_PY_LASTI_SHIFT |
				(code & RP_SAMPLER_PY_CODE_MASK & ~1ull) | entry;
		w->at = at + 1;
	}
	__u64 prev = frame_field(f, w->py.fr_previous, 8);
	if (prev == w->ptr)
		return 1;
	w->ptr = prev;
	return 0;
}

/* The Python frames of the sampled thread, if its process runs CPython,
 * into frames[first..): finds the thread's PyThreadState in the main
 * interpreter's list by pthread_self (the fs base on x86-64), then walks
 * its frames.  Returns the frames written. */
static __u32 python_stack(struct rp_sampler_record *r, __u32 pid, __u32 first)
{
	const struct rp_py_proc *py = bpf_map_lookup_elem(&python, &pid);
	__u32 zero = 0;
	struct py_walk *w = bpf_map_lookup_elem(&py_walks, &zero);
	if (!py || !w || first > 2 * RP_SAMPLER_DEPTH_MAX)
		return 0;
	w->py = *py;
	struct task_struct *task = bpf_get_current_task_btf();
	w->self = task->thread.fsbase;
	__u64 interp = read_u64(py->runtime + py->interp_head);
	w->ptr = interp ? read_u64(interp + py->threads_head) : 0;
	struct py_ctx c = { w, r };
	w->found = 0;
	if (!w->ptr || bpf_loop(256, py_find_thread, &c, 0) < 0 || !w->found)
		return 0;
	__u64 frame = ts_field(w, py->ts_frame);
	if (frame && py->cframe_frame != 0xffff)
		frame = read_u64(frame + py->cframe_frame);
	py_window(w);
	w->ptr = frame;
	w->first = w->at = first;
	bpf_loop(2 * RP_SAMPLER_PY_MAX, py_frame, &c, 0);
	return w->at - first;
}
#else
static __u32 python_stack(struct rp_sampler_record *r, __u32 pid, __u32 first)
{
	(void)r, (void)pid, (void)first;
	return 0;
}
#endif

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
	 * verifier bounds for what is submitted. */
	long kret = bpf_get_stack(ctx, r->frames, max_bytes, 0);
	__u64 kbytes = kret > 0 && kret <= FRAMES_BYTES ? kret : 0;
	r->nkernel = kbytes / 8;
	__u64 ubytes = (__u64)user_stack(ctx, r, r->nkernel, max_bytes / 8) * 8;
	barrier_var(ubytes); /* the clamp below stays for the verifier */
	if (ubytes > FRAMES_BYTES)
		ubytes = FRAMES_BYTES;
	r->nuser = ubytes / 8;
	__u64 pybytes = (__u64)python_stack(r, pid, r->nkernel + r->nuser) * 8;
	barrier_var(pybytes);
	if (pybytes > RP_SAMPLER_PY_MAX * 8)
		pybytes = RP_SAMPLER_PY_MAX * 8;
	r->npython = pybytes / 8;
	__u64 sbytes = copy_stack(r, pid, kbytes + ubytes + pybytes);
	barrier_var(sbytes);
	if (sbytes > RP_SAMPLER_STACK_MAX)
		sbytes = RP_SAMPLER_STACK_MAX;
	r->stack_bytes = sbytes;
	if (sbytes)
		sbytes += sizeof(struct rp_sampler_regs);

	/* No wakeup: user space polls on a timer, a wakeup per sample would
	 * cost more than the sample. */
	__u64 size = __builtin_offsetof(struct rp_sampler_record, frames) + kbytes + ubytes +
		     pybytes + sbytes;
	if (bpf_ringbuf_output(&events, r, size, BPF_RB_NO_WAKEUP))
		__sync_fetch_and_add(&lost, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
