/* CUPTI activity records -> ringprof events (translate.h). */
#include "translate.h"

#include <cupti_activity.h>
#include <cupti_runtime_cbid.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Runtime calls that poll state or errors: thousands a second in PyTorch,
 * no time spent worth seeing.  Disabled at CUPTI (no record is made) and
 * skipped here should one arrive anyway. */
const uint32_t rp_cupti_noisy_cbids[] = {
	CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaSetDevice_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceCount_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaPeekAtLastError_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaDeviceGetAttribute_v5000,
	CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceProperties_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaStreamIsCapturing_v10000,
	CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetCaptureInfo_v12030,
	CUPTI_RUNTIME_TRACE_CBID_cudaPointerGetAttributes_v4000,
	CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaFuncGetAttributes_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaDriverGetVersion_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaRuntimeGetVersion_v3020,
};
const unsigned rp_cupti_noisy_count =
	sizeof(rp_cupti_noisy_cbids) / sizeof(rp_cupti_noisy_cbids[0]);

bool rp_cupti_api_noisy(uint32_t cbid)
{
	for (unsigned i = 0; i < rp_cupti_noisy_count; i++)
		if (rp_cupti_noisy_cbids[i] == cbid)
			return true;
	return false;
}

/* Copy names as the summary and exporters show them, by
 * CUpti_ActivityMemcpyKind. */
static const char *const memcpy_names[] = {
	[CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN] = "Memcpy",
	[CUPTI_ACTIVITY_MEMCPY_KIND_HTOD] = "Memcpy HtoD",
	[CUPTI_ACTIVITY_MEMCPY_KIND_DTOH] = "Memcpy DtoH",
	[CUPTI_ACTIVITY_MEMCPY_KIND_HTOA] = "Memcpy HtoA",
	[CUPTI_ACTIVITY_MEMCPY_KIND_ATOH] = "Memcpy AtoH",
	[CUPTI_ACTIVITY_MEMCPY_KIND_ATOA] = "Memcpy AtoA",
	[CUPTI_ACTIVITY_MEMCPY_KIND_ATOD] = "Memcpy AtoD",
	[CUPTI_ACTIVITY_MEMCPY_KIND_DTOA] = "Memcpy DtoA",
	[CUPTI_ACTIVITY_MEMCPY_KIND_DTOD] = "Memcpy DtoD",
	[CUPTI_ACTIVITY_MEMCPY_KIND_HTOH] = "Memcpy HtoH",
	[CUPTI_ACTIVITY_MEMCPY_KIND_PTOP] = "Memcpy PtoP",
};

static const char *memcpy_name(unsigned kind)
{
	return kind < sizeof(memcpy_names) / sizeof(memcpy_names[0]) ? memcpy_names[kind]
								      : memcpy_names[0];
}

/* Host waits, by CUpti_ActivitySynchronizationType. */
static const char *const sync_names[] = {
	[CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN] = "sync",
	[CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE] = "sync: event synchronize",
	[CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT] = "sync: stream wait event",
	[CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE] = "sync: stream synchronize",
	[CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE] = "sync: context synchronize",
};

/* CUPTI's own costs, by CUpti_ActivityOverheadKind >> 16 (1 = driver
 * compiler is the one value below 1 << 16). */
static const char *const overhead_names[] = {
	"cupti overhead",
	"cupti overhead: buffer flush",
	"cupti overhead: instrumentation",
	"cupti overhead: resource",
	"cupti overhead: module loading",
	"cupti overhead: lazy function loading",
	"cupti overhead: command buffer full",
	"cupti overhead: activity buffer request",
	"cupti overhead: uvm activity init",
};

static const char *overhead_name(uint32_t kind)
{
	if (kind == CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER)
		return "cupti overhead: driver compiler";
	uint32_t i = kind >> 16;
	return i < sizeof(overhead_names) / sizeof(overhead_names[0]) ? overhead_names[i]
									: overhead_names[0];
}

/* A span CUPTI completed; records it could not (buffer pressure, a
 * context torn down) carry 0s. */
static bool span_ok(uint64_t start, uint64_t end)
{
	return start != 0 && end >= start;
}

/* A launch dimension or size CUPTI gives as int32 (never negative for a
 * kernel that ran). */
static uint32_t dim(int32_t v)
{
	return v > 0 ? (uint32_t)v : 0;
}

static int gpu_event(struct rp_event *ev, uint8_t kind, const char *name, uint64_t start,
		     uint64_t end, uint32_t corr, uint64_t bytes, uint32_t device,
		     uint32_t stream, uint32_t pid)
{
	if (!span_ok(start, end))
		return -EINVAL;
	*ev = (struct rp_event){ .kind = RP_EV_GPU_ACTIVITY, .ts = start, .pid = pid,
				 .name = name };
	ev->u.gpu.end = end;
	ev->u.gpu.correlation = corr;
	ev->u.gpu.bytes = bytes;
	ev->u.gpu.device = device;
	ev->u.gpu.stream = stream;
	ev->u.gpu.kind = kind;
	return 1;
}

static int api_event(struct rp_event *ev, const char *name, uint64_t start, uint64_t end,
		     uint32_t pid, uint32_t tid, uint32_t corr)
{
	if (!span_ok(start, end))
		return -EINVAL;
	*ev = (struct rp_event){ .kind = RP_EV_API_CALL, .ts = start, .pid = pid, .tid = tid,
				 .name = name };
	ev->u.api.duration = end - start;
	ev->u.api.correlation = corr;
	return 1;
}

/* An NVTX marker (RINGPROF_NVTX=1): a range's start or end, or an
 * instant, on the thread CUPTI names.  A range's end closes the innermost
 * range open on its thread, as nvtxRangePush/Pop nest; other flags
 * (synchronization markers) are not recorded. */
static int marker_event(const CUpti_ActivityMarker2 *m, uint32_t pid, struct rp_event *ev)
{
	uint8_t kind = m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START	   ? RP_EV_RANGE_BEGIN
		       : m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END	   ? RP_EV_RANGE_END
		       : m->flags & CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS ? RP_EV_INSTANT
									     : 0;
	if (!kind)
		return 0;
	if (!m->timestamp)
		return -EINVAL;
	bool thread = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD;
	*ev = (struct rp_event){ .kind = kind, .ts = m->timestamp,
				 .pid = thread && m->objectId.pt.processId ? m->objectId.pt.processId
									   : pid,
				 .tid = thread ? m->objectId.pt.threadId : 0 };
	if (kind != RP_EV_RANGE_END)
		ev->name = m->name && *m->name ? m->name : "nvtx";
	return 1;
}

int rp_cupti_translate(const void *rec, uint32_t pid, rp_cupti_api_name_fn api_name,
		       char *namebuf, struct rp_event *ev)
{
	const CUpti_Activity *a = rec;
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		/* Mangled, as CPU frames are: the exporters demangle. */
		const CUpti_ActivityKernel10 *k = rec;
		int rc = gpu_event(ev, RP_GPU_KERNEL, k->name ? k->name : "kernel", k->start,
				   k->end, k->correlationId, 0, k->deviceId, k->streamId, pid);
		if (rc > 0)
			ev->u.gpu.launch = (struct rp_gpu_launch){
				.grid = { dim(k->gridX), dim(k->gridY), dim(k->gridZ) },
				.block = { dim(k->blockX), dim(k->blockY), dim(k->blockZ) },
				.registers = k->registersPerThread,
				.static_shared = dim(k->staticSharedMemory),
				.dynamic_shared = dim(k->dynamicSharedMemory),
			};
		return rc;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		/* correlationId is the driver call's; a copy made through
		 * the runtime (cudaMemcpyAsync: PyTorch's) links to the runtime
		 * call, whose record is the one kept (on the H100 only the
		 * kernels linked before). */
		const CUpti_ActivityMemcpy6 *m = rec;
		uint32_t corr = m->runtimeCorrelationId ? m->runtimeCorrelationId : m->correlationId;
		return gpu_event(ev, RP_GPU_MEMCPY, memcpy_name(m->copyKind), m->start, m->end,
				 corr, m->bytes, m->deviceId, m->streamId, pid);
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY2: {
		const CUpti_ActivityMemcpyPtoP4 *m = rec;
		return gpu_event(ev, RP_GPU_MEMCPY, memcpy_name(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP),
				 m->start, m->end, m->correlationId, m->bytes, m->deviceId,
				 m->streamId, pid);
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = rec;
		return gpu_event(ev, RP_GPU_MEMSET, "Memset", m->start, m->end, m->correlationId,
				 m->bytes, m->deviceId, m->streamId, pid);
	}
	case CUPTI_ACTIVITY_KIND_RUNTIME: {
		const CUpti_ActivityAPI *c = rec;
		if (rp_cupti_api_noisy(c->cbid))
			return 0;
		const char *name = api_name ? api_name(c->cbid) : NULL;
		if (!name) {
			snprintf(namebuf, RP_NAME_MAX + 1, "cuda runtime call %u", (unsigned)c->cbid);
			name = namebuf;
		}
		return api_event(ev, name, c->start, c->end, c->processId ? c->processId : pid,
				 c->threadId, c->correlationId);
	}
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
		/* A host wait; CUPTI does not say which thread, so it lands on
		 * the ring's (tid 0). */
		const CUpti_ActivitySynchronization2 *s = rec;
		unsigned t = s->type;
		const char *name = t < sizeof(sync_names) / sizeof(sync_names[0]) ? sync_names[t]
										   : sync_names[0];
		return api_event(ev, name, s->start, s->end, pid, 0, 0);
	}
	case CUPTI_ACTIVITY_KIND_OVERHEAD: {
		const CUpti_ActivityOverhead3 *o = rec;
		uint32_t tid = o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? o->objectId.pt.threadId
									      : 0;
		return api_event(ev, overhead_name(o->overheadKind), o->start, o->end, pid, tid, 0);
	}
	case CUPTI_ACTIVITY_KIND_MARKER:
		return marker_event(rec, pid, ev);
	default:
		return 0;
	}
}

void rp_cupti_format_uuid(const uint8_t raw[16], char out[RP_CUPTI_UUID_LEN])
{
	static const int groups[] = { 4, 2, 2, 2, 6 };
	char *p = out + sprintf(out, "GPU-");
	unsigned b = 0;
	for (unsigned g = 0; g < 5; g++) {
		for (int i = 0; i < groups[g]; i++)
			p += sprintf(p, "%02x", raw[b++]);
		if (g < 4)
			*p++ = '-';
	}
	*p = 0;
}

bool rp_cupti_device_record(const void *rec, uint32_t *ordinal, char uuid[RP_CUPTI_UUID_LEN])
{
	const CUpti_ActivityDevice5 *d = rec;
	if (d->kind != CUPTI_ACTIVITY_KIND_DEVICE)
		return false;
	*ordinal = d->id;
	uint8_t raw[16];
	memcpy(raw, d->uuid.bytes, sizeof(raw));
	rp_cupti_format_uuid(raw, uuid);
	return true;
}

static int bus_cmp(const void *a, const void *b)
{
	return strcasecmp(((const struct rp_cupti_gpu *)a)->bus_id,
			  ((const struct rp_cupti_gpu *)b)->bus_id);
}

/* The index of uuid among gpus in PCI bus id order, or -1. */
static long index_by_uuid(const char *uuid, const struct rp_cupti_gpu *gpus, uint32_t n)
{
	if (!uuid || !*uuid || n == 0 || n > RP_CUPTI_MAX_DEV)
		return -1;
	struct rp_cupti_gpu sorted[RP_CUPTI_MAX_DEV];
	memcpy(sorted, gpus, n * sizeof(*gpus));
	qsort(sorted, n, sizeof(*sorted), bus_cmp);
	for (uint32_t i = 0; i < n; i++)
		if (strcasecmp(sorted[i].uuid, uuid) == 0)
			return (long)i;
	return -1;
}

uint32_t rp_cupti_physical_index(const char *uuid, uint32_t ordinal, const char *cvd,
				 const struct rp_cupti_gpu *gpus, uint32_t n)
{
	long i = index_by_uuid(uuid, gpus, n);
	if (i >= 0)
		return (uint32_t)i;
	if (!cvd)
		return ordinal;
	/* The ordinal-th entry of CUDA_VISIBLE_DEVICES: "2,3" or "GPU-...,...". */
	char entry[64] = "";
	const char *p = cvd;
	for (uint32_t k = 0;; k++) {
		size_t len = strcspn(p, ",");
		if (k == ordinal) {
			snprintf(entry, sizeof(entry), "%.*s", (int)len, p);
			break;
		}
		if (!p[len])
			return ordinal;
		p += len + 1;
	}
	char *end;
	unsigned long v = strtoul(entry, &end, 10);
	if (end != entry && *end == 0 && v < RP_CUPTI_MAX_DEV)
		return (uint32_t)v;
	i = index_by_uuid(entry, gpus, n);
	return i >= 0 ? (uint32_t)i : ordinal;
}
