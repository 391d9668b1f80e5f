/* LTTng-UST tracepoint provider for bench/append: the same payload as a
 * ringprof range begin (a name and a u64) and range end (a u64), so the
 * two tracers are compared on equal work. */
#undef TRACEPOINT_PROVIDER
#define TRACEPOINT_PROVIDER ringprof_bench

#undef TRACEPOINT_INCLUDE
#define TRACEPOINT_INCLUDE "./append_tp.h"

#if !defined(RINGPROF_BENCH_APPEND_TP_H) || defined(TRACEPOINT_HEADER_MULTI_READ)
#define RINGPROF_BENCH_APPEND_TP_H

#include <stdint.h>

#include <lttng/tracepoint.h>

TRACEPOINT_EVENT(ringprof_bench, range_begin,
	TP_ARGS(const char *, name, uint64_t, ts),
	TP_FIELDS(
		ctf_string(name, name)
		ctf_integer(uint64_t, ts, ts)
	)
)

TRACEPOINT_EVENT(ringprof_bench, range_end,
	TP_ARGS(uint64_t, ts),
	TP_FIELDS(
		ctf_integer(uint64_t, ts, ts)
	)
)

#endif

#include <lttng/tracepoint-event.h>
