/* What the CPU sampler's registry entry says whether ringprofd was built
 * with the eBPF sampler (cpu.c) or without it (without_ebpf.c): one of
 * the two is built. */
#ifndef RINGPROF_CPU_ENTRY_H
#define RINGPROF_CPU_ENTRY_H

#include "collector.h"

static inline const char *cpu_off(const struct rp_config *cfg)
{
	return cfg->sampler_mode == RP_SAMPLER_OFF ? "[sampler] enabled = false" : NULL;
}

/* [sampler] enabled = true: a sampler that cannot start stops the daemon. */
static inline bool cpu_required(const struct rp_config *cfg)
{
	return cfg->sampler_mode == RP_SAMPLER_ON;
}

static const char *const cpu_values[] = { "frequency_hz", NULL };

#define CPU_COLLECTOR_ENTRY                                                  \
	.name = "cpu_sampler", .title = "CPU sampler", .device = "host",    \
	.section = "sampler", .values = cpu_values, .off = cpu_off,          \
	.required = cpu_required

#endif
