/* ringprofd configuration: embedded defaults, overridden by an INI file
 * (parsed with inih) and then by command-line flags.  Parsing is strict:
 * an unknown section or key, or a bad value, is an error naming the file
 * and line. See docs/configuration.md for every key.
 *
 * Every key is a row of a table (struct rp_config_key) and every section
 * a table of rows (struct rp_config_section): the rows drive loading,
 * the defaults, the error messages and --print-config, and
 * tests/unit/test_config_docs.c checks docs/configuration.md against
 * them. */
#ifndef RINGPROF_CONFIG_H
#define RINGPROF_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"
#include "names.h"

#define RP_CONFIG_MAX_RINGS 32
/* The largest producer ring: [producers] ring_size and a hello's ring size. */
#define RP_PRODUCER_RING_MAX (256u << 20)
/* Device rings the daemon keeps at most ([producers] max_devices). */
#define RP_MAX_DEVICES 64
#define RP_CONFIG_MAX_RULES 32
/* Samples per second per CPU: [sampler] frequency, a session's cpu_sample_hz. */
#define RP_CPU_SAMPLE_HZ_MAX 10000
/* [sampler] pids: how many, each 1..RP_PID_MAX (the kernel's PID_MAX_LIMIT). */
#define RP_CONFIG_MAX_PIDS 32
#define RP_PID_MAX 4194304

/* [api] limits against slow and flooding clients (defaults). */
#define RP_API_MAX_CONNECTIONS 256
#define RP_API_MAX_CONNECTIONS_PER_PEER 32
#define RP_API_HEADER_TIMEOUT_NS (10 * 1000000000ull)
#define RP_API_MAX_REQUESTS 128
#define RP_API_MAX_SNAPSHOTS 4

/* Snapshots a trigger (an alert, a rule) takes: the window around the
 * trigger's moment, and how often. */
struct rp_trigger_config {
	uint64_t before_ns, after_ns;  /* window [anchor - before, anchor + after] */
	uint64_t cooldown_ns;          /* the same alert / rule: one snapshot in this */
	unsigned max_per_hour;         /* snapshots in any hour, the rest skipped */
};

enum rp_rule_type {
	RP_RULE_UNSET = 0,
	RP_RULE_SLOW_RANGE,     /* a range slower than factor x its rolling median */
	RP_RULE_COUNTER_ABOVE,  /* a counter above threshold for for_ns */
};

/* [rule.NAME]: a condition on the daemon's own data that takes a snapshot. */
struct rp_rule_config {
	char name[RP_NAME_LEN];
	enum rp_rule_type type;
	char range[200];         /* slow_range: the annotation range's name */
	double factor;           /* slow_range: how many times the median */
	unsigned window;         /* slow_range: completed ranges in the median */
	char counter[200];       /* counter_above: the counter's name */
	double threshold;        /* counter_above */
	bool has_threshold;
	uint64_t for_ns;         /* counter_above: how long above */
	struct rp_trigger_config trigger;
};

struct rp_ring_config {
	char device[RP_NAME_LEN]; /* "host", "gpu0", ...; "" = the default for all */
	uint64_t budget_bytes;
	uint32_t slot_size;   /* largest chunk */
	uint64_t max_age_ns;  /* UINT64_MAX: "none"; 0 ([ring.X] only): inherit [rings] */
};

struct rp_config {
	/* [daemon] */
	char socket[108];        /* control socket; producers use socket.producers */
	char state_dir[PATH_MAX];/* ring files */
	char logdir[PATH_MAX];   /* sessions: <logdir>/<run>/plugins/profile/<id> */
	uint64_t poll_interval_ns;  /* how often producer rings are drained */
	uint64_t seal_interval_ns;  /* a chunk is sealed at the latest this old */
	char host_name[64];      /* in session file names; "" = gethostname() */
	/* [api] */
	char tcp_listen[64];     /* "host:port"; "" = no TCP */
	char token_file[PATH_MAX];  /* bearer token for TCP; required with tcp_listen */
	unsigned api_max_connections;   /* per listener; more wait in the accept queue */
	unsigned api_max_connections_per_peer; /* TCP, per client address */
	uint64_t api_header_timeout_ns; /* connect (or last answer) to complete headers */
	unsigned api_max_requests;      /* in progress at once; more get 503 */
	unsigned api_max_snapshots;     /* snapshot-class requests at once; more get 503 */
	/* [profiler_service]: tensorflow.ProfilerService for XProf (profsvc.h) */
	char profsvc_listen[64];            /* "host:port"; "" = off */
	bool profsvc_allow_unauthenticated; /* else a non-loopback listen is refused */
	uint64_t profsvc_snapshot_ns;       /* GetSnapshot: the last this long */
	uint64_t profsvc_request_timeout_ns;/* connect (or last answer) to a complete request */
	/* [rings] defaults; [ring.NAME] per device */
	struct rp_ring_config ring_default;
	struct rp_ring_config rings[RP_CONFIG_MAX_RINGS];
	unsigned nrings;
	/* [producers] */
	uint32_t producer_ring_size; /* bytes of each per-thread ring, power of 2 */
	unsigned producer_max_rings;             /* attached at once, all producers */
	unsigned producer_max_rings_per_process; /* attached at once, one process */
	uint64_t producer_max_shm;               /* bytes of all producer rings */
	unsigned producer_max_devices;           /* device rings, host included */
	unsigned producer_device_index_max;      /* N of gpuN, tpuN, ncN */
	/* [sampler]: the eBPF CPU sampler */
	enum rp_sampler_mode {
		RP_SAMPLER_AUTO = 0, /* start it when possible, else run without it */
		RP_SAMPLER_ON,       /* failing to start it is fatal */
		RP_SAMPLER_OFF,
	} sampler_mode;
	unsigned sampler_hz;         /* per CPU, 1..RP_CPU_SAMPLE_HZ_MAX */
	unsigned sampler_depth;      /* frames per stack, 1..127 */
	/* When the user stack is copied for a CFI unwind: 0 when the
	 * frame-pointer walk is cut short, 1 never, 2 always (ebpf/
	 * sampler_record.h's enum rp_sampler_stack_copy, in this order). */
	unsigned sampler_stack_copy;
	char sampler_cgroup[PATH_MAX]; /* "" = every task */
	uint32_t sampler_pids[RP_CONFIG_MAX_PIDS]; /* only these processes; none: every one */
	unsigned sampler_npids;
	/* [host_metrics]: CPU utilisation and memory of the host, as counters */
	bool host_metrics_enabled;
	uint64_t host_metrics_interval_ns; /* 10 ms..1 h */
	/* [psi]: pressure stall information of the host, as counters */
	bool psi_enabled;
	uint64_t psi_interval_ns;          /* 10 ms..1 h */
	/* [xla]: pull from XLA runtimes' profiler servers (collectors/xla) */
	char xla_endpoints[1024];          /* "host:port,..."; "" = none configured */
	uint64_t xla_window_ns;            /* per Profile / GetSnapshot, 100 ms..60 s */
	unsigned xla_host_tracer_level;    /* 0..3 */
	unsigned xla_device_tracer_level;  /* 0..1 */
	unsigned xla_python_tracer_level;  /* 0..1 */
	unsigned xla_overhead_budget_pct;  /* 0..100; 0 = record all the time */
	uint64_t xla_event_cost_ns;        /* the workload's cost per event, 1 ns..1 ms */
	/* [gpu_pm]: CUPTI PM sampling of each GPU, as counters into gpuN */
	bool gpu_pm_enabled;
	uint64_t gpu_pm_interval_ns;       /* 100 us..1 s */
	char gpu_pm_metrics[192];          /* "a, b": empty = the chip's default set */
	uint64_t gpu_pm_hw_buffer;         /* bytes of each GPU's hardware buffer */
/* Workloads' profiler servers registered through the API
 * (POST /v1/xla/endpoints): <state_dir>/RP_XLA_REGISTRY_DIR/PID holds the
 * address; the XLA collector pulls from each until PID exits. */
#define RP_XLA_REGISTRY_DIR "xla-endpoints"
	/* [sessions] */
	char default_run[RP_NAME_LEN];
	uint64_t default_last_ns;    /* snapshot window when none is given */
	uint64_t max_duration_ns;    /* longest window / capture accepted */
	uint64_t sessions_max_bytes; /* retention quota of the logdir; 0 = none */
	unsigned sessions_max_count; /* retention quota in sessions; 0 = none */
	unsigned session_exports;    /* written when a session closes: a mask of
					1 << enum rp_export_format */
	unsigned perfetto_grouping;  /* of the Perfetto export: an enum
					rp_perfetto_grouping */
	unsigned sessions_max_open;  /* sessions open at once (start/stop, captures) */
	unsigned export_queue;       /* sessions queued for export in memory; more
					wait on disk (their manifests) */
	/* [alertmanager]: POST /v1/alertmanager */
	struct rp_trigger_config alerts;
	char alert_run_label[64];    /* the alert label that names the run */
	/* [rule.NAME] */
	struct rp_rule_config rules[RP_CONFIG_MAX_RULES];
	unsigned nrules;
};

/* ---- the key table ---- */

/* How a key's value is read and printed, and the C type of its field. */
enum rp_config_kind {
	RP_CONFIG_BOOL,     /* true, false: bool */
	RP_CONFIG_UINT,     /* a whole number in min..max: unsigned */
	RP_CONFIG_SIZE,     /* a size in min..max bytes: uint32_t or uint64_t */
	RP_CONFIG_DURATION, /* a duration in min..max ns: uint64_t */
	RP_CONFIG_STRING,   /* text (a path): char[] */
	RP_CONFIG_NAME,     /* a name (rp_check_name): char[] */
	RP_CONFIG_ENUM,     /* one of names[0..max): unsigned or an enum */
	RP_CONFIG_NUMBER,   /* a finite number: double */
	RP_CONFIG_CUSTOM,   /* parse and print say */
};

enum {
	RP_CONFIG_EMPTY_OK = 1 << 0, /* STRING, NAME: may be empty */
	RP_CONFIG_NONE = 1 << 1,     /* DURATION: "none" too, stored as UINT64_MAX */
	RP_CONFIG_IF_SET = 1 << 2,   /* printed only when not zero (unset) */
};

/* One key.  Fields not used by its kind stay zero. */
struct rp_config_key {
	const char *name;
	enum rp_config_kind kind;
	unsigned flags;
	size_t offset, size;         /* the field, from its section's struct: RP_CONFIG_FIELD */
	uint64_t min, max;           /* UINT, SIZE, DURATION bounds; ENUM: number of names */
	const char *def;             /* the default as --print-config prints it; NULL: zero,
					or set apart (the default paths) */
	const char *text;            /* STRING: the fix for an empty value ("give a path");
					NAME: what it names ("host name") */
	const char *const *names;    /* ENUM: by value; NULL: not a value one may give */
	size_t present;              /* NUMBER: offset of a bool set when given, printed
					only then; 0: none */
	/* More to check once the kind has read the value: *value is an
	 * unsigned (UINT), uint64_t (SIZE, DURATION), double (NUMBER), or the
	 * text (STRING, NAME). */
	int (*check)(const char *text, const void *value, struct rp_err *err);
	int (*parse)(void *field, const char *text, struct rp_err *err); /* CUSTOM */
	void (*print)(const void *field, char *out, size_t len);          /* CUSTOM */
	bool (*shown)(const void *base); /* printed only when true; NULL: always */
};

#define RP_CONFIG_FIELD(type, member) \
	.offset = offsetof(type, member), .size = sizeof(((type *)0)->member)
/* For rows of struct rp_config, also in sections declared elsewhere (a
 * collector's: collectors/NAME/config.c, listed in collector_sections.h). */
#define RP_CONFIG_DAEMON(member) RP_CONFIG_FIELD(struct rp_config, member)
#define RP_CONFIG_KEYS(rows) .keys = rows, .nkeys = sizeof(rows) / sizeof(rows[0])
#define RP_CONFIG_MS 1000000ull
#define RP_CONFIG_SEC (1000 * RP_CONFIG_MS)
#define RP_CONFIG_MIB (1024ull * 1024)

/* [name.NAME] sections (name "ring."): one entry per NAME in an array of
 * entries that each start with their NAME, a char[RP_CONFIG_NAME_SIZE]. */
#define RP_CONFIG_NAME_SIZE RP_NAME_LEN
struct rp_config_list {
	size_t count;                /* offset of the unsigned count in struct rp_config */
	size_t entry_size;
	unsigned max;
	const char *what;            /* NAME in messages: "device name" */
	const char *too_many;        /* "too many rules" */
	const char *limit_note;      /* after "at most N" */
	bool overrides;              /* keys left out stay zero (inherit) and do not print;
					else an entry starts from the defaults */
};

struct rp_config_section {
	const char *name;            /* "daemon"; "ring.": a list of [ring.NAME] */
	const char *instance;        /* a list: NAME in messages, "DEVICE" */
	const struct rp_config_key *keys;
	size_t nkeys;
	size_t base;                 /* offset in struct rp_config of the struct (a list: the
					array) that the keys' offsets count from */
	const struct rp_config_list *list;
};

/* Every section, in the order --print-config prints them. */
extern const struct rp_config_section *const rp_config_sections[];
extern const size_t rp_config_nsections;

/* Fill in the embedded defaults.  Paths depend on whether we run as root
 * (/run/ringprof, /var/lib/ringprof) or not ($XDG_RUNTIME_DIR, ~/.local). */
void rp_config_defaults(struct rp_config *c);
/* Apply an INI file on top of *c.  Errors: "FILE:LINE: unknown key 'x' in
 * [daemon]; known keys: ..." and the like, -EINVAL; -ENOENT etc. for an
 * unreadable file. */
RP_MUST_CHECK int rp_config_load(struct rp_config *c, const char *path, struct rp_err *err);
/* Budget and slot size for a device ring (per-device section or default). */
void rp_config_ring(const struct rp_config *c, const char *device,
		    uint64_t *budget_bytes, uint32_t *slot_size);
/* max_age for a device ring (per-device section or default); 0: none. */
uint64_t rp_config_ring_max_age(const struct rp_config *c, const char *device);
/* Check cross-field rules (tcp_listen needs token_file, sizes, ...). */
RP_MUST_CHECK int rp_config_check(const struct rp_config *c, struct rp_err *err);
/* Print the effective configuration in the INI syntax it reads. */
void rp_config_print(const struct rp_config *c, FILE *out);

#endif
