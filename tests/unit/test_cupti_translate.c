/* CUPTI activity records -> ringprof events (collectors/cupti/translate.h),
 * on record structs built from this toolkit's cupti_activity.h: every
 * recorded kind field by field, the records CUPTI leaves incomplete (the
 * drop path), the noisy-call table, device UUIDs and CUDA_VISIBLE_DEVICES
 * remapping to the physical GPU index. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cupti_activity.h>
#include <cupti_runtime_cbid.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "translate.h"

static char namebuf[RP_NAME_MAX + 1];

static const char *names(uint32_t cbid)
{
	return cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ? "cudaLaunchKernel_v7000"
								       : NULL;
}

static void kernel(void **state)
{
	(void)state;
	CUpti_ActivityKernel10 k = { .kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
				     .start = 1000, .end = 5000, .deviceId = 1, .streamId = 7,
				     .correlationId = 42, .gridX = 128, .gridY = 2, .gridZ = 3,
				     .blockX = 256, .blockY = 4, .blockZ = 1,
				     .registersPerThread = 32, .staticSharedMemory = 4096,
				     .dynamicSharedMemory = 49152,
				     .name = "_Z6matmulPfS_S_i" };
	struct rp_event ev;
	assert_int_equal(rp_cupti_translate(&k, 99, names, namebuf, &ev), 1);
	assert_int_equal(ev.kind, RP_EV_GPU_ACTIVITY);
	assert_int_equal(ev.u.gpu.kind, RP_GPU_KERNEL);
	assert_int_equal(ev.ts, 1000);
	assert_int_equal(ev.u.gpu.end, 5000);
	assert_int_equal(ev.u.gpu.correlation, 42);
	assert_int_equal(ev.u.gpu.device, 1);
	assert_int_equal(ev.u.gpu.stream, 7);
	assert_int_equal(ev.u.gpu.bytes, 0);
	assert_int_equal(ev.pid, 99);
	const struct rp_gpu_launch *l = &ev.u.gpu.launch;
	assert_int_equal(l->grid[0], 128);
	assert_int_equal(l->grid[1], 2);
	assert_int_equal(l->grid[2], 3);
	assert_int_equal(l->block[0], 256);
	assert_int_equal(l->block[1], 4);
	assert_int_equal(l->block[2], 1);
	assert_int_equal(l->registers, 32);
	assert_int_equal(l->static_shared, 4096);
	assert_int_equal(l->dynamic_shared, 49152);
	/* Mangled: the exporters demangle, as for CPU frames. */
	assert_string_equal(ev.name, "_Z6matmulPfS_S_i");
	/* The serialising KERNEL kind has the same layout. */
	k.kind = CUPTI_ACTIVITY_KIND_KERNEL;
	assert_int_equal(rp_cupti_translate(&k, 99, names, namebuf, &ev), 1);
	assert_int_equal(ev.u.gpu.kind, RP_GPU_KERNEL);
}

static void memcpy_kinds(void **state)
{
	(void)state;
	static const struct { uint8_t kind; const char *name; } cases[] = {
		{ CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, "Memcpy HtoD" },
		{ CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, "Memcpy DtoH" },
		{ CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, "Memcpy DtoD" },
		{ CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, "Memcpy HtoH" },
		{ 200, "Memcpy" }, /* a kind newer than this build */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CUpti_ActivityMemcpy6 m = { .kind = CUPTI_ACTIVITY_KIND_MEMCPY,
					    .copyKind = cases[i].kind, .bytes = 1 << 20,
					    .start = 10, .end = 20, .deviceId = 0,
					    .streamId = 3, .correlationId = 5 };
		struct rp_event ev;
		assert_int_equal(rp_cupti_translate(&m, 1, names, namebuf, &ev), 1);
		assert_int_equal(ev.u.gpu.kind, RP_GPU_MEMCPY);
		assert_string_equal(ev.name, cases[i].name);
		assert_int_equal(ev.u.gpu.bytes, 1 << 20);
		assert_int_equal(ev.ts, 10);
		assert_int_equal(ev.u.gpu.end, 20);
		assert_int_equal(ev.u.gpu.stream, 3);
		assert_int_equal(ev.u.gpu.correlation, 5);
		assert_int_equal(ev.u.gpu.launch.block[0], 0); /* copies launch nothing */
		/* Made through the runtime: linked to the runtime call. */
		m.runtimeCorrelationId = 77;
		assert_int_equal(rp_cupti_translate(&m, 1, names, namebuf, &ev), 1);
		assert_int_equal(ev.u.gpu.correlation, 77);
	}
	CUpti_ActivityMemcpyPtoP4 p = { .kind = CUPTI_ACTIVITY_KIND_MEMCPY2, .bytes = 4096,
					.start = 30, .end = 40, .deviceId = 2, .srcDeviceId = 2,
					.dstDeviceId = 3, .streamId = 9, .correlationId = 6 };
	struct rp_event ev;
	assert_int_equal(rp_cupti_translate(&p, 1, names, namebuf, &ev), 1);
	assert_string_equal(ev.name, "Memcpy PtoP");
	assert_int_equal(ev.u.gpu.bytes, 4096);
	assert_int_equal(ev.u.gpu.device, 2);
	assert_int_equal(ev.u.gpu.stream, 9);
}

static void memset_record(void **state)
{
	(void)state;
	CUpti_ActivityMemset4 m = { .kind = CUPTI_ACTIVITY_KIND_MEMSET, .bytes = 512,
				    .start = 100, .end = 150, .deviceId = 0, .streamId = 2,
				    .correlationId = 77 };
	struct rp_event ev;
	assert_int_equal(rp_cupti_translate(&m, 1, names, namebuf, &ev), 1);
	assert_int_equal(ev.u.gpu.kind, RP_GPU_MEMSET);
	assert_string_equal(ev.name, "Memset");
	assert_int_equal(ev.u.gpu.bytes, 512);
	assert_int_equal(ev.u.gpu.correlation, 77);
}

static void runtime_calls(void **state)
{
	(void)state;
	CUpti_ActivityAPI a = { .kind = CUPTI_ACTIVITY_KIND_RUNTIME,
				.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
				.start = 500, .end = 800, .processId = 10, .threadId = 11,
				.correlationId = 42 };
	struct rp_event ev;
	assert_int_equal(rp_cupti_translate(&a, 1, names, namebuf, &ev), 1);
	assert_int_equal(ev.kind, RP_EV_API_CALL);
	assert_string_equal(ev.name, "cudaLaunchKernel_v7000");
	assert_int_equal(ev.ts, 500);
	assert_int_equal(ev.u.api.duration, 300);
	assert_int_equal(ev.pid, 10);
	assert_int_equal(ev.tid, 11); /* the calling thread */
	/* The kernel's correlationId too: exporters draw the launch flow. */
	assert_int_equal(ev.u.api.correlation, 42);
	/* A call the name table does not know keeps its id. */
	a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020;
	assert_int_equal(rp_cupti_translate(&a, 1, names, namebuf, &ev), 1);
	char want[64];
	snprintf(want, sizeof(want), "cuda runtime call %u",
		 (unsigned)CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
	assert_string_equal(ev.name, want);
	/* Noisy calls are not recorded. */
	for (unsigned i = 0; i < rp_cupti_noisy_count; i++) {
		a.cbid = rp_cupti_noisy_cbids[i];
		assert_true(rp_cupti_api_noisy(a.cbid));
		assert_int_equal(rp_cupti_translate(&a, 1, names, namebuf, &ev), 0);
	}
	assert_false(rp_cupti_api_noisy(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
}

static void sync_and_overhead(void **state)
{
	(void)state;
	CUpti_ActivitySynchronization2 s = {
		.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
		.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE,
		.start = 1000, .end = 3000, .correlationId = 8 };
	struct rp_event ev;
	assert_int_equal(rp_cupti_translate(&s, 5, names, namebuf, &ev), 1);
	assert_int_equal(ev.kind, RP_EV_API_CALL);
	assert_string_equal(ev.name, "sync: stream synchronize");
	assert_int_equal(ev.u.api.duration, 2000);
	assert_int_equal(ev.pid, 5);
	assert_int_equal(ev.tid, 0);
	/* A wait's id is its API call's, which launched no GPU work: no flow. */
	assert_int_equal(ev.u.api.correlation, 0);

	CUpti_ActivityOverhead3 o = { .kind = CUPTI_ACTIVITY_KIND_OVERHEAD,
				      .overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH,
				      .objectKind = CUPTI_ACTIVITY_OBJECT_THREAD,
				      .start = 10, .end = 60 };
	o.objectId.pt.processId = 5;
	o.objectId.pt.threadId = 6;
	assert_int_equal(rp_cupti_translate(&o, 5, names, namebuf, &ev), 1);
	assert_string_equal(ev.name, "cupti overhead: buffer flush");
	assert_int_equal(ev.tid, 6);
	assert_int_equal(ev.u.api.duration, 50);
	assert_int_equal(ev.u.api.correlation, 0);
	o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER;
	assert_int_equal(rp_cupti_translate(&o, 5, names, namebuf, &ev), 1);
	assert_string_equal(ev.name, "cupti overhead: driver compiler");
}

/* NVTX markers (RINGPROF_NVTX=1): a start and an end with the same id
 * become a range on the marking thread, an instantaneous marker an
 * instant; synchronization markers and the marker data records are not
 * recorded, a marker without a time is refused. */
static void nvtx_markers(void **state)
{
	(void)state;
	CUpti_ActivityMarker2 start = { .kind = CUPTI_ACTIVITY_KIND_MARKER,
					.flags = CUPTI_ACTIVITY_FLAG_MARKER_START,
					.timestamp = 1000, .id = 3,
					.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD,
					.name = "forward", .domain = NULL };
	start.objectId.pt.processId = 10;
	start.objectId.pt.threadId = 11;
	struct rp_event ev;
	assert_int_equal(rp_cupti_translate(&start, 1, names, namebuf, &ev), 1);
	assert_int_equal(ev.kind, RP_EV_RANGE_BEGIN);
	assert_int_equal(ev.ts, 1000);
	assert_int_equal(ev.pid, 10);
	assert_int_equal(ev.tid, 11);
	assert_string_equal(ev.name, "forward");

	CUpti_ActivityMarker2 end = start;
	end.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
	end.timestamp = 5000;
	end.name = NULL; /* CUPTI names only starts */
	assert_int_equal(rp_cupti_translate(&end, 1, names, namebuf, &ev), 1);
	assert_int_equal(ev.kind, RP_EV_RANGE_END);
	assert_int_equal(ev.ts, 5000);
	assert_int_equal(ev.tid, 11);
	assert_null(ev.name);

	CUpti_ActivityMarker2 mark = start;
	mark.flags = CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS;
	mark.name = "";
	mark.objectKind = CUPTI_ACTIVITY_OBJECT_PROCESS; /* no thread: the ring's */
	assert_int_equal(rp_cupti_translate(&mark, 1, names, namebuf, &ev), 1);
	assert_int_equal(ev.kind, RP_EV_INSTANT);
	assert_int_equal(ev.pid, 1);
	assert_int_equal(ev.tid, 0);
	assert_string_equal(ev.name, "nvtx");

	CUpti_ActivityMarker2 sync = start;
	sync.flags = CUPTI_ACTIVITY_FLAG_MARKER_SYNC_ACQUIRE;
	assert_int_equal(rp_cupti_translate(&sync, 1, names, namebuf, &ev), 0);
	CUpti_ActivityMarkerData2 data = { .kind = CUPTI_ACTIVITY_KIND_MARKER_DATA, .id = 3 };
	assert_int_equal(rp_cupti_translate(&data, 1, names, namebuf, &ev), 0);
	start.timestamp = 0;
	assert_int_equal(rp_cupti_translate(&start, 1, names, namebuf, &ev), -EINVAL);
}

/* Incomplete records (start 0, end before start) are refused, to be
 * counted as drops; kinds not recorded are skipped without error. */
static void drop_path(void **state)
{
	(void)state;
	struct rp_event ev;
	CUpti_ActivityKernel10 k = { .kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
				     .start = 0, .end = 5, .name = "k" };
	assert_int_equal(rp_cupti_translate(&k, 1, names, namebuf, &ev), -EINVAL);
	k.start = 10;
	k.end = 9;
	assert_int_equal(rp_cupti_translate(&k, 1, names, namebuf, &ev), -EINVAL);
	CUpti_ActivityAPI a = { .kind = CUPTI_ACTIVITY_KIND_RUNTIME,
				.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
				.start = 10, .end = 0 };
	assert_int_equal(rp_cupti_translate(&a, 1, names, namebuf, &ev), -EINVAL);
	CUpti_ActivityDevice5 d = { .kind = CUPTI_ACTIVITY_KIND_DEVICE };
	assert_int_equal(rp_cupti_translate(&d, 1, names, namebuf, &ev), 0);
	CUpti_Activity other = { .kind = CUPTI_ACTIVITY_KIND_CONTEXT };
	assert_int_equal(rp_cupti_translate(&other, 1, names, namebuf, &ev), 0);
}

static void device_uuid(void **state)
{
	(void)state;
	CUpti_ActivityDevice5 d = { .kind = CUPTI_ACTIVITY_KIND_DEVICE, .id = 3 };
	for (int i = 0; i < 16; i++)
		d.uuid.bytes[i] = (char)(0xa0 + i);
	uint32_t ord = 0;
	char uuid[RP_CUPTI_UUID_LEN];
	assert_true(rp_cupti_device_record(&d, &ord, uuid));
	assert_int_equal(ord, 3);
	assert_string_equal(uuid, "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf");
	CUpti_ActivityKernel10 k = { .kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL };
	assert_false(rp_cupti_device_record(&k, &ord, uuid));
}

/* The driver's list as /proc/driver/nvidia/gpus gives it: not in bus
 * order, as readdir may return it. */
static const struct rp_cupti_gpu gpus[] = {
	{ "0000:b1:00.0", "GPU-cccc" },
	{ "0000:1b:00.0", "GPU-aaaa" },
	{ "0000:3b:00.0", "GPU-bbbb" },
	{ "0000:db:00.0", "GPU-dddd" },
};

static void physical_index(void **state)
{
	(void)state;
	static const struct {
		const char *uuid;
		uint32_t ordinal;
		const char *cvd;
		uint32_t n;
		uint32_t want;
	} cases[] = {
		/* By UUID, whatever the process calls it. */
		{ "GPU-cccc", 0, "2", 4, 2 },
		{ "GPU-aaaa", 1, NULL, 4, 0 },
		{ "gpu-DDDD", 0, "3", 4, 3 },
		/* No UUID: CUDA_VISIBLE_DEVICES indices. */
		{ "", 0, "2,3", 4, 2 },
		{ "", 1, "2,3", 4, 3 },
		{ "", 1, "3,1,0", 0, 1 },
		/* CUDA_VISIBLE_DEVICES by UUID. */
		{ "", 1, "GPU-dddd,GPU-bbbb", 4, 1 },
		/* Nothing to go by: the ordinal. */
		{ "", 2, NULL, 4, 2 },
		{ "", 3, "0,1", 4, 3 },
		{ "GPU-ffff", 1, NULL, 4, 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(rp_cupti_physical_index(cases[i].uuid, cases[i].ordinal,
							 cases[i].cvd, gpus, cases[i].n),
				 cases[i].want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kernel),        cmocka_unit_test(memcpy_kinds),
		cmocka_unit_test(memset_record), cmocka_unit_test(runtime_calls),
		cmocka_unit_test(sync_and_overhead), cmocka_unit_test(drop_path),
		cmocka_unit_test(nvtx_markers),
		cmocka_unit_test(device_uuid),   cmocka_unit_test(physical_index),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
