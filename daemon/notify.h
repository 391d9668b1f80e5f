/* Telling systemd how the daemon is doing (sd_notify): READY=1 once it
 * serves, STATUS= with its rings, events and open sessions every few
 * seconds, WATCHDOG=1 while it makes progress, STOPPING=1 at shutdown.
 *
 * Nothing happens when NOTIFY_SOCKET is unset (not started by systemd,
 * or by a unit that is not Type=notify). */
#ifndef RINGPROF_NOTIFY_H
#define RINGPROF_NOTIFY_H

#include <jansson.h>

#include "err.h"

struct rp_notify_opts {
	/* Returns once the daemon completed a pass of its work; blocks while
	 * it is stuck, so that the watchdog pings stop and systemd restarts
	 * it.  A negative errno (err filled) means the pass ran but failed:
	 * the daemon is alive, the message goes into STATUS.  Called only
	 * when the unit has a watchdog (WatchdogSec=). */
	int (*alive)(void *ctx, struct rp_err *err);
	void *alive_ctx;
	/* The control API's status (docs/api.md, GET /v1/status), from
	 * which STATUS= is made. */
	int (*status)(void *ctx, json_t **out, struct rp_err *err);
	void *status_ctx;
};

struct rp_notify;

/* Send READY=1 and the first STATUS, and start the thread that updates
 * STATUS and pings the watchdog at half its timeout.  *out is NULL when
 * there is no NOTIFY_SOCKET. */
int rp_notify_start(const struct rp_notify_opts *opts, struct rp_notify **out,
		    struct rp_err *err);
/* Stop the thread and send STOPPING=1.  NULL is fine. */
void rp_notify_stop(struct rp_notify *n);

#endif
