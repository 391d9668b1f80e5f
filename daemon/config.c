#include "config.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector_sections.h"
#include "formats.h"
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
#define NAME_MAX_LEN (RP_CONFIG_NAME_SIZE - 1)
#define MAX_DURATION_LIMIT (7 * 24 * 3600 * SEC)
#define MAX_AGE_NONE UINT64_MAX
/* A printed value: the longest is a path. */
#define VALUE_MAX (PATH_MAX + 64)

_Static_assert(offsetof(struct rp_ring_config, device) == 0 &&
		       sizeof(((struct rp_ring_config *)0)->device) == RP_CONFIG_NAME_SIZE,
	       "[ring.NAME] entries start with their name");
_Static_assert(offsetof(struct rp_rule_config, name) == 0 &&
		       sizeof(((struct rp_rule_config *)0)->name) == RP_CONFIG_NAME_SIZE,
	       "[rule.NAME] entries start with their name");

/* ---- checks beyond a kind's own, and the custom kinds ---- */

static int check_socket(const char *v, const void *value, struct rp_err *err)
{
	(void)value;
	if (strlen(v) > SOCKET_MAX)
		return rp_err_set(err, -ENAMETOOLONG,
				  "'%.40s...' is %zu bytes; Unix socket paths are limited to %zu here "
				  "(the producer socket adds '" PRODUCER_SUFFIX "'); choose a shorter path",
				  v, strlen(v), SOCKET_MAX);
	return 0;
}

/* "host:port"; an IPv6 host in brackets.  Empty turns TCP off. */
static int check_tcp_listen(const char *v, const void *value, struct rp_err *err)
{
	(void)value;
	if (!*v)
		return 0;
	const char *colon = strrchr(v, ':');
	const char *port = colon ? colon + 1 : "";
	size_t hostlen = colon ? (size_t)(colon - v) : 0;
	char *end;
	long p = strtol(port, &end, 10);
	if (!colon || !hostlen || !*port || *end || *port == '-' || *port == '+' || p < 1 ||
	    p > 65535)
		return rp_err_set(err, -EINVAL,
				  "'%s' is not host:port with a port from 1 to 65535; "
				  "e.g. 127.0.0.1:7070, 0.0.0.0:7070 or [::1]:7070",
				  v);
	bool bracketed = v[0] == '[' && v[hostlen - 1] == ']';
	if (!bracketed && memchr(v, ':', hostlen))
		return rp_err_set(err, -EINVAL,
				  "'%s': put an IPv6 address in brackets, e.g. [::1]:7070", v);
	return 0;
}

/* A Prometheus label name: [A-Za-z_][A-Za-z0-9_]*. */
static int check_label(const char *v, const void *value, struct rp_err *err)
{
	(void)value;
	bool ok = *v && !(*v >= '0' && *v <= '9');
	for (const char *p = v; ok && *p; p++)
		ok = *p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		     (*p >= '0' && *p <= '9');
	if (!ok)
		return rp_err_set(err, -EINVAL,
				  "'%s' is not a label name: use letters, digits and '_', not starting "
				  "with a digit, e.g. job",
				  v);
	return 0;
}

static int check_slot_size(const char *v, const void *value, struct rp_err *err)
{
	if (*(const uint64_t *)value % (4 * KiB)) /* slots are written with O_DIRECT */
		return rp_err_set(err, -EINVAL, "'%s' is not a multiple of 4KiB", v);
	return 0;
}

static int check_power_of_2(const char *v, const void *value, struct rp_err *err)
{
	uint64_t s = *(const uint64_t *)value;
	if (s & (s - 1)) /* producers index the ring with a mask */
		return rp_err_set(err, -EINVAL, "'%s' is not a power of two, e.g. 1MiB or 4MiB", v);
	return 0;
}

static int check_factor(const char *v, const void *value, struct rp_err *err)
{
	double d = *(const double *)value;
	if (d <= 1 || d > 1000)
		return rp_err_set(err, -ERANGE, "'%s' is outside (1, 1000]: a range slower than its median "
				  "by this factor fires, e.g. 3", v);
	return 0;
}

static int parse_exports(void *field, const char *v, struct rp_err *err)
{
	return rp_export_parse_formats(v, field, err);
}

static void print_exports(const void *field, char *out, size_t len)
{
	unsigned mask = *(const unsigned *)field;
	size_t o = (size_t)snprintf(out, len, "%s", mask ? "" : "none");
	for (unsigned f = 0, n = 0; f < RP_EXPORT_NFORMATS && o < len; f++)
		if (mask & 1u << f)
			o += (size_t)snprintf(out + o, len - o, "%s%s", n++ ? "," : "",
					      rp_export_format_name((enum rp_export_format)f));
}

static int parse_grouping(void *field, const char *v, struct rp_err *err)
{
	enum rp_perfetto_grouping g;
	int rc = rp_export_parse_grouping(v, &g, err);
	if (rc == 0)
		*(unsigned *)field = g;
	return rc;
}

static void print_grouping(const void *field, char *out, size_t len)
{
	snprintf(out, len, "%s",
		 rp_export_grouping_name((enum rp_perfetto_grouping) * (const unsigned *)field));
}

/* ---- the sections and their keys ---- */

#define DAEMON(member) RP_CONFIG_DAEMON(member)

static const struct rp_config_key daemon_keys[] = {
	{"socket", RP_CONFIG_STRING, .text = "give a path", .check = check_socket, DAEMON(socket)},
	{"state_dir", RP_CONFIG_STRING, .text = "give a path", DAEMON(state_dir)},
	{"logdir", RP_CONFIG_STRING, .text = "give a path", DAEMON(logdir)},
	{"poll_interval", RP_CONFIG_DURATION, .min = MS, .max = SEC, .def = "10ms",
	 DAEMON(poll_interval_ns)},
	{"seal_interval", RP_CONFIG_DURATION, .min = 10 * MS, .max = 60 * SEC, .def = "1s",
	 DAEMON(seal_interval_ns)},
	/* Empty: the system's host name.  A name, as it goes into file names. */
	{"host_name", RP_CONFIG_NAME, RP_CONFIG_EMPTY_OK, .text = "host name", DAEMON(host_name)},
};

static const struct rp_config_key api_keys[] = {
	{"tcp_listen", RP_CONFIG_STRING, RP_CONFIG_EMPTY_OK, .check = check_tcp_listen,
	 DAEMON(tcp_listen)},
	{"token_file", RP_CONFIG_STRING, RP_CONFIG_EMPTY_OK, DAEMON(token_file)},
	{"max_connections", RP_CONFIG_UINT, .min = 1, .max = 4096, .def = "256",
	 DAEMON(api_max_connections)},
	{"max_connections_per_peer", RP_CONFIG_UINT, .min = 1, .max = 4096, .def = "32",
	 DAEMON(api_max_connections_per_peer)},
	{"header_timeout", RP_CONFIG_DURATION, .min = 100 * MS, .max = 600 * SEC, .def = "10s",
	 DAEMON(api_header_timeout_ns)},
	{"max_requests", RP_CONFIG_UINT, .min = 1, .max = 100000, .def = "128",
	 DAEMON(api_max_requests)},
	/* Each is a worker thread. */
	{"max_snapshots", RP_CONFIG_UINT, .min = 1, .max = 64, .def = "4",
	 DAEMON(api_max_snapshots)},
};

#define RING(member) RP_CONFIG_FIELD(struct rp_ring_config, member)

/* [rings] and each [ring.DEVICE]. */
static const struct rp_config_key ring_keys[] = {
	{"budget", RP_CONFIG_SIZE, .min = MiB, .max = UINT64_MAX, .def = "64MiB", RING(budget_bytes)},
	{"slot_size", RP_CONFIG_SIZE, .min = 4 * KiB, .max = 16 * MiB, .def = "128KiB",
	 .check = check_slot_size, RING(slot_size)},
	/* Chunks older than this behind the newest leave the ring even when its
	 * budget would hold them; "none": only the budget counts. */
	{"max_age", RP_CONFIG_DURATION, RP_CONFIG_NONE, .min = SEC, .max = 366 * 24 * 3600 * SEC,
	 .def = "none", RING(max_age_ns)},
};

static const struct rp_config_key producers_keys[] = {
	{"ring_size", RP_CONFIG_SIZE, .min = 64 * KiB, .max = RP_PRODUCER_RING_MAX, .def = "1MiB",
	 .check = check_power_of_2, DAEMON(producer_ring_size)},
	{"max_rings", RP_CONFIG_UINT, .min = 1, .max = 1u << 20, .def = "4096",
	 DAEMON(producer_max_rings)},
	{"max_rings_per_process", RP_CONFIG_UINT, .min = 1, .max = 1u << 20, .def = "1024",
	 DAEMON(producer_max_rings_per_process)},
	{"max_shm", RP_CONFIG_SIZE, .min = MiB, .max = UINT64_MAX, .def = "4GiB",
	 DAEMON(producer_max_shm)},
	{"max_devices", RP_CONFIG_UINT, .min = 1, .max = RP_MAX_DEVICES, .def = "16",
	 DAEMON(producer_max_devices)},
	{"device_index_max", RP_CONFIG_UINT, .min = 0, .max = 1023, .def = "31",
	 DAEMON(producer_device_index_max)},
};

static const struct rp_config_key sessions_keys[] = {
	{"default_run", RP_CONFIG_NAME, .text = "run name", .def = "default", DAEMON(default_run)},
	{"default_last", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "30s",
	 DAEMON(default_last_ns)},
	{"max_duration", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "1h",
	 DAEMON(max_duration_ns)},
	{"max_bytes", RP_CONFIG_SIZE, .min = 0, .max = UINT64_MAX, .def = "10GiB",
	 DAEMON(sessions_max_bytes)},
	{"max_count", RP_CONFIG_UINT, .min = 0, .max = 100000000, .def = "1000",
	 DAEMON(sessions_max_count)},
	{"exports", RP_CONFIG_CUSTOM, .parse = parse_exports, .print = print_exports,
	 .def = "xplane,perfetto,pprof,json,summary", DAEMON(session_exports)},
	{"perfetto_grouping", RP_CONFIG_CUSTOM, .parse = parse_grouping, .print = print_grouping,
	 .def = "process", DAEMON(perfetto_grouping)},
	{"max_open", RP_CONFIG_UINT, .min = 1, .max = 4096, .def = "16", DAEMON(sessions_max_open)},
	{"export_queue", RP_CONFIG_UINT, .min = 1, .max = 100000, .def = "64",
	 DAEMON(export_queue)},
};

static const struct rp_config_key alertmanager_keys[] = {
	{"before", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "1m",
	 DAEMON(alerts.before_ns)},
	{"after", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "10s",
	 DAEMON(alerts.after_ns)},
	{"run_label", RP_CONFIG_STRING, RP_CONFIG_EMPTY_OK, .check = check_label, .def = "job",
	 DAEMON(alert_run_label)},
	{"cooldown", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "10m",
	 DAEMON(alerts.cooldown_ns)},
	{"max_per_hour", RP_CONFIG_UINT, .min = 1, .max = 3600, .def = "20",
	 DAEMON(alerts.max_per_hour)},
};

static const char *const rule_types[] = {
	[RP_RULE_SLOW_RANGE] = "slow_range", [RP_RULE_COUNTER_ABOVE] = "counter_above",
};

/* Each rule type's own keys print for its rules (and untyped ones). */
static bool slow_range_key(const void *rule)
{
	return ((const struct rp_rule_config *)rule)->type != RP_RULE_COUNTER_ABOVE;
}

static bool counter_above_key(const void *rule)
{
	return ((const struct rp_rule_config *)rule)->type != RP_RULE_SLOW_RANGE;
}

#define RULE(member) RP_CONFIG_FIELD(struct rp_rule_config, member)

static const struct rp_config_key rule_keys[] = {
	{"type", RP_CONFIG_ENUM, RP_CONFIG_IF_SET, .names = rule_types, .max = 3, RULE(type)},
	{"range", RP_CONFIG_STRING, RP_CONFIG_IF_SET,
	 .text = "give the range's name, e.g. train_step", RULE(range)},
	{"factor", RP_CONFIG_NUMBER, .check = check_factor, .def = "3", .shown = slow_range_key,
	 RULE(factor)},
	{"window", RP_CONFIG_UINT, .min = 1, .max = 1000, .def = "50", .shown = slow_range_key,
	 RULE(window)},
	{"counter", RP_CONFIG_STRING, RP_CONFIG_IF_SET,
	 .text = "give the counter's name, e.g. gpu_temp", RULE(counter)},
	{"threshold", RP_CONFIG_NUMBER, .present = offsetof(struct rp_rule_config, has_threshold),
	 RULE(threshold)},
	{"for", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "10s",
	 .shown = counter_above_key, RULE(for_ns)},
	{"before", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "1m",
	 RULE(trigger.before_ns)},
	{"after", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "5s",
	 RULE(trigger.after_ns)},
	{"cooldown", RP_CONFIG_DURATION, .min = 1, .max = MAX_DURATION_LIMIT, .def = "10m",
	 RULE(trigger.cooldown_ns)},
	{"max_per_hour", RP_CONFIG_UINT, .min = 1, .max = 3600, .def = "20",
	 RULE(trigger.max_per_hour)},
};

#define KEYS(rows) RP_CONFIG_KEYS(rows)

/* [profiler_service]: XProf's captures served from the rings (daemon/profsvc). */
static const struct rp_config_key profsvc_keys[] = {
	{"listen", RP_CONFIG_STRING, RP_CONFIG_EMPTY_OK, .check = check_tcp_listen,
	 DAEMON(profsvc_listen)},
	{"allow_unauthenticated", RP_CONFIG_BOOL, .def = "false",
	 DAEMON(profsvc_allow_unauthenticated)},
	{"snapshot", RP_CONFIG_DURATION, .min = MS, .max = 3600 * SEC, .def = "30s",
	 DAEMON(profsvc_snapshot_ns)},
	{"request_timeout", RP_CONFIG_DURATION, .min = 100 * MS, .max = 600 * SEC, .def = "10s",
	 DAEMON(profsvc_request_timeout_ns)},
};

static const struct rp_config_section daemon_section = {"daemon", KEYS(daemon_keys)};
static const struct rp_config_section api_section = {"api", KEYS(api_keys)};
static const struct rp_config_section profsvc_section = {"profiler_service", KEYS(profsvc_keys)};
static const struct rp_config_section rings_section = {
	"rings", KEYS(ring_keys), .base = offsetof(struct rp_config, ring_default)};
static const struct rp_config_section ring_device_section = {
	"ring.", "DEVICE", KEYS(ring_keys), .base = offsetof(struct rp_config, rings),
	.list = &(const struct rp_config_list){
		.count = offsetof(struct rp_config, nrings),
		.entry_size = sizeof(struct rp_ring_config),
		.max = RP_CONFIG_MAX_RINGS,
		.what = "device name",
		.too_many = "too many device sections",
		.limit_note = " devices can have their own ring settings (the rest use [rings])",
		.overrides = true,
	}};
static const struct rp_config_section producers_section = {"producers", KEYS(producers_keys)};
static const struct rp_config_section sessions_section = {"sessions", KEYS(sessions_keys)};
static const struct rp_config_section alertmanager_section = {"alertmanager",
							      KEYS(alertmanager_keys)};
static const struct rp_config_section rule_section = {
	"rule.", "NAME", KEYS(rule_keys), .base = offsetof(struct rp_config, rules),
	.list = &(const struct rp_config_list){
		.count = offsetof(struct rp_config, nrules),
		.entry_size = sizeof(struct rp_rule_config),
		.max = RP_CONFIG_MAX_RULES,
		.what = "rule name",
		.too_many = "too many rules",
		.limit_note = "",
	}};

/* The collectors' sections, declared in their folders (collectors/NAME/config.c). */
#define DECLARE(section) extern const struct rp_config_section section;
RP_COLLECTOR_SECTIONS(DECLARE)
#define ENTRY(section) &section,

const struct rp_config_section *const rp_config_sections[] = {
	&daemon_section, &api_section, &profsvc_section, &rings_section, &ring_device_section,
	&producers_section, RP_COLLECTOR_SECTIONS(ENTRY) &sessions_section, &alertmanager_section,
	&rule_section,
};
const size_t rp_config_nsections = sizeof(rp_config_sections) / sizeof(rp_config_sections[0]);

/* ---- reading and printing a value by its kind ---- */

/* Zero-fills the rest of dst so equal configs are equal bytes. */
static void set_string(char *dst, size_t size, const char *value)
{
	memset(dst, 0, size);
	memcpy(dst, value, strlen(value));
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

static int out_of_bounds(const struct rp_config_key *k, const char *v, uint64_t n,
			 struct rp_err *err)
{
	if (n >= k->min && n <= k->max)
		return 0;
	char limit[32];
	uint64_t bound = n < k->min ? k->min : k->max;
	if (k->kind == RP_CONFIG_SIZE)
		format_size(bound, limit, sizeof(limit));
	else
		rp_format_duration(bound, limit, sizeof(limit));
	return rp_err_set(err, -ERANGE, "'%s' is %s than the %s, %s", v, n < k->min ? "less" : "more",
			  n < k->min ? "minimum" : "maximum", limit);
}

static int not_one_of(const struct rp_config_key *k, const char *v, struct rp_err *err)
{
	static const char *const booleans[] = {"true", "false"};
	const char *const *names = k->kind == RP_CONFIG_BOOL ? booleans : k->names;
	size_t n = k->kind == RP_CONFIG_BOOL ? 2 : k->max;
	char known[160] = "";
	for (size_t i = 0; i < n; i++)
		if (names[i])
			snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s",
				 known[0] ? ", " : "", names[i]);
	return rp_err_set(err, -EINVAL, "'%s' is not one of %s", v, known);
}

/* The value v of key k into its field at base. */
static int parse_value(const struct rp_config_key *k, void *base, const char *v,
		       struct rp_err *err)
{
	char *field = (char *)base + k->offset;
	uint64_t n = 0;
	unsigned u = 0;
	double d = 0;
	int rc = 0;
	switch (k->kind) {
	case RP_CONFIG_BOOL:
		if (strcmp(v, "true") && strcmp(v, "false"))
			return not_one_of(k, v, err);
		*(bool *)field = !strcmp(v, "true");
		return 0;
	case RP_CONFIG_ENUM:
		while (u < k->max && !(k->names[u] && !strcmp(k->names[u], v)))
			u++;
		if (u == k->max)
			return not_one_of(k, v, err);
		memcpy(field, &u, sizeof(u));
		return 0;
	case RP_CONFIG_UINT:
		if ((rc = rp_parse_uint(v, (unsigned)k->min, (unsigned)k->max, &u, err)) ||
		    (k->check && (rc = k->check(v, &u, err))))
			return rc;
		memcpy(field, &u, sizeof(u));
		return 0;
	case RP_CONFIG_DURATION:
		if ((k->flags & RP_CONFIG_NONE) && !strcmp(v, "none"))
			n = MAX_AGE_NONE;
		else if ((rc = rp_parse_duration(v, &n, err)) || (rc = out_of_bounds(k, v, n, err)))
			return rc;
		if (k->check && (rc = k->check(v, &n, err)))
			return rc;
		memcpy(field, &n, sizeof(n));
		return 0;
	case RP_CONFIG_SIZE:
		if ((rc = rp_parse_size(v, &n, err)) || (rc = out_of_bounds(k, v, n, err)) ||
		    (k->check && (rc = k->check(v, &n, err))))
			return rc;
		if (k->size == sizeof(uint32_t))
			*(uint32_t *)field = (uint32_t)n;
		else
			*(uint64_t *)field = n;
		return 0;
	case RP_CONFIG_NUMBER: {
		char *end;
		errno = 0;
		d = strtod(v, &end);
		if (!*v || *end || errno || !isfinite(d))
			return rp_err_set(err, -EINVAL, "'%s' is not a finite number", v);
		if (k->check && (rc = k->check(v, &d, err)))
			return rc;
		memcpy(field, &d, sizeof(d));
		if (k->present)
			*(bool *)((char *)base + k->present) = true;
		return 0;
	}
	case RP_CONFIG_NAME:
		if ((*v || !(k->flags & RP_CONFIG_EMPTY_OK)) &&
		    (rc = rp_check_name(v, k->size - 1, k->text, err)))
			return rc;
		__attribute__((fallthrough)); /* a name is a string that passed the check */
	case RP_CONFIG_STRING:
		if (!*v && !(k->flags & RP_CONFIG_EMPTY_OK))
			return rp_err_set(err, -EINVAL, "empty value; %s", k->text);
		if (k->check && (rc = k->check(v, v, err)))
			return rc;
		if (strlen(v) >= k->size)
			return rp_err_set(err, -ENAMETOOLONG,
					  "'%.40s...' is %zu bytes; the limit is %zu", v, strlen(v),
					  k->size - 1);
		set_string(field, k->size, v);
		return 0;
	case RP_CONFIG_CUSTOM:
		return k->parse(field, v, err);
	}
	return rp_err_set(err, -EINVAL, "key '%s' has no kind: this is a bug in ringprofd", k->name);
}

/* The value of key k at base as the file syntax writes it, "" when it is
 * not printed (unset, or not the rule type's). */
static bool format_value(const struct rp_config_key *k, const void *base, bool overrides,
			 char *out, size_t len)
{
	const char *field = (const char *)base + k->offset;
	uint64_t n = 0;
	unsigned u = 0;
	double d = 0;
	if (k->shown && !k->shown(base))
		return false;
	if (k->present && !*(const bool *)((const char *)base + k->present))
		return false;
	if (overrides || (k->flags & RP_CONFIG_IF_SET)) {
		bool set = false;
		for (size_t i = 0; i < k->size && !set; i++)
			set = field[i] != 0;
		if (!set)
			return false;
	}
	out[0] = '\0';
	switch (k->kind) {
	case RP_CONFIG_BOOL:
		snprintf(out, len, "%s", *(const bool *)field ? "true" : "false");
		break;
	case RP_CONFIG_ENUM:
		memcpy(&u, field, sizeof(u));
		snprintf(out, len, "%s", u < k->max && k->names[u] ? k->names[u] : "");
		break;
	case RP_CONFIG_UINT:
		memcpy(&u, field, sizeof(u));
		snprintf(out, len, "%u", u);
		break;
	case RP_CONFIG_DURATION:
		memcpy(&n, field, sizeof(n));
		if ((k->flags & RP_CONFIG_NONE) && n == MAX_AGE_NONE)
			snprintf(out, len, "none");
		else
			rp_format_duration(n, out, len);
		break;
	case RP_CONFIG_SIZE:
		n = k->size == sizeof(uint32_t) ? *(const uint32_t *)field : *(const uint64_t *)field;
		format_size(n, out, len);
		break;
	case RP_CONFIG_NUMBER:
		memcpy(&d, field, sizeof(d));
		snprintf(out, len, "%.17g", d);
		break;
	case RP_CONFIG_NAME:
	case RP_CONFIG_STRING:
		snprintf(out, len, "%s", field);
		break;
	case RP_CONFIG_CUSTOM:
		k->print(field, out, len);
		break;
	}
	return true;
}

/* The rows' defaults into the struct at base. */
static void apply_defaults(const struct rp_config_section *s, void *base)
{
	struct rp_err ignored = {0}; /* test_config_docs: every default loads */
	for (size_t i = 0; i < s->nkeys; i++)
		if (s->keys[i].def)
			(void)parse_value(&s->keys[i], base, s->keys[i].def, &ignored);
}

void rp_config_defaults(struct rp_config *c)
{
	memset(c, 0, sizeof(*c)); /* also zeroes padding: configs compare with memcmp */
	for (size_t i = 0; i < rp_config_nsections; i++)
		if (!rp_config_sections[i]->list)
			apply_defaults(rp_config_sections[i], (char *)c + rp_config_sections[i]->base);
	/* The paths depend on who runs the daemon: no row default. */
	if (!rp_default_socket_path(c->socket, sizeof(c->socket)))
		c->socket[0] = '\0'; /* did not fit; rp_config_check says so */
	if (!rp_default_state_dir(c->state_dir, sizeof(c->state_dir)))
		c->state_dir[0] = '\0';
	if (!rp_default_logdir(c->logdir, sizeof(c->logdir)))
		c->logdir[0] = '\0';
}

/* ---- sections by name ---- */

static const struct rp_config_section *find_section(const char *name)
{
	for (size_t i = 0; i < rp_config_nsections; i++) {
		const struct rp_config_section *s = rp_config_sections[i];
		if (s->list ? !strncmp(name, s->name, strlen(s->name)) : !strcmp(name, s->name))
			return s;
	}
	return NULL;
}

/* "[daemon], [api], ..., [ring.DEVICE], ..." */
static const char *known_sections(char *out, size_t len)
{
	out[0] = '\0';
	for (size_t i = 0; i < rp_config_nsections; i++)
		snprintf(out + strlen(out), len - strlen(out), "%s[%s%s]", i ? ", " : "",
			 rp_config_sections[i]->name,
			 rp_config_sections[i]->list ? rp_config_sections[i]->instance : "");
	return out;
}

static unsigned list_count(const struct rp_config_section *s, const struct rp_config *c)
{
	unsigned n;
	memcpy(&n, (const char *)c + s->list->count, sizeof(n));
	return n;
}

static char *list_entry(const struct rp_config_section *s, const struct rp_config *c, unsigned i)
{
	return (char *)c + s->base + (size_t)i * s->list->entry_size;
}

/* The entry of [prefix.name], NULL when there is none. */
static char *find_entry(const struct rp_config_section *s, const struct rp_config *c,
			const char *name)
{
	for (unsigned i = 0; i < list_count(s, c); i++)
		if (!strcmp(list_entry(s, c, i), name))
			return list_entry(s, c, i);
	return NULL;
}

/* Index of the device's [ring.DEVICE] entry, -1 when it has none. */
static int ring_index(const struct rp_config *c, const char *device)
{
	for (unsigned i = 0; i < c->nrings; i++)
		if (!strcmp(c->rings[i].device, device))
			return (int)i;
	return -1;
}

/* What the keys of [name] count from; NULL for an entry not created. */
static char *section_base(const struct rp_config_section *s, struct rp_config *c,
			  const char *name)
{
	return s->list ? find_entry(s, c, name + strlen(s->name)) : (char *)c + s->base;
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

/* Validates a section header (even one with no keys, which inih never
 * reports) and creates the entry of a [ring.DEVICE] or [rule.NAME]
 * section.  Repeating a section adds to it; later keys win. */
static int begin_section(struct loader *l, const char *name)
{
	const struct rp_config_section *s = find_section(name);
	char known[256];
	if (!s)
		return fail(l, rp_err_set(l->err, -EINVAL, "%s:%d: unknown section [%s]; known sections: %s",
					  l->path, l->line, name, known_sections(known, sizeof(known))));
	if (!s->list)
		return 0;
	const struct rp_config_list *list = s->list;
	const char *entry_name = name + strlen(s->name);
	int rc = rp_check_name(entry_name, NAME_MAX_LEN, list->what, l->err);
	if (rc) {
		rp_err_prefix(l->err, "%s:%d: [%s]", l->path, l->line, name);
		return fail(l, rc);
	}
	struct rp_config *c = l->c;
	if (find_entry(s, c, entry_name))
		return 0;
	unsigned n = list_count(s, c);
	if (n == list->max)
		return fail(l, rp_err_set(l->err, -E2BIG, "%s:%d: [%s]: %s; at most %u%s", l->path,
					  l->line, name, list->too_many, list->max, list->limit_note));
	char *e = list_entry(s, c, n++);
	memcpy((char *)c + list->count, &n, sizeof(n));
	memset(e, 0, list->entry_size); /* overrides: all unset, inherit */
	snprintf(e, RP_CONFIG_NAME_SIZE, "%s", entry_name);
	if (!list->overrides)
		apply_defaults(s, e);
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
	char known[256];
	if (l->rc)
		return 1; /* already failed; only the first error is reported */
	if (!*section) {
		fail(l, rp_err_set(l->err, -EINVAL,
				   "%s:%d: key '%s' is outside any section; put it under one of %s",
				   l->path, l->line, name, known_sections(known, sizeof(known))));
		return 0;
	}
	if (begin_section(l, section)) /* known already from read_line; idempotent */
		return 0;
	const struct rp_config_section *s = find_section(section);
	const struct rp_config_key *k = s->keys;
	while (k < s->keys + s->nkeys && strcmp(k->name, name))
		k++;
	if (k == s->keys + s->nkeys) {
		known[0] = '\0';
		for (size_t i = 0; i < s->nkeys; i++)
			snprintf(known + strlen(known), sizeof(known) - strlen(known), "%s%s",
				 i ? ", " : "", s->keys[i].name);
		fail(l, rp_err_set(l->err, -EINVAL, "%s:%d: unknown key '%s' in [%s]; known keys: %s",
				   l->path, l->line, name, section, known));
		return 0;
	}
	int rc = parse_value(k, section_base(s, l->c, section), value, l->err);
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

static void print_keys(const struct rp_config_section *s, const void *base, FILE *out)
{
	char value[VALUE_MAX];
	for (size_t i = 0; i < s->nkeys; i++)
		if (format_value(&s->keys[i], base, s->list && s->list->overrides, value,
				 sizeof(value)))
			fprintf(out, "%s =%s%s\n", s->keys[i].name, *value ? " " : "", value);
}

void rp_config_print(const struct rp_config *c, FILE *out)
{
	fprintf(out, "# ringprofd effective configuration (usable as --config FILE)\n");
	for (size_t i = 0; i < rp_config_nsections; i++) {
		const struct rp_config_section *s = rp_config_sections[i];
		if (!s->list) {
			fprintf(out, "%s[%s]\n", i ? "\n" : "", s->name);
			print_keys(s, (const char *)c + s->base, out);
		}
		for (unsigned e = 0; s->list && e < list_count(s, c); e++) {
			const char *entry = list_entry(s, c, e);
			fprintf(out, "\n[%s%s]\n", s->name, entry);
			print_keys(s, entry, out);
		}
	}
}
