/* What always-on CPU sampling costs the profiled program, beside perf.
 *
 * The workload is this program run as `bench-overhead --workload ROUNDS`:
 * pinned to the last CPU, it recurses DEPTH frames deep (descend) and
 * there runs ROUNDS rounds of three deterministic loops with names of
 * their own (burn_hash, burn_matrix, burn_collatz), then prints how long
 * that took.  Built with frame pointers and without inlining or sibling
 * calls, so that every sample's user stack is DEPTH + 4 frames.  ROUNDS
 * is calibrated once so that a run takes --seconds on its own.
 *
 * The profilers' own processes (ringprofd, perf) keep to CPU 0, so that
 * what the workload pays is the sampling on its CPU, not their threads
 * taking turns with it (their CPU time is measured apart).
 *
 * Five configurations, round robin (each round starting one further
 * along), --runs times each:
 *   none     the workload alone
 *   rp99     ringprofd sampling every CPU at 99 Hz ([sampler] frequency,
 *            host metrics as by default), started for the run
 *   rp999    the same at 999 Hz
 *   perf99   perf record -F 99 -g -o <dir>/perf.data -- workload
 *   perf999  the same at -F 999
 * Slowdown: the median CPU time of the workload's thread against the
 * median without a profiler.  That CPU time includes the sampling
 * interrupts it takes (without CONFIG_IRQ_TIME_ACCOUNTING, as on the CI
 * VM) and leaves out time a hypervisor steals, the noise of wall time in
 * a VM; wall-time slowdowns are printed beside.  For the ringprofd runs, over the
 * workload's run: the daemon's CPU time (utime + stime in /proc/PID/stat,
 * in clock ticks, summed over the runs; and its threads' schedstat run
 * time, to the ns, per run) per second of wall time; the BPF
 * program's run time (kernel.bpf_stats_enabled is set to 1 for the
 * benchmark and restored after) per run of it and per sample it recorded
 * (runs on idle CPUs return at once); and host ring bytes per sample (the
 * rings sealed before and after through a 1 ms snapshot: the sealed
 * chunks' bytes, samples, their processes' names and mappings, host
 * metrics, over the samples the sampler recorded).
 *
 * Needs root (the sampler, perf at 999 Hz, the sysctl).  Not a pass/fail
 * test: targets are printed beside the figures.  The last line,
 * "result: ...", has a fixed form for scripts; slowdowns and CPU shares
 * are in percent. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

#define DEPTH 20
#define CALIBRATION_ROUNDS 20
#define SETTLE_S 0.5             /* after the daemon starts, before a run */
#define BPF_STATS "/proc/sys/kernel/bpf_stats_enabled"
#define TARGET_DAEMON_CPU_PCT_99 0.5
#define TARGET_BPF_NS 2000.0
#define TARGET_BYTES_PER_SAMPLE 40.0

enum config { NONE, RP99, RP999, PERF99, PERF999, NCONFIGS };
static const char *const config_names[NCONFIGS] = { "none", "rp99", "rp999", "perf99", "perf999" };
static const unsigned config_hz[NCONFIGS] = { 0, 99, 999, 99, 999 };

/* ---- the workload ---- */

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t burn_hash(uint64_t seed)
{
	uint64_t h = seed ^ 0xcbf29ce484222325ull;
	for (int i = 0; i < 200000; i++)
		h = (h ^ (uint64_t)i) * 0x100000001b3ull;
	return h;
}

__attribute__((noinline)) static uint64_t burn_matrix(uint64_t seed)
{
	uint64_t a[8][8], b[8][8], c[8][8] = { { 0 } };
	for (int i = 0; i < 8; i++)
		for (int j = 0; j < 8; j++) {
			a[i][j] = seed + (uint64_t)(i * 8 + j);
			b[i][j] = seed ^ (uint64_t)(j * 8 + i);
		}
	for (int r = 0; r < 400; r++)
		for (int i = 0; i < 8; i++)
			for (int j = 0; j < 8; j++)
				for (int k = 0; k < 8; k++)
					c[i][j] += a[i][k] * b[k][j] + (uint64_t)r;
	return c[seed % 8][(seed >> 3) % 8];
}

__attribute__((noinline)) static uint64_t burn_collatz(uint64_t seed)
{
	uint64_t steps = 0;
	for (uint64_t n0 = 1; n0 < 4000; n0++)
		for (uint64_t n = n0 + (seed & 1); n > 1; steps++)
			n = n & 1 ? 3 * n + 1 : n / 2;
	return steps;
}

__attribute__((noinline)) static uint64_t descend(int depth, uint64_t rounds)
{
	if (depth > 0)
		return descend(depth - 1, rounds) + 1; /* not a tail call: a frame each */
	uint64_t x = 0;
	for (uint64_t r = 0; r < rounds; r++)
		x += burn_hash(x + r) + burn_matrix(x + r) + burn_collatz(x + r);
	return x;
}

static int workload(const char *arg)
{
	char *end;
	unsigned long long rounds = strtoull(arg, &end, 10);
	if (end == arg || *end || rounds == 0) {
		fprintf(stderr, "bench-overhead: --workload '%s': give a number of rounds\n", arg);
		return 2;
	}
	/* The last CPU; the profilers' own processes keep to CPU 0. */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	bench_pin(ncpu > 0 ? (int)ncpu - 1 : 0);
	struct timespec c0, c1;
	double t0 = bench_now_s();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	sink = descend(DEPTH, rounds);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	printf("%.6f %.6f\n", bench_now_s() - t0,
	       (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9);
	return 0;
}

/* ---- the benchmark ---- */

struct bench {
	struct bench_daemon d;
	const char *parent;
	const char *perf;
	int runs;
	double seconds;
	char self[PATH_MAX];
	unsigned long long rounds;
	int bpf_stats_old;        /* -1: not changed */
};

/* One run's figures; the ringprofd ones are -1 for other configurations. */
struct run {
	double s;                 /* the workload's time */
	double cpu_s;             /* its CPU time: with the sampling interrupts, without steal */
	double wall_s;            /* the daemon's CPU time over wall_s: */
	double daemon_cpu_s;      /* utime + stime, in clock ticks (10 ms) */
	double daemon_cpu_pct;    /* its threads' schedstat run time, to the ns */
	double bpf_ns_per_run, bpf_ns_per_sample;
	double bytes_per_sample;
	double ring_bytes, samples;
};

static int read_int(const char *path, int *v)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int rc = fscanf(f, "%d", v) == 1 ? 0 : -1;
	fclose(f);
	return rc;
}

static int write_int(const char *path, int v)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "%d\n", v);
	return fclose(f) == 0 ? 0 : -1;
}

/* Runs argv with stdout into a pipe and stderr to <dir>/NAME.err; the
 * workload's time and CPU time from what it printed, or -1 with a
 * message. */
static int run_timed(struct bench *b, char *const argv[], const char *name, struct run *r)
{
	char err_path[PATH_MAX];
	snprintf(err_path, sizeof(err_path), "%s/%s.err", b->d.dir, name);
	int fds[2];
	if (pipe(fds) < 0) {
		fprintf(stderr, "bench-overhead: pipe: %s\n", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid == 0) {
		bench_pin(0); /* perf; the workload moves itself to the last CPU */
		int err = open(err_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
		dup2(fds[1], STDOUT_FILENO);
		if (err >= 0)
			dup2(err, STDERR_FILENO);
		close(fds[0]);
		execvp(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	char out[64] = "";
	ssize_t n = pid > 0 ? read(fds[0], out, sizeof(out) - 1) : -1;
	close(fds[0]);
	int st = 0;
	if (pid > 0)
		waitpid(pid, &st, 0);
	out[n > 0 ? n : 0] = 0;
	if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
	    sscanf(out, "%lf %lf", &r->s, &r->cpu_s) != 2 || r->s <= 0 || r->cpu_s <= 0) {
		fprintf(stderr, "bench-overhead: %s failed (status %d); its errors in %s:\n", argv[0],
			WIFEXITED(st) ? WEXITSTATUS(st) : -1, err_path);
		FILE *f = fopen(err_path, "r");
		char line[512];
		while (f && fgets(line, sizeof(line), f))
			fputs(line, stderr);
		if (f)
			fclose(f);
		return -1;
	}
	return 0;
}

static int run_workload(struct bench *b, unsigned long long rounds, const char *name,
			struct run *r)
{
	char n[32];
	snprintf(n, sizeof(n), "%llu", rounds);
	char *argv[] = { b->self, "--workload", n, NULL };
	return run_timed(b, argv, name, r);
}

static int run_perf(struct bench *b, unsigned hz, struct run *run)
{
	char f[16], out[PATH_MAX], r[32];
	snprintf(f, sizeof(f), "%u", hz);
	snprintf(out, sizeof(out), "%s/perf.data", b->d.dir);
	snprintf(r, sizeof(r), "%llu", b->rounds);
	char *argv[] = { (char *)b->perf, "record", "-q", "-F", f, "-g", "-o", out, "--",
			 b->self, "--workload", r, NULL };
	int rc = run_timed(b, argv, "perf", run);
	unlink(out);
	return rc;
}

/* utime + stime of pid in seconds; -1 when gone. */
static double cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the name may hold spaces */
	unsigned long long ut, st;
	/* After the name: state (3) ... utime (14), stime (15). */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			 &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Nanoseconds pid's threads have run (/proc/PID/task/TID/schedstat); -1
 * when gone. */
static double run_ns(pid_t pid)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	double total = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[PATH_MAX];
		unsigned long long ns;
		snprintf(path, sizeof(path), "%s/%s/schedstat", dir, e->d_name);
		FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
		if (f && fscanf(f, "%llu", &ns) == 1)
			total += (double)ns;
		if (f)
			fclose(f);
	}
	closedir(d);
	return total;
}

/* run_time_ns and run_cnt of the daemon's BPF program, from the fdinfo
 * of its fd (the counters bpftool shows); -1 without one. */
static int bpf_prog_stats(pid_t pid, double *ns, double *count)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int rc = -1;
	struct dirent *e;
	while (rc < 0 && (e = readdir(d))) {
		char link[PATH_MAX], target[64] = "", info[PATH_MAX], line[128];
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0 || (target[n] = 0, strcmp(target, "anon_inode:bpf-prog") != 0))
			continue;
		snprintf(info, sizeof(info), "/proc/%d/fdinfo/%s", (int)pid, e->d_name);
		FILE *f = fopen(info, "r");
		unsigned long long t = 0, c = 0;
		int found = 0;
		while (f && fgets(line, sizeof(line), f)) {
			found += sscanf(line, "run_time_ns: %llu", &t);
			found += sscanf(line, "run_cnt: %llu", &c);
		}
		if (f)
			fclose(f);
		if (found == 2) {
			*ns = (double)t;
			*count = (double)c;
			rc = 0;
		}
	}
	closedir(d);
	return rc;
}

/* Seals the rings (a 1 ms snapshot flushes them), then the host ring's
 * bytes and the sampler's samples; -1 with a message. */
static int ring_point(struct bench *b, double *bytes, double *samples)
{
	json_t *snap = bench_call(&b->d, "POST", "/v1/snapshot",
				  json_pack("{s:s, s:s}", "last", "1ms", "reason", "bench-overhead"));
	json_t *st = snap ? bench_call(&b->d, "GET", "/v1/status", NULL) : NULL;
	json_decref(snap);
	if (!st)
		return -1;
	json_t *ring = json_array_get(json_object_get(st, "rings"), 0);
	json_t *col = json_array_get(json_object_get(st, "collectors"), 0);
	const char *device = json_string_value(json_object_get(ring, "device"));
	const char *state = json_string_value(json_object_get(col, "state"));
	int rc = device && !strcmp(device, "host") && state && !strcmp(state, "running") ? 0 : -1;
	if (rc < 0)
		fprintf(stderr, "bench-overhead: the status shows no host ring or no running CPU "
			"sampler\n");
	*bytes = (double)json_integer_value(json_object_get(ring, "bytes_used"));
	*samples = (double)json_integer_value(json_object_get(col, "events"));
	json_decref(st);
	return rc;
}

/* A run under ringprofd at hz, started for it with fresh rings. */
static int run_ringprofd(struct bench *b, unsigned hz, struct run *r)
{
	char path[PATH_MAX], conf[128];
	snprintf(path, sizeof(path), "%s/state", b->d.dir);
	bench_remove_tree(path);
	snprintf(path, sizeof(path), "%s/logs", b->d.dir);
	bench_remove_tree(path);
	/* The 1 ms snapshots only seal the rings: exporting them would be
	 * daemon CPU that sampling does not cost. */
	snprintf(conf, sizeof(conf), "[sampler]\nenabled = true\nfrequency = %u\n"
		 "[sessions]\nexports = none\n", hz);
	double bytes0, samples0, bytes1, samples1, ns0, cnt0, ns1, cnt1;
	if (bench_daemon_start(&b->d, conf) < 0 || !bench_wait_s(&b->d, SETTLE_S, "after start-up") ||
	    ring_point(b, &bytes0, &samples0) < 0)
		return -1;
	bool bpf = b->bpf_stats_old >= 0 && bpf_prog_stats(b->d.pid, &ns0, &cnt0) == 0;
	double cpu0 = cpu_s(b->d.pid), ns0_run = run_ns(b->d.pid), t0 = bench_now_s();
	int rc = run_workload(b, b->rounds, "workload", r);
	double cpu1 = cpu_s(b->d.pid), ns1_run = run_ns(b->d.pid);
	r->wall_s = bench_now_s() - t0;
	if (rc < 0 || cpu0 < 0 || cpu1 < 0 || ns0_run < 0 || ns1_run < 0 ||
	    !bench_daemon_alive(&b->d, "during the run") ||
	    ring_point(b, &bytes1, &samples1) < 0)
		return -1;
	bpf = bpf && bpf_prog_stats(b->d.pid, &ns1, &cnt1) == 0 && cnt1 > cnt0;
	bench_daemon_stop(&b->d);
	r->daemon_cpu_s = cpu1 - cpu0;
	r->daemon_cpu_pct = 100 * (ns1_run - ns0_run) / 1e9 / r->wall_s;
	r->samples = samples1 - samples0;
	r->ring_bytes = bytes1 - bytes0;
	r->bytes_per_sample = r->samples > 0 ? (bytes1 - bytes0) / r->samples : -1;
	r->bpf_ns_per_run = bpf ? (ns1 - ns0) / (cnt1 - cnt0) : -1;
	r->bpf_ns_per_sample = bpf && r->samples > 0 ? (ns1 - ns0) / r->samples : -1;
	return 0;
}

static int run_config(struct bench *b, enum config c, struct run *r)
{
	*r = (struct run){ .wall_s = -1, .daemon_cpu_s = -1, .daemon_cpu_pct = -1,
			   .bpf_ns_per_run = -1, .bpf_ns_per_sample = -1, .bytes_per_sample = -1,
			   .ring_bytes = -1, .samples = -1 };
	switch (c) {
	case NONE:
		return run_workload(b, b->rounds, "workload", r);
	case RP99:
	case RP999:
		return run_ringprofd(b, config_hz[c], r);
	case PERF99:
	case PERF999:
		return run_perf(b, config_hz[c], r);
	case NCONFIGS:
		break;
	}
	return -1;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: bench-overhead [--runs N] [--seconds S] [--dir DIR] [--daemon PATH]\n"
		"                      [--perf PATH]\n"
		"\n"
		"Slowdown of a CPU-bound workload (stacks %d frames deep) under ringprofd\n"
		"sampling at 99 and 999 Hz and under perf record -g at the same rates, the\n"
		"daemon's CPU time, the BPF program's time per sample and ring bytes per sample.\n"
		"Run as root.\n"
		"\n"
		"  --runs N       runs of each configuration, round robin (7)\n"
		"  --seconds S    length of a run without a profiler (2)\n"
		"  --dir DIR      make the work directory (rings, daemon log, perf.data) under\n"
		"                 DIR, on a disk; it is removed at the end (.)\n"
		"  --daemon PATH  ringprofd to start (%s)\n"
		"  --perf PATH    perf to run (perf)\n",
		DEPTH + 4, RINGPROFD_PATH);
}

static int parse_args(int argc, char **argv, struct bench *b)
{
	static const struct option longopts[] = {
		{ "runs", required_argument, NULL, 'r' },   { "seconds", required_argument, NULL, 's' },
		{ "dir", required_argument, NULL, 'd' },    { "daemon", required_argument, NULL, 'D' },
		{ "perf", required_argument, NULL, 'p' },   { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	*b = (struct bench){ .d = { .prog = "bench-overhead", .path = RINGPROFD_PATH, .cpu = 0 },
			     .parent = ".", .perf = "perf", .runs = 7, .seconds = 2,
			     .bpf_stats_old = -1 };
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		char *end = NULL;
		switch (c) {
		case 'r':
			b->runs = (int)strtol(optarg, &end, 10);
			if (end == optarg || *end || b->runs < 1 || b->runs > 1000) {
				fprintf(stderr, "bench-overhead: --runs '%s': give 1 to 1000\n", optarg);
				return -1;
			}
			break;
		case 's':
			b->seconds = strtod(optarg, &end);
			if (end == optarg || *end || !(b->seconds >= 0.1 && b->seconds <= 600)) {
				fprintf(stderr, "bench-overhead: --seconds '%s': give 0.1 to 600\n", optarg);
				return -1;
			}
			break;
		case 'p':
			b->perf = optarg;
			break;
		default:
			if (bench_common_option(&b->d, &b->parent, c, optarg, usage) < 0)
				return -1;
		}
	}
	return bench_no_arguments(&b->d, argc, argv, usage);
}

/* BPF run-time statistics on for the benchmark; bpf_stats_old stays -1
 * (the BPF figures are then "na") when the sysctl cannot be set. */
static void bpf_stats_on(struct bench *b)
{
	int old;
	if (read_int(BPF_STATS, &old) < 0 || (old != 1 && write_int(BPF_STATS, 1) < 0)) {
		fprintf(stderr, "bench-overhead: cannot set %s to 1 (%s): no BPF run times\n",
			BPF_STATS, strerror(errno));
		return;
	}
	b->bpf_stats_old = old;
}

static void cleanup(struct bench *b)
{
	bench_daemon_cleanup(&b->d);
	if (b->bpf_stats_old >= 0 && b->bpf_stats_old != 1 &&
	    write_int(BPF_STATS, b->bpf_stats_old) < 0)
		fprintf(stderr, "bench-overhead: cannot restore %s to %d: %s\n", BPF_STATS,
			b->bpf_stats_old, strerror(errno));
	b->bpf_stats_old = -1;
}

/* Median of the runs' field at offset off; -1 when any run lacks it. */
static double median_of(const struct run *runs, int n, size_t off)
{
	double v[1000];
	for (int i = 0; i < n; i++) {
		memcpy(&v[i], (const char *)&runs[i] + off, sizeof(double));
		if (v[i] < 0)
			return -1;
	}
	return bench_median(v, n);
}

/* v printed with f, or "na" for a figure not measured (< 0). */
static const char *fmt_na(char *buf, size_t cap, const char *f, double v)
{
	if (v < 0)
		snprintf(buf, cap, "na");
	else
		snprintf(buf, cap, f, v);
	return buf;
}
#define NA(f, v) fmt_na((char[32]){ 0 }, 32, (f), (v))

static int calibrate(struct bench *b)
{
	struct run r;
	if (run_workload(b, CALIBRATION_ROUNDS, "calibration", &r) < 0)
		return -1;
	b->rounds = (unsigned long long)((double)CALIBRATION_ROUNDS * b->seconds / r.s + 0.5);
	if (b->rounds < 1)
		b->rounds = 1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--workload"))
		return workload(argv[2]);
	struct bench b;
	if (parse_args(argc, argv, &b) < 0)
		return 2;
	if (geteuid() != 0) {
		fprintf(stderr, "bench-overhead: run it as root: the CPU sampler, perf at 999 Hz "
			"and kernel.bpf_stats_enabled need it\n");
		return 2;
	}
	ssize_t n = readlink("/proc/self/exe", b.self, sizeof(b.self) - 1);
	if (n <= 0) {
		fprintf(stderr, "bench-overhead: readlink /proc/self/exe: %s\n", strerror(errno));
		return 1;
	}
	b.self[n] = 0;
	bench_catch_signals();
	static struct run runs[NCONFIGS][1000];
	if (bench_workdir(&b.d, b.parent) < 0 || calibrate(&b) < 0)
		goto fail;
	bpf_stats_on(&b);
	printf("bench-overhead: ringprofd %s, perf %s, work directory %s\n", b.d.path, b.perf,
	       b.d.dir);
	printf("workload: %llu rounds (%.1f s alone), stacks %d frames deep, pinned to the last "
	       "CPU; %d runs of each configuration, round robin\n", b.rounds, b.seconds,
	       DEPTH + 4, b.runs);
	fflush(stdout);
	for (int i = 0; i < b.runs; i++) {
		for (int k = 0; k < NCONFIGS; k++) {
			enum config c = (enum config)((i + k) % NCONFIGS);
			struct run *r = &runs[c][i];
			if (bench_interrupted || run_config(&b, c, r) < 0)
				goto fail;
			printf("  round %d %-8s %7.3f s, CPU %7.3f s", i + 1, config_names[c], r->s,
			       r->cpu_s);
			if (r->samples >= 0)
				printf("  daemon %.3f%% CPU (%.2f s in ticks), %.0f samples, %.1f B/sample, "
				       "BPF %.0f ns/run %.0f ns/sample", r->daemon_cpu_pct, r->daemon_cpu_s,
				       r->samples, r->bytes_per_sample, r->bpf_ns_per_run,
				       r->bpf_ns_per_sample);
			printf("\n");
			fflush(stdout);
		}
	}
	cleanup(&b);

	double t[NCONFIGS], cpu_t[NCONFIGS], slow[NCONFIGS], wall_slow[NCONFIGS];
	for (int c = 0; c < NCONFIGS; c++) {
		t[c] = median_of(runs[c], b.runs, offsetof(struct run, s));
		cpu_t[c] = median_of(runs[c], b.runs, offsetof(struct run, cpu_s));
		slow[c] = 100 * (cpu_t[c] / cpu_t[NONE] - 1);
		wall_slow[c] = 100 * (t[c] / t[NONE] - 1);
	}
	double cpu[NCONFIGS], sched[NCONFIGS], bpf_run[NCONFIGS], bpf_sample[NCONFIGS],
		bytes[NCONFIGS], ring_bytes[NCONFIGS], samples[NCONFIGS];
	for (int c = RP99; c <= RP999; c++) {
		/* Ticks are coarse: the share over all the runs together. */
		double busy = 0, wall = 0;
		for (int i = 0; i < b.runs; i++) {
			busy += runs[c][i].daemon_cpu_s;
			wall += runs[c][i].wall_s;
		}
		cpu[c] = 100 * busy / wall;
		sched[c] = median_of(runs[c], b.runs, offsetof(struct run, daemon_cpu_pct));
		bpf_run[c] = median_of(runs[c], b.runs, offsetof(struct run, bpf_ns_per_run));
		bpf_sample[c] = median_of(runs[c], b.runs, offsetof(struct run, bpf_ns_per_sample));
		bytes[c] = median_of(runs[c], b.runs, offsetof(struct run, bytes_per_sample));
		samples[c] = median_of(runs[c], b.runs, offsetof(struct run, samples));
		ring_bytes[c] = median_of(runs[c], b.runs, offsetof(struct run, ring_bytes));
	}
	/* Ring bytes = per sample x samples + per second x time: the
	 * metadata every chunk repeats and the host metrics are the latter. */
	double marginal = (ring_bytes[RP999] - ring_bytes[RP99]) / (samples[RP999] - samples[RP99]);
	double fixed_per_s = (ring_bytes[RP99] - marginal * samples[RP99]) / t[RP99];
	printf("\nbench-overhead: medians of %d runs\n", b.runs);
	printf("  %-10s %9s %9s %9s %9s\n", "config", "CPU s", "slowdown", "wall s", "slowdown");
	for (int c = 0; c < NCONFIGS; c++)
		printf("  %-10s %9.3f %8.2f%% %9.3f %8.2f%%\n", config_names[c], cpu_t[c], slow[c],
		       t[c], wall_slow[c]);
	printf("  slowdown at 999 Hz (CPU time): ringprofd %.2f%%, perf %.2f%%   target: ringprofd "
	       "no worse than perf\n", slow[RP999], slow[PERF999]);
	for (int c = RP99; c <= RP999; c++)
		printf("  ringprofd %3u Hz: daemon %.3f%% of a CPU (utime + stime over all runs; "
		       "%.3f%% median of the runs' schedstat), %.0f samples a run, BPF %s ns per run "
		       "of the program, %s ns per sample recorded, %s bytes per sample in the host "
		       "ring\n", config_hz[c], cpu[c], sched[c], samples[c], NA("%.0f", bpf_run[c]),
		       NA("%.0f", bpf_sample[c]), NA("%.1f", bytes[c]));
	printf("  host ring: %.1f bytes per further sample, %.0f bytes/s at any rate (the metadata "
	       "each chunk repeats, host metrics)\n", marginal, fixed_per_s);
	printf("  targets: daemon CPU at 99 Hz <= %.1f%% of a CPU; BPF <= %.0f ns per sample; "
	       "<= %.0f bytes per sample (%d-frame stacks)\n", TARGET_DAEMON_CPU_PCT_99,
	       TARGET_BPF_NS, TARGET_BYTES_PER_SAMPLE, DEPTH + 4);
	printf("result: slowdown_99=%.2f slowdown_999=%.2f perf_slowdown_99=%.2f "
	       "perf_slowdown_999=%.2f daemon_cpu_pct_99=%.3f daemon_cpu_pct_999=%.3f "
	       "bpf_ns_per_sample=%s bytes_per_sample=%s bpf_ns_per_run=%s bytes_per_sample_99=%s "
	       "bytes_per_extra_sample=%.1f daemon_sched_pct_99=%.3f daemon_sched_pct_999=%.3f "
	       "wall_slowdown_999=%.2f perf_wall_slowdown_999=%.2f run_s=%.3f\n", slow[RP99],
	       slow[RP999], slow[PERF99], slow[PERF999], cpu[RP99], cpu[RP999],
	       NA("%.0f", bpf_sample[RP999]), NA("%.1f", bytes[RP999]), NA("%.0f", bpf_run[RP999]),
	       NA("%.1f", bytes[RP99]), marginal, sched[RP99], sched[RP999], wall_slow[RP999],
	       wall_slow[PERF999], t[NONE]);
	return 0;
fail:
	cleanup(&b);
	return 1;
}
