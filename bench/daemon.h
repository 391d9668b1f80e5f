/* The ringprofd a benchmark runs: a work directory on a disk holding its
 * socket, rings, sessions, configuration and log; the daemon started
 * there (a process group of its own, so that a ^C reaches the benchmark,
 * which stops it), asked over its API, and stopped.  Every message goes
 * to stderr, first the benchmark's name. */
#ifndef RINGPROF_BENCH_DAEMON_H
#define RINGPROF_BENCH_DAEMON_H

#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/types.h>

#include "client.h"

#define BENCH_SOCKET_MAX 97           /* docs/configuration.md, [daemon] socket */
#define BENCH_SOCKET_NAME "/ctl.sock"
/* The work directory's path with its NUL, short enough for the socket. */
#define BENCH_DIR_MAX (BENCH_SOCKET_MAX - ((int)sizeof(BENCH_SOCKET_NAME) - 1) + 1)

struct bench_daemon {
	const char *prog;         /* the benchmark's name: "bench-snapshot" */
	const char *path;         /* the ringprofd to run */
	char dir[BENCH_DIR_MAX];  /* work directory; "" until made */
	char sock[PATH_MAX];
	char log[PATH_MAX];
	int cpu;                  /* >= 0: run the daemon on this CPU only */
	pid_t pid;                /* 0 when not running */
	struct rp_client *client; /* while it runs */
};

/* Set by SIGINT and SIGTERM once bench_catch_signals was called. */
extern volatile sig_atomic_t bench_interrupted;
void bench_catch_signals(void);

double bench_now_s(void);
/* Sorts v. */
double bench_median(double *v, int n);
void bench_remove_tree(const char *path);
/* Keeps the calling thread on cpu; cpu < 0: does nothing. */
void bench_pin(int cpu);

/* The options of every benchmark that runs the daemon, for a value c of
 * getopt_long that the benchmark's own options do not take: 'd' (--dir
 * DIR: *parent), 'D' (--daemon PATH), 'h' (--help: usage on stdout, then
 * exit); anything else is a usage error: -1, usage on stderr. */
int bench_common_option(struct bench_daemon *d, const char **parent, int c, const char *arg,
			void (*usage)(FILE *));
/* After getopt_long: -1 (with usage on stderr) when arguments are left. */
int bench_no_arguments(const struct bench_daemon *d, int argc, char **argv,
		       void (*usage)(FILE *));

/* Makes the work directory <parent>/rp<prog>-XXXXXX, which must be on a
 * disk (not tmpfs); -1 with a message. */
int bench_workdir(struct bench_daemon *d, const char *parent);
/* Writes config (INI text) to <dir>/bench.conf and starts the daemon
 * with its rings in <dir>/state and sessions in <dir>/logs; returns once
 * it answers, or -1 with a message (and its log). */
int bench_daemon_start(struct bench_daemon *d, const char *config);
/* SIGTERM, and SIGKILL when it does not stop in time; frees the client. */
void bench_daemon_stop(struct bench_daemon *d);
/* Stops the daemon and removes the work directory. */
void bench_daemon_cleanup(struct bench_daemon *d);
/* False (with the reason and its log printed) when the daemon is gone. */
bool bench_daemon_alive(struct bench_daemon *d, const char *when);
/* Sleeps; false (with the reason printed) when interrupted or the daemon
 * died meanwhile. */
bool bench_wait_s(struct bench_daemon *d, double seconds, const char *when);
/* The answer to a request, or NULL with a message. */
json_t *bench_call(struct bench_daemon *d, const char *method, const char *path, json_t *body);
/* The end of the daemon's log, on stderr. */
void bench_print_log(const struct bench_daemon *d);

#endif
