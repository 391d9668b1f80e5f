#include "formats.h"

#include <errno.h>
#include <string.h>

static const struct {
	const char *name, *suffix;
} formats[RP_EXPORT_NFORMATS] = {
	[RP_EXPORT_XPLANE] = { "xplane", ".xplane.pb" },
	[RP_EXPORT_PERFETTO] = { "perfetto", ".pftrace" },
	[RP_EXPORT_PPROF] = { "pprof", ".cpu.pb.gz" },
	[RP_EXPORT_JSON] = { "json", ".json" },
	[RP_EXPORT_SUMMARY] = { "summary", ".summary.txt" },
	[RP_EXPORT_FLAMEGRAPH] = { "flamegraph", ".flamegraph.svg" },
	[RP_EXPORT_FOLDED] = { "folded", ".folded" },
};

const char *rp_export_format_name(enum rp_export_format f)
{
	return f < RP_EXPORT_NFORMATS ? formats[f].name : "unknown";
}

const char *rp_export_suffix(enum rp_export_format f)
{
	return f < RP_EXPORT_NFORMATS ? formats[f].suffix : "";
}

int rp_export_parse_formats(const char *list, unsigned *mask, struct rp_err *err)
{
	unsigned m = 0;
	const char *p = list;
	if (strcmp(list, "all") == 0) {
		*mask = RP_EXPORT_ALL;
		return 0;
	}
	if (strcmp(list, "none") == 0) {
		*mask = 0;
		return 0;
	}
	while (*p) {
		size_t n = strcspn(p, ",");
		unsigned f = 0;
		while (f < RP_EXPORT_NFORMATS &&
		       (strlen(formats[f].name) != n || strncmp(formats[f].name, p, n) != 0))
			f++;
		if (f == RP_EXPORT_NFORMATS)
			return rp_err_set(err, -EINVAL, "unknown export format '%.*s': known formats are "
					  "xplane, perfetto, pprof, json, summary, flamegraph, folded "
					  "(a comma-separated list), all or none", (int)n, p);
		m |= 1u << f;
		p += n + (p[n] == ',');
	}
	if (!m)
		return rp_err_set(err, -EINVAL, "empty export format list: name formats (xplane, "
				  "perfetto, pprof, json, summary, flamegraph, folded), all "
				  "or none");
	*mask = m;
	return 0;
}

static const char *const groupings[RP_PERFETTO_NGROUPINGS] = {
	[RP_PERFETTO_BY_PROCESS] = "process",
	[RP_PERFETTO_BY_DEVICE] = "device",
	[RP_PERFETTO_BY_THREAD] = "thread",
};

const char *rp_export_grouping_name(enum rp_perfetto_grouping g)
{
	return g < RP_PERFETTO_NGROUPINGS ? groupings[g] : "unknown";
}

int rp_export_parse_grouping(const char *name, enum rp_perfetto_grouping *g,
			     struct rp_err *err)
{
	for (unsigned i = 0; i < RP_PERFETTO_NGROUPINGS; i++)
		if (strcmp(name, groupings[i]) == 0) {
			*g = (enum rp_perfetto_grouping)i;
			return 0;
		}
	return rp_err_set(err, -EINVAL, "unknown Perfetto grouping '%s': known groupings are "
			  "process (process -> thread, the default), device (the ring that recorded "
			  "the events -> process -> thread) and thread (each thread on its own)",
			  name);
}
