/* cpu-burn: a CPU-bound program whose time splits in known shares between
 * distinctly named functions, for the CPU profile tests.
 *
 *   cpu-burn SECONDS [syscalls]
 *
 * burn_a, burn_b and burn_c run the same loop 6, 3 and 1 times per round:
 * 60%, 30% and 10% of the user time.  With "syscalls", each round also
 * calls burn_syscalls, which spends its time in the kernel reading
 * /dev/zero.  Built without inlining and with frame pointers. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

#define BURN(fn)                                           \
	void fn(unsigned long n);                          \
	void fn(unsigned long n)                           \
	{                                                  \
		unsigned long x = sink;                    \
		for (unsigned long i = 0; i < n; i++)      \
			x = x * 6364136223846793005ul + i; \
		sink = x;                                  \
	}
BURN(burn_a)
BURN(burn_b)
BURN(burn_c)

void burn_syscalls(int fd);
void burn_syscalls(int fd)
{
	static char buf[1 << 20];
	for (int i = 0; i < 8; i++)
		if (read(fd, buf, sizeof(buf)) < 0)
			exit(1);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: cpu-burn SECONDS [syscalls]\n");
		return 2;
	}
	double end = now() + atof(argv[1]);
	int fd = argc > 2 && !strcmp(argv[2], "syscalls") ? open("/dev/zero", O_RDONLY) : -1;
	const unsigned long unit = 200000;
	while (now() < end) {
		burn_a(6 * unit);
		burn_b(3 * unit);
		burn_c(1 * unit);
		if (fd >= 0)
			burn_syscalls(fd);
	}
	printf("%d\n", (int)getpid());
	return 0;
}
