/* The collectors ringprofd runs, in the order status lists them: one line
 * each (the ops table its folder defines). */
#include "collector.h"

#define REGISTRY(X)                                                          \
	X(rp_cpu_collector)          /* cpu/: the eBPF CPU sampler */        \
	X(rp_hostmetrics_collector)  /* hostmetrics/: CPU and memory use */ \
	X(rp_psi_collector)          /* psi/: pressure stall information */ \
	X(rp_gpu_pm_collector)       /* pmsample/: GPU PM sampling (CUPTI) */ \
	X(rp_xla_collector)          /* xla/: XLA runtimes' profiler servers */

#define DECLARE(ops) extern const struct rp_collector ops;
REGISTRY(DECLARE)
#define ENTRY(ops) &ops,
const struct rp_collector *const rp_collectors[] = { REGISTRY(ENTRY) };
const unsigned rp_ncollectors = sizeof(rp_collectors) / sizeof(rp_collectors[0]);
