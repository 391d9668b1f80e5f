/* The event model: every kind of thing ringprof records, decoded.
 *
 * This is the in-memory form that collectors hand to the chunk builder and
 * that chunk readers hand back.  The on-disk form is described in
 * docs/ring-format.md; the shared-memory producer form in shmring.h. */
#ifndef RINGPROF_EVENT_H
#define RINGPROF_EVENT_H

#include <stdint.h>

enum rp_event_kind {
	RP_EV_CPU_SAMPLE = 1,   /* pid, tid, u.sample: stack, leaf first */
	RP_EV_RANGE_BEGIN = 2,  /* pid, tid, name */
	RP_EV_RANGE_END = 3,    /* pid, tid; closes the innermost open range */
	RP_EV_INSTANT = 4,      /* pid, tid, name */
	RP_EV_COUNTER = 5,      /* pid, tid, name, u.counter.value */
	RP_EV_GPU_ACTIVITY = 6, /* pid, name (kernel or copy), u.gpu */
	RP_EV_API_CALL = 7,     /* pid, tid, name, u.api; ts is the start */
	RP_EV_PROCESS_NAME = 8, /* pid, name */
	RP_EV_THREAD_NAME = 9,  /* pid, tid, name */
	RP_EV_DROPS = 10,       /* pid, tid of the producer; u.drops.count */
	/* Metadata the daemon records about sampled processes, so that their
	 * stacks can be symbolized later, even after they exit.  Producer
	 * rings never carry these (rp_event_producer_kind). */
	RP_EV_MAPPING = 11,         /* pid, name = file path, u.mapping: code mapped by a process */
	RP_EV_PROCESS_CMDLINE = 12, /* pid, name = command line, arguments joined by spaces */
	/* 13, 14: reserved (device info, Python code). */
	/* An XLA op, module or step from a runtime's profiler (collectors/xla):
	 * pid, tid (line id), name, u.op; ts is the start.  Written by the
	 * daemon's own producer rings, so producers may carry it. */
	RP_EV_DEVICE_OP = 15,
	RP_EV_KIND_MAX = RP_EV_DEVICE_OP,
	RP_EV_PRODUCER_KIND_MAX = RP_EV_DEVICE_OP,
};

enum rp_gpu_activity_kind {
	RP_GPU_KERNEL = 1,
	RP_GPU_MEMCPY = 2,
	RP_GPU_MEMSET = 3,
};

/* u.op.device of an event on the host, not on a device. */
#define RP_OP_HOST UINT32_MAX

/* Longest name kept; longer names are truncated on the way in. */
#define RP_NAME_MAX 255
/* Deepest stack kept (kernel + user frames). */
#define RP_STACK_MAX 127
/* Longest build-id kept (a GNU build-id is a 20-byte SHA-1 by default). */
#define RP_BUILD_ID_MAX 20

struct rp_event {
	uint8_t kind;          /* enum rp_event_kind */
	uint64_t ts;           /* host clock (CLOCK_MONOTONIC) ns */
	uint32_t pid, tid;
	/* NUL-terminated, NULL for kinds without a name.  Borrowed: valid
	 * until the reader moves to another chunk / the builder copies it. */
	const char *name;
	union {
		struct {
			uint32_t cpu;
			uint16_t nframes;   /* total frames in frames[] */
			uint16_t nkernel;   /* the first nkernel frames are kernel */
			const uint64_t *frames; /* instruction pointers, leaf first */
		} sample;
		struct {
			double value;
		} counter;
		struct {
			uint64_t end;       /* host clock ns; ts is the start */
			uint64_t correlation;
			uint64_t bytes;     /* memcpy/memset size, 0 for kernels */
			uint32_t device;
			uint32_t stream;
			uint8_t kind;       /* enum rp_gpu_activity_kind */
		} gpu;
		struct {
			uint64_t duration;  /* ns */
			uint32_t device;    /* device or core index */
		} api;
		struct {
			uint64_t count;
		} drops;
		struct {
			uint64_t start, end;  /* [start, end) in the process */
			uint64_t offset;      /* file offset mapped at start */
			uint8_t build_id[RP_BUILD_ID_MAX];
			uint8_t build_id_len; /* 0: unknown */
		} mapping;
		struct {
			uint64_t end;        /* host clock ns; ts is the start */
			/* XLA's stats; 0 or NULL when absent.  Strings are
			 * borrowed like name and truncated to RP_NAME_MAX. */
			const char *hlo_op, *hlo_module;
			uint64_t program_id, flops, bytes_accessed;
			uint32_t device;     /* N of /device:TPU:N; RP_OP_HOST */
			uint32_t line;       /* the XLine: stream or thread id */
		} op;
	} u;
};

/* Hands events to whoever collects them (a drain, a test); returns 0 or a
 * negative errno. */
typedef int (*rp_event_fn)(void *ctx, const struct rp_event *ev);

/* "range_begin", "cpu_sample", ...; "unknown" for anything else. */
const char *rp_event_kind_name(unsigned kind);

/* Whether a producer ring may carry kind: 1..RP_EV_DROPS and
 * RP_EV_DEVICE_OP, never the daemon's own metadata kinds. */
static inline int rp_event_producer_kind(unsigned kind)
{
	return (kind >= 1 && kind <= RP_EV_DROPS) || kind == RP_EV_DEVICE_OP;
}

#endif
