/* Fuzz the Neuron system-trace parser (collectors/neuron/systrace.h): the
 * input is one buffer as nrt_sys_trace_fetch_events would hand it out.
 * Whatever the bytes: no crash, an error with a message or a count of
 * events, and every event handed on well-formed (a name, an end not
 * before its start, both in the host clock's range), with the epoch moved
 * to a host clock as the collector does, and by the most it can be. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "systrace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_event(void *ctx, const struct rp_event *ev)
{
	(*(size_t *)ctx)++;
	if (ev->kind != RP_EV_GPU_ACTIVITY || !ev->name || strlen(ev->name) > RP_NAME_MAX ||
	    ev->u.gpu.end < ev->ts || ev->u.gpu.end > INT64_MAX)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An epoch of 2025 to a host clock that started then; the extremes. */
	static const int64_t offsets[] = { -1764180000000000000, INT64_MIN, INT64_MAX };
	for (size_t i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
		size_t seen = 0, skipped = 0;
		struct rp_err err = { 0 };
		int rc = rp_neuron_trace_parse((const char *)data, size, offsets[i], check_event,
					       &seen, &skipped, &err);
		if (rc < 0 ? !err.msg[0] : (size_t)rc != seen)
			abort();
	}
	return 0;
}
