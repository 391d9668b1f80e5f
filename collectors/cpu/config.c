/* The [sampler] section: its rows (daemon/config.h), in the configuration
 * library with the other sections. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "parse.h"

/* "123, 456": processes (tgids) to sample, each listed once; empty: all.
 * The field: uint32_t pids[RP_CONFIG_MAX_PIDS], then unsigned npids. */
_Static_assert(offsetof(struct rp_config, sampler_npids) ==
		       offsetof(struct rp_config, sampler_pids) + sizeof(uint32_t[RP_CONFIG_MAX_PIDS]),
	       "the pid count follows the pids");
static int parse_pids(void *field, const char *v, struct rp_err *err)
{
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
	memset(field, 0, sizeof(pids));
	memcpy(field, pids, n * sizeof(pids[0]));
	memcpy((char *)field + sizeof(pids), &n, sizeof(n));
	return 0;
}

static void print_pids(const void *field, char *out, size_t len)
{
	const uint32_t *pids = field;
	unsigned n;
	memcpy(&n, pids + RP_CONFIG_MAX_PIDS, sizeof(n));
	size_t o = 0;
	out[0] = '\0';
	for (unsigned i = 0; i < n && o < len; i++)
		o += (size_t)snprintf(out + o, len - o, "%s%u", i ? "," : "", pids[i]);
}

static const char *const sampler_modes[] = {
	[RP_SAMPLER_AUTO] = "auto", [RP_SAMPLER_ON] = "true", [RP_SAMPLER_OFF] = "false",
};

/* In the order of ebpf/sampler_record.h's enum rp_sampler_stack_copy. */
static const char *const stack_copies[] = { "cut", "never", "always" };

static const struct rp_config_key sampler_keys[] = {
	{"enabled", RP_CONFIG_ENUM, .names = sampler_modes, .max = 3, .def = "auto",
	 RP_CONFIG_DAEMON(sampler_mode)},
	/* 99: off the 100 Hz of periodic timers, like perf -F 99 */
	{"frequency", RP_CONFIG_UINT, .min = 1, .max = RP_CPU_SAMPLE_HZ_MAX, .def = "99",
	 RP_CONFIG_DAEMON(sampler_hz)},
	{"max_depth", RP_CONFIG_UINT, .min = 1, .max = 127,
	 .def = "127", RP_CONFIG_DAEMON(sampler_depth)},
	{"stack_copy", RP_CONFIG_ENUM, .names = stack_copies, .max = 3, .def = "cut",
	 RP_CONFIG_DAEMON(sampler_stack_copy)},
	{"cgroup", RP_CONFIG_STRING, RP_CONFIG_EMPTY_OK, RP_CONFIG_DAEMON(sampler_cgroup)},
	{"pids", RP_CONFIG_CUSTOM, .parse = parse_pids, .print = print_pids,
	 .offset = offsetof(struct rp_config, sampler_pids)},
};

const struct rp_config_section rp_sampler_config = {"sampler", RP_CONFIG_KEYS(sampler_keys)};
