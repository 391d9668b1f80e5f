/* Export speed and memory: sessions turned into XProf, Perfetto, pprof,
 * JSON and summary files.
 *
 * 1. A synthetic session of EVENTS events (tests/export/synth.c: nested
 *    annotation ranges on two threads, counters, CPU samples with
 *    3-frame stacks, GPU kernels, copies and API calls) is exported to
 *    each format REPEAT times, each run in a child process so that its
 *    peak RSS is its own.  The peer is the reader alone: every chunk
 *    decompressed and decoded, ranges matched, nothing written (what any
 *    export pays at least).  Figures: events/s (median), the ratio to
 *    the reader's, and peak RSS, at EVENTS and at EVENTS/4 (memory must
 *    not grow with the session).
 * 2. With --live SECONDS (root, for the CPU sampler; default 60, 0 to
 *    skip): ringprofd with its default configuration records while every
 *    CPU runs a workload 20 frames deep; a snapshot of the last SECONDS
 *    is then exported to every format, timed (target: under 1 s).
 *
 * The last line, "result: ...", has a fixed form for scripts ("na" where
 * a figure is unavailable). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "export.h"
#include "reader.h"
#include "session.h"
#include "synth.h"

#define PROG "bench-export"
/* Events per step of the synthetic session: 8 range events, 2 counters,
 * 10 samples and a tenth of an instant on the host; 4 on gpu0. */
#define EVENTS_PER_STEP 24.1
#define SAMPLES_PER_STEP 10
#define LIVE_DEPTH 20

/* Rows: the reader alone (the peer), then each format. */
#define NROWS (1 + RP_EXPORT_NFORMATS)

struct run {
	double seconds;
	uint64_t events;
	long maxrss_kib;
};

static int count_event(void *ctx, const struct rp_reader_event *e)
{
	(void)e;
	(*(uint64_t *)ctx)++;
	return 0;
}

/* In a child: row 0 reads the session, row 1 + f exports format f to
 * out; the time and the events read go to fd. */
static int child_run(const char *dir, int row, const char *out, int fd)
{
	struct rp_err err = { 0 };
	json_t *all;
	if (rp_session_manifests(dir, &all, &err) < 0 || json_array_size(all) != 1) {
		fprintf(stderr, PROG ": %s: %s\n", dir, err.msg[0] ? err.msg : "not one host");
		return 1;
	}
	json_t *m = json_array_get(all, 0);
	struct run r = { 0 };
	double t0 = bench_now_s();
	int rc;
	if (row == 0) {
		struct rp_reader *rd;
		if ((rc = rp_reader_open(dir, m, NULL, &rd, &err)) == 0) {
			rc = rp_reader_each(rd, count_event, &r.events, &err);
			rp_reader_free(rd);
		}
	} else {
		rc = rp_export_host(dir, m, (enum rp_export_format)(row - 1), out, NULL, &err);
	}
	r.seconds = bench_now_s() - t0;
	json_decref(all);
	if (rc < 0) {
		fprintf(stderr, PROG ": %s\n", err.msg);
		return 1;
	}
	return write(fd, &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1;
}

static int measure(const char *dir, int row, const char *out, struct run *r)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		_exit(child_run(dir, row, out, p[1]));
	}
	close(p[1]);
	int status = 0;
	struct rusage ru;
	ssize_t n = read(p[0], r, sizeof(*r));
	close(p[0]);
	if (pid < 0 || wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0 || n != (ssize_t)sizeof(*r))
		return -1;
	r->maxrss_kib = ru.ru_maxrss;
	return 0;
}

static const char *row_name(int row)
{
	return row == 0 ? "read only" : rp_export_format_name((enum rp_export_format)(row - 1));
}

/* Medians of repeat runs of every row on the session in dir. */
static int measure_rows(const char *dir, const char *work, int repeat, struct run med[NROWS])
{
	for (int row = 0; row < NROWS; row++) {
		double secs[64];
		struct run r = { 0 };
		long rss = 0;
		char out[PATH_MAX];
		snprintf(out, sizeof(out), "%s/out%s", work,
			 row ? rp_export_suffix((enum rp_export_format)(row - 1)) : "");
		for (int i = 0; i < repeat; i++) {
			if (bench_interrupted || measure(dir, row, out, &r) < 0) {
				fprintf(stderr, PROG ": %s of %s failed\n", row_name(row), dir);
				return -1;
			}
			secs[i] = r.seconds;
			rss = r.maxrss_kib > rss ? r.maxrss_kib : rss;
		}
		med[row] = (struct run){ bench_median(secs, repeat), r.events, rss };
	}
	return 0;
}

/* ---- the live session's workload: every CPU, stacks LIVE_DEPTH deep ---- */

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t spin_hash(uint64_t x)
{
	for (int i = 0; i < 100000; i++)
		x = (x ^ (uint64_t)i) * 0x100000001b3ull;
	return x;
}

__attribute__((noinline)) static uint64_t spin_descend(int depth, uint64_t x)
{
	if (depth > 0)
		return spin_descend(depth - 1, x) + 1;
	return spin_hash(x);
}

static void spin_until(double end)
{
	uint64_t x = 1;
	while (bench_now_s() < end && !bench_interrupted)
		x += spin_descend(LIVE_DEPTH, x);
	sink = x;
}

static int live(struct bench_daemon *d, const char *parent, double seconds, int repeat,
		struct run med[NROWS])
{
	if (bench_workdir(d, parent) < 0 ||
	    bench_daemon_start(d, "[sampler]\nenabled = true\n[sessions]\nexports = none\n") < 0)
		return -1;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	double end = bench_now_s() + seconds + 2;
	fprintf(stderr, PROG ": recording %.0f s with %ld CPUs busy\n", seconds, ncpu);
	pid_t spinners[1024];
	long n = 0;
	for (; n < ncpu && n < 1024; n++)
		if ((spinners[n] = fork()) == 0) {
			spin_until(end);
			_exit(0);
		}
	/* The daemon is a child too: wait for the spinners only. */
	for (long i = 0; i < n; i++)
		if (spinners[i] > 0)
			waitpid(spinners[i], NULL, 0);
	int rc = -1;
	char body[64];
	snprintf(body, sizeof(body), "%.0fs", seconds);
	json_t *req = json_pack("{ss ss}", "last", body, "name", "live");
	json_t *s = bench_call(d, "POST", "/v1/snapshot", req);
	json_decref(req);
	const char *path = json_string_value(json_object_get(s, "path"));
	if (path)
		rc = measure_rows(path, d->dir, repeat, med);
	json_decref(s);
	return rc;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: " PROG " [--events N] [--repeat R] [--live SECONDS] [--dir DIR] "
		"[--daemon PATH]\n"
		"  --events N        events in the synthetic session (default 1000000)\n"
		"  --repeat R        runs per format; medians are shown (default 3, at most 64)\n"
		"  --live SECONDS    also export a real session of that length (default 60;\n"
		"                    0: skip; needs root for the CPU sampler)\n"
		"  --dir DIR         where the work directory goes, on a disk (default /var/tmp)\n"
		"  --daemon PATH     the ringprofd to run (default: the one built here)\n");
}

static void print_rows(const char *title, const struct run *m, const struct run *quarter)
{
	printf("\n%s\n%-10s %10s %12s %9s %10s", title, "format", "seconds", "events/s",
	       "vs read", "peak MiB");
	printf(quarter ? " %14s\n" : "\n", "MiB at 1/4");
	for (int row = 0; row < NROWS; row++) {
		double rate = (double)m[0].events / m[row].seconds;
		printf("%-10s %10.3f %12.0f %8.2fx %10.1f", row_name(row), m[row].seconds, rate,
		       m[0].seconds / m[row].seconds, m[row].maxrss_kib / 1024.0);
		if (quarter)
			printf(" %14.1f", quarter[row].maxrss_kib / 1024.0);
		putchar('\n');
	}
}

int main(int argc, char **argv)
{
	struct bench_daemon d = { .prog = PROG, .path = RINGPROFD_PATH, .cpu = -1 };
	const char *parent = "/var/tmp";
	unsigned long events = 1000000, repeat = 3;
	double live_s = 60;
	static const struct option opts[] = {
		{ "events", required_argument, NULL, 'e' }, { "repeat", required_argument, NULL, 'r' },
		{ "live", required_argument, NULL, 'l' }, { "dir", required_argument, NULL, 'd' },
		{ "daemon", required_argument, NULL, 'D' }, { "help", no_argument, NULL, 'h' }, { 0 },
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end = NULL;
		if (c == 'e')
			events = strtoul(optarg, &end, 10);
		else if (c == 'r')
			repeat = strtoul(optarg, &end, 10);
		else if (c == 'l')
			live_s = strtod(optarg, &end);
		else if (bench_common_option(&d, &parent, c, optarg, usage) < 0)
			return 2;
		if (end && (*end || end == optarg || (c == 'e' && events < 1000) ||
			    (c == 'r' && (repeat < 1 || repeat > 64)) ||
			    (c == 'l' && (live_s < 0 || live_s > 3600)))) {
			fprintf(stderr, PROG ": --%s '%s': out of range (see --help)\n",
				c == 'e' ? "events" : c == 'r' ? "repeat" : "live", optarg);
			return 2;
		}
	}
	if (bench_no_arguments(&d, argc, argv, usage) < 0)
		return 2;
	bench_catch_signals();
	if (bench_workdir(&d, parent) < 0)
		return 1;
	char work[PATH_MAX], dir[PATH_MAX], qwork[PATH_MAX], qdir[PATH_MAX];
	snprintf(work, sizeof(work), "%s/full", d.dir);
	snprintf(qwork, sizeof(qwork), "%s/quarter", d.dir);
	unsigned steps = (unsigned)((double)events / EVENTS_PER_STEP);
	struct run full[NROWS], quarter[NROWS], lv[NROWS];
	int rc = 1;
	if (synth_session(work, "benchhost", steps, SAMPLES_PER_STEP, dir, sizeof(dir)) < 0 ||
	    synth_session(qwork, "benchhost", steps / 4, SAMPLES_PER_STEP, qdir, sizeof(qdir)) < 0 ||
	    measure_rows(dir, work, (int)repeat, full) < 0 ||
	    measure_rows(qdir, qwork, (int)repeat, quarter) < 0)
		goto out;
	char title[128];
	snprintf(title, sizeof(title), "synthetic session: %llu events, median of %lu runs",
		 (unsigned long long)full[0].events, repeat);
	print_rows(title, full, quarter);

	bool have_live = false;
	if (live_s > 0 && geteuid() != 0) {
		fprintf(stderr, PROG ": --live needs root for the CPU sampler: skipped\n");
	} else if (live_s > 0) {
		struct bench_daemon ld = d;
		ld.dir[0] = 0;
		have_live = live(&ld, parent, live_s, (int)repeat, lv) == 0;
		bench_daemon_cleanup(&ld);
		if (!have_live)
			goto out;
		snprintf(title, sizeof(title), "live session: last %.0f s at the default rates, %llu "
			 "events", live_s, (unsigned long long)lv[0].events);
		print_rows(title, lv, NULL);
	}
	double live_max = 0, peak = 0, peak_quarter = 0;
	for (int row = 1; row < NROWS; row++) {
		if (have_live && lv[row].seconds > live_max)
			live_max = lv[row].seconds;
		if (full[row].maxrss_kib / 1024.0 > peak)
			peak = full[row].maxrss_kib / 1024.0;
		if (quarter[row].maxrss_kib / 1024.0 > peak_quarter)
			peak_quarter = quarter[row].maxrss_kib / 1024.0;
	}
	printf("\ntargets: >= 5M events/s to pftrace and xplane; a 60 s session exports in < 1 s\n");
	printf("result: events=%llu xplane_ev_s=%.0f perfetto_ev_s=%.0f pprof_ev_s=%.0f json_ev_s=%.0f "
	       "summary_ev_s=%.0f read_ev_s=%.0f xplane_vs_read=%.2f perfetto_vs_read=%.2f "
	       "peak_mib_max=%.1f peak_mib_quarter_max=%.1f",
	       (unsigned long long)full[0].events,
	       full[0].events / full[1 + RP_EXPORT_XPLANE].seconds,
	       full[0].events / full[1 + RP_EXPORT_PERFETTO].seconds,
	       full[0].events / full[1 + RP_EXPORT_PPROF].seconds,
	       full[0].events / full[1 + RP_EXPORT_JSON].seconds,
	       full[0].events / full[1 + RP_EXPORT_SUMMARY].seconds, full[0].events / full[0].seconds,
	       full[0].seconds / full[1 + RP_EXPORT_XPLANE].seconds,
	       full[0].seconds / full[1 + RP_EXPORT_PERFETTO].seconds, peak, peak_quarter);
	if (have_live)
		printf(" live_events=%llu live_export_max_s=%.3f\n", (unsigned long long)lv[0].events,
		       live_max);
	else
		printf(" live_events=na live_export_max_s=na\n");
	rc = 0;
out:
	bench_daemon_cleanup(&d);
	return rc;
}
