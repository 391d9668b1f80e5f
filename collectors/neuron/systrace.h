/* The Neuron runtime's system trace (nrt_sys_trace_fetch_events) as ring
 * events.  One fetch is a JSON array of events (or an object holding one
 * under "events"), each with the fields Neuron Profiler 2.0 names: name,
 * timestamp (epoch ns), duration (ns), group ("nrt-nc-003": the
 * NeuronCore), lnc_idx, instance_id, process_id, thread_id, tensor_name,
 * size.  Input comes from the runtime and is not trusted. */
#ifndef RINGPROF_NEURON_SYSTRACE_H
#define RINGPROF_NEURON_SYSTRACE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "event.h"

/* Hands each event of buf[0..len) to fn as an RP_EV_GPU_ACTIVITY: ts and
 * u.gpu.end in host ns (epoch ns + offset_ns), u.gpu.device the
 * NeuronCore, u.gpu.bytes the size, u.gpu.stream the lnc_idx,
 * u.gpu.correlation a numeric instance_id, pid/tid from
 * process_id/thread_id, name the event's name with " tensor=NAME" when it
 * has one; kind RP_GPU_MEMCPY for events that move a tensor's bytes,
 * RP_GPU_KERNEL otherwise.  Events without a name, timestamp or core,
 * and those whose start or end falls outside the host clock
 * ([0, INT64_MAX] ns), are skipped and counted in *skipped.  Returns the
 * events handed on, -EINVAL (err says why) for a buffer that is not
 * such JSON, or fn's error. */
int rp_neuron_trace_parse(const char *buf, size_t len, int64_t offset_ns, rp_event_fn fn,
			  void *ctx, size_t *skipped, struct rp_err *err);

#endif
