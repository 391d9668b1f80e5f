#include "event.h"

const char *rp_event_kind_name(unsigned kind)
{
	static const char *const names[] = {
		[RP_EV_CPU_SAMPLE] = "cpu_sample",
		[RP_EV_RANGE_BEGIN] = "range_begin",
		[RP_EV_RANGE_END] = "range_end",
		[RP_EV_INSTANT] = "instant",
		[RP_EV_COUNTER] = "counter",
		[RP_EV_GPU_ACTIVITY] = "gpu_activity",
		[RP_EV_API_CALL] = "api_call",
		[RP_EV_PROCESS_NAME] = "process_name",
		[RP_EV_THREAD_NAME] = "thread_name",
		[RP_EV_DROPS] = "drops",
		[RP_EV_MAPPING] = "mapping",
		[RP_EV_PROCESS_CMDLINE] = "process_cmdline",
		[RP_EV_DEVICE_OP] = "device_op",
	};
	if (kind < sizeof(names) / sizeof(names[0]) && names[kind])
		return names[kind];
	return "unknown";
}
