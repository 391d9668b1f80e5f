/* libringprof-cupti.so: CUPTI activity records from inside a CUDA
 * workload into per-GPU producer rings (docs/gpu.md).
 *
 * Loaded by the CUDA driver through CUDA_INJECTION64_PATH (it calls
 * InitializeInjection during cuInit), or by anyone calling
 * rp_cupti_start().  libcupti is opened at run time: a process without it,
 * without a driver, or with another CUPTI subscriber gets one line on
 * stderr and runs as if the library were not there.
 *
 * Never blocks the workload: CUPTI fills buffers from a fixed pool (none
 * free: CUPTI drops and counts the records), the completion callback runs
 * on CUPTI's own thread and writes into rings that drop when full. */
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_version.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hello.h"
#include "producer.h"
#include "translate.h"

#define EXPORT __attribute__((visibility("default")))

/* The CUPTI calls used, looked up by name in libcupti. */
#define CUPTI_CALLS(X)                                                     \
	X(cuptiGetVersion)                                                 \
	X(cuptiGetResultString)                                            \
	X(cuptiSubscribe)                                                  \
	X(cuptiUnsubscribe)                                                \
	X(cuptiGetCallbackName)                                            \
	X(cuptiActivityRegisterTimestampCallback)                          \
	X(cuptiActivityRegisterCallbacks)                                  \
	X(cuptiActivityEnable)                                             \
	X(cuptiActivityDisable)                                            \
	X(cuptiActivityEnableRuntimeApi)                                   \
	X(cuptiActivityFlushPeriod)                                        \
	X(cuptiActivityFlushAll)                                           \
	X(cuptiActivityGetNextRecord)                                      \
	X(cuptiActivityGetNumDroppedRecords)

static struct {
#define X(f) __typeof__(&f) f;
	CUPTI_CALLS(X)
#undef X
} api;

/* The kinds recorded; DEVICE names each ordinal's GPU (UUID). */
static const CUpti_ActivityKind kinds[] = {
	CUPTI_ACTIVITY_KIND_DEVICE,       CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
	CUPTI_ACTIVITY_KIND_MEMCPY,       CUPTI_ACTIVITY_KIND_MEMCPY2,
	CUPTI_ACTIVITY_KIND_MEMSET,       CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
	CUPTI_ACTIVITY_KIND_RUNTIME,      CUPTI_ACTIVITY_KIND_OVERHEAD,
};

/* Buffer pool: CUPTI holds at most POOL_N buffers; Kineto uses 4 MiB. */
#define POOL_N 8
#define BUF_SIZE (4u << 20)
#define BUF_ALIGN 8
#define FLUSH_PERIOD_MS 100

/* Ring name for runtime calls (host threads). */
#define HOST_RING "host"

static struct {
	pthread_mutex_t lock; /* rings, device map: completion vs. the exit flush */
	uint8_t *pool;
	atomic_uint busy;     /* bit i: pool buffer i is CUPTI's */
	uint32_t pid;
	/* ordinal -> physical index + 1 (0: not known yet) */
	uint32_t phys[RP_CUPTI_MAX_DEV];
	struct rp_cupti_gpu gpus[RP_CUPTI_MAX_DEV];
	uint32_t ngpus;
	const char *cvd;
	struct rp_producer *gpu_rings[RP_CUPTI_MAX_DEV]; /* by physical index */
	struct rp_producer *host_ring;
	/* Guarded by ctl, which start, pause, resume and the exit flush take
	 * (never lock, which completions take while a flush runs). */
	bool started;  /* CUPTI loaded and the process fit to record */
	bool armed;    /* our callbacks registered, our kinds enabled */
	bool paused;   /* rp_cupti_pause(): another profiler has CUPTI */
	bool shared;   /* rp_cupti_share(): the framework's profiler pauses us */
	bool waiting;  /* a framework profiler is here, not yet sharing */
} st = { .lock = PTHREAD_MUTEX_INITIALIZER };
static pthread_mutex_t ctl = PTHREAD_MUTEX_INITIALIZER;

/* One line on stderr, the only way this library speaks to the workload. */
__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
	if (getenv("RINGPROF_QUIET"))
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	(void)vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "ringprof-cupti: %s\n", line);
}

static const char *result_str(CUptiResult r)
{
	const char *s = NULL;
	if (api.cuptiGetResultString && api.cuptiGetResultString(r, &s) != CUPTI_SUCCESS)
		s = NULL;
	return s ? s : "unknown CUPTI error";
}

/* CUPTI stamps records with this clock, the daemon's: no offset to keep
 * up to date, GPU times are interpolated by CUPTI itself. */
static uint64_t CUPTIAPI host_clock(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const char *api_name(uint32_t cbid)
{
	const char *name = NULL;
	if (api.cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS)
		return NULL;
	return name;
}

/* The driver's GPUs, for naming rings by physical GPU. */
static void read_driver_gpus(void)
{
	DIR *d = opendir("/proc/driver/nvidia/gpus");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d)) && st.ngpus < RP_CUPTI_MAX_DEV) {
		if (de->d_name[0] == '.')
			continue;
		char path[320], line[256];
		snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", de->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		struct rp_cupti_gpu *g = &st.gpus[st.ngpus];
		*g = (struct rp_cupti_gpu){ 0 };
		snprintf(g->bus_id, sizeof(g->bus_id), "%.31s", de->d_name);
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "GPU UUID: %40s", g->uuid) == 1)
				break;
		(void)fclose(f);
		st.ngpus++;
	}
	(void)closedir(d);
}

static struct rp_producer *ring_named(const char *device)
{
	struct rp_producer_opts o = { .device = device, .clock = RP_SHM_CLOCK_MONOTONIC };
	struct rp_producer *p = NULL;
	struct rp_err err = { 0 };
	if (rp_producer_new(&o, &p, &err) < 0) {
		say("cannot make ring %s: %s", device, err.msg);
		return NULL;
	}
	rp_producer_set_thread_name(p, "ringprof-cupti");
	return p;
}

static struct rp_producer *gpu_ring(uint32_t ordinal)
{
	if (ordinal >= RP_CUPTI_MAX_DEV)
		return NULL;
	if (!st.phys[ordinal])
		st.phys[ordinal] = 1 + rp_cupti_physical_index("", ordinal, st.cvd, st.gpus,
							       st.ngpus);
	uint32_t idx = st.phys[ordinal] - 1;
	if (idx >= RP_CUPTI_MAX_DEV)
		return NULL;
	if (!st.gpu_rings[idx]) {
		char name[16];
		snprintf(name, sizeof(name), "gpu%u", (unsigned)idx);
		st.gpu_rings[idx] = ring_named(name);
	}
	return st.gpu_rings[idx];
}

static void write_event(struct rp_event *ev)
{
	struct rp_producer *p;
	if (ev->kind == RP_EV_GPU_ACTIVITY) {
		p = gpu_ring(ev->u.gpu.device);
		if (p && ev->u.gpu.device < RP_CUPTI_MAX_DEV)
			ev->u.gpu.device = st.phys[ev->u.gpu.device] - 1;
	} else {
		p = st.host_ring ? st.host_ring : (st.host_ring = ring_named(HOST_RING));
	}
	struct rp_shmring *r = p ? rp_producer_connect(p) : NULL;
	if (r && !rp_shm_write_event(r, ev))
		(void)rp_producer_check(p); /* full: is the daemon still there? */
}

/* Kernel names come mangled, and templated ones (most of PyTorch's) run
 * past RP_NAME_MAX: cut there, they no longer demangle.  So they are
 * demangled here, before the ring cuts them, with the C++ runtime the
 * workload has loaded (none: left mangled, the exporters try).  A small
 * cache keyed by the name's hash: kernels repeat.  Completion thread only. */
typedef char *(*cxa_demangle_fn)(const char *, char *, size_t *, int *);
#define NAME_CACHE 256
static struct cached_name {
	char *mangled, *readable;
} name_cache[NAME_CACHE];

static const char *readable_kernel_name(const char *name)
{
	static cxa_demangle_fn demangle;
	static bool looked;
	if (!looked) {
		demangle = (cxa_demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
		looked = true;
	}
	if (!demangle || strncmp(name, "_Z", 2) != 0)
		return name;
	uint32_t h = 2166136261u; /* FNV-1a */
	for (const char *c = name; *c; c++)
		h = (h ^ (uint8_t)*c) * 16777619u;
	struct cached_name *e = &name_cache[h % NAME_CACHE];
	if (e->mangled && strcmp(e->mangled, name) == 0)
		return e->readable;
	int status = 0;
	char *readable = demangle(name, NULL, NULL, &status);
	char *mangled = readable ? strdup(name) : NULL;
	if (!mangled) {
		free(readable);
		return name;
	}
	free(e->mangled);
	free(e->readable);
	e->mangled = mangled;
	e->readable = readable;
	return readable;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*max_records = 0;
	unsigned busy = atomic_load(&st.busy);
	for (unsigned i = 0; i < POOL_N; i++) {
		if (busy & (1u << i))
			continue;
		if (atomic_compare_exchange_strong(&st.busy, &busy, busy | (1u << i))) {
			*buffer = st.pool + (size_t)i * BUF_SIZE;
			*size = BUF_SIZE;
			return;
		}
		i = (unsigned)-1; /* busy reloaded: look again */
	}
	/* All buffers in flight: CUPTI drops what it cannot store, counted. */
	*buffer = NULL;
	*size = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
				      size_t size, size_t valid)
{
	(void)size;
	char namebuf[RP_NAME_MAX + 1];
	CUpti_Activity *rec = NULL;
	uint64_t lost = 0; /* records CUPTI dropped or that made no sense */
	(void)pthread_mutex_lock(&st.lock);
	while (api.cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
		uint32_t ordinal;
		char uuid[RP_CUPTI_UUID_LEN];
		if (rp_cupti_device_record(rec, &ordinal, uuid)) {
			if (ordinal < RP_CUPTI_MAX_DEV)
				st.phys[ordinal] = 1 + rp_cupti_physical_index(
							       uuid, ordinal, st.cvd, st.gpus, st.ngpus);
			continue;
		}
		struct rp_event ev;
		int rc = rp_cupti_translate(rec, st.pid, api_name, namebuf, &ev);
		if (rc > 0 && ev.kind == RP_EV_GPU_ACTIVITY && ev.u.gpu.kind == RP_GPU_KERNEL)
			ev.name = readable_kernel_name(ev.name);
		if (rc > 0)
			write_event(&ev);
		else if (rc < 0)
			lost++;
	}
	size_t dropped = 0;
	if (api.cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
		lost += dropped;
	if (lost) {
		struct rp_event ev = { .kind = RP_EV_DROPS, .ts = host_clock(), .pid = st.pid };
		ev.u.drops.count = lost;
		write_event(&ev);
	}
	(void)pthread_mutex_unlock(&st.lock);
	if (buffer >= st.pool && buffer < st.pool + (size_t)POOL_N * BUF_SIZE)
		atomic_fetch_and(&st.busy, ~(1u << ((size_t)(buffer - st.pool) / BUF_SIZE)));
}

/* Only while armed, and through our callbacks, registered again first: a
 * profiler that took CUPTI without pausing us (Kineto, unshared) left its
 * own registered, and at exit its code may be torn down already (on the
 * H100 such a process crashed at exit). */
static void flush_at_exit(void)
{
	(void)pthread_mutex_lock(&ctl);
	if (st.armed &&
	    api.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) == CUPTI_SUCCESS)
		(void)api.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	(void)pthread_mutex_unlock(&ctl);
}

/* An instant in the host ring, which the daemon shows in every export. */
static void note(const char *what)
{
	if (!st.host_ring)
		st.host_ring = ring_named(HOST_RING);
	struct rp_shmring *ring = st.host_ring ? rp_producer_connect(st.host_ring) : NULL;
	if (ring)
		(void)rp_shm_instant(ring, rp_shmring_now(ring), what);
}

static void CUPTIAPI probe_callback(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id,
				    const void *data)
{
	(void)ud, (void)d, (void)id, (void)data;
}

/* Another tool (torch.profiler/Kineto, nsys, JAX's tracer) that owns CUPTI
 * in this process: leave it alone, and say so in the ring's thread name
 * and an instant the daemon shows. */
static bool other_subscriber(void)
{
	CUpti_SubscriberHandle h;
	CUptiResult r = api.cuptiSubscribe(&h, probe_callback, NULL);
	if (r == CUPTI_SUCCESS) {
		(void)api.cuptiUnsubscribe(h);
		return false;
	}
	if (r != CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
		return false;
	say("another CUPTI subscriber (torch.profiler, nsys, ...) is active in this "
	    "process: GPU activity is left to it");
	st.host_ring = ring_named(HOST_RING);
	if (st.host_ring)
		rp_producer_set_thread_name(st.host_ring, "ringprof-cupti" RP_HELLO_STOOD_ASIDE);
	note("ringprof-cupti: stood aside, another CUPTI subscriber");
	return true;
}

/* The CUPTI this process already has, if any (the framework's: torch
 * loads the nvidia-cuda-cupti wheel's copy at import), else
 * RINGPROF_CUPTI_LIB, else libcupti.so.13 by name.  Two copies of CUPTI in
 * one process fight over the driver's profiling hooks: the second one's
 * subscribers fail with error 39, which breaks torch.profiler. */
static void *open_cupti(void)
{
	void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
	if (h)
		return h;
	const char *path = getenv("RINGPROF_CUPTI_LIB");
	h = dlopen(path && *path ? path : "libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
	if (!h && !(path && *path))
		h = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
	return h;
}

static int load_cupti(void)
{
	void *h = open_cupti();
	if (!h) {
		say("libcupti not found (%s); GPU activity is not recorded. Set "
		    "RINGPROF_CUPTI_LIB to its path", dlerror());
		return -ENOENT;
	}
#define X(f)                                                                  \
	if (!(api.f = (__typeof__(&f))dlsym(h, #f))) {                        \
		say("libcupti lacks %s; GPU activity is not recorded", #f);  \
		return -ENOSYS;                                               \
	}
	CUPTI_CALLS(X)
#undef X
	uint32_t v = 0;
	/* Records are read with this build's layouts, which an older CUPTI
	 * does not write. */
	if (api.cuptiGetVersion(&v) != CUPTI_SUCCESS || v < CUPTI_API_VERSION) {
		say("libcupti API version %u is older than %u, which this library was built "
		    "for; GPU activity is not recorded", (unsigned)v, (unsigned)CUPTI_API_VERSION);
		return -ENOTSUP;
	}
	return 0;
}

static bool nvtx_wanted(void)
{
	const char *v = getenv("RINGPROF_NVTX");
	return v && strcmp(v, "1") == 0;
}

static void disable_kinds(void)
{
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		(void)api.cuptiActivityDisable(kinds[i]);
	if (nvtx_wanted()) {
		(void)api.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MARKER);
		(void)api.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MARKER_DATA);
	}
}

/* Registers our clock and buffers with CUPTI and enables our kinds: at
 * start, and at each resume (the other profiler registered its own
 * meanwhile, and disabled the kinds when it stopped).  ctl held. */
static int arm(void)
{
	CUptiResult r = api.cuptiActivityRegisterTimestampCallback(host_clock);
	if (r == CUPTI_SUCCESS)
		r = api.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
	if (r != CUPTI_SUCCESS) {
		say("CUPTI refused to start (%s); GPU activity is not recorded", result_str(r));
		return -EIO;
	}
	if (!st.pool && !(st.pool = aligned_alloc(BUF_ALIGN, (size_t)POOL_N * BUF_SIZE))) {
		say("no memory for CUPTI buffers");
		return -ENOMEM;
	}
	for (unsigned i = 0; i < rp_cupti_noisy_count; i++)
		(void)api.cuptiActivityEnableRuntimeApi(rp_cupti_noisy_cbids[i], 0);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		r = api.cuptiActivityEnable(kinds[i]);
		if (r != CUPTI_SUCCESS && kinds[i] != CUPTI_ACTIVITY_KIND_DEVICE) {
			say("CUPTI cannot record activity (%s): no CUDA driver or GPU? GPU "
			    "activity is not recorded", result_str(r));
			while (i--)
				(void)api.cuptiActivityDisable(kinds[i]);
			return -EIO;
		}
	}
	/* NVTX ranges reach CUPTI only where NVTX_INJECTION64_PATH names
	 * libcupti; opt-in (docs/gpu.md). */
	if (nvtx_wanted() &&
	    (api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER) != CUPTI_SUCCESS ||
	     api.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER_DATA) != CUPTI_SUCCESS))
		say("CUPTI cannot record NVTX ranges on this version; they are not recorded");
	(void)api.cuptiActivityFlushPeriod(FLUSH_PERIOD_MS);
	st.armed = true;
	return 0;
}

/* A profiler in the process that takes CUPTI without asking: PyTorch's
 * Kineto (torch.profiler).  Unshared, a torch.profiler session beside us
 * loses its GPU activity, and on the H100 the process died at exit. */
static const char *framework_profiler(void)
{
	static const char *const libs[] = { "/libtorch_cuda.so", "/libkineto.so" };
	FILE *maps = fopen("/proc/self/maps", "re");
	if (!maps)
		return NULL;
	const char *found = NULL;
	char line[4096];
	while (!found && fgets(line, sizeof(line), maps))
		for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]) && !found; i++)
			if (strstr(line, libs[i]))
				found = "PyTorch";
	(void)fclose(maps);
	return found;
}

static int start_locked(void)
{
	int rc = load_cupti();
	if (rc < 0)
		return rc;
	/* Explicit starts come before CUDA is up; the driver library tells. */
	if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) &&
	    !dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
		say("no CUDA driver (libcuda.so.1: %s); GPU activity is not recorded", dlerror());
		return -ENODEV;
	}
	st.pid = (uint32_t)getpid();
	st.cvd = getenv("CUDA_VISIBLE_DEVICES");
	read_driver_gpus();
	if (other_subscriber())
		return -EBUSY;
	const char *framework = st.shared ? NULL : framework_profiler();
	if (framework) {
		st.waiting = true;
		say("%s is in this process: GPU activity is recorded once torch.profiler shares "
		    "CUPTI with ringprof (ringprof run does that; or call "
		    "ringprof.cupti.share_with_torch_profiler())", framework);
		note("ringprof-cupti: waiting for torch.profiler to share CUPTI");
	} else if (!st.paused && (rc = arm()) < 0) {
		return rc;
	}
	(void)atexit(flush_at_exit);
	st.started = true;
	return 0;
}

/* Starts recording (or, after rp_cupti_pause(), gets ready to at
 * rp_cupti_resume()); 0, or a negative errno after saying why on stderr. */
EXPORT int rp_cupti_start(void)
{
	(void)pthread_mutex_lock(&ctl);
	int rc = st.started ? 0 : start_locked();
	(void)pthread_mutex_unlock(&ctl);
	return rc;
}

/* CUPTI takes one client's callbacks at a time: whoever registers last
 * gets every buffer, ours too, and drops what it did not allocate.  Another
 * profiler about to use CUPTI (torch.profiler: ringprof.cupti shares it so)
 * calls this first: our buffers come back to us, our kinds are disabled,
 * and nothing of ours runs until rp_cupti_resume().  Before CUDA starts it
 * only keeps us from arming then.  Always 0. */
EXPORT int rp_cupti_pause(void)
{
	(void)pthread_mutex_lock(&ctl);
	if (!st.paused) {
		st.paused = true;
		if (st.armed) {
			(void)api.cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
			disable_kinds();
			st.armed = false;
			note("ringprof-cupti: paused, another profiler has CUPTI");
		}
	}
	(void)pthread_mutex_unlock(&ctl);
	return 0;
}

/* After the other profiler stopped: ours again.  0, or a negative errno
 * after saying why on stderr (then GPU activity stays unrecorded). */
EXPORT int rp_cupti_resume(void)
{
	int rc = 0;
	(void)pthread_mutex_lock(&ctl);
	if (st.paused) {
		st.paused = false;
		if (st.started && !st.waiting && (rc = arm()) == 0)
			note("ringprof-cupti: resumed");
	}
	(void)pthread_mutex_unlock(&ctl);
	return rc;
}

/* The framework's profiler will pause and resume us around its sessions
 * (ringprof.cupti.share_with_torch_profiler() says so): recording may
 * start, or, before CUDA is up, start when it is.  0, or a negative errno
 * after saying why on stderr. */
EXPORT int rp_cupti_share(void)
{
	int rc = 0;
	(void)pthread_mutex_lock(&ctl);
	st.shared = true;
	if (st.waiting) {
		st.waiting = false;
		if (!st.paused && (rc = arm()) == 0)
			note("ringprof-cupti: torch.profiler shares CUPTI; recording");
	}
	(void)pthread_mutex_unlock(&ctl);
	return rc;
}

/* The driver's entry point for CUDA_INJECTION64_PATH.  Nonzero: loaded;
 * the workload runs on whatever rp_cupti_start found. */
EXPORT int InitializeInjection(void)
{
	(void)rp_cupti_start();
	return 1;
}
