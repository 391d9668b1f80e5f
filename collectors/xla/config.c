/* The [xla] section: its rows (daemon/config.h), in the configuration
 * library with the other sections. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "parse.h"

/* [xla] endpoints: a comma-separated list of HOST:PORT ([V6]:PORT). */
static int check_xla_endpoints(const char *v, const void *value, struct rp_err *err)
{
	(void)value;
	for (const char *p = v; *p;) {
		size_t n = strcspn(p, ",");
		const char *colon = memrchr(p, ':', n);
		unsigned port;
		char num[8];
		if (!colon || colon == p || (size_t)(p + n - colon - 1) >= sizeof(num))
			return rp_err_set(err, -EINVAL, "'%.*s' is not HOST:PORT", (int)n, p);
		memcpy(num, colon + 1, (size_t)(p + n - colon - 1));
		num[p + n - colon - 1] = 0;
		if (rp_parse_uint(num, 1, 65535, &port, err) < 0)
			return rp_err_set(err, -EINVAL, "'%.*s': the port is not 1..65535", (int)n, p);
		p += n + (p[n] == ',');
	}
	return 0;
}

static const struct rp_config_key xla_keys[] = {
	{"endpoints", RP_CONFIG_STRING, RP_CONFIG_EMPTY_OK, .check = check_xla_endpoints,
	 RP_CONFIG_DAEMON(xla_endpoints)},
	{"window", RP_CONFIG_DURATION, .min = 100 * RP_CONFIG_MS, .max = 60 * RP_CONFIG_SEC,
	 .def = "1s",
	 RP_CONFIG_DAEMON(xla_window_ns)},
	{"host_tracer_level", RP_CONFIG_UINT, .min = 0, .max = 3, .def = "1",
	 RP_CONFIG_DAEMON(xla_host_tracer_level)},
	{"device_tracer_level", RP_CONFIG_UINT, .min = 0, .max = 1, .def = "1",
	 RP_CONFIG_DAEMON(xla_device_tracer_level)},
	{"python_tracer_level", RP_CONFIG_UINT, .min = 0, .max = 1, .def = "0",
	 RP_CONFIG_DAEMON(xla_python_tracer_level)},
	{"overhead_budget", RP_CONFIG_UINT, .min = 0, .max = 100, .def = "3",
	 RP_CONFIG_DAEMON(xla_overhead_budget_pct)},
	{"event_cost", RP_CONFIG_DURATION, .min = 1, .max = RP_CONFIG_MS, .def = "5us",
	 RP_CONFIG_DAEMON(xla_event_cost_ns)},
};

const struct rp_config_section rp_xla_config = {"xla", RP_CONFIG_KEYS(xla_keys)};
