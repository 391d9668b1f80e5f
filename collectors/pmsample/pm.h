/* CUPTI PM sampling of one GPU, in pieces a test can drive without one:
 * the host side (chip list, default metric sets, metric set -> config
 * image for a chip, validated, one pass) runs on libcupti alone; the
 * session and the decode loop go through struct rp_cupti, so a fake
 * table drives them. */
#ifndef RINGPROF_PM_H
#define RINGPROF_PM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cupti_pm.h"
#include "err.h"

#define RP_PM_MAX_METRICS 32
#define RP_PM_METRIC_LEN 128

/* The chips this libcupti knows ("GA100", "GH100", ...): *n of them into
 * chips (at most max); the names belong to libcupti. */
RP_MUST_CHECK int rp_pm_chips(const struct rp_cupti *c, const char **chips, size_t max, size_t *n,
		struct rp_err *err);

/* A metric: the counter's name in the ring ("gpu_pm/<name>") and CUPTI's. */
struct rp_pm_metric {
	const char *name;
	const char *cupti;
};

/* The default metric set of chip, ended by a NULL name; NULL when none is
 * validated for it (then [gpu_pm] metrics must name one). */
const struct rp_pm_metric *rp_pm_default_metrics(const char *chip);

/* Whether this device (availability: its counter availability image, or
 * NULL for the chip in general) offers metric to PM sampling.  A chip's
 * default set can name counters a given board lacks: NVLink's on a GPU
 * with its links off or behind a hypervisor, for one. */
bool rp_pm_metric_available(const struct rp_cupti *c, const char *chip,
			    const uint8_t *availability, const char *metric);

/* "a, b,c" into names: -EINVAL naming an empty or too long item. */
RP_MUST_CHECK int rp_pm_parse_metrics(const char *list, char names[][RP_PM_METRIC_LEN], size_t max,
			size_t *n, struct rp_err *err);

/* A metric set compiled for a chip: the config image PM sampling takes
 * (CUPTI keeps its pointer: it lives as long as the session) and the host
 * object that evaluates counter data. */
struct rp_pm_config {
	void *host;
	uint8_t *image;
	size_t image_size;
	size_t passes;
	const char *metrics[RP_PM_MAX_METRICS];
	size_t nmetrics;
};

/* Compile metrics for chip (availability: the device's counter
 * availability image, or NULL for the chip in general).  -EINVAL naming
 * the first metric the chip does not have, or the pass count when the set
 * needs more than one.  metrics must outlive cfg. */
RP_MUST_CHECK int rp_pm_config_build(const struct rp_cupti *c, const char *chip, const uint8_t *availability,
		       const char *const *metrics, size_t n, struct rp_pm_config *cfg,
		       struct rp_err *err);
void rp_pm_config_free(const struct rp_cupti *c, struct rp_pm_config *cfg);

/* A PM sampling session on one device. */
struct rp_pm_session {
	const struct rp_cupti *c;
	const struct rp_pm_config *cfg;
	void *object;
	uint8_t *counter_data;
	size_t counter_data_size;
	bool keep_latest;        /* the hardware buffer keeps the newest samples */
	bool time_trigger;       /* the interval is in ns, not GPU clocks */
	uint64_t overflows;      /* decodes that found samples overwritten or lost */
};

/* The device's chip name and counter availability image (malloc'ed). */
RP_MUST_CHECK int rp_pm_device_chip(const struct rp_cupti *c, size_t device, char *chip, size_t len,
		      uint8_t **availability, struct rp_err *err);

/* Enable, configure (KEEP_LATEST and a time trigger where the device has
 * them) and start.  -EBUSY: another profiler holds the counters; -EACCES:
 * profiling is restricted to admins; -EOPNOTSUPP: MIG or an unsupported
 * device.  why says which and the fix. */
RP_MUST_CHECK int rp_pm_session_start(struct rp_pm_session *s, const struct rp_cupti *c, size_t device,
			const struct rp_pm_config *cfg, uint64_t interval_ns, size_t hw_buffer,
			uint32_t max_samples, struct rp_err *why);
void rp_pm_session_stop(struct rp_pm_session *s);

/* A decoded sample: its end time in CUPTI's timestamp domain and a value
 * per metric of the config, in its order. */
typedef void (*rp_pm_sample_fn)(void *ctx, uint64_t start_ts, uint64_t end_ts,
				const double *values, size_t n);

/* Hand every completed sample the hardware buffer holds to fn; the number
 * handed over, or a negative errno with err. */
long rp_pm_decode(struct rp_pm_session *s, rp_pm_sample_fn fn, void *ctx, struct rp_err *err);

#endif
