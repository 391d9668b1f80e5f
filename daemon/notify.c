/* sd_notify for ringprofd: see notify.h. */
#include "notify.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "clock.h"

/* STATUS is refreshed this often; with a watchdog, at half its timeout
 * when that is shorter. */
#define STATUS_INTERVAL_NS 5000000000ull

struct rp_notify {
	struct rp_notify_opts opts;
	uint64_t watchdog_usec;  /* 0: no watchdog */
	uint64_t interval_ns;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stop;
	int send_error;          /* the last failure of sd_notify, logged once */
};

static void send_state(struct rp_notify *n, const char *state)
{
	int rc = sd_notify(0, state);
	if (rc < 0 && rc != n->send_error)
		fprintf(stderr, "ringprofd: cannot notify systemd on %s: %s\n",
			getenv("NOTIFY_SOCKET"), strerror(-rc));
	n->send_error = rc < 0 ? rc : 0;
}

/* "STATUS=..." from the control API's status: what `systemctl status`
 * shows under the unit. */
static void status_line(struct rp_notify *n, const char *prefix, char *buf, size_t len)
{
	struct rp_err err = { 0 };
	json_t *st = NULL;
	int rc = n->opts.status(n->opts.status_ctx, n->interval_ns / 2, &st, &err);
	if (rc < 0) {
		snprintf(buf, len, "%sSTATUS=status unavailable: %s", prefix,
			 err.msg[0] ? err.msg : strerror(-rc));
		return;
	}
	json_t *rings = json_object_get(st, "rings"), *ring;
	size_t i, nrings = json_array_size(rings);
	size_t open = json_array_size(json_object_get(st, "open_sessions"));
	long long events = 0, dropped = 0;
	json_array_foreach(rings, i, ring) {
		events += json_integer_value(json_object_get(ring, "events"));
		dropped += json_integer_value(json_object_get(ring, "dropped"));
	}
	int used = snprintf(buf, len, "%sSTATUS=Recording: %zu ring%s, %lld events held, %lld dropped, %zu open session%s",
			    prefix, nrings, nrings == 1 ? "" : "s", events, dropped, open, open == 1 ? "" : "s");
	/* Collectors by state: a sampler left disabled (no privileges, no
	 * BTF) shows in `systemctl status`. */
	json_t *col;
	json_array_foreach(json_object_get(st, "collectors"), i, col) {
		if (used < 0 || (size_t)used >= len)
			break;
		used += snprintf(buf + used, len - (size_t)used, "; %s %s",
				 json_string_value(json_object_get(col, "name")),
				 json_string_value(json_object_get(col, "state")));
	}
	json_decref(st);
}

/* Each check in turn, each waiting at most half an interval: a ping only
 * when every thread has shown it is not stuck.  Messages of failed checks
 * are appended to note. */
static bool all_alive(struct rp_notify *n, char *note, size_t len)
{
	bool alive = true;
	for (size_t i = 0; i < n->opts.nchecks && alive; i++) {
		const struct rp_notify_check *c = &n->opts.checks[i];
		struct rp_err err = { 0 };
		int rc = c->alive(c->ctx, n->interval_ns / 2, &err);
		alive = rc != -ETIMEDOUT;
		size_t used = strlen(note);
		if (rc < 0)
			snprintf(note + used, len - used, "; %s%s: %.200s", alive ? "" : "watchdog: stuck: ",
				 c->name, err.msg[0] ? err.msg : strerror(-rc));
	}
	return alive;
}

static void tick(struct rp_notify *n)
{
	char msg[1024], note[512] = "";
	/* Its own datagram: a status that waits on a busy lock must not
	 * delay the ping. */
	if (n->watchdog_usec && all_alive(n, note, sizeof(note)))
		send_state(n, "WATCHDOG=1");
	status_line(n, "", msg, sizeof(msg));
	size_t len = strlen(msg);
	snprintf(msg + len, sizeof(msg) - len, "%s", note);
	send_state(n, msg);
}

static void *notify_main(void *arg)
{
	struct rp_notify *n = arg;
	pthread_mutex_lock(&n->lock);
	while (!n->stop) {
		/* The first tick waits a whole interval: READY=1 and its
		 * STATUS were just sent. */
		uint64_t due = rp_clock_now_ns() + n->interval_ns;
		for (uint64_t now; !n->stop && (now = rp_clock_now_ns()) < due;)
			rp_cond_wait_ns(&n->wake, &n->lock, due - now);
		if (n->stop)
			break;
		pthread_mutex_unlock(&n->lock);
		tick(n);
		pthread_mutex_lock(&n->lock);
	}
	pthread_mutex_unlock(&n->lock);
	return NULL;
}

static void stop_thread(struct rp_notify *n)
{
	pthread_mutex_lock(&n->lock);
	n->stop = true;
	pthread_cond_signal(&n->wake);
	pthread_mutex_unlock(&n->lock);
	pthread_join(n->thread, NULL);
}

int rp_notify_start(const struct rp_notify_opts *opts, struct rp_notify **out,
		    struct rp_err *err)
{
	*out = NULL;
	const char *sock = getenv("NOTIFY_SOCKET");
	if (!sock || !sock[0])
		return 0;
	uint64_t usec = 0;
	int wd = sd_watchdog_enabled(0, &usec);
	if (wd < 0)
		return rp_err_set(err, wd,
				  "WATCHDOG_USEC or WATCHDOG_PID is malformed: %s: set WatchdogSec= in the unit instead of these variables",
				  strerror(-wd));
	struct rp_notify *n = calloc(1, sizeof(*n));
	if (!n)
		return rp_err_set(err, -ENOMEM, "out of memory");
	n->opts = *opts;
	n->watchdog_usec = wd > 0 ? usec : 0;
	n->interval_ns = STATUS_INTERVAL_NS;
	if (n->watchdog_usec && n->watchdog_usec < 2 * STATUS_INTERVAL_NS / 1000)
		n->interval_ns = n->watchdog_usec * 500;
	pthread_mutex_init(&n->lock, NULL);
	rp_cond_init_monotonic(&n->wake);
	int rc = -pthread_create(&n->thread, NULL, notify_main, n);
	if (rc == 0)
		pthread_setname_np(n->thread, "rp-notify");
	if (rc < 0) {
		rp_err_set(err, rc, "cannot start the systemd notification thread: %s", strerror(-rc));
	} else {
		char msg[1024];
		status_line(n, "READY=1\n", msg, sizeof(msg));
		rc = sd_notify(0, msg);
		if (rc >= 0) {
			*out = n;
			return 0;
		}
		/* systemd would wait for READY=1 until its start timeout:
		 * better to fail now, saying why. */
		rp_err_set(err, rc,
			   "cannot send READY=1 to NOTIFY_SOCKET=%s: %s: unset NOTIFY_SOCKET when ringprofd is not started by systemd",
			   sock, strerror(-rc));
		stop_thread(n);
	}
	pthread_cond_destroy(&n->wake);
	pthread_mutex_destroy(&n->lock);
	free(n);
	return rc;
}

void rp_notify_stop(struct rp_notify *n)
{
	if (!n)
		return;
	stop_thread(n);
	send_state(n, "STOPPING=1\nSTATUS=Stopping: closing open sessions, sealing the rings");
	pthread_cond_destroy(&n->wake);
	pthread_mutex_destroy(&n->lock);
	free(n);
}
