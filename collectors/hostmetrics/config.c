/* The [host_metrics] section: its rows (daemon/config.h), in the configuration
 * library with the other sections. */
#include <stddef.h>

#include "config.h"

static const struct rp_config_key host_metrics_keys[] = {
	{"enabled", RP_CONFIG_BOOL, .def = "true", RP_CONFIG_DAEMON(host_metrics_enabled)},
	{"interval", RP_CONFIG_DURATION, .min = 10 * RP_CONFIG_MS, .max = 3600 * RP_CONFIG_SEC,
	 .def = "1s",
	 RP_CONFIG_DAEMON(host_metrics_interval_ns)},
};

const struct rp_config_section rp_host_metrics_config = {"host_metrics",
								RP_CONFIG_KEYS(host_metrics_keys)};
