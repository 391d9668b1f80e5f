/* Control API client (client.h).  Each call uses its own libcurl handle,
 * so one client may serve several threads. */
#include "client.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "paths.h"

#define DEFAULT_TIMEOUT_MS 30000
#define CONNECT_TIMEOUT_MS 5000
/* Answers are small JSON documents; the cap only stops a runaway peer. */
#define RESPONSE_MAX (64u << 20)
#define EXPECT_CONTINUE_OVER 1024

struct rp_client {
	char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *base_url;       /* NULL: over the Unix socket */
	char *auth_header;    /* "Authorization: Bearer ..." or NULL */
	char *client_header;  /* "X-Ringprof-Client: ..." or NULL */
	long timeout_ms;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void init_curl(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_ALL);
}

/* "Name: value", refusing CR/LF that would smuggle in other headers. */
static int make_header(const char *name, const char *value, char **out, struct rp_err *err)
{
	if (strpbrk(value, "\r\n"))
		return rp_err_set(err, -EINVAL, "the %s for ringprofd contains a line break: remove it",
				  name);
	if (asprintf(out, "%s: %s", name, value) < 0) {
		*out = NULL;
		return rp_err_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

int rp_client_new(const struct rp_client_opts *opts, struct rp_client **out, struct rp_err *err)
{
	pthread_once(&curl_once, init_curl);
	if (curl_init_rc != CURLE_OK)
		return rp_err_set(err, -EIO, "cannot initialise libcurl: %s",
				  curl_easy_strerror(curl_init_rc));
	struct rp_client *c = calloc(1, sizeof(*c));
	if (!c)
		return rp_err_set(err, -ENOMEM, "out of memory");
	c->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
	int rc = 0;
	if (opts->base_url) {
		size_t n = strlen(opts->base_url);
		while (n && opts->base_url[n - 1] == '/')
			n--;  /* paths start with '/' */
		if (strncmp(opts->base_url, "http://", 7) && strncmp(opts->base_url, "https://", 8))
			rc = rp_err_set(err, -EINVAL,
					"ringprofd URL '%s' must start with http:// or https://, e.g. http://trainer-07:9464",
					opts->base_url);
		else if (!(c->base_url = strndup(opts->base_url, n)))
			rc = rp_err_set(err, -ENOMEM, "out of memory");
	} else {
		char buf[sizeof(c->socket_path)];
		const char *p = opts->socket_path ? opts->socket_path : rp_default_socket_path(buf, sizeof(buf));
		if (!p || strlen(p) >= sizeof(c->socket_path))
			rc = rp_err_set(err, -ENAMETOOLONG,
					"the ringprofd socket path is longer than the %zu bytes a Unix socket allows: set RINGPROF_SOCKET to a shorter path",
					sizeof(c->socket_path) - 1);
		else
			snprintf(c->socket_path, sizeof(c->socket_path), "%s", p);
	}
	if (rc == 0 && opts->token && opts->token[0]) {
		char *bearer;
		if (asprintf(&bearer, "Bearer %s", opts->token) < 0)
			rc = rp_err_set(err, -ENOMEM, "out of memory");
		else {
			rc = make_header("Authorization", bearer, &c->auth_header, err);
			free(bearer);
		}
	}
	if (rc == 0 && opts->client_name)
		rc = make_header("X-Ringprof-Client", opts->client_name, &c->client_header, err);
	if (rc < 0) {
		rp_client_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void rp_client_free(struct rp_client *c)
{
	if (!c)
		return;
	free(c->base_url);
	free(c->auth_header);
	free(c->client_header);
	free(c);
}

/* The response body, always NUL-terminated. */
struct body {
	char *data;
	size_t len;
	bool overflow;
};

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	struct body *b = ud;
	n *= size;
	if (b->len + n > RESPONSE_MAX) {
		b->overflow = true;
		return 0;  /* makes curl fail with CURLE_WRITE_ERROR */
	}
	char *d = realloc(b->data, b->len + n + 1);
	if (!d)
		return 0;
	memcpy(d + b->len, p, n);
	b->data = d;
	b->len += n;
	d[b->len] = '\0';
	return n;
}

static const char *where(const struct rp_client *c)
{
	return c->base_url ? c->base_url : c->socket_path;
}

static int transport_error(const struct rp_client *c, CURLcode rc, long os_errno,
			   const char *detail, const struct body *b, struct rp_err *err)
{
	if (rc == CURLE_OPERATION_TIMEDOUT)
		return rp_err_set(err, -ETIMEDOUT,
				  "ringprofd at %s did not answer within %ld ms: it may be stuck; see its log (journalctl -u ringprofd)",
				  where(c), c->timeout_ms);
	if (rc == CURLE_WRITE_ERROR && b->overflow)
		return rp_err_set(err, -EPROTO, "ringprofd at %s sent an answer over %u MiB: is that really ringprofd?",
				  where(c), RESPONSE_MAX >> 20);
	if (rc != CURLE_COULDNT_CONNECT)
		return rp_err_set(err, -EIO, "request to ringprofd at %s failed: %s", where(c),
				  detail[0] ? detail : curl_easy_strerror(rc));
	int e = os_errno ? (int)os_errno : ECONNREFUSED;
	if (c->base_url)
		return rp_err_set(err, -e,
				  "cannot reach ringprofd at %s: %s: check that it runs there with [api] tcp_listen set to that address",
				  c->base_url, strerror(e));
	switch (e) {
	case ENOENT:
		return rp_err_set(err, -e,
				  "cannot reach ringprofd at %s: no such socket: is the daemon running? start it with `ringprofd` (or `systemctl start ringprofd`), or set RINGPROF_SOCKET",
				  c->socket_path);
	case ECONNREFUSED:
		return rp_err_set(err, -e,
				  "cannot reach ringprofd at %s: nobody is listening on the socket (left over from a daemon that exited?): start it with `ringprofd` (or `systemctl start ringprofd`), or set RINGPROF_SOCKET",
				  c->socket_path);
	case EACCES:
	case EPERM:
		return rp_err_set(err, -e,
				  "cannot reach ringprofd at %s: permission denied: join the ringprof group (sudo usermod -aG ringprof $USER, then log in again) or run as root",
				  c->socket_path);
	default:
		return rp_err_set(err, -e, "cannot reach ringprofd at %s: %s", c->socket_path, strerror(e));
	}
}

/* The server's {"error": {"message": ...}}, else the status and body. */
static int status_error(long status, const struct body *b, struct rp_err *err)
{
	int code;
	switch (status) {
	case 400:
		code = -EINVAL;
		break;
	case 401:
		code = -EACCES;
		break;
	case 404:
		code = -ENOENT;
		break;
	case 409:
		code = -EEXIST;
		break;
	case 413:
		code = -E2BIG;
		break;
	case 503:
		code = -EAGAIN;
		break;
	default:
		code = -EIO;
	}
	json_t *j = b->len ? json_loadb(b->data, b->len, 0, NULL) : NULL;
	json_t *msg = json_object_get(json_object_get(j, "error"), "message");
	if (json_is_string(msg))
		rp_err_set(err, code, "%s", json_string_value(msg));
	else
		rp_err_set(err, code, "ringprofd answered HTTP %ld%s%.200s", status, b->len ? ": " : "",
			   b->len ? b->data : "");
	json_decref(j);
	return code;
}

/* One exchange; 0 with the body on a 2xx answer. */
static int request(const struct rp_client *c, const char *method, const char *path,
		   const char *payload, struct body *b, struct rp_err *err)
{
	char *url;
	if (asprintf(&url, "%s%s", c->base_url ? c->base_url : "http://localhost", path) < 0)
		return rp_err_set(err, -ENOMEM, "out of memory");
	CURL *h = curl_easy_init();
	struct curl_slist *hdrs = NULL, *l;
	const char *extra[] = {
		"Accept: application/json",
		/* A big body waits for the server's go-ahead, so a refusal (413)
		 * arrives intact instead of as a broken pipe mid-upload. */
		payload && strlen(payload) > EXPECT_CONTINUE_OVER ? "Expect: 100-continue" : NULL,
		strcmp(method, "GET") ? "Content-Type: application/json" : NULL,
		c->auth_header,
		c->client_header,
	};
	bool ok = h != NULL;
	for (size_t i = 0; ok && i < sizeof(extra) / sizeof(extra[0]); i++) {
		if (!extra[i])
			continue;
		if (!(l = curl_slist_append(hdrs, extra[i])))
			ok = false;
		else
			hdrs = l;
	}
	if (!ok) {
		curl_slist_free_all(hdrs);
		curl_easy_cleanup(h);
		free(url);
		return rp_err_set(err, -ENOMEM, "out of memory");
	}
	char detail[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_URL, url);
	if (!c->base_url)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->socket_path);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  /* no SIGALRM games in threaded callers */
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
			 c->timeout_ms < CONNECT_TIMEOUT_MS ? c->timeout_ms : CONNECT_TIMEOUT_MS);
	if (strcmp(method, "GET")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload ? payload : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(payload ? strlen(payload) : 0));
	}
	CURLcode rc = curl_easy_perform(h);
	long status = 0, os_errno = 0;
	int ret;
	if (rc != CURLE_OK) {
		curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os_errno);
		ret = transport_error(c, rc, os_errno, detail, b, err);
	} else {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
		ret = status >= 200 && status < 300 ? 0 : status_error(status, b, err);
	}
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	free(url);
	return ret;
}

int rp_client_call(struct rp_client *c, const char *method, const char *path, json_t *body,
		   json_t **response, struct rp_err *err)
{
	char *payload = NULL;
	if (body && !(payload = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY)))
		return rp_err_set(err, -EINVAL, "cannot encode the request body as JSON");
	struct body b = { 0 };
	int rc = request(c, method, path, payload, &b, err);
	free(payload);
	json_t *j = NULL;
	if (rc == 0 && b.len) {
		json_error_t je;
		if (!(j = json_loadb(b.data, b.len, 0, &je)))
			rc = rp_err_set(err, -EPROTO, "ringprofd at %s sent an answer that is not JSON: %s",
					where(c), je.text);
	}
	free(b.data);
	if (response)
		*response = j;
	else
		json_decref(j);
	return rc;
}

int rp_client_get_text(struct rp_client *c, const char *path, char **text, struct rp_err *err)
{
	struct body b = { 0 };
	int rc = request(c, "GET", path, NULL, &b, err);
	if (rc < 0) {
		free(b.data);
		return rc;
	}
	*text = b.data ? b.data : strdup("");
	return *text ? 0 : rp_err_set(err, -ENOMEM, "out of memory");
}

int rp_client_read_token(const char *path, char *token, size_t len, struct rp_err *err)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return rp_err_set(err, -errno, "cannot read token file %s: %s", path, strerror(errno));
	if (!fgets(token, (int)len, f))
		token[0] = '\0';
	fclose(f);
	token[strcspn(token, " \t\r\n")] = '\0';
	if (strlen(token) < 16)
		return rp_err_set(err, -EINVAL, "token in %s is shorter than 16 characters: write a "
				  "long random token there (e.g. `openssl rand -hex 32`)", path);
	return 0;
}
