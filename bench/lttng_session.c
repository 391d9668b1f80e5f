#include "lttng_session.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "append_tp.h"

int bench_sh(const char *cmd, char *out, size_t cap)
{
	char full[PATH_MAX + 512], rest[4096];
	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	FILE *f = popen(full, "r");
	if (!f)
		return -1;
	size_t n = fread(out, 1, cap - 1, f);
	out[n] = 0;
	/* Output beyond cap is read and discarded, so the command never
	 * blocks on a full pipe. */
	while (fread(rest, 1, sizeof(rest), f) > 0)
		;
	int st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static uint64_t tree_bytes;
static int add_size(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (type == FTW_F)
		tree_bytes += (uint64_t)st->st_size;
	return 0;
}

static int sync_failed; /* errno of the first failed fsync */
static int sync_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if ((fd < 0 || fsync(fd) < 0) && !sync_failed)
		sync_failed = errno;
	if (fd >= 0)
		close(fd);
	return 0;
}

/* Everything below the top directory, which stays. */
static int remove_below(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	return ftw->level > 0 ? remove(path) : 0;
}

/* Waits up to ms for cond(), polling every 10 ms. */
static bool wait_for(bool (*cond)(void), unsigned ms)
{
	for (unsigned waited = 0; !cond(); waited += 10) {
		if (waited >= ms)
			return false;
		usleep(10000);
	}
	return true;
}

static bool app_registered(void)
{
	char out[65536], pid[32];
	snprintf(pid, sizeof(pid), "PID: %d ", (int)getpid());
	return bench_sh("lttng list -u", out, sizeof(out)) == 0 && strstr(out, pid) &&
	       strstr(out, "ringprof_bench:range_begin");
}

static bool probes_armed(void)
{
	return tracepoint_enabled(ringprof_bench, range_begin) &&
	       tracepoint_enabled(ringprof_bench, range_end);
}

/* The session daemon this run started (read from its pid file), so it is
 * stopped again afterwards; 0 when one was running already. */
static pid_t start_sessiond(char *why, size_t why_cap)
{
	char out[4096];
	if (bench_sh("lttng --version", out, sizeof(out)) != 0) {
		snprintf(why, why_cap, "the lttng command is not available (install lttng-tools)");
		return -1;
	}
	if (bench_sh("lttng list", out, sizeof(out)) == 0)
		return 0;
	if (geteuid() != 0) {
		snprintf(why, why_cap, "no LTTng session daemon runs and this is not root "
			 "to start one (run lttng-sessiond --daemonize first)");
		return -1;
	}
	if (bench_sh("lttng-sessiond --daemonize", out, sizeof(out)) != 0) {
		snprintf(why, why_cap, "lttng-sessiond --daemonize failed: %.900s", out);
		return -1;
	}
	pid_t pid = 0;
	FILE *f = fopen("/var/run/lttng/lttng-sessiond.pid", "r");
	if (f) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	return pid;
}

int bench_lttng_start(struct bench_lttng *l, const char *name, const char *parent,
		      const char *channel_opts, char *why, size_t why_cap)
{
	char out[8192], cmd[PATH_MAX + 256];
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->dir[0] = 0;
	l->sessiond = start_sessiond(why, why_cap);
	if (l->sessiond < 0) {
		l->sessiond = 0;
		return -1;
	}
	if (!wait_for(app_registered, 10000)) {
		snprintf(why, why_cap, "this process did not register with the LTTng session "
			 "daemon within 10 s");
		goto fail;
	}
	snprintf(l->dir, sizeof(l->dir), "%s/rpbench-lttng-XXXXXX", parent);
	if (!mkdtemp(l->dir)) {
		snprintf(why, why_cap, "cannot create %s: %s", l->dir, strerror(errno));
		l->dir[0] = 0;
		goto fail;
	}
	snprintf(cmd, sizeof(cmd), "lttng destroy %s", l->name);
	bench_sh(cmd, out, sizeof(out)); /* left by an aborted run */
	snprintf(cmd, sizeof(cmd), "lttng create %s --snapshot --output=%s", l->name, l->dir);
	int rc = bench_sh(cmd, out, sizeof(out));
	if (rc == 0 && channel_opts) {
		snprintf(cmd, sizeof(cmd), "lttng enable-channel -u -s %s %s bench", l->name,
			 channel_opts);
		rc = bench_sh(cmd, out, sizeof(out));
	}
	if (rc == 0) {
		snprintf(cmd, sizeof(cmd), "lttng enable-event -u 'ringprof_bench:*' -s %s%s",
			 l->name, channel_opts ? " -c bench" : "");
		rc = bench_sh(cmd, out, sizeof(out));
	}
	if (rc == 0) {
		snprintf(cmd, sizeof(cmd), "lttng start %s", l->name);
		rc = bench_sh(cmd, out, sizeof(out));
	}
	if (rc != 0) {
		snprintf(why, why_cap, "setting up the LTTng session failed: %.900s", out);
		goto fail;
	}
	if (!wait_for(probes_armed, 5000)) {
		snprintf(why, why_cap, "the tracepoints were not enabled within 5 s of lttng start");
		goto fail;
	}
	return 0;
fail:
	bench_lttng_end(l);
	return -1;
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

int bench_lttng_snapshot(struct bench_lttng *l, double *seconds, double *durable_seconds,
			 uint64_t *bytes, char *why, size_t why_cap)
{
	char out[8192], cmd[256];
	struct timespec t0;
	snprintf(cmd, sizeof(cmd), "lttng snapshot record -s %s", l->name);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = bench_sh(cmd, out, sizeof(out));
	*seconds = seconds_since(&t0);
	if (rc != 0) {
		snprintf(why, why_cap, "taking the LTTng snapshot failed: %.900s", out);
		return -1;
	}
	if (durable_seconds) {
		sync_failed = 0;
		nftw(l->dir, sync_entry, 16, FTW_PHYS);
		if (sync_failed) {
			snprintf(why, why_cap, "cannot fsync the LTTng snapshot in %s: %s", l->dir,
				 strerror(sync_failed));
			return -1;
		}
		*durable_seconds = seconds_since(&t0);
	}
	tree_bytes = 0;
	nftw(l->dir, add_size, 16, FTW_PHYS);
	*bytes = tree_bytes;
	nftw(l->dir, remove_below, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

void bench_lttng_end(struct bench_lttng *l)
{
	char out[4096], cmd[256];
	snprintf(cmd, sizeof(cmd), "lttng destroy %s", l->name);
	bench_sh(cmd, out, sizeof(out));
	if (l->dir[0]) {
		nftw(l->dir, remove_below, 16, FTW_DEPTH | FTW_PHYS);
		rmdir(l->dir);
		l->dir[0] = 0;
	}
	if (l->sessiond > 0)
		kill(l->sessiond, SIGTERM);
	l->sessiond = 0;
}
