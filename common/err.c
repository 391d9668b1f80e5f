#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rp_err_set(struct rp_err *err, int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
		err->code = code;
	}
	return code;
}

int rp_err_prefix(struct rp_err *err, const char *fmt, ...)
{
	if (!err)
		return 0;
	char prefix[256], old[sizeof(err->msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* A message too long to prefix whole is cut at the end. */
	if ((size_t)snprintf(err->msg, sizeof(err->msg), "%s: %s", prefix, old) >= sizeof(err->msg))
		err->msg[sizeof(err->msg) - 1] = 0;
	return err->code;
}
