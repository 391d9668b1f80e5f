/* Session exports off the session thread (exporter.h). */
#include "exporter.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "safefs.h"
#include "session.h"

/* How long a stop waits for the format being written. */
#define STOP_GRACE_NS 2000000000ull

struct queued {
	struct queued *next;
	char dir[];
};

struct rp_exporter {
	struct rp_exporter_opts opts;
	char *logdir, *host;
	pthread_t thread;
	pthread_mutex_t lock;
	/* Manifest updates, from the thread and from rp_exporter_export_now's
	 * callers: each rewrites the whole manifest. */
	pthread_mutex_t manifest_lock;
	pthread_cond_t wake;     /* work queued, or stop */
	pthread_cond_t idle;     /* the thread left its loop */
	struct queued *head, **tail;
	unsigned queued;
	bool scan_due;           /* sessions wait on disk: scan once the queue is empty */
	bool stop, exited, abandoned;
	uint64_t written, failed;
	/* Formats whose state reached the manifest, and that count when the
	 * last scan began: a scan finds nothing new unless some did since
	 * (a manifest that cannot be updated stays pending). */
	uint64_t recorded, recorded_at_scan;
	bool scanned;
};

/* Queue dir unless the queue is full; called with e->lock held.  false:
 * it stays on disk, for the scan. */
static bool push(struct rp_exporter *e, const char *dir)
{
	struct queued *q = e->queued < e->opts.queue_max ? malloc(sizeof(*q) + strlen(dir) + 1) : NULL;
	if (!q) {
		e->scan_due = true;
		return false;
	}
	q->next = NULL;
	strcpy(q->dir, dir);
	*e->tail = q;
	e->tail = &q->next;
	e->queued++;
	pthread_cond_signal(&e->wake);
	return true;
}

/* The formats this host's manifest in dir lists as pending (a mask of
 * 1 << enum rp_export_format); 0 without one. */
static unsigned pending(struct rp_exporter *e, const char *dir)
{
	json_t *all, *m;
	struct rp_err err;
	size_t i;
	unsigned mask = 0;
	/* Reached without following a link (the directories below the log
	 * directory are its group's to write), manifests read capped. */
	int dirfd = rp_safefs_open_beneath(e->logdir, dir, RP_SAFEFS_OWNED, &err);
	if (dirfd < 0)
		return 0;
	int rc = rp_session_manifests_at(dirfd, dir, &all, &err);
	close(dirfd);
	if (rc < 0)
		return 0;
	json_array_foreach(all, i, m) {
		const char *host = json_string_value(json_object_get(m, "host"));
		if (!host || strcmp(host, e->host))
			continue;
		json_t *exports = json_object_get(m, "exports");
		for (unsigned f = 0; f < RP_EXPORT_NFORMATS; f++) {
			json_t *st = json_object_get(json_object_get(exports, rp_export_format_name(f)),
						     "state");
			if (json_is_string(st) && !strcmp(json_string_value(st), "pending"))
				mask |= 1u << f;
		}
	}
	json_decref(all);
	return mask;
}

static bool stopping(struct rp_exporter *e)
{
	pthread_mutex_lock(&e->lock);
	bool stop = e->stop;
	pthread_mutex_unlock(&e->lock);
	return stop;
}

/* Queue every session under <logdir>/<run>/plugins/profile with exports
 * of this host pending, until the queue is full (the next scan goes on). */
static void scan(struct rp_exporter *e)
{
	DIR *runs = opendir(e->logdir);
	struct dirent *r;
	bool full = false;
	while (runs && !full && !stopping(e) && (r = readdir(runs))) {
		char profile[PATH_MAX];
		if (r->d_name[0] == '.' ||
		    (size_t)snprintf(profile, sizeof(profile), "%s/%s/plugins/profile", e->logdir,
				     r->d_name) >= sizeof(profile))
			continue;
		DIR *sessions = opendir(profile);
		struct dirent *s;
		while (sessions && !full && (s = readdir(sessions))) {
			char dir[PATH_MAX];
			if (s->d_name[0] == '.' ||
			    (size_t)snprintf(dir, sizeof(dir), "%s/%s", profile, s->d_name) >= sizeof(dir) ||
			    !pending(e, dir))
				continue;
			pthread_mutex_lock(&e->lock);
			full = !push(e, dir);
			pthread_mutex_unlock(&e->lock);
		}
		if (sessions)
			closedir(sessions);
	}
	if (runs)
		closedir(runs);
}

/* One session's export under way. */
struct job {
	struct rp_exporter *e;
	const char *dir;
	unsigned done, failed;   /* formats */
};

/* Each format's result goes into the manifest as soon as it is known. */
static bool record(void *ctx, const char *host, enum rp_export_format f, int dirfd,
		   const char *file, const struct rp_err *err)
{
	struct job *job = ctx;
	struct rp_exporter *e = job->e;
	struct stat st;
	json_t *state = err ? json_pack("{s:s, s:s}", "state", "failed", "error", err->msg)
		      : fstatat(dirfd, file, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)
			      ? json_pack("{s:s, s:I}", "state", "written", "bytes", (json_int_t)st.st_size)
			      : json_pack("{s:s, s:s}", "state", "failed", "error", "written, then gone");
	if (err)
		fprintf(stderr, "ringprofd: %s; run 'ringprof export %s' to try again\n", err->msg,
			job->dir);
	struct rp_err why = { 0 };
	bool recorded = false;
	pthread_mutex_lock(&e->manifest_lock);
	int set = state ? rp_session_set_export(dirfd, job->dir, host, rp_export_format_name(f),
						state, &why) : -ENOMEM;
	pthread_mutex_unlock(&e->manifest_lock);
	if (set < 0)
		fprintf(stderr, "ringprofd: the %s export of %s is %s, but its manifest cannot say "
			"so: %s\n", rp_export_format_name(f), job->dir, err ? "failed" : "written",
			state ? why.msg : "out of memory");
	else
		recorded = true;
	json_decref(state);
	job->done++;
	job->failed += err != NULL;
	pthread_mutex_lock(&e->lock);
	e->recorded += recorded;
	bool go_on = !e->stop;
	pthread_mutex_unlock(&e->lock);
	return go_on;
}

/* The formats in mask of the session in dir, each recorded in its
 * manifest as it is done. */
static int export_formats(struct rp_exporter *e, struct job *job, unsigned mask,
			  struct rp_err *err)
{
	/* The session is reached from the log directory without following a
	 * link: the directories below it are the log group's to write. */
	struct rp_export_opts opts = { .perfetto_grouping = e->opts.perfetto_grouping,
				       .beneath = e->logdir,
				       .progress = record, .progress_ctx = job };
	return rp_export_session(job->dir, e->host, mask, &opts, err);
}

static void export_one(struct rp_exporter *e, const char *dir)
{
	unsigned mask = pending(e, dir);
	if (!mask)
		return; /* done already: queued twice, or exported by hand */
	struct job job = { .e = e, .dir = dir };
	struct rp_err err = { 0 };
	(void)export_formats(e, &job, mask, &err); /* record() said it all */
	/* Counted once all its formats are done; stopped half-way, the rest
	 * is pending for the next start. */
	pthread_mutex_lock(&e->lock);
	if (job.done == (unsigned)__builtin_popcount(mask)) {
		e->written += !job.failed;
		e->failed += job.failed > 0;
	}
	pthread_mutex_unlock(&e->lock);
}

static void free_exporter(struct rp_exporter *e)
{
	while (e->head) {
		struct queued *q = e->head;
		e->head = q->next;
		free(q);
	}
	pthread_cond_destroy(&e->wake);
	pthread_cond_destroy(&e->idle);
	pthread_mutex_destroy(&e->manifest_lock);
	pthread_mutex_destroy(&e->lock);
	free(e->logdir);
	free(e->host);
	free(e);
}

static void *exporter_main(void *arg)
{
	struct rp_exporter *e = arg;
	pthread_mutex_lock(&e->lock);
	while (!e->stop) {
		struct queued *q = e->head;
		if (!q && e->scan_due) {
			e->scan_due = false;
			if (e->scanned && e->recorded == e->recorded_at_scan)
				continue;
			e->scanned = true;
			e->recorded_at_scan = e->recorded;
			pthread_mutex_unlock(&e->lock);
			scan(e);
			pthread_mutex_lock(&e->lock);
			continue;
		}
		if (!q) {
			pthread_cond_wait(&e->wake, &e->lock);
			continue;
		}
		if (!(e->head = q->next))
			e->tail = &e->head;
		e->queued--;
		pthread_mutex_unlock(&e->lock);
		export_one(e, q->dir);
		free(q);
		pthread_mutex_lock(&e->lock);
	}
	e->exited = true;
	pthread_cond_signal(&e->idle);
	bool abandoned = e->abandoned;
	pthread_mutex_unlock(&e->lock);
	/* Stopped while it wrote: the stop left, and freeing is up to it. */
	if (abandoned)
		free_exporter(e);
	return NULL;
}

int rp_exporter_start(const struct rp_exporter_opts *opts, struct rp_exporter **out,
		      struct rp_err *err)
{
	struct rp_exporter *e = calloc(1, sizeof(*e));
	if (!e)
		return rp_err_set(err, -ENOMEM, "out of memory");
	e->opts = *opts;
	if (!e->opts.queue_max)
		e->opts.queue_max = 1;
	e->tail = &e->head;
	e->scan_due = true;
	pthread_mutex_init(&e->lock, NULL);
	pthread_mutex_init(&e->manifest_lock, NULL);
	pthread_cond_init(&e->wake, NULL);
	rp_cond_init_monotonic(&e->idle);
	e->logdir = strdup(opts->logdir);
	e->host = strdup(opts->host);
	int rc = e->logdir && e->host ? -pthread_create(&e->thread, NULL, exporter_main, e) : -ENOMEM;
	if (rc == 0)
		pthread_setname_np(e->thread, "rp-exporter");
	if (rc < 0) {
		free_exporter(e);
		return rp_err_set(err, rc, "cannot start the export thread: %s", strerror(-rc));
	}
	*out = e;
	return 0;
}

void rp_exporter_queue(struct rp_exporter *e, const char *dir)
{
	pthread_mutex_lock(&e->lock);
	(void)push(e, dir); /* turned away, it waits on disk for the scan */
	pthread_mutex_unlock(&e->lock);
}

int rp_exporter_export_now(struct rp_exporter *e, const char *dir, unsigned mask,
			   struct rp_err *err)
{
	struct job job = { .e = e, .dir = dir };
	return export_formats(e, &job, mask, err);
}

void rp_exporter_stats(struct rp_exporter *e, struct rp_exporter_stats *st)
{
	pthread_mutex_lock(&e->lock);
	*st = (struct rp_exporter_stats){ .written = e->written, .failed = e->failed,
					  .queued = e->queued };
	pthread_mutex_unlock(&e->lock);
}

void rp_exporter_stop(struct rp_exporter *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->lock);
	e->stop = true;
	pthread_cond_signal(&e->wake);
	uint64_t deadline = rp_clock_now_ns() + STOP_GRACE_NS;
	for (uint64_t now; !e->exited && (now = rp_clock_now_ns()) < deadline;)
		rp_cond_wait_ns(&e->idle, &e->lock, deadline - now);
	bool exited = e->exited;
	e->abandoned = !exited;
	pthread_mutex_unlock(&e->lock);
	if (!exited) {
		fprintf(stderr, "ringprofd: an export is still being written: left pending, for the "
			"next start\n");
		pthread_detach(e->thread);
		return;
	}
	pthread_join(e->thread, NULL);
	free_exporter(e);
}
