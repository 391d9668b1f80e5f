/* A stand-in for libcupti on hosts without a GPU (test_cupti_load.py): the
 * calls libringprof-cupti.so makes, with records built from the real
 * cupti_activity.h structs.  cuptiActivityFlushAll plays one "workload":
 * a DEVICE record, a kernel, copies, a memset, runtime calls (one noisy),
 * a sync, an overhead and an incomplete kernel, stamped with the timestamp
 * callback the library registered.  Environment:
 *   FAKE_CUPTI_SUBSCRIBED=1  another subscriber holds CUPTI (error 39)
 *   FAKE_CUPTI_DROPPED=N     CUPTI's dropped-record count for the buffer
 *   FAKE_CUPTI_VERSION=N     cuptiGetVersion's answer
 * With the MARKER kind enabled (RINGPROF_NVTX=1), NVTX markers too: a
 * range "train_step" around the launch and an instant "checkpoint". */
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>
#include <cupti_version.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static CUpti_TimestampCallbackFunc clock_fn;
static CUpti_BuffersCallbackRequestFunc request_fn;
static CUpti_BuffersCallbackCompleteFunc complete_fn;
static int enabled;

EXPORT CUptiResult cuptiGetVersion(uint32_t *v)
{
	const char *old = getenv("FAKE_CUPTI_VERSION");
	*v = old ? (uint32_t)strtoul(old, NULL, 10) : CUPTI_API_VERSION;
	return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
	*s = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "multiple subscribers" : "fake error";
	return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *h, CUpti_CallbackFunc f, void *ud)
{
	(void)f, (void)ud;
	*h = NULL;
	return getenv("FAKE_CUPTI_SUBSCRIBED") ? CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
					       : CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle h) { (void)h; return CUPTI_SUCCESS; }
EXPORT CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain d, uint32_t cbid, const char **name)
{
	(void)d;
	*name = cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ? "cudaLaunchKernel_v7000"
									: "cudaMemcpyAsync_v3020";
	return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f)
{
	clock_fn = f;
	return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc rq,
						  CUpti_BuffersCallbackCompleteFunc cp)
{
	request_fn = rq;
	complete_fn = cp;
	return CUPTI_SUCCESS;
}
static int markers; /* NVTX marker records were asked for */
EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind k)
{
	markers |= k == CUPTI_ACTIVITY_KIND_MARKER;
	enabled++;
	return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind k) { (void)k; enabled--; return CUPTI_SUCCESS; }
EXPORT CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId c, uint8_t on)
{
	(void)c, (void)on;
	return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { (void)ms; return CUPTI_SUCCESS; }

static size_t rec_size(const CUpti_Activity *a)
{
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_DEVICE: return sizeof(CUpti_ActivityDevice5);
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(CUpti_ActivityAPI);
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
	case CUPTI_ACTIVITY_KIND_OVERHEAD: return sizeof(CUpti_ActivityOverhead3);
	case CUPTI_ACTIVITY_KIND_MARKER: return sizeof(CUpti_ActivityMarker2);
	default: return 0;
	}
}

static size_t put(uint8_t *buf, size_t at, const void *rec, size_t size)
{
	memcpy(buf + at, rec, size);
	return at + ((size + 7) & ~(size_t)7);
}

EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, CUpti_Activity **rec)
{
	uint8_t *next = *rec ? (uint8_t *)*rec + ((rec_size(*rec) + 7) & ~(size_t)7) : buf;
	if (next >= buf + valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*rec = (CUpti_Activity *)next;
	return CUPTI_SUCCESS;
}

static size_t dropped_once;
EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext c, uint32_t s, size_t *n)
{
	(void)c, (void)s;
	*n = dropped_once;
	dropped_once = 0;
	return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	(void)flag;
	if (!request_fn || !enabled)
		return CUPTI_ERROR_NOT_INITIALIZED;
	uint8_t *buf;
	size_t size, max;
	request_fn(&buf, &size, &max);
	if (!buf || size < 4096)
		return CUPTI_ERROR_OUT_OF_MEMORY;
	const char *d = getenv("FAKE_CUPTI_DROPPED");
	dropped_once = d ? strtoul(d, NULL, 10) : 0;
	uint64_t t = clock_fn ? clock_fn() : 1000000;
	uint32_t tid = (uint32_t)syscall(SYS_gettid);
	size_t at = 0;
	CUpti_ActivityDevice5 dev = { .kind = CUPTI_ACTIVITY_KIND_DEVICE, .id = 0 };
	at = put(buf, at, &dev, sizeof(dev));
	CUpti_ActivityAPI launch = { .kind = CUPTI_ACTIVITY_KIND_RUNTIME,
				     .cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
				     .start = t, .end = t + 4000, .processId = (uint32_t)getpid(),
				     .threadId = tid, .correlationId = 11 };
	at = put(buf, at, &launch, sizeof(launch));
	CUpti_ActivityAPI noisy = launch;
	noisy.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020;
	at = put(buf, at, &noisy, sizeof(noisy));
	CUpti_ActivityKernel10 k = { .kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
				     .start = t + 5000, .end = t + 25000, .deviceId = 0,
				     .streamId = 7, .correlationId = 11, .gridX = 64, .gridY = 2,
				     .gridZ = 1, .blockX = 128, .blockY = 1, .blockZ = 1,
				     .registersPerThread = 40, .staticSharedMemory = 1024,
				     .dynamicSharedMemory = 8192, .name = "_Z6matmulPKfS0_Pfi" };
	at = put(buf, at, &k, sizeof(k));
	CUpti_ActivityKernel10 broken = k;
	broken.start = 0;
	at = put(buf, at, &broken, sizeof(broken));
	CUpti_ActivityMemcpy6 m = { .kind = CUPTI_ACTIVITY_KIND_MEMCPY,
				    .copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, .bytes = 1 << 20,
				    .start = t + 26000, .end = t + 36000, .deviceId = 0,
				    .streamId = 7, .correlationId = 12 };
	at = put(buf, at, &m, sizeof(m));
	CUpti_ActivityMemset4 s = { .kind = CUPTI_ACTIVITY_KIND_MEMSET, .bytes = 4096,
				    .start = t + 37000, .end = t + 38000, .deviceId = 0,
				    .streamId = 7, .correlationId = 13 };
	at = put(buf, at, &s, sizeof(s));
	CUpti_ActivitySynchronization2 sy = {
		.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
		.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE,
		.start = t + 36000, .end = t + 39000, .correlationId = 14 };
	at = put(buf, at, &sy, sizeof(sy));
	if (markers) {
		/* nvtxRangePush("train_step") around the launch, a nvtxMark. */
		CUpti_ActivityMarker2 mk = { .kind = CUPTI_ACTIVITY_KIND_MARKER,
					     .flags = CUPTI_ACTIVITY_FLAG_MARKER_START,
					     .timestamp = t - 1000, .id = 1,
					     .objectKind = CUPTI_ACTIVITY_OBJECT_THREAD,
					     .name = "train_step" };
		mk.objectId.pt.processId = (uint32_t)getpid();
		mk.objectId.pt.threadId = tid;
		at = put(buf, at, &mk, sizeof(mk));
		mk.flags = CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS;
		mk.timestamp = t + 2000;
		mk.id = 2;
		mk.name = "checkpoint";
		at = put(buf, at, &mk, sizeof(mk));
		mk.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
		mk.timestamp = t + 40000;
		mk.id = 1;
		mk.name = NULL;
		at = put(buf, at, &mk, sizeof(mk));
	}
	complete_fn(NULL, 0, buf, size, at);
	return CUPTI_SUCCESS;
}
