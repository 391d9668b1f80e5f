/* Fuzz target for the exporters: the input, read as a script of events,
 * becomes a one-device session on disk (built with the chunk builder, so
 * every event is one the daemon could have recorded), which every format
 * writer (Perfetto's in each grouping) then reads back and writes to
 * /dev/null.  Odd nesting, ends without begins, names with any bytes, NaN
 * counters, zero-length or reversed GPU work, unmapped frames: each writer
 * must succeed.
 *
 * Script: byte 0 picks the device (host, gpu0, tpu1, neuron0), bytes 1-2
 * trim the window's ends; then records: kind, ts step (2 bytes, us), pid,
 * tid, a name of up to 15 bytes, and the kind's fields. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "writers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHUNK_MAX (64u << 10)
#define MAX_EVENTS 4096

static const char *const devices[] = { "host", "gpu0", "tpu1", "neuron0" };

struct script {
	const uint8_t *p, *end;
};

static unsigned byte(struct script *s)
{
	return s->p < s->end ? *s->p++ : 0;
}

static void check(int ok, const char *what, const struct rp_err *err)
{
	if (!ok) {
		fprintf(stderr, "fuzz-export: %s: %s\n", what, err ? err->msg : "");
		abort();
	}
}

static char dir[PATH_MAX];

static void remove_dir(void)
{
	char path[PATH_MAX + 64];
	for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++) {
		snprintf(path, sizeof(path), "%s/fuzz.%s.chunks", dir, devices[i]);
		unlink(path);
	}
	rmdir(dir);
}

static void make_dir(void)
{
	if (dir[0])
		return;
	snprintf(dir, sizeof(dir), "/tmp/fuzz-export-%ld", (long)getpid());
	check(mkdir(dir, 0700) == 0 || errno == EEXIST, "mkdir", NULL);
	atexit(remove_dir);
}

/* One event of the script into ev (frames in frames[]); 0 at the end. */
static int next_event(struct script *s, struct rp_event *ev, uint64_t *ts, char *name,
		      uint64_t *frames)
{
	if (s->p >= s->end)
		return 0;
	*ev = (struct rp_event){ .kind = (uint8_t)(1 + byte(s) % RP_EV_KIND_MAX) };
	*ts += (byte(s) | byte(s) << 8) * 1000ull;
	ev->ts = *ts;
	ev->pid = 100 + byte(s) % 4;
	ev->tid = ev->pid + byte(s) % 3;
	unsigned n = byte(s) % 16;
	for (unsigned i = 0; i < n; i++)
		name[i] = (char)(byte(s) | 1); /* no NUL inside */
	name[n] = 0;
	ev->name = name;
	switch (ev->kind) {
	case RP_EV_CPU_SAMPLE:
		ev->u.sample.cpu = byte(s);
		ev->u.sample.nframes = (uint16_t)(byte(s) % 9);
		ev->u.sample.nkernel = (uint16_t)(ev->u.sample.nframes ? byte(s) % (ev->u.sample.nframes + 1) : 0);
		for (unsigned i = 0; i < ev->u.sample.nframes; i++)
			if (i >= ev->u.sample.nkernel && byte(s) & 1) /* a Python frame */
				frames[i] = RP_PY_FRAME(0x7f0000001000 + byte(s) * 64ull, byte(s));
			else
				frames[i] = (i < ev->u.sample.nkernel ? 0xffffffff81000000ull : 0x400000ull) +
					    byte(s) * 16u;
		ev->u.sample.frames = frames;
		break;
	case RP_EV_COUNTER: {
		uint64_t bits = 0;
		for (int i = 0; i < 8; i++)
			bits = bits << 8 | byte(s);
		memcpy(&ev->u.counter.value, &bits, sizeof(double));
		break;
	}
	case RP_EV_GPU_ACTIVITY:
		ev->u.gpu.end = ev->ts + byte(s) * 1000ull - 50000; /* may end before it starts */
		ev->u.gpu.kind = (uint8_t)(byte(s) % 4);
		ev->u.gpu.stream = byte(s) % 3;
		ev->u.gpu.bytes = byte(s);
		ev->u.gpu.correlation = byte(s);
		/* A launch configuration, also on copies as a producer may claim. */
		ev->u.gpu.launch = (struct rp_gpu_launch){
			.grid = { byte(s), 1, 1 }, .block = { byte(s) % 2 ? byte(s) : 0, 1, 1 },
			.registers = byte(s), .dynamic_shared = UINT32_MAX };
		break;
	case RP_EV_API_CALL:
		ev->u.api.duration = byte(s) * 1000ull;
		ev->u.api.device = byte(s) % 2;
		ev->u.api.correlation = byte(s) % 4; /* flows to the GPU work's, or dangling */
		break;
	case RP_EV_DROPS:
		ev->u.drops.count = byte(s);
		break;
	case RP_EV_DEVICE_OP:
		ev->u.op.end = ev->ts + byte(s) * 1000ull;
		ev->u.op.device = byte(s) % 3 == 2 ? RP_OP_HOST : byte(s) % 2;
		ev->u.op.line = byte(s) % 3;
		ev->u.op.hlo_op = byte(s) & 1 ? name : NULL;
		ev->u.op.hlo_module = byte(s) & 1 ? "jit_step" : NULL;
		ev->u.op.program_id = byte(s);
		ev->u.op.flops = byte(s) * 1000000ull;
		ev->u.op.bytes_accessed = byte(s);
		break;
	case RP_EV_MAPPING:
		ev->u.mapping.start = 0x400000;
		ev->u.mapping.end = 0x400000 + (byte(s) + 1) * 4096ull;
		ev->name = "/nonexistent/binary";
		break;
	case RP_EV_PY_CODE:
		ev->u.py_code.code = 0x7f0000001000 + byte(s) * 64ull;
		ev->u.py_code.lasti = byte(s);
		ev->u.py_code.line = byte(s);
		ev->name = byte(s) & 1 ? "step\t/srv/train.py" : "no tab";
		break;
	default:
		break;
	}
	return 1;
}

static void write_session(const uint8_t *data, size_t size, const char *device, uint64_t *t0,
			  uint64_t *t1)
{
	struct script s = { data, data + size };
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/fuzz.%s.chunks", dir, device);
	FILE *f = fopen(path, "w");
	struct rp_chunk_builder *b;
	void *buf = malloc(CHUNK_MAX);
	check(f && buf && rp_chunk_builder_new(0, CHUNK_MAX, &b) == 0, "set-up", NULL);
	uint64_t ts = 1000000000, seq = 0;
	*t0 = ts;
	struct rp_event ev;
	char name[16];
	uint64_t frames[8];
	for (int n = 0; n < MAX_EVENTS && next_event(&s, &ev, &ts, name, frames); n++) {
		int rc = rp_chunk_builder_add(b, &ev);
		size_t len;
		if (rc == -ENOSPC) {
			check(rp_chunk_builder_seal(b, seq++, 0, buf, CHUNK_MAX, &len) == 0, "seal", NULL);
			check(fwrite(buf, 1, len, f) == len, "write", NULL);
			rc = rp_chunk_builder_add(b, &ev);
		}
		check(rc == 0 || rc == -EINVAL, "add", NULL);
	}
	size_t len;
	while (rp_chunk_builder_count(b)) {
		check(rp_chunk_builder_seal(b, seq++, 0, buf, CHUNK_MAX, &len) == 0, "seal", NULL);
		check(fwrite(buf, 1, len, f) == len, "write", NULL);
	}
	*t1 = ts;
	rp_chunk_builder_free(b);
	free(buf);
	check(fclose(f) == 0, "close", NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	make_dir();
	const char *device = devices[data[0] % 4];
	uint64_t t0, t1;
	write_session(data + 3, size - 3, device, &t0, &t1);
	/* Trim the window so that ranges cross its edges. */
	uint64_t start = t0 + data[1] * 1000000ull, end = t1 > data[2] * 1000000ull ? t1 - data[2] * 1000000ull : t0;
	if (end < start)
		end = start;
	char file[64];
	snprintf(file, sizeof(file), "fuzz.%s.chunks", device);
	json_t *m = json_pack("{ss ss ss s{sI sI} sI s[{ss ss}]}", "id", "fuzz", "run", "r", "host", "fuzz",
			      "requested", "start_ns", (json_int_t)start, "end_ns", (json_int_t)end,
			      "wall_offset_ns", (json_int_t)1700000000000000000ll, "devices", "device",
			      device, "file", file);
	/* No kallsyms to read: kernel frames stay unnamed, quickly. */
	struct rp_symbolizer_opts so = { .kallsyms = "/dev/null", .perf_map_dir = dir };
	int (*const writers[])(struct rp_reader *, FILE *, struct rp_err *) = {
		rp_write_pprof, rp_write_json, rp_write_summary, rp_write_flamegraph, rp_write_folded,
	};
	const size_t nwriters = sizeof(writers) / sizeof(writers[0]);
	FILE *null = fopen("/dev/null", "w");
	check(m && null, "set-up", NULL);
	/* Then XSpace, and the Perfetto writer in each grouping. */
	for (size_t i = 0; i <= nwriters + RP_PERFETTO_NGROUPINGS; i++) {
		struct rp_reader *r;
		struct rp_err err = { 0 };
		check(rp_reader_open(dir, m, &so, &r, &err) == 0, "reader", &err);
		int rc = i < nwriters ? writers[i](r, null, &err) :
			 i == nwriters ? rp_write_xplane(r, null, dir, &err) :
			 rp_write_perfetto(r, null, (enum rp_perfetto_grouping)(i - nwriters - 1), &err);
		check(rc == 0, "writer", &err);
		rp_reader_free(r);
	}
	fclose(null);
	json_decref(m);
	return 0;
}
