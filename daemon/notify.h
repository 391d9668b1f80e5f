/* Telling systemd how the daemon is doing (sd_notify): READY=1 once it
 * serves, STATUS= with its rings, events and open sessions every few
 * seconds, WATCHDOG=1 while it makes progress, STOPPING=1 at shutdown.
 *
 * Nothing happens when NOTIFY_SOCKET is unset (not started by systemd,
 * or by a unit that is not Type=notify). */
#ifndef RINGPROF_NOTIFY_H
#define RINGPROF_NOTIFY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* One of the daemon's threads, checked before each watchdog ping (only
 * when the unit has a watchdog, WatchdogSec=). */
struct rp_notify_check {
	const char *name;        /* "session thread", ... as STATUS says it */
	/* 0 once the thread completed a pass of its work since the call.
	 * -ETIMEDOUT (err says what waits) when it did not within timeout_ns:
	 * it is stuck, and no ping goes out, so that systemd restarts the
	 * daemon if it stays so.  Another negative errno (err filled): the
	 * pass ran but failed; the thread is alive, the message goes into
	 * STATUS.  A check may also block while its thread is stuck. */
	int (*alive)(void *ctx, uint64_t timeout_ns, struct rp_err *err);
	void *ctx;
};

struct rp_notify_opts {
	/* Every one must pass for a ping, checked in this order (borrowed
	 * until rp_notify_stop). */
	const struct rp_notify_check *checks;
	size_t nchecks;
	/* The control API's status (docs/api.md, GET /v1/status), from
	 * which STATUS= is made, within timeout_ns. */
	int (*status)(void *ctx, uint64_t timeout_ns, json_t **out, struct rp_err *err);
	void *status_ctx;
};

struct rp_notify;

/* Send READY=1 and the first STATUS, and start the thread that updates
 * STATUS and pings the watchdog at half its timeout.  *out is NULL when
 * there is no NOTIFY_SOCKET. */
RP_MUST_CHECK int rp_notify_start(const struct rp_notify_opts *opts, struct rp_notify **out,
		    struct rp_err *err);
/* Stop the thread and send STOPPING=1.  NULL is fine. */
void rp_notify_stop(struct rp_notify *n);

#endif
