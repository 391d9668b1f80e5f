/* The configuration sections of the collectors, each declared in its
 * folder (collectors/NAME/config.c) and linked into the configuration
 * library, in the order --print-config and the docs show them.  A
 * collector with keys adds its section here. */
#ifndef RINGPROF_COLLECTOR_SECTIONS_H
#define RINGPROF_COLLECTOR_SECTIONS_H

#define RP_COLLECTOR_SECTIONS(X)                                  \
	X(rp_sampler_config)       /* cpu/config.c: [sampler] */       \
	X(rp_host_metrics_config)  /* hostmetrics/config.c */          \
	X(rp_psi_config)           /* psi/config.c */                  \
	X(rp_gpu_pm_config)        /* pmsample/config.c: [gpu_pm] */   \
	X(rp_xla_config)           /* xla/config.c */

#endif
