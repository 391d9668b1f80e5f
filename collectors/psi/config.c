/* The [psi] section: its rows (daemon/config.h), in the configuration
 * library with the other sections. */
#include <stddef.h>

#include "config.h"

static const struct rp_config_key psi_keys[] = {
	{"enabled", RP_CONFIG_BOOL, .def = "true", RP_CONFIG_DAEMON(psi_enabled)},
	{"interval", RP_CONFIG_DURATION, .min = 10 * RP_CONFIG_MS, .max = 3600 * RP_CONFIG_SEC,
	 .def = "1s",
	 RP_CONFIG_DAEMON(psi_interval_ns)},
};

const struct rp_config_section rp_psi_config = {"psi", RP_CONFIG_KEYS(psi_keys)};
