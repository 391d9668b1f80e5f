/* Host metrics as a collector on the ingest thread: [host_metrics]. */
#include <errno.h>
#include <stdlib.h>

#include "collector.h"
#include "hostmetrics.h"

struct state {
	struct rp_hostmetrics *h;
	uint64_t events;
};

static const char *off(const struct rp_config *cfg)
{
	return cfg->host_metrics_enabled ? NULL : "[host_metrics] enabled = false";
}

static int start(const struct rp_collector_env *env, void **out, struct rp_err *why)
{
	struct state *s = calloc(1, sizeof(*s));
	if (!s)
		return rp_err_set(why, -ENOMEM, "out of memory for host metrics");
	int rc = rp_hostmetrics_new(env->proc_root, env->cfg->host_metrics_interval_ns, &s->h, why);
	if (rc < 0) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

static uint64_t due_ns(void *state)
{
	struct state *s = state;
	return rp_hostmetrics_due_ns(s->h);
}

static int poll(void *state, uint64_t now_ns, const struct rp_emit *emit, struct rp_err *err)
{
	struct state *s = state;
	int n = rp_hostmetrics_poll(s->h, now_ns, emit->event, emit->ctx, err);
	if (n > 0)
		s->events += (uint64_t)n;
	return n;
}

static void stats(void *state, struct rp_collector_stats *st)
{
	struct state *s = state;
	st->events = s->events;
}

static void stop(void *state)
{
	struct state *s = state;
	rp_hostmetrics_free(s->h);
	free(s);
}

const struct rp_collector rp_hostmetrics_collector = {
	.name = "host_metrics",
	.title = "host metrics",
	.device = "host",
	.section = "host_metrics",
	.off = off,
	.start = start,
	.due_ns = due_ns,
	.poll = poll,
	.stats = stats,
	.stop = stop,
};
