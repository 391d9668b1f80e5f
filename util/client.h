/* A client of ringprofd's control API (docs/api.md): libcurl over the
 * Unix socket, or over TCP with a bearer token, and jansson for bodies.
 * Used by the ringprof CLI and by libringprof. */
#ifndef RINGPROF_CLIENT_H
#define RINGPROF_CLIENT_H

#include <jansson.h>

#include "err.h"

struct rp_client_opts {
	const char *socket_path;  /* NULL: rp_default_socket_path() */
	const char *base_url;     /* "http://host:port" to use TCP instead */
	const char *token;        /* bearer token for TCP */
	const char *client_name;  /* sent as X-Ringprof-Client: cli, library, ... */
	long timeout_ms;          /* whole request; 0: 30 s */
};

struct rp_client;

RP_MUST_CHECK int rp_client_new(const struct rp_client_opts *opts, struct rp_client **out,
		  struct rp_err *err);
void rp_client_free(struct rp_client *c);

/* One request.  body may be NULL.  On 2xx: 0 and the parsed response
 * (new reference; NULL for an empty body).  On an HTTP error: the status
 * mapped to -errno (400 -EINVAL, 401 -EACCES, 404 -ENOENT, 409 -EEXIST,
 * 413 -E2BIG, 503 -EAGAIN, else -EIO) with the server's message in err.
 * Transport failures: -ECONNREFUSED/-ENOENT/... with a message such as
 * "cannot reach ringprofd at /run/ringprof/ringprofd.sock: no such socket:
 * is the daemon running? (ringprofd, or systemctl start ringprofd)". */
RP_MUST_CHECK int rp_client_call(struct rp_client *c, const char *method, const char *path,
		   json_t *body, json_t **response, struct rp_err *err);
/* The bearer token in a token file: its first word, at least 16
 * characters (the daemon's [api] token_file, the CLI's --token-file). */
RP_MUST_CHECK int rp_client_read_token(const char *path, char *token, size_t len, struct rp_err *err);

/* GET a text resource (for /metrics); *text is malloc'ed. */
RP_MUST_CHECK int rp_client_get_text(struct rp_client *c, const char *path, char **text,
		       struct rp_err *err);

#endif
