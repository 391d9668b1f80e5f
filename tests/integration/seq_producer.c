/* seq-producer: sequence-numbered events at a known rate, for the
 * daemon's exactness and crash tests.
 *
 *   seq-producer RATE SECONDS [NAME]
 *
 * Emits counter NAME (default "seq") with values 0, 1, 2, ... at RATE
 * events per second for SECONDS, through libringprof, then prints one
 * JSON line: produced, dropped, connected, and the worst lateness of the
 * schedule in ms (a producer that blocked would fall behind). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ringprof/ringprof.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: seq-producer RATE SECONDS [NAME]\n");
		return 2;
	}
	double rate = atof(argv[1]), seconds = atof(argv[2]);
	const char *name = argc == 4 ? argv[3] : "seq";
	if (rate <= 0 || rate > 1e8 || seconds <= 0) {
		fprintf(stderr, "seq-producer: RATE must be in (0, 1e8] and SECONDS > 0\n");
		return 2;
	}
	uint64_t total = (uint64_t)(rate * seconds), start = now_ns(), worst_late = 0;
	ringprof_thread_name("seq-producer");
	for (uint64_t i = 0; i < total; i++) {
		uint64_t due = start + (uint64_t)((double)i / rate * 1e9), now = now_ns();
		if (now < due) {
			struct timespec ts = { (time_t)((due - now) / 1000000000u),
					       (long)((due - now) % 1000000000u) };
			nanosleep(&ts, NULL);
		} else if (now - due > worst_late) {
			worst_late = now - due;
		}
		ringprof_counter(name, (double)i);
	}
	printf("{\"produced\": %llu, \"dropped\": %llu, \"connected\": %d, \"worst_late_ms\": %.3f}\n",
	       (unsigned long long)total, (unsigned long long)ringprof_dropped(), ringprof_connected(),
	       (double)worst_late / 1e6);
	return 0;
}
