/* The record the BPF program writes into its ring buffer, shared by the
 * BPF side (types from vmlinux.h) and the loader (types from
 * <linux/types.h>). */
#ifndef RINGPROF_SAMPLER_RECORD_H
#define RINGPROF_SAMPLER_RECORD_H

/* Deepest stack, kernel + user frames; equals RP_STACK_MAX in event.h,
 * which the BPF side cannot include (no libc headers for -target bpf). */
#define RP_SAMPLER_DEPTH_MAX 127

/* A Python frame: as RP_PY_FRAME in event.h, which sampler.c checks
 * these against. */
#define RP_SAMPLER_PY_TAG (1ull << 63)
#define RP_SAMPLER_PY_CODE_MASK ((1ull << 47) - 1)
#define RP_SAMPLER_PY_LASTI_SHIFT 47
#define RP_SAMPLER_PY_LASTI_MAX 0xffffull
/* Python frames read per sample, at most. */
#define RP_SAMPLER_PY_MAX 64
/* User stack bytes copied for the daemon's CFI unwinder (x86-64), at most. */
#define RP_SAMPLER_STACK_MAX 8192

/* When the user stack is copied (the loader's stack_copy). */
enum rp_sampler_stack_copy {
	RP_STACK_COPY_CUT = 0,    /* when the frame-pointer walk looks cut short */
	RP_STACK_COPY_NEVER = 1,
	RP_STACK_COPY_ALWAYS = 2,
};

/* Before a copied stack: the user registers it starts at. */
struct rp_sampler_regs {
	__u64 ip, sp, bp;
};

struct rp_sampler_record {
	__u64 ts;            /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
	__u32 pid, tid;      /* tgid and thread id */
	__u32 cpu;
	__u16 nkernel, nuser;
	__u16 npython, stack_bytes;
	__u16 pad[2];
	char comm[16];
	/* nkernel kernel frames, then nuser user frames, leaf first, then
	 * npython Python frames, leaf first: RP_PY_FRAME (event.h) with bit 0
	 * set on the outermost frame each run of the interpreter loop
	 * (_PyEval_EvalFrameDefault) executes.  Room for twice the deepest
	 * stack so the verifier can bound the user stack written after a
	 * kernel stack of unknown length; only the used part is submitted.
	 * When stack_bytes > 0, a struct rp_sampler_regs and stack_bytes of
	 * the user stack from its sp follow the frames (in stack, room for
	 * the largest offset the verifier can see). */
	__u64 frames[2 * RP_SAMPLER_DEPTH_MAX + RP_SAMPLER_PY_MAX];
	__u8 stack[sizeof(struct rp_sampler_regs) + RP_SAMPLER_STACK_MAX];
};

/* How the frames of one version of CPython are found: the value of the
 * sampler's python map, keyed by tgid (collectors/cpu/pyframes.c fills it).
 * Offsets in bytes. */
enum rp_py_entry_kind {
	RP_PY_ENTRY_EVERY = 0,  /* 3.10: each frame is its own loop run */
	RP_PY_ENTRY_FLAG = 1,   /* 3.11: a bool at fr_entry marks the outermost */
	RP_PY_ENTRY_SHIM = 2,   /* 3.12+: a frame whose owner byte at fr_entry is
				   RP_PY_OWNED_BY_CSTACK lies below each run */
};
#define RP_PY_OWNED_BY_CSTACK 3
/* Bytes of a frame read at once: every field the walk needs lies below. */
#define RP_PY_FRAME_READ 104
/* Bytes of a thread state read at once, at most (rp_py_proc.ts_read). */
#define RP_PY_TS_READ 320
/* Bytes of a thread's data stack (3.11+, where its frames lie one after
 * another) read at once below its top: its frames there need no read of
 * their own.  A power of two. */
#define RP_PY_WINDOW 4096

struct rp_py_proc {
	__u64 runtime;          /* address of _PyRuntime */
	__u16 interp_head;      /* _PyRuntimeState.interpreters.head */
	__u16 threads_head;     /* PyInterpreterState.threads.head */
	__u16 ts_next;          /* PyThreadState.next */
	__u16 ts_thread_id;     /* PyThreadState.thread_id (pthread_self) */
	__u16 ts_frame;         /* PyThreadState: frame (3.10), cframe (3.11, 3.12),
				   current_frame (3.13+) */
	__u16 cframe_frame;     /* 3.11, 3.12: _PyCFrame.current_frame; else 0xffff */
	__u16 fr_previous;      /* f_back (3.10), previous */
	__u16 fr_code;          /* f_code, f_executable (3.13+) */
	__u16 fr_instr;         /* f_lasti, an int of code units (3.10); prev_instr
				   (3.11, 3.12), instr_ptr (3.13+): pointers */
	__u16 fr_entry;         /* see entry_kind */
	__u16 code_start;       /* PyCodeObject.co_code_adaptive (3.11+) */
	__u16 ts_datastack;     /* PyThreadState.datastack_chunk, followed by
				   datastack_top and datastack_limit (3.11+); 0
				   on 3.10, whose frames are heap objects */
	__u16 ts_read;          /* bytes of a thread state read: every ts_
				   field lies below, at most RP_PY_TS_READ */
	__u8 lasti_is_index;    /* fr_instr is 3.10's int index */
	__u8 entry_kind;        /* enum rp_py_entry_kind */
};

#endif
