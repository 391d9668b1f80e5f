/* Neuron system-trace JSON to ring events: see systrace.h. */
#include "systrace.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A non-negative integer field, also as a decimal string (epoch ns do not
 * fit a double, so a string is how some writers keep them exact). */
static bool field_u64(json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return true;
	}
	const char *s = json_string_value(v);
	if (!s || !*s)
		return false;
	char *end;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno || *end || *s == '-')
		return false;
	*out = n;
	return true;
}

/* The NeuronCore: "group" as "nrt-nc-003", else lnc_idx. */
static bool event_core(json_t *o, uint64_t *core)
{
	const char *g = json_string_value(json_object_get(o, "group"));
	const char *nc = g ? strstr(g, "nc-") : NULL;
	/* Digits only: strtoul would take a sign or blanks too. */
	if (nc && nc[3] >= '0' && nc[3] <= '9') {
		char *end;
		errno = 0;
		unsigned long n = strtoul(nc + 3, &end, 10);
		if (!errno && end != nc + 3 && !*end && n <= UINT32_MAX) {
			*core = n;
			return true;
		}
	}
	return field_u64(o, "lnc_idx", core) && *core <= UINT32_MAX;
}

/* Epoch ns moved by offset_ns into the host clock, whose range is
 * [0, INT64_MAX]; false for a time outside it. */
static bool to_host(uint64_t epoch, int64_t offset_ns, uint64_t *out)
{
	int64_t t;
	if (epoch > INT64_MAX || __builtin_add_overflow((int64_t)epoch, offset_ns, &t) || t < 0)
		return false;
	*out = (uint64_t)t;
	return true;
}

int rp_neuron_trace_parse(const char *buf, size_t len, int64_t offset_ns, rp_event_fn fn,
			  void *ctx, size_t *skipped, struct rp_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return rp_err_set(err, -EINVAL, "Neuron system trace is not JSON (%s at line %d): "
				  "a runtime this collector does not know; its events are skipped",
				  jerr.text, jerr.line);
	json_t *events = json_is_object(root) ? json_object_get(root, "events") : root;
	if (!json_is_array(events)) {
		json_decref(root);
		return rp_err_set(err, -EINVAL, "Neuron system trace is neither an array of events "
				  "nor an object with \"events\": a runtime this collector does not "
				  "know; its events are skipped");
	}
	int handed = 0, rc = 0;
	size_t i;
	json_t *o;
	json_array_foreach(events, i, o) {
		const char *name = json_string_value(json_object_get(o, "name"));
		uint64_t ts, dur = 0, core, v;
		if (!json_is_object(o) || !name || !field_u64(o, "timestamp", &ts) ||
		    !event_core(o, &core)) {
			(*skipped)++;
			continue;
		}
		(void)field_u64(o, "duration", &dur);
		struct rp_event ev = { .kind = RP_EV_GPU_ACTIVITY };
		if (dur > UINT64_MAX - ts || !to_host(ts, offset_ns, &ev.ts) ||
		    !to_host(ts + dur, offset_ns, &ev.u.gpu.end)) {
			(*skipped)++;
			continue;
		}
		char full[RP_NAME_MAX + 1];
		const char *tensor = json_string_value(json_object_get(o, "tensor_name"));
		if (tensor)
			(void)snprintf(full, sizeof(full), "%s tensor=%s", name, tensor);
		else
			(void)snprintf(full, sizeof(full), "%s", name);
		ev.name = full;
		ev.u.gpu.device = (uint32_t)core;
		ev.u.gpu.kind = tensor || field_u64(o, "size", &v) ? RP_GPU_MEMCPY : RP_GPU_KERNEL;
		if (field_u64(o, "size", &v))
			ev.u.gpu.bytes = v;
		if (field_u64(o, "lnc_idx", &v) && v <= UINT32_MAX)
			ev.u.gpu.stream = (uint32_t)v;
		if (field_u64(o, "instance_id", &v))
			ev.u.gpu.correlation = v;
		if (field_u64(o, "process_id", &v) && v <= UINT32_MAX)
			ev.pid = (uint32_t)v;
		if (field_u64(o, "thread_id", &v) && v <= UINT32_MAX)
			ev.tid = (uint32_t)v;
		rc = fn(ctx, &ev);
		if (rc < 0)
			break;
		handed++;
	}
	json_decref(root);
	return rc < 0 ? rc : handed;
}
