#include "control.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "parse.h"
#include "session.h"

#define PUMP_INTERVAL_NS 100000000ull
#define VERSION "0.1.0"

/* Snapshot latency buckets (seconds), request to session complete. */
static const double latency_bounds[] = { 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 };
#define NBOUNDS (sizeof(latency_bounds) / sizeof(latency_bounds[0]))

struct open_session {
	struct open_session *next;
	struct rp_session *s;
	enum rp_session_kind kind;
	uint64_t due_ns;        /* captures: when to stop; 0 otherwise */
	unsigned rings_added;   /* devices 0..rings_added-1 are in the session */
};

struct rp_control {
	const struct rp_config *cfg;
	struct rp_rings *rings;
	char host[256];
	uint64_t started_ns;

	/* Held while a session is created, pumped or closed: sessions are
	 * driven by one thread at a time, and ids are taken in order. */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct open_session *open;
	bool stop;
	pthread_t pump_thread;

	/* metrics */
	uint64_t sessions_total[4];     /* by enum rp_session_kind */
	uint64_t sessions_failed;
	uint64_t latency_buckets[NBOUNDS];
	uint64_t latency_count;
	double latency_sum;
	double last_freeze_s;           /* request until the window was pinned */
};

static void record_latency(struct rp_control *c, double seconds)
{
	for (size_t i = 0; i < NBOUNDS; i++)
		if (seconds <= latency_bounds[i])
			c->latency_buckets[i]++;
	c->latency_count++;
	c->latency_sum += seconds;
}

/* Add rings that appeared since the session started (a device registered
 * mid-session belongs in it too). */
static int add_new_rings(struct rp_control *c, struct open_session *o, struct rp_err *err)
{
	unsigned n = rp_rings_count(c->rings);
	for (; o->rings_added < n; o->rings_added++) {
		struct rp_ring_info info;
		if (rp_rings_info(c->rings, o->rings_added, &info) < 0)
			break;
		int rc = rp_session_add_ring(o->s, info.device, info.rf, err);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void unlink_open(struct rp_control *c, struct open_session *o)
{
	for (struct open_session **p = &c->open; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			return;
		}
}

/* Close an open session with its window ending at end_ns; returns its
 * JSON.  Called with c->lock held. */
static int finish_session(struct rp_control *c, struct open_session *o, uint64_t end_ns,
			  json_t **out, struct rp_err *err)
{
	int rc = rp_rings_flush(c->rings, err);
	if (rc == 0)
		rc = add_new_rings(c, o, err);
	if (rc == 0)
		rc = rp_session_close(o->s, end_ns, err);
	if (rc < 0 || rp_session_state_of(o->s) == RP_SESSION_FAILED)
		c->sessions_failed++;
	if (out)
		*out = rp_session_to_json(o->s);
	unlink_open(c, o);
	rp_session_free(o->s);
	free(o);
	return rc;
}

static void *pump_main(void *arg)
{
	struct rp_control *c = arg;
	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		uint64_t now = rp_clock_now_ns();
		for (struct open_session *o = c->open, *next; o; o = next) {
			next = o->next;
			struct rp_err err = { 0 };
			if (o->due_ns && now >= o->due_ns) {
				if (finish_session(c, o, o->due_ns, NULL, &err) < 0)
					fprintf(stderr, "ringprofd: capture: %s\n", err.msg);
				continue;
			}
			if (add_new_rings(c, o, &err) < 0 || rp_session_pump(o->s, &err) < 0)
				fprintf(stderr, "ringprofd: session %s: %s\n", rp_session_name(o->s), err.msg);
		}
		rp_cond_wait_ns(&c->wake, &c->lock, PUMP_INTERVAL_NS);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int rp_control_new(const struct rp_config *cfg, struct rp_rings *rings, struct rp_control **out,
		   struct rp_err *err)
{
	struct rp_control *c = calloc(1, sizeof(*c));
	if (!c)
		return rp_err_set(err, -ENOMEM, "out of memory");
	c->cfg = cfg;
	c->rings = rings;
	c->started_ns = rp_clock_now_ns();
	if (gethostname(c->host, sizeof(c->host)) < 0)
		snprintf(c->host, sizeof(c->host), "localhost");
	pthread_mutex_init(&c->lock, NULL);
	rp_cond_init_monotonic(&c->wake);
	int rc = -pthread_create(&c->pump_thread, NULL, pump_main, c);
	if (rc < 0) {
		free(c);
		return rp_err_set(err, rc, "cannot start the session thread: %s", strerror(-rc));
	}
	*out = c;
	return 0;
}

void rp_control_free(struct rp_control *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->pump_thread, NULL);
	/* Open sessions end now: what they recorded so far is kept. */
	while (c->open) {
		struct rp_err err = { 0 };
		uint64_t end = c->open->due_ns && c->open->due_ns < rp_clock_now_ns()
				       ? c->open->due_ns : rp_clock_now_ns();
		if (finish_session(c, c->open, end, NULL, &err) < 0)
			fprintf(stderr, "ringprofd: closing session: %s\n", err.msg);
	}
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Open a session over every ring; called with c->lock held. */
static int open_session(struct rp_control *c, struct rp_session_opts *o,
			struct open_session **out, struct rp_err *err)
{
	struct open_session *os = calloc(1, sizeof(*os));
	if (!os)
		return rp_err_set(err, -ENOMEM, "out of memory");
	os->kind = o->kind;
	int rc = rp_session_open(o, &os->s, err);
	if (rc == 0)
		rc = add_new_rings(c, os, err);
	if (rc < 0) {
		if (os->s)
			rp_session_free(os->s);
		free(os);
		return rc;
	}
	c->sessions_total[o->kind]++;
	*out = os;
	return 0;
}

static void fill_opts(struct rp_control *c, struct rp_session_opts *o, const char *name,
		      const char *run, const char *source, const char *reason)
{
	o->logdir = c->cfg->logdir;
	o->run = run[0] ? run : c->cfg->default_run;
	o->id = name[0] ? name : NULL;
	o->host = c->host;
	o->source = source[0] ? source : "api";
	o->reason = reason[0] ? reason : NULL;
	o->wall_offset_ns = rp_clock_wall_offset_ns();
}

static int op_snapshot(void *ctx, const struct rp_snapshot_req *req, json_t **out,
		       struct rp_err *err)
{
	struct rp_control *c = ctx;
	uint64_t t_req = rp_clock_now_ns();
	struct rp_session_opts o = { .kind = RP_SESSION_SNAPSHOT };
	fill_opts(c, &o, req->name, req->run, req->source, req->reason);
	uint64_t end = t_req;
	if (req->has_end) {
		int64_t host_end = req->end_wall_ns - o.wall_offset_ns;
		if (host_end < 0)
			return rp_err_set(err, -EINVAL,
					  "end time lies before this host booted: nothing was recorded then");
		if ((uint64_t)host_end < end)
			end = (uint64_t)host_end;
	}
	uint64_t last = req->last_ns ? req->last_ns : c->cfg->default_last_ns;
	o.start_ns = end > last ? end - last : 0;
	o.end_ns = end;

	/* Pin the window first, then seal up to now (finish_session flushes):
	 * from the pin on, nothing in the window can be overwritten. */
	pthread_mutex_lock(&c->lock);
	struct open_session *os;
	int rc = open_session(c, &o, &os, err);
	if (rc == 0) {
		c->last_freeze_s = (double)(rp_clock_now_ns() - t_req) / 1e9;
		os->next = c->open; /* listed while it is written */
		c->open = os;
		rc = finish_session(c, os, end, out, err);
		record_latency(c, (double)(rp_clock_now_ns() - t_req) / 1e9);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int op_session_start(void *ctx, const struct rp_session_req *req, json_t **out,
			    struct rp_err *err)
{
	struct rp_control *c = ctx;
	struct rp_session_opts o = { .kind = req->duration_ns ? RP_SESSION_CAPTURE : RP_SESSION_MANUAL };
	fill_opts(c, &o, req->name, req->run, req->source, req->reason);
	o.start_ns = rp_clock_now_ns();
	o.end_ns = req->duration_ns ? o.start_ns + req->duration_ns : UINT64_MAX;
	pthread_mutex_lock(&c->lock);
	struct open_session *os;
	int rc = open_session(c, &o, &os, err);
	if (rc == 0) {
		os->due_ns = req->duration_ns ? o.end_ns : 0;
		os->next = c->open;
		c->open = os;
		*out = rp_session_to_json(os->s);
		pthread_cond_signal(&c->wake);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static struct open_session *find_open(struct rp_control *c, const char *id)
{
	for (struct open_session *o = c->open; o; o = o->next)
		if (strcmp(rp_session_name(o->s), id) == 0)
			return o;
	return NULL;
}

/* Find a finished session's manifest on disk: <logdir>/<run>/plugins/profile/<id>. */
static json_t *load_manifest(struct rp_control *c, const char *id)
{
	DIR *d = opendir(c->cfg->logdir);
	if (!d)
		return NULL;
	json_t *found = NULL;
	struct dirent *e;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[PATH_MAX];
		if ((size_t)snprintf(path, sizeof(path), "%s/%s/plugins/profile/%s/manifest.json",
				     c->cfg->logdir, e->d_name, id) < sizeof(path))
			found = json_load_file(path, 0, NULL);
	}
	closedir(d);
	return found;
}

static int op_session_stop(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	struct rp_control *c = ctx;
	pthread_mutex_lock(&c->lock);
	struct open_session *o = find_open(c, id);
	int rc;
	if (o) {
		uint64_t now = rp_clock_now_ns();
		rc = finish_session(c, o, o->due_ns && o->due_ns < now ? o->due_ns : now, out, err);
	} else {
		json_t *m = load_manifest(c, id);
		rc = m ? rp_err_set(err, -EALREADY, "session %s is not open (it has already stopped)", id)
		       : rp_err_set(err, -ENOENT, "no session %s: `ringprof sessions` lists them", id);
		json_decref(m);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

static int op_session_get(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	struct rp_control *c = ctx;
	pthread_mutex_lock(&c->lock);
	struct open_session *o = find_open(c, id);
	*out = o ? rp_session_to_json(o->s) : load_manifest(c, id);
	pthread_mutex_unlock(&c->lock);
	if (!*out)
		return rp_err_set(err, -ENOENT, "no session %s: `ringprof sessions` lists them", id);
	return 0;
}

static int by_id(const void *a, const void *b)
{
	const char *x = json_string_value(json_object_get(*(json_t *const *)a, "id"));
	const char *y = json_string_value(json_object_get(*(json_t *const *)b, "id"));
	return strcmp(x ? x : "", y ? y : "");
}

/* Every finished session under the log directory, oldest id first. */
static void list_manifests(struct rp_control *c, json_t *list)
{
	DIR *runs = opendir(c->cfg->logdir);
	if (!runs)
		return;
	size_t start = json_array_size(list);
	struct dirent *r;
	while ((r = readdir(runs))) {
		if (r->d_name[0] == '.')
			continue;
		char dir[PATH_MAX];
		if ((size_t)snprintf(dir, sizeof(dir), "%s/%s/plugins/profile", c->cfg->logdir,
				     r->d_name) >= sizeof(dir))
			continue;
		DIR *sessions = opendir(dir);
		if (!sessions)
			continue;
		struct dirent *s;
		while ((s = readdir(sessions))) {
			char path[PATH_MAX];
			if (s->d_name[0] == '.' ||
			    (size_t)snprintf(path, sizeof(path), "%s/%s/manifest.json", dir,
					     s->d_name) >= sizeof(path))
				continue;
			json_t *m = json_load_file(path, 0, NULL);
			if (m)
				json_array_append_new(list, m);
		}
		closedir(sessions);
	}
	closedir(runs);
	size_t n = json_array_size(list) - start;
	json_t **items = malloc(n * sizeof(*items) + 1);
	for (size_t i = 0; i < n; i++)
		items[i] = json_incref(json_array_get(list, start + i));
	qsort(items, n, sizeof(*items), by_id);
	for (size_t i = 0; i < n; i++)
		json_array_set_new(list, start + i, items[i]);
	free(items);
}

static int op_session_list(void *ctx, json_t **out, struct rp_err *err)
{
	(void)err;
	struct rp_control *c = ctx;
	json_t *list = json_array();
	pthread_mutex_lock(&c->lock);
	list_manifests(c, list);
	for (struct open_session *o = c->open; o; o = o->next)
		json_array_append_new(list, rp_session_to_json(o->s));
	pthread_mutex_unlock(&c->lock);
	*out = json_pack("{s:o}", "sessions", list);
	return 0;
}

static json_t *ring_json(const struct rp_ring_info *i)
{
	const struct rp_ringfile_stats *f = &i->file;
	uint64_t capacity = (uint64_t)f->slot_count * f->slot_size;
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:b}",
			 "device", i->device, "path", i->path,
			 "budget_bytes", (json_int_t)i->budget_bytes,
			 "slot_size", (json_int_t)f->slot_size, "slots", (json_int_t)f->slot_count,
			 "chunks", (json_int_t)f->chunks, "bytes_used", (json_int_t)f->bytes_used,
			 "fill", capacity ? (double)f->chunks * f->slot_size / (double)capacity : 0.0,
			 "events", (json_int_t)f->events, "raw_bytes", (json_int_t)f->raw_bytes,
			 "horizon_s", f->chunks ? (double)(f->last_ts - f->first_ts) / 1e9 : 0.0,
			 "first_ns", (json_int_t)f->first_ts, "last_ns", (json_int_t)f->last_ts,
			 "dropped", (json_int_t)i->drain.producer_drops,
			 "producers", (json_int_t)i->drain.producers, "direct_io", f->direct_io);
}

static int op_status(void *ctx, json_t **out, struct rp_err *err)
{
	(void)err;
	struct rp_control *c = ctx;
	json_t *rings = json_array();
	struct rp_ring_info info;
	for (unsigned i = 0; rp_rings_info(c->rings, i, &info) == 0; i++)
		json_array_append_new(rings, ring_json(&info));
	json_t *collectors = json_array();
	struct rp_collector_info col;
	for (unsigned i = 0; rp_rings_collector(c->rings, i, &col) == 0; i++) {
		json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:i}", "name", col.name, "state", col.state,
				      "events", (json_int_t)col.events, "lost", (json_int_t)col.lost,
				      "frequency_hz", (int)col.frequency_hz);
		if (col.reason[0])
			json_object_set_new(o, "reason", json_string(col.reason));
		json_array_append_new(collectors, o);
	}
	json_t *open = json_array();
	pthread_mutex_lock(&c->lock);
	for (struct open_session *o = c->open; o; o = o->next)
		json_array_append_new(open, json_string(rp_session_name(o->s)));
	pthread_mutex_unlock(&c->lock);
	uint64_t now = rp_clock_now_ns();
	*out = json_pack("{s:s, s:i, s:s, s:f, s:s, s:I, s:I, s:s, s:s, s:o, s:o, s:o}",
			 "version", VERSION, "pid", (int)getpid(), "host", c->host,
			 "uptime_s", (double)(now - c->started_ns) / 1e9,
			 "clock", "CLOCK_MONOTONIC", "now_ns", (json_int_t)now,
			 "wall_offset_ns", (json_int_t)rp_clock_wall_offset_ns(),
			 "state_dir", c->cfg->state_dir, "logdir", c->cfg->logdir,
			 "rings", rings, "collectors", collectors, "open_sessions", open);
	return *out ? 0 : -ENOMEM;
}

static int op_metrics(void *ctx, char **text, struct rp_err *err)
{
	struct rp_control *c = ctx;
	size_t len;
	FILE *f = open_memstream(text, &len);
	if (!f)
		return rp_err_set(err, -ENOMEM, "out of memory");
	static const struct {
		const char *name, *type, *help;
	} ring_metrics[] = {
		{ "ringprof_ring_fill_ratio", "gauge", "Fraction of the ring's slots holding data." },
		{ "ringprof_ring_horizon_seconds", "gauge", "Time span the ring holds now." },
		{ "ringprof_ring_events", "gauge", "Events held in the ring now." },
		{ "ringprof_ring_bytes", "gauge", "Compressed bytes held in the ring now." },
		{ "ringprof_ring_budget_bytes", "gauge", "Configured size of the ring file." },
		{ "ringprof_ring_dropped_events_total", "counter", "Events producers dropped because their ring was full." },
		{ "ringprof_ring_ingested_events_total", "counter", "Events taken into the ring since the daemon started." },
		{ "ringprof_producers", "gauge", "Producer rings attached to the device ring." },
	};
	struct rp_ring_info info[RP_MAX_DEVICES];
	unsigned n = 0;
	while (n < RP_MAX_DEVICES && rp_rings_info(c->rings, n, &info[n]) == 0)
		n++;
	for (size_t m = 0; m < sizeof(ring_metrics) / sizeof(ring_metrics[0]); m++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", ring_metrics[m].name, ring_metrics[m].help,
			ring_metrics[m].name, ring_metrics[m].type);
		for (unsigned i = 0; i < n; i++) {
			const struct rp_ringfile_stats *s = &info[i].file;
			double v[] = {
				s->slot_count ? (double)s->chunks / s->slot_count : 0,
				s->chunks ? (double)(s->last_ts - s->first_ts) / 1e9 : 0,
				(double)s->events, (double)s->bytes_used, (double)info[i].budget_bytes,
				(double)info[i].drain.producer_drops, (double)info[i].drain.events,
				(double)info[i].drain.producers,
			};
			fprintf(f, "%s{device=\"%s\"} %.9g\n", ring_metrics[m].name, info[i].device, v[m]);
		}
	}
	fprintf(f, "# HELP ringprof_collector_events_total Events a collector handed to its ring.\n"
		   "# TYPE ringprof_collector_events_total counter\n");
	struct rp_collector_info col;
	for (unsigned i = 0; rp_rings_collector(c->rings, i, &col) == 0; i++)
		fprintf(f, "ringprof_collector_events_total{collector=\"%s\"} %llu\n", col.name,
			(unsigned long long)col.events);
	fprintf(f, "# HELP ringprof_collector_lost_total Events a collector lost before its ring.\n"
		   "# TYPE ringprof_collector_lost_total counter\n");
	for (unsigned i = 0; rp_rings_collector(c->rings, i, &col) == 0; i++)
		fprintf(f, "ringprof_collector_lost_total{collector=\"%s\"} %llu\n", col.name,
			(unsigned long long)col.lost);
	fprintf(f, "# HELP ringprof_collector_running Whether a collector runs (1) or not (0).\n"
		   "# TYPE ringprof_collector_running gauge\n");
	for (unsigned i = 0; rp_rings_collector(c->rings, i, &col) == 0; i++)
		fprintf(f, "ringprof_collector_running{collector=\"%s\"} %d\n", col.name,
			!strcmp(col.state, "running"));
	pthread_mutex_lock(&c->lock);
	static const char *const kinds[] = { [RP_SESSION_SNAPSHOT] = "snapshot",
					     [RP_SESSION_MANUAL] = "session",
					     [RP_SESSION_CAPTURE] = "capture" };
	fprintf(f, "# HELP ringprof_sessions_total Sessions started, by kind.\n"
		   "# TYPE ringprof_sessions_total counter\n");
	for (int k = RP_SESSION_SNAPSHOT; k <= RP_SESSION_CAPTURE; k++)
		fprintf(f, "ringprof_sessions_total{kind=\"%s\"} %llu\n", kinds[k],
			(unsigned long long)c->sessions_total[k]);
	unsigned open = 0;
	for (struct open_session *o = c->open; o; o = o->next)
		open++;
	fprintf(f, "# HELP ringprof_sessions_failed_total Sessions that could not be written.\n"
		   "# TYPE ringprof_sessions_failed_total counter\nringprof_sessions_failed_total %llu\n",
		(unsigned long long)c->sessions_failed);
	fprintf(f, "# HELP ringprof_sessions_open Sessions open now.\n"
		   "# TYPE ringprof_sessions_open gauge\nringprof_sessions_open %u\n", open);
	fprintf(f, "# HELP ringprof_snapshot_freeze_seconds Last snapshot: request until its window could no longer be overwritten.\n"
		   "# TYPE ringprof_snapshot_freeze_seconds gauge\nringprof_snapshot_freeze_seconds %.9g\n",
		c->last_freeze_s);
	fprintf(f, "# HELP ringprof_snapshot_seconds Snapshot request until the session is complete on disk.\n"
		   "# TYPE ringprof_snapshot_seconds histogram\n");
	for (size_t i = 0; i < NBOUNDS; i++)
		fprintf(f, "ringprof_snapshot_seconds_bucket{le=\"%g\"} %llu\n", latency_bounds[i],
			(unsigned long long)c->latency_buckets[i]);
	fprintf(f, "ringprof_snapshot_seconds_bucket{le=\"+Inf\"} %llu\n"
		   "ringprof_snapshot_seconds_sum %.9g\nringprof_snapshot_seconds_count %llu\n",
		(unsigned long long)c->latency_count, c->latency_sum,
		(unsigned long long)c->latency_count);
	pthread_mutex_unlock(&c->lock);
	fclose(f);
	return 0;
}

const struct rp_api_ops rp_control_ops = {
	.status = op_status,
	.snapshot = op_snapshot,
	.session_start = op_session_start,
	.session_stop = op_session_stop,
	.session_list = op_session_list,
	.session_get = op_session_get,
	.metrics = op_metrics,
};
