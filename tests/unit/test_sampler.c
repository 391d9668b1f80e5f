/* The eBPF CPU sampler against real workloads: forked children that spin
 * in user space and in system calls, sampled by the BPF program on this
 * kernel.  Checks what a sample holds (pid, tid, comm, cpu, kernel and
 * user frames, CLOCK_MONOTONIC times), the pid and cgroup filters, stack
 * depth, frequency changes, lost-sample counting, and the message an
 * unprivileged caller gets.  Needs root: the cases that load BPF skip
 * otherwise.  Prints the BPF program's run time per sample. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <mntent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <linux/types.h>

#include "burn.h"
#include "clock.h"
#include "sampler.h"
#include "sampler_record.h"

#define MS 1000000ull
/* x86_64 and arm64 split the address space at the top bit. */
#define KERNEL_HALF (1ull << 63)

struct seen {
	uint64_t ts;
	uint32_t pid, tid, cpu;
	uint16_t nframes, nkernel;
	uint64_t user_leaf;   /* 0 when the sample has no user frames */
	uint64_t callers[3];  /* the next user frames up, 0 past the stack */
	size_t stack_len;     /* bytes of user stack copied with it */
	uint64_t stack_ip;    /* and the ip copied beside */
	char name[16];
};

struct sink {
	struct seen *v;
	size_t n, cap;
	/* Kernel frames below the split, user leaves above it.  Only the leaf
	 * of a user stack is checked: the frame-pointer walk reads garbage
	 * where code has no frame pointers. */
	size_t misplaced;
	const struct rp_sampler *sampler; /* set: record the stack copies */
};

static int collect(void *ctx, const struct rp_event *ev)
{
	struct sink *s = ctx;
	assert_int_equal(ev->kind, RP_EV_CPU_SAMPLE);
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 1024;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		assert_non_null(s->v);
	}
	struct seen *g = &s->v[s->n++];
	*g = (struct seen){
		.ts = ev->ts, .pid = ev->pid, .tid = ev->tid, .cpu = ev->u.sample.cpu,
		.nframes = ev->u.sample.nframes, .nkernel = ev->u.sample.nkernel,
	};
	snprintf(g->name, sizeof(g->name), "%s", ev->name);
	const struct rp_user_stack *st = s->sampler ? rp_sampler_user_stack(s->sampler) : NULL;
	if (st) {
		g->stack_len = st->len;
		g->stack_ip = st->ip;
	}
	assert_true(g->nkernel <= g->nframes);
	for (unsigned i = 0; i < g->nkernel; i++)
		s->misplaced += ev->u.sample.frames[i] < KERNEL_HALF;
	if (g->nframes > g->nkernel) {
		g->user_leaf = ev->u.sample.frames[g->nkernel];
		s->misplaced += g->user_leaf >= KERNEL_HALF;
		for (unsigned i = 0; i < 3 && g->nkernel + 1u + i < g->nframes; i++)
			g->callers[i] = ev->u.sample.frames[g->nkernel + 1 + i];
	}
	return 0;
}

static void need_root(void)
{
	if (geteuid() != 0) {
		print_message("skipped: loading the sampler needs root (CAP_BPF and CAP_PERFMON)\n");
		skip();
	}
}

static struct rp_sampler *open_or_fail(const struct rp_sampler_opts *o)
{
	struct rp_err err = { 0 };
	struct rp_sampler *s = NULL;
	int rc = rp_sampler_open(o, &s, &err);
	if (rc)
		fail_msg("rp_sampler_open: %d: %s", rc, err.msg);
	return s;
}

/* spin is short: a return address into it lies within this of its start. */
#define SPIN_SIZE_MAX 256

__attribute__((noinline, noreturn)) static void spin(const char *name, uint64_t ns)
{
	prctl(PR_SET_NAME, name);
	/* Enough system calls for kernel samples, few enough that user-mode
	 * samples land mostly in burn_user, not in libc's syscall(). */
	burn_until(rp_clock_now_ns() + ns, 30);
	_exit(0);
}

/* A child that joins cgroup (when set) and spins for ns. */
static pid_t start_spinner(const char *name, uint64_t ns, const char *cgroup)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (cgroup) {
			char path[512];
			snprintf(path, sizeof(path), "%s/cgroup.procs", cgroup);
			FILE *f = fopen(path, "we");
			if (!f || fprintf(f, "0\n") < 0 || fclose(f) != 0)
				_exit(2);
		}
		spin(name, ns);
	}
	return pid;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
	nanosleep(&ts, NULL);
}

/* Polls every 10 ms until every child exited; cpu_ns[i] (when not NULL)
 * gets child i's CPU time (user + system). */
static void poll_until_exit(struct rp_sampler *s, struct sink *sink, const pid_t *pids,
			    unsigned n, uint64_t *cpu_ns)
{
	for (unsigned left = n; left;) {
		assert_true(rp_sampler_poll(s, collect, sink) >= 0);
		for (unsigned i = 0; i < n; i++) {
			int status;
			struct rusage ru;
			if (pids[i] <= 0 || wait4(pids[i], &status, WNOHANG, &ru) != pids[i])
				continue;
			assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
			if (cpu_ns)
				cpu_ns[i] = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
						    1000000000u +
					    (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
			left--;
		}
		sleep_ns(10 * MS);
	}
	assert_true(rp_sampler_poll(s, collect, sink) >= 0);
}

static size_t count_pid(const struct sink *sink, uint32_t pid)
{
	size_t n = 0;
	for (size_t i = 0; i < sink->n; i++)
		n += sink->v[i].pid == pid;
	return n;
}

/* The test binary's executable mapping: where the spinning loop runs. */
static void text_range(uint64_t *lo, uint64_t *hi)
{
	char exe[512], line[1024];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(len > 0);
	exe[len] = 0;
	FILE *f = fopen("/proc/self/maps", "re");
	assert_non_null(f);
	*lo = *hi = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		char perms[8], path[512] = "";
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %511s", &a, &b, perms, path) >= 3 &&
		    perms[2] == 'x' && strcmp(path, exe) == 0) {
			*lo = a;
			*hi = b;
		}
	}
	fclose(f);
	assert_true(*hi > *lo);
}

static void test_samples(void **state)
{
	(void)state;
	need_root();
	int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	struct rp_sampler *s = open_or_fail(&(struct rp_sampler_opts){ .frequency_hz = 99 });
	struct sink sink = { 0 };
	uint64_t t0 = rp_clock_now_ns();
	pid_t child = start_spinner("rp-spinner", 1000 * MS, NULL);
	uint64_t cpu_ns;
	poll_until_exit(s, &sink, &child, 1, &cpu_ns);
	uint64_t t1 = rp_clock_now_ns();

	struct rp_sampler_stats st;
	rp_sampler_stats(s, &st);
	assert_int_equal(st.frequency_hz, 99);
	assert_int_equal(st.samples, sink.n);
	assert_int_equal(st.lost, 0);
	assert_true(st.polls >= 2);
	assert_int_equal(sink.misplaced, 0);

	uint64_t lo, hi;
	text_range(&lo, &hi);
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	size_t mine = 0, in_kernel = 0, with_user = 0, leaf_in_text = 0, user_mode = 0, via_spin = 0;
	for (size_t i = 0; i < sink.n; i++) {
		const struct seen *g = &sink.v[i];
		assert_int_not_equal(g->tid, 0); /* the idle task is filtered */
		assert_true(g->cpu < (uint32_t)ncpu);
		if (g->pid != (uint32_t)child)
			continue;
		mine++;
		assert_int_equal(g->tid, (uint32_t)child);
		assert_string_equal(g->name, "rp-spinner");
		/* The child ran between t0 and t1: times are CLOCK_MONOTONIC. */
		assert_true(g->ts > t0 && g->ts < t1);
		in_kernel += g->nkernel > 0;
		with_user += g->nframes > g->nkernel;
		if (g->nkernel == 0) {
			user_mode++;
			leaf_in_text += g->user_leaf >= lo && g->user_leaf < hi;
		}
		/* The frame-pointer walk goes up through burn_until to spin. */
		for (unsigned k = 0; k < 3; k++)
			if (g->callers[k] > (uintptr_t)spin &&
			    g->callers[k] < (uintptr_t)spin + SPIN_SIZE_MAX) {
				via_spin++;
				break;
			}
	}
	double expect = 99.0 * (double)cpu_ns / 1e9;
	print_message("%zu samples of the child (%.0f expected from its %.2f s of CPU), %zu in "
		      "the kernel, %zu with user frames, %zu of %zu user-mode leaves in the "
		      "test's text, %zu called from spin; %zu samples in all\n", mine, expect,
		      (double)cpu_ns / 1e9, in_kernel, with_user, leaf_in_text, user_mode, via_spin,
		      sink.n);
	assert_true(mine >= 20);
	assert_true((double)mine >= 0.6 * expect && (double)mine <= 1.2 * expect + 3);
	assert_true(in_kernel >= mine / 20 && in_kernel < mine);
	assert_true(with_user >= mine * 9 / 10);
	assert_true(leaf_in_text >= user_mode / 2);
	assert_true(via_spin >= mine * 8 / 10);
	if (stats_fd >= 0 && st.bpf_run_count) {
		print_message("BPF program: %.0f ns per run over %llu runs (idle CPUs included), "
			      "%.0f ns per sample taken\n",
			      (double)st.bpf_run_ns / (double)st.bpf_run_count,
			      (unsigned long long)st.bpf_run_count,
			      (double)st.bpf_run_ns / (double)(st.samples + st.lost));
		close(stats_fd);
	}
	rp_sampler_close(s);
	free(sink.v);
}

static void test_pid_filter(void **state)
{
	(void)state;
	need_root();
	pid_t kids[2];
	kids[0] = start_spinner("rp-wanted", 800 * MS, NULL);
	kids[1] = start_spinner("rp-other", 800 * MS, NULL);
	uint32_t want = (uint32_t)kids[0];
	struct rp_sampler *s = open_or_fail(&(struct rp_sampler_opts){ .pids = &want, .npids = 1 });
	struct sink sink = { 0 };
	uint64_t cpu_ns[2];
	poll_until_exit(s, &sink, kids, 2, cpu_ns);
	size_t wanted = count_pid(&sink, want);
	print_message("%zu samples of the filtered pid, %zu in all\n", wanted, sink.n);
	assert_true(wanted >= 5 && (double)wanted >= 0.6 * 99 * (double)cpu_ns[0] / 1e9);
	assert_int_equal(wanted, sink.n);
	rp_sampler_close(s);
	free(sink.v);
}

/* The cgroup2 mount, or skip. */
static void cgroup2_root(char *out, size_t len)
{
	FILE *f = setmntent("/proc/self/mounts", "re");
	assert_non_null(f);
	struct mntent *m;
	out[0] = 0;
	while ((m = getmntent(f)))
		if (strcmp(m->mnt_type, "cgroup2") == 0) {
			snprintf(out, len, "%s", m->mnt_dir);
			break;
		}
	endmntent(f);
	if (!out[0]) {
		print_message("skipped: no cgroup2 file system is mounted\n");
		skip();
	}
}

static void test_cgroup_filter(void **state)
{
	(void)state;
	need_root();
	char root[256], outer[384], inner[400];
	cgroup2_root(root, sizeof(root));
	snprintf(outer, sizeof(outer), "%s/ringprof-test-%d", root, (int)getpid());
	snprintf(inner, sizeof(inner), "%s/step", outer);
	assert_int_equal(mkdir(outer, 0755), 0);
	assert_int_equal(mkdir(inner, 0755), 0);

	/* The filter names the job's cgroup; its task lives in a child. */
	struct rp_sampler *s = open_or_fail(&(struct rp_sampler_opts){ .cgroup_path = outer });
	struct sink sink = { 0 };
	pid_t kids[2];
	kids[0] = start_spinner("rp-in-cgroup", 800 * MS, inner);
	kids[1] = start_spinner("rp-outside", 800 * MS, NULL);
	uint64_t cpu_ns[2];
	poll_until_exit(s, &sink, kids, 2, cpu_ns);
	size_t wanted = count_pid(&sink, (uint32_t)kids[0]);
	print_message("%zu samples from the cgroup's task, %zu in all\n", wanted, sink.n);
	assert_true(wanted >= 5 && (double)wanted >= 0.6 * 99 * (double)cpu_ns[0] / 1e9);
	assert_int_equal(wanted, sink.n);
	rp_sampler_close(s);
	free(sink.v);
	assert_int_equal(rmdir(inner), 0);
	assert_int_equal(rmdir(outer), 0);

	struct rp_err err = { 0 };
	assert_int_equal(rp_sampler_open(&(struct rp_sampler_opts){ .cgroup_path = outer }, &s, &err),
			 -ENOENT);
	assert_non_null(strstr(err.msg, outer));
	assert_int_equal(rp_sampler_open(&(struct rp_sampler_opts){ .cgroup_path = "/proc" }, &s,
					 &err), -EINVAL);
	assert_non_null(strstr(err.msg, "not a cgroup v2 directory"));
}

/* stack_copy: always, every sample with a user stack carries its top
 * (up to 8 KiB: to the thread's stack top where that is nearer, else
 * halved where less is mapped) and its ip, the user leaf; never, none
 * does.  Only x86-64 copies.  The spinner's stack is shallow: its copies
 * end at its top, well short of 8 KiB. */
static void test_stack_copy(void **state)
{
	(void)state;
	need_root();
	for (unsigned mode = RP_STACK_COPY_NEVER; mode <= RP_STACK_COPY_ALWAYS; mode++) {
		pid_t child = start_spinner("rp-copied", 800 * MS, NULL);
		uint32_t want = (uint32_t)child;
		struct rp_sampler *s = open_or_fail(&(struct rp_sampler_opts){
			.pids = &want, .npids = 1, .stack_copy = mode });
		struct sink sink = { .sampler = s };
		poll_until_exit(s, &sink, &child, 1, NULL);
		size_t user = 0, copied = 0, short_copies = 0;
		for (size_t i = 0; i < sink.n; i++) {
			const struct seen *g = &sink.v[i];
			size_t len = g->stack_len;
			user += g->user_leaf != 0;
			copied += len != 0;
			short_copies += len != 0 && len < RP_SAMPLER_STACK_MAX;
			assert_true(len == 0 || (len % 8 == 0 && len <= RP_SAMPLER_STACK_MAX &&
						 g->stack_ip == g->user_leaf));
		}
		print_message("stack_copy %u: %zu of %zu samples with user frames copied\n", mode,
			      copied, user);
		assert_true(user >= 5);
#if defined(__x86_64__)
		/* always: every sample whose stack top the kernel could read (a
		 * page not present fails even the smallest copy: rare). */
		if (mode == RP_STACK_COPY_ALWAYS)
			assert_true(copied * 10 >= user * 9 && short_copies == copied);
		else
			assert_int_equal(copied, 0);
#else
		assert_int_equal(copied, 0);
#endif
		rp_sampler_close(s);
		free(sink.v);
	}
}

static void test_depth(void **state)
{
	(void)state;
	need_root();
	pid_t child = start_spinner("rp-deep", 500 * MS, NULL);
	uint32_t want = (uint32_t)child;
	struct rp_sampler *s = open_or_fail(
		&(struct rp_sampler_opts){ .max_depth = 3, .pids = &want, .npids = 1 });
	struct sink sink = { 0 };
	poll_until_exit(s, &sink, &child, 1, NULL);
	size_t full = 0;
	for (size_t i = 0; i < sink.n; i++) {
		assert_true(sink.v[i].nframes <= 3);
		full += sink.v[i].nframes == 3;
	}
	/* Kernel or user, the spinner's stacks are deeper than 3 frames. */
	assert_true(sink.n >= 10);
	assert_true(full >= sink.n * 9 / 10);
	assert_int_equal(sink.misplaced, 0);
	rp_sampler_close(s);
	free(sink.v);
}

/* Samples of pid taken between from and to (host ns). */
static size_t count_between(const struct sink *sink, uint32_t pid, uint64_t from, uint64_t to)
{
	size_t n = 0;
	for (size_t i = 0; i < sink->n; i++)
		n += sink->v[i].pid == pid && sink->v[i].ts >= from && sink->v[i].ts < to;
	return n;
}

/* Polls for about a second; returns the host-clock span and adds the
 * child's CPU time in it, so rates do not depend on the machine's load. */
static void poll_second(struct rp_sampler *s, struct sink *sink, clockid_t child_clock,
			uint64_t *from, uint64_t *to, double *cpu_s)
{
	struct timespec c0, c1;
	assert_int_equal(clock_gettime(child_clock, &c0), 0);
	*from = rp_clock_now_ns();
	while (rp_clock_now_ns() < *from + 1000 * MS) {
		assert_true(rp_sampler_poll(s, collect, sink) >= 0);
		sleep_ns(10 * MS);
	}
	*to = rp_clock_now_ns();
	assert_int_equal(clock_gettime(child_clock, &c1), 0);
	assert_true(rp_sampler_poll(s, collect, sink) >= 0);
	*cpu_s = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
}

static void test_frequency_change(void **state)
{
	(void)state;
	need_root();
	pid_t child = start_spinner("rp-freq", 10000 * MS, NULL);
	clockid_t child_clock;
	assert_int_equal(clock_getcpuclockid(child, &child_clock), 0);
	uint32_t want = (uint32_t)child;
	struct rp_sampler *s = open_or_fail(
		&(struct rp_sampler_opts){ .frequency_hz = 99, .pids = &want, .npids = 1 });
	struct sink sink = { 0 };
	uint64_t a, b, c, d;
	double cpu_slow, cpu_fast;
	poll_second(s, &sink, child_clock, &a, &b, &cpu_slow);

	struct rp_err err = { 0 };
	uint64_t t = rp_clock_now_ns();
	assert_int_equal(rp_sampler_set_frequency(s, 999, &err), 0);
	t = rp_clock_now_ns() - t;
	/* Out of range: refused, the sampler keeps running at 999 Hz. */
	assert_int_equal(rp_sampler_set_frequency(s, 0, &err), -EINVAL);
	assert_int_equal(rp_sampler_set_frequency(s, RP_SAMPLER_HZ_MAX + 1, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "out of range"));
	poll_second(s, &sink, child_clock, &c, &d, &cpu_fast);
	kill(child, SIGKILL);
	assert_int_equal(waitpid(child, NULL, 0), child);

	struct rp_sampler_stats st;
	rp_sampler_stats(s, &st);
	assert_int_equal(st.frequency_hz, 999);
	/* Samples per second of the child's CPU time. */
	double slow = (double)count_between(&sink, want, a, b) / cpu_slow;
	double fast = (double)count_between(&sink, want, c, d) / cpu_fast;
	print_message("%.0f samples per CPU second at 99 Hz, %.0f at 999 Hz (x%.1f; re-arming "
		      "took %.2f ms)\n", slow, fast, fast / slow, (double)t / 1e6);
	assert_true(cpu_slow > 0.1 && cpu_fast > 0.1);
	assert_true(slow >= 0.6 * 99 && slow <= 1.3 * 99);
	assert_true(fast >= 0.6 * 999 && fast <= 1.3 * 999);
	rp_sampler_close(s);
	free(sink.v);
}

static void test_lost(void **state)
{
	(void)state;
	need_root();
	pid_t child = start_spinner("rp-lossy", 500 * MS, NULL);
	uint32_t want = (uint32_t)child;
	/* One page of ring buffer holds a few dozen samples; 10 kHz for half
	 * a second without polling overflows it. */
	struct rp_sampler *s = open_or_fail(&(struct rp_sampler_opts){
		.frequency_hz = RP_SAMPLER_HZ_MAX, .ringbuf_bytes = 4096, .pids = &want, .npids = 1 });
	int status;
	struct rusage ru;
	assert_int_equal(wait4(child, &status, 0, &ru), child);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct sink sink = { 0 };
	assert_true(rp_sampler_poll(s, collect, &sink) >= 0);
	struct rp_sampler_stats st;
	rp_sampler_stats(s, &st);
	double cpu_s = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
	double expect = RP_SAMPLER_HZ_MAX * cpu_s;
	print_message("%llu samples kept, %llu lost, %.0f expected from %.2f s of CPU\n",
		      (unsigned long long)st.samples, (unsigned long long)st.lost, expect, cpu_s);
	assert_int_equal(st.samples, sink.n);
	assert_true(st.samples > 0 && st.samples < 100);
	assert_true(st.lost > 0);
	double total = (double)(st.samples + st.lost);
	assert_true(total >= 0.7 * expect && total <= 1.2 * expect + 10);
	rp_sampler_close(s);
	free(sink.v);
}

static void test_bad_options(void **state)
{
	(void)state;
	struct rp_sampler *s = NULL;
	struct rp_err err = { 0 };
	assert_int_equal(rp_sampler_open(&(struct rp_sampler_opts){ .frequency_hz = 20000 }, &s, &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "20000 Hz is out of range"));
	assert_int_equal(rp_sampler_open(&(struct rp_sampler_opts){ .max_depth = 128 }, &s, &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "depth 128"));
	assert_int_equal(rp_sampler_open(&(struct rp_sampler_opts){ .ringbuf_bytes = 3 << 12 }, &s,
					 &err), -EINVAL);
	assert_non_null(strstr(err.msg, "power of two"));
	assert_int_equal(rp_sampler_open(&(struct rp_sampler_opts){ .npids = 2 }, &s, &err), -EINVAL);
	assert_null(s);
}

/* Without privileges the caller is told what is missing and the fix. */
static int check_unprivileged_open(void)
{
	struct rp_sampler *s = NULL;
	struct rp_err err = { 0 };
	int rc = rp_sampler_open(NULL, &s, &err);
	print_message("unprivileged open: %d: %s\n", rc, err.msg);
	return rc == -EPERM && s == NULL && strstr(err.msg, "needs CAP_BPF and CAP_PERFMON (or root)");
}

static void test_unprivileged(void **state)
{
	(void)state;
	if (geteuid() != 0) {
		assert_true(check_unprivileged_open());
		return;
	}
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* Leaving uid 0 clears every capability (no SECBIT_KEEP_CAPS). */
		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(2);
		_exit(check_unprivileged_open() ? 0 : 1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_options),
		cmocka_unit_test(test_unprivileged),
		cmocka_unit_test(test_samples),
		cmocka_unit_test(test_pid_filter),
		cmocka_unit_test(test_cgroup_filter),
		cmocka_unit_test(test_stack_copy),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_frequency_change),
		cmocka_unit_test(test_lost),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
