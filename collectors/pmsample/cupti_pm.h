/* The part of libcupti and libcuda that PM sampling uses, declared here
 * (layouts as in CUDA 13's cupti_pmsampling.h, cupti_profiler_host.h,
 * cupti_profiler_target.h and cupti_target.h; test_pmsample checks them
 * against those headers where they are installed), so that ringprofd
 * builds without the CUDA toolkit and loads both libraries at run time.
 *
 * Every call goes through struct rp_cupti, a table of function pointers:
 * rp_cupti_open fills it with dlsym, a test fills it with fakes. */
#ifndef RINGPROF_CUPTI_PM_H
#define RINGPROF_CUPTI_PM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* CUptiResult values the collector tells apart */
enum {
	RP_CUPTI_SUCCESS = 0,
	RP_CUPTI_ERROR_INVALID_OPERATION = 7,
	RP_CUPTI_ERROR_OUT_OF_MEMORY = 8,
	RP_CUPTI_ERROR_HARDWARE_BUSY = 26,
	RP_CUPTI_ERROR_NOT_SUPPORTED = 27,
	RP_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES = 35,
	RP_CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED = 43,
};
enum { RP_CUPTI_PROFILER_TYPE_PM_SAMPLING = 1 };
enum { RP_PM_TRIGGER_GPU_SYSCLK_INTERVAL = 0, RP_PM_TRIGGER_GPU_TIME_INTERVAL = 1 };
enum { RP_PM_APPEND_KEEP_OLDEST = 0, RP_PM_APPEND_KEEP_LATEST = 1 };
enum { RP_CU_ATTR_PCI_BUS_ID = 33, RP_CU_ATTR_PCI_DEVICE_ID = 34, RP_CU_ATTR_PCI_DOMAIN_ID = 50,
       RP_CU_ATTR_CC_MAJOR = 75, RP_CU_ATTR_CC_MINOR = 76 };

#define RP_CUPTI_SIZE(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
#define RP_CUPTI_PARAMS(type, last) { .structSize = RP_CUPTI_SIZE(type, last) }

struct rp_cupti_host_init {
	size_t structSize; void *pPriv;
	int profilerType; const char *pChipName; const uint8_t *pCounterAvailabilityImage;
	void *pHostObject;
};
struct rp_cupti_host_object { size_t structSize; void *pPriv; void *pHostObject; };
struct rp_cupti_supported_chips {
	size_t structSize; void *pPriv; size_t numChips; const char *const *ppChipNames;
};
struct rp_cupti_metric_properties {
	size_t structSize; void *pPriv; void *pHostObject; const char *pMetricName;
	const char *pDescription; const char *pHwUnit; const char *pDimUnit; int metricType;
};
struct rp_cupti_evaluate {
	size_t structSize; void *pPriv; void *pHostObject; const uint8_t *pCounterDataImage;
	size_t counterDataImageSize; size_t rangeIndex; const char **ppMetricNames;
	size_t numMetrics; double *pMetricValues;
};
struct rp_cupti_add_metrics {
	size_t structSize; void *pPriv; void *pHostObject; const char **ppMetricNames;
	size_t numMetrics;
};
struct rp_cupti_config_image_size {
	size_t structSize; void *pPriv; void *pHostObject; size_t configImageSize;
};
struct rp_cupti_config_image {
	size_t structSize; void *pPriv; void *pHostObject; size_t configImageSize;
	uint8_t *pConfigImage;
};
struct rp_cupti_num_passes {
	size_t structSize; void *pPriv; size_t configImageSize; uint8_t *pConfigImage;
	size_t numOfPasses;
};
struct rp_cupti_plain { size_t structSize; void *pPriv; };
struct rp_cupti_chip_name {
	size_t structSize; void *pPriv; size_t deviceIndex; const char *pChipName;
};
struct rp_pm_set_config {
	size_t structSize; void *pPriv; void *pPmSamplingObject; size_t configSize;
	const uint8_t *pConfig; size_t hardwareBufferSize; uint64_t samplingInterval;
	int triggerMode; int hwBufferAppendMode;
};
struct rp_pm_enable { size_t structSize; void *pPriv; size_t deviceIndex; void *pPmSamplingObject; };
/* Disable, Start, Stop */
struct rp_pm_object { size_t structSize; void *pPriv; void *pPmSamplingObject; };
struct rp_pm_decode {
	size_t structSize; void *pPriv; void *pPmSamplingObject; uint8_t *pCounterDataImage;
	size_t counterDataImageSize; int decodeStopReason; uint8_t overflow;
};
struct rp_pm_availability {
	size_t structSize; void *pPriv; size_t deviceIndex; size_t counterAvailabilityImageSize;
	uint8_t *pCounterAvailabilityImage;
};
struct rp_pm_counter_data_size {
	size_t structSize; void *pPriv; void *pPmSamplingObject; const char **pMetricNames;
	size_t numMetrics; uint32_t maxSamples; size_t counterDataSize;
};
struct rp_pm_counter_data_init {
	size_t structSize; void *pPriv; void *pPmSamplingObject; size_t counterDataSize;
	uint8_t *pCounterData;
};
struct rp_pm_counter_data_info {
	size_t structSize; void *pPriv; const uint8_t *pCounterDataImage;
	size_t counterDataImageSize; size_t numTotalSamples; size_t numPopulatedSamples;
	size_t numCompletedSamples;
};
struct rp_pm_sample_info {
	size_t structSize; void *pPriv; void *pPmSamplingObject; const uint8_t *pCounterDataImage;
	size_t counterDataImageSize; size_t sampleIndex; uint64_t startTimestamp;
	uint64_t endTimestamp;
};

/* field, symbol, parameter type: the libcupti calls */
#define RP_CUPTI_CALLS(X)                                                                  \
	X(host_supported_chips, cuptiProfilerHostGetSupportedChips, rp_cupti_supported_chips) \
	X(host_init, cuptiProfilerHostInitialize, rp_cupti_host_init)                        \
	X(host_deinit, cuptiProfilerHostDeinitialize, rp_cupti_host_object)                   \
	X(host_metric_properties, cuptiProfilerHostGetMetricProperties,                      \
	  rp_cupti_metric_properties)                                                         \
	X(host_add_metrics, cuptiProfilerHostConfigAddMetrics, rp_cupti_add_metrics)          \
	X(host_config_image_size, cuptiProfilerHostGetConfigImageSize,                        \
	  rp_cupti_config_image_size)                                                         \
	X(host_config_image, cuptiProfilerHostGetConfigImage, rp_cupti_config_image)          \
	X(host_num_passes, cuptiProfilerHostGetNumOfPasses, rp_cupti_num_passes)              \
	X(host_evaluate, cuptiProfilerHostEvaluateToGpuValues, rp_cupti_evaluate)             \
	X(profiler_init, cuptiProfilerInitialize, rp_cupti_plain)                             \
	X(profiler_deinit, cuptiProfilerDeInitialize, rp_cupti_plain)                         \
	X(chip_name, cuptiDeviceGetChipName, rp_cupti_chip_name)                              \
	X(pm_availability, cuptiPmSamplingGetCounterAvailability, rp_pm_availability)         \
	X(pm_enable, cuptiPmSamplingEnable, rp_pm_enable)                                     \
	X(pm_disable, cuptiPmSamplingDisable, rp_pm_object)                                   \
	X(pm_set_config, cuptiPmSamplingSetConfig, rp_pm_set_config)                          \
	X(pm_start, cuptiPmSamplingStart, rp_pm_object)                                       \
	X(pm_stop, cuptiPmSamplingStop, rp_pm_object)                                         \
	X(pm_decode, cuptiPmSamplingDecodeData, rp_pm_decode)                                 \
	X(pm_counter_data_size, cuptiPmSamplingGetCounterDataSize, rp_pm_counter_data_size)   \
	X(pm_counter_data_init, cuptiPmSamplingCounterDataImageInitialize,                    \
	  rp_pm_counter_data_init)                                                            \
	X(pm_counter_data_info, cuptiPmSamplingGetCounterDataInfo, rp_pm_counter_data_info)   \
	X(pm_sample_info, cuptiPmSamplingCounterDataGetSampleInfo, rp_pm_sample_info)

struct rp_cupti {
	void *cupti, *cuda;   /* dlopen handles; NULL in a fake */
#define RP_CUPTI_FIELD(field, symbol, type) int (*field)(struct type *);
	RP_CUPTI_CALLS(RP_CUPTI_FIELD)
#undef RP_CUPTI_FIELD
	int (*result_string)(int result, const char **str);
	int (*timestamp)(uint64_t *ts);
	/* libcuda: NULL when only the host side is loaded */
	int (*cu_init)(unsigned flags);
	int (*cu_device_count)(int *count);
	int (*cu_device_get)(int *dev, int ordinal);
	int (*cu_device_attribute)(int *value, int attribute, int dev);
};

/* Load libcupti (its host side works without a driver); with_cuda also
 * libcuda and cuInit: -ENODEV when there is no driver or no GPU.  why
 * names the library and the fix. */
RP_MUST_CHECK int rp_cupti_open(struct rp_cupti *c, bool with_cuda, struct rp_err *why);
void rp_cupti_close(struct rp_cupti *c);
/* "CUPTI_ERROR_...: message" for a result, into buf. */
const char *rp_cupti_strerror(const struct rp_cupti *c, int result, char *buf, size_t len);

#endif
