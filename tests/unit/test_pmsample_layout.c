/* collectors/pmsample/cupti_pm.h declares the CUPTI structs it passes
 * itself; here each is checked, field by field, against CUDA's own
 * headers (built only where they are installed).  cupti_profiler_host.h
 * includes <string>: tests/unit/cupti_shim has an empty one, so it
 * compiles as C. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#include "cupti_pm.h"

#define SAME(mine, theirs, field)                                                  \
	_Static_assert(offsetof(struct mine, field) == offsetof(theirs, field) &&   \
			       sizeof(((struct mine *)0)->field) ==                 \
				       sizeof(((theirs *)0)->field),                \
		       #mine "." #field)
#define SIZE(mine, theirs) _Static_assert(sizeof(struct mine) == sizeof(theirs), #mine)

SIZE(rp_cupti_host_init, CUpti_Profiler_Host_Initialize_Params);
SAME(rp_cupti_host_init, CUpti_Profiler_Host_Initialize_Params, profilerType);
SAME(rp_cupti_host_init, CUpti_Profiler_Host_Initialize_Params, pCounterAvailabilityImage);
SAME(rp_cupti_host_init, CUpti_Profiler_Host_Initialize_Params, pHostObject);
SIZE(rp_cupti_host_object, CUpti_Profiler_Host_Deinitialize_Params);
SIZE(rp_cupti_supported_chips, CUpti_Profiler_Host_GetSupportedChips_Params);
SAME(rp_cupti_supported_chips, CUpti_Profiler_Host_GetSupportedChips_Params, ppChipNames);
SIZE(rp_cupti_metric_properties, CUpti_Profiler_Host_GetMetricProperties_Params);
SAME(rp_cupti_metric_properties, CUpti_Profiler_Host_GetMetricProperties_Params, metricType);
SIZE(rp_cupti_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params);
SAME(rp_cupti_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, rangeIndex);
SAME(rp_cupti_evaluate, CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues);
SIZE(rp_cupti_add_metrics, CUpti_Profiler_Host_ConfigAddMetrics_Params);
SAME(rp_cupti_add_metrics, CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics);
SIZE(rp_cupti_config_image_size, CUpti_Profiler_Host_GetConfigImageSize_Params);
SAME(rp_cupti_config_image_size, CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize);
SIZE(rp_cupti_config_image, CUpti_Profiler_Host_GetConfigImage_Params);
SAME(rp_cupti_config_image, CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage);
SIZE(rp_cupti_num_passes, CUpti_Profiler_Host_GetNumOfPasses_Params);
SAME(rp_cupti_num_passes, CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses);
SIZE(rp_cupti_plain, CUpti_Profiler_Initialize_Params);
SIZE(rp_cupti_plain, CUpti_Profiler_DeInitialize_Params);
SIZE(rp_cupti_chip_name, CUpti_Device_GetChipName_Params);
SAME(rp_cupti_chip_name, CUpti_Device_GetChipName_Params, pChipName);
SIZE(rp_pm_set_config, CUpti_PmSampling_SetConfig_Params);
SAME(rp_pm_set_config, CUpti_PmSampling_SetConfig_Params, hardwareBufferSize);
SAME(rp_pm_set_config, CUpti_PmSampling_SetConfig_Params, samplingInterval);
SAME(rp_pm_set_config, CUpti_PmSampling_SetConfig_Params, triggerMode);
SAME(rp_pm_set_config, CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode);
SIZE(rp_pm_enable, CUpti_PmSampling_Enable_Params);
SAME(rp_pm_enable, CUpti_PmSampling_Enable_Params, deviceIndex);
SAME(rp_pm_enable, CUpti_PmSampling_Enable_Params, pPmSamplingObject);
SIZE(rp_pm_object, CUpti_PmSampling_Disable_Params);
SIZE(rp_pm_object, CUpti_PmSampling_Start_Params);
SIZE(rp_pm_object, CUpti_PmSampling_Stop_Params);
SIZE(rp_pm_decode, CUpti_PmSampling_DecodeData_Params);
SAME(rp_pm_decode, CUpti_PmSampling_DecodeData_Params, counterDataImageSize);
SAME(rp_pm_decode, CUpti_PmSampling_DecodeData_Params, decodeStopReason);
SAME(rp_pm_decode, CUpti_PmSampling_DecodeData_Params, overflow);
SIZE(rp_pm_availability, CUpti_PmSampling_GetCounterAvailability_Params);
SAME(rp_pm_availability, CUpti_PmSampling_GetCounterAvailability_Params, pCounterAvailabilityImage);
SIZE(rp_pm_counter_data_size, CUpti_PmSampling_GetCounterDataSize_Params);
SAME(rp_pm_counter_data_size, CUpti_PmSampling_GetCounterDataSize_Params, maxSamples);
SAME(rp_pm_counter_data_size, CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize);
SIZE(rp_pm_counter_data_init, CUpti_PmSampling_CounterDataImage_Initialize_Params);
SAME(rp_pm_counter_data_init, CUpti_PmSampling_CounterDataImage_Initialize_Params, pCounterData);
SIZE(rp_pm_counter_data_info, CUpti_PmSampling_GetCounterDataInfo_Params);
SAME(rp_pm_counter_data_info, CUpti_PmSampling_GetCounterDataInfo_Params, numCompletedSamples);
SIZE(rp_pm_sample_info, CUpti_PmSampling_CounterData_GetSampleInfo_Params);
SAME(rp_pm_sample_info, CUpti_PmSampling_CounterData_GetSampleInfo_Params, sampleIndex);
SAME(rp_pm_sample_info, CUpti_PmSampling_CounterData_GetSampleInfo_Params, endTimestamp);

/* The enum values cupti_pm.h copies. */
static void test_values(void **state)
{
	(void)state;
	assert_int_equal(RP_CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
	assert_int_equal(RP_CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED, CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED);
	assert_int_equal(RP_CUPTI_ERROR_HARDWARE_BUSY, CUPTI_ERROR_HARDWARE_BUSY);
	assert_int_equal(RP_CUPTI_ERROR_INVALID_OPERATION, CUPTI_ERROR_INVALID_OPERATION);
	assert_int_equal(RP_CUPTI_ERROR_NOT_SUPPORTED, CUPTI_ERROR_NOT_SUPPORTED);
	assert_int_equal(RP_CUPTI_ERROR_OUT_OF_MEMORY, CUPTI_ERROR_OUT_OF_MEMORY);
	assert_int_equal(RP_CUPTI_PROFILER_TYPE_PM_SAMPLING, CUPTI_PROFILER_TYPE_PM_SAMPLING);
	assert_int_equal(RP_PM_TRIGGER_GPU_TIME_INTERVAL, CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL);
	assert_int_equal(RP_PM_APPEND_KEEP_LATEST, CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_LATEST);
	assert_int_equal(RP_CU_ATTR_PCI_BUS_ID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
	assert_int_equal(RP_CU_ATTR_PCI_DEVICE_ID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
	assert_int_equal(RP_CU_ATTR_PCI_DOMAIN_ID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
	assert_int_equal(RP_CU_ATTR_CC_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
	assert_int_equal(RP_CU_ATTR_CC_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(test_values) };
	return cmocka_run_group_tests(tests, NULL, NULL);
}
