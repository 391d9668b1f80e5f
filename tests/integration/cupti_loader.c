/* A stand-in CUDA workload for test_cupti_load.py: loads the injection
 * library as the driver does (dlopen, InitializeInjection), then does its
 * own work and says so.  argv[1]: the library.  CUPTI_LOADER_HOLD=1:
 * then stays (its producer rings attached) until stdin closes. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 3;
	}
	int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
	if (!init) {
		fprintf(stderr, "no InitializeInjection exported\n");
		return 4;
	}
	printf("InitializeInjection=%d\n", init());
	unsigned long sum = 0;
	for (unsigned long i = 0; i < 1000000; i++)
		sum += i;
	printf("workload done %lu\n", sum);
	if (getenv("CUPTI_LOADER_HOLD")) {
		(void)fflush(stdout);
		while (getchar() != EOF)
			;
	}
	return 0;
}
