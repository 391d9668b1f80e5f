#include "gate.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#define HOUR_NS (3600ull * 1000000000ull)

struct key_time {
	uint64_t key, at_ns;
};

struct rp_gate {
	uint64_t cooldown_ns;
	/* Keys that passed within the cool-down; expired ones are dropped on
	 * every check, so the table holds at most the recent passes. */
	struct key_time *recent;
	size_t nrecent, cap;
	/* The last max_per_hour passes, oldest at head once full. */
	uint64_t *passes;
	unsigned max_per_hour, npasses, head;
};

int rp_gate_new(uint64_t cooldown_ns, unsigned max_per_hour, struct rp_gate **out,
		struct rp_err *err)
{
	if (max_per_hour == 0)
		return rp_err_set(err, -EINVAL, "max_per_hour is 0: allow at least 1 snapshot per hour");
	struct rp_gate *g = calloc(1, sizeof(*g));
	if (g)
		g->passes = calloc(max_per_hour, sizeof(*g->passes));
	if (!g || !g->passes) {
		free(g);
		return rp_err_set(err, -ENOMEM, "out of memory creating a trigger rate limit");
	}
	g->cooldown_ns = cooldown_ns;
	g->max_per_hour = max_per_hour;
	*out = g;
	return 0;
}

void rp_gate_free(struct rp_gate *g)
{
	if (!g)
		return;
	free(g->recent);
	free(g->passes);
	free(g);
}

enum rp_gate_verdict rp_gate_check(struct rp_gate *g, uint64_t key, uint64_t now_ns)
{
	bool cooling = false;
	for (size_t i = 0; i < g->nrecent;) {
		if (now_ns - g->recent[i].at_ns >= g->cooldown_ns) {
			g->recent[i] = g->recent[--g->nrecent];
			continue;
		}
		cooling |= g->recent[i].key == key;
		i++;
	}
	if (cooling)
		return RP_GATE_COOLDOWN;
	if (g->npasses == g->max_per_hour && now_ns - g->passes[g->head] < HOUR_NS)
		return RP_GATE_RATE_LIMIT;

	g->passes[g->head] = now_ns;
	g->head = (g->head + 1) % g->max_per_hour;
	if (g->npasses < g->max_per_hour)
		g->npasses++;
	if (g->nrecent == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct key_time *r = realloc(g->recent, cap * sizeof(*r));
		if (!r)
			return RP_GATE_PASS; /* only the cool-down is lost; the hour still counts */
		g->recent = r;
		g->cap = cap;
	}
	g->recent[g->nrecent++] = (struct key_time){ .key = key, .at_ns = now_ns };
	return RP_GATE_PASS;
}

const char *rp_gate_verdict_name(enum rp_gate_verdict v)
{
	switch (v) {
	case RP_GATE_COOLDOWN:
		return "cool-down";
	case RP_GATE_RATE_LIMIT:
		return "rate limit";
	default:
		return "pass";
	}
}
