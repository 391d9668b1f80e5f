/* jit-burn: generates a function at run time (x86-64 machine code copied
 * into an executable anonymous mapping), calls it in a loop, and
 * describes it in /tmp/perf-<pid>.map as a JIT would, for the JIT
 * symbolization test.
 *
 *   jit-burn SECONDS NAME
 *
 * Prints its pid.  The map file is left behind, as JITs leave it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* mov eax, edi; 1: dec eax; jnz 1b; ret */
static const unsigned char spin[] = { 0x89, 0xf8, 0xff, 0xc8, 0x75, 0xfc, 0xc3 };

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: jit-burn SECONDS NAME\n");
		return 2;
	}
#if !defined(__x86_64__)
	fprintf(stderr, "jit-burn: generates x86-64 code only\n");
	return 3;
#else
	unsigned char *code = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy(code, spin, sizeof(spin));
	if (mprotect(code, 4096, PROT_READ | PROT_EXEC) < 0)
		return 1;
	char path[64];
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	FILE *f = fopen(path, "w");
	if (!f)
		return 1;
	fprintf(f, "%lx %zx %s\n", (unsigned long)code, sizeof(spin), argv[2]);
	fclose(f);
	int (*fn)(int);
	memcpy(&fn, &code, sizeof(fn));
	double end = now() + atof(argv[1]);
	while (now() < end)
		fn(1000000);
	printf("%d\n", (int)getpid());
	return 0;
#endif
}
