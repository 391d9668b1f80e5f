/* The CFI unwinder's workload: main -> unwind_a -> unwind_b -> unwind_c,
 * each burning CPU in its own loop (10, 30 and 60% of the time), built
 * with and without frame pointers (tests/meson.build).  Not inlined, not
 * cloned, no tail calls: every sample's stack is one of
 * c<-b<-a<-main, b<-a<-main, a<-main.  Runs for argv[1] seconds; with
 * argv[2] "thread", in a thread of its own (c<-b<-a<-burn_thread<-
 * start_thread): the sampler copies a thread's stack up to its thread
 * control block, the main thread's up to its arguments; with "context",
 * on a stack of its own (c<-b<-a<-burn_context, makecontext), which is
 * neither: the sampler copies what reads of 8 KiB from sp. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#define KEEP __attribute__((noinline, noipa))

static volatile unsigned long sink;

/* A frame of its own on the stack in each function, so that the caller's
 * return address is not next to the stack pointer. */
#define BURN(rounds)                                                     \
	do {                                                             \
		volatile unsigned long scratch[24];                      \
		for (unsigned long i = 0; i < (rounds); i++)             \
			scratch[i % 24] = scratch[(i + 7) % 24] * 31 + i; \
		sink += scratch[3];                                      \
	} while (0)

KEEP unsigned long unwind_c(unsigned long n)
{
	BURN(6 * n);
	return sink;
}

KEEP unsigned long unwind_b(unsigned long n)
{
	BURN(3 * n);
	return unwind_c(n) + 1;
}

KEEP unsigned long unwind_a(unsigned long n)
{
	BURN(n);
	return unwind_b(n) + 1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Inlined: no frame of its own between main (or burn_thread) and unwind_a. */
static inline __attribute__((always_inline)) unsigned long burn(double seconds)
{
	double end = now() + seconds;
	unsigned long total = 0;
	while (now() < end)
		total += unwind_a(100000);
	return total;
}

static double thread_seconds;

KEEP static void *burn_thread(void *arg)
{
	(void)arg;
	return (void *)burn(thread_seconds);
}

static ucontext_t caller, callee;

KEEP static void burn_context(void)
{
	(void)burn(thread_seconds);
}

/* On a 256 KiB mapping of its own, as coroutine libraries allocate. */
static int run_on_own_stack(void)
{
	size_t size = 256 * 1024;
	void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (stack == MAP_FAILED || getcontext(&callee))
		return 1;
	callee.uc_stack.ss_sp = stack;
	callee.uc_stack.ss_size = size;
	callee.uc_link = &caller;
	makecontext(&callee, burn_context, 0);
	return swapcontext(&caller, &callee) ? 1 : 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	if (argc > 2 && strcmp(argv[2], "context") == 0) {
		thread_seconds = seconds;
		return run_on_own_stack();
	}
	if (argc > 2 && strcmp(argv[2], "thread") == 0) {
		pthread_t t;
		void *total;
		thread_seconds = seconds;
		if (pthread_create(&t, NULL, burn_thread, NULL) || pthread_join(t, &total))
			return 1;
		return total == (void *)42;
	}
	return burn(seconds) == 42;
}
