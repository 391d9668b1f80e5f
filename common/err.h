/* Error reporting shared by every ringprof module.
 *
 * Functions return 0 (or a count) on success and a negative errno on
 * failure.  Where the errno alone would not tell a user what went wrong,
 * they also fill a struct rp_err with a sentence naming the problem and,
 * when there is one, the fix.  The struct pointer may be NULL. */
#ifndef RINGPROF_ERR_H
#define RINGPROF_ERR_H

#include <stddef.h>

struct rp_err {
	int code;       /* negative errno, 0 when unset */
	char msg[512];
};

/* Fill *err (when not NULL) and return code, which must be negative. */
int rp_err_set(struct rp_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefix an existing message, e.g. with the file it concerns. */
int rp_err_prefix(struct rp_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
