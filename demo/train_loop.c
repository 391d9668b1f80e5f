/* A fake training loop annotated with libringprof: each rank (a thread)
 * runs steps of data loading, forward, backward and optimizer phases,
 * reports its loss, and marks checkpoints.  Rank 1 is a straggler, so the
 * summary shows uneven step times the way a real job would.
 *
 *   train-loop [--seconds N] [--ranks K] */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ringprof/ringprof.h>

static double seconds = 3;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Burn CPU for about us microseconds, reading the clock only now and
 * then so that the samples land here rather than in clock_gettime. */
static void work(unsigned us)
{
	uint64_t end = now_ns() + us * 1000ull;
	volatile double x = 1.0;
	do {
		for (int i = 0; i < 2000; i++)
			x = x * 1.0000001 + 1e-9;
	} while (now_ns() < end);
}

/* One function per phase, so CPU samples name the phases too. */
static __attribute__((noinline)) void load_batch(void) { work(300); }
static __attribute__((noinline)) void forward_pass(int rank) { work(2000 + (rank == 1 ? 1500u : 0u)); }
static __attribute__((noinline)) void backward_pass(void) { work(4000); }
static __attribute__((noinline)) void optimizer_step(void) { work(500); }

static void *rank_main(void *arg)
{
	int rank = (int)(intptr_t)arg;
	char name[16];
	snprintf(name, sizeof(name), "rank%d", rank);
	ringprof_thread_name(name);
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	double loss = 4.0;
	for (int step = 0; now_ns() < end; step++) {
		ringprof_range_begin("train_step");
		ringprof_range_begin("data_loader");
		load_batch();
		ringprof_range_end();
		ringprof_range_begin("forward");
		forward_pass(rank);
		ringprof_range_end();
		ringprof_range_begin("backward");
		backward_pass();
		ringprof_range_end();
		ringprof_range_begin("optimizer");
		optimizer_step();
		ringprof_range_end();
		loss *= 0.997;
		ringprof_counter("loss", loss);
		if (step % 100 == 99)
			ringprof_instant("checkpoint");
		ringprof_range_end();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int ranks = 2;
	static const struct option opts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "ranks", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "s:r:h", opts, NULL)) != -1;) {
		switch (c) {
		case 's': seconds = atof(optarg); break;
		case 'r': ranks = atoi(optarg); break;
		case 'h':
			printf("usage: train-loop [--seconds N] [--ranks K]\n"
			       "A fake training loop that annotates its steps with libringprof.\n");
			return 0;
		default: return 2;
		}
	}
	if (seconds <= 0 || seconds > 3600 || ranks < 1 || ranks > 64) {
		fprintf(stderr, "train-loop: --seconds must be in (0, 3600] and --ranks in 1..64\n");
		return 2;
	}
	pthread_t threads[64];
	for (int i = 0; i < ranks; i++)
		pthread_create(&threads[i], NULL, rank_main, (void *)(intptr_t)i);
	for (int i = 0; i < ranks; i++)
		pthread_join(threads[i], NULL);
	return 0;
}
