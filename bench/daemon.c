#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <linux/magic.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define START_TIMEOUT_S 10.0
#define STOP_TIMEOUT_S 30.0
#define LOG_TAIL 4096

volatile sig_atomic_t bench_interrupted;

static void on_signal(int sig)
{
	(void)sig;
	bench_interrupted = 1;
}

void bench_catch_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

double bench_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

void bench_pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

void bench_remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int bench_common_option(struct bench_daemon *d, const char **parent, int c, const char *arg,
			void (*usage)(FILE *))
{
	switch (c) {
	case 'd':
		*parent = arg;
		return 0;
	case 'D':
		d->path = arg;
		return 0;
	case 'h':
		usage(stdout);
		exit(0);
	default:
		usage(stderr);
		return -1;
	}
}

int bench_no_arguments(const struct bench_daemon *d, int argc, char **argv,
		       void (*usage)(FILE *))
{
	if (optind >= argc)
		return 0;
	fprintf(stderr, "%s: unexpected argument '%s'\n", d->prog, argv[optind]);
	usage(stderr);
	return -1;
}

int bench_workdir(struct bench_daemon *d, const char *parent)
{
	if (access(d->path, X_OK) < 0) {
		fprintf(stderr, "%s: ringprofd not found at %s (%s): build it "
			"(ninja -C build) or pass --daemon PATH\n", d->prog, d->path, strerror(errno));
		return -1;
	}
	char tmpl[PATH_MAX], dir[PATH_MAX];
	snprintf(tmpl, sizeof(tmpl), "%s/rp%s-XXXXXX", parent, d->prog);
	if (!mkdtemp(tmpl)) {
		fprintf(stderr, "%s: cannot create a work directory in %s: %s\n", d->prog, parent,
			strerror(errno));
		return -1;
	}
	if (!realpath(tmpl, dir)) {
		fprintf(stderr, "%s: realpath %s: %s\n", d->prog, tmpl, strerror(errno));
		rmdir(tmpl);
		return -1;
	}
	if (strlen(dir) >= BENCH_DIR_MAX) {
		fprintf(stderr, "%s: the socket path %s%s would be longer than %d "
			"bytes: pass a shorter --dir\n", d->prog, dir, BENCH_SOCKET_NAME, BENCH_SOCKET_MAX);
		rmdir(dir);
		return -1;
	}
	memcpy(d->dir, dir, strlen(dir) + 1);
	struct statfs fs;
	if (statfs(d->dir, &fs) < 0) {
		fprintf(stderr, "%s: statfs %s: %s\n", d->prog, d->dir, strerror(errno));
		return -1;
	}
	if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
		fprintf(stderr, "%s: %s is in memory (tmpfs): the ring and the "
			"sessions must be on a disk: pass --dir on one\n", d->prog, d->dir);
		return -1;
	}
	snprintf(d->sock, sizeof(d->sock), "%s" BENCH_SOCKET_NAME, d->dir);
	return 0;
}

void bench_print_log(const struct bench_daemon *d)
{
	FILE *f = fopen(d->log, "r");
	if (!f) {
		fprintf(stderr, "  (no log at %s)\n", d->log);
		return;
	}
	char buf[LOG_TAIL + 1];
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	fseek(f, size > LOG_TAIL ? size - LOG_TAIL : 0, SEEK_SET);
	size_t n = fread(buf, 1, LOG_TAIL, f);
	buf[n] = 0;
	fclose(f);
	fprintf(stderr, "--- %s%s ---\n%s%s--- end of log ---\n", d->log,
		size > LOG_TAIL ? " (its end)" : "", n ? buf : "(empty)\n",
		n && buf[n - 1] != '\n' ? "\n" : "");
}

static void report_exit(struct bench_daemon *d, int st, const char *when)
{
	if (WIFEXITED(st))
		fprintf(stderr, "%s: ringprofd exited %s with status %d; its log:\n", d->prog, when,
			WEXITSTATUS(st));
	else
		fprintf(stderr, "%s: ringprofd was killed by signal %d (%s) %s; its log:\n", d->prog,
			WTERMSIG(st), strsignal(WTERMSIG(st)), when);
	bench_print_log(d);
}

bool bench_daemon_alive(struct bench_daemon *d, const char *when)
{
	int st;
	if (d->pid <= 0 || waitpid(d->pid, &st, WNOHANG) != d->pid)
		return d->pid > 0;
	d->pid = 0;
	report_exit(d, st, when);
	return false;
}

bool bench_wait_s(struct bench_daemon *d, double seconds, const char *when)
{
	double until = bench_now_s() + seconds;
	while (bench_now_s() < until) {
		if (bench_interrupted) {
			fprintf(stderr, "%s: interrupted\n", d->prog);
			return false;
		}
		if (d->pid && !bench_daemon_alive(d, when))
			return false;
		double left = until - bench_now_s();
		usleep(left > 0.1 ? 100000 : left > 0 ? (useconds_t)(left * 1e6) : 0);
	}
	return true;
}

json_t *bench_call(struct bench_daemon *d, const char *method, const char *path, json_t *body)
{
	struct rp_err err = { 0 };
	json_t *resp = NULL;
	if (rp_client_call(d->client, method, path, body, &resp, &err) < 0) {
		fprintf(stderr, "%s: %s %s: %s\n", d->prog, method, path, err.msg);
		return NULL;
	}
	return resp;
}

static int write_config(struct bench_daemon *d, const char *config, char *path, size_t cap)
{
	snprintf(path, cap, "%s/bench.conf", d->dir);
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "%s: cannot create %s: %s\n", d->prog, path, strerror(errno));
		return -1;
	}
	fputs(config, f);
	return fclose(f) == 0 ? 0 : -1;
}

int bench_daemon_start(struct bench_daemon *d, const char *config)
{
	char conf[PATH_MAX], state[PATH_MAX], logs[PATH_MAX];
	if (write_config(d, config, conf, sizeof(conf)) < 0)
		return -1;
	snprintf(state, sizeof(state), "%s/state", d->dir);
	snprintf(logs, sizeof(logs), "%s/logs", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/ringprofd.log", d->dir);
	int log = open(d->log, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
	if (log < 0) {
		fprintf(stderr, "%s: cannot create %s: %s\n", d->prog, d->log, strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		/* Its own process group: a ^C reaches the bench, which stops it. */
		setpgid(0, 0);
		bench_pin(d->cpu);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, STDOUT_FILENO);
		dup2(log, STDERR_FILENO);
		execl(d->path, d->path, "--foreground", "--socket", d->sock,
		      "--state-dir", state, "--logdir", logs, "--config", conf, (char *)NULL);
		fprintf(stderr, "%s: cannot run %s: %s\n", d->prog, d->path, strerror(errno));
		_exit(127);
	}
	close(log);
	if (pid < 0) {
		fprintf(stderr, "%s: fork: %s\n", d->prog, strerror(errno));
		return -1;
	}
	d->pid = pid;
	struct rp_client_opts co = { .socket_path = d->sock, .client_name = d->prog,
				     .timeout_ms = 120000 };
	struct rp_err err = { 0 };
	if (rp_client_new(&co, &d->client, &err) < 0) {
		fprintf(stderr, "%s: %s\n", d->prog, err.msg);
		return -1;
	}
	for (double until = bench_now_s() + START_TIMEOUT_S; bench_now_s() < until;) {
		json_t *st = NULL;
		if (rp_client_call(d->client, "GET", "/v1/status", NULL, &st, &err) == 0) {
			json_decref(st);
			return 0;
		}
		if (!bench_wait_s(d, 0.05, "during start-up"))
			return -1;
	}
	fprintf(stderr, "%s: ringprofd did not answer on %s within %.0f s (%s); "
		"its log:\n", d->prog, d->sock, START_TIMEOUT_S, err.msg);
	bench_print_log(d);
	return -1;
}

void bench_daemon_stop(struct bench_daemon *d)
{
	rp_client_free(d->client);
	d->client = NULL;
	if (d->pid <= 0)
		return;
	kill(d->pid, SIGTERM);
	int st;
	for (double until = bench_now_s() + STOP_TIMEOUT_S; bench_now_s() < until; usleep(10000))
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
				report_exit(d, st, "on SIGTERM");
			d->pid = 0;
			return;
		}
	fprintf(stderr, "%s: ringprofd did not stop within %.0f s of SIGTERM: "
		"killing it; its log:\n", d->prog, STOP_TIMEOUT_S);
	bench_print_log(d);
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
}

void bench_daemon_cleanup(struct bench_daemon *d)
{
	bench_daemon_stop(d);
	if (d->dir[0])
		bench_remove_tree(d->dir);
	d->dir[0] = 0;
}
