#include "control.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alerts.h"
#include "clock.h"
#include "export.h"
#include "exporter.h"
#include "gate.h"
#include "job.h"
#include "parse.h"
#include "retention.h"
#include "safefs.h"
#include "session.h"

#define PUMP_INTERVAL_NS 100000000ull

/* Latency buckets (seconds) until a session is complete: from a snapshot
 * request, or from a trigger (an alert's receipt, a rule firing; a rule's
 * snapshot waits for the `after` of its window). */
static const double latency_bounds[] = { 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
					 1, 2.5, 5, 10, 30, 60 };
#define NBOUNDS (sizeof(latency_bounds) / sizeof(latency_bounds[0]))

struct latency {
	uint64_t buckets[NBOUNDS];
	uint64_t count;
	double sum;
};

enum trigger_source { TRIGGER_ALERTMANAGER, TRIGGER_RULE, NSOURCES };
static const char *const source_names[NSOURCES] = { "alertmanager", "rule" };

/* Looking at one job: the processes a session keeps the events of, and
 * the cgroup read again as it closes. */
struct job {
	bool filtered;
	struct rp_pidset pids;
	char cgroup[RP_API_CGROUP_LEN];
};

struct open_session {
	struct open_session *next;
	struct rp_session *s;
	enum rp_session_kind kind;
	uint64_t due_ns;        /* captures: when to stop; 0 otherwise */
	unsigned rings_added;   /* devices 0..rings_added-1 are in the session */
	unsigned cpu_sample_hz; /* the CPU sampling rate it asked for; 0: none */
	struct job job;
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
	/* The session thread's passes, counted under a lock of their own (a
	 * stuck pass may hold c->lock): the watchdog waits for one. */
	pthread_mutex_t beat_lock;
	pthread_cond_t beat;
	uint64_t passes;

	/* metrics */
	uint64_t sessions_total[4];     /* by enum rp_session_kind */
	uint64_t sessions_failed;
	struct latency snapshot_latency;
	double last_freeze_s;           /* request until the window was pinned */
	/* retention: a pass at start, and on the session thread after a
	 * session closes */
	bool retention_due, over_quota;
	uint64_t retention_deleted;
	uint64_t logdir_bytes, logdir_sessions;  /* as of the last pass */
	/* exports ([sessions] exports), on a thread of their own (which
	 * also takes up those an earlier run left pending); export_names:
	 * the formats, as sessions list them. */
	struct rp_exporter *exporter;
	const char *export_names[RP_EXPORT_NFORMATS + 1];
	/* One read of each new chunk per pump pass for all open sessions. */
	struct rp_session_cache *cache;
	uint64_t triggers[NSOURCES];    /* snapshots taken by trigger */
	struct latency trigger_latency;

	struct rp_rules *rules;         /* NULL: none */
	/* Alertmanager notifications may arrive concurrently (HA pairs send
	 * the same alert twice): the gate and its counts are taken under this. */
	pthread_mutex_t alerts_lock;
	struct rp_gate *alert_gate;
	uint64_t alerts_skipped[RP_GATE_NVERDICTS];
	uint64_t alerts_resolved;
};

static void record_latency(struct latency *l, double seconds)
{
	for (size_t i = 0; i < NBOUNDS; i++)
		if (seconds <= latency_bounds[i])
			l->buckets[i]++;
	l->count++;
	l->sum += seconds;
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

/* The CPU sampler runs at the highest rate an open session asked for (or
 * hz, that of a session about to open), and at least at [sampler]
 * frequency.  Called with c->lock held. */
static int set_sampler_hz(struct rp_control *c, unsigned hz, struct rp_err *err)
{
	for (struct open_session *o = c->open; o; o = o->next)
		if (o->cpu_sample_hz > hz)
			hz = o->cpu_sample_hz;
	return rp_rings_set_sampler_hz(c->rings, hz, err);
}

static void unlink_open(struct rp_control *c, struct open_session *o)
{
	for (struct open_session **p = &c->open; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			return;
		}
}

/* Adds the job a request names: its pids, and the processes of its cgroup
 * now (read from cgroupfs and /proc, which cannot stall like the log
 * directory: also under c->lock).  A second cgroup for one session is
 * refused. */
static int add_job(struct job *j, const struct rp_job_filter *f, struct rp_err *err)
{
	if (f->cgroup[0] && j->cgroup[0] && strcmp(f->cgroup, j->cgroup) != 0)
		return rp_err_set(err, -EINVAL, "the session follows cgroup %s already: one cgroup "
				  "per session (name the cgroup above both)", j->cgroup);
	int rc = 0;
	for (unsigned i = 0; rc == 0 && i < f->npids; i++)
		rc = rp_pidset_add(&j->pids, f->pids[i], err);
	char root[PATH_MAX];
	if (rc == 0 && f->cgroup[0] &&
	    (rc = rp_job_cgroup_root("/proc/self/mountinfo", root, sizeof(root), err)) == 0)
		rc = rp_job_add_cgroup(&j->pids, root, f->cgroup, err);
	if (rc == 0 && f->cgroup[0])
		snprintf(j->cgroup, sizeof(j->cgroup), "%s", f->cgroup);
	j->filtered |= rc == 0 && (f->npids || f->cgroup[0]);
	return rc;
}

/* The open session's filter into its manifest, its cgroup read once more
 * for processes that joined it.  A failure keeps what the session has:
 * the pids found before, else every process. */
static void write_job(struct open_session *o)
{
	struct job *j = &o->job;
	if (!j->filtered)
		return;
	struct rp_job_filter again = { 0 };
	snprintf(again.cgroup, sizeof(again.cgroup), "%s", j->cgroup);
	struct rp_err err = { 0 };
	if (j->cgroup[0] && add_job(j, &again, &err) < 0)
		fprintf(stderr, "ringprofd: session %s: cgroup %s read again at its end: %s; it "
			"keeps the %zu processes found before\n", rp_session_name(o->s), j->cgroup,
			err.msg, j->pids.n);
	if (rp_session_set_filter(o->s, j->pids.pids, j->pids.n, j->cgroup) < 0)
		fprintf(stderr, "ringprofd: session %s: out of memory for its process filter; "
			"its exports hold every process\n", rp_session_name(o->s));
}

/* Close an open session with its window ending at end_ns; returns its
 * JSON.  Called with c->lock held. */
static int finish_session(struct rp_control *c, struct open_session *o, uint64_t end_ns,
			  json_t **out, struct rp_err *err)
{
	int rc = rp_rings_flush(c->rings, err);
	if (rc == 0)
		rc = add_new_rings(c, o, err);
	if (rc == 0) {
		write_job(o);
		rc = rp_session_close(o->s, end_ns, err);
	}
	if (rc < 0 || rp_session_state_of(o->s) == RP_SESSION_FAILED)
		c->sessions_failed++;
	else if (c->cfg->session_exports)
		rp_exporter_queue(c->exporter, rp_session_path(o->s));
	if (out)
		*out = rp_session_to_json(o->s);
	unlink_open(c, o);
	/* Its rate ends with it; the session's chunks are sealed already. */
	struct rp_err hz_err = { 0 };
	if (o->cpu_sample_hz && set_sampler_hz(c, 0, &hz_err) < 0)
		fprintf(stderr, "ringprofd: session %s ended, but the CPU sampler keeps its rate: %s\n",
			rp_session_name(o->s), hz_err.msg);
	rp_session_free(o->s);
	rp_pidset_free(&o->job.pids);
	free(o);
	c->retention_due = true;
	pthread_cond_signal(&c->wake);
	return rc;
}

static void run_rule_triggers(struct rp_control *c);

static void report_retention(void *ctx, const char *path, uint64_t bytes,
			     const struct rp_err *err)
{
	const struct rp_config *cfg = ctx;
	char size[32], quota[32];
	rp_format_size(bytes, size, sizeof(size));
	rp_format_size(cfg->sessions_max_bytes, quota, sizeof(quota));
	if (err)
		fprintf(stderr, "ringprofd: retention: %s\n", err->msg);
	else
		fprintf(stderr, "ringprofd: retention: deleted session %s (%s) to keep the log "
			"directory within [sessions] max_count %u and max_bytes %s (0: no limit)\n",
			path, size, cfg->sessions_max_count, cfg->sessions_max_bytes ? quota : "0");
}

static void report_leftover(void *ctx, const char *path, uint64_t bytes,
			    const struct rp_err *err)
{
	(void)ctx, (void)bytes;
	if (err)
		fprintf(stderr, "ringprofd: %s\n", err->msg);
	else
		fprintf(stderr, "ringprofd: removed %s, left by a daemon of this host that "
			"stopped while writing it\n", path);
}

/* This host's leftovers of a daemon that died (retention.h); at start,
 * before any session is open. */
static void clean_leftovers(struct rp_control *c)
{
	struct rp_retention_opts o = { .logdir = c->cfg->logdir, .report = report_leftover };
	struct rp_err err = { 0 };
	if (rp_retention_clean_leftovers(&o, c->host, &err) < 0)
		fprintf(stderr, "ringprofd: cleaning leftovers: %s\n", err.msg);
}

/* One retention pass.  Called without c->lock: a pass over a large
 * shared log directory takes a while. */
static void retention_pass(struct rp_control *c)
{
	struct rp_retention_opts o = { .logdir = c->cfg->logdir,
				       .max_bytes = c->cfg->sessions_max_bytes,
				       .max_count = c->cfg->sessions_max_count,
				       .report = report_retention, .ctx = (void *)c->cfg };
	struct rp_retention_stats st;
	struct rp_err err = { 0 };
	int rc = rp_retention_enforce(&o, &st, &err);
	pthread_mutex_lock(&c->lock);
	if (rc < 0 && !err.msg[0])
		rp_err_set(&err, rc, "%s", strerror(-rc));
	if (rc < 0)
		fprintf(stderr, "ringprofd: retention: %s\n", err.msg);
	/* Said once each time the quota cannot be met, not every pass. */
	if (st.over_quota && !c->over_quota) {
		char size[32];
		rp_format_size(st.bytes, size, sizeof(size));
		fprintf(stderr, "ringprofd: retention: the log directory %s holds %llu sessions "
			"(%s), over its quota, and none left may be deleted (kept, being written, "
			"or the newest): delete KEEP files or raise [sessions] max_count or "
			"max_bytes\n", c->cfg->logdir, (unsigned long long)st.sessions, size);
	}
	c->over_quota = st.over_quota;
	c->retention_deleted += st.deleted;
	c->logdir_bytes = st.bytes;
	c->logdir_sessions = st.sessions;
	pthread_mutex_unlock(&c->lock);
}

/* At start: the budgets of the open rings and of the configured ones to
 * come, and the session quota, against the free disk.  A warning only:
 * rings and sessions may fit the disk in practice. */
static void check_disk(struct rp_control *c)
{
	const struct rp_config *cfg = c->cfg;
	struct rp_disk_plan p = { .state_dir = cfg->state_dir, .logdir = cfg->logdir,
				  .max_bytes = cfg->sessions_max_bytes,
				  .logdir_bytes = c->logdir_bytes };
	struct rp_ring_info info;
	for (unsigned i = 0; rp_rings_info(c->rings, i, &info) == 0; i++) {
		struct stat st;
		p.ring_budgets += info.budget_bytes;
		if (stat(info.path, &st) == 0)
			p.ring_held += (uint64_t)st.st_blocks * 512;
	}
	for (unsigned k = 0; k < cfg->nrings; k++) {
		bool open = false;
		for (unsigned i = 0; !open && rp_rings_info(c->rings, i, &info) == 0; i++)
			open = !strcmp(info.device, cfg->rings[k].device);
		uint64_t budget;
		uint32_t slot;
		rp_config_ring(cfg, cfg->rings[k].device, &budget, &slot);
		if (!open)
			p.ring_budgets += budget;
	}
	char msg[1024];
	int rc = rp_retention_check_space(&p, msg, sizeof(msg));
	if (rc > 0)
		fprintf(stderr, "ringprofd: warning: %s\n", msg);
	else if (rc < 0)
		fprintf(stderr, "ringprofd: warning: cannot tell the free space for %s and %s: %s\n",
			cfg->state_dir, cfg->logdir, strerror(-rc));
}

static void *pump_main(void *arg)
{
	struct rp_control *c = arg;
	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		uint64_t now = rp_clock_now_ns();
		rp_session_cache_begin(c->cache);
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
		rp_session_cache_end(c->cache);
		if (c->rules)
			run_rule_triggers(c);
		if (c->retention_due) {
			c->retention_due = false;
			pthread_mutex_unlock(&c->lock);
			retention_pass(c);
			pthread_mutex_lock(&c->lock);
		}
		pthread_mutex_lock(&c->beat_lock);
		c->passes++;
		pthread_cond_broadcast(&c->beat);
		pthread_mutex_unlock(&c->beat_lock);
		rp_cond_wait_ns(&c->wake, &c->lock, PUMP_INTERVAL_NS);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int rp_control_alive(void *ctx, uint64_t timeout_ns, struct rp_err *err)
{
	struct rp_control *c = ctx;
	uint64_t start = rp_clock_now_ns(), deadline = start + timeout_ns;
	pthread_mutex_lock(&c->beat_lock);
	uint64_t want = c->passes + 1;
	/* Without c->lock, which the thread holds while it works: a wake
	 * lost to that race costs one PUMP_INTERVAL_NS. */
	pthread_cond_signal(&c->wake);
	for (uint64_t now; c->passes < want && (now = rp_clock_now_ns()) < deadline;)
		rp_cond_wait_ns(&c->beat, &c->beat_lock, deadline - now);
	bool done = c->passes >= want;
	pthread_mutex_unlock(&c->beat_lock);
	if (done)
		return 0;
	return rp_err_set(err, -ETIMEDOUT, "no pass over the open sessions in %.1f s (closing a "
			  "session, a rule's snapshot or retention takes that long, or hangs)",
			  (double)(rp_clock_now_ns() - start) / 1e9);
}

int rp_control_new(const struct rp_config *cfg, struct rp_rings *rings, struct rp_rules *rules,
		   struct rp_control **out, struct rp_err *err)
{
	struct rp_control *c = calloc(1, sizeof(*c));
	if (!c)
		return rp_err_set(err, -ENOMEM, "out of memory");
	int rc = rp_gate_new(cfg->alerts.cooldown_ns, cfg->alerts.max_per_hour, &c->alert_gate, err);
	if (rc < 0) {
		free(c);
		return rc;
	}
	pthread_mutex_init(&c->alerts_lock, NULL);
	c->cfg = cfg;
	c->rings = rings;
	c->rules = rules;
	c->started_ns = rp_clock_now_ns();
	if (cfg->host_name[0])
		snprintf(c->host, sizeof(c->host), "%s", cfg->host_name);
	else if (gethostname(c->host, sizeof(c->host)) < 0)
		snprintf(c->host, sizeof(c->host), "localhost");
	for (unsigned f = 0, n = 0; f < RP_EXPORT_NFORMATS; f++)
		if (cfg->session_exports & 1u << f)
			c->export_names[n++] = rp_export_format_name(f);
	pthread_mutex_init(&c->lock, NULL);
	rp_cond_init_monotonic(&c->wake);
	clean_leftovers(c);
	pthread_mutex_init(&c->beat_lock, NULL);
	rp_cond_init_monotonic(&c->beat);
	retention_pass(c);
	check_disk(c);
	struct rp_exporter_opts eo = {
		.logdir = cfg->logdir, .host = c->host, .queue_max = cfg->export_queue,
		.perfetto_grouping = (enum rp_perfetto_grouping)cfg->perfetto_grouping,
	};
	rc = rp_session_cache_new(&c->cache) < 0 ? rp_err_set(err, -ENOMEM, "out of memory") : 0;
	/* Pending exports of earlier runs are taken up even when this one
	 * exports nothing new. */
	if (rc == 0)
		rc = rp_exporter_start(&eo, &c->exporter, err);
	if (rc == 0 && (rc = -pthread_create(&c->pump_thread, NULL, pump_main, c)) < 0)
		rp_err_set(err, rc, "cannot start the session thread: %s", strerror(-rc));
	else if (rc == 0)
		pthread_setname_np(c->pump_thread, "rp-sessions");
	if (rc < 0) {
		rp_exporter_stop(c->exporter);
		rp_session_cache_free(c->cache);
		rp_gate_free(c->alert_gate);
		free(c);
		return rc;
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
	/* Exports queued stay pending on disk, for the next start. */
	rp_exporter_stop(c->exporter);
	rp_session_cache_free(c->cache);
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->beat);
	pthread_mutex_destroy(&c->beat_lock);
	pthread_mutex_destroy(&c->alerts_lock);
	rp_gate_free(c->alert_gate);
	free(c);
}

/* Open a session over every ring, following job (may be NULL); called
 * with c->lock held. */
static int open_session(struct rp_control *c, struct rp_session_opts *o, struct job *job,
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
	/* The job's pids move into the session (job: NULL, or left empty). */
	if (job) {
		os->job = *job;
		*job = (struct job){ 0 };
	}
	*out = os;
	return 0;
}

/* Freeze [o->start_ns, o->end_ns] into a complete session: pin the window
 * first, then seal up to now (finish_session flushes), so that from the
 * pin on nothing in the window can be overwritten.  t_req: when it was
 * asked for.  Called with c->lock held. */
static int snapshot_locked(struct rp_control *c, struct rp_session_opts *o, struct job *job,
			   uint64_t t_req, json_t **out, struct rp_err *err)
{
	/* Seal up to now before pinning: the session looks for the window's
	 * first chunk among completed writes, and a chunk whose write is still
	 * in flight would otherwise fall before its pin. */
	int rc = rp_rings_flush(c->rings, err);
	if (rc < 0)
		return rc;
	struct open_session *os;
	rc = open_session(c, o, job, &os, err);
	if (rc == 0) {
		c->last_freeze_s = (double)(rp_clock_now_ns() - t_req) / 1e9;
		os->next = c->open; /* listed while it is written */
		c->open = os;
		rc = finish_session(c, os, o->end_ns, out, err);
		record_latency(&c->snapshot_latency, (double)(rp_clock_now_ns() - t_req) / 1e9);
	}
	return rc;
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
	o->exports = c->export_names;
	o->cache = c->cache;
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
		int64_t host_end;
		if (__builtin_sub_overflow(req->end_wall_ns, o.wall_offset_ns, &host_end) ||
		    host_end < 0)
			return rp_err_set(err, -EINVAL,
					  "end time lies before this host booted: nothing was recorded then");
		if ((uint64_t)host_end < end)
			end = (uint64_t)host_end;
	}
	uint64_t last = req->last_ns ? req->last_ns : c->cfg->default_last_ns;
	o.start_ns = end > last ? end - last : 0;
	o.end_ns = end;
	o.asked_ns = last;

	struct job job = { 0 };
	int rc = add_job(&job, &req->filter, err);
	if (rc == 0) {
		pthread_mutex_lock(&c->lock);
		rc = snapshot_locked(c, &o, &job, t_req, out, err);
		pthread_mutex_unlock(&c->lock);
	}
	rp_pidset_free(&job.pids);
	return rc;
}

/* A snapshot a trigger asked for, counted by source and timed from the
 * trigger (t_trigger, host ns) on.  Called with c->lock held. */
static int trigger_snapshot_locked(struct rp_control *c, enum trigger_source source,
				   struct rp_session_opts *o, uint64_t t_trigger, json_t **out,
				   struct rp_err *err)
{
	int rc = snapshot_locked(c, o, NULL, rp_clock_now_ns(), out, err);
	if (rc == 0) {
		c->triggers[source]++;
		record_latency(&c->trigger_latency, (double)(rp_clock_now_ns() - t_trigger) / 1e9);
	}
	return rc;
}

/* Rule firings whose window has ended become snapshots.  On the session
 * thread, with c->lock held. */
static void run_rule_triggers(struct rp_control *c)
{
	struct rp_rule_fire f;
	while (rp_rules_take(c->rules, rp_clock_now_ns(), &f)) {
		struct rp_session_opts o = { .kind = RP_SESSION_SNAPSHOT };
		fill_opts(c, &o, "", "", "rule", f.reason);
		o.start_ns = f.start_ns;
		o.end_ns = f.end_ns;
		o.trigger_extra = f.extra;
		json_t *session = NULL;
		struct rp_err err = { 0 };
		if (trigger_snapshot_locked(c, TRIGGER_RULE, &o, f.fired_ns, &session, &err) < 0)
			fprintf(stderr, "ringprofd: rule %s fired (%s) but its snapshot failed: %s\n",
				f.rule, f.reason, err.msg);
		else
			fprintf(stderr, "ringprofd: rule %s fired: %s: session %s\n", f.rule, f.reason,
				json_string_value(json_object_get(session, "id")));
		json_decref(session);
		json_decref(f.extra);
	}
}

/* One firing alert's snapshot: [startsAt - before, startsAt + after],
 * ending at receipt when startsAt + after has not come yet, in the run
 * the alert's run label names. */
static int alert_snapshot(struct rp_control *c, const struct rp_alert *a, uint64_t t_recv,
			  json_t **out, struct rp_err *err)
{
	const struct rp_trigger_config *t = &c->cfg->alerts;
	char run[RP_NAME_LEN] = "", reason[256];
	rp_alert_run(a, c->cfg->alert_run_label, run);
	rp_alert_reason(a, reason, sizeof(reason));
	struct rp_session_opts o = { .kind = RP_SESSION_SNAPSHOT };
	fill_opts(c, &o, "", run, "alertmanager", reason);
	/* A start after receipt (clocks apart) is taken as the receipt. */
	int64_t host_start = a->starts_at_wall_ns - o.wall_offset_ns;
	uint64_t anchor = host_start < 0 ? 0 : (uint64_t)host_start < t_recv ? (uint64_t)host_start : t_recv;
	bool at_receipt = anchor + t->after_ns > t_recv;
	o.start_ns = anchor > t->before_ns ? anchor - t->before_ns : 0;
	o.end_ns = at_receipt ? t_recv : anchor + t->after_ns;
	json_t *extra = json_pack("{s:O, s:O, s:s, s:s, s:s, s:{s:I, s:I, s:I, s:s}}",
				  "labels", a->labels, "annotations", a->annotations,
				  "fingerprint", a->fingerprint, "starts_at", a->starts_at,
				  "generator_url", a->generator_url, "window",
				  "anchor_wall_ns", (json_int_t)(anchor + o.wall_offset_ns),
				  "before_ns", (json_int_t)t->before_ns, "after_ns", (json_int_t)t->after_ns,
				  "end", at_receipt ? "receipt" : "starts_at+after");
	if (!extra)
		return rp_err_set(err, -ENOMEM, "out of memory recording alert %s", a->fingerprint);
	o.trigger_extra = extra;
	pthread_mutex_lock(&c->lock);
	int rc = trigger_snapshot_locked(c, TRIGGER_ALERTMANAGER, &o, t_recv, out, err);
	pthread_mutex_unlock(&c->lock);
	json_decref(extra);
	if (rc < 0)
		rp_err_prefix(err, "alert %s (%s)", a->fingerprint, reason);
	return rc;
}

/* Why an alert takes no snapshot now; NULL when it does. */
static const char *alert_skip(struct rp_control *c, const struct rp_alert *a, uint64_t t_recv)
{
	pthread_mutex_lock(&c->alerts_lock);
	enum rp_gate_verdict v = RP_GATE_PASS;
	if (!a->firing)
		c->alerts_resolved++;
	else if ((v = rp_gate_check(c->alert_gate, a->key, t_recv)) != RP_GATE_PASS)
		c->alerts_skipped[v]++;
	pthread_mutex_unlock(&c->alerts_lock);
	return !a->firing ? "resolved" : v != RP_GATE_PASS ? rp_gate_verdict_name(v) : NULL;
}

static int op_alertmanager(void *ctx, const struct rp_alert_batch *alerts, json_t **out,
			   struct rp_err *err)
{
	struct rp_control *c = ctx;
	uint64_t t_recv = rp_clock_now_ns();
	json_t *snapshots = json_array(), *skipped = json_array();
	int rc = snapshots && skipped ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
	for (size_t i = 0; rc == 0 && i < alerts->n; i++) {
		const struct rp_alert *a = &alerts->alerts[i];
		const char *why = alert_skip(c, a, t_recv);
		json_t *session = NULL;
		if (why)
			json_array_append_new(skipped, json_pack("{s:s, s:s}", "fingerprint", a->fingerprint,
								 "reason", why));
		else if ((rc = alert_snapshot(c, a, t_recv, &session, err)) == 0)
			json_array_append_new(snapshots, session);
	}
	if (rc < 0) {
		json_decref(snapshots);
		json_decref(skipped);
		return rc;
	}
	*out = json_pack("{s:o, s:o}", "snapshots", snapshots, "skipped", skipped);
	return *out ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
}

static int op_session_start(void *ctx, const struct rp_session_req *req, json_t **out,
			    struct rp_err *err)
{
	struct rp_control *c = ctx;
	struct rp_session_opts o = { .kind = req->duration_ns ? RP_SESSION_CAPTURE : RP_SESSION_MANUAL };
	fill_opts(c, &o, req->name, req->run, req->source, req->reason);
	/* The session's record of the rate it asked for. */
	if (req->cpu_sample_hz &&
	    !(o.trigger_extra = json_pack("{s:I}", "cpu_sample_hz", (json_int_t)req->cpu_sample_hz)))
		return rp_err_set(err, -ENOMEM, "out of memory starting a session");
	/* The job's processes now: those that end before the stop count too. */
	struct job job = { 0 };
	int rc = add_job(&job, &req->filter, err);
	if (rc < 0) {
		json_decref(o.trigger_extra);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	struct open_session *os;
	/* Each open session holds a file per ring and copies every chunk. */
	unsigned open = 0;
	for (os = c->open; os; os = os->next)
		open++;
	if (open >= c->cfg->sessions_max_open)
		rc = rp_err_set(err, -EAGAIN, "%u sessions are open, as many as [sessions] max_open "
				"allows: stop one ('ringprof sessions' lists them) or raise max_open",
				open);
	/* The rate first: the session records from when it runs. */
	else if (req->cpu_sample_hz && (rc = set_sampler_hz(c, req->cpu_sample_hz, err)) < 0)
		rp_err_prefix(err, "cannot sample CPUs at %u Hz for the session", req->cpu_sample_hz);
	if (rc == 0) {
		o.start_ns = rp_clock_now_ns();
		o.end_ns = req->duration_ns ? o.start_ns + req->duration_ns : UINT64_MAX;
		rc = open_session(c, &o, &job, &os, err);
	}
	/* A session that did not open gives its rate back. */
	if (rc < 0 && req->cpu_sample_hz)
		set_sampler_hz(c, 0, NULL);
	if (rc == 0) {
		os->cpu_sample_hz = req->cpu_sample_hz;
		os->due_ns = req->duration_ns ? o.end_ns : 0;
		os->next = c->open;
		c->open = os;
		*out = rp_session_to_json(os->s);
		pthread_cond_signal(&c->wake);
	}
	pthread_mutex_unlock(&c->lock);
	json_decref(o.trigger_extra);
	rp_pidset_free(&job.pids);
	return rc;
}

static struct open_session *find_open(struct rp_control *c, const char *id)
{
	for (struct open_session *o = c->open; o; o = o->next)
		if (strcmp(rp_session_name(o->s), id) == 0)
			return o;
	return NULL;
}

/* Adds "keep" (a KEEP file: retention never deletes it) to a session.
 * File I/O: never under c->lock. */
static json_t *with_keep(json_t *s, const char *dir)
{
	json_object_set_new(s, "keep", json_boolean(dir && rp_retention_kept(dir)));
	return s;
}

/* fn(ctx, profile dir fd, its path) for every run of the log directory,
 * until fn returns true.  Nothing below the log directory is followed if
 * a link.  Runs without locks: reading a large log directory, or one
 * holding planted FIFOs, never holds up status, metrics or snapshots. */
static void each_run(struct rp_control *c, bool (*fn)(void *, int, const char *), void *ctx)
{
	int logfd = open(c->cfg->logdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *runs = logfd >= 0 ? fdopendir(dup(logfd)) : NULL;
	struct dirent *r;
	bool done = false;
	while (runs && !done && (r = readdir(runs))) {
		char rel[PATH_MAX], profile[PATH_MAX];
		if (r->d_name[0] == '.' ||
		    (size_t)snprintf(rel, sizeof(rel), "%s/plugins/profile", r->d_name) >= sizeof(rel) ||
		    (size_t)snprintf(profile, sizeof(profile), "%s/%s", c->cfg->logdir, rel) >=
			    sizeof(profile))
			continue;
		int pfd = rp_safefs_open_dir(logfd, rel, 0, 0, c->cfg->logdir, NULL);
		if (pfd >= 0) {
			done = fn(ctx, pfd, profile);
			close(pfd);
		}
	}
	if (runs)
		closedir(runs);
	if (logfd >= 0)
		close(logfd);
}

/* The manifests of session id in profile directory pfd (path profile),
 * its path in path; NULL when there is no such session. */
static json_t *session_manifests(int pfd, const char *profile, const char *id, char *path,
				 size_t len)
{
	json_t *all = NULL;
	if ((size_t)snprintf(path, len, "%s/%s", profile, id) >= len)
		return NULL;
	int sfd = rp_safefs_open_dir(pfd, id, 0, 0, profile, NULL);
	if (sfd >= 0) {
		(void)rp_session_manifests_at(sfd, path, &all, NULL);
		close(sfd);
	}
	return all;
}

struct lookup {
	struct rp_control *c;
	const char *id;
	json_t *found;
};

static bool find_manifest(void *ctx, int pfd, const char *profile)
{
	struct lookup *l = ctx;
	char dir[PATH_MAX];
	json_t *all = session_manifests(pfd, profile, l->id, dir, sizeof(dir)), *m;
	json_t *hosts = json_array();
	size_t i;
	json_array_foreach(all, i, m) {
		const char *host = json_string_value(json_object_get(m, "host"));
		json_array_append_new(hosts, json_string(host ? host : ""));
		if (!l->found || (host && !strcmp(host, l->c->host)))
			l->found = m;
	}
	if (l->found) {
		json_incref(l->found);
		json_object_set(l->found, "hosts", hosts);
		with_keep(l->found, dir);
	}
	json_decref(hosts);
	json_decref(all);
	return l->found != NULL;
}

/* A finished session on disk, <logdir>/<run>/plugins/profile/<id> of the
 * first run with a manifest for it: this host's manifest, else the first
 * host's, with "hosts" naming every host that wrote a part of it.  Called
 * without c->lock. */
static json_t *load_manifest(struct rp_control *c, const char *id)
{
	struct lookup l = { .c = c, .id = id };
	each_run(c, find_manifest, &l);
	return l.found;
}

static int op_session_stop(void *ctx, const char *id, const struct rp_stop_req *req,
			   json_t **out, struct rp_err *err)
{
	struct rp_control *c = ctx;
	pthread_mutex_lock(&c->lock);
	struct open_session *o = find_open(c, id);
	bool open = o != NULL;
	/* The stop's own pids and cgroup join those of the start. */
	int rc = open ? add_job(&o->job, &req->filter, err) : 0;
	if (open && rc == 0) {
		uint64_t now = rp_clock_now_ns();
		rc = finish_session(c, o, o->due_ns && o->due_ns < now ? o->due_ns : now, out, err);
	}
	pthread_mutex_unlock(&c->lock);
	if (!open) {
		/* Whether it ran before is read from disk, outside the lock. */
		json_t *m = load_manifest(c, id);
		rc = m ? rp_err_set(err, -EALREADY, "session %s is not open (it has already stopped)", id)
		       : rp_err_set(err, -ENOENT, "no session %s: `ringprof sessions` lists them", id);
		json_decref(m);
	}
	return rc;
}

/* An open session's JSON, taken under c->lock; NULL when none is open. */
static json_t *open_session_json(struct rp_control *c, const char *id)
{
	pthread_mutex_lock(&c->lock);
	struct open_session *o = find_open(c, id);
	json_t *s = o ? rp_session_to_json(o->s) : NULL;
	pthread_mutex_unlock(&c->lock);
	return s;
}

static const char *path_of(const json_t *s)
{
	return json_string_value(json_object_get(s, "path"));
}

static int op_session_get(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	struct rp_control *c = ctx;
	json_t *s = open_session_json(c, id);
	*out = s ? with_keep(s, path_of(s)) : load_manifest(c, id);
	if (!*out)
		return rp_err_set(err, -ENOENT, "no session %s: `ringprof sessions` lists them", id);
	return 0;
}

/* Mark a session, open or finished, so that retention never deletes it. */
static int op_session_keep(void *ctx, const char *id, json_t **out, struct rp_err *err)
{
	struct rp_control *c = ctx;
	json_t *s = open_session_json(c, id);
	if (!s)
		s = load_manifest(c, id);
	const char *dir = path_of(s);
	int rc = !dir ? rp_err_set(err, -ENOENT, "no session %s: `ringprof sessions` lists them", id)
		      : rp_retention_keep(c->cfg->logdir, dir, err);
	if (rc < 0) {
		json_decref(s);
		return rc;
	}
	*out = with_keep(s, dir);
	return 0;
}

static int by_key(const json_t *a, const json_t *b, const char *key)
{
	const char *x = json_string_value(json_object_get(a, key));
	const char *y = json_string_value(json_object_get(b, key));
	return strcmp(x ? x : "", y ? y : "");
}

/* When a session was made: its trigger's created_wall_ns, else (a
 * manifest written before that was recorded) its window's start. */
static json_int_t created_of(const json_t *s)
{
	const json_t *c = json_object_get(json_object_get(s, "trigger"), "created_wall_ns");
	return json_is_integer(c) ? json_integer_value(c)
		: json_integer_value(json_object_get(json_object_get(s, "requested"), "start_wall_ns"));
}

/* A session listed, with when it was made: its first host's part. */
struct listed_session {
	json_t *s;
	json_int_t made;
};

static int by_id_host(const void *a, const void *b)
{
	const json_t *x = ((const struct listed_session *)a)->s;
	const json_t *y = ((const struct listed_session *)b)->s;
	int c = by_key(x, y, "id");
	return c ? c : by_key(x, y, "host");
}

/* Oldest made first (not by id: ids come from the window's start, or
 * are names); a session's hosts together, by host. */
static int by_made(const void *a, const void *b)
{
	const struct listed_session *x = a, *y = b;
	if (x->made != y->made)
		return x->made < y->made ? -1 : 1;
	return by_id_host(a, b);
}

static bool list_run(void *ctx, int pfd, const char *profile)
{
	json_t *list = ctx;
	int fd = dup(pfd);
	DIR *sessions = fd >= 0 ? fdopendir(fd) : NULL;
	if (!sessions) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	struct dirent *e;
	while ((e = readdir(sessions))) {
		char path[PATH_MAX];
		json_t *all = e->d_name[0] == '.' ? NULL
				: session_manifests(pfd, profile, e->d_name, path, sizeof(path)), *m;
		size_t i;
		json_array_foreach(all, i, m)
			json_array_append(list, with_keep(m, path));
		json_decref(all);
	}
	closedir(sessions);
	return false;
}

/* list's sessions, oldest made first (by_made); as they were without
 * memory. */
static void sort_sessions(json_t *list)
{
	size_t n = json_array_size(list);
	struct listed_session *items = malloc(n * sizeof(*items) + 1);
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		items[i] = (struct listed_session){ json_incref(json_array_get(list, i)),
						    created_of(json_array_get(list, i)) };
	/* Each host's part of a session takes the time of the first. */
	qsort(items, n, sizeof(*items), by_id_host);
	for (size_t i = 0, j; i < n; i = j) {
		json_int_t first = items[i].made;
		for (j = i; j < n && !by_key(items[i].s, items[j].s, "id"); j++)
			first = items[j].made < first ? items[j].made : first;
		for (size_t k = i; k < j; k++)
			items[k].made = first;
	}
	qsort(items, n, sizeof(*items), by_made);
	for (size_t i = 0; i < n; i++)
		json_array_set_new(list, i, items[i].s);
	free(items);
}

/* Whether list[0, n) holds the part of s's host of session s already. */
static bool listed(json_t *list, size_t n, const json_t *s)
{
	for (size_t i = 0; i < n; i++) {
		const json_t *m = json_array_get(list, i);
		if (!by_key(m, s, "id") && !by_key(m, s, "host"))
			return true;
	}
	return false;
}

/* The open sessions are taken under c->lock (memory only); the files are
 * read after it is let go. */
static int op_session_list(void *ctx, json_t **out, struct rp_err *err)
{
	(void)err;
	struct rp_control *c = ctx;
	json_t *list = json_array(), *open = json_array(), *s;
	pthread_mutex_lock(&c->lock);
	for (struct open_session *o = c->open; o; o = o->next)
		json_array_append_new(open, rp_session_to_json(o->s));
	pthread_mutex_unlock(&c->lock);
	/* Every finished session under the log directory, one object per
	 * host that wrote a part of it; leftovers (no manifest) are none. */
	each_run(c, list_run, list);
	size_t finished = json_array_size(list), i;
	/* One that closed meanwhile is listed by its manifest already. */
	json_array_foreach(open, i, s)
		if (!listed(list, finished, s))
			json_array_append(list, with_keep(s, path_of(s)));
	json_decref(open);
	sort_sessions(list);
	*out = json_pack("{s:o}", "sessions", list);
	return 0;
}

/* FILL: bytes held over the budget; HORIZON: the time span held. */
static double ring_fill(const struct rp_ring_info *i)
{
	return i->budget_bytes ? (double)i->file.bytes_used / (double)i->budget_bytes : 0.0;
}

static double ring_horizon_s(const struct rp_ringfile_stats *f)
{
	return f->chunks ? (double)(f->last_ts - f->first_ts) / 1e9 : 0.0;
}

static json_t *ring_json(const struct rp_ring_info *i)
{
	const struct rp_ringfile_stats *f = &i->file;
	json_t *corrupt = json_array();
	for (unsigned k = 0; k < i->ncorrupt; k++)
		json_array_append_new(corrupt, json_pack("{s:I, s:I, s:I}",
			"pid", (json_int_t)i->corrupt[k].pid, "tid", (json_int_t)i->corrupt[k].tid,
			"corrupt_records", (json_int_t)i->corrupt[k].corrupt));
	json_t *aside = json_array();
	for (unsigned k = 0; k < i->naside; k++)
		json_array_append_new(aside, json_pack("{s:I, s:I, s:s}",
			"pid", (json_int_t)i->aside[k].pid, "tid", (json_int_t)i->aside[k].tid,
			"thread", i->aside[k].thread));
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:o, s:o}",
			 "device", i->device, "path", i->path,
			 "budget_bytes", (json_int_t)i->budget_bytes,
			 "slot_size", (json_int_t)f->slot_size, "slots", (json_int_t)f->slot_count,
			 "chunks", (json_int_t)f->chunks, "bytes_used", (json_int_t)f->bytes_used,
			 "fill", ring_fill(i),
			 "events", (json_int_t)f->events, "raw_bytes", (json_int_t)f->raw_bytes,
			 "horizon_s", ring_horizon_s(f), "max_age_s", (double)f->max_age_ns / 1e9,
			 "first_ns", (json_int_t)f->first_ts, "last_ns", (json_int_t)f->last_ts,
			 "dropped", (json_int_t)i->drain.producer_drops,
			 "producers", (json_int_t)i->drain.producers,
			 "processes_seen", (json_int_t)i->drain.processes_seen, "direct_io", f->direct_io,
			 "corrupt_records", (json_int_t)i->drain.corrupt_records,
			 "corrupt_producers", corrupt, "stood_aside", aside);
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
		json_t *o = json_pack("{s:s, s:s, s:I, s:I}", "name", col.name, "state", col.state,
				      "events", (json_int_t)col.events, "lost", (json_int_t)col.lost);
		for (unsigned v = 0; col.value_names && col.value_names[v]; v++)
			json_object_set_new(o, col.value_names[v], json_integer((json_int_t)col.values[v]));
		if (col.reason[0])
			json_object_set_new(o, "reason", json_string(col.reason));
		if (col.detail[0])
			json_object_set_new(o, "detail", json_string(col.detail));
		json_array_append_new(collectors, o);
	}
	json_t *open = json_array();
	pthread_mutex_lock(&c->lock);
	for (struct open_session *o = c->open; o; o = o->next)
		json_array_append_new(open, json_string(rp_session_name(o->s)));
	pthread_mutex_unlock(&c->lock);
	struct rp_producer_stats ps;
	rp_rings_producer_stats(c->rings, &ps);
	json_t *producers = json_pack("{s:I, s:I, s:I, s:I}", "rings", (json_int_t)ps.rings,
				      "shm_bytes", (json_int_t)ps.shm_bytes,
				      "refused", (json_int_t)ps.refused,
				      "quarantined_ring_files", (json_int_t)ps.quarantined);
	uint64_t now = rp_clock_now_ns();
	*out = json_pack("{s:s, s:i, s:s, s:f, s:s, s:I, s:I, s:s, s:s, s:I, s:o, s:o, s:o, s:o}",
			 "version", RINGPROF_VERSION, "pid", (int)getpid(), "host", c->host,
			 "uptime_s", (double)(now - c->started_ns) / 1e9,
			 "clock", "CLOCK_MONOTONIC", "now_ns", (json_int_t)now,
			 "wall_offset_ns", (json_int_t)rp_clock_wall_offset_ns(),
			 "state_dir", c->cfg->state_dir, "logdir", c->cfg->logdir,
			 "sessions_max_bytes", (json_int_t)c->cfg->sessions_max_bytes,
			 "rings", rings, "collectors", collectors, "open_sessions", open,
			 "producers", producers);
	return *out ? 0 : -ENOMEM;
}

static void put_latency(FILE *f, const char *name, const char *help, const struct latency *l)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (size_t i = 0; i < NBOUNDS; i++) /* record_latency keeps them cumulative */
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, latency_bounds[i],
			(unsigned long long)l->buckets[i]);
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
		(unsigned long long)l->count, name, l->sum, name, (unsigned long long)l->count);
}

static void put_skipped(struct rp_control *c, FILE *f)
{
	pthread_mutex_lock(&c->alerts_lock);
	uint64_t resolved = c->alerts_resolved, cooldown = c->alerts_skipped[RP_GATE_COOLDOWN],
		 rate = c->alerts_skipped[RP_GATE_RATE_LIMIT];
	pthread_mutex_unlock(&c->alerts_lock);
	fprintf(f, "# HELP ringprof_triggers_skipped_total Triggers that took no snapshot, by source and reason.\n"
		   "# TYPE ringprof_triggers_skipped_total counter\n"
		   "ringprof_triggers_skipped_total{source=\"alertmanager\",reason=\"resolved\"} %llu\n",
		(unsigned long long)resolved);
	const struct {
		const char *source;
		enum rp_gate_verdict v;
		uint64_t n;
	} rows[] = {
		{ "alertmanager", RP_GATE_COOLDOWN, cooldown },
		{ "alertmanager", RP_GATE_RATE_LIMIT, rate },
		{ "rule", RP_GATE_COOLDOWN, c->rules ? rp_rules_skipped(c->rules, RP_GATE_COOLDOWN) : 0 },
		{ "rule", RP_GATE_RATE_LIMIT, c->rules ? rp_rules_skipped(c->rules, RP_GATE_RATE_LIMIT) : 0 },
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		fprintf(f, "ringprof_triggers_skipped_total{source=\"%s\",reason=\"%s\"} %llu\n",
			rows[i].source, rp_gate_verdict_name(rows[i].v), (unsigned long long)rows[i].n);
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
		{ "ringprof_ring_fill_ratio", "gauge", "Bytes the ring holds over its budget." },
		{ "ringprof_ring_horizon_seconds", "gauge", "Time span the ring holds now." },
		{ "ringprof_ring_events", "gauge", "Events held in the ring now." },
		{ "ringprof_ring_bytes", "gauge", "Compressed bytes held in the ring now." },
		{ "ringprof_ring_budget_bytes", "gauge", "Configured size of the ring file." },
		{ "ringprof_ring_dropped_events_total", "counter", "Events producers dropped because their ring was full." },
		{ "ringprof_ring_ingested_events_total", "counter", "Events taken into the ring since the daemon started." },
		{ "ringprof_producers", "gauge", "Producer rings attached to the device ring." },
		{ "ringprof_ring_corrupt_records_total", "counter", "Producer records discarded as impossible." },
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
				ring_fill(&info[i]), ring_horizon_s(s),
				(double)s->events, (double)s->bytes_used, (double)info[i].budget_bytes,
				(double)info[i].drain.producer_drops, (double)info[i].drain.events,
				(double)info[i].drain.producers, (double)info[i].drain.corrupt_records,
			};
			fprintf(f, "%s{device=\"%s\"} %.9g\n", ring_metrics[m].name, info[i].device, v[m]);
		}
	}
	rp_rings_producer_metrics(c->rings, f);
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
	fprintf(f, "# HELP ringprof_collector_value A collector's own values (status shows them too).\n"
		   "# TYPE ringprof_collector_value gauge\n");
	for (unsigned i = 0; rp_rings_collector(c->rings, i, &col) == 0; i++)
		for (unsigned v = 0; col.value_names && col.value_names[v]; v++)
			fprintf(f, "ringprof_collector_value{collector=\"%s\",name=\"%s\"} %llu\n",
				col.name, col.value_names[v], (unsigned long long)col.values[v]);
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
	struct rp_exporter_stats ex;
	rp_exporter_stats(c->exporter, &ex);
	fprintf(f, "# HELP ringprof_exports_total Session exports written when sessions closed, by result.\n"
		   "# TYPE ringprof_exports_total counter\n"
		   "ringprof_exports_total{result=\"written\"} %llu\n"
		   "ringprof_exports_total{result=\"failed\"} %llu\n"
		   "# HELP ringprof_exports_queued Sessions queued in memory for export (more may wait on disk).\n"
		   "# TYPE ringprof_exports_queued gauge\nringprof_exports_queued %u\n"
		   "# HELP ringprof_session_ring_read_bytes_total Bytes open sessions read from the rings to copy them.\n"
		   "# TYPE ringprof_session_ring_read_bytes_total counter\nringprof_session_ring_read_bytes_total %llu\n",
		(unsigned long long)ex.written, (unsigned long long)ex.failed, ex.queued,
		(unsigned long long)rp_session_cache_read_bytes(c->cache));
	fprintf(f, "# HELP ringprof_sessions_open Sessions open now.\n"
		   "# TYPE ringprof_sessions_open gauge\nringprof_sessions_open %u\n", open);
	fprintf(f, "# HELP ringprof_retention_deleted_total Sessions deleted to keep the log directory within its quota.\n"
		   "# TYPE ringprof_retention_deleted_total counter\nringprof_retention_deleted_total %llu\n"
		   "# HELP ringprof_logdir_bytes Disk usage of the sessions in the log directory, at the last retention pass.\n"
		   "# TYPE ringprof_logdir_bytes gauge\nringprof_logdir_bytes %llu\n"
		   "# HELP ringprof_logdir_sessions Sessions in the log directory, at the last retention pass.\n"
		   "# TYPE ringprof_logdir_sessions gauge\nringprof_logdir_sessions %llu\n",
		(unsigned long long)c->retention_deleted, (unsigned long long)c->logdir_bytes,
		(unsigned long long)c->logdir_sessions);
	fprintf(f, "# HELP ringprof_snapshot_freeze_seconds Last snapshot: request until its window could no longer be overwritten.\n"
		   "# TYPE ringprof_snapshot_freeze_seconds gauge\nringprof_snapshot_freeze_seconds %.9g\n",
		c->last_freeze_s);
	put_latency(f, "ringprof_snapshot_seconds",
		    "Snapshot request until the session is complete on disk.", &c->snapshot_latency);
	fprintf(f, "# HELP ringprof_triggers_total Snapshots taken by a trigger, by source.\n"
		   "# TYPE ringprof_triggers_total counter\n");
	for (int s = 0; s < NSOURCES; s++)
		fprintf(f, "ringprof_triggers_total{source=\"%s\"} %llu\n", source_names[s],
			(unsigned long long)c->triggers[s]);
	put_latency(f, "ringprof_trigger_latency_seconds",
		    "Alert received or rule fired until its session is complete on disk.",
		    &c->trigger_latency);
	pthread_mutex_unlock(&c->lock);
	put_skipped(c, f);
	if (c->rules)
		rp_rules_write_metrics(c->rules, f);
	fclose(f);
	return 0;
}

/* The registration is a file the XLA collector reads (config.h,
 * RP_XLA_REGISTRY_DIR), written whole (a temporary file renamed): the
 * collector never sees half an address. */
static int op_xla_register(void *ctx, const char *address, uint32_t pid, json_t **out,
			   struct rp_err *err)
{
	struct rp_control *c = ctx;
	char path[PATH_MAX + 32], tmp[PATH_MAX + 40];
	snprintf(path, sizeof(path), "/proc/%u", pid);
	if (access(path, F_OK) < 0)
		return rp_err_set(err, -EINVAL, "process %u does not exist: register from the "
				  "workload itself (ringprof.xla.attach())", pid);
	snprintf(path, sizeof(path), "%s/%s", c->cfg->state_dir, RP_XLA_REGISTRY_DIR);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return rp_err_set(err, -errno, "cannot create %s: %s", path, strerror(errno));
	snprintf(path, sizeof(path), "%s/%s/%u", c->cfg->state_dir, RP_XLA_REGISTRY_DIR, pid);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return rp_err_set(err, -errno, "cannot write %s: %s", tmp, strerror(errno));
	bool ok = fprintf(f, "%s\n", address) > 0;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, path) < 0) {
		int e = errno ? errno : EIO;
		(void)unlink(tmp);
		return rp_err_set(err, -e, "cannot write %s: %s", path, strerror(e));
	}
	*out = json_pack("{s:s, s:I}", "address", address, "pid", (json_int_t)pid);
	return *out ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
}

/* The registration goes first, so that the collector does not take the
 * server up again; then each collector takes what it holds of pid. */
static int op_xla_detach(void *ctx, uint32_t pid, json_t **out, struct rp_err *err)
{
	struct rp_control *c = ctx;
	char path[PATH_MAX + 32], names[256];
	snprintf(path, sizeof(path), "%s/%s/%u", c->cfg->state_dir, RP_XLA_REGISTRY_DIR, pid);
	if (unlink(path) < 0 && errno != ENOENT)
		return rp_err_set(err, -errno, "cannot remove %s: %s", path, strerror(errno));
	int rc = rp_rings_detach(c->rings, pid, names, sizeof(names), err);
	if (rc < 0)
		return rc;
	json_t *list = json_array();
	bool ok = list != NULL;
	for (char *save = NULL, *n = strtok_r(names, ",", &save); ok && n;
	     n = strtok_r(NULL, ",", &save))
		ok = json_array_append_new(list, json_string(n)) == 0;
	*out = ok ? json_pack("{s:I, s:O}", "pid", (json_int_t)pid, "detached", list) : NULL;
	json_decref(list);
	return *out ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
}

static int op_collector_pause(void *ctx, const char *name, bool paused, json_t **out,
			      struct rp_err *err)
{
	struct rp_control *c = ctx;
	int rc = rp_rings_collector_pause(c->rings, name, paused, err);
	if (rc == 0)
		*out = json_pack("{s:s, s:b}", "collector", name, "paused", paused);
	return rc;
}

/* The session's XSpace file, read back whole: at most max_bytes. */
static int read_xspace(struct rp_control *c, const char *dir, size_t max_bytes, uint8_t **buf,
		       size_t *len, struct rp_err *err)
{
	char host[sizeof(c->host)], path[PATH_MAX];
	snprintf(host, sizeof(host), "%s", c->host);
	rp_session_file_host(host);
	snprintf(path, sizeof(path), "%s/%s%s", dir, host, rp_export_suffix(RP_EXPORT_XPLANE));
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int rc = rp_err_set(err, -errno, "cannot read %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return rc;
	}
	size_t size = (size_t)st.st_size;
	int rc = 0;
	*buf = NULL;
	if (size > max_bytes)
		rc = rp_err_set(err, -EFBIG, "%s holds %zu bytes, more than the %zu that are "
				"served; open it from the log directory", path, size, max_bytes);
	else if (!(*buf = malloc(size ? size : 1)))
		rc = rp_err_set(err, -ENOMEM, "out of memory for %s (%zu bytes)", path, size);
	for (size_t have = 0; rc == 0 && have < size;) {
		ssize_t n = read(fd, *buf + have, size - have);
		if (n <= 0)
			rc = rp_err_set(err, n ? -errno : -EIO, "cannot read %s: %s", path,
					n ? strerror(errno) : "it shrank while read");
		have += n > 0 ? (size_t)n : 0;
	}
	close(fd);
	if (rc < 0) {
		free(*buf);
		*buf = NULL;
	}
	*len = size;
	return rc;
}

int rp_control_xspace(struct rp_control *c, const struct rp_xspace_req *req, uint8_t **xspace,
		      size_t *len, struct rp_err *err)
{
	uint64_t t_req = rp_clock_now_ns();
	struct rp_session_opts o = { .kind = RP_SESSION_SNAPSHOT };
	fill_opts(c, &o, "", "", req->source, req->reason);
	/* Its XSpace is written here, for the answer: the exporter thread
	 * gets the other formats only. */
	const char *others[RP_EXPORT_NFORMATS + 1] = { 0 };
	const char *xplane = rp_export_format_name(RP_EXPORT_XPLANE);
	for (unsigned i = 0, n = 0; c->export_names[i]; i++)
		if (strcmp(c->export_names[i], xplane) != 0)
			others[n++] = c->export_names[i];
	o.exports = others;
	o.start_ns = req->start_ns;
	o.end_ns = req->end_ns < t_req ? req->end_ns : t_req;
	o.asked_ns = o.end_ns - (o.start_ns < o.end_ns ? o.start_ns : o.end_ns);
	json_t *s = NULL;
	pthread_mutex_lock(&c->lock);
	int rc = snapshot_locked(c, &o, NULL, t_req, &s, err);
	pthread_mutex_unlock(&c->lock);
	const char *dir = rc == 0 ? path_of(s) : NULL;
	if (rc == 0 && !dir)
		rc = rp_err_set(err, -EIO, "the session has no directory");
	if (rc == 0)
		rc = rp_exporter_export_now(c->exporter, dir, 1u << RP_EXPORT_XPLANE, err);
	if (rc == 0)
		rc = read_xspace(c, dir, req->max_bytes, xspace, len, err);
	json_decref(s);
	return rc;
}

const struct rp_api_ops rp_control_ops = {
	.status = op_status,
	.snapshot = op_snapshot,
	.session_start = op_session_start,
	.session_stop = op_session_stop,
	.session_list = op_session_list,
	.session_get = op_session_get,
	.metrics = op_metrics,
	.alertmanager = op_alertmanager,
	.session_keep = op_session_keep,
	.xla_register = op_xla_register,
	.xla_detach = op_xla_detach,
	.collector_pause = op_collector_pause,
};
