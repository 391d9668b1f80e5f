/* Chunk builder and reader: round trips, the -ENOSPC/seal loop, the
 * prefix split, and rejection of every kind of damage.
 *
 * With RINGPROF_CHUNK_SEED_DIR set, the seed test also writes its chunks
 * there: that is how tests/fuzz/corpus/chunk/ is regenerated. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <lz4.h>

#include "chunk.h"

#define CHUNK_MAX (128u << 10)

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void assert_event_equal(const struct rp_event *want, const struct rp_event *got)
{
	assert_int_equal(want->kind, got->kind);
	assert_true(want->ts == got->ts);
	assert_int_equal(want->pid, got->pid);
	assert_int_equal(want->tid, got->tid);
	switch (want->kind) {
	case RP_EV_RANGE_END:
	case RP_EV_CPU_SAMPLE:
	case RP_EV_DROPS:
		assert_null(got->name);
		break;
	default:
		if (!want->name) {
			assert_null(got->name);
		} else {
			assert_non_null(got->name);
			assert_int_equal(strlen(got->name), strnlen(want->name, RP_NAME_MAX));
			assert_memory_equal(want->name, got->name, strlen(got->name));
		}
	}
	switch (want->kind) {
	case RP_EV_CPU_SAMPLE:
		assert_int_equal(want->u.sample.cpu, got->u.sample.cpu);
		assert_int_equal(want->u.sample.nframes, got->u.sample.nframes);
		assert_int_equal(want->u.sample.nkernel, got->u.sample.nkernel);
		if (want->u.sample.nframes)
			assert_memory_equal(want->u.sample.frames, got->u.sample.frames,
					    want->u.sample.nframes * sizeof(uint64_t));
		break;
	case RP_EV_COUNTER: /* bitwise: NaN payloads and -0.0 survive */
		assert_memory_equal(&want->u.counter.value, &got->u.counter.value, sizeof(double));
		break;
	case RP_EV_GPU_ACTIVITY:
		assert_true(want->u.gpu.end == got->u.gpu.end);
		assert_true(want->u.gpu.correlation == got->u.gpu.correlation);
		assert_true(want->u.gpu.bytes == got->u.gpu.bytes);
		assert_int_equal(want->u.gpu.device, got->u.gpu.device);
		assert_int_equal(want->u.gpu.stream, got->u.gpu.stream);
		assert_int_equal(want->u.gpu.kind, got->u.gpu.kind);
		assert_memory_equal(&want->u.gpu.launch, &got->u.gpu.launch,
				    sizeof(want->u.gpu.launch));
		break;
	case RP_EV_API_CALL:
		assert_true(want->u.api.duration == got->u.api.duration);
		assert_int_equal(want->u.api.device, got->u.api.device);
		assert_int_equal(want->u.api.correlation, got->u.api.correlation);
		break;
	case RP_EV_DROPS:
		assert_true(want->u.drops.count == got->u.drops.count);
		break;
	case RP_EV_DEVICE_OP:
		assert_true(want->u.op.end == got->u.op.end);
		assert_true(want->u.op.program_id == got->u.op.program_id);
		assert_true(want->u.op.flops == got->u.op.flops);
		assert_true(want->u.op.bytes_accessed == got->u.op.bytes_accessed);
		assert_int_equal(want->u.op.device, got->u.op.device);
		assert_int_equal(want->u.op.line, got->u.op.line);
		for (int i = 0; i < 2; i++) {
			const char *w = i ? want->u.op.hlo_module : want->u.op.hlo_op;
			const char *g = i ? got->u.op.hlo_module : got->u.op.hlo_op;
			if (!w) {
				assert_null(g);
				continue;
			}
			assert_non_null(g);
			assert_int_equal(strlen(g), strnlen(w, RP_NAME_MAX));
			assert_memory_equal(w, g, strlen(g));
		}
		break;
	case RP_EV_MAPPING:
		assert_true(want->u.mapping.start == got->u.mapping.start);
		assert_true(want->u.mapping.end == got->u.mapping.end);
		assert_true(want->u.mapping.offset == got->u.mapping.offset);
		assert_int_equal(want->u.mapping.build_id_len, got->u.mapping.build_id_len);
		assert_memory_equal(want->u.mapping.build_id, got->u.mapping.build_id,
				    want->u.mapping.build_id_len);
		break;
	case RP_EV_PY_CODE:
		assert_true(want->u.py_code.code == got->u.py_code.code);
		assert_int_equal(want->u.py_code.lasti, got->u.py_code.lasti);
		assert_int_equal(want->u.py_code.line, got->u.py_code.line);
		break;
	case RP_EV_DEVICE_INFO:
		assert_int_equal(want->u.device.kind, got->u.device.kind);
		assert_int_equal(want->u.device.index, got->u.device.index);
		break;
	default:
		break;
	}
}

/* ---- event sets ---------------------------------------------------------- */

static char name_max[RP_NAME_MAX + 1], name_long[RP_NAME_MAX + 50];
static uint64_t deep_stack[RP_STACK_MAX], short_stack[3] = {0x401000, 0x400f00, 0x7f0000001234};

static double dbl(uint64_t bits)
{
	double d;
	memcpy(&d, &bits, sizeof(d));
	return d;
}

/* Every kind, every field, extreme values; returns the count. */
static size_t all_kinds(struct rp_event *e)
{
	memset(name_max, 'm', RP_NAME_MAX);
	memset(name_long, 'l', sizeof(name_long) - 1);
	for (int i = 0; i < RP_STACK_MAX; i++)
		deep_stack[i] = i < 20 ? 0xffffffff81000000ull + (uint64_t)i * 0x1234
				       : 0x55555555a000ull - (uint64_t)i * 0x40;
	const uint64_t big = UINT64_MAX / 2;
	const double counters[] = {
		0.0, -0.0, 1.0, -3.0, 1.5, 9007199254740992.0, -9007199254740992.0,
		9007199254740994.0, 1e300, DBL_MAX, -DBL_MAX, DBL_MIN, 5e-324, INFINITY,
		-INFINITY, NAN, dbl(0x7ff8dead0000beefull), dbl(0xfff0000000000001ull),
	};
	size_t n = 0;
	e[n++] = (struct rp_event){.kind = RP_EV_PROCESS_NAME, .ts = 0, .pid = 1, .tid = 1,
				   .name = "trainer"};
	e[n++] = (struct rp_event){.kind = RP_EV_THREAD_NAME, .ts = big, .pid = UINT32_MAX,
				   .tid = UINT32_MAX, .name = "worker/0"};
	e[n++] = (struct rp_event){.kind = RP_EV_RANGE_BEGIN, .ts = 5, .pid = 1, .tid = 2,
				   .name = ""};
	e[n++] = (struct rp_event){.kind = RP_EV_RANGE_BEGIN, .ts = big - 1, .pid = 1, .tid = 2,
				   .name = name_max};
	e[n++] = (struct rp_event){.kind = RP_EV_RANGE_BEGIN, .ts = 7, .pid = 1, .tid = 2,
				   .name = name_long};
	e[n++] = (struct rp_event){.kind = RP_EV_RANGE_BEGIN, .ts = 8, .pid = 1, .tid = 2,
				   .name = NULL};
	e[n++] = (struct rp_event){.kind = RP_EV_RANGE_END, .ts = 6, .pid = 1, .tid = 2};
	e[n++] = (struct rp_event){.kind = RP_EV_INSTANT, .ts = 1000, .pid = 0, .tid = 0,
				   .name = "checkpoint"};
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		e[n++] = (struct rp_event){.kind = RP_EV_COUNTER, .ts = 2000 + i, .pid = 1,
					   .tid = 1, .name = i % 2 ? "loss" : "mem",
					   .u.counter.value = counters[i]};
	e[n++] = (struct rp_event){
		.kind = RP_EV_GPU_ACTIVITY, .ts = 3000, .pid = 1, .tid = 0, .name = "gemm_kernel",
		.u.gpu = {.end = 3500, .correlation = UINT64_MAX, .bytes = 0,
			  .device = UINT32_MAX, .stream = 7, .kind = RP_GPU_KERNEL,
			  .launch = {.grid = {UINT32_MAX, 2, 3}, .block = {256, 1, UINT32_MAX},
				     .registers = 255, .static_shared = 0,
				     .dynamic_shared = 49152}}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_GPU_ACTIVITY, .ts = big, .pid = 1, .tid = 3, .name = "memcpy HtoD",
		.u.gpu = {.end = 1, .correlation = 0, .bytes = UINT64_MAX, .device = 0,
			  .stream = UINT32_MAX, .kind = RP_GPU_MEMCPY}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_GPU_ACTIVITY, .ts = 4000, .pid = 1, .tid = 3, .name = "memset",
		.u.gpu = {.end = UINT64_MAX, .correlation = 42, .bytes = 4096, .device = 1,
			  .stream = 0, .kind = 0xee}};
	e[n++] = (struct rp_event){.kind = RP_EV_API_CALL, .ts = 4100, .pid = 1, .tid = 2,
				   .name = "cudaLaunchKernel",
				   .u.api = {.duration = UINT64_MAX, .device = UINT32_MAX,
					     .correlation = UINT32_MAX}};
	e[n++] = (struct rp_event){.kind = RP_EV_API_CALL, .ts = 4200, .pid = 1, .tid = 2,
				   .name = "cudaMemcpyAsync", .u.api = {.duration = 0, .device = 0}};
	e[n++] = (struct rp_event){.kind = RP_EV_CPU_SAMPLE, .ts = 4300, .pid = 1, .tid = 2,
				   .u.sample = {.cpu = 3, .nframes = RP_STACK_MAX, .nkernel = 20,
						.frames = deep_stack}};
	e[n++] = (struct rp_event){.kind = RP_EV_CPU_SAMPLE, .ts = 4301, .pid = 1, .tid = 2,
				   .u.sample = {.cpu = UINT32_MAX, .nframes = 3, .nkernel = 0,
						.frames = short_stack}};
	e[n++] = (struct rp_event){.kind = RP_EV_CPU_SAMPLE, .ts = 4302, .pid = 1, .tid = 2,
				   .u.sample = {.cpu = 0, .nframes = RP_STACK_MAX,
						.nkernel = RP_STACK_MAX, .frames = deep_stack}};
	e[n++] = (struct rp_event){.kind = RP_EV_CPU_SAMPLE, .ts = 4303, .pid = 1, .tid = 2,
				   .u.sample = {.cpu = 1, .nframes = 0}};
	e[n++] = (struct rp_event){.kind = RP_EV_CPU_SAMPLE, .ts = 4304, .pid = 1, .tid = 2,
				   .u.sample = {.cpu = 3, .nframes = RP_STACK_MAX, .nkernel = 20,
						.frames = deep_stack}};
	e[n++] = (struct rp_event){.kind = RP_EV_DROPS, .ts = 4400, .pid = 1, .tid = 2,
				   .u.drops.count = 17};
	e[n++] = (struct rp_event){.kind = RP_EV_DROPS, .ts = 4401, .pid = 1, .tid = 2,
				   .u.drops.count = UINT64_MAX};
	e[n++] = (struct rp_event){.kind = RP_EV_RANGE_END, .ts = 3, .pid = 1, .tid = 2,
				   .name = "ignored: range ends carry no name"};
	e[n++] = (struct rp_event){.kind = RP_EV_PROCESS_CMDLINE, .ts = 4500, .pid = 1, .tid = 1,
				   .name = "python3 train.py --epochs 3"};
	e[n++] = (struct rp_event){.kind = RP_EV_PROCESS_CMDLINE, .ts = 4501, .pid = 2, .tid = 2,
				   .name = name_long};
	e[n++] = (struct rp_event){
		.kind = RP_EV_MAPPING, .ts = 4600, .pid = 1, .tid = 1,
		.name = "/usr/lib/x86_64-linux-gnu/libc.so.6",
		.u.mapping = {.start = 0x7f0000028000, .end = 0x7f000017d000, .offset = 0x28000,
			      .build_id = {0x3a, 0x1b, 0, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
					   13, 14, 15, 0xee},
			      .build_id_len = RP_BUILD_ID_MAX}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_MAPPING, .ts = 4601, .pid = 1, .tid = 1, .name = "[vdso]",
		.u.mapping = {.start = 0x7ffd00000000, .end = 0x7ffd00002000}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_MAPPING, .ts = big, .pid = UINT32_MAX, .tid = UINT32_MAX,
		.name = name_max,
		.u.mapping = {.start = UINT64_MAX - 1, .end = UINT64_MAX, .offset = UINT64_MAX,
			      .build_id = {0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89},
			      .build_id_len = 8}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_PY_CODE, .ts = 4700, .pid = 1, .tid = 1,
		.name = "Trainer.step\t/srv/train.py",
		.u.py_code = {.code = 0x7f12345678a0, .lasti = 42, .line = 117}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_PY_CODE, .ts = 4701, .pid = 1, .tid = 1, .name = "<module>\t<string>",
		.u.py_code = {.code = RP_PY_CODE_MASK, .lasti = RP_PY_LASTI_MAX, .line = UINT32_MAX}};
	e[n++] = (struct rp_event){.kind = RP_EV_DEVICE_INFO, .ts = 4702,
				   .name = "GPU-8f6e1c2a-0b7d-4c11-9e55-3a1f0c9d2b4e",
				   .u.device = {.kind = RP_DEVICE_GPU, .index = 1}};
	e[n++] = (struct rp_event){.kind = RP_EV_DEVICE_INFO, .ts = 4703,
				   .u.device = {.kind = RP_DEVICE_NEURON_CORE, .index = UINT32_MAX}};
	/* A kind this build does not know is kept as it is. */
	e[n++] = (struct rp_event){.kind = RP_EV_DEVICE_INFO, .ts = 4704, .name = name_max,
				   .u.device = {.kind = 0xff}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_DEVICE_OP, .ts = 4710, .pid = 1, .tid = 7, .name = "fusion.12",
		.u.op = {.end = 4900, .hlo_op = "fusion.12", .hlo_module = "jit_train_step",
			 .program_id = 17, .flops = 1u << 20, .bytes_accessed = 65536, .device = 0,
			 .line = 7}};
	e[n++] = (struct rp_event){
		.kind = RP_EV_DEVICE_OP, .ts = big, .pid = UINT32_MAX, .tid = UINT32_MAX,
		.name = name_long,
		.u.op = {.end = UINT64_MAX, .hlo_op = name_max, .hlo_module = name_long,
			 .program_id = UINT64_MAX, .flops = UINT64_MAX,
			 .bytes_accessed = UINT64_MAX, .device = RP_OP_HOST, .line = UINT32_MAX}};
	e[n++] = (struct rp_event){.kind = RP_EV_DEVICE_OP, .ts = 4711, .pid = 1, .tid = 1,
				   .name = "train step", .u.op = {.end = 4711}};
	return n;
}

/* A realistic stream: 2 threads, 10 names, nested ranges, 50..1000 ns
 * between events. */
struct stream {
	uint64_t ts;
	int depth[2];
};
static const char *const range_names[10] = {
	"forward", "backward", "optimizer.step", "allreduce", "dataloader.next",
	"attention", "mlp", "layernorm", "embedding", "loss",
};
static void stream_next(struct stream *s, struct rp_event *ev)
{
	uint64_t r = rnd();
	int t = (int)(r & 1);
	s->ts += 50 + (r >> 8) % 951;
	bool begin = s->depth[t] == 0 || (s->depth[t] < 8 && (r >> 20) % 2);
	*ev = (struct rp_event){.kind = begin ? RP_EV_RANGE_BEGIN : RP_EV_RANGE_END,
				.ts = s->ts, .pid = 4242, .tid = 4242 + (uint32_t)t,
				.name = begin ? range_names[(r >> 24) % 10] : NULL};
	s->depth[t] += begin ? 1 : -1;
}

/* ---- helpers ------------------------------------------------------------- */

/* Add ev, sealing into chunks[] whenever the builder is full. */
struct sink {
	uint8_t *buf;      /* chunks back to back */
	size_t len, cap;
	size_t *off;       /* start of each chunk */
	size_t n, ncap;
	uint64_t seq;
	unsigned splits;   /* seals that left events behind */
};

static void sink_seal(struct rp_chunk_builder *b, struct sink *s, size_t max)
{
	if (s->len + max > s->cap) {
		s->cap = (s->cap + max) * 2;
		s->buf = realloc(s->buf, s->cap);
	}
	if (s->n == s->ncap) {
		s->ncap = s->ncap ? s->ncap * 2 : 64;
		s->off = realloc(s->off, s->ncap * sizeof(size_t));
	}
	size_t len = 0;
	uint32_t before = rp_chunk_builder_count(b);
	assert_int_equal(rp_chunk_builder_seal(b, s->seq++, -5, s->buf + s->len, max, &len), 0);
	assert_true(len <= max && len > RP_CHUNK_HEADER_SIZE);
	uint32_t after = rp_chunk_builder_count(b);
	assert_true(after < before);
	s->splits += after > 0;
	s->off[s->n++] = s->len;
	s->len += len;
}

static void sink_add(struct rp_chunk_builder *b, struct sink *s, size_t max,
		     const struct rp_event *ev)
{
	int rc;
	while ((rc = rp_chunk_builder_add(b, ev)) == -ENOSPC)
		sink_seal(b, s, max);
	assert_int_equal(rc, 0);
}

static void sink_flush(struct rp_chunk_builder *b, struct sink *s, size_t max)
{
	while (rp_chunk_builder_count(b))
		sink_seal(b, s, max);
}

static size_t sink_chunk_len(const struct sink *s, size_t i)
{
	return (i + 1 < s->n ? s->off[i + 1] : s->len) - s->off[i];
}

static void sink_free(struct sink *s)
{
	free(s->buf);
	free(s->off);
}

/* ---- tests --------------------------------------------------------------- */

static void roundtrip_all_kinds(void **state)
{
	(void)state;
	struct rp_event evs[64];
	size_t n = all_kinds(evs);
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(9, CHUNK_MAX, &b), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(rp_chunk_builder_add(b, &evs[i]), 0);
	assert_int_equal(rp_chunk_builder_count(b), n);
	assert_true(rp_chunk_builder_opened_ts(b) == 0);

	static uint8_t chunk[CHUNK_MAX];
	size_t len;
	assert_int_equal(rp_chunk_builder_seal(b, 77, -123456789, chunk, sizeof(chunk), &len), 0);
	assert_int_equal(rp_chunk_builder_count(b), 0);

	struct rp_chunk_reader *r;
	struct rp_err err = {0};
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	assert_int_equal(rp_chunk_reader_load(r, chunk, len, &err), 0);
	const struct rp_chunk_header *h = rp_chunk_reader_header(r);
	assert_non_null(h);
	assert_int_equal(h->device_id, 9);
	assert_true(h->seq == 77);
	assert_true(h->wall_offset_ns == -123456789);
	assert_true(h->first_ts == 0);
	assert_true(h->last_ts == UINT64_MAX / 2);
	assert_int_equal(h->event_count, n);
	assert_int_equal(h->dropped, UINT32_MAX); /* 17 + UINT64_MAX saturates */
	assert_int_equal(h->comp_size + RP_CHUNK_HEADER_SIZE, len);

	struct rp_event ev;
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(rp_chunk_reader_next(r, &ev, &err), 1);
		assert_event_equal(&evs[i], &ev);
	}
	assert_int_equal(rp_chunk_reader_next(r, &ev, &err), 0);
	assert_int_equal(rp_chunk_reader_next(r, &ev, &err), 0);
	rp_chunk_reader_free(r);
	rp_chunk_builder_free(b);
}

static void dropped_sums_within_u32(void **state)
{
	(void)state;
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(0, 4096, &b), 0);
	struct rp_event ev = {.kind = RP_EV_DROPS, .ts = 100, .pid = 1, .tid = 1,
			      .u.drops.count = 1000};
	for (int i = 0; i < 3; i++)
		assert_int_equal(rp_chunk_builder_add(b, &ev), 0);
	uint8_t chunk[4096];
	size_t len;
	assert_int_equal(rp_chunk_builder_seal(b, 0, 0, chunk, sizeof(chunk), &len), 0);
	struct rp_chunk_header h;
	assert_int_equal(rp_chunk_header_check(chunk, len, &h, NULL), 0);
	assert_int_equal(h.dropped, 3000);
	assert_true(h.first_ts == 100 && h.last_ts == 100);
	rp_chunk_builder_free(b);
}

static void api_errors(void **state)
{
	(void)state;
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(0, 4095, &b), -EINVAL);
	assert_int_equal(rp_chunk_builder_new(0, 4096, &b), 0);
	uint8_t chunk[4096];
	size_t len;
	assert_int_equal(rp_chunk_builder_seal(b, 0, 0, chunk, sizeof(chunk), &len), -ENODATA);

	uint64_t frames[RP_STACK_MAX + 1] = {0};
	struct rp_event bad[] = {
		{.kind = 0},
		{.kind = RP_EV_KIND_MAX + 1},
		{.kind = RP_EV_PY_CODE, .u.py_code = {.code = RP_PY_CODE_MASK + 1}},
		{.kind = RP_EV_PY_CODE, .u.py_code = {.lasti = RP_PY_LASTI_MAX + 1}},
		{.kind = RP_EV_CPU_SAMPLE, .u.sample = {.nframes = RP_STACK_MAX + 1, .frames = frames}},
		{.kind = RP_EV_CPU_SAMPLE, .u.sample = {.nframes = 2, .nkernel = 3, .frames = frames}},
		{.kind = RP_EV_CPU_SAMPLE, .u.sample = {.nframes = 2, .frames = NULL}},
		{.kind = RP_EV_MAPPING, .u.mapping = {.start = 2, .end = 1}},
		{.kind = RP_EV_MAPPING, .u.mapping = {.end = 1, .build_id_len = RP_BUILD_ID_MAX + 1}},
		{.kind = RP_EV_DEVICE_OP, .ts = 5, .u.op = {.end = 4}},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(rp_chunk_builder_add(b, &bad[i]), -EINVAL);
	assert_int_equal(rp_chunk_builder_count(b), 0);

	struct rp_event ok = {.kind = RP_EV_INSTANT, .ts = 42, .name = "x"};
	assert_int_equal(rp_chunk_builder_add(b, &ok), 0);
	assert_true(rp_chunk_builder_opened_ts(b) == 42);
	assert_int_equal(rp_chunk_builder_seal(b, 0, 0, chunk, 4095, &len), -EINVAL);
	assert_int_equal(rp_chunk_builder_count(b), 1);

	struct rp_chunk_reader *r;
	struct rp_event ev;
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	assert_null(rp_chunk_reader_header(r));
	assert_int_equal(rp_chunk_reader_next(r, &ev, NULL), 0);
	rp_chunk_reader_free(r);
	rp_chunk_builder_free(b);
}

/* e at ts; a device op keeps its duration, within range. */
static struct rp_event restamped(const struct rp_event *e, uint64_t ts)
{
	struct rp_event ev = *e;
	if (ev.kind == RP_EV_DEVICE_OP) {
		uint64_t d = ev.u.op.end - ev.ts;
		ev.u.op.end = ts + (d > UINT64_MAX - ts ? UINT64_MAX - ts : d);
	}
	ev.ts = ts;
	return ev;
}

static void many_chunks(void **state)
{
	(void)state;
	const size_t max = 16384, total = 300000;
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(3, max, &b), 0);
	struct sink s = {0};
	struct rp_event kinds[64];
	size_t nk = all_kinds(kinds);

	/* The realistic stream, with one event of every kind mixed in now
	 * and then, each re-stamped so the set of timestamps stays sane. */
	rng_state = 1;
	struct stream st = {.ts = 1000000};
	struct rp_event ev;
	for (size_t i = 0; i < total; i++) {
		if (i % 97 == 0) {
			ev = restamped(&kinds[(i / 97) % nk], st.ts);
		} else {
			stream_next(&st, &ev);
		}
		sink_add(b, &s, max, &ev);
		if (i == 0)
			assert_true(rp_chunk_builder_opened_ts(b) == ev.ts);
	}
	sink_flush(b, &s, max);
	assert_true(s.n > 20);

	struct rp_chunk_reader *r;
	struct rp_err err = {0};
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	rng_state = 1;
	st = (struct stream){.ts = 1000000};
	size_t i = 0;
	for (size_t c = 0; c < s.n; c++) {
		assert_int_equal(rp_chunk_reader_load(r, s.buf + s.off[c], sink_chunk_len(&s, c), &err), 0);
		const struct rp_chunk_header *h = rp_chunk_reader_header(r);
		assert_true(h->seq == c);
		assert_int_equal(h->device_id, 3);
		struct rp_event got;
		int rc;
		uint32_t in_chunk = 0;
		while ((rc = rp_chunk_reader_next(r, &got, &err)) == 1) {
			if (i % 97 == 0) {
				ev = restamped(&kinds[(i / 97) % nk], st.ts);
			} else {
				stream_next(&st, &ev);
			}
			assert_event_equal(&ev, &got);
			i++;
			in_chunk++;
		}
		assert_int_equal(rc, 0);
		assert_int_equal(in_chunk, h->event_count);
	}
	assert_int_equal(i, total);
	rp_chunk_reader_free(r);
	sink_free(&s);
	rp_chunk_builder_free(b);
}

/* A counter with a random name, value, time and thread (nm: 33 bytes). */
static void random_counter(struct rp_event *ev, char *nm)
{
	for (int k = 0; k < 32; k++)
		nm[k] = (char)(33 + rnd() % 90);
	nm[32] = 0;
	*ev = (struct rp_event){.kind = RP_EV_COUNTER, .name = nm};
	ev->ts = rnd();
	ev->pid = (uint32_t)rnd();
	ev->tid = (uint32_t)rnd();
	ev->u.counter.value = dbl(rnd());
}

/* Incompressible events after compressible ones: the target adapted to
 * the good ratio overshoots, so seal must cut a prefix and carry the
 * rest over, repeatedly.  Nothing may be lost or reordered. */
static void prefix_split(void **state)
{
	(void)state;
	const size_t max = 4096;
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(1, max, &b), 0);
	struct sink s = {0};
	char nm[33];
	size_t total = 0;
	rng_state = 99;
	for (int phase = 0; phase < 6; phase++) {
		for (int i = 0; i < 3000; i++) { /* compressible: fills a chunk */
			struct rp_event ev = {.kind = RP_EV_INSTANT, .ts = 1000 + total,
					      .pid = 1, .tid = 1, .name = "same"};
			sink_add(b, &s, max, &ev);
			total++;
		}
		for (int i = 0; i < 3000; i++) { /* random names and counters */
			struct rp_event ev;
			random_counter(&ev, nm);
			sink_add(b, &s, max, &ev);
			total++;
		}
	}
	sink_flush(b, &s, max);
	assert_true(s.splits > 0);
	printf("prefix split: %zu events, %zu chunks of <= %zu bytes, %u seals split\n",
	       total, s.n, max, s.splits);

	struct rp_chunk_reader *r;
	struct rp_err err = {0};
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	rng_state = 99;
	size_t i = 0;
	for (size_t c = 0; c < s.n; c++) {
		assert_int_equal(rp_chunk_reader_load(r, s.buf + s.off[c], sink_chunk_len(&s, c), &err), 0);
		struct rp_event got;
		int rc;
		while ((rc = rp_chunk_reader_next(r, &got, &err)) == 1) {
			if ((i / 3000) % 2 == 0) {
				struct rp_event want = {.kind = RP_EV_INSTANT, .ts = 1000 + i,
							.pid = 1, .tid = 1, .name = "same"};
				assert_event_equal(&want, &got);
			} else {
				struct rp_event want;
				random_counter(&want, nm);
				assert_event_equal(&want, &got);
			}
			i++;
		}
		assert_int_equal(rc, 0);
	}
	assert_int_equal(i, total);
	rp_chunk_reader_free(r);
	sink_free(&s);
	rp_chunk_builder_free(b);
}

/* A chunk whose raw payload is ours: compress it and frame it with a
 * valid CRC, so only the payload decoder can object. */
static size_t craft(uint8_t *out, size_t cap, const uint8_t *raw, size_t rawlen,
		    uint32_t events, uint64_t first, uint64_t last)
{
	int c = LZ4_compress_default((const char *)raw, (char *)out + RP_CHUNK_HEADER_SIZE,
				     (int)rawlen, (int)(cap - RP_CHUNK_HEADER_SIZE));
	assert_true(c > 0);
	struct rp_chunk_header h = {
		.magic = RP_CHUNK_MAGIC, .version = RP_FORMAT_VERSION,
		.header_size = RP_CHUNK_HEADER_SIZE, .codec = RP_CODEC_LZ4, .seq = 5,
		.first_ts = first, .last_ts = last, .event_count = events,
		.raw_size = (uint32_t)rawlen, .comp_size = (uint32_t)c,
	};
	rp_chunk_header_write(&h, out, out + RP_CHUNK_HEADER_SIZE);
	return RP_CHUNK_HEADER_SIZE + (size_t)c;
}

/* Load and walk; the first error, 0 if the chunk reads cleanly. */
static int walk(struct rp_chunk_reader *r, const void *buf, size_t len, struct rp_err *err)
{
	int rc = rp_chunk_reader_load(r, buf, len, err);
	struct rp_event ev;
	while (rc == 0 && (rc = rp_chunk_reader_next(r, &ev, err)) == 1)
		rc = 0;
	return rc;
}

static void corrupt_payload(void **state)
{
	(void)state;
	struct rp_chunk_reader *r;
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	/* Sanity: the crafted form of a good payload reads. */
	static const uint8_t good[] = {0x42, 1, 2, 0x40, 2, 'h', 'i', 2, 20, 1, 1, 3, 1, 1};
	uint8_t chunk[1024];
	struct rp_err err = {0};
	size_t len = craft(chunk, sizeof(chunk), good, sizeof(good), 2, 9, 10);
	assert_int_equal(walk(r, chunk, len, &err), 0);

	struct {
		uint8_t raw[32];
		size_t len;
		uint32_t events;
		const char *msg;
	} cases[] = {
		{{0x42, 1, 2, 2, 20, 1, 7}, 7, 1, "string id 7 used before definition at byte 6"},
		{{0x42, 1, 2, 2, 20, 0, 0}, 7, 1, "thread id 0 used before definition"},
		{{0x42, 1, 2, 1, 20, 1, 0, 1}, 8, 1, "stack id 1 used before definition"},
		{{0x42, 1, 2, 0x43}, 4, 1, "unknown record tag 0x43 at byte 3"},
		{{0x00}, 1, 1, "unknown record tag 0x00"},
		{{0x42, 1, 2, 3, 20, 0x81}, 6, 1, "truncated or overlong varint for a thread id"},
		{{0x42, 1, 2, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 1},
		 15, 1, "overlong varint for timestamp delta"},
		{{0x40, 0x80, 0x02}, 3, 1, "string length 256 exceeds 255"},
		{{0x40, 3, 'a', 'b'}, 4, 1, "string of 3 bytes runs past the end"},
		{{0x40, 2, 'a', 0}, 4, 1, "string holds a NUL byte"},
		{{0x41, 0x80, 0x01, 0}, 4, 1, "stack depth 128 exceeds 127"},
		{{0x41, 2, 3, 1, 1}, 5, 1, "kernel frame count 3 exceeds 2"},
		{{0x41, 0, 0}, 3, 1, "empty stack definition"},
		{{0x42, 0x80, 0x80, 0x80, 0x80, 0x10, 1}, 7, 1, "pid 4294967296 exceeds"},
		{{0x42, 1, 2, 3, 20, 1, 3, 2, 1}, 9, 1, "more events than the header's 1"},
		{{0x42, 1, 2, 3, 20, 1}, 6, 2, "payload ends after 1 events, header says 2"},
		{{0x42, 1, 2, 3, 30, 1}, 6, 1, "event time 15 outside the header's 9..10"},
		{{0x42, 1, 2, 5, 20, 1, 0, 0, 1, 2, 3, 4, 5, 6, 7}, 15, 1,
		 "counter value runs past the end"},
		{{0x42, 1, 2, 6, 20, 1, 0}, 7, 1, "GPU activity kind runs past the end"},
		{{0x42, 1, 2, 11, 20, 1, 0, 1, 1, 0}, 10, 1, "build-id length runs past the end"},
		{{0x42, 1, 2, 0x87, 20, 1, 0, 5, 0}, 9, 1,
		 "truncated or overlong varint for correlation"},
		{{0x42, 1, 2, 0x87, 20, 1, 0, 5, 0, 0x80, 0x80, 0x80, 0x80, 0x10}, 14, 1,
		 "correlation 4294967296 exceeds"},
		{{0x42, 1, 2, 0x82, 20, 1, 0}, 7, 1, "unknown record tag 0x82"},
		{{0x42, 1, 2, 0x86, 20, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}, 21, 1,
		 "truncated or overlong varint for launch configuration"},
		{{0xff}, 1, 1, "unknown record tag 0xff"},
		{{0x42, 1, 2, 11, 20, 1, 0, 1, 1, 0, 21}, 11, 1, "build-id of 21 bytes exceeds 20"},
		{{0x42, 1, 2, 11, 20, 1, 0, 1, 1, 0, 2, 0xaa}, 12, 1,
		 "build-id of 2 bytes runs past the end"},
		{{0x42, 1, 2, 11, 20, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
		  1, 0, 0},
		 20, 1, "mapping size 1 exceeds 0"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		len = craft(chunk, sizeof(chunk), cases[i].raw, cases[i].len,
			    cases[i].events, 9, 10);
		memset(&err, 0, sizeof(err));
		int rc = walk(r, chunk, len, &err);
		if (rc != -EBADMSG || !strstr(err.msg, cases[i].msg))
			fail_msg("case %zu: rc %d, \"%s\", wanted \"%s\"", i, rc, err.msg,
				 cases[i].msg);
		assert_non_null(strstr(err.msg, "corrupt chunk seq 5: "));
		struct rp_event ev;
		assert_int_equal(rp_chunk_reader_next(r, &ev, &err), -EBADMSG);
	}

	/* LZ4 damage under a valid CRC. */
	len = craft(chunk, sizeof(chunk), good, sizeof(good), 2, 9, 10);
	struct rp_chunk_header h;
	assert_int_equal(rp_chunk_header_check(chunk, len, &h, NULL), 0);
	h.raw_size++;
	rp_chunk_header_write(&h, chunk, chunk + RP_CHUNK_HEADER_SIZE);
	assert_int_equal(walk(r, chunk, len, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "does not decompress"));
	assert_null(rp_chunk_reader_header(r));
	memset(chunk + RP_CHUNK_HEADER_SIZE, 0xf0, h.comp_size);
	h.raw_size--;
	rp_chunk_header_write(&h, chunk, chunk + RP_CHUNK_HEADER_SIZE);
	assert_int_equal(walk(r, chunk, len, &err), -EBADMSG);
	rp_chunk_reader_free(r);
}

/* An API call as chunks before correlation ids held it (tag 7) reads
 * with none; with one, it has tag 0x87 and a trailing varint. */
static void api_call_encodings(void **state)
{
	(void)state;
	struct rp_chunk_reader *r;
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	static const uint8_t raw[] = {0x42, 1, 2, 0x40, 1, 'c',
				      0x07, 18, 1, 1, 5, 3,
				      0x87, 2, 1, 1, 6, 3, 0xff, 0xff, 0xff, 0xff, 0x0f};
	uint8_t chunk[256];
	struct rp_err err = {0};
	size_t len = craft(chunk, sizeof(chunk), raw, sizeof(raw), 2, 9, 10);
	assert_int_equal(rp_chunk_reader_load(r, chunk, len, &err), 0);
	struct rp_event ev;
	assert_int_equal(rp_chunk_reader_next(r, &ev, &err), 1);
	assert_int_equal(ev.kind, RP_EV_API_CALL);
	assert_string_equal(ev.name, "c");
	assert_int_equal(ev.u.api.duration, 5);
	assert_int_equal(ev.u.api.device, 3);
	assert_int_equal(ev.u.api.correlation, 0);
	assert_int_equal(rp_chunk_reader_next(r, &ev, &err), 1);
	assert_int_equal(ev.kind, RP_EV_API_CALL);
	assert_int_equal(ev.ts, 10);
	assert_int_equal(ev.u.api.duration, 6);
	assert_int_equal(ev.u.api.correlation, UINT32_MAX);
	assert_int_equal(rp_chunk_reader_next(r, &ev, &err), 0);
	rp_chunk_reader_free(r);
}

/* Random damage to real payloads, re-framed with valid CRCs. */
static void mutated_payloads(void **state)
{
	(void)state;
	struct rp_event evs[64];
	size_t n = all_kinds(evs);
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(0, CHUNK_MAX, &b), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(rp_chunk_builder_add(b, &evs[i]), 0);
	static uint8_t chunk[CHUNK_MAX], raw[CHUNK_MAX], mut[CHUNK_MAX], out[CHUNK_MAX];
	size_t len;
	assert_int_equal(rp_chunk_builder_seal(b, 0, 0, chunk, sizeof(chunk), &len), 0);
	struct rp_chunk_header h;
	assert_int_equal(rp_chunk_header_check(chunk, len, &h, NULL), 0);
	int rawlen = LZ4_decompress_safe((char *)chunk + RP_CHUNK_HEADER_SIZE, (char *)raw,
					 (int)h.comp_size, sizeof(raw));
	assert_int_equal(rawlen, h.raw_size);

	struct rp_chunk_reader *r;
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	rng_state = 7;
	unsigned rejected = 0;
	for (int it = 0; it < 5000; it++) {
		memcpy(mut, raw, (size_t)rawlen);
		size_t mlen = (size_t)rawlen;
		for (int k = 1 + (int)(rnd() % 4); k > 0; k--) {
			size_t pos = rnd() % mlen;
			if (rnd() % 8 == 0)
				mlen = pos + 1;
			else
				mut[pos] = (uint8_t)rnd();
		}
		size_t l = craft(out, sizeof(out), mut, mlen, h.event_count, h.first_ts, h.last_ts);
		struct rp_err err = {0};
		int rc = walk(r, out, l, &err);
		assert_true(rc == 0 || rc == -EBADMSG);
		rejected += rc < 0;
	}
	assert_true(rejected > 2500);
	rp_chunk_reader_free(r);
	rp_chunk_builder_free(b);
}

static size_t small_chunk(uint8_t *chunk, size_t cap)
{
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(2, 4096, &b), 0);
	struct rp_event evs[] = {
		{.kind = RP_EV_RANGE_BEGIN, .ts = 1000, .pid = 10, .tid = 11, .name = "step"},
		{.kind = RP_EV_COUNTER, .ts = 1100, .pid = 10, .tid = 11, .name = "mem",
		 .u.counter.value = 12.5},
		{.kind = RP_EV_RANGE_END, .ts = 1200, .pid = 10, .tid = 11},
	};
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(rp_chunk_builder_add(b, &evs[i]), 0);
	size_t len;
	assert_int_equal(rp_chunk_builder_seal(b, 1, 0, chunk, cap, &len), 0);
	rp_chunk_builder_free(b);
	return len;
}

static void header_rejects(void **state)
{
	(void)state;
	uint8_t chunk[4096], bad[4096];
	size_t len = small_chunk(chunk, sizeof(chunk));
	struct rp_chunk_reader *r;
	struct rp_err err = {0};
	struct rp_chunk_header h;
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	assert_int_equal(walk(r, chunk, len, &err), 0);
	assert_int_equal(rp_chunk_header_check(chunk, len, &h, NULL), 0);

	memcpy(bad, chunk, len);
	bad[0] ^= 1;
	assert_int_equal(rp_chunk_reader_load(r, bad, len, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "bad magic"));
	assert_null(rp_chunk_reader_header(r));

	struct rp_chunk_header v = h;
	v.version = RP_FORMAT_VERSION + 1;
	memcpy(bad, chunk, len);
	rp_chunk_header_write(&v, bad, bad + RP_CHUNK_HEADER_SIZE);
	assert_int_equal(rp_chunk_reader_load(r, bad, len, &err), -EPROTONOSUPPORT);

	assert_int_equal(rp_chunk_reader_load(r, chunk, len - 1, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "impossible sizes"));
	assert_int_equal(rp_chunk_reader_load(r, chunk, 10, &err), -EBADMSG);
	v = h;
	v.raw_size = RP_CHUNK_RAW_MAX + 1;
	rp_chunk_header_write(&v, bad, bad + RP_CHUNK_HEADER_SIZE);
	assert_int_equal(rp_chunk_reader_load(r, bad, len, &err), -EBADMSG);
	v = h;
	v.raw_size = 1; /* comp_size cannot come from so little */
	v.event_count = 1;
	rp_chunk_header_write(&v, bad, bad + RP_CHUNK_HEADER_SIZE);
	assert_int_equal(rp_chunk_reader_load(r, bad, len, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "cannot come from"));

	/* Every single-bit flip anywhere is caught before decoding. */
	for (size_t bit = 0; bit < len * 8; bit++) {
		memcpy(bad, chunk, len);
		bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int rc = walk(r, bad, len, &err);
		if (rc >= 0)
			fail_msg("flip of bit %zu accepted", bit);
	}

	/* The reader is reusable after all that. */
	assert_int_equal(walk(r, chunk, len, &err), 0);
	rp_chunk_reader_free(r);
}

static void bytes_per_event(void **state)
{
	(void)state;
	const size_t total = 1000000;
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(0, CHUNK_MAX, &b), 0);
	struct sink s = {0};
	rng_state = 12345;
	struct stream st = {.ts = 123456789012};
	struct rp_event ev;
	for (size_t i = 0; i < total; i++) {
		stream_next(&st, &ev);
		sink_add(b, &s, CHUNK_MAX, &ev);
	}
	sink_flush(b, &s, CHUNK_MAX);
	uint64_t raw = 0;
	for (size_t c = 0; c < s.n; c++) {
		struct rp_chunk_header h;
		assert_int_equal(rp_chunk_header_check(s.buf + s.off[c], sink_chunk_len(&s, c), &h, NULL), 0);
		raw += h.raw_size;
	}
	double per = (double)s.len / (double)total;
	printf("range events: %.2f bytes/event on disk (%.2f raw), %zu chunks, %.1f%% of %u-byte "
	       "chunks used\n", per, (double)raw / (double)total, s.n,
	       100.0 * (double)s.len / ((double)s.n * CHUNK_MAX), CHUNK_MAX);
	assert_true(per < 6.0);
	sink_free(&s);
	rp_chunk_builder_free(b);
}

static void write_seed(const char *dir, const char *name, const void *buf, size_t len)
{
	if (!dir)
		return;
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

/* The fuzz seeds: small real chunks covering every kind.  Each must read
 * back cleanly; written out only on request. */
/* The name table the daemon and old sessions go by. */
static void device_names_identify(void **state)
{
	(void)state;
	static const struct {
		const char *name;
		enum rp_device_kind kind;
		uint32_t index;
	} cases[] = {
		{ "host", RP_DEVICE_HOST, 0 },     { "gpu0", RP_DEVICE_GPU, 0 },
		{ "gpu17", RP_DEVICE_GPU, 17 },    { "tpu3", RP_DEVICE_TPU, 3 },
		{ "nc2", RP_DEVICE_NEURON_CORE, 2 }, { "nc999999999", RP_DEVICE_NEURON_CORE, 999999999 },
		{ "nc02", RP_DEVICE_OTHER, 0 },    { "gpu", RP_DEVICE_OTHER, 0 },
		{ "gpu1x", RP_DEVICE_OTHER, 0 },   { "gpu1234567890", RP_DEVICE_OTHER, 0 },
		{ "neuron0", RP_DEVICE_OTHER, 0 }, { "hostx", RP_DEVICE_OTHER, 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rp_device_identity id;
		assert_int_equal(rp_device_identify(cases[i].name, &id), cases[i].kind);
		assert_int_equal(id.kind, cases[i].kind);
		assert_int_equal(id.index, cases[i].index);
		assert_string_equal(id.uid, "");
	}
	assert_string_equal(rp_device_kind_name(RP_DEVICE_NEURON_CORE), "neuron_core");
	assert_string_equal(rp_device_kind_name(0xff), "other");
}

/* Seals a chunk of: device_info (kind, index, uid), then n ranges. */
static size_t chunk_with_identity(uint8_t kind, uint32_t index, const char *uid, size_t n,
				  uint8_t *chunk, size_t cap)
{
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(0, CHUNK_MAX, &b), 0);
	struct rp_event info = {.kind = RP_EV_DEVICE_INFO, .ts = 1000, .name = uid,
				.u.device = {.kind = kind, .index = index}};
	assert_int_equal(rp_chunk_builder_add(b, &info), 0);
	rng_state = 11;
	struct stream st = {.ts = 2000};
	for (size_t i = 0; i < n; i++) {
		struct rp_event ev;
		stream_next(&st, &ev);
		assert_int_equal(rp_chunk_builder_add(b, &ev), 0);
	}
	size_t len;
	assert_int_equal(rp_chunk_builder_seal(b, 1, 0, chunk, cap, &len), 0);
	rp_chunk_builder_free(b);
	return len;
}

/* Sessions read a ring's identity from the head of its chunks: the first
 * device_info sets kind and index, the first uid stays. */
static void device_info_from_chunk_heads(void **state)
{
	(void)state;
	static uint8_t chunk[CHUNK_MAX];
	struct rp_chunk_reader *r;
	struct rp_err err = {0};
	assert_int_equal(rp_chunk_reader_new(&r), 0);
	struct rp_device_identity id = {0};

	/* Without a uid, and a payload far longer than the head. */
	size_t len = chunk_with_identity(RP_DEVICE_NEURON_CORE, 2, NULL, 20000, chunk, sizeof(chunk));
	assert_true(len > RP_CHUNK_HEAD_BYTES);
	assert_int_equal(rp_chunk_reader_device_info(r, chunk, len, &id, &err), 1);
	assert_int_equal(id.kind, RP_DEVICE_NEURON_CORE);
	assert_int_equal(id.index, 2);
	assert_string_equal(id.uid, "");
	assert_null(rp_chunk_reader_header(r));

	/* A later chunk brings the uid; kind and index stay the first's. */
	len = chunk_with_identity(RP_DEVICE_GPU, 9, "nc-uid-1", 10, chunk, sizeof(chunk));
	assert_int_equal(rp_chunk_reader_device_info(r, chunk, len, &id, &err), 1);
	assert_int_equal(id.kind, RP_DEVICE_NEURON_CORE);
	assert_int_equal(id.index, 2);
	assert_string_equal(id.uid, "nc-uid-1");
	len = chunk_with_identity(RP_DEVICE_NEURON_CORE, 2, "nc-uid-2", 10, chunk, sizeof(chunk));
	assert_int_equal(rp_chunk_reader_device_info(r, chunk, len, &id, &err), 0);
	assert_string_equal(id.uid, "nc-uid-1");

	/* A kind this build does not know reads as other. */
	struct rp_device_identity other = {0};
	len = chunk_with_identity(0xee, 4, "", 1, chunk, sizeof(chunk));
	assert_int_equal(rp_chunk_reader_device_info(r, chunk, len, &other, &err), 1);
	assert_int_equal(other.kind, RP_DEVICE_OTHER);
	assert_int_equal(other.index, 4);

	/* A chunk that fails its checks is an error, and changes nothing. */
	chunk[len - 1] ^= 1;
	struct rp_device_identity none = {0};
	assert_int_equal(rp_chunk_reader_device_info(r, chunk, len, &none, &err), -EBADMSG);
	assert_int_equal(none.kind, 0);
	rp_chunk_reader_free(r);
}

static void seed_chunks(void **state)
{
	(void)state;
	const char *dir = getenv("RINGPROF_CHUNK_SEED_DIR");
	static uint8_t chunk[CHUNK_MAX];
	size_t len;
	struct rp_chunk_reader *r;
	struct rp_err err = {0};
	assert_int_equal(rp_chunk_reader_new(&r), 0);

	struct rp_event evs[64];
	size_t n = all_kinds(evs);
	struct rp_chunk_builder *b;
	assert_int_equal(rp_chunk_builder_new(0, CHUNK_MAX, &b), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(rp_chunk_builder_add(b, &evs[i]), 0);
	assert_int_equal(rp_chunk_builder_seal(b, 0, 1, chunk, sizeof(chunk), &len), 0);
	assert_int_equal(walk(r, chunk, len, &err), 0);
	write_seed(dir, "all-kinds.chunk", chunk, len);
	/* The same with the payload uncompressed, for the fuzz target's
	 * third reading. */
	static uint8_t plain[RP_CHUNK_HEADER_SIZE + CHUNK_MAX];
	memcpy(plain, chunk, RP_CHUNK_HEADER_SIZE);
	int rawlen = LZ4_decompress_safe((char *)chunk + RP_CHUNK_HEADER_SIZE,
					 (char *)plain + RP_CHUNK_HEADER_SIZE,
					 (int)(len - RP_CHUNK_HEADER_SIZE), CHUNK_MAX);
	assert_true(rawlen > 0);
	write_seed(dir, "all-kinds.raw", plain, RP_CHUNK_HEADER_SIZE + (size_t)rawlen);

	for (size_t k = 1; k <= RP_EV_KIND_MAX; k++) {
		if (!strcmp(rp_event_kind_name((unsigned)k), "unknown"))
			continue; /* reserved */
		size_t m = 0;
		for (size_t i = 0; i < n; i++) {
			if (evs[i].kind != k)
				continue;
			assert_int_equal(rp_chunk_builder_add(b, &evs[i]), 0);
			m++;
		}
		assert_true(m > 0);
		assert_int_equal(rp_chunk_builder_seal(b, k, 0, chunk, sizeof(chunk), &len), 0);
		assert_int_equal(walk(r, chunk, len, &err), 0);
		char name[64];
		snprintf(name, sizeof(name), "kind-%02zu-%s.chunk", k, rp_event_kind_name((unsigned)k));
		write_seed(dir, name, chunk, len);
	}

	rng_state = 5;
	struct stream st = {.ts = 5000};
	struct rp_event ev;
	for (int i = 0; i < 600; i++) {
		stream_next(&st, &ev);
		assert_int_equal(rp_chunk_builder_add(b, &ev), 0);
	}
	assert_int_equal(rp_chunk_builder_seal(b, 100, 0, chunk, sizeof(chunk), &len), 0);
	assert_int_equal(walk(r, chunk, len, &err), 0);
	write_seed(dir, "ranges.chunk", chunk, len);
	rp_chunk_builder_free(b);

	len = small_chunk(chunk, sizeof(chunk));
	assert_int_equal(walk(r, chunk, len, &err), 0);
	write_seed(dir, "small.chunk", chunk, len);
	rp_chunk_reader_free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(roundtrip_all_kinds),
		cmocka_unit_test(dropped_sums_within_u32),
		cmocka_unit_test(api_errors),
		cmocka_unit_test(many_chunks),
		cmocka_unit_test(prefix_split),
		cmocka_unit_test(corrupt_payload),
		cmocka_unit_test(api_call_encodings),
		cmocka_unit_test(mutated_payloads),
		cmocka_unit_test(header_rejects),
		cmocka_unit_test(bytes_per_event),
		cmocka_unit_test(device_names_identify),
		cmocka_unit_test(device_info_from_chunk_heads),
		cmocka_unit_test(seed_chunks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
