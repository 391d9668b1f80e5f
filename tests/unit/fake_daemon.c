/* A stand-in for ringprofd for CLI tests: the real control API (api.c) on
 * the socket given as argv[1], with ops that keep sessions in memory and
 * write nothing.  Runs until SIGTERM or SIGINT.
 *
 * Canned behaviour the tests rely on: a snapshot named "busy" fails with
 * -ENOSPC; in run "short" a snapshot covers half of what was asked; a
 * capture completes once its duration has passed (checked on GET). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"

#define MAX_SESSIONS 64
#define DEFAULT_LAST_NS 30000000000ll

struct session {
	char id[RP_NAME_LEN];
	char run[RP_NAME_LEN];
	const char *kind;
	bool open, keep;
	int64_t start_ns, end_ns, covered_start_ns, created_ns;
	uint64_t duration_ns;  /* captures */
	unsigned cpu_sample_hz;
};

struct fake {
	pthread_mutex_t lock;  /* ops run on the API's connection threads */
	struct session s[MAX_SESSIONS];
	unsigned n, seq;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static json_t *window(int64_t start, int64_t end)
{
	return json_pack("{s:I,s:I,s:I,s:I}", "start_ns", (json_int_t)start, "end_ns", (json_int_t)end,
			 "start_wall_ns", (json_int_t)start, "end_wall_ns", (json_int_t)end);
}

static json_t *session_json(const struct session *s)
{
	char path[192];
	snprintf(path, sizeof(path), "/tmp/fake-sessions/%s/plugins/profile/%s", s->run, s->id);
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:o}", "id", s->id, "run", s->run,
			      "kind", s->kind, "state", s->open ? "open" : "complete",
			      "path", path, "host", "fakehost",
			      "requested", window(s->start_ns, s->end_ns));
	json_object_set_new(j, "keep", json_boolean(s->keep));
	json_t *trigger = json_pack("{s:s,s:I}", "source", "cli", "created_wall_ns",
				    (json_int_t)s->created_ns);
	if (s->cpu_sample_hz)
		json_object_set_new(trigger, "cpu_sample_hz", json_integer(s->cpu_sample_hz));
	json_object_set_new(j, "trigger", trigger);
	if (!s->open) {
		json_object_set_new(j, "covered", window(s->covered_start_ns, s->end_ns));
		json_object_set_new(j, "devices",
				    json_pack("[{s:s,s:i,s:i,s:i,s:i},{s:s,s:i,s:i,s:i,s:i}]",
					      "device", "host", "events", 1200, "chunks", 3, "dropped", 0, "bytes", 48000,
					      "device", "gpu0", "events", 34, "chunks", 1, "dropped", 2, "bytes", 2100));
	}
	return j;
}

/* A new session, its id from name or a counter; NULL when full. */
static struct session *add(struct fake *f, const char *name, const char *run, const char *kind)
{
	if (f->n == MAX_SESSIONS)
		return NULL;
	struct session *s = &f->s[f->n++];
	*s = (struct session){ .kind = kind, .open = true, .start_ns = now_ns(),
			       .created_ns = now_ns() };
	if (name[0])
		snprintf(s->id, sizeof(s->id), "%s", name);
	else
		snprintf(s->id, sizeof(s->id), "%s-%u", kind, ++f->seq);
	snprintf(s->run, sizeof(s->run), "%s", run[0] ? run : "default");
	return s;
}

static struct session *find(struct fake *f, const char *id, struct rp_err *err)
{
	for (unsigned i = 0; i < f->n; i++)
		if (!strcmp(f->s[i].id, id))
			return &f->s[i];
	rp_err_set(err, -ENOENT, "no session '%s': list them with ringprof sessions", id);
	return NULL;
}

static void complete(struct session *s, int64_t end)
{
	s->open = false;
	s->end_ns = end;
	s->covered_start_ns = s->start_ns;
}

static int op_status(void *ctx, json_t **out, struct rp_err *err)
{
	(void)err;
	struct fake *f = ctx;
	json_t *open = json_array();
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->n; i++)
		if (f->s[i].open)
			json_array_append_new(open, json_string(f->s[i].id));
	pthread_mutex_unlock(&f->lock);
	*out = json_pack("{s:s,s:i,s:s,s:f,s:s,s:s,s:[{s:s,s:I,s:I,s:f,s:f,s:i,s:i,s:i},"
			 "{s:s,s:I,s:I,s:f,s:f,s:i,s:i,s:i}],s:o}",
			 "version", "0.1.0", "pid", 4242, "host", "fakehost", "uptime_s", 81.2,
			 "state_dir", "/tmp/fake-rings", "logdir", "/tmp/fake-sessions", "rings",
			 "device", "host", "budget_bytes", (json_int_t)64 << 20, "bytes_used", (json_int_t)5 << 20,
			 "fill", 0.078, "horizon_s", 41.0, "events", 99000, "dropped", 0, "producers", 2,
			 "device", "gpu0", "budget_bytes", (json_int_t)256 << 20, "bytes_used", (json_int_t)1 << 19,
			 "fill", 0.002, "horizon_s", 1.5, "events", 12, "dropped", 7, "producers", 1,
			 "open_sessions", open);
	json_object_set_new(*out, "collectors",
			    json_pack("[{s:s,s:s,s:s,s:i,s:i,s:i}]", "name", "cpu_sampler", "state",
				      "disabled", "reason", "loading the CPU sampler needs CAP_BPF and "
				      "CAP_PERFMON (or root): run ringprofd as root or grant them",
				      "events", 0, "lost", 0, "frequency_hz", 0));
	return 0;
}

static int op_snapshot(void *ctx, const struct rp_snapshot_req *req, json_t **out,
		       struct rp_err *err)
{
	struct fake *f = ctx;
	if (!strcmp(req->name, "busy"))
		return rp_err_set(err, -ENOSPC, "the log directory /tmp/fake-sessions is full: free some space");
	int64_t end = req->has_end ? req->end_wall_ns : now_ns();
	int64_t last = req->last_ns ? (int64_t)req->last_ns : DEFAULT_LAST_NS;
	pthread_mutex_lock(&f->lock);
	struct session *s = add(f, req->name, req->run, "snapshot");
	if (s) {
		s->start_ns = end - last;
		complete(s, end);
		if (!strcmp(s->run, "short"))
			s->covered_start_ns = end - last / 2;
		*out = session_json(s);
	}
	pthread_mutex_unlock(&f->lock);
	return s ? 0 : rp_err_set(err, -EAGAIN, "too many sessions in the fake daemon");
}

static int op_start(void *ctx, const struct rp_session_req *req, json_t **out, struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	struct session *s = find(f, req->name, NULL);
	if (s && s->open) {
		pthread_mutex_unlock(&f->lock);
		return rp_err_set(err, -EEXIST, "session name '%s' is in use", req->name);
	}
	s = add(f, req->name, req->run, req->duration_ns ? "capture" : "session");
	if (s) {
		s->duration_ns = req->duration_ns;
		s->cpu_sample_hz = req->cpu_sample_hz;
		s->end_ns = s->start_ns + (int64_t)req->duration_ns;
		*out = session_json(s);
	}
	pthread_mutex_unlock(&f->lock);
	return s ? 0 : rp_err_set(err, -EAGAIN, "too many sessions in the fake daemon");
}

static int op_stop(void *ctx, const char *id, const struct rp_stop_req *req, json_t **out,
		   struct rp_err *err)
{
	(void)req;
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	struct session *s = find(f, id, err);
	int rc = s ? 0 : -ENOENT;
	if (s && !s->open)
		rc = rp_err_set(err, -EALREADY, "session '%s' is already complete", id);
	if (rc == 0) {
		complete(s, now_ns());
		*out = session_json(s);
	}
	pthread_mutex_unlock(&f->lock);
	return rc;
}

static int op_keep(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	struct session *s = find(f, id, err);
	if (s) {
		s->keep = true;
		*out = session_json(s);
	}
	pthread_mutex_unlock(&f->lock);
	return s ? 0 : -ENOENT;
}

static int op_get(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	struct fake *f = ctx;
	pthread_mutex_lock(&f->lock);
	struct session *s = find(f, id, err);
	if (s) {
		if (s->open && s->duration_ns && now_ns() >= s->end_ns)
			complete(s, s->end_ns);
		*out = session_json(s);
	}
	pthread_mutex_unlock(&f->lock);
	return s ? 0 : -ENOENT;
}

static int op_list(void *ctx, json_t **out, struct rp_err *err)
{
	(void)err;
	struct fake *f = ctx;
	json_t *a = json_array();
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < f->n; i++)
		json_array_append_new(a, session_json(&f->s[i]));
	pthread_mutex_unlock(&f->lock);
	*out = json_pack("{s:o}", "sessions", a);
	return 0;
}

static int op_metrics(void *ctx, char **text, struct rp_err *err)
{
	(void)ctx;
	*text = strdup("ringprof_sessions_open 0\n");
	return *text ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fake_daemon SOCKET\n");
		return 2;
	}
	/* Block the signals before the API's threads start, so they inherit
	 * the mask and sigwait below gets them. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);

	static struct fake f = { .lock = PTHREAD_MUTEX_INITIALIZER };
	static const struct rp_api_ops ops = {
		.status = op_status, .snapshot = op_snapshot, .session_start = op_start,
		.session_stop = op_stop, .session_list = op_list, .session_get = op_get,
		.metrics = op_metrics, .session_keep = op_keep,
	};
	struct rp_api_opts o = { .socket_path = argv[1], .max_duration_ns = 3600000000000ull };
	struct rp_api *api;
	struct rp_err err = { 0 };
	if (rp_api_start(&o, &ops, &f, &api, &err) < 0) {
		fprintf(stderr, "fake_daemon: %s\n", err.msg);
		return 1;
	}
	int sig;
	sigwait(&sigs, &sig);
	rp_api_stop(api);
	return 0;
}
