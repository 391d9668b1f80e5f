/* Time the sampler's BPF program spends per sample, from the kernel's BPF
 * run-time statistics, while a child spins in user code and system calls.
 *
 *   sampler-bench [HZ [MAX_DEPTH [SECONDS]]]     (root; default 999 127 2)
 *
 * Only the child is sampled (pid filter), so every run but the filtered
 * ones on other tasks becomes a sample.  Not a test: it prints numbers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "burn.h"
#include "clock.h"
#include "sampler.h"

/* Keeps descend's recursive calls from becoming jumps. */
static volatile uint64_t depth_sink;

/* Spins 30 frames deep, about what a Python training step shows. */
__attribute__((noinline)) static void descend(unsigned depth, uint64_t end)
{
	if (depth) {
		descend(depth - 1, end);
		depth_sink++;
		return;
	}
	burn_until(end, 100);
}

static int count(void *ctx, const struct rp_event *ev)
{
	uint64_t *frames = ctx;
	*frames += ev->u.sample.nframes;
	return 0;
}

int main(int argc, char **argv)
{
	unsigned hz = argc > 1 ? (unsigned)atoi(argv[1]) : 999;
	unsigned depth = argc > 2 ? (unsigned)atoi(argv[2]) : RP_STACK_MAX;
	double secs = argc > 3 ? atof(argv[3]) : 2.0;

	/* Needs CAP_SYS_ADMIN; without it only kernel.bpf_stats_enabled=1 counts. */
	int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats_fd < 0)
		fprintf(stderr, "sampler-bench: enabling BPF run-time statistics: %s\n",
			strerror(errno));
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		prctl(PR_SET_NAME, "rp-bench");
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		descend(30, rp_clock_now_ns() + (uint64_t)(secs * 1e9));
		_exit(0);
	}
	uint32_t pid = (uint32_t)child;
	struct rp_sampler_opts o = { .frequency_hz = hz, .max_depth = depth, .pids = &pid,
				     .npids = 1 };
	struct rp_sampler *s;
	struct rp_err err = { 0 };
	if (rp_sampler_open(&o, &s, &err) < 0) {
		fprintf(stderr, "sampler-bench: %s\n", err.msg);
		kill(child, SIGKILL);
		return 1;
	}
	uint64_t frames = 0;
	while (waitpid(child, NULL, WNOHANG) == 0) {
		rp_sampler_poll(s, count, &frames);
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	}
	rp_sampler_poll(s, count, &frames);
	struct rp_sampler_stats st;
	rp_sampler_stats(s, &st);
	printf("%u Hz, max depth %u, %s event: %llu samples (%.1f frames each), %llu lost, "
	       "%llu BPF runs, %.0f ns per run, %.0f ns per sample\n",
	       hz, depth, st.hardware_event ? "cycles" : "cpu-clock",
	       (unsigned long long)st.samples,
	       st.samples ? (double)frames / (double)st.samples : 0.0,
	       (unsigned long long)st.lost, (unsigned long long)st.bpf_run_count,
	       st.bpf_run_count ? (double)st.bpf_run_ns / (double)st.bpf_run_count : 0.0,
	       st.samples + st.lost ? (double)st.bpf_run_ns / (double)(st.samples + st.lost) : 0.0);
	rp_sampler_close(s);
	if (stats_fd >= 0)
		close(stats_fd);
	return 0;
}
