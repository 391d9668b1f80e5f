/* ringprofd's profiler service (daemon/profsvc.c) against a fake window,
 * driven by the project's own ProfilerService client (collectors/xla):
 * the windows it asks for, what it answers, and its refusals. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "grpc.h"
#include "profiler.h"
#include "profiler_service.pb-c.h"
#include "profsvc.h"

#define MS 1000000ull
#define TIMEOUT_MS 10000

/* The test double: the windows asked for, and the answer. */
struct fake {
	pthread_mutex_t lock;
	int calls;
	uint64_t start_ns, end_ns, called_ns;
	char reason[128];
	int rc; /* 0: answer "XSPACE" */
};

static int fake_window(void *ctx, uint64_t start_ns, uint64_t end_ns, const char *reason,
		       uint8_t **buf, size_t *len, struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	f->calls++;
	f->start_ns = start_ns, f->end_ns = end_ns, f->called_ns = rp_clock_now_ns();
	snprintf(f->reason, sizeof(f->reason), "%s", reason);
	int rc = f->rc;
	pthread_mutex_unlock(&f->lock);
	if (rc < 0)
		return rp_err_set(err, rc, "the rings are on fire");
	*buf = (uint8_t *)strdup("XSPACE");
	*len = 6;
	return 0;
}

struct env {
	struct fake fake;
	struct rp_profsvc *svc;
	char addr[64];
};

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static struct rp_profsvc_opts opts_for(struct env *e, const char *listen)
{
	return (struct rp_profsvc_opts){
		.listen = listen, .snapshot_ns = 2000 * MS, .max_duration_ns = 60000 * MS,
		.request_timeout_ns = 2000 * MS, .window = fake_window, .ctx = &e->fake,
	};
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	pthread_mutex_init(&e->fake.lock, NULL);
	snprintf(e->addr, sizeof(e->addr), "127.0.0.1:%d", free_port());
	struct rp_profsvc_opts o = opts_for(e, e->addr);
	struct rp_err err = { 0 };
	if (rp_profsvc_start(&o, &e->svc, &err) < 0)
		fail_msg("%s", err.msg);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	rp_profsvc_stop(e->svc);
	pthread_mutex_destroy(&e->fake.lock);
	free(e);
	return 0;
}

/* A Profile of 50 ms from now: the window asked for, served after its
 * end, answered as the XSpace. */
static void profile_now(void **state)
{
	struct env *e = *state;
	struct rp_xla_profile_opts o;
	rp_xla_profile_opts_default(&o);
	o.duration_ms = 50;
	struct rp_xla_window w = { 0 };
	struct rp_err err = { 0 };
	uint64_t before = rp_clock_now_ns();
	if (rp_xla_profile(e->addr, &o, TIMEOUT_MS, 1 << 20, &w, &err) < 0)
		fail_msg("%s", err.msg);
	uint64_t after = rp_clock_now_ns();
	assert_int_equal(w.len, 6);
	assert_memory_equal(w.xspace, "XSPACE", 6);
	assert_false(w.empty_trace);
	rp_xla_window_free(&w);
	assert_int_equal(e->fake.calls, 1);
	assert_int_equal(e->fake.end_ns - e->fake.start_ns, 50 * MS);
	assert_true(e->fake.start_ns >= before && e->fake.start_ns <= after);
	assert_true(e->fake.called_ns >= e->fake.end_ns); /* waited for the window */
	assert_non_null(strstr(e->fake.reason, "Profile from 127.0.0.1:"));
}

static size_t pack_request(Tensorflow__ProfileRequest *r, uint8_t *buf)
{
	return tensorflow__profile_request__pack(r, buf);
}

/* start_timestamp_ns 3 s back (wall clock): that past window, on the
 * host clock; the answer in tool_data "xplane.pb" only (no emit_xspace). */
static void profile_in_the_past(void **state)
{
	struct env *e = *state;
	Tensorflow__ProfileOptions po = TENSORFLOW__PROFILE_OPTIONS__INIT;
	Tensorflow__ProfileRequest r = TENSORFLOW__PROFILE_REQUEST__INIT;
	uint64_t now = rp_clock_now_ns();
	po.start_timestamp_ns = (uint64_t)rp_clock_wall_ns() - 3000 * MS;
	r.duration_ms = 1000;
	r.opts = &po;
	uint8_t req[256], *resp = NULL;
	size_t len = pack_request(&r, req), resp_len = 0;
	struct rp_err err = { 0 };
	if (rp_grpc_unary(e->addr, "/tensorflow.ProfilerService/Profile", req, len, TIMEOUT_MS,
			  1 << 20, &resp, &resp_len, &err) < 0)
		fail_msg("%s", err.msg);
	Tensorflow__ProfileResponse *pr = tensorflow__profile_response__unpack(NULL, resp_len, resp);
	assert_non_null(pr);
	assert_int_equal(pr->n_tool_data, 1);
	assert_string_equal(pr->tool_data[0]->name, "xplane.pb");
	assert_int_equal(pr->tool_data[0]->data.len, 6);
	assert_int_equal(pr->xspace.len, 0);
	tensorflow__profile_response__free_unpacked(pr, NULL);
	free(resp);
	/* Clock conversions apart (well under a second), 3 s before now. */
	int64_t off = (int64_t)(now - 3000 * MS) - (int64_t)e->fake.start_ns;
	assert_true(off > -(int64_t)(500 * MS) && off < (int64_t)(500 * MS));
	assert_int_equal(e->fake.end_ns - e->fake.start_ns, 1000 * MS);
}

static void continuous_and_snapshot(void **state)
{
	struct env *e = *state;
	struct rp_xla_profile_opts o;
	rp_xla_profile_opts_default(&o);
	struct rp_err err = { 0 };
	assert_int_equal(rp_xla_start_continuous(e->addr, &o, TIMEOUT_MS, &err), 0);
	struct rp_xla_window w = { 0 };
	if (rp_xla_get_snapshot(e->addr, TIMEOUT_MS, 1 << 20, &w, &err) < 0)
		fail_msg("%s", err.msg);
	assert_memory_equal(w.xspace, "XSPACE", 6);
	rp_xla_window_free(&w);
	assert_int_equal(e->fake.end_ns - e->fake.start_ns, 2000 * MS); /* snapshot_ns */
	assert_int_equal(rp_xla_stop_continuous(e->addr, TIMEOUT_MS, &err), 0);
	uint8_t *resp = NULL;
	size_t len = 0;
	assert_int_equal(rp_grpc_unary(e->addr, "/tensorflow.ProfilerService/Terminate",
				       (const uint8_t *)"", 0, TIMEOUT_MS, 1024, &resp, &len, &err), 0);
	assert_int_equal(len, 0);
	free(resp);
}

static void unimplemented_and_refusals(void **state)
{
	struct env *e = *state;
	uint8_t *resp = NULL;
	size_t len = 0;
	struct rp_err err = { 0 };
	assert_int_equal(rp_grpc_unary(e->addr, "/tensorflow.ProfilerService/Monitor",
				       (const uint8_t *)"", 0, TIMEOUT_MS, 1024, &resp, &len, &err),
			 -ENOSYS);
	assert_int_equal(rp_grpc_unary(e->addr, "/other.Service/Profile", (const uint8_t *)"", 0,
				       TIMEOUT_MS, 1024, &resp, &len, &err), -ENOSYS);
	/* No duration; more than max_duration; not a ProfileRequest. */
	struct rp_xla_profile_opts o;
	rp_xla_profile_opts_default(&o);
	struct rp_xla_window w = { 0 };
	o.duration_ms = 0;
	assert_int_equal(rp_xla_profile(e->addr, &o, TIMEOUT_MS, 1024, &w, &err), -EREMOTEIO);
	assert_non_null(strstr(err.msg, "duration_ms 0"));
	o.duration_ms = 61000;
	assert_int_equal(rp_xla_profile(e->addr, &o, TIMEOUT_MS, 1024, &w, &err), -EREMOTEIO);
	assert_non_null(strstr(err.msg, "max_duration"));
	assert_int_equal(rp_grpc_unary(e->addr, "/tensorflow.ProfilerService/Profile",
				       (const uint8_t *)"\xff\xff", 2, TIMEOUT_MS, 1024, &resp, &len,
				       &err), -EREMOTEIO);
	assert_non_null(strstr(err.msg, "not a tensorflow.ProfileRequest"));
	/* A window that fails is an error with the reason. */
	e->fake.rc = -EIO;
	o.duration_ms = 1;
	assert_int_equal(rp_xla_profile(e->addr, &o, TIMEOUT_MS, 1024, &w, &err), -EREMOTEIO);
	assert_non_null(strstr(err.msg, "the rings are on fire"));
	e->fake.rc = 0;
	/* Still serving. */
	assert_int_equal(rp_xla_profile(e->addr, &o, TIMEOUT_MS, 1024, &w, &err), 0);
	rp_xla_window_free(&w);
}

static void non_loopback_needs_the_key(void **state)
{
	struct env *e = *state;
	char addr[64];
	snprintf(addr, sizeof(addr), "0.0.0.0:%d", free_port());
	struct rp_profsvc_opts o = opts_for(e, addr);
	struct rp_profsvc *s = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_profsvc_start(&o, &s, &err), -EACCES);
	assert_non_null(strstr(err.msg, "[profiler_service] allow_unauthenticated = true"));
	assert_null(s);
	o.allow_unauthenticated = true;
	assert_int_equal(rp_profsvc_start(&o, &s, &err), 0);
	rp_profsvc_stop(s);
	snprintf(addr, sizeof(addr), "[::1]:%d", free_port());
	o = opts_for(e, addr);
	if (rp_profsvc_start(&o, &s, &err) == 0) /* loopback; skipped without IPv6 */
		rp_profsvc_stop(s);
	else
		assert_int_not_equal(err.code, -EACCES);
	o = opts_for(e, "nohost");
	assert_int_equal(rp_profsvc_start(&o, &s, &err), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(profile_now, setup, teardown),
		cmocka_unit_test_setup_teardown(profile_in_the_past, setup, teardown),
		cmocka_unit_test_setup_teardown(continuous_and_snapshot, setup, teardown),
		cmocka_unit_test_setup_teardown(unimplemented_and_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(non_loopback_needs_the_key, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
