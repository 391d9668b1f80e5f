/* Alertmanager's webhook payload (version "4"), parsed for
 * POST /v1/alertmanager.  Lenient where Alertmanager may grow (unknown
 * fields are ignored), strict on the fields ringprofd uses: a payload
 * that does not have them is an error naming the field. */
#ifndef RINGPROF_ALERTS_H
#define RINGPROF_ALERTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct rp_alert {
	bool firing;                /* status "firing"; false: "resolved" */
	char fingerprint[64];       /* as sent; else 16 hex digits hashing the sorted labels */
	uint64_t key;               /* a hash of the fingerprint, for cool-downs */
	int64_t starts_at_wall_ns;  /* firing alerts only */
	const char *starts_at;      /* as sent; "" when absent */
	const char *generator_url;  /* "" when absent */
	json_t *labels;             /* objects of strings, borrowed from the batch */
	json_t *annotations;
};

struct rp_alert_batch {
	json_t *root;               /* owns what the alerts borrow */
	struct rp_alert *alerts;
	size_t n;
};

/* -EINVAL with the offending field ("alerts[2].startsAt: ...") for a body
 * that is not such a payload. */
RP_MUST_CHECK int rp_alerts_parse(const char *body, size_t len, struct rp_alert_batch *out,
		    struct rp_err *err);
void rp_alerts_free(struct rp_alert_batch *b);

/* The run an alert's snapshot goes to: the value of its label `label`,
 * with characters a run name cannot have replaced by '_'.  false (and
 * out untouched) when the alert has no such label or it is empty. */
bool rp_alert_run(const struct rp_alert *a, const char *label, char out[64]);
/* "<alertname>: <summary annotation>", either part left out when absent. */
void rp_alert_reason(const struct rp_alert *a, char *out, size_t len);

#endif
