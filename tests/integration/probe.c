/* A C producer for the integration tests (test_libringprof.py): drives
 * libringprof against the real daemon and prints one JSON object.
 *
 *   probe bench N             N range pairs "probe.bench", timed
 *   probe threads K N         K threads, N pairs "probe.thread" each
 *   probe fork                pairs in a parent and in its forked child
 *   probe session NAME        start, annotate "probe.session", stop
 *   probe snapshot LAST_NS    ringprof_snapshot
 *   probe stop ID             ringprof_session_stop (for its error)
 *
 * Annotating commands first wait up to 5 s for the daemon. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ringprof/ringprof.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int wait_connected(void)
{
	uint64_t end = now_ns() + 5000000000ull;
	while (!ringprof_connected() && now_ns() < end) {
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
	return ringprof_connected();
}

static void pairs(const char *name, long n)
{
	for (long i = 0; i < n; i++) {
		ringprof_range_begin(name);
		ringprof_range_end();
	}
}

static void *thread_main(void *arg)
{
	long *n = arg;
	wait_connected();
	pairs("probe.thread", *n);
	return NULL;
}

static void print_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
	putchar('"');
}

/* A session id or the error, as JSON. */
static int print_result(int rc, const char *id)
{
	printf("{\"rc\": %d, ", rc);
	printf(rc < 0 ? "\"error\": " : "\"id\": ");
	print_json_string(rc < 0 ? ringprof_last_error() : id);
	printf("}\n");
	return rc < 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	char id[64] = "";
	if (!strcmp(cmd, "bench") && argc == 3) {
		long n = atol(argv[2]);
		int connected = wait_connected();
		uint64_t t0 = now_ns();
		pairs("probe.bench", n);
		double ns = (double)(now_ns() - t0) / (2.0 * (double)n);
		printf("{\"connected\": %d, \"ns_per_call\": %.1f, \"dropped\": %llu}\n",
		       connected, ns, (unsigned long long)ringprof_dropped());
		return 0;
	}
	if (!strcmp(cmd, "threads") && argc == 4) {
		int k = atoi(argv[2]);
		long n = atol(argv[3]);
		pthread_t t[64];
		for (int i = 0; i < k && i < 64; i++)
			pthread_create(&t[i], NULL, thread_main, &n);
		for (int i = 0; i < k && i < 64; i++)
			pthread_join(t[i], NULL);
		printf("{\"threads\": %d}\n", k);
		return 0;
	}
	if (!strcmp(cmd, "fork")) {
		int parent = wait_connected();
		pairs("probe.parent", 10);
		pid_t pid = fork();
		if (pid == 0) {
			pairs("probe.child", 10);
			_exit(ringprof_connected() ? 0 : 1);
		}
		int status = 0;
		waitpid(pid, &status, 0);
		printf("{\"parent_connected\": %d, \"child_connected\": %d, \"child\": %d}\n",
		       parent, WIFEXITED(status) && WEXITSTATUS(status) == 0, (int)pid);
		return 0;
	}
	if (!strcmp(cmd, "session") && argc == 3) {
		wait_connected();
		int rc = ringprof_session_start(argv[2], id, sizeof(id));
		if (rc < 0)
			return print_result(rc, id);
		pairs("probe.session", 100);
		rc = ringprof_session_stop(id);
		return print_result(rc, id);
	}
	if (!strcmp(cmd, "snapshot") && argc == 3)
		return print_result(ringprof_snapshot(strtoull(argv[2], NULL, 10), id,
						      sizeof(id)), id);
	if (!strcmp(cmd, "stop") && argc == 3)
		return print_result(ringprof_session_stop(argv[2]), argv[2]);
	fprintf(stderr, "usage: probe bench N | threads K N | fork | session NAME | "
		"snapshot LAST_NS | stop ID\n");
	return 2;
}
