/* Error reporting shared by every ringprof module.
 *
 * Functions return 0 (or a count) on success and a negative errno on
 * failure.  Where the errno alone would not tell a user what went wrong,
 * they also fill a struct rp_err with a sentence naming the problem and,
 * when there is one, the fix.  The struct pointer may be NULL. */
#ifndef RINGPROF_ERR_H
#define RINGPROF_ERR_H

#include <stddef.h>

/* On every rp_ function returning a status: a caller that ignores one says
 * so with (void).  GCC's warn_unused_result cannot be silenced by a cast,
 * its C2x [[nodiscard]] can; clang's older C modes lack [[ ]]. */
#if defined(__clang__)
#define RP_MUST_CHECK __attribute__((warn_unused_result))
#else
#define RP_MUST_CHECK [[nodiscard]]
#endif

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
