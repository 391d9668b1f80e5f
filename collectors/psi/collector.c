/* PSI as a collector on a thread of its own: every [psi] interval, the
 * avg10 and total stall time of cpu, memory and io, some and full, as
 * counters into the host ring through a producer ring of the daemon's
 * (collector.h), so that a slow read of /proc never holds up the ingest
 * thread.  Counters (pid 0, "family/member" names as host metrics):
 *
 *   psi_avg10/cpu_some ... psi_avg10/io_full        percent of the last 10 s
 *   psi_stall_us/cpu_some ... psi_stall_us/io_full  stall time since boot, us */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "collector.h"
#include "psi.h"

#define RING_SIZE (64u << 10)
static const char *const resources[] = { "cpu", "memory", "io" };
#define NRESOURCES (sizeof(resources) / sizeof(resources[0]))

struct psi {
	char paths[NRESOURCES][PATH_MAX];
	uint64_t interval_ns;
	struct rp_shmring *ring;         /* written by the thread only */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stop;                       /* guarded by lock */
	atomic_uint_least64_t events;
};

static void put(struct psi *p, uint64_t ts, const char *family, const char *resource,
		const char *kind, double value)
{
	char name[64];
	snprintf(name, sizeof(name), "%s/%s_%s", family, resource, kind);
	if (rp_shm_counter(p->ring, ts, name, value))
		atomic_fetch_add(&p->events, 1);
}

/* One reading of every file; a failing one is logged once a minute at
 * most. */
static void sample(struct psi *p, uint64_t *error_logged)
{
	for (size_t i = 0; i < NRESOURCES; i++) {
		struct rp_psi v;
		struct rp_err err = { 0 };
		uint64_t ts = rp_shmring_now(p->ring);
		if (rp_psi_read(p->paths[i], &v, &err) < 0) {
			if (ts - *error_logged > 60000000000ull) {
				fprintf(stderr, "ringprofd: %s\n", err.msg);
				*error_logged = ts;
			}
			continue;
		}
		const struct { const char *kind; const struct rp_psi_line *l; } lines[] = {
			{ "some", &v.some }, { "full", &v.full },
		};
		for (size_t k = 0; k < 2; k++) {
			if (!lines[k].l->present)
				continue;
			put(p, ts, "psi_avg10", resources[i], lines[k].kind, lines[k].l->avg10);
			put(p, ts, "psi_stall_us", resources[i], lines[k].kind,
			    (double)lines[k].l->total_us);
		}
	}
}

static void *psi_main(void *arg)
{
	struct psi *p = arg;
	uint64_t error_logged = 0;
	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		pthread_mutex_unlock(&p->lock);
		sample(p, &error_logged);
		pthread_mutex_lock(&p->lock);
		if (!p->stop)
			rp_cond_wait_ns(&p->wake, &p->lock, p->interval_ns);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static const char *off(const struct rp_config *cfg)
{
	return cfg->psi_enabled ? NULL : "[psi] enabled = false";
}

static void free_psi(struct psi *p)
{
	rp_shmring_close(p->ring);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Every file is read once here, so a kernel without PSI (no
 * /proc/pressure, or booted with psi=0: reads fail) disables it at
 * start, with the reason in status. */
static int start(const struct rp_collector_env *env, void **out, struct rp_err *why)
{
	struct psi *p = calloc(1, sizeof(*p));
	if (!p)
		return rp_err_set(why, -ENOMEM, "out of memory");
	p->interval_ns = env->cfg->psi_interval_ns;
	pthread_mutex_init(&p->lock, NULL);
	rp_cond_init_monotonic(&p->wake);
	int rc = 0;
	for (size_t i = 0; i < NRESOURCES && rc == 0; i++) {
		struct rp_psi v;
		snprintf(p->paths[i], sizeof(p->paths[i]), "%s/pressure/%s", env->proc_root,
			 resources[i]);
		rc = rp_psi_read(p->paths[i], &v, why);
	}
	if (rc == -ENOENT || rc == -EOPNOTSUPP) {
		char cause[sizeof(why->msg)];
		snprintf(cause, sizeof(cause), "%s", why->msg);
		rp_err_set(why, rc, "%.200s: this kernel keeps no pressure stall information "
			   "(it needs CONFIG_PSI=y, and psi=1 on its command line where "
			   "CONFIG_PSI_DEFAULT_DISABLED=y); or set [psi] enabled = false", cause);
	}
	if (rc == 0)
		rc = env->producer_ring(env->ctx, "host", RING_SIZE, &p->ring, why);
	if (rc == 0 && (rc = -pthread_create(&p->thread, NULL, psi_main, p)) < 0)
		rp_err_set(why, rc, "cannot start the PSI thread: %s", strerror(-rc));
	if (rc < 0) {
		free_psi(p);
		return rc;
	}
	*out = p;
	return 0;
}

static void stats(void *state, struct rp_collector_stats *st)
{
	struct psi *p = state;
	st->events = atomic_load(&p->events);
	st->lost = rp_shmring_dropped(p->ring);
}

static void stop(void *state)
{
	struct psi *p = state;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	free_psi(p);
}

const struct rp_collector rp_psi_collector = {
	.name = "psi",
	.title = "PSI",
	.device = "host",
	.section = "psi",
	.off = off,
	.start = start,
	.stats = stats,
	.stop = stop,
};
