/* The event model: every kind of thing ringprof records, decoded.
 *
 * This is the in-memory form that collectors hand to the chunk builder and
 * that chunk readers hand back.  The on-disk form is described in
 * docs/ring-format.md; the shared-memory producer form in shmring.h. */
#ifndef RINGPROF_EVENT_H
#define RINGPROF_EVENT_H

#include <stdbool.h>
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
	RP_EV_MAPPING = 11,         /* pid, name = file path, u.mapping: code mapped by a process;
				       name RP_JIT_MAPPING_PREFIX "fn": a function a JIT compiler
				       placed at [start, end) (offset 0, no build-id) */
	RP_EV_PROCESS_CMDLINE = 12, /* pid, name = command line, arguments joined by spaces */
	/* What device the ring holds (pid 0, tid 0): name = its stable id
	 * (NULL or "" when none), u.device.  The daemon repeats it in every
	 * chunk of the ring. */
	RP_EV_DEVICE_INFO = 13,
	RP_EV_PY_CODE = 14,         /* pid, name = "qualname\tfile", u.py_code: what a Python
				       frame of the process's samples runs (docs/python-frames.md) */
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

/* What kind of device a ring holds; the values are those of the
 * device_info record (docs/ring-format.md).  0: not known. */
enum rp_device_kind {
	RP_DEVICE_HOST = 1,
	RP_DEVICE_GPU = 2,
	RP_DEVICE_TPU = 3,
	RP_DEVICE_NEURON_CORE = 4,
	RP_DEVICE_OTHER = 5,
};

/* u.op.device of an event on the host, not on a device. */
#define RP_OP_HOST UINT32_MAX

/* A kernel's launch configuration (CUDA's names).  Every launched
 * kernel has block[0] >= 1, so block[0] == 0 means "not known". */
struct rp_gpu_launch {
	uint32_t grid[3], block[3];  /* x, y, z */
	uint32_t registers;          /* per thread */
	uint32_t static_shared, dynamic_shared; /* shared memory bytes per block */
};

/* The name of a mapping event that is one JIT-compiled function. */
#define RP_JIT_MAPPING_PREFIX "[jit] "

/* Longest name kept; longer names are truncated on the way in. */
#define RP_NAME_MAX 255
/* Deepest stack kept (kernel + user frames). */
#define RP_STACK_MAX 127
/* A Python frame in the user part of a CPU sample's stack: bit 63 set
 * (no user address has it), the code object's address in the low 47 bits
 * and the instruction offset (code units, saturated) in bits 47..62.
 * RP_EV_PY_CODE events of the process name them. */
#define RP_PY_FRAME_TAG (1ull << 63)
#define RP_PY_CODE_MASK ((1ull << 47) - 1)
#define RP_PY_LASTI_SHIFT 47
#define RP_PY_LASTI_MAX 0xffffu
#define RP_PY_FRAME(code, lasti) \
	(RP_PY_FRAME_TAG | (uint64_t)(lasti) << RP_PY_LASTI_SHIFT | ((code) & RP_PY_CODE_MASK))

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
			uint64_t correlation; /* the API call that launched it; 0: none */
			uint64_t bytes;     /* memcpy/memset size, 0 for kernels */
			uint32_t device;
			uint32_t stream;
			uint8_t kind;       /* enum rp_gpu_activity_kind */
			struct rp_gpu_launch launch; /* kernels; block[0] 0: not known */
		} gpu;
		struct {
			uint64_t duration;  /* ns */
			uint32_t device;    /* device or core index */
			uint32_t correlation; /* the GPU work it launched (u.gpu.correlation); 0: none */
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
			uint64_t code;        /* code object address (47 bits) */
			uint32_t lasti;       /* instruction offset, as in RP_PY_FRAME */
			uint32_t line;        /* source line; 0: unknown */
		} py_code;
		struct {
			uint32_t index;     /* gpuN, tpuN, ncN: N; 0 for the others */
			uint8_t kind;       /* enum rp_device_kind */
		} device;
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

/* Longest stable device id (a GPU UUID "GPU-8f6e...", 40 bytes). */
#define RP_DEVICE_UID_MAX 63

/* What a ring holds: kind 0 when not known. */
struct rp_device_identity {
	uint8_t kind;       /* enum rp_device_kind */
	uint32_t index;
	char uid[RP_DEVICE_UID_MAX + 1]; /* "" when none */
};

/* The device-name table: "host"; "gpuN", "tpuN", "ncN" (N without
 * leading zeros, up to 9 digits) as GPU, TPU, Neuron core N; any other
 * name (a [ring.NAME] section) as "other", index 0.  Rings recorded before
 * device_info events existed are read through it.  Returns id->kind. */
enum rp_device_kind rp_device_identify(const char *name, struct rp_device_identity *id);
/* "host", "gpu", "tpu", "neuron_core", "other"; "other" for unknown values. */
const char *rp_device_kind_name(unsigned kind);
/* Take a device_info event into id: the first one sets kind and index,
 * and the first non-empty uid is kept (a ring gets its uid once; a later
 * different one is ignored).  Other events leave id alone.  Returns
 * whether id changed. */
bool rp_device_identity_note(struct rp_device_identity *id, const struct rp_event *ev);

/* Whether a producer ring may carry kind: 1..RP_EV_DROPS and
 * RP_EV_DEVICE_OP, never the daemon's own metadata kinds. */
static inline int rp_event_producer_kind(unsigned kind)
{
	return (kind >= 1 && kind <= RP_EV_DROPS) || kind == RP_EV_DEVICE_OP;
}

#endif
