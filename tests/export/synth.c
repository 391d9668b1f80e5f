#include "synth.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunk.h"
#include "session.h"

#define PID 4242u
#define LOADER 4243u
#define WORKER 4244u
#define CHUNK_MAX (1u << 20)
/* Sealed every so many events, as the daemon seals its slots: readers
 * meet many chunks, and memory per chunk stays small. */
#define CHUNK_EVENTS 16384

/* The functions the CPU samples name: they only need to exist here. */
__attribute__((noinline)) void synth_hot_a(void) { __asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop"); }
__attribute__((noinline)) void synth_hot_b(void) { __asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop"); }
__attribute__((noinline)) void synth_hot_c(void) { __asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop"); }
__attribute__((noinline)) void synth_step(void) { synth_hot_a(); synth_hot_b(); synth_hot_c(); }

extern int main(int, char **);

/* synth::Kernel<float>::run(int), from synth_cpp.cpp when the tests were
 * built with a C++ compiler; without one, the worker samples synth_hot_c. */
__attribute__((weak)) const void *synth_cpp_kernel(void);

unsigned synth_worker_samples;
const char *synth_worker_name = "worker";

struct ring_out {
	const char *device;
	FILE *f;
	char file[PATH_MAX];
	struct rp_chunk_builder *b;
	void *buf;
	uint64_t seq, events, bytes, first_ts, last_ts;
	uint32_t chunks;
};

static int seal(struct ring_out *o)
{
	while (rp_chunk_builder_count(o->b)) {
		size_t len;
		int rc = rp_chunk_builder_seal(o->b, o->seq++, SYNTH_WALL_OFFSET, o->buf, CHUNK_MAX, &len);
		if (rc < 0)
			return rc;
		if (fwrite(o->buf, 1, len, o->f) != len)
			return -EIO;
		o->bytes += len;
		o->chunks++;
	}
	return 0;
}

static int add(struct ring_out *o, const struct rp_event *ev)
{
	int rc = rp_chunk_builder_count(o->b) >= CHUNK_EVENTS ? -ENOSPC : rp_chunk_builder_add(o->b, ev);
	if (rc == -ENOSPC) {
		if ((rc = seal(o)) < 0)
			return rc;
		rc = rp_chunk_builder_add(o->b, ev);
	}
	if (rc == 0) {
		if (!o->events++)
			o->first_ts = ev->ts;
		o->last_ts = ev->ts;
	}
	return rc;
}

static int range(struct ring_out *o, uint32_t pid, uint32_t tid, const char *name, uint64_t b,
		 uint64_t e)
{
	int rc = add(o, &(struct rp_event){ .kind = RP_EV_RANGE_BEGIN, .ts = b, .pid = pid,
					    .tid = tid, .name = name });
	return rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_RANGE_END, .ts = e, .pid = pid, .tid = tid });
}

static int counter(struct ring_out *o, const char *name, uint64_t ts, double v)
{
	return add(o, &(struct rp_event){ .kind = RP_EV_COUNTER, .ts = ts, .name = name,
					  .u.counter.value = v });
}

/* This program's executable mappings, as process pid's, so that the
 * samples' addresses name synth_hot_a and the rest. */
static int add_mappings(struct ring_out *o, uint32_t pid, uint64_t ts)
{
	FILE *m = fopen("/proc/self/maps", "r");
	if (!m)
		return -errno;
	char exe[PATH_MAX], line[PATH_MAX + 128];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = 0;
	int rc = 0;
	while (rc == 0 && fgets(line, sizeof(line), m)) {
		unsigned long long start, end, off;
		char perms[8], path[PATH_MAX] = "";
		if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %4095s", &start, &end, perms, &off, path) < 4 ||
		    perms[2] != 'x' || strcmp(path, exe) != 0)
			continue;
		rc = add(o, &(struct rp_event){ .kind = RP_EV_MAPPING, .ts = ts, .pid = pid, .name = path,
						.u.mapping = { .start = start, .end = end, .offset = off } });
	}
	fclose(m);
	return rc;
}

/* Process 4244 "worker": per step a "job" range and synth_worker_samples
 * samples of two frames, a C++ function called from main, as a frame
 * pointer walk through a library without them would leave them. */
static int worker(struct ring_out *o, unsigned steps)
{
	const uint64_t T0 = SYNTH_T0, MS = SYNTH_MS;
	const unsigned w = synth_worker_samples;
	const void *kernel = synth_cpp_kernel ? synth_cpp_kernel() : (const void *)synth_hot_c;
	int rc = 0;
	if (!w)
		return seal(o);
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_PROCESS_NAME, .ts = T0 - 3 * MS, .pid = WORKER, .name = synth_worker_name });
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_PROCESS_CMDLINE, .ts = T0 - 3 * MS, .pid = WORKER, .name = "worker --jobs 2" });
	rc = rc ? rc : add_mappings(o, WORKER, T0 - 3 * MS);
	for (unsigned i = 0; rc == 0 && i < steps; i++) {
		uint64_t s = T0 + 2 * MS + i * 10 * MS;
		rc = range(o, WORKER, WORKER, "job", s, s + 5 * MS);
		for (unsigned j = 0; rc == 0 && j < w; j++) {
			uint64_t frames[2] = { (uintptr_t)kernel + 4, (uintptr_t)main + 8 };
			rc = add(o, &(struct rp_event){ .kind = RP_EV_CPU_SAMPLE, .ts = s + j * (10 * MS / w) + 2000,
							.pid = WORKER, .tid = WORKER,
							.u.sample = { .cpu = (i + 1) % 4, .nframes = 2, .frames = frames } });
		}
	}
	return rc ? rc : seal(o);
}

static int host_ring(struct ring_out *o, unsigned steps, unsigned k)
{
	const uint64_t T0 = SYNTH_T0, MS = SYNTH_MS;
	int rc = 0;
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_PROCESS_NAME, .ts = T0 - 3 * MS, .pid = PID, .name = "trainer" });
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_PROCESS_CMDLINE, .ts = T0 - 3 * MS, .pid = PID, .name = "python3 train.py" });
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_THREAD_NAME, .ts = T0 - 3 * MS, .pid = PID, .tid = PID, .name = "main" });
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_THREAD_NAME, .ts = T0 - 3 * MS, .pid = PID, .tid = LOADER, .name = "loader" });
	rc = rc ? rc : add_mappings(o, PID, T0 - 3 * MS);
	rc = rc ? rc : range(o, PID, PID, "warmup", T0 - 2 * MS, T0 + MS);
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_DROPS, .ts = T0 + MS, .pid = PID, .tid = PID, .u.drops.count = 5 });
	rc = rc ? rc : counter(o, "cpu_sampler_hz", T0, 1000);
	const uint64_t hot[3] = { (uintptr_t)synth_hot_a + 4, (uintptr_t)synth_hot_b + 4, (uintptr_t)synth_hot_c + 4 };
	for (unsigned i = 0; rc == 0 && i < steps; i++) {
		uint64_t s = T0 + 2 * MS + i * 10 * MS;
		rc = rc ? rc : counter(o, "cpu_util", s, 50 + i % 50);
		rc = rc ? rc : counter(o, "host_mem_used", s, 1e9 + i * 4096.0);
		rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_RANGE_BEGIN, .ts = s, .pid = PID, .tid = PID, .name = "step" });
		rc = rc ? rc : range(o, PID, LOADER, "load_batch", s + MS / 2, s + 3 * MS);
		rc = rc ? rc : range(o, PID, PID, "forward", s + MS, s + 4 * MS);
		rc = rc ? rc : range(o, PID, PID, "backward", s + 4 * MS, s + 8 * MS);
		rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_RANGE_END, .ts = s + 9 * MS - (i % 3) * MS / 10, .pid = PID, .tid = PID });
		if (rc == 0 && i % 10 == 0)
			rc = add(o, &(struct rp_event){ .kind = RP_EV_INSTANT, .ts = s + 9 * MS + MS / 2, .pid = PID, .tid = PID, .name = "checkpoint" });
		for (unsigned j = 0; rc == 0 && j < k; j++) {
			uint64_t frames[3] = { hot[j % 10 < 6 ? 0 : j % 10 < 9 ? 1 : 2],
					       (uintptr_t)synth_step + 8, (uintptr_t)main + 8 };
			rc = add(o, &(struct rp_event){ .kind = RP_EV_CPU_SAMPLE, .ts = s + j * (10 * MS / k) + 1000,
							.pid = PID, .tid = PID,
							.u.sample = { .cpu = i % 4, .nframes = 3, .frames = frames } });
		}
	}
	rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_RANGE_BEGIN, .ts = T0 + 2 * MS + steps * 10 * MS, .pid = PID, .tid = PID, .name = "step" });
	return rc ? rc : worker(o, steps);
}

static int gpu_ring(struct ring_out *o, unsigned steps)
{
	const uint64_t T0 = SYNTH_T0, MS = SYNTH_MS;
	int rc = 0;
	for (unsigned i = 0; rc == 0 && i < steps; i++) {
		uint64_t s = T0 + 2 * MS + i * 10 * MS;
		rc = rc ? rc : counter(o, "sm_active", s, 0.8);
		rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_GPU_ACTIVITY, .ts = s + MS + MS / 5, .pid = PID, .name = "memcpy_htod",
				.u.gpu = { .end = s + MS + 3 * MS / 5, .bytes = 1 << 20, .stream = 7, .kind = RP_GPU_MEMCPY } });
		rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_API_CALL, .ts = s + MS + MS / 2, .pid = PID, .tid = PID, .name = "cudaLaunchKernel",
				.u.api = { .duration = 20000, .device = 0, .correlation = i + 1 } });
		rc = rc ? rc : add(o, &(struct rp_event){ .kind = RP_EV_GPU_ACTIVITY, .ts = s + 2 * MS, .pid = PID, .name = "gemm_kernel",
				.u.gpu = { .end = s + 3 * MS + MS / 2, .correlation = i + 1, .stream = 7, .kind = RP_GPU_KERNEL,
					   .launch = { .grid = { 128, 2, 1 }, .block = { 256, 1, 1 }, .registers = 64,
						       .static_shared = 4096, .dynamic_shared = 16384 } } });
	}
	return rc ? rc : seal(o);
}

static json_t *window(uint64_t a, uint64_t b)
{
	return json_pack("{sI sI sI sI}", "start_ns", (json_int_t)a, "end_ns", (json_int_t)b,
			 "start_wall_ns", (json_int_t)(a + SYNTH_WALL_OFFSET),
			 "end_wall_ns", (json_int_t)(b + SYNTH_WALL_OFFSET));
}

static int mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		int rc = mkdir(path, 0755);
		*p = '/';
		if (rc < 0 && errno != EEXIST)
			return -errno;
	}
	return mkdir(path, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

int synth_session(const char *outdir, const char *host, unsigned steps, unsigned k, char *dir,
		  size_t dir_len)
{
	snprintf(dir, dir_len, "%s/plugins/profile/synth", outdir);
	int rc = mkdirs(dir);
	if (rc < 0) {
		fprintf(stderr, "make-session: cannot create %s: %s\n", dir, strerror(-rc));
		return rc;
	}
	char fhost[256];
	snprintf(fhost, sizeof(fhost), "%s", host);
	rp_session_file_host(fhost);
	struct ring_out rings[2] = { { .device = "host" }, { .device = "gpu0" } };
	json_t *devs = json_array();
	for (int i = 0; i < 2 && rc == 0; i++) {
		struct ring_out *o = &rings[i];
		char path[2 * PATH_MAX + 2];
		snprintf(o->file, sizeof(o->file), "%s.%s.chunks", fhost, o->device);
		snprintf(path, sizeof(path), "%s/%s", dir, o->file);
		if (!(o->f = fopen(path, "w")) || !(o->buf = malloc(CHUNK_MAX)) ||
		    rp_chunk_builder_new((uint32_t)i, CHUNK_MAX, &o->b) < 0) {
			rc = -errno ? -errno : -ENOMEM;
			fprintf(stderr, "make-session: %s: %s\n", path, strerror(-rc));
		} else {
			rc = i == 0 ? host_ring(o, steps, k) : gpu_ring(o, steps);
		}
		if (o->f && fclose(o->f) != 0 && rc == 0)
			rc = -EIO;
		rp_chunk_builder_free(o->b);
		free(o->buf);
		json_array_append_new(devs, json_pack("{ss sI sI si sI sf ss si sI sI}", "device", o->device,
			"events", (json_int_t)o->events, "chunks", (json_int_t)o->chunks, "dropped", i == 0 ? 5 : 0,
			"bytes", (json_int_t)o->bytes, "horizon_s", 60.0, "file", o->file, "lost_chunks", 0,
			"first_ns", (json_int_t)o->first_ts, "last_ns", (json_int_t)o->last_ts));
	}
	uint64_t t1 = SYNTH_T0 + 2 * SYNTH_MS + steps * 10 * SYNTH_MS + 3 * SYNTH_MS;
	json_t *m = json_pack("{si ss ss ss ss ss ss so so sb ss sI so s{ss ss sI}}", "schema_version", 1,
		"id", "synth", "run", "", "kind", "snapshot", "state", "complete", "path", dir, "host", host,
		"requested", window(SYNTH_T0, t1), "covered", window(SYNTH_T0, t1), "complete_coverage", 1,
		"clock", "CLOCK_MONOTONIC", "wall_offset_ns", (json_int_t)SYNTH_WALL_OFFSET, "devices", devs,
		"trigger", "source", "test", "reason", "synthetic session", "created_wall_ns",
		(json_int_t)(t1 + SYNTH_WALL_OFFSET));
	char path[2 * PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s.manifest.json", dir, fhost);
	if (rc == 0 && (!m || json_dump_file(m, path, JSON_INDENT(2)) < 0)) {
		fprintf(stderr, "make-session: cannot write %s\n", path);
		rc = -EIO;
	}
	json_decref(m);
	if (rc < 0 && rc != -EIO)
		fprintf(stderr, "make-session: %s\n", strerror(-rc));
	return rc;
}
