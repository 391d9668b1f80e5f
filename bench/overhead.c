/* What always-on CPU sampling costs the profiled program, beside the
 * profiler its users run today, for three workloads (--workload):
 *   fp      this program (the frame-pointer build) run as
 *           `bench-overhead --run-workload ROUNDS`:
 *           it recurses DEPTH frames deep (descend) and there runs ROUNDS
 *           rounds of three deterministic loops with names of their own
 *           (burn_hash, burn_matrix, burn_collatz), then prints how long
 *           that took.  Built with frame pointers and without inlining or
 *           sibling calls, so that every sample's user stack is DEPTH + 4
 *           frames.  Peer: perf record -g.
 *   nofp    the same source built without frame pointers
 *           (bench-overhead-nofp --run-workload ROUNDS): ringprofd
 *           unwinds it with the CFI (docs/unwinding.md).  Peer: perf
 *           record --call-graph dwarf (8 KiB of stack a sample, unwound
 *           at perf report).
 *   python  overhead_workload.py, the same shape in Python, under
 *           --python (Debian's python3.11, whose libpython has no frame
 *           pointers): ringprofd reads its Python frames and unwinds the
 *           interpreter's.  Peer: py-spy record at its defaults (it
 *           pauses the process for each sample; --nonblocking does not).
 * Each workload pins itself to the last CPU and prints its time, its
 * thread's CPU time and its process's CPU time.  ROUNDS is calibrated
 * once per workload so that a run takes --seconds on its own.
 *
 * The profilers' own processes (ringprofd, perf, py-spy) keep to CPU 0,
 * so that what the workload pays is the sampling on its CPU, not their
 * threads taking turns with it (their CPU time is measured apart).
 *
 * Five configurations of each workload, all round robin (each round
 * starting one further along), --runs times each:
 *   none     the workload alone
 *   rp99     ringprofd sampling every CPU at 99 Hz ([sampler] frequency,
 *            host metrics as by default), started for the run
 *   rp999    the same at 999 Hz
 *   peer99   the peer at 99 Hz, recording the workload only, to a file
 *            in the work directory
 *   peer999  the same at 999 Hz
 * Slowdown: the median CPU time of the workload's thread against the
 * median without a profiler.  That CPU time includes the sampling
 * interrupts it takes (without CONFIG_IRQ_TIME_ACCOUNTING, as on the CI
 * VM) and leaves out time a hypervisor steals, the noise of wall time in
 * a VM.  It also leaves out the time a peer keeps the workload stopped
 * (py-spy's pauses), so wall-time slowdowns are printed beside, and the
 * Python workload's verdict is on wall time.  The profiler's CPU time per
 * sample: for ringprofd its threads' schedstat run time over the run
 * over the samples its sampler recorded (every CPU's); for a peer the
 * CPU time of its process tree (wait4) less the workload process's, over
 * the samples it says it wrote.  The BPF program's run time
 * (kernel.bpf_stats_enabled is set to 1 for the benchmark and restored
 * after) per run of it and per sample it recorded.  Bytes per sample:
 * ringprofd's host ring (the rings sealed before and after through a
 * 1 ms snapshot: the sealed chunks' bytes, samples, their processes'
 * names and mappings, host metrics), the peer's output file (perf.data;
 * py-spy's folded stacks, which add up equal stacks).
 *
 * Needs root (the sampler, perf at 999 Hz, the sysctl).  Not a pass/fail
 * test: targets are printed beside the figures.  The lines
 * "result: workload=NAME ...", one a workload, have a fixed form for
 * scripts; slowdowns and CPU shares are in percent. */
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

#define DEPTH 20
#define MAX_RUNS 1000
#define DEFAULT_PYTHON "/usr/bin/python3.11" /* Debian's: libpython without frame pointers */
#define SETTLE_S 0.5             /* after the daemon starts, before a run */
#define BPF_STATS "/proc/sys/kernel/bpf_stats_enabled"
/* Issue 4's targets, for the frame-pointer workload. */
#define TARGET_DAEMON_CPU_PCT_99 0.5
#define TARGET_BPF_NS_FP 2000.0
#define TARGET_BYTES_PER_SAMPLE_FP 40.0
/* Issue 14's, for every workload. */
#define TARGET_BPF_NS 5000.0
#define TARGET_DAEMON_NS 10000.0
#define TARGET_BYTES_PER_SAMPLE 64.0

enum config { NONE, RP99, RP999, PEER99, PEER999, NCONFIGS };
static const char *const config_names[NCONFIGS] = { "none", "rp99", "rp999", "peer99", "peer999" };
static const unsigned config_hz[NCONFIGS] = { 0, 99, 999, 99, 999 };

enum peer_tool { PERF, PY_SPY, NTOOLS };

enum workload_id { FP, NOFP, PYTHON, NWORKLOADS };
static const struct workload {
	const char *name;          /* --workload, and in "result:" */
	const char *what;
	const char *peer;          /* in the report */
	const char *peer_key;      /* in "result:" */
	enum peer_tool tool;
	/* Between the tool and the workload's command; "@HZ" and "@OUT" (the
	 * output file) are filled in. */
	const char *peer_args[9];
	/* The sample count in what the peer prints: scanf format, from its
	 * literal start. */
	const char *peer_samples;
	unsigned calibration_rounds;
	/* Its verdict against the peer on wall time: the peer stops it. */
	bool wall_verdict;
} workloads[NWORKLOADS] = {
	[FP] = { "fp", "C with frame pointers (bench-overhead), 24-frame stacks", "perf record -g",
		 "perf-g", PERF, { "record", "-F", "@HZ", "-g", "-o", "@OUT", "--" },
		 "(%lf samples)", 20, false },
	[NOFP] = { "nofp", "C without frame pointers (bench-overhead-nofp), 24-frame stacks",
		   "perf record --call-graph dwarf", "perf-dwarf", PERF,
		   { "record", "-F", "@HZ", "--call-graph", "dwarf", "-o", "@OUT", "--" },
		   "(%lf samples)", 20, false },
	[PYTHON] = { "python", "Python (overhead_workload.py), 28-frame mixed stacks (16-17 "
		     "Python frames)", "py-spy record", "py-spy", PY_SPY,
		     { "record", "-r", "@HZ", "-f", "raw", "-o", "@OUT", "--" }, "Samples: %lf", 200,
		     true },
};

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

static int run_as_workload(const char *arg)
{
	char *end;
	unsigned long long rounds = strtoull(arg, &end, 10);
	if (end == arg || *end || rounds == 0) {
		fprintf(stderr, "bench-overhead: --run-workload '%s': give a number of rounds\n", arg);
		return 2;
	}
	/* The last CPU; the profilers' own processes keep to CPU 0. */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	bench_pin(ncpu > 0 ? (int)ncpu - 1 : 0);
	struct timespec c0, c1, p1;
	double t0 = bench_now_s();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	sink = descend(DEPTH, rounds);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p1);
	printf("%.6f %.6f %.6f\n", bench_now_s() - t0,
	       (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9,
	       (double)p1.tv_sec + (double)p1.tv_nsec / 1e9);
	return 0;
}

/* ---- the benchmark ---- */

struct bench {
	struct bench_daemon d;
	const char *parent;
	const char *tools[NTOOLS];
	const char *python;
	int only;                 /* a workload, or -1: all */
	int runs;
	double seconds;
	/* Each workload's command, ROUNDS to follow. */
	const char *command[NWORKLOADS][2];
	unsigned long long rounds[NWORKLOADS];
	int bpf_stats_old;        /* -1: not changed */
};

/* One run's figures; those of a profiler are -1 without one, the BPF ones
 * -1 but for ringprofd. */
struct run {
	double s;                 /* the workload's time */
	double cpu_s;             /* its thread's CPU time: with the sampling interrupts, without steal */
	double process_cpu_s;     /* its process's, start-up included */
	double wall_s;            /* the profiler's time over the run */
	double profiler_cpu_s;
	double profiler_cpu_pct;  /* over wall_s */
	double profiler_ns_per_sample;
	double bpf_ns_per_run, bpf_ns_per_sample;
	double bytes_per_sample;
	double bytes, samples;
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

/* The start of a file, NUL-terminated ("" when unreadable). */
static void read_text(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
}

/* The first number fmt scans at one of the places its literal start
 * occurs in text; -1 when none. */
static double scan_count(const char *text, const char *fmt)
{
	char start[32];
	size_t n = strcspn(fmt, "%");
	snprintf(start, sizeof(start), "%.*s", (int)n, fmt);
	double v;
	for (const char *p = strstr(text, start); p; p = strstr(p + 1, start))
		if (sscanf(p, fmt, &v) == 1)
			return v;
	return -1;
}

/* Runs argv, its output into <dir>/NAME.out and .err: the workload's
 * times from the line of three numbers it printed (a peer prints more),
 * its process tree's CPU time into *tree_cpu_s; -1 with a message. */
static int run_timed(struct bench *b, char *const argv[], const char *name, struct run *r,
		     double *tree_cpu_s)
{
	char out_path[PATH_MAX], err_path[PATH_MAX];
	snprintf(out_path, sizeof(out_path), "%s/%s.out", b->d.dir, name);
	snprintf(err_path, sizeof(err_path), "%s/%s.err", b->d.dir, name);
	pid_t pid = fork();
	if (pid == 0) {
		bench_pin(0); /* a peer; the workload moves itself to the last CPU */
		int out = open(out_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
		int err = open(err_path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
		if (out >= 0)
			dup2(out, STDOUT_FILENO);
		if (err >= 0)
			dup2(err, STDERR_FILENO);
		execvp(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	int st = 0;
	struct rusage ru = { 0 };
	if (pid > 0)
		wait4(pid, &st, 0, &ru);
	*tree_cpu_s = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	char out[4096];
	read_text(out_path, out, sizeof(out));
	bool found = false;
	for (char *line = strtok(out, "\n"); line && !found; line = strtok(NULL, "\n")) {
		char extra;
		found = sscanf(line, "%lf %lf %lf %c", &r->s, &r->cpu_s, &r->process_cpu_s, &extra) == 3;
	}
	if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !found || r->s <= 0 ||
	    r->cpu_s <= 0) {
		fprintf(stderr, "bench-overhead: %s failed (status %d); its errors in %s:\n", argv[0],
			WIFEXITED(st) ? WEXITSTATUS(st) : -1, err_path);
		char err[4096];
		read_text(err_path, err, sizeof(err));
		fputs(err, stderr);
		return -1;
	}
	return 0;
}

/* argv: the workload's command with rounds; argv has room for 4. */
static void workload_argv(const struct bench *b, enum workload_id w, const char *rounds,
			  const char *argv[4])
{
	argv[0] = b->command[w][0];
	argv[1] = b->command[w][1];
	argv[2] = rounds;
	argv[3] = NULL;
}

static int run_workload(struct bench *b, enum workload_id w, unsigned long long rounds,
			const char *name, struct run *r)
{
	char n[32];
	snprintf(n, sizeof(n), "%llu", rounds);
	const char *argv[4];
	workload_argv(b, w, n, argv);
	double tree_cpu_s;
	return run_timed(b, (char *const *)argv, name, r, &tree_cpu_s);
}

/* The workload under its peer at hz, writing to <dir>/peer.out.data. */
static int run_peer(struct bench *b, enum workload_id w, unsigned hz, struct run *r)
{
	const struct workload *wl = &workloads[w];
	char f[16], out[PATH_MAX], n[32];
	snprintf(f, sizeof(f), "%u", hz);
	snprintf(out, sizeof(out), "%s/peer.out.data", b->d.dir);
	snprintf(n, sizeof(n), "%llu", b->rounds[w]);
	const char *argv[16];
	int argc = 0;
	argv[argc++] = b->tools[wl->tool];
	for (int i = 0; wl->peer_args[i]; i++)
		argv[argc++] = !strcmp(wl->peer_args[i], "@HZ")  ? f :
			       !strcmp(wl->peer_args[i], "@OUT") ? out :
								   wl->peer_args[i];
	workload_argv(b, w, n, &argv[argc]);
	double t0 = bench_now_s(), tree_cpu_s;
	int rc = run_timed(b, (char *const *)argv, "peer", r, &tree_cpu_s);
	r->wall_s = bench_now_s() - t0;
	struct stat st;
	if (rc == 0 && stat(out, &st) == 0)
		r->bytes = (double)st.st_size;
	(void)unlink(out);
	if (rc < 0)
		return -1;
	char printed[16384], path[PATH_MAX];
	for (int i = 0; i < 2 && r->samples < 0; i++) {
		snprintf(path, sizeof(path), "%s/peer.%s", b->d.dir, i ? "err" : "out");
		read_text(path, printed, sizeof(printed));
		r->samples = scan_count(printed, wl->peer_samples);
	}
	r->profiler_cpu_s = tree_cpu_s - r->process_cpu_s;
	r->profiler_cpu_pct = 100 * r->profiler_cpu_s / r->wall_s;
	if (r->samples > 0) {
		r->profiler_ns_per_sample = 1e9 * r->profiler_cpu_s / r->samples;
		r->bytes_per_sample = r->bytes >= 0 ? r->bytes / r->samples : -1;
	}
	return 0;
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
	json_t *req = json_pack("{s:s, s:s}", "last", "1ms", "reason", "bench-overhead");
	json_t *snap = bench_call(&b->d, "POST", "/v1/snapshot", req);
	json_t *st = snap ? bench_call(&b->d, "GET", "/v1/status", NULL) : NULL;
	json_decref(req); /* the client does not take it */
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
static int run_ringprofd(struct bench *b, enum workload_id w, unsigned hz, struct run *r)
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
	double run0 = run_ns(b->d.pid), t0 = bench_now_s();
	int rc = run_workload(b, w, b->rounds[w], "workload", r);
	double run1 = run_ns(b->d.pid);
	r->wall_s = bench_now_s() - t0;
	if (rc < 0 || run0 < 0 || run1 < 0 || !bench_daemon_alive(&b->d, "during the run") ||
	    ring_point(b, &bytes1, &samples1) < 0)
		return -1;
	bpf = bpf && bpf_prog_stats(b->d.pid, &ns1, &cnt1) == 0 && cnt1 > cnt0;
	bench_daemon_stop(&b->d);
	r->profiler_cpu_s = (run1 - run0) / 1e9;
	r->profiler_cpu_pct = 100 * r->profiler_cpu_s / r->wall_s;
	r->samples = samples1 - samples0;
	r->bytes = bytes1 - bytes0;
	if (r->samples > 0) {
		r->profiler_ns_per_sample = (run1 - run0) / r->samples;
		r->bytes_per_sample = r->bytes / r->samples;
	}
	r->bpf_ns_per_run = bpf ? (ns1 - ns0) / (cnt1 - cnt0) : -1;
	r->bpf_ns_per_sample = bpf && r->samples > 0 ? (ns1 - ns0) / r->samples : -1;
	return 0;
}

static int run_config(struct bench *b, enum workload_id w, enum config c, struct run *r)
{
	*r = (struct run){ .wall_s = -1, .profiler_cpu_s = -1, .profiler_cpu_pct = -1, .profiler_ns_per_sample = -1,
			   .bpf_ns_per_run = -1, .bpf_ns_per_sample = -1, .bytes_per_sample = -1,
			   .bytes = -1, .samples = -1 };
	switch (c) {
	case NONE:
		return run_workload(b, w, b->rounds[w], "workload", r);
	case RP99:
	case RP999:
		return run_ringprofd(b, w, config_hz[c], r);
	case PEER99:
	case PEER999:
		return run_peer(b, w, config_hz[c], r);
	case NCONFIGS:
		break;
	}
	return -1;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: bench-overhead [--workload fp|nofp|python|all] [--runs N] [--seconds S]\n"
		"                      [--dir DIR] [--daemon PATH] [--perf PATH] [--py-spy PATH]\n"
		"                      [--python PATH]\n"
		"\n"
		"Slowdown of CPU-bound workloads under ringprofd sampling at 99 and 999 Hz and\n"
		"under the profiler their users run at the same rates, each profiler's CPU time\n"
		"and bytes per sample, and the BPF program's time per sample.  Run as root.\n"
		"\n"
		"  --workload W   fp: C with frame pointers, against perf record -g;\n"
		"                 nofp: the same C without them, against perf record\n"
		"                 --call-graph dwarf; python: Python under --python, against\n"
		"                 py-spy record; all: the three, round robin (all)\n"
		"  --runs N       runs of each configuration, round robin (7)\n"
		"  --seconds S    length of a run without a profiler (2)\n"
		"  --dir DIR      make the work directory (rings, daemon log, the peer's output)\n"
		"                 under DIR, on a disk; it is removed at the end (.)\n"
		"  --daemon PATH  ringprofd to start (%s)\n"
		"  --perf PATH    perf to run (perf)\n"
		"  --py-spy PATH  py-spy to run (py-spy)\n"
		"  --python PATH  the Python workload's interpreter (%s)\n",
		RINGPROFD_PATH, DEFAULT_PYTHON);
}

static int parse_args(int argc, char **argv, struct bench *b)
{
	static const struct option longopts[] = {
		{ "runs", required_argument, NULL, 'r' },   { "seconds", required_argument, NULL, 's' },
		{ "dir", required_argument, NULL, 'd' },    { "daemon", required_argument, NULL, 'D' },
		{ "perf", required_argument, NULL, 'p' },   { "py-spy", required_argument, NULL, 'y' },
		{ "python", required_argument, NULL, 'P' }, { "workload", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
	};
	*b = (struct bench){ .d = { .prog = "bench-overhead", .path = RINGPROFD_PATH, .cpu = 0 },
			     .parent = ".", .tools = { [PERF] = "perf", [PY_SPY] = "py-spy" },
			     .python = DEFAULT_PYTHON, .only = -1, .runs = 7, .seconds = 2,
			     .bpf_stats_old = -1 };
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		char *end = NULL;
		switch (c) {
		case 'r':
			b->runs = (int)strtol(optarg, &end, 10);
			if (end == optarg || *end || b->runs < 1 || b->runs > MAX_RUNS) {
				fprintf(stderr, "bench-overhead: --runs '%s': give 1 to %d\n", optarg,
					MAX_RUNS);
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
		case 'w':
			b->only = -2;
			for (int w = 0; w < NWORKLOADS; w++)
				if (!strcmp(optarg, workloads[w].name))
					b->only = w;
			if (!strcmp(optarg, "all"))
				b->only = -1;
			if (b->only == -2) {
				fprintf(stderr, "bench-overhead: --workload '%s': give fp, nofp, python or "
					"all\n", optarg);
				return -1;
			}
			break;
		case 'p':
			b->tools[PERF] = optarg;
			break;
		case 'y':
			b->tools[PY_SPY] = optarg;
			break;
		case 'P':
			b->python = optarg;
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
	double v[MAX_RUNS];
	for (int i = 0; i < n; i++) {
		memcpy(&v[i], (const char *)&runs[i] + off, sizeof(double));
		if (v[i] < 0)
			return -1;
	}
	return bench_median(v, n);
}

/* Spread of the runs' field: (max - min) / median, in percent. */
static double spread_of(const struct run *runs, int n, size_t off)
{
	double lo = 0, hi = 0, med = median_of(runs, n, off);
	for (int i = 0; i < n; i++) {
		double v;
		memcpy(&v, (const char *)&runs[i] + off, sizeof(double));
		lo = i == 0 || v < lo ? v : lo;
		hi = i == 0 || v > hi ? v : hi;
	}
	return med > 0 ? 100 * (hi - lo) / med : -1;
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

static int calibrate(struct bench *b, enum workload_id w)
{
	struct run r;
	unsigned n = workloads[w].calibration_rounds;
	if (run_workload(b, w, n, "calibration", &r) < 0)
		return -1;
	b->rounds[w] = (unsigned long long)((double)n * b->seconds / r.s + 0.5);
	if (b->rounds[w] < 1)
		b->rounds[w] = 1;
	return 0;
}

/* A workload's medians over its runs. */
struct figures {
	double t[NCONFIGS], cpu_t[NCONFIGS], slow[NCONFIGS], wall_slow[NCONFIGS];
	double spread[NCONFIGS];  /* of the CPU times */
	double pct[NCONFIGS], ns[NCONFIGS], bytes_per_sample[NCONFIGS], samples[NCONFIGS];
	double bytes[NCONFIGS], bpf_run[NCONFIGS], bpf_sample[NCONFIGS];
	double ratio, wall_ratio; /* CPU and wall time under ringprofd / under the peer, 999 Hz */
	/* Per further sample, from 99 to 999 Hz: without what a profiler
	 * pays at any rate (start-up, polling, host metrics). */
	double extra_ns, peer_extra_ns;
	double marginal, fixed_per_s; /* ringprofd's ring bytes */
};

static void summarize(const struct run runs[NCONFIGS][MAX_RUNS], int n, struct figures *f)
{
#define MEDIAN(field) median_of(runs[c], n, offsetof(struct run, field))
	for (int c = 0; c < NCONFIGS; c++) {
		f->t[c] = MEDIAN(s);
		f->cpu_t[c] = MEDIAN(cpu_s);
		f->spread[c] = spread_of(runs[c], n, offsetof(struct run, cpu_s));
		f->slow[c] = 100 * (f->cpu_t[c] / f->cpu_t[NONE] - 1);
		f->wall_slow[c] = 100 * (f->t[c] / f->t[NONE] - 1);
		f->pct[c] = MEDIAN(profiler_cpu_pct);
		f->ns[c] = MEDIAN(profiler_ns_per_sample);
		f->bytes_per_sample[c] = MEDIAN(bytes_per_sample);
		f->samples[c] = MEDIAN(samples);
		f->bytes[c] = MEDIAN(bytes);
		f->bpf_run[c] = MEDIAN(bpf_ns_per_run);
		f->bpf_sample[c] = MEDIAN(bpf_ns_per_sample);
	}
#undef MEDIAN
	f->ratio = f->cpu_t[RP999] / f->cpu_t[PEER999];
	f->wall_ratio = f->t[RP999] / f->t[PEER999];
	double cpu[NCONFIGS];
	for (int c = RP99; c < NCONFIGS; c++)
		cpu[c] = median_of(runs[c], n, offsetof(struct run, profiler_cpu_s));
	f->extra_ns = 1e9 * (cpu[RP999] - cpu[RP99]) / (f->samples[RP999] - f->samples[RP99]);
	f->peer_extra_ns = 1e9 * (cpu[PEER999] - cpu[PEER99]) /
			   (f->samples[PEER999] - f->samples[PEER99]);
	/* Ring bytes = per sample x samples + per second x time: the
	 * metadata every chunk repeats and the host metrics are the latter. */
	f->marginal = (f->bytes[RP999] - f->bytes[RP99]) / (f->samples[RP999] - f->samples[RP99]);
	f->fixed_per_s = (f->bytes[RP99] - f->marginal * f->samples[RP99]) / f->t[RP99];
}

static void report(const struct bench *b, enum workload_id w, const struct figures *f)
{
	const struct workload *wl = &workloads[w];
	printf("\nworkload %s: %s, %llu rounds; peer %s; medians of %d runs\n", wl->name, wl->what,
	       b->rounds[w], wl->peer, b->runs);
	printf("  %-8s %8s %8s %6s %8s %8s %9s %9s %9s %9s %9s\n", "config", "CPU s", "slowdown",
	       "spread", "wall s", "slowdown", "prof CPU", "us/sample", "samples", "B/sample",
	       "BPF us");
	for (int c = 0; c < NCONFIGS; c++)
		printf("  %-8s %8.3f %7.2f%% %5.1f%% %8.3f %7.2f%% %9s %9s %9s %9s %9s\n",
		       config_names[c], f->cpu_t[c], f->slow[c], f->spread[c], f->t[c],
		       f->wall_slow[c], NA("%.3f%%", f->pct[c]), NA("%.2f", f->ns[c] / 1e3),
		       NA("%.0f", f->samples[c]), NA("%.1f", f->bytes_per_sample[c]),
		       NA("%.2f", f->bpf_sample[c] / 1e3));
	const char *basis = wl->wall_verdict ? "wall" : "CPU";
	double rp = wl->wall_verdict ? f->wall_slow[RP999] : f->slow[RP999];
	double peer = wl->wall_verdict ? f->wall_slow[PEER999] : f->slow[PEER999];
	printf("  slowdown at 999 Hz (%s time): ringprofd %.2f%%, %s %.2f%%; time under ringprofd "
	       "over time under the peer %.3f (CPU), %.3f (wall)   target: no worse than the peer: "
	       "%s\n", basis, rp, wl->peer, peer, f->ratio, f->wall_ratio,
	       rp <= peer ? "met" : "not met");
	printf("  CPU per further sample (99 to 999 Hz): ringprofd %.2f us, %s %.2f us\n",
	       f->extra_ns / 1e3, wl->peer, f->peer_extra_ns / 1e3);
	printf("  ringprofd host ring: %.1f bytes per further sample, %.0f bytes/s at any rate "
	       "(the metadata each chunk repeats, host metrics)\n", f->marginal, f->fixed_per_s);
	printf("  targets (issue 14): BPF <= %.0f us per sample (%s at 999 Hz), daemon CPU <= %.0f "
	       "us per sample (at 999 Hz: %s; per further sample: %s), <= %.0f bytes per sample (%s)\n",
	       TARGET_BPF_NS / 1e3,
	       f->bpf_sample[RP999] >= 0 && f->bpf_sample[RP999] <= TARGET_BPF_NS ? "met" : "not met",
	       TARGET_DAEMON_NS / 1e3, f->ns[RP999] <= TARGET_DAEMON_NS ? "met" : "not met",
	       f->extra_ns <= TARGET_DAEMON_NS ? "met" : "not met",
	       TARGET_BYTES_PER_SAMPLE,
	       f->bytes_per_sample[RP999] <= TARGET_BYTES_PER_SAMPLE ? "met" : "not met");
	if (w == FP)
		printf("  targets (issue 4): daemon CPU at 99 Hz <= %.1f%% of a CPU, BPF <= %.0f ns "
		       "per sample, <= %.0f bytes per sample (%d-frame stacks)\n",
		       TARGET_DAEMON_CPU_PCT_99, TARGET_BPF_NS_FP, TARGET_BYTES_PER_SAMPLE_FP,
		       DEPTH + 4);
	printf("result: workload=%s peer=%s slowdown_99=%.2f slowdown_999=%.2f "
	       "peer_slowdown_99=%.2f peer_slowdown_999=%.2f wall_slowdown_99=%.2f "
	       "wall_slowdown_999=%.2f peer_wall_slowdown_99=%.2f peer_wall_slowdown_999=%.2f "
	       "ratio_999=%.3f wall_ratio_999=%.3f daemon_cpu_pct_99=%.3f daemon_cpu_pct_999=%.3f "
	       "daemon_ns_per_sample_99=%.0f daemon_ns_per_sample_999=%.0f daemon_ns_per_extra_sample=%.0f "
	       "peer_cpu_ns_per_sample_99=%s peer_cpu_ns_per_sample_999=%s "
	       "peer_cpu_ns_per_extra_sample=%.0f bpf_ns_per_sample_99=%s "
	       "bpf_ns_per_sample=%s bpf_ns_per_run=%s bytes_per_sample_99=%.1f bytes_per_sample=%.1f "
	       "bytes_per_extra_sample=%.1f peer_bytes_per_sample_99=%s peer_bytes_per_sample_999=%s "
	       "spread_none=%.1f run_s=%.3f\n",
	       wl->name, wl->peer_key, f->slow[RP99], f->slow[RP999], f->slow[PEER99],
	       f->slow[PEER999], f->wall_slow[RP99], f->wall_slow[RP999], f->wall_slow[PEER99],
	       f->wall_slow[PEER999], f->ratio, f->wall_ratio, f->pct[RP99], f->pct[RP999],
	       f->ns[RP99], f->ns[RP999], f->extra_ns, NA("%.0f", f->ns[PEER99]),
	       NA("%.0f", f->ns[PEER999]), f->peer_extra_ns,
	       NA("%.0f", f->bpf_sample[RP99]), NA("%.0f", f->bpf_sample[RP999]),
	       NA("%.0f", f->bpf_run[RP999]), f->bytes_per_sample[RP99], f->bytes_per_sample[RP999],
	       f->marginal, NA("%.1f", f->bytes_per_sample[PEER99]),
	       NA("%.1f", f->bytes_per_sample[PEER999]), f->spread[NONE], f->t[NONE]);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--run-workload"))
		return run_as_workload(argv[2]);
	struct bench b;
	if (parse_args(argc, argv, &b) < 0)
		return 2;
	if (geteuid() != 0) {
		fprintf(stderr, "bench-overhead: run it as root: the CPU sampler, perf at 999 Hz "
			"and kernel.bpf_stats_enabled need it\n");
		return 2;
	}
	/* The two builds from the build tree, whichever of them runs the
	 * benchmark. */
	const char *commands[NWORKLOADS][2] = { [FP] = { OVERHEAD_FP_PATH, "--run-workload" },
						[NOFP] = { OVERHEAD_NOFP_PATH, "--run-workload" },
						[PYTHON] = { b.python, OVERHEAD_WORKLOAD_PY } };
	memcpy(b.command, commands, sizeof(commands));
	bench_catch_signals();
	static struct run runs[NWORKLOADS][NCONFIGS][MAX_RUNS];
	int wlo = b.only < 0 ? 0 : b.only, whi = b.only < 0 ? NWORKLOADS - 1 : b.only;
	int total = (whi - wlo + 1) * NCONFIGS;
	if (bench_workdir(&b.d, b.parent) < 0)
		goto fail;
	for (int w = wlo; w <= whi; w++)
		if (calibrate(&b, (enum workload_id)w) < 0)
			goto fail;
	bpf_stats_on(&b);
	printf("bench-overhead: ringprofd %s, perf %s, py-spy %s, python %s, work directory %s\n",
	       b.d.path, b.tools[PERF], b.tools[PY_SPY], b.python, b.d.dir);
	printf("%d runs of each of %d configurations (%.1f s alone each), round robin, the "
	       "workloads pinned to the last CPU\n", b.runs, total, b.seconds);
	fflush(stdout);
	for (int i = 0; i < b.runs; i++) {
		for (int k = 0; k < total; k++) {
			int at = (i + k) % total;
			enum workload_id w = (enum workload_id)(wlo + at / NCONFIGS);
			enum config c = (enum config)(at % NCONFIGS);
			struct run *r = &runs[w][c][i];
			if (bench_interrupted || run_config(&b, w, c, r) < 0)
				goto fail;
			printf("  round %d %-6s %-8s %7.3f s, CPU %7.3f s", i + 1, workloads[w].name,
			       config_names[c], r->s, r->cpu_s);
			if (r->samples >= 0)
				printf("  profiler %.3f%% CPU, %.0f samples, %.2f us/sample, %.1f "
				       "B/sample", r->profiler_cpu_pct, r->samples,
				       r->profiler_ns_per_sample / 1e3, r->bytes_per_sample);
			if (r->bpf_ns_per_run >= 0)
				printf(", BPF %.0f ns/run %.0f ns/sample", r->bpf_ns_per_run,
				       r->bpf_ns_per_sample);
			printf("\n");
			fflush(stdout);
		}
	}
	cleanup(&b);
	for (int w = wlo; w <= whi; w++) {
		struct figures f;
		summarize(runs[w], b.runs, &f);
		report(&b, (enum workload_id)w, &f);
	}
	return 0;
fail:
	cleanup(&b);
	return 1;
}
