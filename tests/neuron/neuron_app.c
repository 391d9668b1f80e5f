/* neuron-app: a Neuron workload against the stand-in libnrt, for the
 * collector's tests.
 *
 *   neuron-app-linked once|threads|churn|fork   linked against libnrt.so.1
 *   neuron-app-dlopen LIBNRT_PATH          dlopen + dlsym on the handle
 *
 * once: one model on NeuronCore 0; threads: two threads, each its own
 * model on cores 0 and 1, and an nrt_build_global_comm on its core from a
 * thread-specific data destructor as it exits; churn: CHURN_TENSORS tensors "churn" allocated
 * on core 1 and freed (more than the collector's table holds), and one
 * with a 299-byte name (neither printed), then as once; fork: as once, then a child of fork() allocates,
 * writes and frees a tensor "child" on core 0 and closes the runtime,
 * then the parent runs the model once more.  Each model: a tensor allocated, written, the
 * model executed 3 times and once with repeat 2, the tensor read, read
 * once more past its end (NRT_INVALID), freed, the model unloaded.
 * Prints every call as one JSON object per line: call, core (-1: none),
 * status, outer_ns (the time around the call as the program saw it), pid. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nrt_api.h"

#ifdef NEURON_APP_DLOPEN
/* The runtime's functions as a framework finds them: by handle. */
#define NRT_USED(X) X(nrt_init) X(nrt_close) X(nrt_load) X(nrt_unload) X(nrt_execute) \
	X(nrt_execute_repeat) X(nrt_build_global_comm) X(nrt_tensor_allocate) \
	X(nrt_tensor_free) X(nrt_tensor_read) X(nrt_tensor_write)
#define X(f) static __typeof__(&f) p_##f;
NRT_USED(X)
#undef X
#define CALL(f) p_##f
#else
#define CALL(f) f
#endif

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void report(const char *call, int core, int status, uint64_t t0)
{
	uint64_t t1 = now_ns();
	(void)pthread_mutex_lock(&out_lock);
	printf("{\"call\": \"%s\", \"core\": %d, \"status\": %d, \"outer_ns\": %llu, "
	       "\"pid\": %d}\n", call, core, status, (unsigned long long)(t1 - t0), (int)getpid());
	(void)pthread_mutex_unlock(&out_lock);
}

#define TIMED(call, core, expr) do { \
		uint64_t t0_ = now_ns(); \
		int st_ = (int)(expr); \
		report(call, core, st_, t0_); \
	} while (0)
#define TIMED_VOID(call, core, expr) do { \
		uint64_t t0_ = now_ns(); \
		expr; \
		report(call, core, -1, t0_); \
	} while (0)

#define CHURN_TENSORS 6000

static void churn(void)
{
	static nrt_tensor_t *t[CHURN_TENSORS];
	for (int i = 0; i < CHURN_TENSORS; i++)
		if (CALL(nrt_tensor_allocate)(NRT_TENSOR_PLACEMENT_DEVICE, 1, 64, "churn", &t[i]))
			t[i] = NULL;
	for (int i = 0; i < CHURN_TENSORS; i++)
		CALL(nrt_tensor_free)(&t[i]);
	/* A name longer than an event name may be. */
	char name[300];
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	if (!CALL(nrt_tensor_allocate)(NRT_TENSOR_PLACEMENT_DEVICE, 1, 64, name, &t[0]))
		CALL(nrt_tensor_free)(&t[0]);
}

/* threads: a call at thread exit, from a destructor that runs after the
 * collector's own (its key is younger). */
static bool call_at_exit;

static void exit_call(void *arg)
{
	int core = (int)(intptr_t)arg - 1;
	TIMED("nrt_build_global_comm", core, CALL(nrt_build_global_comm)(core, 0, 1));
}

static void *run_model(void *arg)
{
	int core = (int)(intptr_t)arg;
	pthread_key_t key;
	if (call_at_exit && !pthread_key_create(&key, exit_call))
		(void)pthread_setspecific(key, (void *)(intptr_t)(core + 1));
	static const char neff[1024 + 1] = "NEFF";
	char tname[16], buf[4096] = "data";
	nrt_model_t *model = NULL;
	nrt_tensor_t *t = NULL;
	(void)snprintf(tname, sizeof(tname), "input%d", core);
	TIMED("nrt_load", core, CALL(nrt_load)(neff, 1024 + (size_t)core, core, -1, &model));
	TIMED("nrt_tensor_allocate", core,
	      CALL(nrt_tensor_allocate)(NRT_TENSOR_PLACEMENT_DEVICE, core, sizeof(buf), tname, &t));
	TIMED("nrt_tensor_write", core, CALL(nrt_tensor_write)(t, buf, 0, sizeof(buf)));
	for (int i = 0; i < 3; i++)
		TIMED("nrt_execute", core, CALL(nrt_execute)(model, NULL, NULL));
	TIMED("nrt_execute_repeat", core, CALL(nrt_execute_repeat)(model, NULL, NULL, 2));
	TIMED("nrt_tensor_read", core, CALL(nrt_tensor_read)(t, buf, 0, sizeof(buf)));
	TIMED("nrt_tensor_read", core, CALL(nrt_tensor_read)(t, buf, 0, 2 * sizeof(buf)));
	TIMED_VOID("nrt_tensor_free", core, CALL(nrt_tensor_free)(&t));
	TIMED("nrt_unload", core, CALL(nrt_unload)(model));
	return NULL;
}

/* The child of fork: calls of its own on core 0, then the runtime closed. */
static void child_calls(void)
{
	nrt_tensor_t *t = NULL;
	char buf[256] = "child";
	TIMED("nrt_tensor_allocate", 0,
	      CALL(nrt_tensor_allocate)(NRT_TENSOR_PLACEMENT_DEVICE, 0, sizeof(buf), "child", &t));
	TIMED("nrt_tensor_write", 0, CALL(nrt_tensor_write)(t, buf, 0, sizeof(buf)));
	TIMED_VOID("nrt_tensor_free", 0, CALL(nrt_tensor_free)(&t));
	TIMED_VOID("nrt_close", -1, CALL(nrt_close)());
}

/* As once, with a child of fork() making calls in between: whether the
 * child exited well. */
static bool run_forked(void)
{
	int status;
	(void)run_model((void *)(intptr_t)0);
	(void)fflush(stdout);
	pid_t child = fork();
	if (child == 0) {
		child_calls();
		exit(0);
	}
	if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		return false;
	return true;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: see the head of tests/neuron/neuron_app.c\n");
		return 2;
	}
#ifdef NEURON_APP_DLOPEN
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "neuron-app: %s\n", dlerror());
		return 1;
	}
#define X(f) if (!(p_##f = (__typeof__(p_##f))dlsym(h, #f))) { \
		fprintf(stderr, "neuron-app: no %s\n", #f); \
		return 1; \
	}
	NRT_USED(X)
#undef X
	bool threads = false, churned = false, forked = false;
#else
	bool threads = !strcmp(argv[1], "threads"), churned = !strcmp(argv[1], "churn");
	bool forked = !strcmp(argv[1], "fork");
#endif
	TIMED("nrt_init", -1, CALL(nrt_init)(NRT_FRAMEWORK_TYPE_NO_FW, "", ""));
	TIMED("nrt_build_global_comm", 0, CALL(nrt_build_global_comm)(0, 0, 1));
	call_at_exit = threads;
	if (churned)
		churn();
	if (forked && !run_forked())
		return 1;
	if (threads) {
		pthread_t th[2];
		for (int i = 0; i < 2; i++)
			if (pthread_create(&th[i], NULL, run_model, (void *)(intptr_t)i))
				return 1;
		for (int i = 0; i < 2; i++)
			(void)pthread_join(th[i], NULL);
	} else {
		(void)run_model((void *)(intptr_t)0);
	}
	TIMED_VOID("nrt_close", -1, CALL(nrt_close)());
	return 0;
}
