/* ringprofd configuration: embedded defaults, overridden by an INI file
 * (parsed with inih) and then by command-line flags.  Parsing is strict:
 * an unknown section or key, or a bad value, is an error naming the file
 * and line. See docs/configuration.md for every key. */
#ifndef RINGPROF_CONFIG_H
#define RINGPROF_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

#define RP_CONFIG_MAX_RINGS 32

struct rp_ring_config {
	char device[64];      /* "host", "gpu0", ...; "" = the default for all */
	uint64_t budget_bytes;
	uint32_t slot_size;
};

struct rp_config {
	/* [daemon] */
	char socket[108];        /* control socket; producers use socket.producers */
	char state_dir[PATH_MAX];/* ring files */
	char logdir[PATH_MAX];   /* sessions: <logdir>/<run>/plugins/profile/<id> */
	uint64_t poll_interval_ns;  /* how often producer rings are drained */
	uint64_t seal_interval_ns;  /* a chunk is sealed at the latest this old */
	/* [api] */
	char tcp_listen[64];     /* "host:port"; "" = no TCP */
	char token_file[PATH_MAX];  /* bearer token for TCP; required with tcp_listen */
	/* [rings] defaults; [ring.NAME] per device */
	struct rp_ring_config ring_default;
	struct rp_ring_config rings[RP_CONFIG_MAX_RINGS];
	unsigned nrings;
	/* [producers] */
	uint32_t producer_ring_size; /* bytes of each per-thread ring, power of 2 */
	/* [sampler]: the eBPF CPU sampler */
	enum rp_sampler_mode {
		RP_SAMPLER_AUTO = 0, /* start it when possible, else run without it */
		RP_SAMPLER_ON,       /* failing to start it is fatal */
		RP_SAMPLER_OFF,
	} sampler_mode;
	unsigned sampler_hz;         /* per CPU, 1..10000 */
	unsigned sampler_depth;      /* frames per stack, 1..127 */
	char sampler_cgroup[PATH_MAX]; /* "" = every task */
	/* [sessions] */
	char default_run[64];
	uint64_t default_last_ns;    /* snapshot window when none is given */
	uint64_t max_duration_ns;    /* longest window / capture accepted */
};

/* Fill in the embedded defaults.  Paths depend on whether we run as root
 * (/run/ringprof, /var/lib/ringprof) or not ($XDG_RUNTIME_DIR, ~/.local). */
void rp_config_defaults(struct rp_config *c);
/* Apply an INI file on top of *c.  Errors: "FILE:LINE: unknown key 'x' in
 * [daemon]; known keys: ..." and the like, -EINVAL; -ENOENT etc. for an
 * unreadable file. */
int rp_config_load(struct rp_config *c, const char *path, struct rp_err *err);
/* Budget and slot size for a device ring (per-device section or default). */
void rp_config_ring(const struct rp_config *c, const char *device,
		    uint64_t *budget_bytes, uint32_t *slot_size);
/* Check cross-field rules (tcp_listen needs token_file, sizes, ...). */
int rp_config_check(const struct rp_config *c, struct rp_err *err);
/* Print the effective configuration in the INI syntax it reads. */
void rp_config_print(const struct rp_config *c, FILE *out);

#endif
