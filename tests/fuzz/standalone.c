/* Runs a libFuzzer target without libFuzzer: every file of the seed
 * corpus given on the command line, then random mutations of them, so the
 * ordinary test run (and its sanitizer build) exercises each parser of
 * outside input.  RINGPROF_FUZZ_ITERATIONS sets the number of mutations. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SEEDS 256
#define FUZZ_INPUT_MAX (1u << 20)

static uint8_t *seeds[MAX_SEEDS];
static size_t seed_len[MAX_SEEDS];
static int nseeds;

static void load_seed(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f || nseeds == MAX_SEEDS) {
		if (f)
			fclose(f);
		return;
	}
	uint8_t *buf = malloc(FUZZ_INPUT_MAX);
	size_t n = fread(buf, 1, FUZZ_INPUT_MAX, f);
	fclose(f);
	seeds[nseeds] = buf;
	seed_len[nseeds++] = n;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		if (!d) {
			load_seed(argv[i]);
			continue;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			load_seed(path);
		}
		closedir(d);
	}
	for (int i = 0; i < nseeds; i++)
		LLVMFuzzerTestOneInput(seeds[i], seed_len[i]);

	const char *iters_env = getenv("RINGPROF_FUZZ_ITERATIONS");
	long iters = iters_env ? atol(iters_env) : 20000;
	uint8_t *buf = malloc(FUZZ_INPUT_MAX);
	for (long it = 0; it < iters; it++) {
		size_t len;
		if (nseeds) {
			int s = (int)(next_rand() % (uint64_t)nseeds);
			len = seed_len[s];
			memcpy(buf, seeds[s], len);
		} else {
			len = next_rand() % 4096;
			for (size_t k = 0; k < len; k++)
				buf[k] = (uint8_t)next_rand();
		}
		int flips = 1 + (int)(next_rand() % 8);
		for (int k = 0; k < flips && len; k++) {
			size_t pos = next_rand() % len;
			switch (next_rand() % 4) {
			case 0: buf[pos] ^= (uint8_t)(1u << (next_rand() % 8)); break;
			case 1: buf[pos] = (uint8_t)next_rand(); break;
			case 2: len = pos; break; /* truncate */
			default: buf[pos] = (uint8_t)(next_rand() % 2 ? 0xff : 0); break;
			}
		}
		LLVMFuzzerTestOneInput(buf, len);
	}
	printf("fuzz: %d seeds, %ld mutated inputs, no crash\n", nseeds, iters);
	free(buf);
	for (int i = 0; i < nseeds; i++)
		free(seeds[i]);
	return 0;
}
