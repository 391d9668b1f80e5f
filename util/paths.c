#include "paths.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Each function returns buf, or NULL when the path does not fit in len. */
static const char *fit(char *buf, size_t len, int n)
{
	return n >= 0 && (size_t)n < len ? buf : NULL;
}

/* A set, absolute environment path; relative ones are ignored as the XDG
 * base directory spec asks. */
static const char *env_dir(const char *name)
{
	const char *v = getenv(name);
	return v && v[0] == '/' ? v : NULL;
}

/* $HOME, else the password database entry (kept in pwbuf). */
static const char *home_dir(char *pwbuf, size_t len)
{
	const char *home = env_dir("HOME");
	if (home)
		return home;
	struct passwd pw, *res = NULL;
	if (getpwuid_r(getuid(), &pw, pwbuf, len, &res) == 0 && res &&
	    res->pw_dir && res->pw_dir[0] == '/')
		return res->pw_dir;
	return "/"; /* no home at all (a bare service account): still a usable path */
}

const char *rp_default_socket_path(char *buf, size_t len)
{
	const char *env = getenv("RINGPROF_SOCKET");
	if (env && *env)
		return fit(buf, len, snprintf(buf, len, "%s", env));
	if (geteuid() == 0)
		return fit(buf, len, snprintf(buf, len, "/run/ringprof/ringprofd.sock"));
	const char *xdg = env_dir("XDG_RUNTIME_DIR");
	if (xdg)
		return fit(buf, len, snprintf(buf, len, "%s/ringprof/ringprofd.sock", xdg));
	return fit(buf, len,
		   snprintf(buf, len, "/tmp/ringprof-%u/ringprofd.sock", (unsigned)getuid()));
}

static const char *state_subdir(char *buf, size_t len, const char *sub)
{
	if (geteuid() == 0)
		return fit(buf, len, snprintf(buf, len, "/var/lib/ringprof/%s", sub));
	char pwbuf[4096];
	const char *home = home_dir(pwbuf, sizeof(pwbuf));
	return fit(buf, len, snprintf(buf, len, "%s%s.local/state/ringprof/%s", home,
				      home[1] ? "/" : "", sub));
}

const char *rp_default_state_dir(char *buf, size_t len)
{
	return state_subdir(buf, len, "rings");
}

const char *rp_default_logdir(char *buf, size_t len)
{
	return state_subdir(buf, len, "sessions");
}

const char *rp_producer_socket_path(const char *control_socket, char *buf, size_t len)
{
	return fit(buf, len, snprintf(buf, len, "%s.producers", control_socket));
}
