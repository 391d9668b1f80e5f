/* ringprofd: the always-on flight recorder daemon. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "client.h"
#include "config.h"
#include "control.h"
#include "profsvc.h"
#include "notify.h"
#include "producers.h"
#include "rings.h"
#include "rules.h"
#include "safefs.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: ringprofd [OPTIONS]\n"
		"Keeps the last minutes of profile data of this host in ring buffers and\n"
		"freezes windows of it into sessions on request.\n\n"
		"  --config FILE      read configuration from FILE (default: embedded defaults)\n"
		"  --socket PATH      control socket (producers use PATH.producers)\n"
		"  --state-dir DIR    where the ring files live, and ringprofd.pid while it serves\n"
		"  --logdir DIR       where sessions are written (<DIR>/<run>/plugins/profile/<id>)\n"
		"  --foreground       stay in the foreground (default: detach once ready)\n"
		"  --print-config     print the effective configuration and exit\n"
		"  --version          print the version and exit\n"
		"  -h, --help         show this help\n\n"
		"Flags override the configuration file. See docs/configuration.md.\n"
		"Stop it with 'ringprof shutdown' (or SIGTERM to the pid in ringprofd.pid).\n");
}

static int copy_flag(char *dst, size_t len, const char *value, const char *flag)
{
	if (strlen(value) >= len) {
		fprintf(stderr, "ringprofd: %s: path too long (at most %zu bytes)\n", flag, len - 1);
		return -1;
	}
	memcpy(dst, value, strlen(value) + 1);
	return 0;
}

/* The watchdog's check of the ingest thread: returns once it has drained
 * and written everything (at most one extra chunk per ring per ping), and
 * blocks while it is stuck. */
static int ingest_alive(void *rings, uint64_t timeout_ns, struct rp_err *err)
{
	(void)timeout_ns;
	return rp_rings_flush(rings, err);
}

/* The profiler service's windows: snapshots through the session thread's
 * machinery, kept in the log directory, with their XSpace. */
static int xprof_window(void *control, uint64_t start_ns, uint64_t end_ns, const char *reason,
			uint8_t **buf, size_t *len, struct rp_err *err)
{
	const struct rp_xspace_req req = { .start_ns = start_ns, .end_ns = end_ns,
					   .source = "xprof", .reason = reason,
					   .max_bytes = RP_PROFSVC_MAX_XSPACE };
	return rp_control_xspace(control, &req, buf, len, err);
}

/* GET /v1/status over the control socket, as `ringprof status` asks it:
 * what STATUS= says, and the watchdog's proof that the API serves. */
static int api_status(void *socket_path, uint64_t timeout_ns, json_t **out, struct rp_err *err)
{
	struct rp_client_opts o = { .socket_path = socket_path, .client_name = "watchdog",
				    .timeout_ms = (long)(timeout_ns / 1000000) + 1 };
	struct rp_client *client;
	int rc = rp_client_new(&o, &client, err);
	if (rc == 0)
		rc = rp_client_call(client, "GET", "/v1/status", NULL, out, err);
	rp_client_free(client);
	return rc;
}

/* Any answer in time will do: a refusal (503 under load) comes from a
 * serving API too.  Only a request that times out is stuck. */
static int api_alive(void *socket_path, uint64_t timeout_ns, struct rp_err *err)
{
	json_t *st = NULL;
	int rc = api_status(socket_path, timeout_ns, &st, err);
	json_decref(st);
	return rc;
}

/* POST /v1/shutdown: the same way out as SIGTERM (the signal loop below). */
static void request_shutdown(void *ctx)
{
	(void)ctx;
	(void)kill(getpid(), SIGTERM);
}

#define PIDFILE "ringprofd.pid"

/* <state_dir>/ringprofd.pid, so that scripts stop this daemon and not
 * another user's (ringprof shutdown, or kill $(cat ...)).  Written under a
 * temporary name with O_EXCL | O_NOFOLLOW and renamed into place (safefs.h):
 * a link planted there is replaced, never written through; a leftover of a
 * daemon that was killed is replaced too (the API refused to start beside a
 * live one). */
static int write_pidfile(const char *state_dir, struct rp_err *err)
{
	int dirfd = rp_safefs_open_root(state_dir, 0700, false, err);
	if (dirfd < 0)
		return dirfd;
	struct rp_safefs_tmp t;
	int rc = rp_safefs_tmp_open(dirfd, PIDFILE, 0644, &t, state_dir, err);
	if (rc == 0) {
		char text[24];
		int n = snprintf(text, sizeof(text), "%ld\n", (long)getpid());
		if (write(t.fd, text, (size_t)n) != n) {
			rc = rp_err_set(err, -errno, "cannot write %s/" PIDFILE ": %s", state_dir,
					strerror(errno));
			rp_safefs_tmp_discard(&t);
		} else {
			rc = rp_safefs_tmp_publish(&t, PIDFILE, state_dir, err);
		}
	}
	close(dirfd);
	return rc;
}

/* Removes the pidfile if it still names this process. */
static void remove_pidfile(const char *state_dir)
{
	struct rp_err err = { 0 };
	int dirfd = rp_safefs_open_root(state_dir, 0700, false, &err);
	if (dirfd < 0)
		return;
	char *text = NULL;
	size_t len;
	if (rp_safefs_read(dirfd, PIDFILE, 64, &text, &len, state_dir, &err) == 0 &&
	    strtol(text, NULL, 10) == (long)getpid())
		(void)unlinkat(dirfd, PIDFILE, 0);
	free(text);
	close(dirfd);
}

/* Without --foreground: fork once set-up succeeded, so the shell gets an
 * exit status that means "the daemon is serving". */
static int detach(int *ready_fd)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0) {
		close(p[1]);
		char ok = 0;
		_exit(read(p[0], &ok, 1) == 1 && ok == 1 ? 0 : 1);
	}
	close(p[0]);
	setsid();
	*ready_fd = p[1];
	return 0;
}

int main(int argc, char **argv)
{
	static struct rp_config cfg;
	rp_config_defaults(&cfg);
	const char *config_path = NULL;
	const char *socket = NULL, *state_dir = NULL, *logdir = NULL;
	bool foreground = false, print_config = false;
	enum { OPT_CONFIG = 256, OPT_SOCKET, OPT_STATE, OPT_LOGDIR, OPT_FG, OPT_PRINT, OPT_VERSION };
	static const struct option opts[] = {
		{ "config", required_argument, NULL, OPT_CONFIG },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "state-dir", required_argument, NULL, OPT_STATE },
		{ "logdir", required_argument, NULL, OPT_LOGDIR },
		{ "foreground", no_argument, NULL, OPT_FG },
		{ "print-config", no_argument, NULL, OPT_PRINT },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
		switch (c) {
		case OPT_CONFIG: config_path = optarg; break;
		case OPT_SOCKET: socket = optarg; break;
		case OPT_STATE: state_dir = optarg; break;
		case OPT_LOGDIR: logdir = optarg; break;
		case OPT_FG: foreground = true; break;
		case OPT_PRINT: print_config = true; break;
		case OPT_VERSION: printf("ringprofd %s\n", RINGPROF_VERSION); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ringprofd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	struct rp_err err = { 0 };
	if (config_path && rp_config_load(&cfg, config_path, &err) < 0) {
		fprintf(stderr, "ringprofd: %s\n", err.msg);
		return 1;
	}
	if ((socket && copy_flag(cfg.socket, sizeof(cfg.socket), socket, "--socket") < 0) ||
	    (state_dir && copy_flag(cfg.state_dir, sizeof(cfg.state_dir), state_dir, "--state-dir") < 0) ||
	    (logdir && copy_flag(cfg.logdir, sizeof(cfg.logdir), logdir, "--logdir") < 0))
		return 1;
	if (rp_config_check(&cfg, &err) < 0) {
		fprintf(stderr, "ringprofd: %s\n", err.msg);
		return 1;
	}
	if (print_config) {
		rp_config_print(&cfg, stdout);
		return 0;
	}
	char token[256] = "";
	if (cfg.tcp_listen[0] && rp_client_read_token(cfg.token_file, token, sizeof(token), &err) < 0) {
		fprintf(stderr, "ringprofd: %s\n", err.msg);
		return 1;
	}

	int ready_fd = -1;
	if (!foreground && detach(&ready_fd) < 0) {
		fprintf(stderr, "ringprofd: cannot detach: %s\n", strerror(errno));
		return 1;
	}
	/* Signals are taken synchronously by this thread; every thread
	 * started below inherits the mask. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct rp_rules *rules = NULL;
	struct rp_rings *rings = NULL;
	struct rp_control *control = NULL;
	struct rp_producers *producers = NULL;
	struct rp_api *api = NULL;
	struct rp_profsvc *profsvc = NULL;
	struct rp_notify *notify = NULL;
	struct rp_api_opts api_opts = {
		.socket_path = cfg.socket,
		.tcp_listen = cfg.tcp_listen[0] ? cfg.tcp_listen : NULL,
		.token = token[0] ? token : NULL,
		.max_duration_ns = cfg.max_duration_ns,
		.max_connections = cfg.api_max_connections,
		.max_connections_per_peer = cfg.api_max_connections_per_peer,
		.header_timeout_ns = cfg.api_header_timeout_ns,
		.max_requests = cfg.api_max_requests,
		.max_snapshots = cfg.api_max_snapshots,
		.shutdown = request_shutdown,
	};
	/* The rules watch what the ingest thread drains: they outlive the rings. */
	int rc = rp_rules_new(cfg.rules, cfg.nrules, &rules, &err);
	if (rc == 0)
		rc = rp_rings_start(&cfg, &rings, &err);
	if (rc == 0) {
		rp_rings_set_observer(rings, rp_rules_observe, rules);
		rc = rp_control_new(&cfg, rings, rules, &control, &err);
	}
	/* The API first: it refuses to start beside a live daemon, before
	 * anything of that daemon's (its producer socket) is touched. */
	if (rc == 0)
		rc = rp_api_start(&api_opts, &rp_control_ops, control, &api, &err);
	if (rc == 0)
		rc = rp_producers_start(&cfg, rings, &producers, &err);
	if (rc == 0 && cfg.profsvc_listen[0]) {
		const struct rp_profsvc_opts ps = {
			.listen = cfg.profsvc_listen,
			.allow_unauthenticated = cfg.profsvc_allow_unauthenticated,
			.snapshot_ns = cfg.profsvc_snapshot_ns,
			.max_duration_ns = cfg.max_duration_ns,
			.request_timeout_ns = cfg.profsvc_request_timeout_ns,
			.window = xprof_window, .ctx = control,
		};
		rc = rp_profsvc_start(&ps, &profsvc, &err);
	}
	struct rp_err pid_err = { 0 };
	bool pidfile = rc == 0 && write_pidfile(cfg.state_dir, &pid_err) == 0;
	if (rc == 0 && !pidfile) /* it still serves: ringprof shutdown needs no pidfile */
		fprintf(stderr, "ringprofd: no pidfile: %s\n", pid_err.msg);
	/* The watchdog pings only while each of these makes progress; the
	 * ingest check last: it blocks while its thread is stuck.  Borrowed
	 * by the notifier until it stops. */
	const struct rp_notify_check checks[] = {
		{ "session thread", rp_control_alive, control },
		{ "control API", api_alive, cfg.socket },
		{ "ingest thread", ingest_alive, rings },
	};
	if (rc == 0) {
		struct rp_notify_opts notify_opts = {
			.checks = checks, .nchecks = sizeof(checks) / sizeof(checks[0]),
			.status = api_status, .status_ctx = cfg.socket,
		};
		rc = rp_notify_start(&notify_opts, &notify, &err);
	}
	if (rc < 0) {
		fprintf(stderr, "ringprofd: %s\n", err.msg);
	} else {
		fprintf(stderr, "ringprofd %s: serving on %s (rings in %s, sessions in %s)\n", RINGPROF_VERSION,
			cfg.socket, cfg.state_dir, cfg.logdir);
		if (ready_fd >= 0) {
			/* Detached: let go of the terminal; the log goes on in the
			 * state directory. */
			char log[PATH_MAX + 16];
			snprintf(log, sizeof(log), "%s/ringprofd.log", cfg.state_dir);
			int null = open("/dev/null", O_RDWR | O_CLOEXEC);
			int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0640);
			fprintf(stderr, "ringprofd: detached, logging to %s\n", log);
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
			dup2(logfd >= 0 ? logfd : null, STDERR_FILENO);
			char ok = 1;
			if (write(ready_fd, &ok, 1) != 1)
				fprintf(stderr, "ringprofd: could not report readiness\n");
			close(ready_fd);
			close(null);
			if (logfd >= 0)
				close(logfd);
		}
		int sig = 0;
		while (sig != SIGTERM && sig != SIGINT)
			sigwait(&sigs, &sig);
		fprintf(stderr, "ringprofd: %s: sealing the rings and exiting\n", strsignal(sig));
	}
	rp_notify_stop(notify);
	rp_profsvc_stop(profsvc);
	rp_api_stop(api);
	if (pidfile)
		remove_pidfile(cfg.state_dir);
	rp_producers_stop(producers);
	rp_control_free(control);
	rp_rings_stop(rings);
	rp_rules_free(rules);
	return rc < 0 ? 1 : 0;
}
