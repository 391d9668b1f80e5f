/* A stand-in for libcuda.so.1 and libcupti.so.13 (the same file built as
 * both), for the GPU PM sampling collector in a real daemon on a host
 * without a GPU: the calls it makes, with the declarations it uses.
 *
 * FAKE_GPU_COUNT: GPUs (default 1).  Their PCI bus numbers fall as the
 * CUDA ordinal rises, so nvidia-smi's order is the reverse of CUDA's.
 * FAKE_PM_ENABLE_RESULT: what cuptiPmSamplingEnable returns (default 0).
 * A metric whose name holds "bogus" is refused.  Each decode hands out
 * the samples since the previous decode into the same counter data (at
 * least one, at most MAX_SAMPLES), ending now, 1 ms apart, as a GPU
 * sampling every millisecond would; metric i of CUDA device d
 * evaluates to 1000 * d + 10 * (i + 1) (the device travels in the counter
 * availability image to the host object). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cupti_pm.h"

#define MAX_SAMPLES 2000
#define SAMPLE_NS 1000000ull
#define EXPORT __attribute__((visibility("default")))

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v ? atoi(v) : def;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- libcuda ---- */
EXPORT int cuInit(unsigned flags) { (void)flags; return 0; }
EXPORT int cuDeviceGetCount(int *n) { *n = env_int("FAKE_GPU_COUNT", 1); return 0; }
EXPORT int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
EXPORT int cuDeviceGetAttribute(int *v, int attr, int dev)
{
	*v = attr == RP_CU_ATTR_PCI_BUS_ID ? 0x80 - dev : attr == RP_CU_ATTR_CC_MAJOR ? 9 : 0;
	return 0;
}

/* ---- libcupti: host side ---- */
static const char *const chips[] = { "GH100" };
static int host_objects[64];   /* one per device: its ordinal */

EXPORT int cuptiGetResultString(int r, const char **s) { (void)r; *s = "CUPTI_ERROR_FAKE"; return 0; }
EXPORT int cuptiGetTimestamp(uint64_t *ts) { *ts = realtime_ns(); return 0; }
EXPORT int cuptiProfilerHostGetSupportedChips(struct rp_cupti_supported_chips *p)
{
	p->numChips = 1;
	p->ppChipNames = chips;
	return 0;
}
EXPORT int cuptiProfilerHostInitialize(struct rp_cupti_host_init *p)
{
	int device = p->pCounterAvailabilityImage ? p->pCounterAvailabilityImage[0] : 0;
	host_objects[device] = device;
	p->pHostObject = &host_objects[device];
	return 0;
}
EXPORT int cuptiProfilerHostDeinitialize(struct rp_cupti_host_object *p) { (void)p; return 0; }
EXPORT int cuptiProfilerHostGetMetricProperties(struct rp_cupti_metric_properties *p) { (void)p; return 0; }
EXPORT int cuptiProfilerHostConfigAddMetrics(struct rp_cupti_add_metrics *p)
{
	for (size_t i = 0; i < p->numMetrics; i++)
		if (strstr(p->ppMetricNames[i], "bogus") ||
		    (env_int("FAKE_GPU_NO_NVLINK", 0) && !strncmp(p->ppMetricNames[i], "nvl", 3)))
			return 1;
	return 0;
}
EXPORT int cuptiProfilerHostGetConfigImageSize(struct rp_cupti_config_image_size *p) { p->configImageSize = 8; return 0; }
EXPORT int cuptiProfilerHostGetConfigImage(struct rp_cupti_config_image *p) { memset(p->pConfigImage, 1, p->configImageSize); return 0; }
EXPORT int cuptiProfilerHostGetNumOfPasses(struct rp_cupti_num_passes *p) { p->numOfPasses = 1; return 0; }
EXPORT int cuptiProfilerHostEvaluateToGpuValues(struct rp_cupti_evaluate *p)
{
	for (size_t i = 0; i < p->numMetrics; i++)
		p->pMetricValues[i] = 1000.0 * *(int *)p->pHostObject + 10.0 * (double)(i + 1);
	return 0;
}

/* ---- libcupti: device side ---- */
static int pm_object;
struct counter_data { uint64_t samples, end; };

EXPORT int cuptiProfilerInitialize(struct rp_cupti_plain *p) { (void)p; return 0; }
EXPORT int cuptiProfilerDeInitialize(struct rp_cupti_plain *p) { (void)p; return 0; }
EXPORT int cuptiDeviceGetChipName(struct rp_cupti_chip_name *p) { p->pChipName = "GH100"; return 0; }
EXPORT int cuptiPmSamplingGetCounterAvailability(struct rp_pm_availability *p)
{
	if (p->pCounterAvailabilityImage)
		memset(p->pCounterAvailabilityImage, (int)p->deviceIndex, p->counterAvailabilityImageSize);
	p->counterAvailabilityImageSize = 16;
	return 0;
}
EXPORT int cuptiPmSamplingEnable(struct rp_pm_enable *p)
{
	p->pPmSamplingObject = &pm_object;
	return env_int("FAKE_PM_ENABLE_RESULT", 0);
}
EXPORT int cuptiPmSamplingDisable(struct rp_pm_object *p) { (void)p; return 0; }
EXPORT int cuptiPmSamplingSetConfig(struct rp_pm_set_config *p) { (void)p; return 0; }
EXPORT int cuptiPmSamplingStart(struct rp_pm_object *p) { (void)p; return 0; }
EXPORT int cuptiPmSamplingStop(struct rp_pm_object *p) { (void)p; return 0; }
EXPORT int cuptiPmSamplingGetCounterDataSize(struct rp_pm_counter_data_size *p)
{
	p->counterDataSize = sizeof(struct counter_data);
	return 0;
}
EXPORT int cuptiPmSamplingCounterDataImageInitialize(struct rp_pm_counter_data_init *p)
{
	memset(p->pCounterData, 0, p->counterDataSize);
	return 0;
}
EXPORT int cuptiPmSamplingDecodeData(struct rp_pm_decode *p)
{
	/* The last decode's end, per counter data image (one per GPU). */
	static struct { const void *image; uint64_t end; } last[64];
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	struct counter_data d = { 1, realtime_ns() };
	pthread_mutex_lock(&lock);
	size_t i = 0;
	while (i < 63 && last[i].image && last[i].image != p->pCounterDataImage)
		i++;
	if (last[i].image == p->pCounterDataImage && d.end > last[i].end)
		d.samples = (d.end - last[i].end) / SAMPLE_NS;
	d.samples = d.samples < 1 ? 1 : d.samples > MAX_SAMPLES ? MAX_SAMPLES : d.samples;
	last[i].image = p->pCounterDataImage;
	last[i].end = d.end;
	pthread_mutex_unlock(&lock);
	memcpy(p->pCounterDataImage, &d, sizeof(d));
	p->decodeStopReason = 2; /* end of records */
	p->overflow = 0;
	return 0;
}
EXPORT int cuptiPmSamplingGetCounterDataInfo(struct rp_pm_counter_data_info *p)
{
	struct counter_data d;
	memcpy(&d, p->pCounterDataImage, sizeof(d));
	p->numTotalSamples = p->numPopulatedSamples = p->numCompletedSamples = d.samples;
	return 0;
}
EXPORT int cuptiPmSamplingCounterDataGetSampleInfo(struct rp_pm_sample_info *p)
{
	struct counter_data d;
	memcpy(&d, p->pCounterDataImage, sizeof(d));
	p->endTimestamp = d.end - (d.samples - 1 - p->sampleIndex) * SAMPLE_NS;
	p->startTimestamp = p->endTimestamp - SAMPLE_NS;
	return 0;
}
