/* The [gpu_pm] section: its rows (daemon/config.h), in the configuration
 * library with the other sections. */
#include <stddef.h>

#include "config.h"

static const struct rp_config_key gpu_pm_keys[] = {
	{"enabled", RP_CONFIG_BOOL, .def = "true", RP_CONFIG_DAEMON(gpu_pm_enabled)},
	{"interval", RP_CONFIG_DURATION, .min = 100000, .max = RP_CONFIG_SEC, .def = "1ms",
	 RP_CONFIG_DAEMON(gpu_pm_interval_ns)},
	/* Empty: the validated single-pass set of the GPU's chip. */
	{"metrics", RP_CONFIG_STRING, RP_CONFIG_EMPTY_OK, RP_CONFIG_DAEMON(gpu_pm_metrics)},
	{"hw_buffer", RP_CONFIG_SIZE, .min = RP_CONFIG_MIB, .max = 4096 * RP_CONFIG_MIB,
	 .def = "64MiB",
	 RP_CONFIG_DAEMON(gpu_pm_hw_buffer)},
};

const struct rp_config_section rp_gpu_pm_config = {"gpu_pm", RP_CONFIG_KEYS(gpu_pm_keys)};
