/* daemon/config: defaults, loading, strict errors with FILE:LINE, the
 * cross-field check, print -> load round trip, per-device ring fallback. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "formats.h"
#include "paths.h"
#include "scratch.h"

#define KiB 1024ull
#define MiB (1024 * KiB)
#define MS 1000000ull
#define SEC (1000 * MS)

static char dir[64];
static char path[128];

static int setup(void **state)
{
	(void)state;
	if (scratch_make(dir, sizeof(dir), "config") < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/ringprofd.conf", dir);
	unsetenv("RINGPROF_SOCKET");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return scratch_remove(dir);
}

static void write_file(const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* Defaults, then text as a config file. */
static int load_text(struct rp_config *c, const char *text, struct rp_err *err)
{
	rp_config_defaults(c);
	write_file(text);
	return rp_config_load(c, path, err);
}

static void defaults_sane(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	rp_config_defaults(&c);
	assert_int_equal(rp_config_check(&c, &err), 0);
	char buf[256];
	assert_string_equal(c.socket, rp_default_socket_path(buf, sizeof(buf)));
	assert_string_equal(c.state_dir, rp_default_state_dir(buf, sizeof(buf)));
	assert_string_equal(c.logdir, rp_default_logdir(buf, sizeof(buf)));
	assert_int_equal(c.poll_interval_ns, 10 * MS);
	assert_int_equal(c.seal_interval_ns, SEC);
	assert_string_equal(c.tcp_listen, "");
	assert_string_equal(c.token_file, "");
	assert_int_equal(c.ring_default.budget_bytes, 64 * MiB);
	assert_int_equal(c.ring_default.slot_size, 128 * KiB);
	assert_int_equal(c.nrings, 0);
	assert_int_equal(c.producer_ring_size, MiB);
	assert_string_equal(c.default_run, "default");
	assert_int_equal(c.default_last_ns, 30 * SEC);
	assert_int_equal(c.max_duration_ns, 3600 * SEC);
	assert_string_equal(c.host_name, "");
	assert_int_equal(c.sessions_max_bytes, 10 * 1024 * MiB);
	assert_int_equal(c.sessions_max_count, 1000);
	assert_int_equal(c.session_exports, RP_EXPORT_DEFAULT);
	assert_int_equal(c.perfetto_grouping, RP_PERFETTO_BY_PROCESS);
}

static void default_paths(void **state)
{
	(void)state;
	char buf[256], prod[256];
	if (geteuid() == 0) {
		assert_string_equal(rp_default_socket_path(buf, sizeof(buf)),
				    "/run/ringprof/ringprofd.sock");
		assert_string_equal(rp_default_state_dir(buf, sizeof(buf)), "/var/lib/ringprof/rings");
		assert_string_equal(rp_default_logdir(buf, sizeof(buf)), "/var/lib/ringprof/sessions");
	} else {
		assert_non_null(strstr(rp_default_socket_path(buf, sizeof(buf)), "/ringprofd.sock"));
		assert_non_null(strstr(rp_default_state_dir(buf, sizeof(buf)),
				       "/.local/state/ringprof/rings"));
	}
	setenv("RINGPROF_SOCKET", "/x/y.sock", 1);
	assert_string_equal(rp_default_socket_path(buf, sizeof(buf)), "/x/y.sock");
	struct rp_config c;
	rp_config_defaults(&c);
	assert_string_equal(c.socket, "/x/y.sock");
	unsetenv("RINGPROF_SOCKET");
	assert_string_equal(rp_producer_socket_path("/x/y.sock", prod, sizeof(prod)),
			    "/x/y.sock.producers");
	/* Too small a buffer gives NULL, never a truncated path. */
	assert_null(rp_producer_socket_path("/x/y.sock", prod, 19));
	assert_non_null(rp_producer_socket_path("/x/y.sock", prod, 20));
	assert_null(rp_default_state_dir(buf, 8));
}

static const char full[] =
	"# every key\n"
	"[daemon]\n"
	"socket = /tmp/rp/ctl.sock\n"
	"  state_dir = /data/rings   ; indented, with a comment\n"
	"\tlogdir=/data/sessions\n"
	"poll_interval = 5ms\n"
	"seal_interval = 2.5s\n"
	"host_name = node-07.cluster\n"
	"\n"
	"[api]\n"
	"tcp_listen = 127.0.0.1:7070\n"
	"token_file = /etc/ringprof/token\n"
	"[profiler_service]\n"
	"listen = [::1]:8466\n"
	"allow_unauthenticated = true\n"
	"snapshot = 5s\n"
	"request_timeout = 2s\n"
	"[rings]\n"
	"budget = 1GiB\n"
	"slot_size = 256KiB\n"
	"[ring.gpu0]\n"
	"budget = 4GiB\n"
	"[ring.gpu1]\n"
	"slot_size = 1MiB\n"
	"[ring.host]\n"
	"[ring.gpu0]\n"
	"slot_size = 512KiB\n"
	"budget = 2GiB\n"
	"[producers]\n"
	"ring_size = 4MiB\n"
	"[sessions]\n"
	"default_run = llama-70b\n"
	"default_last = 2m30s\n"
	"max_duration = 168h\n"
	"max_bytes = 500GiB\n"
	"max_count = 0\n"
	"exports = xplane,pprof\n"
	"perfetto_grouping = device\n";

static void load_valid(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	if (load_text(&c, full, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(rp_config_check(&c, &err), 0);
	assert_string_equal(c.socket, "/tmp/rp/ctl.sock");
	assert_string_equal(c.state_dir, "/data/rings");
	assert_string_equal(c.logdir, "/data/sessions");
	assert_int_equal(c.poll_interval_ns, 5 * MS);
	assert_int_equal(c.seal_interval_ns, 2500 * MS);
	assert_string_equal(c.tcp_listen, "127.0.0.1:7070");
	assert_string_equal(c.token_file, "/etc/ringprof/token");
	assert_string_equal(c.profsvc_listen, "[::1]:8466");
	assert_true(c.profsvc_allow_unauthenticated);
	assert_int_equal(c.profsvc_snapshot_ns, 5000 * MS);
	assert_int_equal(c.profsvc_request_timeout_ns, 2000 * MS);
	assert_int_equal(c.ring_default.budget_bytes, 1024 * MiB);
	assert_int_equal(c.ring_default.slot_size, 256 * KiB);
	assert_int_equal(c.nrings, 3); /* gpu0 repeated: one entry, last value wins */
	assert_string_equal(c.rings[0].device, "gpu0");
	assert_int_equal(c.rings[0].budget_bytes, 2048 * MiB);
	assert_int_equal(c.rings[0].slot_size, 512 * KiB);
	assert_string_equal(c.rings[2].device, "host");
	assert_int_equal(c.producer_ring_size, 4 * MiB);
	assert_string_equal(c.default_run, "llama-70b");
	assert_int_equal(c.default_last_ns, 150 * SEC);
	assert_int_equal(c.max_duration_ns, 7 * 24 * 3600 * SEC);
	assert_string_equal(c.host_name, "node-07.cluster");
	assert_int_equal(c.sessions_max_bytes, 500 * 1024 * MiB);
	assert_int_equal(c.sessions_max_count, 0);
	assert_int_equal(c.session_exports, 1u << RP_EXPORT_XPLANE | 1u << RP_EXPORT_PPROF);
	assert_int_equal(c.perfetto_grouping, RP_PERFETTO_BY_DEVICE);

	/* An empty file changes nothing. */
	struct rp_config d, e;
	rp_config_defaults(&e);
	assert_int_equal(load_text(&d, "", &err), 0);
	assert_memory_equal(&d, &e, sizeof(d));
}

static void sampler_pids(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	assert_int_equal(load_text(&c, "[sampler]\npids = 4194304\n", &err), 0);
	assert_int_equal(c.sampler_npids, 1);
	assert_int_equal(c.sampler_pids[0], 4194304);
	/* Spaces around the commas; the last value of the key wins. */
	assert_int_equal(load_text(&c, "[sampler]\npids = 1\npids = 123 ,\t456,7\n", &err), 0);
	assert_int_equal(c.sampler_npids, 3);
	assert_int_equal(c.sampler_pids[0], 123);
	assert_int_equal(c.sampler_pids[1], 456);
	assert_int_equal(c.sampler_pids[2], 7);
	assert_int_equal(load_text(&c, "[sampler]\npids = 5\npids =\n", &err), 0);
	assert_int_equal(c.sampler_npids, 0);
	char many[200] = "[sampler]\npids = 1";
	for (int i = 2; i <= RP_CONFIG_MAX_PIDS; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), ",%d", i);
	strcat(many, "\n");
	assert_int_equal(load_text(&c, many, &err), 0);
	assert_int_equal(c.sampler_npids, RP_CONFIG_MAX_PIDS);
	assert_int_equal(c.sampler_pids[RP_CONFIG_MAX_PIDS - 1], RP_CONFIG_MAX_PIDS);
}

static void ring_fallback(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	uint64_t budget;
	uint32_t slot;
	/* [ring.*] before [rings]: still inherits the later [rings] value */
	assert_int_equal(load_text(&c,
				   "[ring.gpu0]\nslot_size = 256KiB\n"
				   "[ring.gpu1]\nbudget = 2GiB\n"
				   "[rings]\nbudget = 128MiB\nslot_size = 64KiB\n",
				   &err),
			 0);
	rp_config_ring(&c, "gpu0", &budget, &slot);
	assert_int_equal(budget, 128 * MiB);
	assert_int_equal(slot, 256 * KiB);
	rp_config_ring(&c, "gpu1", &budget, &slot);
	assert_int_equal(budget, 2048 * MiB);
	assert_int_equal(slot, 64 * KiB);
	rp_config_ring(&c, "gpu7", &budget, &slot);
	assert_int_equal(budget, 128 * MiB);
	assert_int_equal(slot, 64 * KiB);
	rp_config_ring(&c, NULL, &budget, &slot);
	assert_int_equal(budget, 128 * MiB);
	assert_int_equal(slot, 64 * KiB);
	/* max_age: none by default; a device's own value, "none" included,
	 * overrides [rings]. */
	assert_int_equal(rp_config_ring_max_age(&c, "gpu0"), 0);
	assert_int_equal(load_text(&c, "[ring.gpu0]\nmax_age = none\n[ring.gpu1]\nbudget = 1GiB\n"
				   "[rings]\nmax_age = 2h\n", &err), 0);
	assert_int_equal(rp_config_ring_max_age(&c, "gpu0"), 0);
	assert_int_equal(rp_config_ring_max_age(&c, "gpu1"), 7200ull * 1000000000ull);
	assert_int_equal(rp_config_ring_max_age(&c, NULL), 7200ull * 1000000000ull);
	assert_int_equal(load_text(&c, "[rings]\nmax_age = 10ms\n", &err), -ERANGE);
}

struct bad_file {
	const char *text;
	int rc;
	int line;
	const char *msg; /* after "FILE:LINE: " */
};

/* Each file fails to load with its error, at its line. */
static void expect_bad(const struct bad_file *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct rp_config c;
		struct rp_err err = {0};
		char want[600];
		snprintf(want, sizeof(want), "%s:%d: %s", path, t[i].line, t[i].msg);
		int rc = load_text(&c, t[i].text, &err);
		if (rc != t[i].rc || strncmp(err.msg, want, strlen(want)))
			fail_msg("case %zu: rc %d (want %d)\n got: %s\nwant: %s", i, rc, t[i].rc,
				 err.msg, want);
	}
}

static void load_errors(void **state)
{
	(void)state;
	static char many[4096];
	size_t o = 0;
	for (int i = 0; i < RP_CONFIG_MAX_RINGS + 1; i++)
		o += (size_t)snprintf(many + o, sizeof(many) - o, "[ring.gpu%d]\nbudget = 8MiB\n", i);
	char longline[300];
	snprintf(longline, sizeof(longline), "[daemon]\n\nlogdir = /%0250d\n", 0);

	const struct bad_file t[] = {
		{"[ring.gpu0]\nbudget = 8MiB\n\nbudgt = 1GiB\n", -EINVAL, 4,
		 "unknown key 'budgt' in [ring.gpu0]; known keys: budget, slot_size, max_age"},
		{"[daemon]\nsockt = /x\n", -EINVAL, 2,
		 "unknown key 'sockt' in [daemon]; known keys: socket, state_dir, logdir, "
		 "poll_interval, seal_interval, host_name"},
		{"[daemon]\nhost_name = node/1\n", -EINVAL, 2,
		 "[daemon] host_name: host name 'node/1': '/' is not allowed"},
		{"[daemon]\nsocket = /x\n[bogus]\n", -EINVAL, 3,
		 "unknown section [bogus]; known sections: [daemon], [api], [profiler_service], [rings], "
		 "[ring.DEVICE], [producers], [sampler], [host_metrics], [psi], [gpu_pm], [xla], [sessions], [alertmanager], "
		 "[rule.NAME]"},
		{"[profiler_service]\nlisten = 8466\n", -EINVAL, 2,
		 "[profiler_service] listen: '8466' is not host:port"},
		{"[profiler_service]\nallow_unauthenticated = yes\n", -EINVAL, 2,
		 "[profiler_service] allow_unauthenticated: 'yes' is not one of true, false"},
		{"[profiler_service]\nrequest_timeout = 1ms\n", -ERANGE, 2,
		 "[profiler_service] request_timeout: '1ms' is less than the minimum, 100ms"},
		{"# comment\nsocket = /x\n", -EINVAL, 2, "key 'socket' is outside any section"},
		{"[daemon]\nsocket = /x\n\npoll_interval = 2s\n", -ERANGE, 4,
		 "[daemon] poll_interval: '2s' is more than the maximum, 1s"},
		{"[daemon]\npoll_interval = 100us\n", -ERANGE, 2,
		 "[daemon] poll_interval: '100us' is less than the minimum, 1ms"},
		{"[daemon]\nseal_interval = 30\n", -EINVAL, 2,
		 "[daemon] seal_interval: '30': add a unit, e.g. 30s"},
		{"[daemon]\nseal_interval = 61s\n", -ERANGE, 2,
		 "[daemon] seal_interval: '61s' is more than the maximum, 1m"},
		{"[daemon]\nsocket =\n", -EINVAL, 2, "[daemon] socket: empty value; give a path"},
		{"[daemon]\nsocket = /0123456789012345678901234567890123456789012345678901234567"
		 "8901234567890123456789012345678901234567\n",
		 -ENAMETOOLONG, 2, "[daemon] socket: '/0123"},
		{"[api]\ntcp_listen = localhost\n", -EINVAL, 2,
		 "[api] tcp_listen: 'localhost' is not host:port"},
		{"[api]\ntcp_listen = :7070\n", -EINVAL, 2, "[api] tcp_listen: ':7070' is not host:port"},
		{"[api]\ntcp_listen = 1.2.3.4:70000\n", -EINVAL, 2,
		 "[api] tcp_listen: '1.2.3.4:70000' is not host:port"},
		{"[api]\ntcp_listen = ::1:7070\n", -EINVAL, 2,
		 "[api] tcp_listen: '::1:7070': put an IPv6 address in brackets"},
		{"[rings]\nbudget = 512KiB\n", -ERANGE, 2,
		 "[rings] budget: '512KiB' is less than the minimum, 1MiB"},
		{"[rings]\nbudget = lots\n", -EINVAL, 2, "[rings] budget: 'lots' is not a size"},
		{"[rings]\nslot_size = 6KiB\n", -EINVAL, 2,
		 "[rings] slot_size: '6KiB' is not a multiple of 4KiB"},
		{"[ring.gpu0]\nslot_size = 32MiB\n", -ERANGE, 2,
		 "[ring.gpu0] slot_size: '32MiB' is more than the maximum, 16MiB"},
		{"[ring.a/b]\n", -EINVAL, 1,
		 "[ring.a/b]: device name 'a/b': '/' is not allowed"},
		{"[ring.]\nbudget = 8MiB\n", -EINVAL, 1, "[ring.]: device name is empty"},
		{"[producers]\nring_size = 3MiB\n", -EINVAL, 2,
		 "[producers] ring_size: '3MiB' is not a power of two"},
		{"[producers]\nring_size = 32KiB\n", -ERANGE, 2,
		 "[producers] ring_size: '32KiB' is less than the minimum, 64KiB"},
		{"[producers]\nring_size = 512MiB\n", -ERANGE, 2,
		 "[producers] ring_size: '512MiB' is more than the maximum, 256MiB"},
		{"[sampler]\nenabled = yes\n", -EINVAL, 2,
		 "[sampler] enabled: 'yes' is not one of auto, true, false"},
		{"[sampler]\nfrequency = 0\n", -ERANGE, 2,
		 "[sampler] frequency: '0' is outside 1..10000"},
		{"[sampler]\nmax_depth = 12x\n", -EINVAL, 2,
		 "[sampler] max_depth: '12x' is not a whole number"},
		{"[sampler]\nstack_copy = sometimes\n", -EINVAL, 2,
		 "[sampler] stack_copy: 'sometimes' is not one of cut, never, always"},
		{"[sampler]\npids = 0\n", -ERANGE, 2, "[sampler] pids: '0' is outside 1..4194304"},
		{"[sampler]\npids = 12,4194305\n", -ERANGE, 2,
		 "[sampler] pids: '4194305' is outside 1..4194304"},
		{"[sampler]\npids = 12 34\n", -EINVAL, 2, "[sampler] pids: '12 34' is not a whole number"},
		{"[sampler]\npids = 1,,2\n", -EINVAL, 2,
		 "[sampler] pids: '1,,2' has an empty item: give process ids separated by commas"},
		{"[sampler]\npids = 1,2,\n", -EINVAL, 2, "[sampler] pids: '1,2,' has an empty item"},
		{"[sampler]\npids = ,\n", -EINVAL, 2, "[sampler] pids: ',' has an empty item"},
		{"[sampler]\npids = self\n", -EINVAL, 2, "[sampler] pids: 'self' is not a whole number"},
		{"[sampler]\npids = 7, 8, 7\n", -EINVAL, 2, "[sampler] pids: pid 7 is listed twice"},
		{"[sampler]\npids = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,"
		 "27,28,29,30,31,32,33\n", -E2BIG, 2,
		 "[sampler] pids: more than 32 pids: filter on a cgroup instead"},
		{"[host_metrics]\nenabled = auto\n", -EINVAL, 2,
		 "[host_metrics] enabled: 'auto' is not one of true, false"},
		{"[host_metrics]\ninterval = 5ms\n", -ERANGE, 2,
		 "[host_metrics] interval: '5ms' is less than the minimum, 10ms"},
		{"[host_metrics]\ninterval = 2h\n", -ERANGE, 2,
		 "[host_metrics] interval: '2h' is more than the maximum, 1h"},
		{"[psi]\nenabled = yes\n", -EINVAL, 2,
		 "[psi] enabled: 'yes' is not one of true, false"},
		{"[psi]\ninterval = 1ms\n", -ERANGE, 2,
		 "[psi] interval: '1ms' is less than the minimum, 10ms"},
		{"[xla]\nendpoints = 127.0.0.1:9012,localhost\n", -EINVAL, 2,
		 "[xla] endpoints: 'localhost' is not HOST:PORT"},
		{"[xla]\nendpoints = host:0\n", -EINVAL, 2,
		 "[xla] endpoints: 'host:0': the port is not 1..65535"},
		{"[xla]\nwindow = 10ms\n", -ERANGE, 2,
		 "[xla] window: '10ms' is less than the minimum, 100ms"},
		{"[xla]\nhost_tracer_level = 4\n", -ERANGE, 2, "[xla] host_tracer_level: "},
		{"[sessions]\ndefault_run = ../x\n", -EINVAL, 2,
		 "[sessions] default_run: run name '../x': '/' is not allowed"},
		{"[sessions]\ndefault_last = -5s\n", -EINVAL, 2,
		 "[sessions] default_last: '-5s' is negative"},
		{"[sessions]\nmax_duration = 8d\n", -EINVAL, 2,
		 "[sessions] max_duration: '8d': unknown unit 'd'"},
		{"[sessions]\nmax_duration = 169h\n", -ERANGE, 2,
		 "[sessions] max_duration: '169h' is more than the maximum, 168h"},
		{"[sessions]\nmax_bytes = lots\n", -EINVAL, 2, "[sessions] max_bytes: 'lots' is not a size"},
		{"[sessions]\nexports = xplane,pptrof\n", -EINVAL, 2,
		 "[sessions] exports: unknown export format 'pptrof'"},
		{"[sessions]\nperfetto_grouping = gpu\n", -EINVAL, 2,
		 "[sessions] perfetto_grouping: unknown Perfetto grouping 'gpu': known groupings are "
		 "process"},
		{"[sessions]\nmax_count = -1\n", -EINVAL, 2,
		 "[sessions] max_count: '-1' is not a whole number"},
		{"[sessions]\nmax_count = 100000001\n", -ERANGE, 2,
		 "[sessions] max_count: '100000001' is outside 0..100000000"},
		{"[daemon]\nsocket = /x\nthis is not ini\n", -EINVAL, 3, "syntax error; expected [section], key = value"},
		{"[daemon\n", -EINVAL, 1, "syntax error"},
		{longline, -EINVAL, 3, "line is longer than 198 characters; shorten it"},
		{many, -E2BIG, 2 * RP_CONFIG_MAX_RINGS + 1,
		 "[ring.gpu32]: too many device sections; at most 32"},
	};
	expect_bad(t, sizeof(t) / sizeof(t[0]));
	/* 32 device sections, some repeated, are fine. */
	struct rp_config c;
	struct rp_err err = {0};
	char *cut = strstr(many, "[ring.gpu32]");
	*cut = '\0';
	strcat(many, "[ring.gpu0]\nbudget = 16MiB\n");
	assert_int_equal(load_text(&c, many, &err), 0);
	assert_int_equal(c.nrings, RP_CONFIG_MAX_RINGS);
	assert_int_equal(c.rings[0].budget_bytes, 16 * MiB);
}

static void missing_file(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	rp_config_defaults(&c);
	assert_int_equal(rp_config_load(&c, "/nonexistent/ringprofd.conf", &err), -ENOENT);
	assert_non_null(strstr(err.msg, "'/nonexistent/ringprofd.conf'"));
}

static void check_rules(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	assert_int_equal(load_text(&c, "[api]\ntcp_listen = [::1]:7070\n", &err), 0);
	assert_int_equal(rp_config_check(&c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "tcp_listen is set but token_file is not"));
	strcpy(c.token_file, "/etc/ringprof/token");
	assert_int_equal(rp_config_check(&c, &err), 0);

	/* 2 slots + 4KiB header: a 1MiB budget holds two 508KiB slots, not 512KiB */
	assert_int_equal(load_text(&c, "[ring.gpu3]\nbudget = 1MiB\nslot_size = 508KiB\n", &err), 0);
	assert_int_equal(rp_config_check(&c, &err), 0);
	assert_int_equal(load_text(&c, "[ring.gpu3]\nbudget = 1MiB\nslot_size = 512KiB\n", &err), 0);
	assert_int_equal(rp_config_check(&c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "[ring.gpu3] budget 1MiB does not hold 2 slots of 512KiB"));
	assert_non_null(strstr(err.msg, "at least 1028KiB"));
	assert_int_equal(load_text(&c, "[rings]\nbudget = 1MiB\nslot_size = 1MiB\n", &err), 0);
	assert_int_equal(rp_config_check(&c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "[rings] budget 1MiB"));

	assert_int_equal(load_text(&c, "[sessions]\ndefault_last = 2h\n", &err), 0);
	assert_int_equal(rp_config_check(&c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "default_last 2h is longer than max_duration 1h"));
	assert_int_equal(load_text(&c, "[sessions]\ndefault_last = 2h\nmax_duration=2h\n", &err), 0);
	assert_int_equal(rp_config_check(&c, &err), 0);

	rp_config_defaults(&c); /* flags write the struct directly */
	memset(c.socket, 'a', sizeof(c.socket) - 1);
	c.socket[sizeof(c.socket) - 1] = '\0';
	assert_int_equal(rp_config_check(&c, &err), -ENAMETOOLONG);
	assert_non_null(strstr(err.msg, ".producers"));
	rp_config_defaults(&c);
	c.logdir[0] = '\0';
	assert_int_equal(rp_config_check(&c, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "--logdir"));
}

/* [alertmanager] and [rule.NAME]: defaults, values, errors in the file
 * and across keys. */
static void triggers(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	rp_config_defaults(&c);
	assert_int_equal(c.alerts.before_ns, 60 * SEC);
	assert_int_equal(c.alerts.after_ns, 10 * SEC);
	assert_int_equal(c.alerts.cooldown_ns, 600 * SEC);
	assert_int_equal(c.alerts.max_per_hour, 20);
	assert_string_equal(c.alert_run_label, "job");
	assert_int_equal(c.nrules, 0);

	if (load_text(&c,
		      "[alertmanager]\nbefore = 2m\nafter = 1s\nrun_label = team_1\ncooldown = 1h\n"
		      "max_per_hour = 5\n"
		      "[rule.slow]\ntype = slow_range\nrange = train step\n"
		      "[rule.hot]\ntype = counter_above\ncounter = gpu_temp\nthreshold = -1.5e3\n"
		      "for = 2s\nbefore = 10s\nafter = 1s\ncooldown = 1m\nmax_per_hour = 3\n"
		      "[rule.slow]\nfactor = 2.5\nwindow = 20\n",
		      &err) ||
	    rp_config_check(&c, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(c.alerts.before_ns, 120 * SEC);
	assert_int_equal(c.alerts.after_ns, SEC);
	assert_int_equal(c.alerts.cooldown_ns, 3600 * SEC);
	assert_int_equal(c.alerts.max_per_hour, 5);
	assert_string_equal(c.alert_run_label, "team_1");
	assert_int_equal(c.nrules, 2); /* slow repeated: one rule */
	const struct rp_rule_config *slow = &c.rules[0], *hot = &c.rules[1];
	assert_string_equal(slow->name, "slow");
	assert_int_equal(slow->type, RP_RULE_SLOW_RANGE);
	assert_string_equal(slow->range, "train step");
	assert_true(slow->factor == 2.5);
	assert_int_equal(slow->window, 20);
	assert_int_equal(slow->trigger.before_ns, 60 * SEC); /* rule defaults */
	assert_int_equal(slow->trigger.after_ns, 5 * SEC);
	assert_int_equal(slow->trigger.cooldown_ns, 600 * SEC);
	assert_int_equal(slow->trigger.max_per_hour, 20);
	assert_string_equal(hot->name, "hot");
	assert_int_equal(hot->type, RP_RULE_COUNTER_ABOVE);
	assert_string_equal(hot->counter, "gpu_temp");
	assert_true(hot->has_threshold && hot->threshold == -1500);
	assert_int_equal(hot->for_ns, 2 * SEC);
	assert_int_equal(hot->trigger.before_ns, 10 * SEC);
	assert_int_equal(hot->trigger.after_ns, SEC);
	assert_int_equal(hot->trigger.cooldown_ns, 60 * SEC);
	assert_int_equal(hot->trigger.max_per_hour, 3);

	static char many[4096];
	size_t o = 0;
	for (int i = 0; i <= RP_CONFIG_MAX_RULES; i++)
		o += (size_t)snprintf(many + o, sizeof(many) - o, "[rule.r%d]\n", i);
	const struct bad_file bad[] = {
		{"[alertmanager]\nrun_label = 1job\n", -EINVAL, 2,
		 "[alertmanager] run_label: '1job' is not a label name"},
		{"[alertmanager]\nrun_label = a-b\n", -EINVAL, 2,
		 "[alertmanager] run_label: 'a-b' is not a label name"},
		{"[alertmanager]\nmax_per_hour = 0\n", -ERANGE, 2,
		 "[alertmanager] max_per_hour: '0' is outside 1..3600"},
		{"[alertmanager]\nbogus = 1\n", -EINVAL, 2,
		 "unknown key 'bogus' in [alertmanager]; known keys: before, after, run_label, cooldown, "
		 "max_per_hour"},
		{"[rule.x]\ntype = fast\n", -EINVAL, 2,
		 "[rule.x] type: 'fast' is not one of slow_range, counter_above"},
		{"[rule.x]\nfactor = 1\n", -ERANGE, 2, "[rule.x] factor: '1' is outside (1, 1000]"},
		{"[rule.x]\nthreshold = hot\n", -EINVAL, 2, "[rule.x] threshold: 'hot' is not a finite number"},
		{"[rule.x]\nthreshold = inf\n", -EINVAL, 2, "[rule.x] threshold: 'inf' is not a finite number"},
		{"[rule.x]\nwindow = 0\n", -ERANGE, 2, "[rule.x] window: '0' is outside 1..1000"},
		{"[rule.x]\nrange =\n", -EINVAL, 2, "[rule.x] range: empty value"},
		{"[rule.x]\nfor = 10\n", -EINVAL, 2, "[rule.x] for: '10': add a unit"},
		{"[rule.x y]\n", -EINVAL, 1, "[rule.x y]: rule name 'x y': ' ' is not allowed"},
		{"[rule.x]\ncount = a\n", -EINVAL, 2,
		 "unknown key 'count' in [rule.x]; known keys: type, range, factor, window, counter, "
		 "threshold, for, before, after, cooldown, max_per_hour"},
		{many, -E2BIG, RP_CONFIG_MAX_RULES + 1, "[rule.r32]: too many rules; at most 32"},
	};
	expect_bad(bad, sizeof(bad) / sizeof(bad[0]));

	static const struct {
		const char *text, *msg;
	} unchecked[] = {
		{"[rule.x]\nrange = a\n", "[rule.x] has no type; set type = slow_range or counter_above"},
		{"[rule.x]\ntype = slow_range\n", "[rule.x] is a slow_range rule without a range"},
		{"[rule.x]\ntype = slow_range\nrange = a\nthreshold = 3\n",
		 "[rule.x] is a slow_range rule: counter and threshold are for counter_above rules"},
		{"[rule.x]\ntype = counter_above\ncounter = a\n",
		 "[rule.x] is a counter_above rule: set both counter and threshold"},
		{"[rule.x]\ntype = counter_above\ncounter = a\nthreshold = 1\nrange = b\n",
		 "[rule.x] is a counter_above rule: range is for slow_range rules"},
		{"[alertmanager]\nbefore = 59m\nafter = 2m\n",
		 "[alertmanager] before 59m + after 2m is longer than [sessions] max_duration 1h"},
		{"[rule.x]\ntype = slow_range\nrange = a\nbefore = 2h\n",
		 "[rule.x] before 2h + after 5s is longer than [sessions] max_duration 1h"},
	};
	for (size_t i = 0; i < sizeof(unchecked) / sizeof(unchecked[0]); i++) {
		if (load_text(&c, unchecked[i].text, &err))
			fail_msg("case %zu: %s", i, err.msg);
		assert_int_equal(rp_config_check(&c, &err), -EINVAL);
		if (strncmp(err.msg, unchecked[i].msg, strlen(unchecked[i].msg)))
			fail_msg("case %zu:\n got: %s\nwant: %s", i, err.msg, unchecked[i].msg);
	}
}

/* print -> load gives the same configuration, byte for byte. */
static void round_trip(void **state)
{
	(void)state;
	const char *inputs[] = {
		"",
		full,
		"[daemon]\npoll_interval = 1.234567ms\nseal_interval = 59.999999999s\n"
		"[rings]\nbudget = 1234567\nslot_size = 12KiB\n[ring.gpu0]\n[ring.x.y-z_1]\n"
		"budget = 3MiB\n[sessions]\ndefault_last=1h0.5s\nmax_duration=2h\n",
		"[alertmanager]\nbefore = 1.5s\nrun_label = team\n[rule.a]\ntype = slow_range\n"
		"range = x y\nfactor = 2.75\n[rule.b]\ntype = counter_above\ncounter = c\n"
		"threshold = 0.1\nfor = 3s\n[rule.c]\nmax_per_hour = 7\n",
		"[host_metrics]\nenabled = false\ninterval = 250ms\n",
		"[psi]\nenabled = false\ninterval = 2.5s\n",
		"[ring.gpu1]\nmax_age = none\n[rings]\nmax_age = 2h\n[ring.gpu2]\nmax_age = 30m\n",
		"[xla]\nendpoints = 127.0.0.1:9012,[::1]:80\nwindow = 2.5s\nhost_tracer_level = 3\n"
		"device_tracer_level = 0\npython_tracer_level = 1\n",
		"[sampler]\nfrequency = 999\npids = 42, 7,4194304\ncgroup = /sys/fs/cgroup/job\n",
	};
	char printed[96];
	snprintf(printed, sizeof(printed), "%s/printed.conf", dir);
	for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
		struct rp_config a, b;
		struct rp_err err = {0};
		if (load_text(&a, inputs[i], &err))
			fail_msg("input %zu: %s", i, err.msg);
		FILE *f = fopen(printed, "w");
		assert_non_null(f);
		rp_config_print(&a, f);
		assert_int_equal(fclose(f), 0);
		rp_config_defaults(&b);
		b.poll_interval_ns = 1; /* the printed form must set every key */
		b.producer_ring_size = 1;
		b.host_metrics_enabled = !a.host_metrics_enabled;
		b.host_metrics_interval_ns = 1;
		b.psi_enabled = !a.psi_enabled;
		b.psi_interval_ns = 1;
		strcpy(b.default_run, "zzz");
		if (rp_config_load(&b, printed, &err))
			fail_msg("input %zu, printed form: %s", i, err.msg);
		assert_string_equal(a.socket, b.socket);
		assert_int_equal(a.poll_interval_ns, b.poll_interval_ns);
		assert_int_equal(a.nrings, b.nrings);
		assert_memory_equal(&a, &b, sizeof(a));
	}
	unlink(printed);
}

/* deploy/ringprofd.conf.example (argv[1]) stays valid and uses every key. */
static const char *example;

static void example_file(void **state)
{
	(void)state;
	struct rp_config c;
	struct rp_err err = {0};
	assert_non_null(example);
	rp_config_defaults(&c);
	if (rp_config_load(&c, example, &err) || rp_config_check(&c, &err))
		fail_msg("%s", err.msg);
	assert_string_not_equal(c.tcp_listen, "");
	assert_int_equal(c.nrings, 2);
	assert_int_equal(c.nrules, 2);
}

int main(int argc, char **argv)
{
	example = argc > 1 ? argv[1] : NULL;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_sane), cmocka_unit_test(default_paths),
		cmocka_unit_test(load_valid),    cmocka_unit_test(ring_fallback),
		cmocka_unit_test(sampler_pids),
		cmocka_unit_test(load_errors),   cmocka_unit_test(missing_file),
		cmocka_unit_test(check_rules),   cmocka_unit_test(triggers),
		cmocka_unit_test(round_trip),
		cmocka_unit_test(example_file),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
