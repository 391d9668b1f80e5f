#include "config.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "parse.h"
#include "paths.h"

#define KiB (1024ull)
#define MiB (1024 * KiB)
#define MS (1000000ull)
#define SEC (1000 * MS)

/* The producer socket is "<socket>.producers" and must fit in sun_path too. */
#define PRODUCER_SUFFIX ".producers"
#define SOCKET_MAX (sizeof(((struct rp_config *)0)->socket) - sizeof(PRODUCER_SUFFIX))
#define RING_HEADER_BYTES (4 * KiB)
#define NAME_MAX_LEN 63

void rp_config_defaults(struct rp_config *c)
{
	memset(c, 0, sizeof(*c)); /* also zeroes padding: configs compare with memcmp */
	if (!rp_default_socket_path(c->socket, sizeof(c->socket)))
		c->socket[0] = '\0'; /* did not fit; rp_config_check says so */
	if (!rp_default_state_dir(c->state_dir, sizeof(c->state_dir)))
		c->state_dir[0] = '\0';
	if (!rp_default_logdir(c->logdir, sizeof(c->logdir)))
		c->logdir[0] = '\0';
	c->poll_interval_ns = 10 * MS;
	c->seal_interval_ns = SEC;
	c->ring_default.budget_bytes = 64 * MiB;
	c->ring_default.slot_size = 128 * KiB;
	c->sampler_hz = 99; /* off the 100 Hz of periodic timers, like perf -F 99 */
	c->sampler_depth = 127;
	c->host_metrics_enabled = true;
	c->host_metrics_interval_ns = SEC;
	c->profsvc_snapshot_ns = 30 * SEC;
	c->profsvc_request_timeout_ns = 10 * SEC;
	c->psi_enabled = true;
	c->psi_interval_ns = SEC;
	c->producer_ring_size = MiB;
	c->producer_max_rings = 4096;
	c->producer_max_rings_per_process = 1024;
	c->producer_max_shm = 4096 * MiB;
	c->producer_max_devices = 16;
	c->producer_device_index_max = 31;
	snprintf(c->default_run, sizeof(c->default_run), "default");
	c->default_last_ns = 30 * SEC;
	c->max_duration_ns = 3600 * SEC;
	c->api_max_connections = RP_API_MAX_CONNECTIONS;
	c->api_max_connections_per_peer = RP_API_MAX_CONNECTIONS_PER_PEER;
	c->api_header_timeout_ns = RP_API_HEADER_TIMEOUT_NS;
	c->api_max_requests = RP_API_MAX_REQUESTS;
	c->api_max_snapshots = RP_API_MAX_SNAPSHOTS;
	c->sessions_max_bytes = 10 * 1024 * MiB;
	c->sessions_max_count = 1000;
	c->session_exports = RP_EXPORT_DEFAULT;
	c->sessions_max_open = 16;
	c->export_queue = 64;
	c->alerts = (struct rp_trigger_config){ .before_ns = 60 * SEC, .after_ns = 10 * SEC,
						.cooldown_ns = 600 * SEC, .max_per_hour = 20 };
	snprintf(c->alert_run_label, sizeof(c->alert_run_label), "job");
}

/* A [rule.NAME] section starts from these. */
static void rule_defaults(struct rp_rule_config *r, const char *name)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->factor = 3;
	r->window = 50;
	r->for_ns = 10 * SEC;
	r->trigger = (struct rp_trigger_config){ .before_ns = 60 * SEC, .after_ns = 5 * SEC,
						 .cooldown_ns = 600 * SEC, .max_per_hour = 20 };
}

/* ---- value parsers: each fills err with the problem in the value ---- */

/* Zero-fills the rest of dst so equal configs are equal bytes. */
static int set_string(char *dst, size_t size, const char *value, bool may_be_empty,
		      struct rp_err *err)
{
	size_t n = strlen(value);
	if (!n && !may_be_empty)
		return rp_err_set(err, -EINVAL, "empty value; give a path");
	if (n >= size)
		return rp_err_set(err, -ENAMETOOLONG, "'%.40s...' is %zu bytes; the limit is %zu",
				  value, n, size - 1);
	memset(dst, 0, size);
	memcpy(dst, value, n);
	return 0;
}

static int duration_in(const char *value, uint64_t min, uint64_t max, uint64_t *out,
		       struct rp_err *err)
{
	uint64_t v = 0;
	int rc = rp_parse_duration(value, &v, err);
	if (rc)
		return rc;
	if (v < min || v > max) {
		char limit[32];
		rp_format_duration(v < min ? min : max, limit, sizeof(limit));
		return rp_err_set(err, -ERANGE, "'%s' is %s than the %s, %s", value,
				  v < min ? "less" : "more", v < min ? "minimum" : "maximum", limit);
	}
	*out = v;
	return 0;
}

static void format_size(uint64_t bytes, char *out, size_t len)
{
	static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
	for (unsigned i = 0; i < 4; i++) {
		unsigned shift = 10 * (4 - i);
		if (bytes && bytes % (1ull << shift) == 0) {
			snprintf(out, len, "%llu%s", (unsigned long long)(bytes >> shift), units[i]);
			return;
		}
	}
	snprintf(out, len, "%llu", (unsigned long long)bytes);
}

static int size_in(const char *value, uint64_t min, uint64_t max, uint64_t *out,
		   struct rp_err *err)
{
	uint64_t v = 0;
	int rc = rp_parse_size(value, &v, err);
	if (rc)
		return rc;
	if (v < min || v > max) {
		char limit[32];
		format_size(v < min ? min : max, limit, sizeof(limit));
		return rp_err_set(err, -ERANGE, "'%s' is %s than the %s, %s", value,
				  v < min ? "less" : "more", v < min ? "minimum" : "maximum", limit);
	}
	*out = v;
	return 0;
}

/* ---- setters, one per key ---- */

typedef int (*setter)(struct rp_config *c, struct rp_ring_config *ring, const char *value,
		      struct rp_err *err);

static int set_socket(struct rp_config *c, struct rp_ring_config *r, const char *v,
		      struct rp_err *err)
{
	(void)r;
	if (strlen(v) > SOCKET_MAX)
		return rp_err_set(err, -ENAMETOOLONG,
				  "'%.40s...' is %zu bytes; Unix socket paths are limited to %zu here "
				  "(the producer socket adds '" PRODUCER_SUFFIX "'); choose a shorter path",
				  v, strlen(v), SOCKET_MAX);
	return set_string(c->socket, sizeof(c->socket), v, false, err);
}

static int set_state_dir(struct rp_config *c, struct rp_ring_config *r, const char *v,
			 struct rp_err *err)
{
	(void)r;
	return set_string(c->state_dir, sizeof(c->state_dir), v, false, err);
}

static int set_logdir(struct rp_config *c, struct rp_ring_config *r, const char *v,
		      struct rp_err *err)
{
	(void)r;
	return set_string(c->logdir, sizeof(c->logdir), v, false, err);
}

static int set_poll_interval(struct rp_config *c, struct rp_ring_config *r, const char *v,
			     struct rp_err *err)
{
	(void)r;
	return duration_in(v, MS, SEC, &c->poll_interval_ns, err);
}

static int set_seal_interval(struct rp_config *c, struct rp_ring_config *r, const char *v,
			     struct rp_err *err)
{
	(void)r;
	return duration_in(v, 10 * MS, 60 * SEC, &c->seal_interval_ns, err);
}

/* "host:port"; an IPv6 host in brackets.  Empty turns the listener off. */
static int check_listen(const char *v, struct rp_err *err)
{
	if (*v) {
		const char *colon = strrchr(v, ':');
		const char *port = colon ? colon + 1 : "";
		size_t hostlen = colon ? (size_t)(colon - v) : 0;
		char *end;
		long p = strtol(port, &end, 10);
		if (!colon || !hostlen || !*port || *end || *port == '-' || *port == '+' ||
		    p < 1 || p > 65535)
			return rp_err_set(err, -EINVAL,
					  "'%s' is not host:port with a port from 1 to 65535; "
					  "e.g. 127.0.0.1:7070, 0.0.0.0:7070 or [::1]:7070",
					  v);
		bool bracketed = v[0] == '[' && v[hostlen - 1] == ']';
		if (!bracketed && memchr(v, ':', hostlen))
			return rp_err_set(err, -EINVAL,
					  "'%s': put an IPv6 address in brackets, e.g. [::1]:7070", v);
	}
	return 0;
}

static int set_tcp_listen(struct rp_config *c, struct rp_ring_config *r, const char *v,
			  struct rp_err *err)
{
	(void)r;
	int rc = check_listen(v, err);
	return rc < 0 ? rc : set_string(c->tcp_listen, sizeof(c->tcp_listen), v, true, err);
}

static int set_token_file(struct rp_config *c, struct rp_ring_config *r, const char *v,
			  struct rp_err *err)
{
	(void)r;
	return set_string(c->token_file, sizeof(c->token_file), v, true, err);
}

static int set_api_max_connections(struct rp_config *c, struct rp_ring_config *r, const char *v,
				   struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 4096, &c->api_max_connections, err);
}

static int set_api_max_connections_per_peer(struct rp_config *c, struct rp_ring_config *r,
					    const char *v, struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 4096, &c->api_max_connections_per_peer, err);
}

static int set_api_header_timeout(struct rp_config *c, struct rp_ring_config *r, const char *v,
				  struct rp_err *err)
{
	(void)r;
	return duration_in(v, 100 * MS, 600 * SEC, &c->api_header_timeout_ns, err);
}

static int set_api_max_requests(struct rp_config *c, struct rp_ring_config *r, const char *v,
				struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 100000, &c->api_max_requests, err);
}

/* Each is a worker thread. */
static int set_api_max_snapshots(struct rp_config *c, struct rp_ring_config *r, const char *v,
				 struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 64, &c->api_max_snapshots, err);
}

/* [profiler_service] */
static int set_profsvc_listen(struct rp_config *c, struct rp_ring_config *r, const char *v,
			      struct rp_err *err)
{
	(void)r;
	int rc = check_listen(v, err);
	return rc < 0 ? rc : set_string(c->profsvc_listen, sizeof(c->profsvc_listen), v, true, err);
}

static int set_profsvc_allow_unauthenticated(struct rp_config *c, struct rp_ring_config *r,
					     const char *v, struct rp_err *err)
{
	(void)r;
	if (strcmp(v, "true") && strcmp(v, "false"))
		return rp_err_set(err, -EINVAL, "'%s' is not one of true, false", v);
	c->profsvc_allow_unauthenticated = !strcmp(v, "true");
	return 0;
}

static int set_profsvc_snapshot(struct rp_config *c, struct rp_ring_config *r, const char *v,
				struct rp_err *err)
{
	(void)r;
	return duration_in(v, 1 * MS, 3600 * SEC, &c->profsvc_snapshot_ns, err);
}

static int set_profsvc_request_timeout(struct rp_config *c, struct rp_ring_config *r,
				       const char *v, struct rp_err *err)
{
	(void)r;
	return duration_in(v, 100 * MS, 600 * SEC, &c->profsvc_request_timeout_ns, err);
}

static int set_budget(struct rp_config *c, struct rp_ring_config *r, const char *v,
		      struct rp_err *err)
{
	(void)c;
	return size_in(v, MiB, UINT64_MAX, &r->budget_bytes, err);
}

static int set_slot_size(struct rp_config *c, struct rp_ring_config *r, const char *v,
			 struct rp_err *err)
{
	(void)c;
	uint64_t s = 0;
	int rc = size_in(v, 4 * KiB, 16 * MiB, &s, err);
	if (rc)
		return rc;
	if (s % (4 * KiB)) /* slots are written with O_DIRECT */
		return rp_err_set(err, -EINVAL, "'%s' is not a multiple of 4KiB", v);
	r->slot_size = (uint32_t)s;
	return 0;
}

/* Chunks older than this behind the newest leave the ring even when its
 * budget would hold them; "none" (the default): only the budget counts. */
#define MAX_AGE_NONE UINT64_MAX
static int set_max_age(struct rp_config *c, struct rp_ring_config *r, const char *v,
		       struct rp_err *err)
{
	if (strcmp(v, "none") == 0) {
		/* A device's own "none" must override an age in [rings]. */
		r->max_age_ns = r == &c->ring_default ? 0 : MAX_AGE_NONE;
		return 0;
	}
	return duration_in(v, SEC, 366 * 24 * 3600 * SEC, &r->max_age_ns, err);
}

static int set_ring_size(struct rp_config *c, struct rp_ring_config *r, const char *v,
			 struct rp_err *err)
{
	(void)r;
	uint64_t s = 0;
	int rc = size_in(v, 64 * KiB, RP_PRODUCER_RING_MAX, &s, err);
	if (rc)
		return rc;
	if (s & (s - 1)) /* producers index the ring with a mask */
		return rp_err_set(err, -EINVAL, "'%s' is not a power of two, e.g. 1MiB or 4MiB", v);
	c->producer_ring_size = (uint32_t)s;
	return 0;
}

static int set_max_rings(struct rp_config *c, struct rp_ring_config *r, const char *v,
			 struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 1u << 20, &c->producer_max_rings, err);
}

static int set_max_rings_per_process(struct rp_config *c, struct rp_ring_config *r,
				     const char *v, struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 1u << 20, &c->producer_max_rings_per_process, err);
}

static int set_max_shm(struct rp_config *c, struct rp_ring_config *r, const char *v,
		       struct rp_err *err)
{
	(void)r;
	return size_in(v, MiB, UINT64_MAX, &c->producer_max_shm, err);
}

static int set_max_devices(struct rp_config *c, struct rp_ring_config *r, const char *v,
			   struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, RP_MAX_DEVICES, &c->producer_max_devices, err);
}

static int set_device_index_max(struct rp_config *c, struct rp_ring_config *r, const char *v,
				struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 0, 1023, &c->producer_device_index_max, err);
}

/* Empty: the system's host name.  A name, as it goes into file names. */
static int set_host_name(struct rp_config *c, struct rp_ring_config *r, const char *v,
			 struct rp_err *err)
{
	(void)r;
	int rc = *v ? rp_check_name(v, NAME_MAX_LEN, "host name", err) : 0;
	return rc ? rc : set_string(c->host_name, sizeof(c->host_name), v, true, err);
}

static int set_sessions_max_bytes(struct rp_config *c, struct rp_ring_config *r, const char *v,
				  struct rp_err *err)
{
	(void)r;
	return size_in(v, 0, UINT64_MAX, &c->sessions_max_bytes, err);
}

static int set_default_run(struct rp_config *c, struct rp_ring_config *r, const char *v,
			   struct rp_err *err)
{
	(void)r;
	int rc = rp_check_name(v, NAME_MAX_LEN, "run name", err);
	if (rc)
		return rc;
	return set_string(c->default_run, sizeof(c->default_run), v, false, err);
}

static const char *const sampler_modes[] = {
	[RP_SAMPLER_AUTO] = "auto", [RP_SAMPLER_ON] = "true", [RP_SAMPLER_OFF] = "false",
};

static int set_sampler_enabled(struct rp_config *c, struct rp_ring_config *r, const char *v,
			       struct rp_err *err)
{
	(void)r;
	for (size_t i = 0; i < sizeof(sampler_modes) / sizeof(sampler_modes[0]); i++)
		if (!strcmp(v, sampler_modes[i])) {
			c->sampler_mode = (enum rp_sampler_mode)i;
			return 0;
		}
	return rp_err_set(err, -EINVAL, "'%s' is not one of auto, true, false", v);
}

static int set_sampler_frequency(struct rp_config *c, struct rp_ring_config *r, const char *v,
				 struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, RP_CPU_SAMPLE_HZ_MAX, &c->sampler_hz, err);
}

static int set_sampler_depth(struct rp_config *c, struct rp_ring_config *r, const char *v,
			     struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 127, &c->sampler_depth, err);
}

static int set_host_metrics_enabled(struct rp_config *c, struct rp_ring_config *r,
				    const char *v, struct rp_err *err)
{
	(void)r;
	if (strcmp(v, "true") && strcmp(v, "false"))
		return rp_err_set(err, -EINVAL, "'%s' is not one of true, false", v);
	c->host_metrics_enabled = !strcmp(v, "true");
	return 0;
}

static int set_host_metrics_interval(struct rp_config *c, struct rp_ring_config *r,
				     const char *v, struct rp_err *err)
{
	(void)r;
	return duration_in(v, 10 * MS, 3600 * SEC, &c->host_metrics_interval_ns, err);
}

static int set_psi_enabled(struct rp_config *c, struct rp_ring_config *r, const char *v,
			   struct rp_err *err)
{
	(void)r;
	if (strcmp(v, "true") && strcmp(v, "false"))
		return rp_err_set(err, -EINVAL, "'%s' is not one of true, false", v);
	c->psi_enabled = !strcmp(v, "true");
	return 0;
}

static int set_psi_interval(struct rp_config *c, struct rp_ring_config *r, const char *v,
			    struct rp_err *err)
{
	(void)r;
	return duration_in(v, 10 * MS, 3600 * SEC, &c->psi_interval_ns, err);
}

static int set_sampler_cgroup(struct rp_config *c, struct rp_ring_config *r, const char *v,
			      struct rp_err *err)
{
	(void)r;
	return set_string(c->sampler_cgroup, sizeof(c->sampler_cgroup), v, true, err);
}

/* "123, 456": processes (tgids) to sample, each listed once; empty: all. */
static int set_sampler_pids(struct rp_config *c, struct rp_ring_config *r, const char *v,
			    struct rp_err *err)
{
	(void)r;
	uint32_t pids[RP_CONFIG_MAX_PIDS];
	unsigned n = 0;
	char list[256]; /* holds any line the loader takes */
	if ((size_t)snprintf(list, sizeof(list), "%s", v) >= sizeof(list))
		return rp_err_set(err, -EINVAL, "the list is too long: filter on a cgroup instead "
				  "([sampler] cgroup)");
	for (char *item = list, *next; *list && item; item = next) {
		if ((next = strchr(item, ',')))
			*next++ = 0;
		item += strspn(item, " \t");
		size_t len = strlen(item);
		while (len && (item[len - 1] == ' ' || item[len - 1] == '\t'))
			item[--len] = 0;
		unsigned pid;
		int rc;
		if (!len)
			return rp_err_set(err, -EINVAL, "'%s' has an empty item: give process ids "
					  "separated by commas, such as 1234,5678", v);
		if (n == RP_CONFIG_MAX_PIDS)
			return rp_err_set(err, -E2BIG, "more than %d pids: filter on a cgroup instead "
					  "([sampler] cgroup)", RP_CONFIG_MAX_PIDS);
		if ((rc = rp_parse_uint(item, 1, RP_PID_MAX, &pid, err)))
			return rc;
		for (unsigned i = 0; i < n; i++)
			if (pids[i] == pid)
				return rp_err_set(err, -EINVAL, "pid %u is listed twice", pid);
		pids[n++] = pid;
	}
	memset(c->sampler_pids, 0, sizeof(c->sampler_pids));
	memcpy(c->sampler_pids, pids, n * sizeof(pids[0]));
	c->sampler_npids = n;
	return 0;
}

#define MAX_DURATION_LIMIT (7 * 24 * 3600 * SEC)

static int set_default_last(struct rp_config *c, struct rp_ring_config *r, const char *v,
			    struct rp_err *err)
{
	(void)r;
	return duration_in(v, 1, MAX_DURATION_LIMIT, &c->default_last_ns, err);
}

static int set_max_duration(struct rp_config *c, struct rp_ring_config *r, const char *v,
			    struct rp_err *err)
{
	(void)r;
	return duration_in(v, 1, MAX_DURATION_LIMIT, &c->max_duration_ns, err);
}

static int set_sessions_max_open(struct rp_config *c, struct rp_ring_config *r, const char *v,
				 struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 4096, &c->sessions_max_open, err);
}

static int set_export_queue(struct rp_config *c, struct rp_ring_config *r, const char *v,
			    struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 100000, &c->export_queue, err);
}

static int set_sessions_max_count(struct rp_config *c, struct rp_ring_config *r, const char *v,
				  struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 0, 100000000, &c->sessions_max_count, err);
}

static int set_session_exports(struct rp_config *c, struct rp_ring_config *r, const char *v,
			       struct rp_err *err)
{
	(void)r;
	return rp_export_parse_formats(v, &c->session_exports, err);
}

static int set_perfetto_grouping(struct rp_config *c, struct rp_ring_config *r, const char *v,
				 struct rp_err *err)
{
	(void)r;
	enum rp_perfetto_grouping g;
	int rc = rp_export_parse_grouping(v, &g, err);
	if (rc == 0)
		c->perfetto_grouping = g;
	return rc;
}

static int set_alert_before(struct rp_config *c, struct rp_ring_config *r, const char *v,
			    struct rp_err *err)
{
	(void)r;
	return duration_in(v, 1, MAX_DURATION_LIMIT, &c->alerts.before_ns, err);
}

static int set_alert_after(struct rp_config *c, struct rp_ring_config *r, const char *v,
			   struct rp_err *err)
{
	(void)r;
	return duration_in(v, 1, MAX_DURATION_LIMIT, &c->alerts.after_ns, err);
}

static int set_alert_cooldown(struct rp_config *c, struct rp_ring_config *r, const char *v,
			      struct rp_err *err)
{
	(void)r;
	return duration_in(v, 1, MAX_DURATION_LIMIT, &c->alerts.cooldown_ns, err);
}

static int set_alert_max_per_hour(struct rp_config *c, struct rp_ring_config *r, const char *v,
				  struct rp_err *err)
{
	(void)r;
	return rp_parse_uint(v, 1, 3600, &c->alerts.max_per_hour, err);
}

/* A Prometheus label name: [A-Za-z_][A-Za-z0-9_]*. */
static int set_run_label(struct rp_config *c, struct rp_ring_config *r, const char *v,
			 struct rp_err *err)
{
	(void)r;
	bool ok = *v && !(*v >= '0' && *v <= '9') && strlen(v) < sizeof(c->alert_run_label);
	for (const char *p = v; ok && *p; p++)
		ok = *p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		     (*p >= '0' && *p <= '9');
	if (!ok)
		return rp_err_set(err, -EINVAL,
				  "'%s' is not a label name: use letters, digits and '_', not starting "
				  "with a digit, e.g. job",
				  v);
	return set_string(c->alert_run_label, sizeof(c->alert_run_label), v, false, err);
}

/* ---- [rule.NAME] keys: each sets a field of its section's rule ---- */

typedef int (*rule_setter)(struct rp_rule_config *r, const char *value, struct rp_err *err);

static const char *const rule_types[] = {
	[RP_RULE_SLOW_RANGE] = "slow_range", [RP_RULE_COUNTER_ABOVE] = "counter_above",
};

static int set_rule_type(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	for (int t = RP_RULE_SLOW_RANGE; t <= RP_RULE_COUNTER_ABOVE; t++)
		if (!strcmp(v, rule_types[t])) {
			r->type = (enum rp_rule_type)t;
			return 0;
		}
	return rp_err_set(err, -EINVAL, "'%s' is not one of slow_range, counter_above", v);
}

static int set_rule_range(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	if (!*v)
		return rp_err_set(err, -EINVAL, "empty value; give the range's name, e.g. train_step");
	return set_string(r->range, sizeof(r->range), v, false, err);
}

static int set_rule_counter(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	if (!*v)
		return rp_err_set(err, -EINVAL, "empty value; give the counter's name, e.g. gpu_temp");
	return set_string(r->counter, sizeof(r->counter), v, false, err);
}

static int number(const char *v, double *out, struct rp_err *err)
{
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (!*v || *end || errno || !isfinite(d))
		return rp_err_set(err, -EINVAL, "'%s' is not a finite number", v);
	*out = d;
	return 0;
}

static int set_rule_factor(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	double d;
	int rc = number(v, &d, err);
	if (rc)
		return rc;
	if (d <= 1 || d > 1000)
		return rp_err_set(err, -ERANGE, "'%s' is outside (1, 1000]: a range slower than its median "
				  "by this factor fires, e.g. 3", v);
	r->factor = d;
	return 0;
}

static int set_rule_window(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	return rp_parse_uint(v, 1, 1000, &r->window, err);
}

static int set_rule_threshold(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	int rc = number(v, &r->threshold, err);
	if (rc == 0)
		r->has_threshold = true;
	return rc;
}

static int set_rule_for(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	return duration_in(v, 1, MAX_DURATION_LIMIT, &r->for_ns, err);
}

static int set_rule_before(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	return duration_in(v, 1, MAX_DURATION_LIMIT, &r->trigger.before_ns, err);
}

static int set_rule_after(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	return duration_in(v, 1, MAX_DURATION_LIMIT, &r->trigger.after_ns, err);
}

static int set_rule_cooldown(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	return duration_in(v, 1, MAX_DURATION_LIMIT, &r->trigger.cooldown_ns, err);
}

static int set_rule_max_per_hour(struct rp_rule_config *r, const char *v, struct rp_err *err)
{
	return rp_parse_uint(v, 1, 3600, &r->trigger.max_per_hour, err);
}

static const struct rule_key {
	const char *name;
	rule_setter set;
} rule_keys[] = {
	{"type", set_rule_type},       {"range", set_rule_range},
	{"factor", set_rule_factor},   {"window", set_rule_window},
	{"counter", set_rule_counter}, {"threshold", set_rule_threshold},
	{"for", set_rule_for},         {"before", set_rule_before},
	{"after", set_rule_after},     {"cooldown", set_rule_cooldown},
	{"max_per_hour", set_rule_max_per_hour},
};
#define N_RULE_KEYS (sizeof(rule_keys) / sizeof(rule_keys[0]))

/* ---- the schema ---- */

struct key_def {
	const char *name;
	setter set;
};

#define KEYS(...) (const struct key_def[]){__VA_ARGS__, {NULL, NULL}}

static const struct section_def {
	const char *name; /* "ring." is the prefix of per-device sections */
	const struct key_def *keys;
} sections[] = {
	{"daemon", KEYS({"socket", set_socket}, {"state_dir", set_state_dir},
			{"logdir", set_logdir}, {"poll_interval", set_poll_interval},
			{"seal_interval", set_seal_interval}, {"host_name", set_host_name})},
	{"api", KEYS({"tcp_listen", set_tcp_listen}, {"token_file", set_token_file},
		     {"max_connections", set_api_max_connections},
		     {"max_connections_per_peer", set_api_max_connections_per_peer},
		     {"header_timeout", set_api_header_timeout},
		     {"max_requests", set_api_max_requests},
		     {"max_snapshots", set_api_max_snapshots})},
	{"profiler_service", KEYS({"listen", set_profsvc_listen},
				  {"allow_unauthenticated", set_profsvc_allow_unauthenticated},
				  {"snapshot", set_profsvc_snapshot},
				  {"request_timeout", set_profsvc_request_timeout})},
	{"rings", KEYS({"budget", set_budget}, {"slot_size", set_slot_size},
		       {"max_age", set_max_age})},
	{"ring.", KEYS({"budget", set_budget}, {"slot_size", set_slot_size},
		       {"max_age", set_max_age})},
	{"producers", KEYS({"ring_size", set_ring_size}, {"max_rings", set_max_rings},
			   {"max_rings_per_process", set_max_rings_per_process},
			   {"max_shm", set_max_shm}, {"max_devices", set_max_devices},
			   {"device_index_max", set_device_index_max})},
	{"sampler", KEYS({"enabled", set_sampler_enabled}, {"frequency", set_sampler_frequency},
			 {"max_depth", set_sampler_depth}, {"cgroup", set_sampler_cgroup},
			 {"pids", set_sampler_pids})},
	{"host_metrics", KEYS({"enabled", set_host_metrics_enabled},
			      {"interval", set_host_metrics_interval})},
	{"psi", KEYS({"enabled", set_psi_enabled}, {"interval", set_psi_interval})},
	{"sessions", KEYS({"default_run", set_default_run}, {"default_last", set_default_last},
			  {"max_duration", set_max_duration}, {"max_bytes", set_sessions_max_bytes},
			  {"max_count", set_sessions_max_count}, {"exports", set_session_exports},
			  {"perfetto_grouping", set_perfetto_grouping},
			  {"max_open", set_sessions_max_open}, {"export_queue", set_export_queue})},
	{"alertmanager", KEYS({"before", set_alert_before}, {"after", set_alert_after},
			      {"run_label", set_run_label}, {"cooldown", set_alert_cooldown},
			      {"max_per_hour", set_alert_max_per_hour})},
	/* [rule.NAME] keys are rule_keys, handled apart */
	{"rule.", KEYS({NULL, NULL})},
};
#define N_SECTIONS (sizeof(sections) / sizeof(sections[0]))
#define KNOWN_SECTIONS "[daemon], [api], [profiler_service], [rings], [ring.DEVICE], [producers], [sampler], [host_metrics], [psi], [sessions], [alertmanager], [rule.NAME]"

static bool is_ring_section(const char *name)
{
	return !strncmp(name, "ring.", 5);
}

static bool is_rule_section(const char *name)
{
	return !strncmp(name, "rule.", 5);
}

static const struct section_def *find_section(const char *name)
{
	for (size_t i = 0; i < N_SECTIONS; i++)
		if (!strcmp(sections[i].name, name) ||
		    (is_ring_section(name) && !strcmp(sections[i].name, "ring.")) ||
		    (is_rule_section(name) && !strcmp(sections[i].name, "rule.")))
			return &sections[i];
	return NULL;
}

static int rule_index(const struct rp_config *c, const char *name)
{
	for (unsigned i = 0; i < c->nrules; i++)
		if (!strcmp(c->rules[i].name, name))
			return (int)i;
	return -1;
}

/* Index of the device's [ring.DEVICE] entry, -1 when it has none. */
static int ring_index(const struct rp_config *c, const char *device)
{
	for (unsigned i = 0; i < c->nrings; i++)
		if (!strcmp(c->rings[i].device, device))
			return (int)i;
	return -1;
}

/* ---- loading ---- */

struct loader {
	struct rp_config *c;
	const char *path;
	FILE *f;
	int line;      /* line number of the text inih is parsing */
	int next_line;
	int rc;        /* first error; parsing stops there */
	struct rp_err *err;
};

static int fail(struct loader *l, int rc)
{
	if (!l->rc)
		l->rc = rc;
	return rc;
}

/* Creates the entry of a [rule.NAME] section, from the rule defaults. */
static int begin_rule(struct loader *l, const char *section)
{
	struct rp_config *c = l->c;
	int rc = rp_check_name(section + 5, NAME_MAX_LEN, "rule name", l->err);
	if (rc) {
		rp_err_prefix(l->err, "%s:%d: [%s]", l->path, l->line, section);
		return fail(l, rc);
	}
	if (rule_index(c, section + 5) >= 0)
		return 0;
	if (c->nrules == RP_CONFIG_MAX_RULES)
		return fail(l, rp_err_set(l->err, -E2BIG, "%s:%d: [%s]: too many rules; at most %d",
					  l->path, l->line, section, RP_CONFIG_MAX_RULES));
	rule_defaults(&c->rules[c->nrules++], section + 5);
	return 0;
}

static int handle_rule_key(struct loader *l, const char *section, const char *name,
			   const char *value)
{
	const struct rule_key *k = NULL;
	for (size_t i = 0; i < N_RULE_KEYS && !k; i++)
		if (!strcmp(rule_keys[i].name, name))
			k = &rule_keys[i];
	if (!k) {
		char known[160] = "";
		for (size_t i = 0; i < N_RULE_KEYS; i++)
			snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s",
				 i ? ", " : "", rule_keys[i].name);
		fail(l, rp_err_set(l->err, -EINVAL, "%s:%d: unknown key '%s' in [%s]; known keys: %s",
				   l->path, l->line, name, section, known));
		return 0;
	}
	int rc = k->set(&l->c->rules[rule_index(l->c, section + 5)], value, l->err);
	if (rc) {
		rp_err_prefix(l->err, "%s:%d: [%s] %s", l->path, l->line, section, name);
		fail(l, rc);
		return 0;
	}
	return 1;
}

/* Validates a section header (even one with no keys, which inih never
 * reports) and creates the entry of a [ring.DEVICE] section.  Repeating a
 * section adds to it; later keys win. */
static int begin_section(struct loader *l, const char *name)
{
	if (!find_section(name))
		return fail(l, rp_err_set(l->err, -EINVAL,
					  "%s:%d: unknown section [%s]; known sections: " KNOWN_SECTIONS,
					  l->path, l->line, name));
	if (is_rule_section(name))
		return begin_rule(l, name);
	if (!is_ring_section(name))
		return 0;
	const char *device = name + 5;
	int rc = rp_check_name(device, NAME_MAX_LEN, "device name", l->err);
	if (rc) {
		rp_err_prefix(l->err, "%s:%d: [%s]", l->path, l->line, name);
		return fail(l, rc);
	}
	struct rp_config *c = l->c;
	if (ring_index(c, device) >= 0)
		return 0;
	if (c->nrings == RP_CONFIG_MAX_RINGS)
		return fail(l, rp_err_set(l->err, -E2BIG,
					  "%s:%d: [%s]: too many device sections; at most %d devices "
					  "can have their own ring settings (the rest use [rings])",
					  l->path, l->line, name, RP_CONFIG_MAX_RINGS));
	struct rp_ring_config *r = &c->rings[c->nrings++];
	memset(r, 0, sizeof(*r)); /* budget and slot size 0: inherit [rings] */
	snprintf(r->device, sizeof(r->device), "%s", device);
	return 0;
}

/* inih's reader: counts lines for messages, strips indentation (so inih
 * never takes an indented key for a continuation of the previous value),
 * and sees every section header. */
static char *read_line(char *buf, int size, void *stream)
{
	struct loader *l = stream;
	if (l->rc || !fgets(buf, size, l->f))
		return NULL;
	l->line = l->next_line;
	size_t n = strlen(buf);
	if (n && buf[n - 1] == '\n') {
		l->next_line++;
	} else {
		int ch = getc(l->f);
		if (ch != EOF) {
			fail(l, rp_err_set(l->err, -EINVAL,
					   "%s:%d: line is longer than %d characters; shorten it",
					   l->path, l->line, size - 2));
			return NULL;
		}
	}
	size_t skip = 0;
	if (l->line == 1 && !strncmp(buf, "\xef\xbb\xbf", 3))
		skip = 3; /* UTF-8 byte order mark */
	while (buf[skip] == ' ' || buf[skip] == '\t')
		skip++;
	memmove(buf, buf + skip, n - skip + 1);
	char *close = buf[0] == '[' ? strchr(buf, ']') : NULL;
	if (close) {
		*close = '\0';
		begin_section(l, buf + 1);
		*close = ']';
	}
	return buf;
}

static int handle_key(void *user, const char *section, const char *name, const char *value)
{
	struct loader *l = user;
	if (l->rc)
		return 1; /* already failed; only the first error is reported */
	if (!*section) {
		fail(l, rp_err_set(l->err, -EINVAL,
				   "%s:%d: key '%s' is outside any section; put it under one of "
				   KNOWN_SECTIONS,
				   l->path, l->line, name));
		return 0;
	}
	if (begin_section(l, section)) /* known already from read_line; idempotent */
		return 0;
	if (is_rule_section(section))
		return handle_rule_key(l, section, name, value);
	const struct section_def *s = find_section(section);
	const struct key_def *k = s->keys;
	while (k->name && strcmp(k->name, name))
		k++;
	if (!k->name) {
		char known[128] = "";
		for (const struct key_def *kk = s->keys; kk->name; kk++)
			snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s",
				 kk == s->keys ? "" : ", ", kk->name);
		fail(l, rp_err_set(l->err, -EINVAL, "%s:%d: unknown key '%s' in [%s]; known keys: %s",
				   l->path, l->line, name, section, known));
		return 0;
	}
	struct rp_ring_config *ring =
		!strcmp(section, "rings")  ? &l->c->ring_default
		: is_ring_section(section) ? &l->c->rings[ring_index(l->c, section + 5)]
					   : NULL;
	int rc = k->set(l->c, ring, value, l->err);
	if (rc) {
		rp_err_prefix(l->err, "%s:%d: [%s] %s", l->path, l->line, section, name);
		fail(l, rc);
		return 0;
	}
	return 1;
}

int rp_config_load(struct rp_config *c, const char *path, struct rp_err *err)
{
	FILE *f = fopen(path, "re");
	if (!f) {
		int e = errno;
		return rp_err_set(err, -e, "cannot open config file '%s': %s; check the path",
				  path, strerror(e));
	}
	struct loader l = {.c = c, .path = path, .f = f, .next_line = 1, .err = err};
	int ret = ini_parse_stream(read_line, &l, handle_key, &l);
	int read_errno = ferror(f) ? (errno ? errno : EIO) : 0;
	fclose(f);
	if (l.rc)
		return l.rc;
	if (read_errno)
		return rp_err_set(err, -read_errno, "cannot read config file '%s': %s", path,
				  strerror(read_errno));
	if (ret > 0)
		return rp_err_set(err, -EINVAL,
				  "%s:%d: syntax error; expected [section], key = value, or a comment "
				  "starting with '#' or ';'",
				  path, ret);
	if (ret < 0)
		return rp_err_set(err, -ENOMEM, "out of memory reading config file '%s'", path);
	return 0;
}

void rp_config_ring(const struct rp_config *c, const char *device, uint64_t *budget_bytes,
		    uint32_t *slot_size)
{
	int i = device ? ring_index(c, device) : -1;
	const struct rp_ring_config *r = i >= 0 ? &c->rings[i] : NULL;
	*budget_bytes = r && r->budget_bytes ? r->budget_bytes : c->ring_default.budget_bytes;
	*slot_size = r && r->slot_size ? r->slot_size : c->ring_default.slot_size;
}

uint64_t rp_config_ring_max_age(const struct rp_config *c, const char *device)
{
	int i = device ? ring_index(c, device) : -1;
	const struct rp_ring_config *r = i >= 0 ? &c->rings[i] : NULL;
	uint64_t age = r && r->max_age_ns ? r->max_age_ns : c->ring_default.max_age_ns;
	return age == MAX_AGE_NONE ? 0 : age;
}

static int check_ring(const struct rp_config *c, const char *device, struct rp_err *err)
{
	uint64_t budget;
	uint32_t slot;
	rp_config_ring(c, device, &budget, &slot);
	if (budget >= 2ull * slot + RING_HEADER_BYTES)
		return 0;
	char b[32], s[32], need[32];
	format_size(budget, b, sizeof(b));
	format_size(slot, s, sizeof(s));
	format_size(2ull * slot + RING_HEADER_BYTES, need, sizeof(need));
	return rp_err_set(err, -EINVAL,
			  "[%s%s] budget %s does not hold 2 slots of %s plus the 4KiB header; raise "
			  "budget to at least %s or lower slot_size",
			  device ? "ring." : "rings", device ? device : "", b, s, need);
}

/* The window fits max_duration; section: "[alertmanager]", "[rule.x]". */
static int check_trigger(const struct rp_config *c, const struct rp_trigger_config *t,
			 const char *section, struct rp_err *err)
{
	if (t->before_ns + t->after_ns <= c->max_duration_ns)
		return 0;
	char before[32], after[32], max[32];
	rp_format_duration(t->before_ns, before, sizeof(before));
	rp_format_duration(t->after_ns, after, sizeof(after));
	rp_format_duration(c->max_duration_ns, max, sizeof(max));
	return rp_err_set(err, -EINVAL,
			  "%s before %s + after %s is longer than [sessions] max_duration %s; shorten "
			  "the window or raise max_duration",
			  section, before, after, max);
}

static int check_rule(const struct rp_config *c, const struct rp_rule_config *r,
		      struct rp_err *err)
{
	const char *n = r->name;
	switch (r->type) {
	case RP_RULE_UNSET:
		return rp_err_set(err, -EINVAL,
				  "[rule.%s] has no type; set type = slow_range or counter_above", n);
	case RP_RULE_SLOW_RANGE:
		if (!r->range[0])
			return rp_err_set(err, -EINVAL,
					  "[rule.%s] is a slow_range rule without a range; set range = "
					  "the annotation's name, e.g. train_step", n);
		if (r->counter[0] || r->has_threshold)
			return rp_err_set(err, -EINVAL,
					  "[rule.%s] is a slow_range rule: counter and threshold are for "
					  "counter_above rules; remove them", n);
		break;
	case RP_RULE_COUNTER_ABOVE:
		if (!r->counter[0] || !r->has_threshold)
			return rp_err_set(err, -EINVAL,
					  "[rule.%s] is a counter_above rule: set both counter and "
					  "threshold, e.g. counter = gpu_temp, threshold = 90", n);
		if (r->range[0])
			return rp_err_set(err, -EINVAL,
					  "[rule.%s] is a counter_above rule: range is for slow_range "
					  "rules; remove it", n);
		break;
	}
	char section[80];
	snprintf(section, sizeof(section), "[rule.%s]", n);
	return check_trigger(c, &r->trigger, section, err);
}

int rp_config_check(const struct rp_config *c, struct rp_err *err)
{
	if (!c->socket[0])
		return rp_err_set(err, -EINVAL,
				  "no control socket path (the default did not fit in %zu bytes); set "
				  "[daemon] socket or pass --socket",
				  SOCKET_MAX);
	if (strlen(c->socket) > SOCKET_MAX)
		return rp_err_set(err, -ENAMETOOLONG,
				  "socket path '%s' is longer than %zu bytes (the producer socket adds '"
				  PRODUCER_SUFFIX "'); choose a shorter path",
				  c->socket, SOCKET_MAX);
	if (!c->state_dir[0] || !c->logdir[0])
		return rp_err_set(err, -EINVAL,
				  "state_dir and logdir must be set; set them in [daemon] or pass "
				  "--state-dir and --logdir");
	if (c->tcp_listen[0] && !c->token_file[0])
		return rp_err_set(err, -EINVAL,
				  "[api] tcp_listen is set but token_file is not: TCP clients must send "
				  "a bearer token; set [api] token_file to a file holding it");
	int rc = check_ring(c, NULL, err);
	for (unsigned i = 0; !rc && i < c->nrings; i++)
		rc = check_ring(c, c->rings[i].device, err);
	if (rc)
		return rc;
	if (c->default_last_ns > c->max_duration_ns) {
		char last[32], max[32];
		rp_format_duration(c->default_last_ns, last, sizeof(last));
		rp_format_duration(c->max_duration_ns, max, sizeof(max));
		return rp_err_set(err, -EINVAL,
				  "[sessions] default_last %s is longer than max_duration %s; lower "
				  "default_last or raise max_duration",
				  last, max);
	}
	rc = check_trigger(c, &c->alerts, "[alertmanager]", err);
	for (unsigned i = 0; !rc && i < c->nrules; i++)
		rc = check_rule(c, &c->rules[i], err);
	return rc;
}

static void print_string(FILE *out, const char *key, const char *value)
{
	fprintf(out, "%s =%s%s\n", key, *value ? " " : "", value);
}

static void print_duration(FILE *out, const char *key, uint64_t ns)
{
	char buf[64];
	rp_format_duration(ns, buf, sizeof(buf));
	fprintf(out, "%s = %s\n", key, buf);
}

static void print_max_age(FILE *out, uint64_t ns)
{
	if (ns && ns != MAX_AGE_NONE)
		print_duration(out, "max_age", ns);
	else
		fprintf(out, "max_age = none\n");
}

static void print_size(FILE *out, const char *key, uint64_t bytes)
{
	char buf[32];
	format_size(bytes, buf, sizeof(buf));
	fprintf(out, "%s = %s\n", key, buf);
}

void rp_config_print(const struct rp_config *c, FILE *out)
{
	fprintf(out, "# ringprofd effective configuration (usable as --config FILE)\n[daemon]\n");
	print_string(out, "socket", c->socket);
	print_string(out, "state_dir", c->state_dir);
	print_string(out, "logdir", c->logdir);
	print_duration(out, "poll_interval", c->poll_interval_ns);
	print_duration(out, "seal_interval", c->seal_interval_ns);
	print_string(out, "host_name", c->host_name);
	fprintf(out, "\n[api]\n");
	print_string(out, "tcp_listen", c->tcp_listen);
	print_string(out, "token_file", c->token_file);
	fprintf(out, "max_connections = %u\nmax_connections_per_peer = %u\n", c->api_max_connections,
		c->api_max_connections_per_peer);
	print_duration(out, "header_timeout", c->api_header_timeout_ns);
	fprintf(out, "max_requests = %u\nmax_snapshots = %u\n", c->api_max_requests,
		c->api_max_snapshots);
	fprintf(out, "\n[profiler_service]\n");
	print_string(out, "listen", c->profsvc_listen);
	fprintf(out, "allow_unauthenticated = %s\n", c->profsvc_allow_unauthenticated ? "true" : "false");
	print_duration(out, "snapshot", c->profsvc_snapshot_ns);
	print_duration(out, "request_timeout", c->profsvc_request_timeout_ns);
	fprintf(out, "\n[rings]\n");
	print_size(out, "budget", c->ring_default.budget_bytes);
	print_size(out, "slot_size", c->ring_default.slot_size);
	print_max_age(out, c->ring_default.max_age_ns);
	for (unsigned i = 0; i < c->nrings; i++) {
		const struct rp_ring_config *r = &c->rings[i];
		fprintf(out, "\n[ring.%s]\n", r->device);
		if (r->budget_bytes) /* unset keys inherit [rings] */
			print_size(out, "budget", r->budget_bytes);
		if (r->slot_size)
			print_size(out, "slot_size", r->slot_size);
		if (r->max_age_ns)
			print_max_age(out, r->max_age_ns);
	}
	fprintf(out, "\n[producers]\n");
	print_size(out, "ring_size", c->producer_ring_size);
	fprintf(out, "max_rings = %u\nmax_rings_per_process = %u\n", c->producer_max_rings,
		c->producer_max_rings_per_process);
	print_size(out, "max_shm", c->producer_max_shm);
	fprintf(out, "max_devices = %u\ndevice_index_max = %u\n", c->producer_max_devices,
		c->producer_device_index_max);
	fprintf(out, "\n[sampler]\nenabled = %s\nfrequency = %u\nmax_depth = %u\n",
		sampler_modes[c->sampler_mode], c->sampler_hz, c->sampler_depth);
	print_string(out, "cgroup", c->sampler_cgroup);
	fprintf(out, "pids =");
	for (unsigned i = 0; i < c->sampler_npids; i++)
		fprintf(out, "%s%u", i ? "," : " ", c->sampler_pids[i]);
	fputc('\n', out);
	fprintf(out, "\n[host_metrics]\nenabled = %s\n", c->host_metrics_enabled ? "true" : "false");
	print_duration(out, "interval", c->host_metrics_interval_ns);
	fprintf(out, "\n[psi]\nenabled = %s\n", c->psi_enabled ? "true" : "false");
	print_duration(out, "interval", c->psi_interval_ns);
	fprintf(out, "\n[sessions]\n");
	print_string(out, "default_run", c->default_run);
	print_duration(out, "default_last", c->default_last_ns);
	print_duration(out, "max_duration", c->max_duration_ns);
	print_size(out, "max_bytes", c->sessions_max_bytes);
	fprintf(out, "max_count = %u\nexports = ", c->sessions_max_count);
	if (!c->session_exports)
		fputs("none", out);
	for (unsigned f = 0, n = 0; f < RP_EXPORT_NFORMATS; f++)
		if (c->session_exports & 1u << f)
			fprintf(out, "%s%s", n++ ? "," : "", rp_export_format_name(f));
	fprintf(out, "\nperfetto_grouping = %s\n",
		rp_export_grouping_name((enum rp_perfetto_grouping)c->perfetto_grouping));
	fprintf(out, "max_open = %u\nexport_queue = %u\n", c->sessions_max_open, c->export_queue);
	fprintf(out, "\n[alertmanager]\n");
	print_duration(out, "before", c->alerts.before_ns);
	print_duration(out, "after", c->alerts.after_ns);
	print_string(out, "run_label", c->alert_run_label);
	print_duration(out, "cooldown", c->alerts.cooldown_ns);
	fprintf(out, "max_per_hour = %u\n", c->alerts.max_per_hour);
	for (unsigned i = 0; i < c->nrules; i++) {
		const struct rp_rule_config *r = &c->rules[i];
		fprintf(out, "\n[rule.%s]\n", r->name);
		if (r->type != RP_RULE_UNSET)
			fprintf(out, "type = %s\n", rule_types[r->type]);
		if (r->range[0])
			print_string(out, "range", r->range);
		if (r->type != RP_RULE_COUNTER_ABOVE) /* each type's own keys */
			fprintf(out, "factor = %.17g\nwindow = %u\n", r->factor, r->window);
		if (r->counter[0])
			print_string(out, "counter", r->counter);
		if (r->has_threshold)
			fprintf(out, "threshold = %.17g\n", r->threshold);
		if (r->type != RP_RULE_SLOW_RANGE)
			print_duration(out, "for", r->for_ns);
		print_duration(out, "before", r->trigger.before_ns);
		print_duration(out, "after", r->trigger.after_ns);
		print_duration(out, "cooldown", r->trigger.cooldown_ns);
		fprintf(out, "max_per_hour = %u\n", r->trigger.max_per_hour);
	}
}
