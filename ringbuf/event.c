#include "event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
		[RP_EV_DEVICE_INFO] = "device_info",
		[RP_EV_PY_CODE] = "py_code",
		[RP_EV_DEVICE_OP] = "device_op",
	};
	if (kind < sizeof(names) / sizeof(names[0]) && names[kind])
		return names[kind];
	return "unknown";
}

/* Device names with an index, and what they are. */
static const struct {
	const char *prefix;
	enum rp_device_kind kind;
} indexed_devices[] = {
	{ "gpu", RP_DEVICE_GPU },
	{ "tpu", RP_DEVICE_TPU },
	{ "nc", RP_DEVICE_NEURON_CORE },
};

enum rp_device_kind rp_device_identify(const char *name, struct rp_device_identity *id)
{
	*id = (struct rp_device_identity){ .kind = RP_DEVICE_OTHER };
	if (strcmp(name, "host") == 0)
		id->kind = RP_DEVICE_HOST;
	for (size_t i = 0; i < sizeof(indexed_devices) / sizeof(indexed_devices[0]); i++) {
		size_t n = strlen(indexed_devices[i].prefix);
		const char *num = name + n;
		size_t digits = strspn(num, "0123456789");
		if (strncmp(name, indexed_devices[i].prefix, n) == 0 && digits >= 1 && digits <= 9 &&
		    !num[digits] && (num[0] != '0' || digits == 1)) {
			id->kind = indexed_devices[i].kind;
			id->index = (uint32_t)strtoul(num, NULL, 10);
		}
	}
	return id->kind;
}

const char *rp_device_kind_name(unsigned kind)
{
	static const char *const names[] = {
		[RP_DEVICE_HOST] = "host",
		[RP_DEVICE_GPU] = "gpu",
		[RP_DEVICE_TPU] = "tpu",
		[RP_DEVICE_NEURON_CORE] = "neuron_core",
		[RP_DEVICE_OTHER] = "other",
	};
	if (kind < sizeof(names) / sizeof(names[0]) && names[kind])
		return names[kind];
	return "other";
}

bool rp_device_identity_note(struct rp_device_identity *id, const struct rp_event *ev)
{
	if (ev->kind != RP_EV_DEVICE_INFO)
		return false;
	bool changed = false;
	if (!id->kind) {
		uint8_t k = ev->u.device.kind;
		id->kind = k >= RP_DEVICE_HOST && k <= RP_DEVICE_OTHER ? k : RP_DEVICE_OTHER;
		id->index = ev->u.device.index;
		changed = true;
	}
	if (!id->uid[0] && ev->name && ev->name[0]) {
		snprintf(id->uid, sizeof(id->uid), "%s", ev->name);
		changed = true;
	}
	return changed;
}
