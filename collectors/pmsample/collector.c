/* PM sampling as a collector with a thread per GPU: each samples its
 * GPU's performance counters with CUPTI PM sampling every [gpu_pm]
 * interval into the GPU's hardware buffer, decodes it every
 * DECODE_PERIOD_NS, and at once when a snapshot or a session's end
 * flushes the rings, and writes each sample's metrics as counters
 * "gpu_pm/<metric>" into the ring gpuN (N as nvidia-smi numbers the GPU)
 * through a producer ring of the daemon's (collector.h).
 *
 * libcuda and libcupti are loaded at run time: without a driver or a GPU
 * the collector is disabled with the reason and the daemon runs on.  A
 * GPU whose counters another profiler holds (DCGM, Nsight) is retried
 * with back-off and counted as busy in status. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "collector.h"
#include "pm.h"

#define MAX_GPUS 64
#define RING_SIZE (1u << 20)
/* Most of a decode's cost is per call, not per sample (on an H100, 10 ms
 * samples cost two thirds of what 1 ms ones do at 10 decodes a second):
 * decode seldom, and when a snapshot needs the samples (flush). */
#define DECODE_PERIOD_NS (1000 * 1000000ull)
/* How long a flush waits for the GPUs' decodes. */
#define FLUSH_WAIT_NS (500 * 1000000ull)
#define RETRY_MIN_NS (1000000000ull)
#define RETRY_MAX_NS (64 * RETRY_MIN_NS)
/* Compute capability 7.5 (Turing) is the oldest with PM sampling. */
#define CC_MIN 75

struct gpu {
	struct gpu_pm *pm;
	size_t ordinal;          /* CUDA's, which CUPTI takes */
	unsigned index;          /* nvidia-smi's: the N of gpuN */
	char metric_names[RP_PM_MAX_METRICS][RP_PM_METRIC_LEN];
	char counter_names[RP_PM_MAX_METRICS][RP_PM_METRIC_LEN + 8];
	char unavailable[256];          /* default metrics this GPU lacks, for status */
	struct rp_pm_config cfg;
	struct rp_pm_session session;   /* the thread's once started */
	struct rp_shmring *ring;        /* written by the thread only */
	uint64_t offset_ns;             /* ring clock minus CUPTI's, this round */
	pthread_t thread;
	bool thread_started;
	atomic_bool busy;
	atomic_bool sampling;           /* a session is live */
	atomic_uint_least64_t events;
	atomic_uint_least64_t overflows;
	uint64_t flushed;               /* the flush round it answered; guarded by pm->lock */
};

struct gpu_pm {
	struct rp_cupti cupti;
	bool profiler_initialized;
	uint64_t interval_ns;
	size_t hw_buffer;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_cond_t flushed;         /* a GPU thread answered a flush */
	bool stop;                      /* guarded by lock */
	uint64_t flush_round;           /* flushes asked for; guarded by lock */
	atomic_bool paused;             /* POST /v1/collectors/gpu_pm/pause */
	struct gpu gpus[MAX_GPUS];
	size_t ngpus;
};

static const char *const value_names[] = { "gpus", "busy", "overflows", "paused", NULL };

static void put_sample(void *ctx, uint64_t start_ts, uint64_t end_ts, const double *values,
		       size_t n)
{
	(void)start_ts;
	struct gpu *g = ctx;
	uint64_t ts = end_ts + g->offset_ns;
	for (size_t i = 0; i < n; i++)
		if (rp_shm_counter(g->ring, ts, g->counter_names[i], values[i]))
			atomic_fetch_add(&g->events, 1);
}

/* Sleep ns unless stopped or, while its session is live, a flush is
 * asked of the GPU (*round: the flush round it answers next; a GPU
 * without a session keeps its back-off); whether to go on. */
static bool wait_ns(struct gpu *g, uint64_t ns, uint64_t *round)
{
	struct gpu_pm *pm = g->pm;
	pthread_mutex_lock(&pm->lock);
	if (!pm->stop && (pm->flush_round == g->flushed || !g->session.object))
		rp_cond_wait_ns(&pm->wake, &pm->lock, ns);
	bool go_on = !pm->stop;
	*round = pm->flush_round;
	pthread_mutex_unlock(&pm->lock);
	return go_on;
}

/* The round's flush answered: whatever the GPU held is in its ring, or
 * it held nothing (paused, busy, broken). */
static void answer_flush(struct gpu *g, uint64_t round)
{
	pthread_mutex_lock(&g->pm->lock);
	g->flushed = round;
	pthread_cond_broadcast(&g->pm->flushed);
	pthread_mutex_unlock(&g->pm->lock);
}

static int start_session(struct gpu *g, struct rp_err *why)
{
	uint64_t samples = 2 * DECODE_PERIOD_NS / g->pm->interval_ns;
	return rp_pm_session_start(&g->session, &g->pm->cupti, g->ordinal, &g->cfg,
				   g->pm->interval_ns, g->pm->hw_buffer,
				   (uint32_t)(samples < 64 ? 64 : samples > 100000 ? 100000 : samples),
				   why);
}

/* One round of a GPU's thread: start its session if need be, decode.
 * Returns how long to wait before the next. */
static uint64_t gpu_round(struct gpu *g, uint64_t *retry_ns, uint64_t *logged)
{
	struct gpu_pm *pm = g->pm;
	struct rp_err err = { 0 };
	if (atomic_load(&pm->paused)) {
		/* the counters go back to the GPU for another profiler */
		rp_pm_session_stop(&g->session);
		atomic_store(&g->sampling, false);
		atomic_store(&g->busy, false);
		return RETRY_MIN_NS;
	}
	if (!g->session.object) {
		/* Said before the session starts, and paused read after: a
		 * pause either sees it or is seen (pause()). */
		atomic_store(&g->sampling, true);
		int rc = atomic_load(&pm->paused) ? -EINTR : start_session(g, &err);
		atomic_store(&g->busy, rc == -EBUSY);
		if (rc == -EINTR) {
			atomic_store(&g->sampling, false);
			return 0;
		}
		if (rc < 0) {
			atomic_store(&g->sampling, false);
			fprintf(stderr, "ringprofd: GPU PM sampling of gpu%u: %s\n", g->index,
				err.msg);
			uint64_t wait = *retry_ns;
			*retry_ns = 2 * wait < RETRY_MAX_NS ? 2 * wait : RETRY_MAX_NS;
			return wait;
		}
		*retry_ns = RETRY_MIN_NS;
	}
	uint64_t cupti_now = 0;
	(void)pm->cupti.timestamp(&cupti_now);
	g->offset_ns = rp_shmring_now(g->ring) - cupti_now;
	long decoded = rp_pm_decode(&g->session, put_sample, g, &err);
	atomic_store(&g->overflows, g->session.overflows);
	if (decoded >= 0)
		return DECODE_PERIOD_NS;
	/* The session broke (a reset, another profiler): start anew */
	uint64_t now = rp_clock_now_ns();
	if (now - *logged > 60000000000ull) {
		fprintf(stderr, "ringprofd: GPU PM sampling of gpu%u: %s\n", g->index, err.msg);
		*logged = now;
	}
	rp_pm_session_stop(&g->session);
	atomic_store(&g->sampling, false);
	return 0;
}

static void *gpu_main(void *arg)
{
	struct gpu *g = arg;
	uint64_t retry_ns = RETRY_MIN_NS, logged = 0, round = 0, next_ns = 0;
	while (wait_ns(g, next_ns, &round)) {
		next_ns = gpu_round(g, &retry_ns, &logged);
		answer_flush(g, round);
	}
	rp_pm_session_stop(&g->session);
	return NULL;
}

/* nvidia-smi numbers GPUs by PCI address; CUDA, by default, fastest
 * first.  The N of gpuN is the GPU's rank by PCI address. */
static unsigned smi_index(const uint64_t *pci, size_t n, size_t ordinal)
{
	unsigned rank = 0;
	for (size_t i = 0; i < n; i++)
		rank += pci[i] < pci[ordinal];
	return rank;
}

static int attribute(const struct rp_cupti *c, int dev, int attr)
{
	int v = 0;
	return c->cu_device_attribute(&v, attr, dev) == 0 ? v : -1;
}

/* The GPU's metric set compiled for its chip. */
static int setup_gpu(struct gpu *g, const struct rp_config *cfg, struct rp_err *why)
{
	const struct rp_cupti *c = &g->pm->cupti;
	char chip[64];
	uint8_t *availability = NULL;
	int rc = rp_pm_device_chip(c, g->ordinal, chip, sizeof(chip), &availability, why);
	const char *names[RP_PM_MAX_METRICS], *counters[RP_PM_MAX_METRICS];
	size_t n = 0;
	if (rc == 0 && cfg->gpu_pm_metrics[0]) {
		rc = rp_pm_parse_metrics(cfg->gpu_pm_metrics, g->metric_names, RP_PM_MAX_METRICS,
					 &n, why);
		for (size_t i = 0; i < n; i++)
			names[i] = counters[i] = g->metric_names[i];
	} else if (rc == 0) {
		const struct rp_pm_metric *def = rp_pm_default_metrics(chip);
		if (!def)
			rc = rp_err_set(why, -EOPNOTSUPP, "no default PM metric set for chip %s: "
					"name single-pass metrics in [gpu_pm] metrics", chip);
		/* The default set leaves out what this board lacks (and
		 * says so); a list the operator gave is taken whole or
		 * refused. */
		for (size_t i = 0; rc == 0 && def[i].name; i++) {
			if (!rp_pm_metric_available(c, chip, availability, def[i].cupti)) {
				size_t len = strlen(g->unavailable);
				snprintf(g->unavailable + len, sizeof(g->unavailable) - len, "%s%s",
					 len ? ", " : "", def[i].name);
				continue;
			}
			names[n] = def[i].cupti;
			counters[n++] = def[i].name;
		}
		if (rc == 0 && g->unavailable[0])
			fprintf(stderr, "ringprofd: gpu%u: PM metrics %s of the %s default set are not "
				"available on this GPU; sampling the other %zu\n", g->index,
				g->unavailable, chip, n);
	}
	if (rc == 0)
		rc = rp_pm_config_build(c, chip, availability, names, n, &g->cfg, why);
	free(availability);
	for (size_t i = 0; rc == 0 && i < n; i++)
		snprintf(g->counter_names[i], sizeof(g->counter_names[i]), "gpu_pm/%s", counters[i]);
	return rc;
}

static void free_pm(struct gpu_pm *pm)
{
	pthread_mutex_lock(&pm->lock);
	pm->stop = true;
	pthread_cond_broadcast(&pm->wake);
	pthread_mutex_unlock(&pm->lock);
	for (size_t i = 0; i < pm->ngpus; i++) {
		struct gpu *g = &pm->gpus[i];
		if (g->thread_started)
			pthread_join(g->thread, NULL);
		rp_pm_session_stop(&g->session);
		rp_pm_config_free(&pm->cupti, &g->cfg);
		rp_shmring_close(g->ring);
	}
	if (pm->profiler_initialized) {
		struct rp_cupti_plain p = RP_CUPTI_PARAMS(struct rp_cupti_plain, pPriv);
		(void)pm->cupti.profiler_deinit(&p);
	}
	rp_cupti_close(&pm->cupti);
	pthread_cond_destroy(&pm->wake);
	pthread_cond_destroy(&pm->flushed);
	pthread_mutex_destroy(&pm->lock);
	free(pm);
}

/* The GPUs PM sampling can run on, in pm->gpus; a GPU below compute
 * capability 7.5 is left out, and when none is left why says so. */
static int find_gpus(struct gpu_pm *pm, struct rp_err *why)
{
	const struct rp_cupti *c = &pm->cupti;
	int count = 0;
	if (c->cu_device_count(&count) != 0 || count <= 0)
		return rp_err_set(why, -ENODEV, "no NVIDIA driver/GPU (the driver sees no GPU); "
				  "check nvidia-smi, or set [gpu_pm] enabled = false");
	if (count > MAX_GPUS)
		count = MAX_GPUS;
	uint64_t pci[MAX_GPUS];
	int devs[MAX_GPUS], cc[MAX_GPUS];
	for (int i = 0; i < count; i++) {
		if (c->cu_device_get(&devs[i], i) != 0)
			return rp_err_set(why, -EIO, "cuDeviceGet(%d) failed: check nvidia-smi", i);
		pci[i] = (uint64_t)attribute(c, devs[i], RP_CU_ATTR_PCI_DOMAIN_ID) << 32 |
			 (uint64_t)attribute(c, devs[i], RP_CU_ATTR_PCI_BUS_ID) << 8 |
			 (uint64_t)attribute(c, devs[i], RP_CU_ATTR_PCI_DEVICE_ID);
		cc[i] = 10 * attribute(c, devs[i], RP_CU_ATTR_CC_MAJOR) +
			attribute(c, devs[i], RP_CU_ATTR_CC_MINOR);
	}
	for (int i = 0; i < count; i++) {
		unsigned index = smi_index(pci, (size_t)count, (size_t)i);
		if (cc[i] < CC_MIN) {
			rp_err_set(why, -EOPNOTSUPP, "gpu%u has compute capability %d.%d; PM sampling "
				   "needs 7.5 (Turing) or later: nothing to fix on this GPU, set "
				   "[gpu_pm] enabled = false to silence this", index, cc[i] / 10,
				   cc[i] % 10);
			fprintf(stderr, "ringprofd: GPU PM sampling: %s\n", why->msg);
			continue;
		}
		pm->gpus[pm->ngpus++] = (struct gpu){ .pm = pm, .ordinal = (size_t)i,
						      .index = index };
	}
	return pm->ngpus ? 0 : -EOPNOTSUPP;
}

static int start(const struct rp_collector_env *env, void **out, struct rp_err *why)
{
	struct gpu_pm *pm = calloc(1, sizeof(*pm));
	if (!pm)
		return rp_err_set(why, -ENOMEM, "out of memory");
	pm->interval_ns = env->cfg->gpu_pm_interval_ns;
	pm->hw_buffer = env->cfg->gpu_pm_hw_buffer;
	pthread_mutex_init(&pm->lock, NULL);
	rp_cond_init_monotonic(&pm->wake);
	rp_cond_init_monotonic(&pm->flushed);
	int rc = rp_cupti_open(&pm->cupti, true, why);
	if (rc == 0)
		rc = find_gpus(pm, why);
	struct rp_cupti_plain init = RP_CUPTI_PARAMS(struct rp_cupti_plain, pPriv);
	int r;
	if (rc == 0 && (r = pm->cupti.profiler_init(&init)) != RP_CUPTI_SUCCESS) {
		char buf[128];
		rc = rp_err_set(why, -EIO, "cuptiProfilerInitialize failed: %s",
				rp_cupti_strerror(&pm->cupti, r, buf, sizeof(buf)));
	}
	pm->profiler_initialized = rc == 0;
	for (size_t i = 0; rc == 0 && i < pm->ngpus; i++) {
		struct gpu *g = &pm->gpus[i];
		char device[16];
		snprintf(device, sizeof(device), "gpu%u", g->index);
		rc = setup_gpu(g, env->cfg, why);
		/* A first session here, so that a GPU that can never be sampled
		 * (privileges, MIG) disables the collector with the fix in
		 * status; a busy one is retried by its thread. */
		if (rc == 0 && (rc = start_session(g, why)) == 0)
			atomic_store(&g->sampling, true);
		if (rc == -EBUSY) {
			fprintf(stderr, "ringprofd: GPU PM sampling of gpu%u: %s\n", g->index, why->msg);
			atomic_store(&g->busy, true);
			rc = 0;
		}
		if (rc < 0)
			rp_err_prefix(why, "gpu%u", g->index);
		if (rc == 0)
			rc = env->producer_ring(env->ctx, device, RING_SIZE, &g->ring, why);
		if (rc == 0 && (rc = -pthread_create(&g->thread, NULL, gpu_main, g)) < 0)
			rp_err_set(why, rc, "cannot start the PM decode thread: %s", strerror(-rc));
		g->thread_started = rc == 0;
	}
	if (rc < 0) {
		free_pm(pm);
		return rc;
	}
	*out = pm;
	return 0;
}

static const char *off(const struct rp_config *cfg)
{
	return cfg->gpu_pm_enabled ? NULL : "[gpu_pm] enabled = false";
}

static void stats(void *state, struct rp_collector_stats *st)
{
	struct gpu_pm *pm = state;
	st->values[0] = pm->ngpus;
	for (size_t i = 0; i < pm->ngpus; i++) {
		struct gpu *g = &pm->gpus[i];
		st->events += atomic_load(&g->events);
		st->lost += rp_shmring_dropped(g->ring);
		st->values[1] += atomic_load(&g->busy);
		st->values[2] += atomic_load(&g->overflows);
		if (g->unavailable[0]) {
			size_t len = strlen(st->detail);
			snprintf(st->detail + len, sizeof(st->detail) - len,
				 "%sgpu%u: %s not available on this GPU", len ? "; " : "",
				 g->index, g->unavailable);
		}
	}
	st->values[3] = atomic_load(&pm->paused);
}

/* Paused: returns once every GPU's session is released, so that the
 * caller can start Nsight Compute (or DCGM) right after. */
static int pause(void *state, bool paused, struct rp_err *err)
{
	struct gpu_pm *pm = state;
	atomic_store(&pm->paused, paused);
	pthread_mutex_lock(&pm->lock);
	pthread_cond_broadcast(&pm->wake);
	pthread_mutex_unlock(&pm->lock);
	for (unsigned waited_ms = 0; paused; waited_ms += 10) {
		bool sampling = false;
		for (size_t i = 0; i < pm->ngpus; i++)
			sampling |= atomic_load(&pm->gpus[i].sampling);
		if (!sampling)
			break;
		if (waited_ms >= 10000)
			return rp_err_set(err, -ETIMEDOUT, "paused, but a GPU's PM session was not "
					  "released within 10 s; try again");
		nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
	}
	fprintf(stderr, "ringprofd: GPU PM sampling %s through the API\n",
		paused ? "paused" : "resumed");
	return 0;
}

/* Every sampling GPU's thread decodes now; returns once all have, or
 * after FLUSH_WAIT_NS.  One paused, busy or broken holds nothing. */
static int flush(void *state, struct rp_err *err)
{
	struct gpu_pm *pm = state;
	pthread_mutex_lock(&pm->lock);
	uint64_t mine = ++pm->flush_round, deadline = rp_clock_now_ns() + FLUSH_WAIT_NS;
	pthread_cond_broadcast(&pm->wake);
	size_t behind = pm->ngpus;
	for (uint64_t now; !pm->stop && (now = rp_clock_now_ns()) < deadline;) {
		behind = 0;
		for (size_t i = 0; i < pm->ngpus; i++)
			behind += atomic_load(&pm->gpus[i].sampling) && pm->gpus[i].flushed < mine;
		if (!behind)
			break;
		rp_cond_wait_ns(&pm->flushed, &pm->lock, deadline - now);
	}
	pthread_mutex_unlock(&pm->lock);
	if (behind)
		return rp_err_set(err, -ETIMEDOUT, "%zu GPUs did not decode their PM samples within "
				  "%llu ms for a snapshot: its last PM samples may be missing (a "
				  "GPU reset or a driver stall; see nvidia-smi)", behind,
				  FLUSH_WAIT_NS / 1000000ull);
	return 0;
}

static void stop(void *state)
{
	free_pm(state);
}

const struct rp_collector rp_gpu_pm_collector = {
	.name = "gpu_pm",
	.title = "GPU PM sampling",
	.device = "host",
	.section = "gpu_pm",
	.values = value_names,
	.off = off,
	.start = start,
	.stats = stats,
	.pause = pause,
	.flush = flush,
	.stop = stop,
};
