/* Built-in trigger rules ([rule.NAME] in the configuration: a range
 * slower than k times its rolling median, a counter above a threshold for
 * a while) and the per-name range duration histograms of /metrics.  Both
 * come from one pass over the events the ingest thread drains
 * (rp_rules_observe, a drain observer).
 *
 * The observer never takes a snapshot itself: that would stall the
 * ingest thread.  A rule that fires (and passes its cool-down and rate
 * limit) queues a request, which the control layer takes with
 * rp_rules_take once its window has ended.
 *
 * Threads: rp_rules_observe on the ingest thread only; the rest from any
 * thread. */
#ifndef RINGPROF_RULES_H
#define RINGPROF_RULES_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "err.h"
#include "event.h"
#include "gate.h"
#include "names.h"

/* A snapshot a rule asks for. */
struct rp_rule_fire {
	char rule[RP_NAME_LEN];
	char reason[512];          /* room for any rule's names and numbers */
	uint64_t fired_ns;          /* host ns of the event that fired the rule */
	uint64_t start_ns, end_ns;  /* the window, host ns */
	json_t *extra;              /* for the manifest's trigger; the taker owns it */
};

struct rp_rules;

/* rules[0..n-1] are checked by rp_config_check and copied. */
RP_MUST_CHECK int rp_rules_new(const struct rp_rule_config *rules, unsigned n, struct rp_rules **out,
		 struct rp_err *err);
void rp_rules_free(struct rp_rules *r);

/* The drain observer (rp_drain_observer): ctx is the struct rp_rules. */
void rp_rules_observe(void *ctx, const struct rp_event *ev);

/* 1 and the oldest request whose window ended by now_ns, 0 when none. */
RP_MUST_CHECK int rp_rules_take(struct rp_rules *r, uint64_t now_ns, struct rp_rule_fire *out);

/* Firings refused by the rules' cool-downs / rate limits (verdict v). */
uint64_t rp_rules_skipped(struct rp_rules *r, enum rp_gate_verdict v);

/* ringprof_range_duration_seconds, in the Prometheus text format. */
void rp_rules_write_metrics(struct rp_rules *r, FILE *f);

#endif
