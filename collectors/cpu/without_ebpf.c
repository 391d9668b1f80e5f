/* The CPU sampler's entry in a ringprofd built without the eBPF sampler:
 * status says so, and how to get it. */
#include <errno.h>

#include "entry.h"

static int start(const struct rp_collector_env *env, void **out, struct rp_err *why)
{
	(void)env;
	(void)out;
	return rp_err_set(why, -ENOTSUP,
			  "this ringprofd was built without the eBPF sampler (bpftool, clang, libbpf "
			  "or kernel BTF were missing at build time): run scripts/install-deps.sh and rebuild");
}

const struct rp_collector rp_cpu_collector = {
	CPU_COLLECTOR_ENTRY,
	.start = start,
};
