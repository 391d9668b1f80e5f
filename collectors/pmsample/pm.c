#include "pm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Single-pass sets, each checked with libcupti's host API against its
 * chip (test_pmsample), under names that are the same on every chip: SM
 * activity, SM throughput, tensor pipe activity, warp occupancy, DRAM
 * throughput and bytes, PCIe and NVLink bytes.  SM throughput: the plain
 * sm__throughput needs 10 to 19 passes; GH100's Triage group has a
 * single-pass one, on GA100 and AD102 the instruction issue rate stands
 * in for it. */
#define COMMON_METRICS                                                                    \
	{ "gr_active_cycles", "gr__cycles_active.avg" },                                  \
	{ "gr_elapsed_cycles", "gr__cycles_elapsed.max" },                                \
	{ "sm_active_pct", "sm__cycles_active.avg.pct_of_peak_sustained_elapsed" },       \
	{ "tensor_active_pct",                                                            \
	  "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed" },   \
	{ "warps_active_pct", "sm__warps_active_realtime.avg.pct_of_peak_sustained_elapsed" }, \
	{ "dram_throughput_pct", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed" }, \
	{ "dram_read_bytes", "dram__bytes_read.sum" },                                    \
	{ "dram_write_bytes", "dram__bytes_write.sum" },                                  \
	{ "pcie_read_bytes", "pcie__read_bytes.sum" },                                    \
	{ "pcie_write_bytes", "pcie__write_bytes.sum" }
#define NVLINK_METRICS                                                                    \
	{ "nvlink_rx_bytes", "nvlrx__bytes.sum" }, { "nvlink_tx_bytes", "nvltx__bytes.sum" }

static const struct rp_pm_metric gh100_metrics[] = {
	COMMON_METRICS, NVLINK_METRICS,
	{ "sm_throughput_pct", "TriageCompute.sm__throughput.avg.pct_of_peak_sustained_elapsed" },
	{ NULL, NULL },
};
static const struct rp_pm_metric ga100_metrics[] = {
	COMMON_METRICS, NVLINK_METRICS,
	{ "sm_throughput_pct", "sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed" },
	{ NULL, NULL },
};
/* AD102 (L40, RTX 6000 Ada) has no NVLink */
static const struct rp_pm_metric ad102_metrics[] = {
	COMMON_METRICS,
	{ "sm_throughput_pct", "sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed" },
	{ NULL, NULL },
};

static const struct {
	const char *chip;
	const struct rp_pm_metric *metrics;
} default_sets[] = {
	{ "GH100", gh100_metrics },
	{ "GA100", ga100_metrics },
	{ "AD102", ad102_metrics },
};

const struct rp_pm_metric *rp_pm_default_metrics(const char *chip)
{
	for (size_t i = 0; i < sizeof(default_sets) / sizeof(default_sets[0]); i++)
		if (!strcmp(default_sets[i].chip, chip))
			return default_sets[i].metrics;
	return NULL;
}

static int cupti_fail(const struct rp_cupti *c, int result, struct rp_err *err, const char *what)
{
	char buf[128];
	return rp_err_set(err, -EIO, "%s failed: %s", what,
			  rp_cupti_strerror(c, result, buf, sizeof(buf)));
}

int rp_pm_chips(const struct rp_cupti *c, const char **chips, size_t max, size_t *n,
		struct rp_err *err)
{
	struct rp_cupti_supported_chips p = RP_CUPTI_PARAMS(struct rp_cupti_supported_chips,
							    ppChipNames);
	int r = c->host_supported_chips(&p);
	if (r != RP_CUPTI_SUCCESS)
		return cupti_fail(c, r, err, "cuptiProfilerHostGetSupportedChips");
	*n = p.numChips < max ? p.numChips : max;
	for (size_t i = 0; i < *n; i++)
		chips[i] = p.ppChipNames[i];
	return 0;
}

int rp_pm_parse_metrics(const char *list, char names[][RP_PM_METRIC_LEN], size_t max,
			size_t *n, struct rp_err *err)
{
	*n = 0;
	for (const char *item = list; *item;) {
		item += strspn(item, " \t,");
		size_t len = strcspn(item, ",");
		while (len && (item[len - 1] == ' ' || item[len - 1] == '\t'))
			len--;
		if (!len)
			break;
		if (*n == max)
			return rp_err_set(err, -E2BIG, "more than %zu metrics: PM sampling takes one "
					  "pass, which holds fewer; list fewer", max);
		if (len >= RP_PM_METRIC_LEN)
			return rp_err_set(err, -EINVAL, "metric '%.40s...' is longer than %d bytes; "
					  "no CUPTI metric is", item, RP_PM_METRIC_LEN - 1);
		memcpy(names[*n], item, len);
		names[(*n)++][len] = '\0';
		item += len;
	}
	return 0;
}

static int new_host(const struct rp_cupti *c, const char *chip, const uint8_t *availability,
		    void **host, struct rp_err *err)
{
	struct rp_cupti_host_init init = RP_CUPTI_PARAMS(struct rp_cupti_host_init, pHostObject);
	init.profilerType = RP_CUPTI_PROFILER_TYPE_PM_SAMPLING;
	init.pChipName = chip;
	init.pCounterAvailabilityImage = availability;
	int r = c->host_init(&init);
	if (r != RP_CUPTI_SUCCESS)
		return cupti_fail(c, r, err, "cuptiProfilerHostInitialize");
	*host = init.pHostObject;
	return 0;
}

static int add_metrics(const struct rp_cupti *c, void *host, const char **metrics, size_t n)
{
	struct rp_cupti_add_metrics add = RP_CUPTI_PARAMS(struct rp_cupti_add_metrics, numMetrics);
	add.pHostObject = host;
	add.ppMetricNames = metrics;
	add.numMetrics = n;
	return c->host_add_metrics(&add);
}

bool rp_pm_metric_available(const struct rp_cupti *c, const char *chip,
			    const uint8_t *availability, const char *metric)
{
	void *host;
	struct rp_err ignored = { 0 };
	if (new_host(c, chip, availability, &host, &ignored) < 0)
		return false;
	int r = add_metrics(c, host, &metric, 1);
	struct rp_cupti_host_object p = RP_CUPTI_PARAMS(struct rp_cupti_host_object, pHostObject);
	p.pHostObject = host;
	(void)c->host_deinit(&p);
	return r == RP_CUPTI_SUCCESS;
}

/* Which metric the chip refuses: each alone on a scratch host object
 * (metrics added in separate calls go into separate passes). */
static int name_bad_metric(const struct rp_cupti *c, const char *chip, const uint8_t *availability,
			   const char **metrics, size_t n, struct rp_err *err)
{
	for (size_t i = 0; i < n; i++)
		if (!rp_pm_metric_available(c, chip, availability, metrics[i]))
			return rp_err_set(err, -EINVAL, "metric '%s' is not a PM sampling metric of %s: "
					  "fix or remove it in [gpu_pm] metrics (ncu --chip %s "
					  "--query-metrics lists the chip's metrics)",
					  metrics[i], chip, chip);
	return rp_err_set(err, -EINVAL, "%s refuses these %zu metrics together; list fewer in "
			  "[gpu_pm] metrics", chip, n);
}

int rp_pm_config_build(const struct rp_cupti *c, const char *chip, const uint8_t *availability,
		       const char *const *metrics, size_t n, struct rp_pm_config *cfg,
		       struct rp_err *err)
{
	memset(cfg, 0, sizeof(*cfg));
	if (n == 0 || n > RP_PM_MAX_METRICS)
		return rp_err_set(err, -EINVAL, "%zu metrics: give 1 to %d", n, RP_PM_MAX_METRICS);
	int rc = new_host(c, chip, availability, &cfg->host, err);
	if (rc < 0)
		return rc;
	memcpy(cfg->metrics, metrics, n * sizeof(*metrics));
	if (add_metrics(c, cfg->host, cfg->metrics, n) != RP_CUPTI_SUCCESS) {
		rp_pm_config_free(c, cfg);
		return name_bad_metric(c, chip, availability, (const char **)metrics, n, err);
	}
	cfg->nmetrics = n;
	struct rp_cupti_config_image_size size =
		RP_CUPTI_PARAMS(struct rp_cupti_config_image_size, configImageSize);
	size.pHostObject = cfg->host;
	int r = c->host_config_image_size(&size);
	if (r == RP_CUPTI_SUCCESS && !(cfg->image = malloc(size.configImageSize))) {
		rp_pm_config_free(c, cfg);
		return rp_err_set(err, -ENOMEM, "out of memory");
	}
	struct rp_cupti_config_image image = RP_CUPTI_PARAMS(struct rp_cupti_config_image,
							     pConfigImage);
	image.pHostObject = cfg->host;
	image.configImageSize = cfg->image_size = size.configImageSize;
	image.pConfigImage = cfg->image;
	if (r == RP_CUPTI_SUCCESS)
		r = c->host_config_image(&image);
	struct rp_cupti_num_passes passes = RP_CUPTI_PARAMS(struct rp_cupti_num_passes,
							    numOfPasses);
	passes.configImageSize = cfg->image_size;
	passes.pConfigImage = cfg->image;
	if (r == RP_CUPTI_SUCCESS)
		r = c->host_num_passes(&passes);
	if (r != RP_CUPTI_SUCCESS) {
		rp_pm_config_free(c, cfg);
		return cupti_fail(c, r, err, "building the PM sampling config image");
	}
	cfg->passes = passes.numOfPasses;
	if (cfg->passes != 1) {
		size_t p = cfg->passes;
		rp_pm_config_free(c, cfg);
		return rp_err_set(err, -EINVAL, "the %zu metrics need %zu passes on %s; PM sampling "
				  "takes a set that needs one: list fewer in [gpu_pm] metrics", n,
				  p, chip);
	}
	return 0;
}

void rp_pm_config_free(const struct rp_cupti *c, struct rp_pm_config *cfg)
{
	if (cfg->host) {
		struct rp_cupti_host_object p = RP_CUPTI_PARAMS(struct rp_cupti_host_object,
								pHostObject);
		p.pHostObject = cfg->host;
		(void)c->host_deinit(&p);
	}
	free(cfg->image);
	memset(cfg, 0, sizeof(*cfg));
}

int rp_pm_device_chip(const struct rp_cupti *c, size_t device, char *chip, size_t len,
		      uint8_t **availability, struct rp_err *err)
{
	struct rp_cupti_chip_name name = RP_CUPTI_PARAMS(struct rp_cupti_chip_name, pChipName);
	name.deviceIndex = device;
	int r = c->chip_name(&name);
	if (r != RP_CUPTI_SUCCESS)
		return cupti_fail(c, r, err, "cuptiDeviceGetChipName");
	snprintf(chip, len, "%s", name.pChipName);
	struct rp_pm_availability a = RP_CUPTI_PARAMS(struct rp_pm_availability,
						      pCounterAvailabilityImage);
	a.deviceIndex = device;
	r = c->pm_availability(&a);
	if (r == RP_CUPTI_SUCCESS && !(*availability = malloc(a.counterAvailabilityImageSize)))
		return rp_err_set(err, -ENOMEM, "out of memory");
	a.pCounterAvailabilityImage = *availability;
	if (r == RP_CUPTI_SUCCESS && (r = c->pm_availability(&a)) != RP_CUPTI_SUCCESS) {
		free(*availability);
		*availability = NULL;
	}
	return r == RP_CUPTI_SUCCESS ? 0 : cupti_fail(c, r, err, "cuptiPmSamplingGetCounterAvailability");
}

/* The device side's refusals that have a fix, as an errno and the fix. */
static const struct {
	int result, rc;
	const char *fix;
} refusals[] = {
	{ RP_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, -EACCES,
	  "the driver restricts GPU profiling to admins; run ringprofd as root (or with "
	  "CAP_SYS_ADMIN), or load nvidia with NVreg_RestrictProfilingToAdminUsers=0" },
	{ RP_CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED, -EOPNOTSUPP,
	  "PM sampling does not run on a MIG partitioned GPU; disable MIG (nvidia-smi -mig 0) "
	  "to sample it, or set [gpu_pm] enabled = false" },
	{ RP_CUPTI_ERROR_HARDWARE_BUSY, -EBUSY,
	  "another profiler (DCGM profiling, Nsight) holds the GPU's counters; retrying with "
	  "back-off (pause DCGM with dcgmi profile --pause)" },
	{ RP_CUPTI_ERROR_INVALID_OPERATION, -EBUSY,
	  "another profiler or PM session holds the GPU's counters; retrying with back-off "
	  "(pause DCGM with dcgmi profile --pause)" },
	{ RP_CUPTI_ERROR_NOT_SUPPORTED, -EOPNOTSUPP,
	  "this GPU or driver has no PM sampling (it needs compute capability 7.5 or later and "
	  "a CUDA 12.6+ driver); set [gpu_pm] enabled = false" },
};

static int session_fail(const struct rp_cupti *c, int r, const char *what, struct rp_err *why)
{
	char buf[128];
	const char *s = rp_cupti_strerror(c, r, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
		if (refusals[i].result == r)
			return rp_err_set(why, refusals[i].rc, "%s: %s: %s", what, s, refusals[i].fix);
	return rp_err_set(why, -EIO, "%s failed: %s", what, s);
}

/* Tried in order: what SetConfig accepts first.  A time trigger needs
 * GA10x or later, KEEP_LATEST Ampere or later. */
static const struct { int trigger, append; } modes[] = {
	{ RP_PM_TRIGGER_GPU_TIME_INTERVAL, RP_PM_APPEND_KEEP_LATEST },
	{ RP_PM_TRIGGER_GPU_TIME_INTERVAL, RP_PM_APPEND_KEEP_OLDEST },
	{ RP_PM_TRIGGER_GPU_SYSCLK_INTERVAL, RP_PM_APPEND_KEEP_LATEST },
	{ RP_PM_TRIGGER_GPU_SYSCLK_INTERVAL, RP_PM_APPEND_KEEP_OLDEST },
};
/* The sysclk trigger counts GPU clocks: about 1 GHz on these parts. */
#define SYSCLK_PER_NS 1

static int reset_counter_data(struct rp_pm_session *s)
{
	struct rp_pm_counter_data_init p = RP_CUPTI_PARAMS(struct rp_pm_counter_data_init,
							   pCounterData);
	p.pPmSamplingObject = s->object;
	p.counterDataSize = s->counter_data_size;
	p.pCounterData = s->counter_data;
	return s->c->pm_counter_data_init(&p);
}

int rp_pm_session_start(struct rp_pm_session *s, const struct rp_cupti *c, size_t device,
			const struct rp_pm_config *cfg, uint64_t interval_ns, size_t hw_buffer,
			uint32_t max_samples, struct rp_err *why)
{
	memset(s, 0, sizeof(*s));
	s->c = c;
	s->cfg = cfg;
	struct rp_pm_enable en = RP_CUPTI_PARAMS(struct rp_pm_enable, pPmSamplingObject);
	en.deviceIndex = device;
	int r = c->pm_enable(&en);
	if (r != RP_CUPTI_SUCCESS)
		return session_fail(c, r, "cuptiPmSamplingEnable", why);
	s->object = en.pPmSamplingObject;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct rp_pm_set_config set = RP_CUPTI_PARAMS(struct rp_pm_set_config,
							      hwBufferAppendMode);
		set.pPmSamplingObject = s->object;
		set.configSize = cfg->image_size;
		set.pConfig = cfg->image;
		set.hardwareBufferSize = hw_buffer;
		set.samplingInterval = modes[i].trigger == RP_PM_TRIGGER_GPU_TIME_INTERVAL
					       ? interval_ns : interval_ns * SYSCLK_PER_NS;
		set.triggerMode = modes[i].trigger;
		set.hwBufferAppendMode = modes[i].append;
		if ((r = c->pm_set_config(&set)) == RP_CUPTI_SUCCESS) {
			s->keep_latest = modes[i].append == RP_PM_APPEND_KEEP_LATEST;
			s->time_trigger = modes[i].trigger == RP_PM_TRIGGER_GPU_TIME_INTERVAL;
			break;
		}
	}
	const char *what = "cuptiPmSamplingSetConfig";
	struct rp_pm_counter_data_size size = RP_CUPTI_PARAMS(struct rp_pm_counter_data_size,
							      counterDataSize);
	size.pPmSamplingObject = s->object;
	size.pMetricNames = (const char **)cfg->metrics;
	size.numMetrics = cfg->nmetrics;
	size.maxSamples = max_samples;
	if (r == RP_CUPTI_SUCCESS && (r = c->pm_counter_data_size(&size)) != RP_CUPTI_SUCCESS)
		what = "cuptiPmSamplingGetCounterDataSize";
	if (r == RP_CUPTI_SUCCESS && !(s->counter_data = malloc(size.counterDataSize))) {
		rp_pm_session_stop(s);
		return rp_err_set(why, -ENOMEM, "out of memory");
	}
	s->counter_data_size = size.counterDataSize;
	if (r == RP_CUPTI_SUCCESS && (r = reset_counter_data(s)) != RP_CUPTI_SUCCESS)
		what = "cuptiPmSamplingCounterDataImageInitialize";
	struct rp_pm_object start = RP_CUPTI_PARAMS(struct rp_pm_object, pPmSamplingObject);
	start.pPmSamplingObject = s->object;
	if (r == RP_CUPTI_SUCCESS && (r = c->pm_start(&start)) != RP_CUPTI_SUCCESS)
		what = "cuptiPmSamplingStart";
	if (r != RP_CUPTI_SUCCESS) {
		int rc = session_fail(c, r, what, why);
		rp_pm_session_stop(s);
		return rc;
	}
	return 0;
}

void rp_pm_session_stop(struct rp_pm_session *s)
{
	if (!s->object)
		return;
	struct rp_pm_object p = RP_CUPTI_PARAMS(struct rp_pm_object, pPmSamplingObject);
	p.pPmSamplingObject = s->object;
	(void)s->c->pm_stop(&p);
	(void)s->c->pm_disable(&p);
	free(s->counter_data);
	s->counter_data = NULL;
	s->object = NULL;
}

enum { DECODE_STOP_COUNTER_DATA_FULL = 1 };

long rp_pm_decode(struct rp_pm_session *s, rp_pm_sample_fn fn, void *ctx, struct rp_err *err)
{
	const struct rp_cupti *c = s->c;
	double values[RP_PM_MAX_METRICS];
	long handed = 0;
	bool full;
	do {
		struct rp_pm_decode d = RP_CUPTI_PARAMS(struct rp_pm_decode, overflow);
		d.pPmSamplingObject = s->object;
		d.pCounterDataImage = s->counter_data;
		d.counterDataImageSize = s->counter_data_size;
		int r = c->pm_decode(&d);
		/* KEEP_OLDEST ran over: what was decoded is kept, the rest lost */
		if (r == RP_CUPTI_ERROR_OUT_OF_MEMORY || d.overflow)
			s->overflows++;
		else if (r != RP_CUPTI_SUCCESS)
			return cupti_fail(c, r, err, "cuptiPmSamplingDecodeData");
		full = r == RP_CUPTI_SUCCESS && d.decodeStopReason == DECODE_STOP_COUNTER_DATA_FULL;
		struct rp_pm_counter_data_info info =
			RP_CUPTI_PARAMS(struct rp_pm_counter_data_info, numCompletedSamples);
		info.pCounterDataImage = s->counter_data;
		info.counterDataImageSize = s->counter_data_size;
		if ((r = c->pm_counter_data_info(&info)) != RP_CUPTI_SUCCESS)
			return cupti_fail(c, r, err, "cuptiPmSamplingGetCounterDataInfo");
		for (size_t i = 0; i < info.numCompletedSamples; i++) {
			struct rp_pm_sample_info si = RP_CUPTI_PARAMS(struct rp_pm_sample_info,
								      endTimestamp);
			si.pPmSamplingObject = s->object;
			si.pCounterDataImage = s->counter_data;
			si.counterDataImageSize = s->counter_data_size;
			si.sampleIndex = i;
			struct rp_cupti_evaluate ev = RP_CUPTI_PARAMS(struct rp_cupti_evaluate,
								      pMetricValues);
			ev.pHostObject = s->cfg->host;
			ev.pCounterDataImage = s->counter_data;
			ev.counterDataImageSize = s->counter_data_size;
			ev.rangeIndex = i;
			ev.ppMetricNames = (const char **)s->cfg->metrics;
			ev.numMetrics = s->cfg->nmetrics;
			ev.pMetricValues = values;
			if ((r = c->pm_sample_info(&si)) != RP_CUPTI_SUCCESS ||
			    (r = c->host_evaluate(&ev)) != RP_CUPTI_SUCCESS)
				return cupti_fail(c, r, err, "evaluating a PM sample");
			fn(ctx, si.startTimestamp, si.endTimestamp, values, s->cfg->nmetrics);
			handed++;
		}
		if ((r = reset_counter_data(s)) != RP_CUPTI_SUCCESS)
			return cupti_fail(c, r, err, "cuptiPmSamplingCounterDataImageInitialize");
	} while (full);
	return handed;
}
