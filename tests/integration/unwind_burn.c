/* The CFI unwinder's workload: main -> unwind_a -> unwind_b -> unwind_c,
 * each burning CPU in its own loop (10, 30 and 60% of the time), built
 * with and without frame pointers (tests/meson.build).  Not inlined, not
 * cloned, no tail calls: every sample's stack is one of
 * c<-b<-a<-main, b<-a<-main, a<-main.  Runs for argv[1] seconds. */
#include <stdlib.h>
#include <time.h>

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

int main(int argc, char **argv)
{
	double end = now() + (argc > 1 ? atof(argv[1]) : 2.0);
	unsigned long total = 0;
	while (now() < end)
		total += unwind_a(100000);
	return total == 42;
}
